/*
 * sharc_plan.c - the sharc-plan command: reads a model, a cluster, a batch
 * and a configuration space from flags, asks the planner (sharc_plan.h)
 * for every configuration and prints the ranked table (and --json FILE);
 * --png FILE draws a sweep of GPU counts up to the cluster's through
 * plan_plot.py (python3 with matplotlib). The model may be a unit list
 * (--model units:FILE) and the node an hwloc export (--topology FILE,
 * sharc_plan_topo.c). See docs/plan.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#include "sharc_plan.h"
#include "sharc_plan_topo.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: sharc-plan [options]   predicts an FSDP step before you run it\n"
      "  --model SPEC        cnn | gpt:PRESET (tiny small gpt2 gpt2-124m 7b "
      "13b 70b)\n"
      "                      | gpt:L,C,H,V,T  (default gpt:7b)\n"
      "                      | units:FILE     one line a unit: NAME PARAMS "
      "FLOPS SAVED\n"
      "                        [OUT [SCRATCH [SCRATCH_FIXED]]], per sample "
      "(docs/plan.md)\n"
      "  --seq T             GPT sequence length (default: the preset's)\n"
      "  --nodes N           nodes (default 1)\n"
      "  --gpus-per-node G   GPUs per node (default 8)\n"
      "  --topology FILE     a node's hwloc XML export (lstopo --of xml): "
      "its GPUs,\n"
      "                      intra link (NVSwitch, NVLink or PCIe), NICs and "
      "GPU model\n"
      "                      set the defaults; the flags here still win\n"
      "  --nic-gbps GBPS     with --topology: rate per NIC, one way (default "
      "50 RDMA,\n"
      "                      12.5 Ethernet; capped at the NIC's PCI link)\n"
      "  --link intra:LAT_US,GBPS   within a node, per GPU one way (default "
      "intra:3,450)\n"
      "  --link inter:LAT_US,GBPS   between nodes, per NIC, one per GPU "
      "(default inter:5,50)\n"
      "  --gpu-mem GIB       memory per GPU (default 80)\n"
      "  --flops TFLOPS      sustained FLOP/s per GPU (default 400)\n"
      "  --hbm GBPS          GPU memory bandwidth (default 3350)\n"
      "  --batch B           global batch, samples (default: one per GPU)\n"
      "  --micro M           micro-batches per step (default 1)\n"
      "  --strategy LIST     all | full,grad_op,hybrid,hybrid_zero2,none "
      "(default all)\n"
      "  --shard-group LIST  hybrid group sizes (default: powers of two "
      "dividing the world, and G)\n"
      "  --prefetch LIST     gathered units alive at once (default 2)\n"
      "  --dtype LIST        parameter dtype bf16,f16,f32 (default bf16)\n"
      "  --checkpoint LIST   activation checkpointing 0,1 (default 0,1)\n"
      "  --offload LIST      sharded state in host memory 0,1 (default 0)\n"
      "  --optim adamw|sgd   optimizer (default adamw)\n"
      "  --top K             rows to print (default 12; 0: all)\n"
      "  --json FILE         every configuration as JSON ('-': stdout)\n"
      "  --png FILE          also draw step time and memory per GPU against\n"
      "                      GPU counts (one node, x8 each, up to the "
      "cluster)\n"
      "                      for the top configurations (plan_plot.py; needs\n"
      "                      python3 with matplotlib, SHARC_PLAN_PYTHON)\n"
      "  --calibrate FILE    fit the links to sharc-bench -J FILE (repeat: "
      "one-host\n"
      "                      files fit intra, several-host files inter)\n"
      "  --check FILE        predict a sharc-bench -J FILE's rows with the "
      "links\n"
      "                      (after any calibration) and print the errors\n"
      "  --calibrate-compute FILE  fit --flops and --hbm to a sharc-train "
      "--log FILE\n"
      "                      (the run's --model, --dtype, --checkpoint, "
      "--batch)\n");
}

static int die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "sharc-plan: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return 2;
}

/* A number in [lo, hi], the whole string. */
static int num(const char *flag, const char *s, double lo, double hi,
               double *v) {
  char *end;
  errno = 0;
  double d = s ? strtod(s, &end) : 0;
  if (!s || !*s || *end || errno || !(d >= lo && d <= hi)) {
    die("%s '%s': give a number in [%.15g, %.15g]", flag, s ? s : "", lo, hi);
    return -1;
  }
  *v = d;
  return 0;
}

/* An integer in [lo, hi], the whole string. */
static int whole(const char *flag, const char *s, double lo, double hi,
                 double *v) {
  if (num(flag, s, lo, hi, v) != 0)
    return -1;
  if (*v != floor(*v)) {
    die("%s '%s': give an integer", flag, s);
    return -1;
  }
  return 0;
}

/* A comma list of integers in [lo, hi] into v (at most cap). */
static int ints(const char *flag, const char *s, int lo, int hi, int *v,
                int cap, int *n) {
  char buf[512];
  if (!s || strlen(s) >= sizeof buf) {
    die("%s: give a comma-separated list of integers", flag);
    return -1;
  }
  strcpy(buf, s);
  *n = 0;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    double d;
    if (*n == cap) {
      die("%s '%s': at most %d values", flag, s, cap);
      return -1;
    }
    if (whole(flag, tok, lo, hi, &d) != 0)
      return -1;
    v[(*n)++] = (int)d;
  }
  if (*n == 0) {
    die("%s: empty list", flag);
    return -1;
  }
  return 0;
}

static int link_arg(const char *s, sharc_plan_cluster_t *c,
                    plan_topo_given_t *given) {
  double lat, bw;
  char cls[16], rest;
  if (!s || sscanf(s, "%15[a-z]:%lf,%lf%c", cls, &lat, &bw, &rest) != 3 ||
      (strcmp(cls, "intra") && strcmp(cls, "inter")) || !(lat >= 0) ||
      !(bw > 0) || lat > 1e6 || bw > 1e6) {
    die("--link '%s': give intra:LAT_US,GBPS or inter:LAT_US,GBPS with "
        "latency >= 0 us and bandwidth > 0 GB/s, e.g. --link inter:5,50",
        s ? s : "");
    return -1;
  }
  if (!strcmp(cls, "intra"))
    c->intra_lat_us = lat, c->intra_gbs = bw, given->intra = 1;
  else
    c->inter_lat_us = lat, c->inter_gbs = bw, given->inter = 1;
  return 0;
}

static const char *strat_short(sharc_strategy_t s) {
  switch (s) {
  case SHARC_FULL_SHARD:
    return "full";
  case SHARC_SHARD_GRAD_OP:
    return "grad_op";
  case SHARC_NO_SHARD:
    return "none";
  case SHARC_HYBRID_SHARD:
    return "hybrid";
  default:
    return "hybrid_zero2";
  }
}

static int strategies(const char *s, sharc_plan_space_t *sp) {
  char buf[256];
  if (!s || strlen(s) >= sizeof buf)
    return die("--strategy: give all or a list of full, grad_op, hybrid, "
               "hybrid_zero2, none"),
           -1;
  strcpy(buf, s);
  sp->nstrategies = 0;
  for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
    if (!strcmp(t, "all")) {
      sharc_plan_space_t d;
      sharc_plan_space_default(&d);
      sp->nstrategies = d.nstrategies;
      memcpy(sp->strategies, d.strategies, sizeof d.strategies);
      return 0;
    }
    sharc_strategy_t st;
    if (!strcmp(t, "none") || !strcmp(t, "no_shard"))
      st = SHARC_NO_SHARD;
    else if (!strcmp(t, "shard_grad_op"))
      st = SHARC_SHARD_GRAD_OP;
    else if (sharc_strategy_parse(t, &st) != SHARC_OK)
      return die("--strategy '%s': '%s' is not one of all, full, grad_op, "
                 "hybrid, hybrid_zero2, none",
                 s, t),
             -1;
    int dup = 0;
    for (int i = 0; i < sp->nstrategies; i++)
      dup |= sp->strategies[i] == st;
    if (!dup)
      sp->strategies[sp->nstrategies++] = st;
  }
  return sp->nstrategies ? 0 : (die("--strategy: empty list"), -1);
}

static int dtypes(const char *s, sharc_plan_space_t *sp) {
  char buf[64];
  if (!s || strlen(s) >= sizeof buf)
    return die("--dtype: give bf16, f16 or f32 (a comma list)"), -1;
  strcpy(buf, s);
  sp->ndtypes = 0;
  for (char *t = strtok(buf, ","); t && sp->ndtypes < 3;
       t = strtok(NULL, ",")) {
    if (!strcmp(t, "bf16"))
      sp->dtypes[sp->ndtypes++] = SHARC_BF16;
    else if (!strcmp(t, "f16"))
      sp->dtypes[sp->ndtypes++] = SHARC_F16;
    else if (!strcmp(t, "f32"))
      sp->dtypes[sp->ndtypes++] = SHARC_F32;
    else
      return die("--dtype '%s': '%s' is not bf16, f16 or f32", s, t), -1;
  }
  return sp->ndtypes ? 0 : (die("--dtype: empty list"), -1);
}

static double gib(size_t b) { return (double)b / (1024.0 * 1024 * 1024); }

static const char *dt_name(sharc_dtype_t d) {
  return d == SHARC_BF16 ? "bf16" : d == SHARC_F16 ? "f16" : "f32";
}

static void print_table(const sharc_plan_result_t *r, int n, int top) {
  printf("#  %-12s %6s %4s %4s %2s %3s %9s %9s %9s %9s %9s %10s %10s %10s "
         "%10s %4s\n",
         "strategy", "group", "dt", "ckpt", "pf", "off", "sharded", "gathered",
         "ugrads", "activ", "peak", "step ms", "compute", "exposed", "comm",
         "fits");
  printf("#  %-12s %6s %4s %4s %2s %3s %9s %9s %9s %9s %9s %10s %10s %10s "
         "%10s %4s\n",
         "", "", "", "", "", "", "GiB", "GiB", "GiB", "GiB", "GiB", "", "ms",
         "ms", "ms", "");
  for (int i = 0; i < n && (top <= 0 || i < top); i++) {
    const sharc_plan_result_t *x = &r[i];
    size_t sh = x->mem.param_slices + x->mem.grad_slices + x->mem.optim;
    printf("%-2d %-12s %6d %4s %4d %2d %3d %9.2f %9.2f %9.2f %9.2f %9.2f "
           "%10.2f %10.2f %10.2f %10.2f %4s\n",
           i + 1, strat_short(x->cfg.strategy), x->shards,
           dt_name(x->cfg.param_dtype), x->cfg.checkpoint_activations,
           x->cfg.prefetch, x->cfg.offload, gib(sh), gib(x->mem.gathered),
           gib(x->mem.unsharded_grads), gib(x->mem.activations),
           gib(x->mem.device), x->t_step * 1e3, x->t_compute * 1e3,
           x->t_exposed * 1e3, x->t_comm * 1e3, x->fits ? "yes" : "NO");
  }
  if (top > 0 && n > top)
    printf("#  (%d more; --top 0 prints all)\n", n - top);
}

static void describe(const sharc_plan_result_t *x) {
  printf("   %s, shard group %d x %d replicas, %d samples per rank per "
         "micro-batch\n",
         strat_short(x->cfg.strategy), x->shards, x->replicas, x->micro_n);
  const char *nm[] = {"all-gather", "reduce-scatter", "all-reduce"};
  for (int c = 0; c < SHARC_PLAN_NCOLL; c++)
    if (x->coll[c].calls)
      printf("   %-14s %4d calls %10.2f ms  largest %10.1f us  %-6s on "
             "%d ranks / %d nodes\n",
             nm[c], x->coll[c].calls, x->coll[c].seconds * 1e3,
             x->coll[c].largest_us, x->coll[c].algo, x->coll[c].ranks,
             x->coll[c].nodes);
  printf("   bytes sent per rank: %.3f GB within nodes, %.3f GB between\n",
         x->bytes_intra / 1e9, x->bytes_inter / 1e9);
  printf("   largest unit: forward %.3f ms, backward %.3f ms per "
         "micro-batch\n",
         x->t_unit_fwd * 1e3, x->t_unit_bwd * 1e3);
}

static void why(const sharc_plan_result_t *r, int n) {
  const sharc_plan_result_t *b = &r[0];
  if (!b->fits) {
    printf("\nnothing fits: the smallest needs %.2f GiB per GPU (%s, "
           "checkpointing %d); add GPUs, shard wider, checkpoint, or offload\n",
           gib(b->mem.device), strat_short(b->cfg.strategy),
           b->cfg.checkpoint_activations);
    return;
  }
  printf("\nbest: %s (group %d, %s, checkpointing %d): %.2f ms a step, "
         "%.0f tokens/s (%.0f samples/s), %.2f GiB per GPU\n",
         strat_short(b->cfg.strategy), b->shards, dt_name(b->cfg.param_dtype),
         b->cfg.checkpoint_activations, b->t_step * 1e3, b->tokens_per_s,
         b->samples_per_s, gib(b->mem.device));
  printf("   compute %.2f ms; communication %.2f ms of which %.2f ms "
         "exposed (%.0f%% hidden behind compute)\n",
         b->t_compute * 1e3, b->t_comm * 1e3, b->t_exposed * 1e3,
         b->t_comm > 0 ? 100.0 * (1 - fmin(b->t_exposed / b->t_comm, 1)) : 100);
  describe(b);
  int shown = 0;
  for (int i = 1; i < n && shown < 3; i++) {
    const sharc_plan_result_t *o = &r[i];
    int seen = 0;
    for (int j = 1; j < i; j++)
      seen |= r[j].cfg.strategy == o->cfg.strategy;
    if (seen || o->cfg.strategy == b->cfg.strategy)
      continue;
    shown++;
    double dt = o->t_step - b->t_step, de = o->t_exposed - b->t_exposed;
    double dc = o->t_compute - b->t_compute;
    double dm = gib(o->mem.device) - gib(b->mem.device);
    const char *nm = strat_short(o->cfg.strategy);
    if (!o->fits)
      printf("   vs %-12s does not fit: %.2f GiB per GPU\n", nm,
             gib(o->mem.device));
    else if (fabs(dt) <= 1e-9 + 1e-6 * b->t_step)
      printf("   vs %-12s same step time, %+.2f GiB per GPU: a tie goes to "
             "less memory\n",
             nm, dm);
    else
      printf("   vs %-12s %+.2f ms a step, mostly %s (exposed "
             "communication %+.2f ms, compute %+.2f ms), %+.2f GiB per GPU\n",
             nm, dt * 1e3,
             fabs(de) >= fabs(dc) ? "exposed communication"
                                  : "compute (optimizer slices, "
                                    "recomputation)",
             de * 1e3, dc * 1e3, dm);
  }
}

static void json_mem(FILE *f, const sharc_mem_bytes_t *m) {
  fprintf(f,
          "{\"param_slices\":%zu,\"grad_slices\":%zu,\"optim\":%zu,"
          "\"gathered\":%zu,\"unsharded_grads\":%zu,\"activations\":%zu,"
          "\"total\":%zu,\"device\":%zu}",
          m->param_slices, m->grad_slices, m->optim, m->gathered,
          m->unsharded_grads, m->activations, m->total, m->device);
}

static int write_json(const char *path, const char *label,
                      const sharc_plan_cluster_t *c,
                      const sharc_plan_batch_t *b, const sharc_plan_result_t *r,
                      int n, double secs) {
  FILE *f = strcmp(path, "-") ? fopen(path, "w") : stdout;
  if (!f)
    return die("--json %s: cannot write: %s", path, strerror(errno));
  fprintf(f,
          "{\"model\":\"%s\",\"params\":%zu,\"cluster\":{\"nodes\":%d,"
          "\"gpus_per_node\":%d,\"intra_lat_us\":%g,\"intra_gbs\":%g,"
          "\"inter_lat_us\":%g,\"inter_gbs\":%g,\"gpu_mem_gib\":%g,"
          "\"tflops\":%g,\"hbm_gbs\":%g},\"batch\":{\"global\":%d,"
          "\"micro\":%d},\"plan_seconds\":%.3f,\"configs\":[",
          label, r[0].params, c->nodes, c->gpus_per_node, c->intra_lat_us,
          c->intra_gbs, c->inter_lat_us, c->inter_gbs, c->gpu_mem_gib,
          c->tflops, c->hbm_gbs, b->global_batch, b->micro, secs);
  const char *cn[] = {"all_gather", "reduce_scatter", "all_reduce"};
  for (int i = 0; i < n; i++) {
    const sharc_plan_result_t *x = &r[i];
    fprintf(f,
            "%s\n{\"rank\":%d,\"strategy\":\"%s\",\"shard_group\":%d,"
            "\"replicas\":%d,\"param_dtype\":\"%s\",\"checkpoint\":%d,"
            "\"prefetch\":%d,\"offload\":%d,\"micro_n\":%d,\"fits\":%s,"
            "\"mem\":",
            i ? "," : "", i + 1, sharc_strategy_name(x->cfg.strategy),
            x->shards, x->replicas, dt_name(x->cfg.param_dtype),
            x->cfg.checkpoint_activations, x->cfg.prefetch, x->cfg.offload,
            x->micro_n, x->fits ? "true" : "false");
    json_mem(f, &x->mem);
    fprintf(f,
            ",\"bytes_intra\":%.0f,\"bytes_inter\":%.0f,\"t_step\":%.6g,"
            "\"t_compute\":%.6g,\"t_optim\":%.6g,\"t_comm\":%.6g,"
            "\"t_exposed\":%.6g,"
            "\"t_unit_fwd\":%.6g,\"t_unit_bwd\":%.6g,\"tokens_per_s\":%.6g,"
            "\"colls\":{",
            x->bytes_intra, x->bytes_inter, x->t_step, x->t_compute, x->t_optim,
            x->t_comm, x->t_exposed, x->t_unit_fwd, x->t_unit_bwd,
            x->tokens_per_s);
    for (int k = 0; k < SHARC_PLAN_NCOLL; k++)
      fprintf(f,
              "%s\"%s\":{\"calls\":%d,\"seconds\":%.6g,\"largest_us\":%.6g,"
              "\"algo\":\"%s\",\"ranks\":%d,\"nodes\":%d}",
              k ? "," : "", cn[k], x->coll[k].calls, x->coll[k].seconds,
              x->coll[k].largest_us, x->coll[k].algo, x->coll[k].ranks,
              x->coll[k].nodes);
    fprintf(f, "}}");
  }
  fprintf(f, "\n]}\n");
  if (f != stdout && fclose(f) != 0)
    return die("--json %s: write failed: %s", path, strerror(errno));
  return 0;
}

/* The whole of path into a malloc'd *text. Messages name "flag path", or
 * "flagpath" for a flag ending in ':' ("--model units:"). */
static int slurp(const char *flag, const char *path, char **text, size_t *len) {
  const char *sp = flag[strlen(flag) - 1] == ':' ? "" : " ";
  FILE *f = fopen(path, "rb");
  if (!f)
    return die("%s%s%s: cannot read: %s", flag, sp, path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  while (b) {
    n += fread(b + n, 1, cap - n, f);
    if (n < cap)
      break;
    char *nb = cap < ((size_t)1 << 30) ? realloc(b, cap * 2) : NULL;
    if (!nb) {
      free(b);
      b = NULL;
      break;
    }
    b = nb;
    cap *= 2;
  }
  int rd = ferror(f);
  fclose(f);
  if (!b || rd) {
    const char *why = b ? "read error" : "over 1 GiB or out of memory";
    free(b);
    return die("%s%s%s: cannot read it whole (%s)", flag, sp, path, why);
  }
  *text = b;
  *len = n;
  return 0;
}

/* A runtime cost-model parameter as the library reads it (its env var). */
static double env_param(const char *name, double dflt) {
  const char *v = getenv(name);
  char *end;
  double d = v && *v ? strtod(v, &end) : dflt;
  return v && *v && !*end && d > 0 ? d : dflt;
}

/* Where the calibration's lines go: stdout, or stderr when stdout is the
 * JSON (--json -). */
static FILE *info;

static const char *coll_name[SHARC_PLAN_NCOLL] = {
    "all_gather", "reduce_scatter", "all_reduce"};

/* The parameters the runtime picked its algorithms with: its variables,
 * as the benchmark's environment would have set them. */
static void runtime_env(sharc_plan_runtime_t *rt) {
  sharc_plan_runtime_default(rt);
  rt->alpha_us = env_param("SHARC_ALPHA_US", rt->alpha_us);
  rt->beta_gbs = env_param("SHARC_BETA_GBS", rt->beta_gbs);
  rt->net_alpha_us = env_param("SHARC_NET_ALPHA_US", rt->net_alpha_us);
  rt->net_beta_gbs = env_param("SHARC_NET_BETA_GBS", rt->net_beta_gbs);
}

/* Every sample of the class (inter: nodes > 1) with its residual. */
static void print_rows(const sharc_plan_sample_t *s, int n, int inter) {
  fprintf(info, "#   %-14s %5s %5s %12s %-12s %12s %12s %8s\n", "collective",
          "ranks", "nodes", "bytes", "algorithm", "measured us", "predicted us",
          "error");
  for (int i = 0; i < n; i++)
    if ((s[i].nodes > 1) == inter && s[i].algo)
      fprintf(info, "#   %-14s %5d %5d %12zu %-12s %12.2f %12.2f %+7.1f%%\n",
              coll_name[s[i].coll], s[i].ranks, s[i].nodes, s[i].bytes,
              s[i].algo, s[i].seconds * 1e6, s[i].predicted * 1e6,
              100 * (s[i].predicted - s[i].seconds) / s[i].seconds);
}

/* Fits the links to the sharc-bench files' samples and sets them in cl:
 * the intra link from one-host files first, then the inter link (with
 * the intra one fixed) from several-host files. Prints each fit and every
 * row's residual. */
static int calibrate_links(sharc_plan_sample_t *s, int n, int nfiles,
                           sharc_plan_cluster_t *cl) {
  sharc_plan_runtime_t rt;
  runtime_env(&rt);
  int have[2] = {0, 0};
  for (int i = 0; i < n; i++)
    have[s[i].nodes > 1]++;
  char err[512];
  for (int inter = 0; inter < 2; inter++) {
    if (!have[inter])
      continue;
    sharc_plan_fit_t f;
    if (sharc_plan_fit_link(s, n, inter, cl, &rt, &f, err, sizeof err) !=
        SHARC_OK)
      return die("%s", err);
    fprintf(info,
            "# calibration: %s link from %d rows of %d file(s); the runtime "
            "picked algorithms with %g us, %g GB/s (%g us, %g GB/s between "
            "hosts)\n",
            inter ? "inter-node" : "intra-node", f.used, nfiles, rt.alpha_us,
            rt.beta_gbs, rt.net_alpha_us, rt.net_beta_gbs);
    fprintf(info,
            "#   latency %.3f us, bandwidth %.3f GB/s %s%s; residuals "
            "(predicted - measured) / measured: rms %.1f%%, max %.1f%%\n",
            f.lat_us, f.gbs, inter ? "per rank's NIC" : "per rank",
            f.lat_clamped ? " (latency clamped at 0)" : "", 100 * f.rms_rel,
            100 * f.max_rel);
    print_rows(s, n, inter);
    if (inter)
      cl->inter_lat_us = f.lat_us, cl->inter_gbs = f.gbs;
    else
      cl->intra_lat_us = f.lat_us, cl->intra_gbs = f.gbs;
  }
  return 0;
}

/* Reads the sharc-bench files and fits the links to all their rows. */
static int calibrate_files(const char *const *paths, int npaths,
                           sharc_plan_cluster_t *cl) {
  sharc_plan_sample_t *all = NULL;
  int nall = 0, rc = 0;
  char err[512];
  for (int i = 0; i < npaths && !rc; i++) {
    char *text;
    size_t len;
    sharc_plan_sample_t *s1;
    int n1;
    if ((rc = slurp("--calibrate", paths[i], &text, &len)))
      break;
    sharc_status_t st =
        sharc_plan_bench_parse(text, len, &s1, &n1, err, sizeof err);
    free(text);
    if (st != SHARC_OK) {
      rc = die("--calibrate %s: %s", paths[i], err);
      break;
    }
    sharc_plan_sample_t *grown =
        realloc(all, (size_t)(nall + n1) * sizeof *all);
    if (!grown) {
      free(s1);
      rc = die("--calibrate: out of memory");
      break;
    }
    all = grown;
    memcpy(all + nall, s1, (size_t)n1 * sizeof *s1);
    nall += n1;
    free(s1);
  }
  if (!rc)
    rc = calibrate_links(all, nall, npaths, cl);
  free(all);
  return rc;
}

/* Predicts every row of a sharc-bench file with cl's links (after any
 * calibration) and prints the errors: a calibration against another
 * measurement. */
static int check_file(const char *path, const sharc_plan_cluster_t *cl) {
  char *text, err[512];
  size_t len;
  if (slurp("--check", path, &text, &len))
    return 2;
  sharc_plan_sample_t *s;
  int n;
  sharc_status_t st =
      sharc_plan_bench_parse(text, len, &s, &n, err, sizeof err);
  free(text);
  if (st != SHARC_OK)
    return die("--check %s: %s", path, err);
  sharc_plan_runtime_t rt;
  runtime_env(&rt);
  double rms;
  sharc_plan_predict_samples(s, n, cl, &rt, &rms);
  fprintf(info,
          "# check: %s predicted with intra %g us %g GB/s, inter %g us %g "
          "GB/s: rms error %.1f%% over %d rows\n",
          path, cl->intra_lat_us, cl->intra_gbs, cl->inter_lat_us,
          cl->inter_gbs, 100 * rms, n);
  for (int inter = 0; inter < 2; inter++)
    print_rows(s, n, inter);
  free(s);
  return 0;
}

/* Fits --flops and --hbm to a sharc-train log of pm, configured as the
 * space's first values (sharc-train's defaults where none is given:
 * f32, no checkpointing, prefetch 2). */
static int calibrate_compute(const char *path, const sharc_plan_model_t *pm,
                             const sharc_plan_space_t *sp, int micro,
                             int dtype_given, sharc_plan_cluster_t *cl) {
  char *text, err[512];
  size_t len;
  if (slurp("--calibrate-compute", path, &text, &len))
    return 2;
  sharc_plan_train_log_t lg;
  sharc_status_t st = sharc_plan_train_parse(text, len, pm->tokens_per_sample,
                                             &lg, err, sizeof err);
  free(text);
  if (st != SHARC_OK)
    return die("--calibrate-compute %s: %s", path, err);
  sharc_shard_config_t cfg;
  sharc_shard_config_default(&cfg);
  cfg.strategy = lg.strategy;
  cfg.param_dtype = dtype_given ? sp->dtypes[0] : SHARC_F32;
  cfg.checkpoint_activations = sp->nckpt ? sp->ckpt[0] : 0;
  cfg.prefetch = sp->nprefetch ? sp->prefetch[0] : 2;
  cfg.shard_group = sp->ngroups ? sp->groups[0] : 0;
  cfg.optim.kind = sp->optim;
  sharc_plan_cluster_t c = *cl;
  if ((long)c.nodes * c.gpus_per_node != lg.ranks)
    c.nodes = 1, c.gpus_per_node = lg.ranks;
  sharc_plan_batch_t b = {lg.global_batch, micro};
  double tf, hbm;
  if (sharc_plan_fit_compute(pm, &c, &b, &cfg, &lg, &tf, &hbm, err,
                             sizeof err) != SHARC_OK)
    return die("--calibrate-compute %s: %s", path, err);
  fprintf(info,
          "# calibration: compute from %s: %s, %d ranks, %s, batch %d, %d "
          "steps (medians after the first): step %.3f ms, compute %.3f ms, "
          "exposed %.3f ms\n",
          path, pm->label, lg.ranks, sharc_strategy_name(lg.strategy),
          lg.global_batch, lg.steps, lg.t_step * 1e3, lg.t_compute * 1e3,
          lg.t_exposed * 1e3);
  fprintf(info,
          "#   sustained %.6g TFLOP/s per rank (the model's FLOPs / measured "
          "compute), optimizer and the rest of the step at %.4g GB/s "
          "(exact: two numbers from two times)\n",
          tf, hbm);
  cl->tflops = tf;
  cl->hbm_gbs = hbm;
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs argv (NULL-terminated) and waits: its exit status, -1 if it could
 * not start. quiet: its output to /dev/null. */
static int run_wait(char *const *av, int quiet) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (quiet) {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid;
  int rc = posix_spawnp(&pid, av[0], &fa, NULL, av, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* plan_plot.py: SHARC_PLAN_PLOT, else beside the sources, else installed. */
static const char *plot_script(void) {
  const char *env = getenv("SHARC_PLAN_PLOT");
  if (env && *env)
    return env;
  if (access(SHARC_PLAN_PLOT_SRC, R_OK) == 0)
    return SHARC_PLAN_PLOT_SRC;
  return SHARC_PLAN_PLOT_INSTALLED;
}

/* --png FILE: plan_plot.py over GPU counts G (one node), 8G, 64G, ... up
 * to the cluster's, with this command's other arguments. */
static int write_png(const char *png, int argc, char **argv,
                     const sharc_plan_cluster_t *cl) {
  static char self[4096], gpus[512];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0)
    return die("--png: cannot find this program (/proc/self/exe)");
  self[len] = '\0';
  long world = (long)cl->nodes * cl->gpus_per_node, g = cl->gpus_per_node;
  int off = 0;
  for (; g < world && off < 400; g *= 8)
    off += snprintf(gpus + off, sizeof gpus - (size_t)off, "%ld,", g);
  snprintf(gpus + off, sizeof gpus - (size_t)off, "%ld", world);
  /* SHARC_PLAN_PYTHON when set, else python3 on the PATH, else Debian's
   * (whose python3-matplotlib a python3 of another install lacks) */
  const char *env = getenv("SHARC_PLAN_PYTHON");
  const char *py[3] = {env, "python3", "/usr/bin/python3"};
  int npy = env && *env ? 1 : 3;
  const char *use = NULL;
  for (int k = 0; k < npy && !use; k++) {
    char *probe[] = {(char *)py[k], "-c", "import matplotlib", NULL};
    if (py[k] && *py[k] && run_wait(probe, 1) == 0)
      use = py[k];
  }
  if (!use)
    return die("--png: no python3 with matplotlib (Debian: apt-get install "
               "python3-matplotlib; or set SHARC_PLAN_PYTHON)");
  const char *script = plot_script();
  char **av = calloc((size_t)argc + 12, sizeof *av);
  if (!av)
    return die("--png: out of memory");
  int n = 0;
  av[n++] = (char *)use;
  av[n++] = (char *)script;
  av[n++] = "--plan";
  av[n++] = self;
  av[n++] = "--gpus";
  av[n++] = gpus;
  av[n++] = "-o";
  av[n++] = (char *)png;
  av[n++] = "--";
  for (int i = 1; i < argc; i++) { /* the sweep's own flags are left out */
    if (!strcmp(argv[i], "--png") || !strcmp(argv[i], "--json") ||
        !strcmp(argv[i], "--top") || !strcmp(argv[i], "--nodes")) {
      i++;
      continue;
    }
    av[n++] = argv[i];
  }
  printf("# --png: %s %s --gpus %s -o %s\n", use, script, gpus, png);
  fflush(stdout);
  int rc = run_wait(av, 0);
  free(av);
  if (rc != 0)
    return die("--png: %s exited %d (its messages are above)", script, rc);
  return 0;
}

/* --model units:FILE: the file's text, parsed by the planner. */
static int load_units(const char *path, sharc_plan_units_t **out) {
  char *text, err[512];
  size_t len;
  if (slurp("--model units:", path, &text, &len))
    return 2;
  const char *slash = strrchr(path, '/');
  sharc_status_t st = sharc_plan_units_parse(
      text, len, slash && slash[1] ? slash + 1 : path, out, err, sizeof err);
  free(text);
  if (st != SHARC_OK)
    return die("--model units:%s: %s", path, err);
  return 0;
}

static void drop_models(sharc_plan_builtin_t *bm, sharc_plan_units_t *um) {
  sharc_plan_builtin_destroy(bm);
  sharc_plan_units_destroy(um);
}

int main(int argc, char **argv) {
  const char *model = "gpt:7b", *json = NULL, *ccomp = NULL, *png = NULL;
  const char *topology = NULL;
  plan_topo_given_t given = {0};
  const char *calib[16], *check[16];
  int ncalib = 0, ncheck = 0, dtype_given = 0;
  double seq = 0, batch = 0, micro = 1, top = 12, v = 0;
  sharc_plan_cluster_t cl;
  sharc_plan_cluster_default(&cl);
  sharc_plan_space_t sp;
  sharc_plan_space_default(&sp);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (strncmp(a, "--", 2) != 0)
      return die("unexpected argument '%s' (see --help)", a);
    int known = 1;
#define TAKES                                                                  \
  do {                                                                         \
    if (!val)                                                                  \
      return die("%s needs a value (see --help)", a);                          \
    i++;                                                                       \
  } while (0)
    if (!strcmp(a, "--model")) {
      TAKES;
      model = val;
    } else if (!strcmp(a, "--json")) {
      TAKES;
      json = val;
    } else if (!strcmp(a, "--png")) {
      TAKES;
      png = val;
    } else if (!strcmp(a, "--calibrate")) {
      TAKES;
      if (ncalib == 16)
        return die("--calibrate: at most 16 files");
      calib[ncalib++] = val;
    } else if (!strcmp(a, "--check")) {
      TAKES;
      if (ncheck == 16)
        return die("--check: at most 16 files");
      check[ncheck++] = val;
    } else if (!strcmp(a, "--calibrate-compute")) {
      TAKES;
      ccomp = val;
    } else if (!strcmp(a, "--seq")) {
      TAKES;
      if (num(a, val, 1, 1 << 16, &seq))
        return 2;
    } else if (!strcmp(a, "--nodes")) {
      TAKES;
      if (whole(a, val, 1, 1 << 24, &v))
        return 2;
      cl.nodes = (int)v;
    } else if (!strcmp(a, "--gpus-per-node")) {
      TAKES;
      if (whole(a, val, 1, 1024, &v))
        return 2;
      cl.gpus_per_node = (int)v;
      given.gpus_per_node = 1;
    } else if (!strcmp(a, "--topology")) {
      TAKES;
      topology = val;
    } else if (!strcmp(a, "--nic-gbps")) {
      TAKES;
      if (num(a, val, 1e-6, 1e6, &given.nic_gbs))
        return 2;
    } else if (!strcmp(a, "--link")) {
      TAKES;
      if (link_arg(val, &cl, &given))
        return 2;
    } else if (!strcmp(a, "--gpu-mem")) {
      TAKES;
      if (num(a, val, 1e-3, 1e6, &cl.gpu_mem_gib))
        return 2;
      given.gpu_mem = 1;
    } else if (!strcmp(a, "--flops")) {
      TAKES;
      if (num(a, val, 1e-6, 1e6, &cl.tflops))
        return 2;
      given.flops = 1;
    } else if (!strcmp(a, "--hbm")) {
      TAKES;
      if (num(a, val, 1e-3, 1e7, &cl.hbm_gbs))
        return 2;
      given.hbm = 1;
    } else if (!strcmp(a, "--batch")) {
      TAKES;
      if (whole(a, val, 1, 1 << 30, &batch))
        return 2;
    } else if (!strcmp(a, "--micro")) {
      TAKES;
      if (whole(a, val, 1, 1 << 20, &micro))
        return 2;
    } else if (!strcmp(a, "--top")) {
      TAKES;
      if (num(a, val, 0, 1e6, &top))
        return 2;
    } else if (!strcmp(a, "--strategy")) {
      TAKES;
      if (strategies(val, &sp))
        return 2;
    } else if (!strcmp(a, "--shard-group")) {
      TAKES;
      if (ints(a, val, 1, 1 << 24, sp.groups, 32, &sp.ngroups))
        return 2;
    } else if (!strcmp(a, "--prefetch")) {
      TAKES;
      if (ints(a, val, 1, 1024, sp.prefetch, 8, &sp.nprefetch))
        return 2;
    } else if (!strcmp(a, "--checkpoint")) {
      TAKES;
      if (ints(a, val, 0, 1, sp.ckpt, 2, &sp.nckpt))
        return 2;
    } else if (!strcmp(a, "--offload")) {
      TAKES;
      if (ints(a, val, 0, 1, sp.offload, 2, &sp.noffload))
        return 2;
    } else if (!strcmp(a, "--dtype")) {
      TAKES;
      if (dtypes(val, &sp))
        return 2;
      dtype_given = 1;
    } else if (!strcmp(a, "--optim")) {
      TAKES;
      if (!strcmp(val, "adamw"))
        sp.optim = SHARC_OPTIM_ADAMW;
      else if (!strcmp(val, "sgd"))
        sp.optim = SHARC_OPTIM_SGD;
      else
        return die("--optim '%s': use adamw or sgd", val);
    } else
      known = 0;
    if (!known)
      return die("unknown option '%s' (see --help)", a);
  }
  info = json && !strcmp(json, "-") ? stderr : stdout;
  if (topology) {
    int rc = plan_topo_apply(topology, &given, &cl, info);
    if (rc)
      return rc;
  } else if (given.nic_gbs > 0) {
    return die("--nic-gbps needs --topology FILE (the NICs are counted in "
               "the export); without it give --link inter:LAT_US,GBPS");
  }
  long world = (long)cl.nodes * cl.gpus_per_node;
  if (world > (1 << 24))
    return die("%d nodes x %d GPUs is %ld GPUs; at most 16777216", cl.nodes,
               cl.gpus_per_node, world);
  sharc_plan_batch_t b = {batch > 0 ? (int)batch : (int)world, (int)micro};
  char err[512];
  sharc_plan_builtin_t *bm = NULL;
  sharc_plan_units_t *um = NULL;
  const sharc_plan_model_t *pm;
  if (!strncmp(model, "units:", 6)) {
    if (seq > 0)
      return die("--seq is for GPT models; a unit list gives its sizes per "
                 "sample (--model %s)",
                 model);
    int rc = load_units(model + 6, &um);
    if (rc)
      return rc;
    pm = sharc_plan_units_model(um);
  } else {
    if (sharc_plan_builtin_create(model, (int)seq, &bm, err, sizeof err) != 0)
      return die("%s", err);
    pm = sharc_plan_builtin_model(bm);
  }
  if (ncalib) {
    int rc = calibrate_files(calib, ncalib, &cl);
    if (rc) {
      drop_models(bm, um);
      return rc;
    }
  }
  if (ccomp) {
    int rc = calibrate_compute(ccomp, pm, &sp, (int)micro, dtype_given, &cl);
    if (rc) {
      drop_models(bm, um);
      return rc;
    }
  }
  if (ncalib || ccomp)
    fprintf(info,
            "# calibrated: --link intra:%.6g,%.6g --link inter:%.6g,%.6g "
            "--flops %.6g --hbm %.6g\n",
            cl.intra_lat_us, cl.intra_gbs, cl.inter_lat_us, cl.inter_gbs,
            cl.tflops, cl.hbm_gbs);
  for (int i = 0; i < ncheck; i++) {
    int rc = check_file(check[i], &cl);
    if (rc) {
      drop_models(bm, um);
      return rc;
    }
  }
  double t0 = now_s();
  sharc_plan_result_t *r;
  int n;
  sharc_status_t st =
      sharc_plan_search(pm, &cl, &b, &sp, &r, &n, err, sizeof err);
  double secs = now_s() - t0;
  if (st != SHARC_OK) {
    drop_models(bm, um);
    return die("%s", err);
  }
  if (!json || strcmp(json, "-") != 0) {
    printf("# sharc-plan: %s, %zu parameters, %d nodes x %d GPUs (%ld), "
           "batch %d in %d micro-batches\n",
           pm->label, r[0].params, cl.nodes, cl.gpus_per_node, world,
           b.global_batch, b.micro);
    printf("# links: intra %g us %g GB/s, inter %g us %g GB/s per NIC; "
           "%g GiB, %g TFLOP/s sustained, %g GB/s HBM per GPU\n",
           cl.intra_lat_us, cl.intra_gbs, cl.inter_lat_us, cl.inter_gbs,
           cl.gpu_mem_gib, cl.tflops, cl.hbm_gbs);
    printf("# %d configurations predicted in %.3f s; ranked: those that "
           "fit by step time\n",
           n, secs);
    print_table(r, n, (int)top);
    why(r, n);
  }
  int rc = json ? write_json(json, pm->label, &cl, &b, r, n, secs) : 0;
  if (rc == 0 && png)
    rc = write_png(png, argc, argv, &cl);
  free(r);
  drop_models(bm, um);
  return rc;
}

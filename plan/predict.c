/*
 * predict.c - one step of the FSDP engine, replayed without running it
 * (sharc_plan_predict). The replay follows shard/step.c call for call:
 * the same gathers, prefetches, waits, allocations and frees in the same
 * order, each allocation rounded as eng_alloc rounds it, each unit laid
 * out by the engine's own layout_unit, so the memory at the step's peak
 * is the snapshot the engine reports. Time runs on two clocks: compute
 * (the caller's thread, which issues everything and computes) and the one
 * communication stream, where collectives run in the order issued, each
 * taking what sharc's cost model predicts (coll.c). Compute waits for a
 * gather when it reaches the unit: that wait is the exposed time.
 *
 * Cost: O(stages) per micro-batch simulated (at most four: the middle
 * ones repeat), O(units) for the layout. Nothing depends on the number of
 * ranks except the cost model's closed forms.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "plan.h"

enum { C_PSLICE, C_GSLICE, C_OPTIM, C_GATHERED, C_UGRAD, C_ACT, C_N };
enum { G_NONE, G_ISSUED, G_READY };

/* What grows with each micro-batch: the middle ones are simulated once
 * and their increment repeated. */
typedef struct {
  double t, comm_free, t_compute, t_comm, t_exposed;
  double secs[SHARC_PLAN_NCOLL], calls[SHARC_PLAN_NCOLL];
  double intra, inter;
} acc_t;

typedef struct {
  size_t padded, slice;
  int first_stage, last_stage;
  double ag_s, rs_s, ar_s;                            /* one call's seconds */
  double ag_in, ag_out, rs_in, rs_out, ar_in, ar_out; /* bytes sent */
} punit_t;

typedef struct {
  const sharc_model_t *m;
  const sharc_plan_model_t *pm;
  const sharc_shard_config_t *cfg;
  punit_t *u;
  int *state, *ugrad, *saved;
  double *gather_end, *reduce_end;
  int *fifo, fifo_head, fifo_tail; /* units whose reduction is queued */
  int keep, prefetch, mixed, replicas;
  size_t psize;
  double flops; /* sustained FLOP/s */
  size_t now[C_N], at_peak[C_N], total, peak;
  acc_t a;
  double fwd_max, bwd_max; /* the largest unit's stage times */
  int big;                 /* its index */
} sim_t;

static size_t round64(size_t b) { return (b + 63) / 64 * 64; }

static void alloc(sim_t *s, int cat, size_t bytes) {
  size_t r = round64(bytes ? bytes : 1);
  s->now[cat] += r;
  s->total += r;
  if (s->total > s->peak) {
    s->peak = s->total;
    memcpy(s->at_peak, s->now, sizeof s->now);
  }
}

static void release(sim_t *s, int cat, size_t bytes) {
  size_t r = round64(bytes ? bytes : 1);
  s->now[cat] -= r;
  s->total -= r;
}

/* A collective issued now on the communication stream. */
static double issue(sim_t *s, sharc_plan_coll_t c, double secs, double in,
                    double out) {
  double start = s->a.comm_free > s->a.t ? s->a.comm_free : s->a.t;
  s->a.comm_free = start + secs;
  s->a.t_comm += secs;
  s->a.secs[c] += secs;
  s->a.calls[c] += 1;
  s->a.intra += in;
  s->a.inter += out;
  return s->a.comm_free;
}

static void gather(sim_t *s, int u) {
  if (s->state[u] != G_NONE)
    return;
  punit_t *U = &s->u[u];
  alloc(s, C_GATHERED, U->padded * s->psize);
  s->gather_end[u] =
      issue(s, SHARC_PLAN_ALL_GATHER, U->ag_s, U->ag_in, U->ag_out);
  s->state[u] = G_ISSUED;
}

static void ready(sim_t *s, int u) {
  if (s->state[u] == G_READY)
    return;
  gather(s, u);
  if (s->gather_end[u] > s->a.t) {
    s->a.t_exposed += s->gather_end[u] - s->a.t;
    s->a.t = s->gather_end[u];
  }
  if (s->mixed) { /* the f32 compute copy, then the 16-bit one goes */
    alloc(s, C_GATHERED, s->u[u].padded * sizeof(float));
    release(s, C_GATHERED, s->u[u].padded * s->psize);
  }
  s->state[u] = G_READY;
}

static void discard(sim_t *s, int u) {
  size_t pad = s->u[u].padded;
  if (s->state[u] == G_READY)
    release(s, C_GATHERED, s->mixed ? pad * sizeof(float) : pad * s->psize);
  else if (s->state[u] == G_ISSUED)
    release(s, C_GATHERED, pad * s->psize);
  s->state[u] = G_NONE;
}

static void prefetch(sim_t *s, int st, int dir) {
  int ahead = s->prefetch - 1, cur = s->m->stages[st].unit;
  for (int t = st + dir; ahead > 0 && t >= 0 && t < s->m->nstages; t += dir) {
    int u = s->m->stages[t].unit;
    if (u == cur)
      continue;
    gather(s, u);
    ahead--;
    cur = u;
  }
}

static size_t out_bytes(sim_t *s, int st, int n) {
  if (st == s->m->nstages - 1)
    return SHARC_STAGE_STATS * sizeof(double);
  return s->m->out_bytes(s->m->ctx, st, n);
}

static double stage_seconds(sim_t *s, int st, int n) {
  double f;
  if (s->pm->stage_flops)
    f = s->pm->stage_flops(s->pm->ctx, st, n);
  else {
    int u = s->m->stages[st].unit;
    f = 2.0 * (double)s->u[u].padded * n; /* padded: close enough */
  }
  return f / s->flops;
}

/* A stage's callback: its scratch lives for the call. */
static void call(sim_t *s, int st, int n, double secs) {
  size_t scb = s->m->scratch_bytes(s->m->ctx, st, n);
  alloc(s, C_ACT, scb);
  s->a.t += secs;
  s->a.t_compute += secs;
  release(s, C_ACT, scb);
}

static void reap(sim_t *s, int wait) {
  while (s->fifo_head < s->fifo_tail) {
    int u = s->fifo[s->fifo_head];
    if (!wait && s->reduce_end[u] > s->a.t)
      break; /* in order on one stream: the later ones end later */
    release(s, C_UGRAD, s->u[u].padded * sizeof(float));
    s->ugrad[u] = 0;
    s->fifo_head++;
  }
}

static void forward(sim_t *s, int n) {
  int ns = s->m->nstages;
  for (int st = 0; st < ns; st++) {
    int u = s->m->stages[st].unit;
    gather(s, u);
    prefetch(s, st, +1);
    ready(s, u);
    alloc(s, C_ACT, out_bytes(s, st, n));
    alloc(s, C_ACT, s->m->saved_bytes(s->m->ctx, st, n));
    s->saved[st] = 1;
    double secs = stage_seconds(s, st, n);
    if (u == s->big && secs > s->fwd_max)
      s->fwd_max = secs;
    call(s, st, n, secs);
    if (s->cfg->checkpoint_activations) {
      release(s, C_ACT, s->m->saved_bytes(s->m->ctx, st, n));
      s->saved[st] = 0;
    }
    if (!s->keep && s->u[u].last_stage == st && st != ns - 1)
      discard(s, u);
  }
}

static void backward(sim_t *s, int n, int last_micro) {
  int ns = s->m->nstages;
  size_t dout_b = 0;
  int have_dout = 0;
  for (int st = ns - 1; st >= 0; st--) {
    int u = s->m->stages[st].unit;
    punit_t *U = &s->u[u];
    gather(s, u);
    prefetch(s, st, -1);
    ready(s, u);
    if (!s->ugrad[u]) {
      alloc(s, C_UGRAD, U->padded * sizeof(float));
      s->ugrad[u] = 1;
    }
    double fsecs = stage_seconds(s, st, n);
    if (!s->saved[st]) { /* checkpointed: recompute the saved tensors */
      alloc(s, C_ACT, s->m->saved_bytes(s->m->ctx, st, n));
      s->saved[st] = 1;
      call(s, st, n, fsecs);
    }
    size_t din_b = st ? out_bytes(s, st - 1, n) : 0;
    if (st)
      alloc(s, C_ACT, din_b);
    if (u == s->big && 2 * fsecs > s->bwd_max)
      s->bwd_max = 2 * fsecs;
    call(s, st, n, 2 * fsecs);
    if (have_dout)
      release(s, C_ACT, dout_b);
    dout_b = din_b;
    have_dout = st > 0;
    release(s, C_ACT, out_bytes(s, st, n)); /* free_stage */
    release(s, C_ACT, s->m->saved_bytes(s->m->ctx, st, n));
    s->saved[st] = 0;
    if (U->first_stage == st) {
      discard(s, u);
      if (last_micro) {
        issue(s, SHARC_PLAN_REDUCE_SCATTER, U->rs_s, U->rs_in, U->rs_out);
        if (s->replicas > 1)
          issue(s, SHARC_PLAN_ALL_REDUCE, U->ar_s, U->ar_in, U->ar_out);
        s->reduce_end[u] = s->a.comm_free;
        s->fifo[s->fifo_tail++] = u;
      }
    }
    reap(s, 0);
  }
}

/* Samples of rank 0 in micro-batch m (sharc-train's split: micro-batch m
 * is [B*m/M, B*(m+1)/M), split over the ranks, the first ones one more). */
static int micro_n(const sharc_plan_batch_t *b, int m, int world) {
  long m0 = (long)b->global_batch * m / b->micro;
  long m1 = (long)b->global_batch * (m + 1) / b->micro;
  return (int)((m1 - m0 + world - 1) / world);
}

static void acc_add(acc_t *to, const acc_t *hi, const acc_t *lo, double k) {
  double *t = (double *)to;
  const double *h = (const double *)hi, *l = (const double *)lo;
  for (size_t i = 0; i < sizeof *to / sizeof(double); i++)
    t[i] += k * (h[i] - l[i]);
}

static int fail(char *err, size_t errlen, const char *msg) {
  if (err && errlen)
    snprintf(err, errlen, "%s", msg);
  return -1;
}

/* The shard group and replicas of cfg on cl, or -1 with a message. */
static int groups(const sharc_plan_cluster_t *cl,
                  const sharc_shard_config_t *cfg, int *shards, int *reps,
                  char *err, size_t errlen) {
  int world = cl->nodes * cl->gpus_per_node, G = cl->gpus_per_node, S;
  switch (cfg->strategy) {
  case SHARC_NO_SHARD:
    S = 1;
    break;
  case SHARC_HYBRID_SHARD:
  case SHARC_HYBRID_SHARD_ZERO2:
    S = cfg->shard_group ? cfg->shard_group : G;
    break;
  case SHARC_FULL_SHARD:
  case SHARC_SHARD_GRAD_OP:
    S = world;
    break;
  default:
    snprintf(err, errlen,
             "sharc_plan: strategy %d is not one of full, grad_op, "
             "no_shard, hybrid, hybrid_zero2",
             (int)cfg->strategy);
    return -1;
  }
  if (S < 1 || world % S != 0 || (S % G != 0 && G % S != 0)) {
    snprintf(err, errlen,
             "sharc_plan: shard group of %d ranks on %d nodes x %d GPUs: "
             "the group must divide the world (%d) and either divide a "
             "node's %d GPUs or be a multiple of them",
             S, cl->nodes, G, world, G);
    return -1;
  }
  *shards = S;
  *reps = world / S;
  return 0;
}

static int check_inputs(const sharc_plan_model_t *pm,
                        const sharc_plan_cluster_t *cl,
                        const sharc_plan_batch_t *b, char *err, size_t n) {
  if (!pm || !pm->model || !cl || !b)
    return fail(err, n, "sharc_plan: model, cluster and batch are required");
  const sharc_model_t *m = pm->model;
  if (m->nunits < 1 || m->nstages < 1 || !m->units || !m->stages ||
      !m->out_bytes || !m->saved_bytes || !m->scratch_bytes)
    return fail(err, n,
                "sharc_plan: the model needs units, stages and the "
                "out_bytes, saved_bytes and scratch_bytes callbacks");
  for (int s = 0; s < m->nstages; s++)
    if (m->stages[s].unit < 0 || m->stages[s].unit >= m->nunits)
      return fail(err, n, "sharc_plan: a stage names a unit out of range");
  if (cl->nodes < 1 || cl->gpus_per_node < 1 || cl->nodes > (1 << 24) ||
      cl->gpus_per_node > 1024 ||
      (long long)cl->nodes * cl->gpus_per_node > (1 << 24)) {
    snprintf(err, n,
             "sharc_plan: %d nodes x %d GPUs per node; give 1..16777216 "
             "nodes, 1..1024 GPUs per node, at most 16777216 GPUs",
             cl->nodes, cl->gpus_per_node);
    return -1;
  }
  if (!(cl->intra_gbs > 0) || !(cl->inter_gbs > 0) ||
      !(cl->intra_lat_us >= 0) || !(cl->inter_lat_us >= 0) ||
      !(cl->gpu_mem_gib > 0) || !(cl->tflops > 0) || !(cl->hbm_gbs > 0) ||
      !isfinite(cl->intra_gbs + cl->inter_gbs + cl->intra_lat_us +
                cl->inter_lat_us + cl->gpu_mem_gib + cl->tflops +
                cl->hbm_gbs)) {
    snprintf(err, n,
             "sharc_plan: link bandwidths (%g, %g GB/s), GPU memory (%g "
             "GiB), FLOP/s (%g T) and HBM bandwidth (%g GB/s) must be > 0, "
             "latencies (%g, %g us) >= 0",
             cl->intra_gbs, cl->inter_gbs, cl->gpu_mem_gib, cl->tflops,
             cl->hbm_gbs, cl->intra_lat_us, cl->inter_lat_us);
    return -1;
  }
  if (b->global_batch < 1 || b->micro < 1 || b->micro > b->global_batch) {
    snprintf(err, n,
             "sharc_plan: batch %d in %d micro-batches; need batch >= 1 and "
             "1 <= micro-batches <= batch",
             b->global_batch, b->micro);
    return -1;
  }
  return 0;
}

/* Memory the GPU needs beyond the engine's categories (CUDA context,
 * cuBLAS workspace, allocator slack): an assumption, docs/plan.md. */
#define PLAN_RESERVE_BYTES (1.0 * 1024 * 1024 * 1024)

sharc_status_t
sharc_plan_predict(const sharc_plan_model_t *pm, const sharc_plan_cluster_t *cl,
                   const sharc_plan_batch_t *b, const sharc_shard_config_t *cfg,
                   sharc_plan_result_t *out, char *err, size_t errlen) {
  char scratch[8];
  if (!err || !errlen)
    err = scratch, errlen = sizeof scratch;
  err[0] = '\0';
  if (!out || !cfg)
    return fail(err, errlen, "sharc_plan_predict: cfg and out are required"),
           SHARC_ERR_INVALID_ARG;
  if (check_inputs(pm, cl, b, err, errlen) != 0)
    return SHARC_ERR_INVALID_ARG;
  if (cfg->param_dtype != SHARC_F32 && cfg->param_dtype != SHARC_BF16 &&
      cfg->param_dtype != SHARC_F16)
    return fail(err, errlen,
                "sharc_plan: param dtype must be f32, bf16 or f16"),
           SHARC_ERR_INVALID_ARG;
  if (cfg->prefetch < 0 || cfg->prefetch > 1024)
    return fail(err, errlen, "sharc_plan: prefetch must be 0..1024 (0: 2)"),
           SHARC_ERR_INVALID_ARG;
  int shards, reps;
  if (groups(cl, cfg, &shards, &reps, err, errlen) != 0)
    return SHARC_ERR_INVALID_ARG;
  const sharc_model_t *m = pm->model;
  int world = cl->nodes * cl->gpus_per_node, nu = m->nunits, ns = m->nstages;
  memset(out, 0, sizeof *out);
  sim_t s;
  memset(&s, 0, sizeof s);
  s.m = m;
  s.pm = pm;
  s.cfg = cfg;
  s.keep = cfg->strategy == SHARC_SHARD_GRAD_OP ||
           cfg->strategy == SHARC_HYBRID_SHARD_ZERO2 ||
           cfg->strategy == SHARC_NO_SHARD;
  s.prefetch = cfg->prefetch ? cfg->prefetch : 2;
  s.mixed = cfg->param_dtype != SHARC_F32;
  s.psize = sharc_dtype_size(cfg->param_dtype);
  s.replicas = reps;
  s.flops = cl->tflops * 1e12;
  s.u = calloc((size_t)nu, sizeof *s.u);
  s.state = calloc((size_t)nu, sizeof *s.state);
  s.ugrad = calloc((size_t)nu, sizeof *s.ugrad);
  s.fifo = calloc((size_t)nu + 1, sizeof *s.fifo);
  s.saved = calloc((size_t)ns, sizeof *s.saved);
  s.gather_end = calloc((size_t)nu, sizeof *s.gather_end);
  s.reduce_end = calloc((size_t)nu, sizeof *s.reduce_end);
  sharc_status_t st = SHARC_OK;
  if (!s.u || !s.state || !s.ugrad || !s.fifo || !s.saved || !s.gather_end ||
      !s.reduce_end) {
    fail(err, errlen, "sharc_plan: out of memory");
    st = SHARC_ERR_NO_MEM;
    goto done;
  }
  plan_comm_t shard_c, rep_c;
  plan_comm_make(cl, shards, 1, &shard_c);
  plan_comm_make(cl, reps, shards, &rep_c);
  /* the sharded state, laid out as the engine lays it out */
  size_t slice_total = 0, biggest = 0;
  for (int u = 0; u < nu; u++) {
    layout_t lay;
    char lerr[300];
    if (layout_unit(&m->units[u], shards, &lay, lerr, sizeof lerr) != 0) {
      snprintf(err, errlen, "sharc_plan: %s", lerr);
      st = SHARC_ERR_INVALID_ARG;
      goto done;
    }
    punit_t *U = &s.u[u];
    U->padded = lay.padded;
    U->slice = lay.slice;
    out->params += lay.numel;
    slice_total += lay.slice;
    U->first_stage = -1;
    alloc(&s, C_PSLICE, lay.slice * sizeof(float));
    alloc(&s, C_GSLICE, lay.slice * sizeof(float));
    alloc(&s, C_OPTIM, lay.slice * sizeof(float));
    if (cfg->optim.kind == SHARC_OPTIM_ADAMW)
      alloc(&s, C_OPTIM, lay.slice * sizeof(float));
    if (s.mixed)
      alloc(&s, C_PSLICE, lay.slice * sizeof(uint16_t));
    const char *al;
    plan_coll_cost(SHARC_PLAN_ALL_GATHER, &shard_c, lay.slice * s.psize,
                   &U->ag_s, &al, &U->ag_in, &U->ag_out);
    plan_coll_cost(SHARC_PLAN_REDUCE_SCATTER, &shard_c,
                   lay.slice * sizeof(float), &U->rs_s, &al, &U->rs_in,
                   &U->rs_out);
    plan_coll_cost(SHARC_PLAN_ALL_REDUCE, &rep_c, lay.slice * sizeof(float),
                   &U->ar_s, &al, &U->ar_in, &U->ar_out);
    if (lay.padded > biggest) {
      biggest = lay.padded;
      s.big = u;
    }
  }
  for (int t = 0; t < ns; t++) {
    punit_t *U = &s.u[m->stages[t].unit];
    if (U->first_stage < 0)
      U->first_stage = t;
    U->last_stage = t;
  }
  /* the largest unit's collectives: algorithm and one call's time */
  {
    punit_t *U = &s.u[s.big];
    double d1, d2;
    plan_coll_cost(SHARC_PLAN_ALL_GATHER, &shard_c, U->slice * s.psize,
                   &out->coll[0].largest_us, &out->coll[0].algo, &d1, &d2);
    plan_coll_cost(SHARC_PLAN_REDUCE_SCATTER, &shard_c,
                   U->slice * sizeof(float), &out->coll[1].largest_us,
                   &out->coll[1].algo, &d1, &d2);
    plan_coll_cost(SHARC_PLAN_ALL_REDUCE, &rep_c, U->slice * sizeof(float),
                   &out->coll[2].largest_us, &out->coll[2].algo, &d1, &d2);
    for (int c = 0; c < SHARC_PLAN_NCOLL; c++) {
      out->coll[c].largest_us *= 1e6;
      const plan_comm_t *pc = c == SHARC_PLAN_ALL_REDUCE ? &rep_c : &shard_c;
      out->coll[c].ranks = pc->ranks;
      out->coll[c].nodes = pc->nodes;
    }
  }
  /* begin_step: the peak restarts from what is held between steps */
  s.peak = s.total;
  memcpy(s.at_peak, s.now, sizeof s.now);
  int M = b->micro;
  out->micro_n = micro_n(b, 0, world);
  for (int i = 0; i < M; i++) {
    int n = micro_n(b, i, world);
    if (n > out->micro_n)
      out->micro_n = n;
    if (M > 4 && i == 2) { /* the middle ones: as micro-batch 1 */
      acc_t before = s.a;
      forward(&s, n);
      backward(&s, n, 0);
      acc_add(&s.a, &s.a, &before, (double)(M - 4));
      i = M - 2;
      continue;
    }
    forward(&s, n);
    backward(&s, n, i == M - 1);
  }
  /* eng_sync, reap, release_all */
  if (s.a.comm_free > s.a.t) {
    s.a.t_exposed += s.a.comm_free - s.a.t;
    s.a.t = s.a.comm_free;
  }
  reap(&s, 1);
  for (int u = 0; u < nu; u++)
    discard(&s, u);
  /* the statistics' all-reduces (2 doubles, blocking) and the optimizer
   * on the local slices: AdamW reads and writes master, m, v and the
   * gradient and writes the 16-bit copy, about 30 bytes an element (SGD
   * 16); offloaded, on the host at PLAN_HOST_GBS */
  {
    double d, in, o;
    const char *al;
    double sum = 0;
    plan_coll_cost(SHARC_PLAN_ALL_REDUCE, &shard_c, 16, &d, &al, &in, &o);
    sum += d;
    plan_coll_cost(SHARC_PLAN_ALL_REDUCE, &rep_c, 16, &d, &al, &in, &o);
    sum += reps > 1 ? d : 0;
    s.a.t += sum;
    s.a.t_comm += sum;
    s.a.t_exposed += sum;
    double per = cfg->optim.kind == SHARC_OPTIM_ADAMW ? 30 : 16;
    double bw = (cfg->offload ? 50.0 : cl->hbm_gbs) * 1e9;
    double opt = (double)slice_total * per / bw;
    s.a.t += opt;
    s.a.t_compute += opt;
    out->t_optim = opt;
  }
  out->cfg = *cfg;
  out->cfg.prefetch = s.prefetch;
  if (cfg->strategy == SHARC_HYBRID_SHARD ||
      cfg->strategy == SHARC_HYBRID_SHARD_ZERO2)
    out->cfg.shard_group = shards;
  out->world = world;
  out->shards = shards;
  out->replicas = reps;
  out->mem.param_slices = s.at_peak[C_PSLICE];
  out->mem.grad_slices = s.at_peak[C_GSLICE];
  out->mem.optim = s.at_peak[C_OPTIM];
  out->mem.gathered = s.at_peak[C_GATHERED];
  out->mem.unsharded_grads = s.at_peak[C_UGRAD];
  out->mem.activations = s.at_peak[C_ACT];
  out->mem.total = s.peak;
  out->mem.device = cfg->offload ? s.peak - s.at_peak[C_PSLICE] -
                                       s.at_peak[C_GSLICE] - s.at_peak[C_OPTIM]
                                 : s.peak;
  out->fits = (double)out->mem.device + PLAN_RESERVE_BYTES <=
              cl->gpu_mem_gib * 1024.0 * 1024.0 * 1024.0;
  out->bytes_intra = s.a.intra;
  out->bytes_inter = s.a.inter;
  for (int c = 0; c < SHARC_PLAN_NCOLL; c++) {
    out->coll[c].calls = (int)lround(s.a.calls[c]);
    out->coll[c].seconds = s.a.secs[c];
  }
  out->t_compute = s.a.t_compute;
  out->t_comm = s.a.t_comm;
  out->t_exposed = s.a.t_exposed;
  out->t_step = s.a.t;
  out->t_unit_fwd = s.fwd_max;
  out->t_unit_bwd = s.bwd_max;
  out->samples_per_s = s.a.t > 0 ? b->global_batch / s.a.t : 0;
  out->tokens_per_s = out->samples_per_s *
                      (pm->tokens_per_sample > 0 ? pm->tokens_per_sample : 1);
done:
  free(s.u);
  free(s.state);
  free(s.ugrad);
  free(s.fifo);
  free(s.saved);
  free(s.gather_end);
  free(s.reduce_end);
  return st;
}

void sharc_plan_cluster_default(sharc_plan_cluster_t *c) {
  /* docs/plan.md says where each number comes from */
  c->nodes = 1;
  c->gpus_per_node = 8;
  c->intra_lat_us = 3; /* NVLink/NVSwitch, one message */
  c->intra_gbs = 450;  /* NVLink 4: 900 GB/s both ways per GPU */
  c->inter_lat_us = 5; /* NDR InfiniBand through one switch tier */
  c->inter_gbs = 50;   /* NDR: 400 Gb/s per NIC, one NIC per GPU */
  c->gpu_mem_gib = 80; /* H100 SXM: 80 GB HBM3 (counted as GiB) */
  c->tflops = 400;     /* sustained: ~40% of the 989 dense bf16 peak */
  c->hbm_gbs = 3350;   /* H100 SXM HBM3 */
}

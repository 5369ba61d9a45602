/*
 * test_plan.c - the planner in one process: the published per-parameter
 * arithmetic of a 70B model (replicated, then divided by 8 under
 * FULL_SHARD), the 70B x 100,000 GPU search (timed, not asserted by wall
 * time), and refusals of bad input.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "expect.h" /* tests/unit */
#include "sharc_plan.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* |got - want| within slack bytes. */
static int near(size_t got, double want, double slack) {
  return fabs((double)got - want) <= slack;
}

static void arithmetic(void) {
  sharc_plan_builtin_t *b;
  char err[512];
  EXPECT(sharc_plan_builtin_create("gpt:70b", 0, &b, err, sizeof err) == 0,
         "%s", err);
  const sharc_plan_model_t *pm = sharc_plan_builtin_model(b);
  sharc_plan_cluster_t cl;
  sharc_plan_cluster_default(&cl);
  cl.nodes = 1;
  cl.gpus_per_node = 8;
  sharc_plan_batch_t batch = {8, 1};
  sharc_shard_config_t cfg;
  sharc_shard_config_default(&cfg);
  cfg.param_dtype = SHARC_BF16;
  cfg.checkpoint_activations = 1;
  cfg.optim.kind = SHARC_OPTIM_ADAMW;
  sharc_plan_result_t none, full;
  cfg.strategy = SHARC_NO_SHARD;
  EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &none, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  cfg.strategy = SHARC_FULL_SHARD;
  EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &full, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  double P = (double)none.params;
  /* 81 units, each allocation rounded to 64 bytes, each unit padded to a
   * multiple of 8 elements */
  double slack = 81 * 2 * 64 + 81 * 8 * 6;
  printf("gpt:70b has %.3e parameters (sharc's GPT block, 4C MLP)\n", P);
  printf("published convention (ZeRO, mixed precision Adam): bf16 weights "
         "2P = %.1f GB, bf16 grads 2P = %.1f GB, f32 master+m+v 12P = %.1f "
         "GB: 16 B/param = %.1f GB\n",
         2 * P / 1e9, 2 * P / 1e9, 12 * P / 1e9, 16 * P / 1e9);
  printf("engine's convention: params 6P (f32 master + bf16 copy) = %.1f GB, "
         "grads 4P (f32) = %.1f GB, optim 8P (f32 m, v) = %.1f GB: 18 "
         "B/param = %.1f GB\n",
         none.mem.param_slices / 1e9, none.mem.grad_slices / 1e9,
         none.mem.optim / 1e9,
         (none.mem.param_slices + none.mem.grad_slices + none.mem.optim) / 1e9);
  EXPECT(P > 6.4e10 && P < 7.1e10, "70b preset has %.3e parameters", P);
  EXPECT(near(none.mem.param_slices, 6 * P, slack), "no_shard params %zu",
         none.mem.param_slices);
  EXPECT(near(none.mem.grad_slices, 4 * P, slack), "no_shard grads %zu",
         none.mem.grad_slices);
  EXPECT(near(none.mem.optim, 8 * P, slack), "no_shard optim %zu",
         none.mem.optim);
  EXPECT(near(full.mem.param_slices, 6 * P / 8, slack), "full params %zu",
         full.mem.param_slices);
  EXPECT(near(full.mem.grad_slices, 4 * P / 8, slack), "full grads %zu",
         full.mem.grad_slices);
  EXPECT(near(full.mem.optim, 8 * P / 8, slack), "full optim %zu",
         full.mem.optim);
  printf("per GPU on 8 GPUs: no_shard %.1f GB sharded state, full_shard "
         "%.1f GB (1/8)\n",
         (none.mem.param_slices + none.mem.grad_slices + none.mem.optim) / 1e9,
         (full.mem.param_slices + full.mem.grad_slices + full.mem.optim) / 1e9);
  EXPECT(!none.fits, "70B replicated on one 80 GiB GPU cannot fit");
  /* f32 parameters: 4 + 4 + 8 = 16 B/param, no 16-bit copy */
  cfg.param_dtype = SHARC_F32;
  cfg.strategy = SHARC_NO_SHARD;
  EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &none, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  EXPECT(near(none.mem.param_slices, 4 * P, slack), "f32 params %zu",
         none.mem.param_slices);
  sharc_plan_builtin_destroy(b);
}

static void scale(void) {
  sharc_plan_builtin_t *b;
  char err[512];
  EXPECT(sharc_plan_builtin_create("gpt:70b", 0, &b, err, sizeof err) == 0,
         "%s", err);
  const sharc_plan_model_t *pm = sharc_plan_builtin_model(b);
  sharc_plan_cluster_t cl;
  sharc_plan_cluster_default(&cl);
  cl.nodes = 12500; /* 100,000 GPUs */
  sharc_plan_batch_t batch = {100000, 1};
  sharc_shard_config_t cfg;
  sharc_shard_config_default(&cfg);
  cfg.param_dtype = SHARC_BF16;
  cfg.checkpoint_activations = 1;
  sharc_plan_result_t r;
  double t0 = now_s();
  sharc_status_t st =
      sharc_plan_predict(pm, &cl, &batch, &cfg, &r, err, sizeof err);
  double t1 = now_s();
  EXPECT(st == SHARC_OK, "%s", err);
  printf("70B FULL_SHARD on 100,000 GPUs: predicted in %.4f s: step %.3f "
         "s, compute %.3f s, comm %.3f s, exposed %.3f s, %.2f GiB per GPU, "
         "all-gather by %s\n",
         t1 - t0, r.t_step, r.t_compute, r.t_comm, r.t_exposed,
         r.mem.device / 1073741824.0, r.coll[0].algo);
  EXPECT(r.t_step > 0 && r.t_step < 1e6, "step time %g", r.t_step);
  EXPECT(r.coll[0].ranks == 100000 && r.coll[0].nodes == 12500,
         "all-gather on %d ranks / %d nodes", r.coll[0].ranks, r.coll[0].nodes);
  sharc_plan_space_t sp;
  sharc_plan_space_default(&sp);
  sharc_plan_result_t *res;
  int n = 0;
  t0 = now_s();
  st = sharc_plan_search(pm, &cl, &batch, &sp, &res, &n, err, sizeof err);
  t1 = now_s();
  EXPECT(st == SHARC_OK && n > 1, "search: %s (%d)", err, n);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("search of %d configurations on 100,000 GPUs: %.4f s, max RSS %ld "
         "MiB\n",
         n, t1 - t0, ru.ru_maxrss / 1024);
  for (int i = 0; st == SHARC_OK && i < n && i < 5; i++)
    printf("  %d. %s group %d ckpt %d: step %.3f s, %.2f GiB, fits %d\n", i + 1,
           sharc_strategy_name(res[i].cfg.strategy), res[i].shards,
           res[i].cfg.checkpoint_activations, res[i].t_step,
           res[i].mem.device / 1073741824.0, res[i].fits);
  for (int i = 1; st == SHARC_OK && i < n; i++) /* ranked */
    EXPECT(res[i - 1].fits > res[i].fits ||
               (res[i - 1].fits == res[i].fits &&
                (!res[i].fits || res[i - 1].t_step <= res[i].t_step)),
           "row %d out of order", i);
  if (st == SHARC_OK)
    free(res);
  sharc_plan_builtin_destroy(b);
}

/* Calls and bytes of the schedule, counted by hand for the CNN (four
 * units, unit u used by stage u): FULL_SHARD gathers each unit in forward
 * and again in backward, except the last stage's, which goes straight on
 * into backward, and reduce-scatters each once; GRAD_OP keeps every unit
 * gathered from forward to backward; a ring all-gather or reduce-scatter
 * of a per-rank block b on n ranks sends (n-1) b per rank; HYBRID adds an
 * all-reduce of each gradient slice across the replicas. */
static void schedule(void) {
  sharc_plan_builtin_t *b;
  char err[512];
  EXPECT(sharc_plan_builtin_create("cnn", 0, &b, err, sizeof err) == 0, "%s",
         err);
  const sharc_plan_model_t *pm = sharc_plan_builtin_model(b);
  const sharc_model_t *m = pm->model;
  sharc_plan_cluster_t cl;
  sharc_plan_cluster_default(&cl);
  cl.nodes = 1;
  cl.gpus_per_node = 4;
  sharc_plan_batch_t batch = {8, 1};
  sharc_shard_config_t cfg;
  sharc_shard_config_default(&cfg);
  double slices = 0, slices2 = 0; /* elements of one rank's slices: 4, 2 */
  double last = 0, last2 = 0;     /* the last unit's, over 4 and over 2 */
  for (int u = 0; u < m->nunits; u++) {
    size_t numel = 0;
    for (int k = 0; k < m->units[u].nparams; k++)
      numel += sharc_param_numel(&m->units[u].params[k]);
    slices += (double)((numel + 3) / 4);
    slices2 += (double)((numel + 1) / 2);
    last = (double)((numel + 3) / 4);
    last2 = (double)((numel + 1) / 2);
  }
  sharc_plan_result_t r;
  for (int dt = 0; dt < 2; dt++) {
    cfg.param_dtype = dt ? SHARC_BF16 : SHARC_F32;
    double ps = dt ? 2 : 4;
    cfg.strategy = SHARC_FULL_SHARD;
    EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &r, err, sizeof err) ==
               SHARC_OK,
           "%s", err);
    EXPECT(r.coll[0].calls == 7 && r.coll[1].calls == 4 && r.coll[2].calls == 0,
           "full: %d all-gathers, %d reduce-scatters, %d all-reduces",
           r.coll[0].calls, r.coll[1].calls, r.coll[2].calls);
    double want = 3 * (slices * (2 * ps + 4) - last * ps);
    EXPECT(fabs(r.bytes_intra - want) < 1 && r.bytes_inter == 0,
           "full %s: %.0f bytes within the node, %.0f between; expected %.0f "
           "and 0",
           dt ? "bf16" : "f32", r.bytes_intra, r.bytes_inter, want);
    EXPECT(r.t_exposed > 0 && r.t_exposed <= r.t_comm + 1e-12 &&
               fabs(r.t_step - r.t_compute - r.t_exposed) < 1e-9,
           "step %g = compute %g + exposed %g (comm %g)", r.t_step, r.t_compute,
           r.t_exposed, r.t_comm);
    cfg.strategy = SHARC_SHARD_GRAD_OP;
    EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &r, err, sizeof err) ==
               SHARC_OK,
           "%s", err);
    EXPECT(r.coll[0].calls == 4 && r.coll[1].calls == 4,
           "grad_op: %d all-gathers, %d reduce-scatters", r.coll[0].calls,
           r.coll[1].calls);
    EXPECT(fabs(r.bytes_intra - 3 * slices * (ps + 4)) < 1,
           "grad_op %s: %.0f bytes", dt ? "bf16" : "f32", r.bytes_intra);
  }
  /* hybrid on 2 nodes x 2: groups within a node, replicas across */
  cl.nodes = 2;
  cl.gpus_per_node = 2;
  cfg.param_dtype = SHARC_F32;
  cfg.strategy = SHARC_HYBRID_SHARD;
  cfg.shard_group = 2;
  EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &r, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  EXPECT(r.shards == 2 && r.replicas == 2 && r.coll[2].calls == 4 &&
             r.coll[2].nodes == 2 && r.coll[0].nodes == 1,
         "hybrid: %d shards, %d replicas, %d all-reduces on %d nodes, "
         "gathers on %d nodes",
         r.shards, r.replicas, r.coll[2].calls, r.coll[2].nodes,
         r.coll[0].nodes);
  double hyb = slices2 * (2 * 4 + 4) - last2 * 4; /* (n-1) = 1 */
  EXPECT(fabs(r.bytes_inter - slices2 * 4) < 1 && fabs(r.bytes_intra - hyb) < 1,
         "hybrid: %.0f bytes between nodes (expected %.0f), %.0f within "
         "(expected %.0f)",
         r.bytes_inter, slices2 * 4, r.bytes_intra, hyb);
  sharc_plan_builtin_destroy(b);
}

static void refusals(void) {
  sharc_plan_builtin_t *b;
  char err[512];
  EXPECT(sharc_plan_builtin_create("gpt:huge", 0, &b, err, sizeof err) != 0 &&
             strstr(err, "L,C,H,V,T"),
         "bad preset: '%s'", err);
  EXPECT(sharc_plan_builtin_create("gpt:12,100,7,256,16", 0, &b, err,
                                   sizeof err) != 0 &&
             strstr(err, "divisible"),
         "heads not dividing channels: '%s'", err);
  EXPECT(sharc_plan_builtin_create("resnet", 0, &b, err, sizeof err) != 0 &&
             strstr(err, "resnet"),
         "unknown model: '%s'", err);
  EXPECT(sharc_plan_builtin_create("gpt:tiny", 0, &b, err, sizeof err) == 0,
         "%s", err);
  const sharc_plan_model_t *pm = sharc_plan_builtin_model(b);
  sharc_plan_cluster_t cl;
  sharc_plan_cluster_default(&cl);
  sharc_plan_batch_t batch = {8, 1};
  sharc_shard_config_t cfg;
  sharc_shard_config_default(&cfg);
  sharc_plan_result_t r;
  cfg.strategy = SHARC_HYBRID_SHARD;
  cfg.shard_group = 3;
  EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &r, err, sizeof err) ==
                 SHARC_ERR_INVALID_ARG &&
             strstr(err, "shard group of 3"),
         "group 3 of 8: '%s'", err);
  cfg.shard_group = 0;
  batch.micro = 9;
  EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &r, err, sizeof err) ==
                 SHARC_ERR_INVALID_ARG &&
             strstr(err, "micro-batches"),
         "9 micro-batches of 8: '%s'", err);
  batch.micro = 1;
  cl.inter_gbs = 0;
  EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &r, err, sizeof err) ==
                 SHARC_ERR_INVALID_ARG &&
             strstr(err, "bandwidths"),
         "zero bandwidth: '%s'", err);
  sharc_plan_builtin_destroy(b);
}

int main(void) {
  arithmetic();
  scale();
  schedule();
  refusals();
  printf("%d passed, %d failed\n%s\n", passed, failed,
         failed ? "FAIL" : "PASS");
  return failed ? 1 : 0;
}

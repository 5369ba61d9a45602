/*
 * test_calib.c - the planner's calibration in one process: synthetic
 * sharc-bench JSON made from known links through the cost model's
 * formulas (ring within a host, hierarchical across two) must give those
 * links back; a synthetic sharc-train log made from a prediction must
 * give its FLOP/s and memory rate back; bad files are refused with a
 * message that names the problem.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h" /* tests/unit */
#include "sharc_plan.h"

static int close_rel(double got, double want, double tol) {
  return fabs(got - want) <= tol * fabs(want);
}

/* Appends printf-style text to buf (cap bytes). */
static void add(char *buf, size_t cap, const char *fmt, double a, double b,
                double c) {
  size_t n = strlen(buf);
  snprintf(buf + n, cap - n, fmt, a, b, c);
}

/* A sharc-bench -J text of n ranks on h hosts, rows made by time_us(coll,
 * per-rank or vector bytes); sizes 64 B .. 16 MB by 4. */
static char *bench_json(int n, int h, double (*time_us)(int, double)) {
  size_t cap = 1 << 16;
  char *t = calloc(cap, 1);
  const char *names[] = {"all_gather", "reduce_scatter", "all_reduce"};
  add(t, cap,
      "{\"nranks\": %g, \"nhosts\": %g, \"backend\": \"sharc\", "
      "\"limits\": {\"memcpy_1core\": %g}, \"results\": [\n",
      n, h, 10.0);
  /* rows the reader must skip: size 0, another backend, another
   * collective, a wrong result */
  add(t, cap,
      " {\"backend\": \"sharc\", \"collective\": \"all_gather\", \"size\": "
      "%g, \"count\": 0, \"time_us\": %g, \"wrong\": %g},\n",
      0, 0.04, 0);
  add(t, cap,
      " {\"backend\": \"mpi\", \"collective\": \"all_gather\", \"size\": %g, "
      "\"time_us\": %g, \"wrong\": %g},\n",
      4096, 1e6, 0);
  add(t, cap,
      " {\"backend\": \"sharc\", \"collective\": \"broadcast\", \"size\": "
      "%g, \"time_us\": %g, \"wrong\": %g},\n",
      4096, 1e6, 0);
  add(t, cap,
      " {\"backend\": \"sharc\", \"collective\": \"all_reduce\", \"size\": "
      "%g, \"time_us\": %g, \"wrong\": %g},\n",
      4096, 1e6, 3);
  for (int c = 0; c < (h > 1 ? 2 : 3); c++)
    for (double size = 64 * n; size <= 16.0 * 1024 * 1024; size *= 4) {
      double b = c == 2 ? size : size / n;
      size_t k = strlen(t);
      snprintf(t + k, cap - k,
               " {\"backend\": \"sharc\", \"collective\": \"%s\", "
               "\"size\": %.0f, \"count\": %.0f, \"type\": \"float\", "
               "\"time_us\": %.6f, \"wrong\": -1, \"algbw\": null},\n",
               names[c], size, b / 4, time_us(c, b));
    }
  size_t k = strlen(t);
  t[k - 2] = '\n'; /* no comma after the last row */
  t[k - 1] = ']';
  add(t, cap, "}\n", 0, 0, 0);
  return t;
}

/* The links the synthetic files are made from. */
#define A_IN 2.5  /* us */
#define B_IN 12.0 /* GB/s per rank */
#define A_NET 7.0 /* us */
#define B_NIC 3.0 /* GB/s per rank's NIC */
#define N_IN 4    /* ranks of the one-host file */
#define H_NET 2   /* hosts of the several-host file */
#define L_NET 2   /* ranks per host there */

/* Ring on one host (cost.c: all-gather and reduce-scatter (n-1)(a + b/B),
 * all-reduce 2(n-1)(a + B/n/B)): what the runtime runs when its model
 * has (almost) no latency. */
static double ring_us(int coll, double b) {
  double bw = B_IN * 1e3, n = N_IN;
  if (coll == 2)
    return 2 * (n - 1) * (A_IN + b / n / bw);
  return (n - 1) * (A_IN + b / bw);
}

/* Hierarchical on H_NET hosts of L_NET (cost.c hier_cost), the host's
 * link being its L_NET NICs. */
static double hier_us(int coll, double b) {
  double bw = B_IN * 1e3, nbw = B_NIC * L_NET * 1e3, h = H_NET, L = L_NET;
  if (coll == 0)
    return (A_NET + (h - 1) * L * b / nbw) + (L - 1) * (A_IN + h * b / bw);
  return (L - 1) * (A_IN + h * b / bw) + (h - 1) * (A_NET + L * b / nbw);
}

static void intra_fit(void) {
  char *t = bench_json(N_IN, 1, ring_us), err[512];
  sharc_plan_sample_t *s;
  int n;
  EXPECT(sharc_plan_bench_parse(t, strlen(t), &s, &n, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  free(t);
  EXPECT(n == 3 * 9, "%d samples, want 27 (the odd rows skipped)", n);
  EXPECT(s[0].coll == SHARC_PLAN_ALL_GATHER && s[0].bytes == 64 &&
             s[0].ranks == N_IN && s[0].nodes == 1,
         "first sample: coll %d, %zu bytes, %d ranks, %d nodes", s[0].coll,
         s[0].bytes, s[0].ranks, s[0].nodes);
  sharc_plan_runtime_t rt;
  sharc_plan_runtime_default(&rt);
  rt.alpha_us = 1e-9; /* the runtime then picks ring everywhere */
  sharc_plan_fit_t f;
  EXPECT(sharc_plan_fit_link(s, n, 0, NULL, &rt, &f, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  printf("intra fit: %.6f us (want %g), %.6f GB/s (want %g), rms %.2e, "
         "%d samples\n",
         f.lat_us, A_IN, f.gbs, B_IN, f.rms_rel, f.used);
  EXPECT(close_rel(f.lat_us, A_IN, 1e-6) && close_rel(f.gbs, B_IN, 1e-6),
         "fit %g us %g GB/s", f.lat_us, f.gbs);
  EXPECT(f.rms_rel < 1e-6 && !f.lat_clamped && f.used == n, "rms %g",
         f.rms_rel);
  for (int i = 0; i < n; i++)
    EXPECT(!strcmp(s[i].algo, "ring") || !strcmp(s[i].algo, "hier"),
           "sample %d: algo %s", i, s[i].algo);
  /* with the runtime's defaults (4 us, 5 GB/s) small messages run the
   * tree family: the fit charges them that formula, so ring-made times
   * no longer fit exactly */
  sharc_plan_runtime_default(&rt);
  EXPECT(sharc_plan_fit_link(s, n, 0, NULL, &rt, &f, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  EXPECT(!strcmp(s[0].algo, "tree") && !strcmp(s[n - 1].algo, "ring"),
         "defaults: %s at 64 B, %s at 16 MB", s[0].algo, s[n - 1].algo);
  /* one size only: nothing to separate latency from bandwidth */
  EXPECT(sharc_plan_fit_link(s, 1, 0, NULL, &rt, &f, err, sizeof err) ==
                 SHARC_ERR_INVALID_ARG &&
             strstr(err, "two sizes"),
         "one sample: '%s'", err);
  /* times that shrink with size give no bandwidth */
  for (int i = 0; i < n; i++)
    s[i].seconds = 1e-3 / (double)s[i].bytes;
  EXPECT(sharc_plan_fit_link(s, n, 0, NULL, &rt, &f, err, sizeof err) ==
                 SHARC_ERR_INVALID_ARG &&
             strstr(err, "no positive bandwidth"),
         "shrinking times: '%s'", err);
  /* no one-host sample: the intra fit says what it needs */
  for (int i = 0; i < n; i++)
    s[i].nodes = 2;
  EXPECT(sharc_plan_fit_link(s, n, 0, NULL, &rt, &f, err, sizeof err) ==
                 SHARC_ERR_INVALID_ARG &&
             strstr(err, "one host"),
         "no one-host rows: '%s'", err);
  free(s);
}

static void inter_fit(void) {
  char *t = bench_json(H_NET * L_NET, H_NET, hier_us), err[512];
  sharc_plan_sample_t *s;
  int n;
  EXPECT(sharc_plan_bench_parse(t, strlen(t), &s, &n, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  free(t);
  sharc_plan_cluster_t cl;
  sharc_plan_cluster_default(&cl);
  cl.intra_lat_us = A_IN; /* as an intra fit would have set it */
  cl.intra_gbs = B_IN;
  sharc_plan_runtime_t rt;
  sharc_plan_runtime_default(&rt);
  sharc_plan_fit_t f;
  EXPECT(sharc_plan_fit_link(s, n, 1, &cl, &rt, &f, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  printf("inter fit: %.6f us (want %g), %.6f GB/s per NIC (want %g), rms "
         "%.2e, %d samples, algorithm %s\n",
         f.lat_us, A_NET, f.gbs, B_NIC, f.rms_rel, f.used, s[0].algo);
  EXPECT(!strcmp(s[0].algo, "hier"), "algo %s", s[0].algo);
  EXPECT(close_rel(f.lat_us, A_NET, 1e-6) && close_rel(f.gbs, B_NIC, 1e-6),
         "fit %g us %g GB/s", f.lat_us, f.gbs);
  free(s);
}

static void bad_files(void) {
  const char *cases[][2] = {
      {"", "not a sharc-bench -J file"},
      {"nonsense", "not a sharc-bench -J file"},
      {"{\"nranks\": 4, \"nhosts\": 1, \"results\": [", "unexpected end"},
      {"{\"nranks\": 4}", "no \"nranks\", \"nhosts\" and \"results\""},
      {"[1, 2]", "no \"nranks\""},
      {"{\"nranks\": 1, \"nhosts\": 1, \"results\": []}", "at least 2 ranks"},
      {"{\"nranks\": 4, \"nhosts\": 1, \"results\": [{\"backend\": \"mpi\", "
       "\"collective\": \"all_gather\", \"size\": 64, \"time_us\": 3}]}",
       "1 of another backend"},
      {"{\"nranks\": 4, \"nhosts\": 1, \"results\": []} x",
       "text after the value"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sharc_plan_sample_t *s = (sharc_plan_sample_t *)1;
    int n = 7;
    char err[512] = "";
    sharc_status_t st = sharc_plan_bench_parse(cases[i][0], strlen(cases[i][0]),
                                               &s, &n, err, sizeof err);
    EXPECT(
        st == SHARC_ERR_INVALID_ARG && strstr(err, cases[i][1]) && !s && n == 0,
        "bench text %zu: status %d, '%s', want '%s'", i, st, err, cases[i][1]);
    printf("refused bench text %zu: %s\n", i, err);
  }
  sharc_plan_train_log_t lg;
  char err[512] = "";
  const char *no_steps = "{\"test_loss\":0.25}\n\n";
  EXPECT(sharc_plan_train_parse(no_steps, strlen(no_steps), 1, &lg, err,
                                sizeof err) == SHARC_ERR_INVALID_ARG &&
             strstr(err, "step record"),
         "no step lines: '%s'", err);
  const char *broken = "{\"step\":1,\"time_s\":0.1,\"t_compute\":0.05,"
                       "\"ranks\":2}\n{\"step\":2,\"ti";
  EXPECT(sharc_plan_train_parse(broken, strlen(broken), 1, &lg, err,
                                sizeof err) == SHARC_ERR_INVALID_ARG &&
             strstr(err, "line 2"),
         "broken line: '%s'", err);
}

static void compute_fit(void) {
  sharc_plan_builtin_t *b;
  char err[512];
  EXPECT(sharc_plan_builtin_create("cnn", 0, &b, err, sizeof err) == 0, "%s",
         err);
  const sharc_plan_model_t *pm = sharc_plan_builtin_model(b);
  sharc_plan_cluster_t cl;
  sharc_plan_cluster_default(&cl);
  cl.gpus_per_node = 1;
  sharc_plan_batch_t batch = {64, 1};
  sharc_shard_config_t cfg;
  sharc_shard_config_default(&cfg); /* full, f32, AdamW */
  const double tf = 0.04, hbm = 3.0;
  sharc_plan_result_t r, r0;
  cl.tflops = tf;
  cl.hbm_gbs = hbm;
  EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &r, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  cl.hbm_gbs = 1e12; /* the optimizer's time gone: forward and backward */
  EXPECT(sharc_plan_predict(pm, &cl, &batch, &cfg, &r0, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  /* a log of three steps as sharc-train writes them: the first slower
   * (left out by the median), t_compute without the optimizer */
  char text[2048] = "";
  for (int i = 1; i <= 3; i++) {
    double slow = i == 1 ? 3 : 1;
    size_t k = strlen(text);
    snprintf(text + k, sizeof text - k,
             "{\"step\":%d,\"loss\":2.3,\"time_s\":%.9g,\"samples_per_s\":"
             "%.9g,\"t_compute\":%.9g,\"t_comm\":0,\"t_exposed\":%.9g,"
             "\"ranks\":1,\"strategy\":\"full\"}\n",
             i, r.t_step * slow, 64 / (r.t_step * slow), r0.t_compute * slow,
             r.t_exposed);
  }
  strcat(text, "{\"test_loss\":0.3,\"test_accuracy\":0.9}\n");
  sharc_plan_train_log_t lg;
  EXPECT(sharc_plan_train_parse(text, strlen(text), 1, &lg, err, sizeof err) ==
             SHARC_OK,
         "%s", err);
  EXPECT(lg.steps == 3 && lg.ranks == 1 && lg.global_batch == 64 &&
             lg.strategy == SHARC_FULL_SHARD &&
             close_rel(lg.t_step, r.t_step, 1e-6),
         "log: %d steps, %d ranks, batch %d, step %g", lg.steps, lg.ranks,
         lg.global_batch, lg.t_step);
  double ftf, fhbm;
  EXPECT(sharc_plan_fit_compute(pm, &cl, &batch, &cfg, &lg, &ftf, &fhbm, err,
                                sizeof err) == SHARC_OK,
         "%s", err);
  printf("compute fit: %.6g TFLOP/s (want %g), %.6g GB/s (want %g)\n", ftf, tf,
         fhbm, hbm);
  EXPECT(close_rel(ftf, tf, 1e-5) && close_rel(fhbm, hbm, 1e-5),
         "fit %g TFLOP/s %g GB/s", ftf, fhbm);
  /* the log's world and strategy must be the configuration's */
  cl.gpus_per_node = 2;
  EXPECT(sharc_plan_fit_compute(pm, &cl, &batch, &cfg, &lg, &ftf, &fhbm, err,
                                sizeof err) == SHARC_ERR_INVALID_ARG &&
             strstr(err, "1 ranks"),
         "world mismatch: '%s'", err);
  cl.gpus_per_node = 1;
  cfg.strategy = SHARC_SHARD_GRAD_OP;
  EXPECT(sharc_plan_fit_compute(pm, &cl, &batch, &cfg, &lg, &ftf, &fhbm, err,
                                sizeof err) == SHARC_ERR_INVALID_ARG &&
             strstr(err, "strategy full"),
         "strategy mismatch: '%s'", err);
  /* a log of images against a GPT */
  sharc_plan_builtin_t *g;
  EXPECT(sharc_plan_builtin_create("gpt:tiny", 0, &g, err, sizeof err) == 0,
         "%s", err);
  cfg.strategy = SHARC_FULL_SHARD;
  EXPECT(sharc_plan_fit_compute(sharc_plan_builtin_model(g), &cl, &batch, &cfg,
                                &lg, &ftf, &fhbm, err,
                                sizeof err) == SHARC_ERR_INVALID_ARG &&
             strstr(err, "give the run's --model"),
         "model mismatch: '%s'", err);
  sharc_plan_builtin_destroy(g);
  sharc_plan_builtin_destroy(b);
}

int main(void) {
  intra_fit();
  inter_fit();
  bad_files();
  compute_fit();
  printf("%d passed, %d failed\n%s\n", passed, failed,
         failed ? "FAIL" : "PASS");
  return failed ? 1 : 0;
}

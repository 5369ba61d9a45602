/*
 * test_gpt_cuda.c - gpt_cuda_model (models/gpt_cuda.cu), the GPT decoder on
 * a CUDA device, against the host f32 callbacks of gpt_model and the f64
 * reference (gpt_trace_f64), on the "tiny" preset and an odd shape (V 37
 * T 5 L 1 H 3 C 12) for n = 0, 1 and 3 sequences:
 *  - the two models describe the same network (name, units, stages,
 *    kinds, parameter specs; the device model is SHARC_DEVICE_CUDA);
 *  - every stage's forward and backward runs on both with the same
 *    parameters (sharc_param_init_value; its zero and one tensors get a
 *    small sharc_param_init_value perturbation, so that biases and gains
 *    matter) and the same nonzero starting gradients (the callbacks ADD);
 *    tokens repeat (the wte gradient's scatter), and half the targets are
 *    the f64 model's argmax (so the argmax count is not trivially 0);
 *  - each stage's output, each stage's input gradient, every gradient
 *    tensor and the loss are checked against the f64 chain; the argmax
 *    count must equal the host's, unless a row is a near tie;
 *  - a second device run gives the same bits (no atomics, fixed order);
 *  - a token or target outside [0, V) fails the call.
 *
 * The tolerance is derived, not tuned. For each tensor (or the loss), with
 * r the f64 values, h the host's and d the device's:
 *
 *     |d_i - r_i| <= 2 max_j |h_j - r_j| + 16 u max_j |r_j|,  u = 2^-24
 *
 * The host f32 model's own error is the scale of what f32 arithmetic on
 * this chain costs; the device does the same operations in another GEMM
 * order, so its error may be of the same size (the 2 allows for the two
 * orders' errors not aligning). The second term covers what the first can
 * miss when the host is exact by luck: a few ulps of the tensor's largest
 * value, for the last-ulp differences of CUDA's expf and logf (2 ulp at
 * most) carried through a few dependent roundings. The argmax count may
 * differ from the host's only by the rows whose target logit is within
 * 1e-4 of another logit in f64 (a near tie either model may break).
 *
 * The test reads results only after cudaStreamSynchronize on a
 * non-blocking stream of its own. Without a usable CUDA device it prints
 * one SKIP line and exits 77.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ok.h"
#include "gpt.h"

static int passed, failed, verbose;

static const double U = 0x1p-24; /* f32 unit roundoff */
static const uint64_t SEED = 1234;

static void *xalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "FAIL: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

/* 64-byte aligned host memory, zeroed. */
static void *halloc(size_t bytes) {
  size_t sz = (bytes + 63) / 64 * 64 + 64;
  void *p = aligned_alloc(64, sz);
  if (!p) {
    fprintf(stderr, "FAIL: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  memset(p, 0, sz);
  return p;
}

static void *dalloc(size_t bytes) {
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, bytes ? bytes : 1));
  CUDA_OK(cudaMemset(p, 0, bytes ? bytes : 1));
  return p;
}

static uint64_t rng_state;
static uint32_t rng(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

/* ---- one model's run over every stage ------------------------------------ */

typedef struct {
  float **out; /* [stage] (n,T,C) host copies; the last: unused */
  double stats[SHARC_STAGE_STATS];
  float **din;   /* [stage] (n,T,C); [0] unused */
  float **grads; /* [unit] flat gradients */
} result_t;

typedef struct {
  const gpt_t *g;
  int ns, nu, n, global_n;
  size_t act;              /* n*T*C */
  size_t *numel;           /* [unit] */
  float **params, **grad0; /* [unit] host */
  const int32_t *x, *y;
} setup_t;

static void result_alloc(const setup_t *s, result_t *r) {
  r->out = xalloc((size_t)s->ns * sizeof *r->out);
  r->din = xalloc((size_t)s->ns * sizeof *r->din);
  r->grads = xalloc((size_t)s->nu * sizeof *r->grads);
  for (int i = 0; i < s->ns; i++) {
    r->out[i] = xalloc(s->act * sizeof(float));
    r->din[i] = xalloc(s->act * sizeof(float));
  }
  for (int u = 0; u < s->nu; u++)
    r->grads[u] = xalloc(s->numel[u] * sizeof(float));
}

static void result_free(const setup_t *s, result_t *r) {
  for (int i = 0; i < s->ns; i++) {
    free(r->out[i]);
    free(r->din[i]);
  }
  for (int u = 0; u < s->nu; u++)
    free(r->grads[u]);
  free(r->out);
  free(r->din);
  free(r->grads);
}

/* Tensor k of unit u starts this many elements into the flat buffer. */
static size_t tensor_off(const sharc_unit_spec_t *u, int k) {
  size_t off = 0;
  for (int j = 0; j < k; j++)
    off += sharc_param_numel(&u->params[j]);
  return off;
}

/* Runs forward over every stage, then backward, with model m; dev: its
 * buffers are device memory and the work goes on stream. Returns 0, or
 * the first nonzero callback return. */
static int run_model(const setup_t *s, const sharc_model_t *m, int dev,
                     cudaStream_t stream, result_t *r) {
  int ns = s->ns, n = s->n, rc = 0;
  void **out = xalloc((size_t)ns * sizeof *out);
  void **saved = xalloc((size_t)ns * sizeof *saved);
  void **din = xalloc((size_t)ns * sizeof *din);
  float **par = xalloc((size_t)s->nu * sizeof *par);
  float **gr = xalloc((size_t)s->nu * sizeof *gr);
  size_t nscratch = 0;
  for (int i = 0; i < ns; i++) {
    size_t o = i == ns - 1 ? SHARC_STAGE_STATS * sizeof(double)
                           : m->out_bytes(m->ctx, i, n);
    size_t sv = m->saved_bytes(m->ctx, i, n),
           sc = m->scratch_bytes(m->ctx, i, n);
    nscratch = sc > nscratch ? sc : nscratch;
    out[i] = dev ? dalloc(o) : halloc(o);
    saved[i] = dev ? dalloc(sv) : halloc(sv);
    din[i] =
        dev ? dalloc(s->act * sizeof(float)) : halloc(s->act * sizeof(float));
  }
  void *scratch = dev ? dalloc(nscratch) : halloc(nscratch);
  for (int u = 0; u < s->nu; u++) {
    size_t b = s->numel[u] * sizeof(float);
    par[u] = dev ? dalloc(b) : halloc(b);
    gr[u] = dev ? dalloc(b) : halloc(b);
    if (dev) {
      CUDA_OK(cudaMemcpy(par[u], s->params[u], b, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(gr[u], s->grad0[u], b, cudaMemcpyHostToDevice));
    } else {
      memcpy(par[u], s->params[u], b);
      memcpy(gr[u], s->grad0[u], b);
    }
  }
  /* the copies from pageable memory may land after cudaMemcpy returned;
   * the non-blocking stream does not wait for them */
  if (dev)
    CUDA_OK(cudaDeviceSynchronize());
  sharc_batch_t batch = {
      .n = n, .global_n = s->global_n, .x = s->x, .y = s->y, .training = 1};
  for (int pass = 0; pass < 2 && rc == 0; pass++)
    for (int i = 0; i < ns && rc == 0; i++) {
      int st = pass ? ns - 1 - i : i, u = m->stages[st].unit;
      const sharc_unit_spec_t *us = &m->units[u];
      const float *pp[SHARC_UNIT_MAX_PARAMS];
      float *gp[SHARC_UNIT_MAX_PARAMS];
      for (int k = 0; k < us->nparams; k++) {
        pp[k] = par[u] + tensor_off(us, k);
        gp[k] = gr[u] + tensor_off(us, k);
      }
      sharc_stage_call_t c = {.stage = st,
                              .unit = u,
                              .kind = m->stages[st].kind,
                              .batch = &batch,
                              .params = pp,
                              .grads = pass ? gp : NULL,
                              .in = st ? out[st - 1] : (const void *)s->x,
                              .out = out[st],
                              .dout = pass && st < ns - 1 ? din[st + 1] : NULL,
                              .din = pass && st ? din[st] : NULL,
                              .saved = saved[st],
                              .scratch = scratch,
                              .cuda_stream = dev ? (void *)stream : NULL};
      rc = pass ? m->backward(m->ctx, &c) : m->forward(m->ctx, &c);
    }
  if (dev)
    CUDA_OK(cudaStreamSynchronize(stream));
  size_t ab = s->act * sizeof(float);
  for (int i = 0; i < ns && rc == 0; i++) {
    void *dst = i == ns - 1 ? (void *)r->stats : (void *)r->out[i];
    size_t b = i == ns - 1 ? sizeof r->stats : ab;
    if (dev) {
      CUDA_OK(cudaMemcpy(dst, out[i], b, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(r->din[i], din[i], ab, cudaMemcpyDeviceToHost));
    } else {
      memcpy(dst, out[i], b);
      memcpy(r->din[i], din[i], ab);
    }
  }
  for (int u = 0; u < s->nu && rc == 0; u++) {
    size_t b = s->numel[u] * sizeof(float);
    if (dev)
      CUDA_OK(cudaMemcpy(r->grads[u], gr[u], b, cudaMemcpyDeviceToHost));
    else
      memcpy(r->grads[u], gr[u], b);
  }
  for (int i = 0; i < ns; i++) {
    if (dev) {
      CUDA_OK(cudaFree(out[i]));
      CUDA_OK(cudaFree(saved[i]));
      CUDA_OK(cudaFree(din[i]));
    } else {
      free(out[i]);
      free(saved[i]);
      free(din[i]);
    }
  }
  for (int u = 0; u < s->nu; u++) {
    if (dev) {
      CUDA_OK(cudaFree(par[u]));
      CUDA_OK(cudaFree(gr[u]));
    } else {
      free(par[u]);
      free(gr[u]);
    }
  }
  if (dev)
    CUDA_OK(cudaFree(scratch));
  else
    free(scratch);
  free(out);
  free(saved);
  free(din);
  free(par);
  free(gr);
  return rc;
}

/* ---- comparisons --------------------------------------------------------- */

static double worst_ratio; /* largest |d - r| / bound seen */

/* The rule of the file-top comment over count values. */
static void compare(const char *what, const float *h, const float *d,
                    const double *r, size_t count) {
  double herr = 0, mag = 0, derr = 0;
  size_t at = 0;
  for (size_t i = 0; i < count; i++) {
    herr = fmax(herr, fabs((double)h[i] - r[i]));
    mag = fmax(mag, fabs(r[i]));
  }
  double bound = 2 * herr + 16 * U * mag;
  for (size_t i = 0; i < count; i++) {
    double e = fabs((double)d[i] - r[i]);
    if (e > derr || isnan(e))
      derr = e, at = i;
  }
  if (count && bound > 0)
    worst_ratio = fmax(worst_ratio, derr / bound);
  if (verbose)
    printf("  %-28s %6zu  host err %.3g  device err %.3g  bound %.3g\n", what,
           count, herr, derr, bound);
  CHECK(derr <= bound,
        "%s: element %zu of %zu: device %.9g, host %.9g, f64 %.9g: device "
        "error %.3g > bound %.3g (host error %.3g, max |f64| %.3g)",
        what, at, count, count ? d[at] : 0.0, count ? h[at] : 0.0,
        count ? r[at] : 0.0, derr, bound, herr, mag);
}

/* Rows whose target's f64 logit is within 1e-4 of another's: the argmax
 * there is a near tie. Also sets y[i] for even i to the f64 argmax when
 * pick (before the real run). x is the head's f64 input (n,T,C). */
static int head_ties(const gpt_t *g, const double *p0, const double *x,
                     int32_t *y, int n, int pick) {
  const gpt_config_t *f = gpt_config(g);
  size_t C = (size_t)f->channels, V = (size_t)f->vocab;
  size_t N = (size_t)n * (size_t)f->ctx;
  const double *wte = p0, *lw = p0 + V * C + (size_t)f->ctx * C, *lb = lw + C;
  double *ln = xalloc(C * sizeof(double)), *lg = xalloc(V * sizeof(double));
  int ties = 0;
  for (size_t i = 0; i < N; i++) {
    const double *r = x + i * C;
    double m = 0, v = 0;
    for (size_t c = 0; c < C; c++)
      m += r[c];
    m /= (double)C;
    for (size_t c = 0; c < C; c++)
      v += (r[c] - m) * (r[c] - m);
    v /= (double)C;
    for (size_t c = 0; c < C; c++)
      ln[c] = (r[c] - m) / sqrt(v + 1e-5) * lw[c] + lb[c];
    size_t am = 0;
    for (size_t k = 0; k < V; k++) {
      lg[k] = 0;
      for (size_t c = 0; c < C; c++)
        lg[k] += ln[c] * wte[k * C + c];
      if (lg[k] > lg[am])
        am = k;
    }
    if (pick && i % 2 == 0)
      y[i] = (int32_t)am;
    for (size_t k = 0; k < V; k++)
      if (k != (size_t)y[i] && fabs(lg[k] - lg[y[i]]) < 1e-4) {
        ties++;
        break;
      }
  }
  free(ln);
  free(lg);
  return ties;
}

/* ---- one configuration and n --------------------------------------------- */

static void test_case(const char *name, const gpt_config_t *cfg, int n,
                      cudaStream_t stream) {
  char err[256];
  gpt_t *g = NULL;
  if (gpt_create(&g, cfg, err, sizeof err) != 0) {
    CHECK(0, "%s: gpt_create: %s", name, err);
    return;
  }
  const sharc_model_t *hm = gpt_model(g);
  const sharc_model_t *dm = gpt_cuda_model(g, err, sizeof err);
  if (!dm) {
    CHECK(0, "%s: gpt_cuda_model: %s", name, err);
    gpt_destroy(g);
    return;
  }
  CHECK(gpt_cuda_model(g, NULL, 0) == dm, "%s: second call, other model", name);
  /* the same network */
  CHECK(strcmp(dm->name, hm->name) == 0 && dm->nunits == hm->nunits &&
            dm->nstages == hm->nstages && dm->device == SHARC_DEVICE_CUDA &&
            hm->device == SHARC_DEVICE_HOST,
        "%s: model description differs", name);
  for (int i = 0; i < hm->nstages && i < dm->nstages; i++)
    CHECK(dm->stages[i].unit == hm->stages[i].unit &&
              dm->stages[i].kind == hm->stages[i].kind,
          "%s: stage %d differs", name, i);
  for (int u = 0; u < hm->nunits && u < dm->nunits; u++) {
    const sharc_unit_spec_t *a = &hm->units[u], *b = &dm->units[u];
    int same = strcmp(a->name, b->name) == 0 && a->nparams == b->nparams;
    for (int k = 0; same && k < a->nparams; k++)
      same = strcmp(a->params[k].name, b->params[k].name) == 0 &&
             a->params[k].ndim == b->params[k].ndim &&
             memcmp(a->params[k].shape, b->params[k].shape,
                    sizeof a->params[k].shape) == 0 &&
             a->params[k].init == b->params[k].init &&
             a->params[k].init_scale == b->params[k].init_scale &&
             a->params[k].no_decay == b->params[k].no_decay;
    CHECK(same, "%s: unit %d differs", name, u);
  }

  setup_t s = {
      .g = g, .ns = hm->nstages, .nu = hm->nunits, .n = n, .global_n = n + 2};
  s.act = (size_t)n * (size_t)cfg->ctx * (size_t)cfg->channels;
  s.numel = xalloc((size_t)s.nu * sizeof *s.numel);
  s.params = xalloc((size_t)s.nu * sizeof *s.params);
  s.grad0 = xalloc((size_t)s.nu * sizeof *s.grad0);
  double **pd = xalloc((size_t)s.nu * sizeof *pd);
  double **gd = xalloc((size_t)s.nu * sizeof *gd);
  for (int u = 0; u < s.nu; u++) {
    const sharc_unit_spec_t *us = &hm->units[u];
    s.numel[u] = tensor_off(us, us->nparams);
    s.params[u] = xalloc(s.numel[u] * sizeof(float));
    s.grad0[u] = xalloc(s.numel[u] * sizeof(float));
    pd[u] = xalloc(s.numel[u] * sizeof(double));
    gd[u] = xalloc(s.numel[u] * sizeof(double));
    for (int k = 0; k < us->nparams; k++) {
      const sharc_param_spec_t *p = &us->params[k];
      sharc_param_spec_t wiggle = *p;
      wiggle.init = SHARC_INIT_NORMAL;
      wiggle.init_scale = 0.1;
      size_t off = tensor_off(us, k), cnt = sharc_param_numel(p);
      for (size_t i = 0; i < cnt; i++) {
        float v = sharc_param_init_value(p, SEED, u, k, i);
        if (p->init == SHARC_INIT_ZEROS || p->init == SHARC_INIT_ONES)
          v += sharc_param_init_value(&wiggle, SEED + 1, u, k, i);
        s.params[u][off + i] = v;
        pd[u][off + i] = v;
      }
    }
    for (size_t i = 0; i < s.numel[u]; i++) { /* exact in f32 */
      s.grad0[u][i] =
          (float)((int)((i * 37 + (size_t)u * 11) % 17) - 8) / 4096.0f;
      gd[u][i] = s.grad0[u][i];
    }
  }
  size_t N = (size_t)n * (size_t)cfg->ctx;
  int32_t *x = xalloc(N * sizeof *x + 4), *y = xalloc(N * sizeof *y + 4);
  rng_state = 0x5eed0000u + (uint64_t)n * 977 + (uint64_t)cfg->vocab;
  for (size_t i = 0; i < N; i++)
    x[i] = i % 3 == 2 ? x[i - 2] : (int32_t)(rng() % (uint32_t)cfg->vocab);
  for (size_t i = 0; i < N; i++)
    y[i] = (i + 1) % (size_t)cfg->ctx ? x[i + 1]
                                      : (int32_t)(rng() % (uint32_t)cfg->vocab);
  s.x = x;
  s.y = y;

  /* the f64 chain: once forward to aim half the targets, then in full */
  double **o64 = xalloc((size_t)s.ns * sizeof *o64);
  double **d64 = xalloc((size_t)s.ns * sizeof *d64);
  for (int i = 0; i < s.ns; i++) {
    o64[i] = xalloc(s.act * sizeof(double) + sizeof(double[SHARC_STAGE_STATS]));
    d64[i] = xalloc(s.act * sizeof(double) + 8);
  }
  double loss = 0;
  int ties = 0;
  CHECK(gpt_trace_f64(g, (const double *const *)pd, NULL, x, y, n, s.global_n,
                      o64, NULL, &loss) == 0,
        "%s n %d: f64 forward failed", name, n);
  if (n > 0)
    ties = head_ties(g, pd[0], o64[s.ns - 2], y, n, 1);
  CHECK(gpt_trace_f64(g, (const double *const *)pd, gd, x, y, n, s.global_n,
                      o64, d64, &loss) == 0,
        "%s n %d: f64 run failed", name, n);

  result_t rh, rd, rd2;
  result_alloc(&s, &rh);
  result_alloc(&s, &rd);
  result_alloc(&s, &rd2);
  int hrc = run_model(&s, hm, 0, stream, &rh);
  int drc = run_model(&s, dm, 1, stream, &rd);
  int drc2 = run_model(&s, dm, 1, stream, &rd2);
  CHECK(hrc == 0 && drc == 0 && drc2 == 0,
        "%s n %d: a callback failed (host %d, device %d, %d)", name, n, hrc,
        drc, drc2);
  if (hrc == 0 && drc == 0 && drc2 == 0) {
    char what[96];
    worst_ratio = 0;
    for (int i = 0; i + 1 < s.ns; i++) {
      snprintf(what, sizeof what, "stage %d out", i);
      compare(what, rh.out[i], rd.out[i], o64[i], s.act);
    }
    for (int i = 1; i < s.ns; i++) {
      snprintf(what, sizeof what, "stage %d din", i);
      compare(what, rh.din[i], rd.din[i], d64[i], s.act);
    }
    for (int u = 0; u < s.nu; u++) {
      const sharc_unit_spec_t *us = &hm->units[u];
      for (int k = 0; k < us->nparams; k++) {
        size_t off = tensor_off(us, k);
        snprintf(what, sizeof what, "%s.%s grad", us->name, us->params[k].name);
        compare(what, rh.grads[u] + off, rd.grads[u] + off, gd[u] + off,
                sharc_param_numel(&us->params[k]));
      }
    }
    const double *st64 = o64[s.ns - 1];
    float lh = (float)rh.stats[0], ld = (float)rd.stats[0];
    double l64 = st64[0];
    compare("loss (stats[0])", &lh, &ld, &l64, 1);
    CHECK(fabs(rd.stats[1] - rh.stats[1]) <= ties,
          "%s n %d: argmax count: device %.0f, host %.0f, f64 near ties %d",
          name, n, rd.stats[1], rh.stats[1], ties);
    /* determinism: the second device run, bit for bit */
    int same = memcmp(rd.stats, rd2.stats, sizeof rd.stats) == 0;
    for (int i = 0; i < s.ns; i++)
      same = same && memcmp(rd.out[i], rd2.out[i], s.act * 4) == 0 &&
             memcmp(rd.din[i], rd2.din[i], s.act * 4) == 0;
    for (int u = 0; u < s.nu; u++)
      same = same && memcmp(rd.grads[u], rd2.grads[u], s.numel[u] * 4) == 0;
    CHECK(same, "%s n %d: two device runs differ", name, n);
    printf("test_gpt_cuda: %-5s n %d: loss f64 %.9f host %.9f device %.9f, "
           "correct %.0f/%.0f (ties %d), worst error/bound %.3f\n",
           name, n, st64[0], rh.stats[0], rd.stats[0], rd.stats[1], rh.stats[1],
           ties, worst_ratio);
  }

  /* a token or target outside [0, V) fails, before anything is queued */
  if (n > 0) {
    int32_t save = x[N - 1];
    x[N - 1] = cfg->vocab;
    result_t rb;
    result_alloc(&s, &rb);
    CHECK(run_model(&s, dm, 1, stream, &rb) != 0, "%s n %d: token %d accepted",
          name, n, cfg->vocab);
    x[N - 1] = save;
    save = y[0];
    y[0] = -1;
    CHECK(run_model(&s, dm, 1, stream, &rb) != 0, "%s n %d: target -1 accepted",
          name, n);
    y[0] = save;
    result_free(&s, &rb);
  }

  result_free(&s, &rh);
  result_free(&s, &rd);
  result_free(&s, &rd2);
  for (int i = 0; i < s.ns; i++) {
    free(o64[i]);
    free(d64[i]);
  }
  for (int u = 0; u < s.nu; u++) {
    free(s.params[u]);
    free(s.grad0[u]);
    free(pd[u]);
    free(gd[u]);
  }
  free(o64);
  free(d64);
  free(s.params);
  free(s.grad0);
  free(s.numel);
  free(pd);
  free(gd);
  free(x);
  free(y);
  gpt_destroy(g);
}

int main(int argc, char **argv) {
  verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0) {
    printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n",
           e != cudaSuccess ? cudaGetErrorName(e) : "cudaSuccess", ndev);
    return 77;
  }
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  gpt_config_t tiny,
      odd = {.vocab = 37, .ctx = 5, .layers = 1, .heads = 3, .channels = 12};
  if (gpt_config_preset("tiny", &tiny) != 0) {
    printf("FAIL: no tiny preset\n");
    return 1;
  }
  const int ns[] = {0, 1, 3};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    test_case("tiny", &tiny, ns[i], stream);
    test_case("odd", &odd, ns[i], stream);
  }
  CUDA_OK(cudaStreamDestroy(stream));
  printf("test_gpt_cuda: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

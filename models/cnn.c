/*
 * cnn.c - the reference CNN as a sharc_model_t (see cnn.h): its units and
 * stages, buffer sizes, the f32 stage callbacks and the f64 reference
 * pass. The layer math lives once in cnn_impl.h, instantiated here for
 * float and for double; the CUDA twin (cnn_cuda_model) is cnn_cuda.cu,
 * sharing cnn_defs.h's shapes and dropout hash.
 *
 * What each stage keeps for its backward (n samples):
 *   stage 0 conv1  out a1 (n,32,26,26) f32; saved nothing (the ReLU mask is
 *                  a1 > 0); scratch xs + col + dpre, recomputing im2col.
 *   stage 1 conv2  out a2 (n,9216) f32; saved one flag byte per pooled
 *                  element (argmax, ReLU, dropout); scratch col + pre,
 *                  per sample, so independent of n.
 *   stage 2 fc1    out a3 (n,128) f32; saved one flag byte per element;
 *                  scratch dpre (n,128) in backward.
 *   stage 3 fc2    out the statistics; saved the log-probabilities
 *                  (n,10) f32; scratch dlogits (n,10) in backward.
 */
#include "cnn.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn_defs.h"

_Static_assert(NCLS == CNN_CLASSES && NSTAGES == CNN_STAGES,
               "cnn_defs.h's shapes are cnn.h's");

struct cnn {
  uint64_t seed;
  int dropout;
  sharc_unit_spec_t units[CNN_UNITS];
  sharc_stage_spec_t stages[CNN_STAGES];
  sharc_model_t model;
  pthread_mutex_t lock;      /* guards the creation of cuda */
  const sharc_model_t *cuda; /* cnn_cuda_model's twin, made on first use */
};

#define REAL float
#define SFX _f32
#define GEMM cblas_sgemm
#include "cnn_impl.h"

#define REAL double
#define SFX _f64
#define GEMM cblas_dgemm
#include "cnn_impl.h"

/* ---- buffer sizes (bytes, n samples) ---------------------------------------
 */

/* Scratch elements per stage, forward and backward alike. */
static size_t scratch_elems(int stage, int n) {
  switch (stage) {
  case 0:
    return IMG_PIX + 9 * P1 + A1_NUMEL;
  case 1:
    return (size_t)(C1 * 9 + C2) * P2;
  case 2:
    return (size_t)n * F1;
  default:
    return (size_t)n * NCLS;
  }
}

static size_t out_elems(int stage, int n) {
  static const size_t per[CNN_STAGES] = {A1_NUMEL, FLAT, F1, 0};
  return stage >= 0 && stage < CNN_STAGES ? per[stage] * (size_t)n : 0;
}

static size_t cnn_out_bytes(void *ctx, int stage, int n) {
  if (stage == CNN_STAGES - 1)
    return SHARC_STAGE_STATS * sizeof(double);
  return out_elems(stage, n) * sizeof(float);
}

static size_t cnn_saved_bytes(void *ctx, int stage, int n) {
  switch (stage) {
  case 1:
    return (size_t)n * FLAT;
  case 2:
    return (size_t)n * F1;
  case 3:
    return (size_t)n * NCLS * sizeof(float);
  default:
    return 0;
  }
}

static size_t cnn_scratch_bytes(void *ctx, int stage, int n) {
  if (n <= 0)
    return 0;
  return scratch_elems(stage, n) * sizeof(float);
}

/* ---- f32 callbacks ----------------------------------------------------------
 */

static drop_t drop_of(const cnn_t *c, const sharc_batch_t *b) {
  drop_t d = {c->seed, b->step, b->first, c->dropout && b->training == 1};
  return d;
}

static int cnn_forward(void *ctx, const sharc_stage_call_t *call) {
  const cnn_t *c = ctx;
  const sharc_batch_t *b = call->batch;
  const float *const *p = call->params;
  int n = b->n;
  if (call->stage == CNN_STAGES - 1)
    memset(call->out, 0, SHARC_STAGE_STATS * sizeof(double));
  if (n < 0 || call->stage < 0 || call->stage >= CNN_STAGES)
    return -1;
  if (n == 0)
    return 0;
  drop_t d = drop_of(c, b);
  switch (call->stage) {
  case 0:
    conv1_fwd_f32(p[0], p[1], call->in, n, call->out, call->scratch);
    return 0;
  case 1:
    conv2_fwd_f32(&d, p[0], p[1], call->in, n, call->out, call->saved,
                  call->scratch);
    return 0;
  case 2:
    fc1_fwd_f32(&d, p[0], p[1], call->in, n, call->out, call->saved);
    return 0;
  default:
    return fc2_fwd_f32(p[0], p[1], call->in, b->y, n, call->saved, call->out);
  }
}

static int cnn_backward(void *ctx, const sharc_stage_call_t *call) {
  const cnn_t *c = ctx;
  const sharc_batch_t *b = call->batch;
  const float *const *p = call->params;
  float *const *g = call->grads;
  int n = b->n;
  if (n < 0 || call->stage < 0 || call->stage >= CNN_STAGES)
    return -1;
  if (n == 0)
    return 0;
  drop_t d = drop_of(c, b);
  switch (call->stage) {
  case 0:
    conv1_bwd_f32(call->in, call->out, call->dout, n, g[0], g[1],
                  call->scratch);
    return 0;
  case 1:
    conv2_bwd_f32(&d, p[0], call->in, call->saved, call->dout, n, g[0], g[1],
                  call->din, call->scratch);
    return 0;
  case 2:
    fc1_bwd_f32(&d, p[0], call->in, call->saved, call->dout, n, g[0], g[1],
                call->din, call->scratch);
    return 0;
  default:
    if (b->global_n < 1)
      return -1;
    fc2_bwd_f32(p[0], call->in, call->saved, b->y, n, b->global_n, g[0], g[1],
                call->din, call->scratch);
    return 0;
  }
}

/* ---- model description ------------------------------------------------------
 */

static void param(sharc_param_spec_t *p, const char *name, int ndim,
                  const size_t *shape, double fan_in, int no_decay) {
  p->name = name;
  p->ndim = ndim;
  for (int d = 0; d < ndim; d++)
    p->shape[d] = shape[d];
  p->init = SHARC_INIT_UNIFORM;
  p->init_scale = 1.0 / sqrt(fan_in);
  p->no_decay = no_decay;
}

/* A unit of weight `wshape` (ndim 2 or 4) and bias (wshape[0]); fan_in is
 * the product of the weight's dimensions after the first. */
static void unit(sharc_unit_spec_t *u, const char *name, const char *wname,
                 const char *bname, int ndim, const size_t *wshape) {
  double fan_in = 1;
  for (int d = 1; d < ndim; d++)
    fan_in *= (double)wshape[d];
  u->name = name;
  u->nparams = 2;
  param(&u->params[0], wname, ndim, wshape, fan_in, 0);
  param(&u->params[1], bname, 1, wshape, fan_in, 1);
}

int cnn_create(cnn_t **out, uint64_t seed, int dropout) {
  cnn_t *c = calloc(1, sizeof *c);
  *out = NULL;
  if (!c)
    return -1;
  c->seed = seed;
  c->dropout = dropout != 0;
  static const size_t w1[] = {C1, 1, 3, 3}, w2[] = {C2, C1, 3, 3},
                      w3[] = {F1, FLAT}, w4[] = {NCLS, F1};
  unit(&c->units[0], "conv1", "conv1.weight", "conv1.bias", 4, w1);
  unit(&c->units[1], "conv2", "conv2.weight", "conv2.bias", 4, w2);
  unit(&c->units[2], "fc1", "fc1.weight", "fc1.bias", 2, w3);
  unit(&c->units[3], "fc2", "fc2.weight", "fc2.bias", 2, w4);
  for (int s = 0; s < CNN_STAGES; s++)
    c->stages[s] = (sharc_stage_spec_t){.unit = s, .kind = s};
  c->model = (sharc_model_t){.name = "cnn",
                             .nunits = CNN_UNITS,
                             .units = c->units,
                             .nstages = CNN_STAGES,
                             .stages = c->stages,
                             .ctx = c,
                             .out_bytes = cnn_out_bytes,
                             .saved_bytes = cnn_saved_bytes,
                             .scratch_bytes = cnn_scratch_bytes,
                             .forward = cnn_forward,
                             .backward = cnn_backward,
                             .device = SHARC_DEVICE_HOST};
  if (pthread_mutex_init(&c->lock, NULL) != 0) {
    free(c);
    return -1;
  }
  *out = c;
  return 0;
}

const sharc_model_t *cnn_model(const cnn_t *c) { return &c->model; }

const sharc_model_t *cnn_cuda_model(cnn_t *c, char *why, size_t whylen) {
  if (why && whylen)
    why[0] = 0;
#ifdef SHARC_MODELS_CUDA
  pthread_mutex_lock(&c->lock);
  if (!c->cuda)
    c->cuda = cnn_cuda_open(&c->model, c->seed, c->dropout, why, whylen);
  const sharc_model_t *m = c->cuda;
  pthread_mutex_unlock(&c->lock);
  return m;
#else
  if (why && whylen)
    snprintf(why, whylen,
             "cnn: this build has no CUDA model (sharc_models was built "
             "without CUDA and cuBLAS; configure with nvcc on PATH or "
             "-DSHARC_SOFTCUDA=ON)");
  return NULL;
#endif
}

void cnn_destroy(cnn_t *c) {
  if (!c)
    return;
#ifdef SHARC_MODELS_CUDA
  cnn_cuda_close(c->cuda);
#endif
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* ---- f64 reference ----------------------------------------------------------
 */

/* Offset of the bias in unit u's flat buffer (the weight's numel). */
static size_t bias_off(const cnn_t *c, int u) {
  const sharc_param_spec_t *w = &c->units[u].params[0];
  size_t k = 1;
  for (int d = 0; d < w->ndim; d++)
    k *= w->shape[d];
  return k;
}

double cnn_loss_grad_f64(const cnn_t *c, const double *const *params,
                         double *const *grads, const float *x, const int32_t *y,
                         int n, int global_n, uint64_t first, uint64_t step,
                         int training, double stats[SHARC_STAGE_STATS]) {
  double st[SHARC_STAGE_STATS] = {0, 0};
  if (stats)
    memset(stats, 0, sizeof st);
  if (n < 0 || global_n < 1)
    return NAN;
  if (n == 0)
    return 0;
  /* activations a1 a2 a3 lp, their gradients, flags, scratch: one block */
  size_t na1 = (size_t)n * A1_NUMEL, na2 = (size_t)n * FLAT,
         na3 = (size_t)n * F1, nlp = (size_t)n * NCLS;
  size_t nscr = 0;
  for (int s = 0; s < CNN_STAGES; s++)
    if (scratch_elems(s, n) > nscr)
      nscr = scratch_elems(s, n);
  size_t nd = 2 * (na1 + na2 + na3) + nlp + nscr;
  double *buf = malloc(nd * sizeof(double));
  uint8_t *f1 = malloc(na2 + na3);
  if (!buf || !f1) {
    free(buf);
    free(f1);
    return NAN;
  }
  double *a1 = buf, *a2 = a1 + na1, *a3 = a2 + na2, *lp = a3 + na3;
  double *da1 = lp + nlp, *da2 = da1 + na1, *da3 = da2 + na2;
  double *scr = da3 + na3;
  uint8_t *f2 = f1 + na2;
  const double *p[CNN_UNITS][2];
  for (int u = 0; u < CNN_UNITS; u++) {
    p[u][0] = params[u];
    p[u][1] = params[u] + bias_off(c, u);
  }
  drop_t d = {c->seed, step, first, c->dropout && training == 1};
  double loss = NAN;
  conv1_fwd_f64(p[0][0], p[0][1], x, n, a1, scr);
  conv2_fwd_f64(&d, p[1][0], p[1][1], a1, n, a2, f1, scr);
  fc1_fwd_f64(&d, p[2][0], p[2][1], a2, n, a3, f2);
  if (fc2_fwd_f64(p[3][0], p[3][1], a3, y, n, lp, st) != 0)
    goto done;
  if (grads) {
    double *g[CNN_UNITS][2];
    for (int u = 0; u < CNN_UNITS; u++) {
      g[u][0] = grads[u];
      g[u][1] = grads[u] + bias_off(c, u);
    }
    fc2_bwd_f64(p[3][0], a3, lp, y, n, global_n, g[3][0], g[3][1], da3, scr);
    fc1_bwd_f64(&d, p[2][0], a2, f2, da3, n, g[2][0], g[2][1], da2, scr);
    conv2_bwd_f64(&d, p[1][0], a1, f1, da2, n, g[1][0], g[1][1], da1, scr);
    conv1_bwd_f64(x, a1, da1, n, g[0][0], g[0][1], scr);
  }
  loss = st[0] / global_n;
  if (stats)
    memcpy(stats, st, sizeof st);
done:
  free(f1);
  free(buf);
  return loss;
}

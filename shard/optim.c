/*
 * optim.c - gradient clipping by global norm and the sharded optimizers
 * (SGD with momentum, AdamW) on this rank's slices. Every update is
 * elementwise, so a slice steps exactly as the same elements would in an
 * unsharded run; only the norm needs communication (one all-reduce of the
 * local sums of squares, in f64).
 */
#include <math.h>
#include <stdlib.h>

#include "engine.h"
#ifdef SHARC_HAVE_CUDA
#include "optim_dev.h"
#endif

/* Calls fn over the runs of real (not padding) elements of unit u's slice,
 * telling whether each run is exempt from weight decay. */
static void slice_runs(struct sharc_shard *e, int u,
                       void (*fn)(struct sharc_shard *, eunit_t *, size_t,
                                  size_t, int, void *),
                       void *arg) {
  eunit_t *U = &e->units[u];
  const layout_t *l = &U->lay;
  size_t lo = (size_t)e->shard_rank * l->slice, hi = lo + l->slice;
  for (int k = 0; k < l->ntensors; k++) {
    size_t a, b;
    layout_overlap(lo, hi, l->off[k], l->off[k] + l->count[k], &a, &b);
    if (a < b)
      fn(e, U, a - lo, b - lo, e->model->units[u].params[k].no_decay, arg);
  }
}

static void sumsq_run(struct sharc_shard *e, eunit_t *U, size_t a, size_t b,
                      int no_decay, void *arg) {
  double *acc = arg;
  for (size_t i = a; i < b; i++)
    *acc += (double)U->grad_slice[i] * U->grad_slice[i];
  (void)e;
  (void)no_decay;
}

typedef struct {
  double lr, scale, bc1, bc2;
  int err; /* GPU training: the first launch error (a cudaError_t) */
} step_arg_t;

static void sgd_run(struct sharc_shard *e, eunit_t *U, size_t a, size_t b,
                    int no_decay, void *arg) {
  const step_arg_t *p = arg;
  const sharc_optim_t *o = &e->cfg.optim;
  float wd = no_decay ? 0.0f : (float)o->weight_decay;
  float mom = (float)o->momentum, lr = (float)p->lr, sc = (float)p->scale;
  int first = e->opt_steps == 0;
  for (size_t i = a; i < b; i++) {
    float g = U->grad_slice[i] * sc + wd * U->master[i];
    if (mom > 0.0f) { /* PyTorch: the first step's buffer is g */
      U->opt_a[i] = first ? g : mom * U->opt_a[i] + g;
      g = U->opt_a[i];
    }
    U->master[i] -= lr * g;
  }
}

static void adamw_run(struct sharc_shard *e, eunit_t *U, size_t a, size_t b,
                      int no_decay, void *arg) {
  const step_arg_t *p = arg;
  const sharc_optim_t *o = &e->cfg.optim;
  float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;
  float lr = (float)p->lr, sc = (float)p->scale;
  float decay = no_decay ? 1.0f : (float)(1.0 - p->lr * o->weight_decay);
  float bc1 = (float)p->bc1, bc2 = (float)p->bc2;
  for (size_t i = a; i < b; i++) {
    float g = U->grad_slice[i] * sc;
    float m = b1 * U->opt_a[i] + (1.0f - b1) * g;
    float v = b2 * U->opt_b[i] + (1.0f - b2) * g * g;
    U->opt_a[i] = m;
    U->opt_b[i] = v;
    float mhat = m / bc1, vhat = v / bc2;
    U->master[i] = U->master[i] * decay - lr * mhat / (sqrtf(vhat) + eps);
  }
}

/* The same three on device memory (optim_dev.cu), queued on compute. */
#ifdef SHARC_HAVE_CUDA
static void sumsq_dev_run(struct sharc_shard *e, eunit_t *U, size_t a, size_t b,
                          int no_decay, void *arg) {
  int *err = arg;
  if (!*err)
    *err = optim_dev_sumsq(U->grad_slice + a, b - a, e->dv.partials,
                           e->dv.compute);
  (void)no_decay;
}

static void sgd_dev_run(struct sharc_shard *e, eunit_t *U, size_t a, size_t b,
                        int no_decay, void *arg) {
  step_arg_t *p = arg;
  const sharc_optim_t *o = &e->cfg.optim;
  if (!p->err)
    p->err = optim_dev_sgd(
        U->master + a, U->grad_slice + a, U->opt_a + a, b - a, (float)p->scale,
        no_decay ? 0.0f : (float)o->weight_decay, (float)o->momentum,
        (float)p->lr, e->opt_steps == 0, e->dv.compute);
}

static void adamw_dev_run(struct sharc_shard *e, eunit_t *U, size_t a, size_t b,
                          int no_decay, void *arg) {
  step_arg_t *p = arg;
  const sharc_optim_t *o = &e->cfg.optim;
  if (!p->err)
    p->err = optim_dev_adamw(
        U->master + a, U->grad_slice + a, U->opt_a + a, U->opt_b + a, b - a,
        (float)p->scale, (float)o->beta1, (float)o->beta2, (float)o->eps,
        (float)p->lr, no_decay ? 1.0f : (float)(1.0 - p->lr * o->weight_decay),
        (float)p->bc1, (float)p->bc2, e->dv.compute);
}
#endif

/* sumsq_run in optim_dev_sumsq's order: part[t] += the sum of the run's
 * g[i]^2 over i = t mod OPTIM_PARTS, so that GPU training with offload
 * (the state on the host) gets the device's norm bit for bit. */
static void sumsq_parts_run(struct sharc_shard *e, eunit_t *U, size_t a,
                            size_t b, int no_decay, void *arg) {
  double *part = arg;
  const float *g = U->grad_slice + a;
  for (size_t t = 0; t < OPTIM_PARTS && t < b - a; t++) {
    double acc = 0;
    for (size_t i = t; i < b - a; i += OPTIM_PARTS)
      acc += (double)g[i] * g[i];
    part[t] += acc;
  }
  (void)e;
  (void)no_decay;
}

/* This rank's sum of squared gradients. */
static sharc_status_t local_sumsq(struct sharc_shard *e, double *sq) {
  const sharc_model_t *m = e->model;
  *sq = 0;
  if (!e->dev) {
    for (int u = 0; u < m->nunits; u++)
      slice_runs(e, u, sumsq_run, sq);
    return SHARC_OK;
  }
  double part[OPTIM_PARTS] = {0};
  if (eng_at(e, MEM_GSLICE) != AT_DEV) { /* offload */
    for (int u = 0; u < m->nunits; u++)
      slice_runs(e, u, sumsq_parts_run, part);
    for (int t = 0; t < OPTIM_PARTS; t++)
      *sq += part[t];
    return SHARC_OK;
  }
#ifdef SHARC_HAVE_CUDA
  _Static_assert(OPTIM_DEV_PARTS == OPTIM_PARTS, "one partial-sum order");
  int err = 0;
  sharc_status_t st = dev_zero(&e->dv, e->dv.partials, sizeof part);
  for (int u = 0; st == SHARC_OK && u < m->nunits; u++)
    slice_runs(e, u, sumsq_dev_run, &err);
  if (st == SHARC_OK && err)
    st = eng_fail(e, SHARC_ERR_CUDA,
                  "shard: the gradient norm's kernel failed to launch "
                  "(cudaError_t %d)",
                  err);
  if (st == SHARC_OK)
    st = eng_copy(e, part, e->dv.partials, sizeof part);
  for (int t = 0; st == SHARC_OK && t < OPTIM_DEV_PARTS; t++)
    *sq += part[t];
  return st;
#else
  return SHARC_ERR_INTERNAL; /* e->dev is never set without CUDA */
#endif
}

sharc_status_t optim_step(struct sharc_shard *e, double *norm) {
  const sharc_model_t *m = e->model;
  /* The grad slices are identical across replicas: sum over the shard
   * group only. */
  double sq = 0;
  sharc_status_t st = local_sumsq(e, &sq);
  if (st != SHARC_OK)
    return st;
  st = sharc_all_reduce(&sq, &sq, 1, SHARC_F64, SHARC_SUM, e->shard_comm, NULL);
  if (st != SHARC_OK)
    return eng_coll_fail(e, st, "gradient-norm all-reduce", -1);
  *norm = sqrt(sq);
  step_arg_t p = {.lr = e->lr, .scale = 1.0};
  if (e->cfg.clip_norm > 0 && *norm > e->cfg.clip_norm)
    p.scale = e->cfg.clip_norm / (*norm + 1e-6);
  if (!isfinite(*norm))
    return eng_fail(e, SHARC_ERR_INTERNAL,
                    "shard: step %llu: the gradient norm is %g (the loss "
                    "diverged or the model produced NaN/inf); lower the "
                    "learning rate or enable clipping",
                    (unsigned long long)e->steps + 1, *norm);
  double t = (double)(e->opt_steps + 1);
  p.bc1 = 1.0 - pow(e->cfg.optim.beta1, t);
  p.bc2 = 1.0 - pow(e->cfg.optim.beta2, t);
  int adamw = e->cfg.optim.kind == SHARC_OPTIM_ADAMW;
  if (eng_at(e, MEM_PSLICE) != AT_DEV) {
    for (int u = 0; u < m->nunits; u++)
      slice_runs(e, u, adamw ? adamw_run : sgd_run, &p);
  } else {
#ifdef SHARC_HAVE_CUDA
    for (int u = 0; u < m->nunits; u++)
      slice_runs(e, u, adamw ? adamw_dev_run : sgd_dev_run, &p);
    /* the next gathers (on comm) read the stepped slices */
    st = p.err ? eng_fail(e, SHARC_ERR_CUDA,
                          "shard: the optimizer's kernel failed to launch "
                          "(cudaError_t %d)",
                          p.err)
               : dev_compute_sync(&e->dv);
    if (st != SHARC_OK)
      return st;
#endif
  }
  e->opt_steps++;
  return SHARC_OK;
}

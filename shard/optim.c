/*
 * optim.c - gradient clipping by global norm and the sharded optimizers
 * (SGD with momentum, AdamW) on this rank's slices. Every update is
 * elementwise, so a slice steps exactly as the same elements would in an
 * unsharded run; only the norm needs communication (one all-reduce of the
 * local sums of squares, in f64).
 */
#include <math.h>

#include "engine.h"

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

sharc_status_t optim_step(struct sharc_shard *e, double *norm) {
  const sharc_model_t *m = e->model;
  /* The grad slices are identical across replicas: sum over the shard
   * group only. */
  double sq = 0;
  for (int u = 0; u < m->nunits; u++)
    slice_runs(e, u, sumsq_run, &sq);
  sharc_status_t st =
      sharc_all_reduce(&sq, &sq, 1, SHARC_F64, SHARC_SUM, e->shard_comm, NULL);
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
  for (int u = 0; u < m->nunits; u++)
    slice_runs(
        e, u, e->cfg.optim.kind == SHARC_OPTIM_ADAMW ? adamw_run : sgd_run, &p);
  e->opt_steps++;
  return SHARC_OK;
}

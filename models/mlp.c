/*
 * mlp.c - the multilayer perceptron (see mlp.h). Stage l computes
 * out = in W^T + b, (n, dims[l+1]), then ReLU except on the last layer,
 * which ends in log-softmax and the NLL loss normalised by global_n.
 */
#include "mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mlp {
  int nlayers, dims[MLP_MAX_LAYERS + 1];
  char names[MLP_MAX_LAYERS][16];
  sharc_unit_spec_t units[MLP_MAX_LAYERS];
  sharc_stage_spec_t stages[MLP_MAX_LAYERS];
  sharc_model_t model;
};

static size_t out_bytes(void *ctx, int s, int n) {
  const mlp_t *m = ctx;
  return (size_t)n * (size_t)m->dims[s + 1] * sizeof(float);
}

/* the last stage keeps its log-probabilities, (n, classes) */
static size_t saved_bytes(void *ctx, int s, int n) {
  const mlp_t *m = ctx;
  return s == m->nlayers - 1 ? out_bytes(ctx, s, n) : 0;
}

/* the gradient of the pre-activation, (n, dims[s+1]) */
static size_t scratch_bytes(void *ctx, int s, int n) {
  return out_bytes(ctx, s, n);
}

/* y (n, dout) = x (n, din) W^T (W is (dout, din)) + b */
static void linear(const float *x, const float *w, const float *b, float *y,
                   int n, int din, int dout) {
  for (int i = 0; i < n; i++)
    memcpy(y + (size_t)i * dout, b, (size_t)dout * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, dout, din, 1.0f, x,
              din, w, din, 1.0f, y, dout);
}

static int forward(void *ctx, const sharc_stage_call_t *c) {
  const mlp_t *m = ctx;
  int n = c->batch->n, s = c->stage, din = m->dims[s], dout = m->dims[s + 1];
  int last = s == m->nlayers - 1;
  float *y = last ? c->saved : c->out;
  if (n == 0) {
    if (last)
      memset(c->out, 0, SHARC_STAGE_STATS * sizeof(double));
    return 0;
  }
  linear(c->in, c->params[0], c->params[1], y, n, din, dout);
  if (!last) {
    for (size_t i = 0; i < (size_t)n * dout; i++)
      y[i] = y[i] > 0.0f ? y[i] : 0.0f;
    return 0;
  }
  const int32_t *lab = c->batch->y;
  double loss = 0, correct = 0;
  for (int i = 0; i < n; i++) {
    float *r = y + (size_t)i * dout;
    int arg = 0;
    float mx = r[0];
    for (int j = 1; j < dout; j++)
      if (r[j] > mx)
        mx = r[j], arg = j;
    double sum = 0;
    for (int j = 0; j < dout; j++)
      sum += exp((double)(r[j] - mx));
    float lse = mx + (float)log(sum);
    for (int j = 0; j < dout; j++)
      r[j] -= lse; /* log-probabilities */
    if (lab[i] < 0 || lab[i] >= dout)
      return -1;
    loss -= r[lab[i]];
    correct += arg == lab[i];
  }
  double *st = c->out;
  st[0] = loss;
  st[1] = correct;
  return 0;
}

static int backward(void *ctx, const sharc_stage_call_t *c) {
  const mlp_t *m = ctx;
  int n = c->batch->n, s = c->stage, din = m->dims[s], dout = m->dims[s + 1];
  int last = s == m->nlayers - 1;
  if (n == 0)
    return 0;
  float *dy = c->scratch; /* gradient of the pre-activation, (n, dout) */
  if (last) {
    const float *lp = c->saved;
    const int32_t *lab = c->batch->y;
    float inv = 1.0f / (float)c->batch->global_n;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < dout; j++) {
        size_t k = (size_t)i * dout + j;
        dy[k] = (expf(lp[k]) - (j == lab[i])) * inv;
      }
  } else { /* through the ReLU: out > 0 where the pre-activation was */
    const float *y = c->out, *g = c->dout;
    for (size_t i = 0; i < (size_t)n * dout; i++)
      dy[i] = y[i] > 0.0f ? g[i] : 0.0f;
  }
  /* dW (dout, din) += dy^T x; db += sum_i dy; dx (n, din) = dy W */
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dout, din, n, 1.0f, dy,
              dout, c->in, din, 1.0f, c->grads[0], din);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < dout; j++)
      c->grads[1][j] += dy[(size_t)i * dout + j];
  if (c->din)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, din, dout, 1.0f,
                dy, dout, c->params[0], din, 0.0f, c->din, din);
  return 0;
}

int mlp_create(mlp_t **out, const int *dims, int nlayers, char *err,
               size_t errlen) {
  *out = NULL;
  if (nlayers < 1 || nlayers > MLP_MAX_LAYERS) {
    snprintf(err, errlen, "mlp: %d layers; give 1..%d", nlayers,
             MLP_MAX_LAYERS);
    return -1;
  }
  for (int l = 0; l <= nlayers; l++)
    if (dims[l] < 1) {
      snprintf(err, errlen, "mlp: width %d of layer %d; widths are >= 1",
               dims[l], l);
      return -1;
    }
  mlp_t *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, errlen, "mlp: out of memory");
    return -1;
  }
  m->nlayers = nlayers;
  memcpy(m->dims, dims, (size_t)(nlayers + 1) * sizeof *dims);
  for (int l = 0; l < nlayers; l++) {
    snprintf(m->names[l], sizeof m->names[l], "fc%d", l + 1);
    double scale = 1.0 / sqrt((double)dims[l]); /* PyTorch's default */
    sharc_unit_spec_t *u = &m->units[l];
    u->name = m->names[l];
    u->nparams = 2;
    u->params[0] =
        (sharc_param_spec_t){.name = "weight",
                             .ndim = 2,
                             .shape = {(size_t)dims[l + 1], (size_t)dims[l]},
                             .init = SHARC_INIT_UNIFORM,
                             .init_scale = scale};
    u->params[1] = (sharc_param_spec_t){.name = "bias",
                                        .ndim = 1,
                                        .shape = {(size_t)dims[l + 1]},
                                        .init = SHARC_INIT_UNIFORM,
                                        .init_scale = scale,
                                        .no_decay = 1};
    m->stages[l] = (sharc_stage_spec_t){.unit = l, .kind = 0};
  }
  m->model = (sharc_model_t){.name = "mlp",
                             .nunits = nlayers,
                             .units = m->units,
                             .nstages = nlayers,
                             .stages = m->stages,
                             .ctx = m,
                             .out_bytes = out_bytes,
                             .saved_bytes = saved_bytes,
                             .scratch_bytes = scratch_bytes,
                             .forward = forward,
                             .backward = backward};
  *out = m;
  return 0;
}

const sharc_model_t *mlp_model(const mlp_t *m) { return &m->model; }

void mlp_destroy(mlp_t *m) { free(m); }

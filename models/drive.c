/*
 * drive.c - the one-process reference executor (see drive.h).
 */
#include "drive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int drive_init(drive_t *d, const sharc_model_t *m, uint64_t seed) {
  memset(d, 0, sizeof *d);
  d->m = m;
  d->params = calloc((size_t)m->nunits, sizeof *d->params);
  d->grads = calloc((size_t)m->nunits, sizeof *d->grads);
  d->numel = calloc((size_t)m->nunits, sizeof *d->numel);
  if (!d->params || !d->grads || !d->numel)
    goto fail;
  for (int u = 0; u < m->nunits; u++) {
    const sharc_unit_spec_t *U = &m->units[u];
    if (U->nparams < 1 || U->nparams > SHARC_UNIT_MAX_PARAMS) {
      fprintf(stderr, "drive: unit %d ('%s') has %d parameter tensors; 1..%d\n",
              u, U->name ? U->name : "?", U->nparams, SHARC_UNIT_MAX_PARAMS);
      goto fail;
    }
    size_t total = 0;
    for (int k = 0; k < U->nparams; k++) {
      size_t c = sharc_param_numel(&U->params[k]);
      if (c == 0) {
        fprintf(stderr, "drive: unit %d ('%s') tensor %d has a bad shape\n", u,
                U->name ? U->name : "?", k);
        goto fail;
      }
      total += c;
    }
    d->numel[u] = total;
    d->params[u] = malloc(total * sizeof(float));
    d->grads[u] = calloc(total, sizeof(float));
    if (!d->params[u] || !d->grads[u])
      goto fail;
    /* tensors in declared order, no gaps: the engine's flat layout */
    size_t off = 0;
    for (int k = 0; k < U->nparams; k++) {
      size_t c = sharc_param_numel(&U->params[k]);
      for (size_t i = 0; i < c; i++)
        d->params[u][off + i] =
            sharc_param_init_value(&U->params[k], seed, u, k, i);
      off += c;
    }
  }
  return 0;
fail:
  fprintf(stderr, "drive: cannot set up model '%s'\n", m->name);
  drive_free(d);
  return -1;
}

void drive_free(drive_t *d) {
  for (int u = 0; d->m && u < d->m->nunits; u++) {
    if (d->params)
      free(d->params[u]);
    if (d->grads)
      free(d->grads[u]);
  }
  free(d->params);
  free(d->grads);
  free(d->numel);
  memset(d, 0, sizeof *d);
}

void drive_zero_grads(drive_t *d) {
  for (int u = 0; u < d->m->nunits; u++)
    memset(d->grads[u], 0, d->numel[u] * sizeof(float));
}

float *drive_tensor(drive_t *d, int u, int k, int grad) {
  size_t off = 0;
  for (int j = 0; j < k; j++)
    off += sharc_param_numel(&d->m->units[u].params[j]);
  return (grad ? d->grads[u] : d->params[u]) + off;
}

static void *zalloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }

int drive_run(drive_t *d, const sharc_batch_t *b, int backward,
              double stats[SHARC_STAGE_STATS]) {
  const sharc_model_t *m = d->m;
  int ns = m->nstages, rc = 0;
  void **out = calloc((size_t)ns, sizeof *out);
  void **saved = calloc((size_t)ns, sizeof *saved);
  void *dcur = NULL; /* gradient of the current stage's output */
  const float *pp[SHARC_UNIT_MAX_PARAMS];
  float *gp[SHARC_UNIT_MAX_PARAMS];
  if (!out || !saved) {
    rc = -1;
    goto done;
  }
  for (int s = 0; s < ns && rc == 0; s++) {
    int u = m->stages[s].unit;
    size_t ob = s == ns - 1 ? SHARC_STAGE_STATS * sizeof(double)
                            : m->out_bytes(m->ctx, s, b->n);
    out[s] = zalloc(ob);
    saved[s] = zalloc(m->saved_bytes(m->ctx, s, b->n));
    void *scratch = zalloc(m->scratch_bytes(m->ctx, s, b->n));
    for (int k = 0; k < m->units[u].nparams; k++)
      pp[k] = drive_tensor(d, u, k, 0);
    sharc_stage_call_t c = {.stage = s,
                            .unit = u,
                            .kind = m->stages[s].kind,
                            .batch = b,
                            .params = pp,
                            .grads = NULL,
                            .in = s ? out[s - 1] : b->x,
                            .out = out[s],
                            .saved = saved[s],
                            .scratch = scratch};
    rc = m->forward(m->ctx, &c);
    free(scratch);
  }
  if (rc == 0)
    memcpy(stats, out[ns - 1], SHARC_STAGE_STATS * sizeof(double));
  for (int s = ns - 1; backward && s >= 0 && rc == 0; s--) {
    int u = m->stages[s].unit;
    void *din = s ? zalloc(m->out_bytes(m->ctx, s - 1, b->n)) : NULL;
    void *scratch = zalloc(m->scratch_bytes(m->ctx, s, b->n));
    for (int k = 0; k < m->units[u].nparams; k++) {
      pp[k] = drive_tensor(d, u, k, 0);
      gp[k] = drive_tensor(d, u, k, 1);
    }
    sharc_stage_call_t c = {.stage = s,
                            .unit = u,
                            .kind = m->stages[s].kind,
                            .batch = b,
                            .params = pp,
                            .grads = gp,
                            .in = s ? out[s - 1] : b->x,
                            .out = out[s],
                            .dout = dcur,
                            .din = din,
                            .saved = saved[s],
                            .scratch = scratch};
    rc = m->backward(m->ctx, &c);
    free(scratch);
    free(dcur);
    dcur = din;
  }
  free(dcur);
done:
  for (int s = 0; out && s < ns; s++) {
    free(out[s]);
    free(saved[s]);
  }
  free(out);
  free(saved);
  return rc;
}

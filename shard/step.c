/*
 * step.c - the per-step schedule (docs/design.md, decision 9). For each
 * micro-batch: forward  gather(i) -> forward(i) -> discard(i), with the gather
 * of the next unit in flight while unit i computes; backward gather(i) ->
 * backward(i) -> discard(i) -> reduce(grads i) on the last micro-batch only,
 * with the previous unit's gather in flight. Then the optimizer on the local
 * slices. Stage activations live from their forward to their backward; with
 * activation checkpointing the saved tensors are dropped after forward and
 * recomputed just before backward.
 */
#include <signal.h>
#include <string.h>

#include "engine.h"

static size_t out_bytes(struct sharc_shard *e, int s, int n) {
  const sharc_model_t *m = e->model;
  if (s == m->nstages - 1)
    return SHARC_STAGE_STATS * sizeof(double);
  return m->out_bytes(m->ctx, s, n);
}

/* Issues the gathers of the next prefetch-1 distinct units after stage s
 * in direction dir (+1 forward, -1 backward). */
static sharc_status_t prefetch(struct sharc_shard *e, int s, int dir) {
  const sharc_model_t *m = e->model;
  int ahead = e->cfg.prefetch - 1, cur = m->stages[s].unit;
  for (int t = s + dir; ahead > 0 && t >= 0 && t < m->nstages; t += dir) {
    int u = m->stages[t].unit;
    if (u == cur)
      continue;
    sharc_status_t st = eng_gather(e, u);
    if (st != SHARC_OK)
      return st;
    ahead--;
    cur = u;
  }
  return SHARC_OK;
}

/* Calls forward (backward when bwd) of stage s with a scratch buffer. */
static sharc_status_t call_stage(struct sharc_shard *e, int s,
                                 const sharc_batch_t *b, int bwd,
                                 const void *dout, void *din) {
  const sharc_model_t *m = e->model;
  int u = m->stages[s].unit;
  eunit_t *U = &e->units[u];
  estage_t *S = &e->outs[s];
  size_t scb = m->scratch_bytes(m->ctx, s, b->n);
  void *scratch = eng_alloc(e, MEM_ACT, scb);
  if (!scratch)
    return eng_fail(e, SHARC_ERR_NO_MEM,
                    "shard: out of memory for stage %d's scratch (%zu bytes)",
                    s, scb);
  sharc_stage_call_t c = {
      .stage = s,
      .unit = u,
      .kind = m->stages[s].kind,
      .batch = b,
      .params = U->pptr,
      .grads = bwd ? U->gptr : NULL,
      .in = s ? e->outs[s - 1].out : b->x,
      .out = S->out,
      .dout = bwd ? dout : NULL,
      .din = bwd ? din : NULL,
      .saved = S->saved,
      .scratch = scratch,
      .cuda_stream = e->dv.compute,
  };
  double t0 = eng_now();
  int rc = bwd ? m->backward(m->ctx, &c) : m->forward(m->ctx, &c);
  double t1 = eng_now();
  e->t_compute += t1 - t0;
  trace_span(&e->tr, bwd ? "backward" : "forward", u, t0, t1, e->steps);
  eng_free(e, MEM_ACT, scratch, scb);
  if (rc != 0)
    return eng_fail(e, SHARC_ERR_INTERNAL,
                    "shard: %s of stage %d (unit '%s') returned %d",
                    bwd ? "backward" : "forward", s, m->units[u].name, rc);
  return SHARC_OK;
}

static void free_stage(struct sharc_shard *e, int s) {
  estage_t *S = &e->outs[s];
  eng_free(e, MEM_ACT, S->out, S->out_b);
  eng_free(e, MEM_ACT, S->saved, S->saved_b);
  memset(S, 0, sizeof *S);
}

static sharc_status_t alloc_saved(struct sharc_shard *e, int s, int n) {
  estage_t *S = &e->outs[s];
  S->saved_b = e->model->saved_bytes(e->model->ctx, s, n);
  S->saved = eng_alloc(e, MEM_ACT, S->saved_b);
  if (!S->saved)
    return eng_fail(e, SHARC_ERR_NO_MEM,
                    "shard: out of memory for stage %d's saved tensors (%zu "
                    "bytes)",
                    s, S->saved_b);
  return SHARC_OK;
}

/* Forward of every stage; keeps the outputs (and saved tensors unless
 * checkpointing). sums += the last stage's statistics. */
static sharc_status_t forward(struct sharc_shard *e, const sharc_batch_t *b,
                              int keep_acts, double *sums) {
  const sharc_model_t *m = e->model;
  int ns = m->nstages;
  for (int s = 0; s < ns; s++) {
    int u = m->stages[s].unit;
    sharc_status_t st = eng_gather(e, u);
    if (st == SHARC_OK)
      st = prefetch(e, s, +1);
    if (st == SHARC_OK)
      st = eng_ready(e, u);
    if (st != SHARC_OK)
      return st;
    estage_t *S = &e->outs[s];
    S->out_b = out_bytes(e, s, b->n);
    S->out = eng_calloc(e, MEM_ACT, S->out_b);
    if (!S->out)
      return eng_fail(e, SHARC_ERR_NO_MEM,
                      "shard: out of memory for stage %d's output (%zu "
                      "bytes)",
                      s, S->out_b);
    st = alloc_saved(e, s, b->n);
    if (st == SHARC_OK)
      st = call_stage(e, s, b, 0, NULL, NULL);
    if (st != SHARC_OK)
      return st;
    if (!keep_acts || e->cfg.checkpoint_activations) {
      eng_free(e, MEM_ACT, S->saved, S->saved_b);
      S->saved = NULL;
    }
    /* the previous stage's output is needed again only by backward */
    if (!keep_acts && s > 0)
      free_stage(e, s - 1);
    /* discard after the unit's last forward use; a unit used by the last
     * stage goes straight on into backward */
    if (!(keep_acts && e->keep) && e->units[u].last_stage == s && s != ns - 1)
      eng_discard(e, u);
  }
  double stats[SHARC_STAGE_STATS];
  sharc_status_t st = eng_copy(e, stats, e->outs[ns - 1].out, sizeof stats);
  for (int k = 0; st == SHARC_OK && k < SHARC_STAGE_STATS; k++)
    sums[k] += stats[k];
  return st;
}

static sharc_status_t backward(struct sharc_shard *e, const sharc_batch_t *b,
                               int last_micro) {
  const sharc_model_t *m = e->model;
  int ns = m->nstages;
  void *dout = NULL; /* gradient of stage s's output */
  size_t dout_b = 0;
  sharc_status_t st = SHARC_OK;
  for (int s = ns - 1; s >= 0 && st == SHARC_OK; s--) {
    int u = m->stages[s].unit;
    eunit_t *U = &e->units[u];
    if (s == 0 && last_micro &&
        eng_fault_kill("step", e->world_rank, e->steps + 1,
                       "in the backward of its step, collectives queued"))
      raise(SIGKILL);
    st = eng_gather(e, u);
    if (st == SHARC_OK)
      st = prefetch(e, s, -1);
    if (st == SHARC_OK)
      st = eng_ready(e, u);
    if (st == SHARC_OK)
      st = eng_ugrad(e, u);
    if (st == SHARC_OK && !e->outs[s].saved) { /* checkpointed: recompute */
      st = alloc_saved(e, s, b->n);
      if (st == SHARC_OK)
        st = call_stage(e, s, b, 0, NULL, NULL);
    }
    size_t din_b = s ? out_bytes(e, s - 1, b->n) : 0;
    void *din = NULL;
    if (st == SHARC_OK && s) {
      din = eng_calloc(e, MEM_ACT, din_b);
      if (!din)
        st = eng_fail(e, SHARC_ERR_NO_MEM,
                      "shard: out of memory for stage %d's input gradient", s);
    }
    if (st == SHARC_OK)
      st = call_stage(e, s, b, 1, dout, din);
    eng_free(e, MEM_ACT, dout, dout_b);
    dout = din;
    dout_b = din_b;
    free_stage(e, s);
    if (st == SHARC_OK && U->first_stage == s) {
      eng_discard(e, u);
      if (last_micro)
        st = eng_reduce(e, u);
    }
    if (st == SHARC_OK)
      st = eng_reap(e, 0);
  }
  eng_free(e, MEM_ACT, dout, dout_b);
  return st;
}

static void release_all(struct sharc_shard *e) {
  for (int s = 0; s < e->model->nstages; s++)
    free_stage(e, s);
  for (int u = 0; u < e->model->nunits; u++)
    if (e->units[u].state != G_NONE)
      eng_discard(e, u);
}

static void drop_grads(struct sharc_shard *e) {
  (void)sharc_stream_synchronize(e->stream); /* nothing may still read them */
  for (int u = 0; u < e->model->nunits; u++) {
    eunit_t *U = &e->units[u];
    eng_free(e, MEM_UGRAD, U->ugrad, U->lay.padded * sizeof(float));
    U->ugrad = NULL;
    U->reducing = 0;
  }
}

static sharc_status_t check_batch(struct sharc_shard *e, const sharc_batch_t *b,
                                  int i) {
  if (b->n < 0 || b->global_n < 1 || b->n > b->global_n || (b->n && !b->x))
    return eng_fail(e, SHARC_ERR_INVALID_ARG,
                    "shard: micro-batch %d has n %d, global_n %d, x %p; need "
                    "0 <= n <= global_n, global_n >= 1 and x when n > 0",
                    i, b->n, b->global_n, b->x);
  return SHARC_OK;
}

/* Sums SHARC_STAGE_STATS doubles over every rank (shard, then replicas). */
static sharc_status_t sum_world(struct sharc_shard *e, double *v) {
  sharc_status_t st = sharc_all_reduce(v, v, SHARC_STAGE_STATS, SHARC_F64,
                                       SHARC_SUM, e->shard_comm, NULL);
  if (st == SHARC_OK && e->rep_size > 1)
    st = sharc_all_reduce(v, v, SHARC_STAGE_STATS, SHARC_F64, SHARC_SUM,
                          e->rep_comm, NULL);
  if (st != SHARC_OK)
    return eng_coll_fail(e, st, "statistics all-reduce", -1);
  return SHARC_OK;
}

static void begin_step(struct sharc_shard *e) {
  memcpy(e->mem_at_peak, e->mem_now, sizeof e->mem_now);
  e->total_peak = e->total_now;
  e->t_compute = e->t_exposed = 0;
  if (e->dev) /* comm and exposed from events on the streams */
    dev_time_begin(&e->dv);
}

sharc_status_t sharc_shard_step(sharc_shard_t e, const sharc_batch_t *micro,
                                int nmicro, sharc_step_stats_t *stats) {
  if (!e)
    return SHARC_ERR_INVALID_ARG;
  if (!micro || nmicro < 1)
    return eng_fail(e, SHARC_ERR_INVALID_ARG,
                    "sharc_shard_step: %d micro-batches; pass at least one",
                    nmicro);
  if (e->failed)
    return eng_failed_before(e);
  for (int i = 0; i < nmicro; i++) {
    sharc_status_t st = check_batch(e, &micro[i], i);
    if (st != SHARC_OK)
      return st;
  }
  begin_step(e);
  e->err[0] = '\0'; /* this step's first failure is its message */
  double t0 = eng_now();
  double sums[SHARC_STAGE_STATS] = {0};
  sharc_status_t st = SHARC_OK;
  for (int i = 0; i < nmicro && st == SHARC_OK; i++) {
    st = forward(e, &micro[i], 1, sums);
    if (st == SHARC_OK)
      st = backward(e, &micro[i], i == nmicro - 1);
  }
  if (st == SHARC_OK)
    st = eng_sync(e);
  sharc_status_t st2 = eng_reap(e, 1);
  if (st == SHARC_OK)
    st = st2;
  release_all(e);
  if (st != SHARC_OK) /* a failed step leaves no half-accumulated gradient */
    drop_grads(e);
  if (st == SHARC_OK)
    st = sum_world(e, sums);
  double norm = 0;
  if (st == SHARC_OK) {
    double t1 = eng_now();
    st = optim_step(e, &norm);
    trace_span(&e->tr, "optimizer", -1, t1, eng_now(), e->steps);
  }
  if (st != SHARC_OK) {
    e->failed = 1;
    trace_step_end(&e->tr, e->steps);
    return st;
  }
  /* GPU training: give back the cached blocks this step did not reuse */
  size_t cached_peak = e->dv.cached_peak;
  if (e->dev)
    dev_trim(&e->dv);
  /* GPU training: the stream times, the host's when they cannot be read */
  double t_comm = trace_comm_seconds(&e->tr), t_exposed = e->t_exposed;
  int cuda_timed = e->dev && dev_time_read(&e->dv, &t_comm, &t_exposed);
  if (stats) {
    memset(stats, 0, sizeof *stats);
    stats->loss = sums[0] / micro[0].global_n;
    stats->stat = sums[1];
    stats->grad_norm = norm;
    stats->t_step = eng_now() - t0;
    stats->t_compute = e->t_compute;
    stats->t_comm = t_comm;
    stats->t_exposed = t_exposed;
    stats->timing_cuda_events = cuda_timed;
    eng_mem_report(e, e->mem_at_peak, e->total_peak, cached_peak, &stats->peak);
    eng_mem_report(e, e->mem_now, e->total_now, e->dv.cached, &stats->now);
  }
  trace_step_end(&e->tr, e->steps); /* its spans carry this step's number */
  e->steps++;
  return SHARC_OK;
}

sharc_status_t sharc_shard_eval(sharc_shard_t e, const sharc_batch_t *batch,
                                double sums[SHARC_STAGE_STATS]) {
  if (!e || !batch || !sums)
    return SHARC_ERR_INVALID_ARG;
  if (e->failed)
    return eng_failed_before(e);
  sharc_status_t st = check_batch(e, batch, 0);
  if (st != SHARC_OK)
    return st;
  for (int k = 0; k < SHARC_STAGE_STATS; k++)
    sums[k] = 0;
  e->err[0] = '\0'; /* this call's first failure is its message */
  st = forward(e, batch, 0, sums);
  if (st == SHARC_OK)
    st = eng_sync(e);
  release_all(e);
  if (e->dev)
    dev_trim(&e->dv);
  if (st == SHARC_OK)
    st = sum_world(e, sums);
  if (st != SHARC_OK)
    e->failed = 1;
  trace_step_end(&e->tr, e->steps);
  return st;
}

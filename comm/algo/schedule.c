/*
 * schedule.c - the schedule builder the algorithm files use, and the names
 * of algorithms and collectives (docs/design.md, decision 2). Pure logic.
 */
#include "schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* ---- building ----
 * Invariant while building: round_start has nrounds + 1 valid entries and
 * round_start[nrounds] == nops, so the last round is always well formed.
 * Only the last round can be empty (sched_round reuses an empty one). */

void sched_init(sched_t *s) {
  memset(s, 0, sizeof *s);
  s->nchan = 1;
}

void sched_free(sched_t *s) {
  free(s->ops);
  free(s->round_start);
  sched_init(s);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 1;
  size_t ncap = *cap ? *cap * 2 : 16;
  while (ncap < need)
    ncap *= 2;
  void *q = realloc(*p, ncap * elem);
  if (!q)
    return 0;
  *p = q;
  *cap = ncap;
  return 1;
}

void sched_round(sched_t *s) {
  if (s->oom)
    return;
  if (s->nrounds > 0 && s->round_start[s->nrounds - 1] == s->nops)
    return;
  if (!grow((void **)&s->round_start, &s->rounds_cap, s->nrounds + 2,
            sizeof *s->round_start)) {
    s->oom = 1;
    return;
  }
  s->round_start[s->nrounds] = s->nops;
  s->nrounds++;
  s->round_start[s->nrounds] = s->nops;
}

static void append(sched_t *s, const sched_op_t *op) {
  if (op->count == 0 || s->oom)
    return; /* both sides drop empty transfers */
  if (s->nrounds == 0)
    sched_round(s);
  if (s->oom)
    return;
  if (!grow((void **)&s->ops, &s->ops_cap, s->nops + 1, sizeof *s->ops)) {
    s->oom = 1;
    return;
  }
  s->ops[s->nops++] = *op;
  s->round_start[s->nrounds] = s->nops;
}

void sched_send(sched_t *s, int peer, int chan, sched_buf_t src, size_t off,
                size_t count) {
  sched_op_t op = {.kind = SCHED_SEND,
                   .chan = (uint8_t)chan,
                   .src_buf = (uint16_t)src,
                   .dst_buf = (uint16_t)src,
                   .peer = peer,
                   .src_off = off,
                   .dst_off = 0,
                   .count = count};
  append(s, &op);
}

void sched_recv(sched_t *s, int peer, int chan, sched_buf_t dst, size_t off,
                size_t count) {
  sched_op_t op = {.kind = SCHED_RECV,
                   .chan = (uint8_t)chan,
                   .src_buf = (uint16_t)dst,
                   .dst_buf = (uint16_t)dst,
                   .peer = peer,
                   .src_off = 0,
                   .dst_off = off,
                   .count = count};
  append(s, &op);
}

void sched_recv_reduce(sched_t *s, int peer, int chan, sched_buf_t src,
                       size_t src_off, sched_buf_t dst, size_t dst_off,
                       size_t count) {
  sched_op_t op = {.kind = SCHED_RECV_REDUCE,
                   .chan = (uint8_t)chan,
                   .src_buf = (uint16_t)src,
                   .dst_buf = (uint16_t)dst,
                   .peer = peer,
                   .src_off = src_off,
                   .dst_off = dst_off,
                   .count = count};
  append(s, &op);
}

void sched_copy(sched_t *s, sched_buf_t src, size_t src_off, sched_buf_t dst,
                size_t dst_off, size_t count) {
  sched_op_t op = {.kind = SCHED_COPY,
                   .chan = 0,
                   .src_buf = (uint16_t)src,
                   .dst_buf = (uint16_t)dst,
                   .peer = -1,
                   .src_off = src_off,
                   .dst_off = dst_off,
                   .count = count};
  append(s, &op);
}

sharc_status_t sched_finish(sched_t *s) {
  if (s->oom)
    return err_set(SHARC_ERR_NO_MEM,
                   "schedule: out of memory after %zu ops in %zu rounds",
                   s->nops, s->nrounds);
  if (s->nrounds > 0 && s->round_start[s->nrounds - 1] == s->nops)
    s->nrounds--; /* trailing empty round; round_start[nrounds] stays nops */
  if (s->nchan < 1)
    s->nchan = 1;
  s->shared_sends = 0;
  for (size_t r = 0; r < s->nrounds && !s->shared_sends; r++)
    for (size_t i = s->round_start[r] + 1; i < s->round_start[r + 1]; i++) {
      const sched_op_t *a = &s->ops[i - 1], *b = &s->ops[i];
      if (a->kind == SCHED_SEND && b->kind == SCHED_SEND &&
          a->src_buf == b->src_buf && a->src_off == b->src_off &&
          a->count == b->count) {
        s->shared_sends = 1;
        break;
      }
    }
  return SHARC_OK;
}

/* ---- names ---- */

static const char *const algo_names[SCHED_ALGO_COUNT] = {
    "ring", "tree", "rabenseifner", "dbtree", "hier", "direct", "bruck"};
static const char *const coll_names[SCHED_COLL_COUNT] = {
    "all_gather", "reduce_scatter", "all_reduce", "broadcast",  "barrier",
    "reduce",     "gather",         "scatter",    "all_to_all", "send_recv"};

const char *sched_algo_name(sched_algo_t algo) {
  return (unsigned)algo < SCHED_ALGO_COUNT ? algo_names[algo] : "?";
}

const char *sched_coll_name(sched_coll_t coll) {
  return (unsigned)coll < SCHED_COLL_COUNT ? coll_names[coll] : "?";
}

const char *sched_coll_fn(sched_coll_t coll) {
  static const char *const fn[SCHED_COLL_COUNT] = {
      "sharc_all_gather",     "sharc_reduce_scatter", "sharc_all_reduce",
      "sharc_broadcast",      "sharc_barrier",        "sharc_reduce",
      "sharc_gather",         "sharc_scatter",        "sharc_all_to_all",
      "sharc_send/sharc_recv"};
  return (unsigned)coll < SCHED_COLL_COUNT ? fn[coll] : "sharc_?";
}

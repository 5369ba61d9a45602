/*
 * schedule_sim.c - runs every rank's schedule of a collective in one
 * process, with the executor's semantics, and checks it (docs/design.md,
 * decision 2):
 *
 *  - every op stays inside its buffer; nothing writes SEND; non-root
 *    broadcast ranks and barrier never touch user buffers;
 *  - no hazard: within a round, no op writes bytes another op of the round
 *    reads or writes (addresses are real, so in-place aliasing counts);
 *  - rendezvous (zero buffering): an op completes only when it and its
 *    matching op are both active: in their rank's current round and first
 *    not-yet-done of their (peer, channel, direction) there. The k-th SEND
 *    A->B on channel c meets the k-th RECV/RECV_REDUCE on B from A on c,
 *    with equal counts. No progress with ranks unfinished is a deadlock;
 *  - the result: every rank's output against a reference computed in f64
 *    or exact integers (AVG as SUM then kernel_div, as the executor does);
 *    gathers and broadcasts bit-exact; barrier: every rank has heard,
 *    transitively, from every other before it finishes.
 *
 * Buffers: SEND/RECV as the collective defines them (element counts in
 * schedule.h), allocated in the aliased layout for in place; TMP of
 * tmp_count elements (bytes for barrier). Inputs come from a deterministic
 * pattern chosen so that no op overflows and float sums are exact.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "core.h"
#include "dispatch.h"
#include "reduce.h"
#include "schedule_sim.h"

#define SIM_MAX_RANKS 64

typedef struct {
  uint8_t *buf[3]; /* SEND, RECV, TMP (SEND may alias RECV) */
  size_t len[3];   /* elements */
  void *own[3];    /* allocations to free */
  size_t round;
  uint8_t *done;
  uint64_t know; /* ranks heard from, transitively */
} rstate_t;

typedef struct {
  const char *name;
  const sched_args_t *a;
  sharc_dtype_t dtype;
  sharc_op_t op;
  size_t es;
  int n;
  sched_t *s;
  rstate_t *st;
  char hdr[256];
} sim_t;

static const char *const kind_names[] = {"SEND", "RECV", "RECV_REDUCE", "COPY"};
static const char *const buf_names[] = {"SEND", "RECV", "TMP"};

static int is_float(sharc_dtype_t d) {
  return d == SHARC_F32 || d == SHARC_F64 || d == SHARC_F16 || d == SHARC_BF16;
}
static int is_signed(sharc_dtype_t d) {
  return d == SHARC_I8 || d == SHARC_I32 || d == SHARC_I64;
}

/* ---- input pattern and typed access ---- */

static uint32_t mix(int rank, size_t idx) {
  uint32_t h = (uint32_t)rank * 0x9E3779B1u ^ (uint32_t)idx * 0x85EBCA77u;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  return h;
}

/* Input element idx of rank: small values whose sums are exact in every
 * float type and whose products stay below 2^4 in magnitude. */
static double gen(const sim_t *m, int rank, size_t idx) {
  uint32_t h = mix(rank, idx);
  sharc_dtype_t d = m->dtype;
  switch (m->op) {
  case SHARC_SUM:
  case SHARC_AVG:
    if (is_float(d))
      return d == SHARC_BF16 ? 1.0 + (h % 2) * 0.5 : 1.0 + (h % 8) / 8.0;
    return is_signed(d) ? (double)(h % 3) - 1.0 : (double)(h % 3);
  case SHARC_PROD: {
    size_t t = ((size_t)rank + idx) % 16;
    if (t == 0)
      return 2.0;
    if (t == 8 && is_float(d))
      return 0.5;
    if ((is_float(d) || is_signed(d)) && ((size_t)rank * 3 + idx) % 5 == 1)
      return -1.0;
    return 1.0;
  }
  default: /* MIN, MAX */
    if (is_float(d))
      return ((double)(h % 13) - 6.0) * 0.25;
    return is_signed(d) ? (double)(h % 13) - 6.0 : (double)(h % 13);
  }
}

/* Stores v (integral for integer types) as element i of p. */
static void store(sharc_dtype_t d, void *p, size_t i, double v) {
  switch (d) {
  case SHARC_F32:
    ((float *)p)[i] = (float)v;
    break;
  case SHARC_F64:
    ((double *)p)[i] = v;
    break;
  case SHARC_F16:
    ((uint16_t *)p)[i] = kernel_f32_to_f16((float)v);
    break;
  case SHARC_BF16:
    ((uint16_t *)p)[i] = kernel_f32_to_bf16((float)v);
    break;
  case SHARC_I8:
    ((int8_t *)p)[i] = (int8_t)(int64_t)v;
    break;
  case SHARC_U8:
    ((uint8_t *)p)[i] = (uint8_t)(int64_t)v;
    break;
  case SHARC_I32:
    ((int32_t *)p)[i] = (int32_t)(int64_t)v;
    break;
  case SHARC_U32:
    ((uint32_t *)p)[i] = (uint32_t)(int64_t)v;
    break;
  case SHARC_I64:
    ((int64_t *)p)[i] = (int64_t)v;
    break;
  case SHARC_U64:
    ((uint64_t *)p)[i] = (uint64_t)(int64_t)v;
    break;
  default:
    break;
  }
}

static double load(sharc_dtype_t d, const void *p, size_t i) {
  switch (d) {
  case SHARC_F32:
    return ((const float *)p)[i];
  case SHARC_F64:
    return ((const double *)p)[i];
  case SHARC_F16:
    return kernel_f16_to_f32(((const uint16_t *)p)[i]);
  case SHARC_BF16:
    return kernel_bf16_to_f32(((const uint16_t *)p)[i]);
  case SHARC_I8:
    return ((const int8_t *)p)[i];
  case SHARC_U8:
    return ((const uint8_t *)p)[i];
  case SHARC_I32:
    return ((const int32_t *)p)[i];
  case SHARC_U32:
    return ((const uint32_t *)p)[i];
  case SHARC_I64:
    return (double)((const int64_t *)p)[i];
  case SHARC_U64:
    return (double)((const uint64_t *)p)[i];
  default:
    return 0;
  }
}

static double tolerance(sharc_dtype_t d) {
  switch (d) {
  case SHARC_F32:
    return 1e-5;
  case SHARC_F64:
    return 1e-12;
  case SHARC_F16:
    return 1e-2;
  case SHARC_BF16:
    return 5e-2;
  default:
    return 0;
  }
}

/* Reference of element idx reduced over all ranks' inputs at index idx. */
static double reference(const sim_t *m, size_t idx) {
  int n = m->n;
  if (!is_float(m->dtype)) {
    int64_t acc = (int64_t)gen(m, 0, idx);
    for (int r = 1; r < n; r++) {
      int64_t v = (int64_t)gen(m, r, idx);
      switch (m->op) {
      case SHARC_PROD:
        acc *= v;
        break;
      case SHARC_MIN:
        acc = v < acc ? v : acc;
        break;
      case SHARC_MAX:
        acc = v > acc ? v : acc;
        break;
      default:
        acc += v;
        break;
      }
    }
    if (m->op == SHARC_AVG)
      acc /= n; /* truncates toward zero, as C */
    return (double)acc;
  }
  double acc = gen(m, 0, idx);
  for (int r = 1; r < n; r++) {
    double v = gen(m, r, idx);
    switch (m->op) {
    case SHARC_PROD:
      acc *= v;
      break;
    case SHARC_MIN:
      acc = fmin(acc, v);
      break;
    case SHARC_MAX:
      acc = fmax(acc, v);
      break;
    default:
      acc += v;
      break;
    }
  }
  return m->op == SHARC_AVG ? acc / n : acc;
}

/* ---- buffers ---- */

static sharc_status_t alloc_rank(sim_t *m, int r) {
  const sched_args_t *a = m->a;
  rstate_t *st = &m->st[r];
  size_t n = (size_t)m->n, c = a->count, es = m->es;
  size_t sl = 0, rl = 0;
  switch (a->coll) {
  case SCHED_ALL_GATHER:
    sl = c;
    rl = n * c;
    break;
  case SCHED_REDUCE_SCATTER:
    sl = n * c;
    rl = c;
    break;
  case SCHED_ALL_REDUCE:
    sl = c;
    rl = c;
    break;
  case SCHED_BROADCAST:
    sl = r == a->root ? c : 0;
    rl = c;
    break;
  case SCHED_REDUCE: /* the result on the root only */
    sl = c;
    rl = r == a->root ? c : 0;
    break;
  case SCHED_GATHER:
    sl = c;
    rl = r == a->root ? n * c : 0;
    break;
  case SCHED_SCATTER:
    sl = r == a->root ? n * c : 0;
    rl = c;
    break;
  case SCHED_ALL_TO_ALL:
    sl = rl = n * c;
    break;
  default:
    break;
  }
  st->len[SCHED_BUF_SEND] = sl;
  st->len[SCHED_BUF_RECV] = rl;
  st->len[SCHED_BUF_TMP] = m->s[r].tmp_count;
  /* in place: rooted collectives other than broadcast alias on the root
   * only (the other ranks have one buffer) */
  int rooted_only = sched_coll_rooted(a->coll) && a->coll != SCHED_BROADCAST;
  int alias =
      a->inplace && a->coll != SCHED_BARRIER && (!rooted_only || r == a->root);
  /* the larger of an aliased pair owns the memory */
  int owner =
      alias && (a->coll == SCHED_REDUCE_SCATTER || a->coll == SCHED_SCATTER)
          ? SCHED_BUF_SEND
          : SCHED_BUF_RECV;
  for (int b = 0; b < 3; b++) {
    if (alias && b != owner && b != SCHED_BUF_TMP)
      continue;
    st->own[b] = malloc(st->len[b] * es + 1);
    if (!st->own[b])
      return err_set(SHARC_ERR_NO_MEM, "%s: no memory for rank %d buffers",
                     m->hdr, r);
    st->buf[b] = st->own[b];
    memset(st->buf[b], 0xA5, st->len[b] * es); /* poison */
  }
  if (alias) {
    size_t at = a->coll == SCHED_ALL_GATHER ||
                        a->coll == SCHED_REDUCE_SCATTER ||
                        a->coll == SCHED_GATHER || a->coll == SCHED_SCATTER
                    ? (size_t)r * c * es
                    : 0;
    if (owner == SCHED_BUF_RECV)
      st->buf[SCHED_BUF_SEND] = st->buf[SCHED_BUF_RECV] + at;
    else
      st->buf[SCHED_BUF_RECV] = st->buf[SCHED_BUF_SEND] + at;
  }
  for (size_t i = 0; i < sl; i++)
    store(m->dtype, st->buf[SCHED_BUF_SEND], i, gen(m, r, i));
  st->know = (uint64_t)1 << r;
  st->done = calloc(m->s[r].nops + 1, 1);
  if (!st->done)
    return err_set(SHARC_ERR_NO_MEM, "%s: no memory for rank %d state", m->hdr,
                   r);
  return SHARC_OK;
}

/* ---- static checks: bounds and hazards ---- */

typedef struct {
  const uint8_t *lo, *hi;
} span_t;

static int overlap(span_t x, span_t y) {
  return x.lo < y.hi && y.lo < x.hi && x.lo != x.hi && y.lo != y.hi;
}

static span_t span(const sim_t *m, int r, int b, size_t off, size_t count) {
  span_t sp = {m->st[r].buf[b] + off * m->es,
               m->st[r].buf[b] + (off + count) * m->es};
  return sp;
}

static sharc_status_t check_range(const sim_t *m, int r, size_t i, int b,
                                  size_t off, size_t count, int write) {
  const rstate_t *st = &m->st[r];
  if (b > SCHED_BUF_TMP)
    return err_set(SHARC_ERR_INTERNAL, "%s: rank %d op %zu: buffer id %d",
                   m->hdr, r, i, b);
  if (write && b == SCHED_BUF_SEND)
    return err_set(SHARC_ERR_INTERNAL,
                   "%s: rank %d op %zu writes SEND (user input is read-only; "
                   "address RECV or TMP)",
                   m->hdr, r, i);
  if (off > st->len[b] || count > st->len[b] - off)
    return err_set(SHARC_ERR_INTERNAL,
                   "%s: rank %d op %zu %s %s[%zu, +%zu) but it has %zu "
                   "elements%s",
                   m->hdr, r, i, write ? "writes" : "reads", buf_names[b], off,
                   count, st->len[b],
                   st->len[b] == 0 && sched_coll_rooted(m->a->coll)
                       ? " (only the root owns this buffer)"
                       : "");
  return SHARC_OK;
}

static sharc_status_t check_static(const sim_t *m, int r) {
  const sched_t *s = &m->s[r];
  for (size_t i = 0; i < s->nops; i++) {
    const sched_op_t *o = &s->ops[i];
    if (o->kind > SCHED_COPY)
      return err_set(SHARC_ERR_INTERNAL, "%s: rank %d op %zu: kind %d", m->hdr,
                     r, i, o->kind);
    if (o->kind != SCHED_COPY &&
        (o->peer < 0 || o->peer >= m->n || o->peer == r || o->chan >= s->nchan))
      return err_set(SHARC_ERR_INTERNAL,
                     "%s: rank %d op %zu %s: peer %d chan %d invalid (%d "
                     "ranks, %d channels)",
                     m->hdr, r, i, kind_names[o->kind], o->peer, o->chan, m->n,
                     s->nchan);
    if (o->kind != SCHED_RECV)
      CHECK(check_range(m, r, i, o->src_buf, o->src_off, o->count, 0));
    if (o->kind != SCHED_SEND)
      CHECK(check_range(m, r, i, o->dst_buf, o->dst_off, o->count, 1));
    if (o->kind == SCHED_RECV_REDUCE || o->kind == SCHED_COPY) {
      span_t x = span(m, r, o->src_buf, o->src_off, o->count);
      span_t y = span(m, r, o->dst_buf, o->dst_off, o->count);
      if (overlap(x, y) && (o->kind == SCHED_COPY || x.lo != y.lo))
        return err_set(SHARC_ERR_INTERNAL,
                       "%s: rank %d op %zu %s: source %s[%zu] and "
                       "destination %s[%zu] (+%zu) overlap",
                       m->hdr, r, i, kind_names[o->kind], buf_names[o->src_buf],
                       o->src_off, buf_names[o->dst_buf], o->dst_off, o->count);
    }
  }
  for (size_t k = 0; k < s->nrounds; k++) {
    for (size_t i = s->round_start[k]; i < s->round_start[k + 1]; i++) {
      const sched_op_t *x = &s->ops[i];
      span_t xr = span(m, r, x->src_buf, x->src_off, x->count);
      span_t xw = span(m, r, x->dst_buf, x->dst_off, x->count);
      int xreads = x->kind != SCHED_RECV, xwrites = x->kind != SCHED_SEND;
      for (size_t j = i + 1; j < s->round_start[k + 1]; j++) {
        const sched_op_t *y = &s->ops[j];
        span_t yr = span(m, r, y->src_buf, y->src_off, y->count);
        span_t yw = span(m, r, y->dst_buf, y->dst_off, y->count);
        int yreads = y->kind != SCHED_RECV, ywrites = y->kind != SCHED_SEND;
        if ((xwrites &&
             ((yreads && overlap(xw, yr)) || (ywrites && overlap(xw, yw)))) ||
            (ywrites && xreads && overlap(yw, xr)))
          return err_set(SHARC_ERR_INTERNAL,
                         "%s: hazard on rank %d round %zu: op %zu (%s peer "
                         "%d %s[%zu]/%s[%zu] +%zu) and op %zu (%s peer %d "
                         "%s[%zu]/%s[%zu] +%zu) touch the same bytes and one "
                         "writes",
                         m->hdr, r, k, i, kind_names[x->kind], x->peer,
                         buf_names[x->src_buf], x->src_off,
                         buf_names[x->dst_buf], x->dst_off, x->count, j,
                         kind_names[y->kind], y->peer, buf_names[y->src_buf],
                         y->src_off, buf_names[y->dst_buf], y->dst_off,
                         y->count);
      }
    }
  }
  return SHARC_OK;
}

/* ---- rendezvous execution ---- */

/* Whether op i of rank r is first not-done of its (peer, chan, direction)
 * in r's current round. */
static int is_head(const sim_t *m, int r, size_t i) {
  const sched_t *s = &m->s[r];
  const sched_op_t *o = &s->ops[i];
  int dir = o->kind == SCHED_SEND;
  for (size_t j = s->round_start[m->st[r].round]; j < i; j++) {
    const sched_op_t *p = &s->ops[j];
    if (!m->st[r].done[j] && p->kind != SCHED_COPY &&
        (p->kind == SCHED_SEND) == dir && p->peer == o->peer &&
        p->chan == o->chan)
      return 0;
  }
  return 1;
}

/* The active SEND of rank `from` to `to` on chan, or SIZE_MAX. */
static size_t active_send(const sim_t *m, int from, int to, int chan) {
  const sched_t *s = &m->s[from];
  size_t k = m->st[from].round;
  if (k >= s->nrounds)
    return SIZE_MAX;
  for (size_t j = s->round_start[k]; j < s->round_start[k + 1]; j++) {
    const sched_op_t *p = &s->ops[j];
    if (!m->st[from].done[j] && p->kind == SCHED_SEND && p->peer == to &&
        p->chan == chan)
      return j;
  }
  return SIZE_MAX;
}

static void deadlock_report(const sim_t *m) {
  char msg[900];
  size_t len = 0;
  int shown = 0;
  msg[0] = 0;
  for (int r = 0; r < m->n && shown < 6; r++) {
    const sched_t *s = &m->s[r];
    size_t k = m->st[r].round;
    if (k >= s->nrounds)
      continue;
    for (size_t j = s->round_start[k]; j < s->round_start[k + 1]; j++) {
      if (m->st[r].done[j])
        continue;
      const sched_op_t *o = &s->ops[j];
      int w = snprintf(msg + len, sizeof msg - len,
                       "%srank %d round %zu/%zu waits on %s %s %d chan %d "
                       "count %zu",
                       shown ? "; " : "", r, k, s->nrounds, kind_names[o->kind],
                       o->kind == SCHED_SEND ? "to" : "from", o->peer, o->chan,
                       o->count);
      if (w > 0 && (size_t)w < sizeof msg - len)
        len += (size_t)w;
      shown++;
      break;
    }
  }
  err_set(SHARC_ERR_INTERNAL, "%s: deadlock: no rank can progress: %s", m->hdr,
          msg);
}

static sharc_status_t run(sim_t *m) {
  sharc_op_t rop = m->op == SHARC_AVG ? SHARC_SUM : m->op;
  for (;;) {
    int progress = 0, alive = 0;
    for (int r = 0; r < m->n; r++) {
      const sched_t *s = &m->s[r];
      rstate_t *st = &m->st[r];
      if (st->round >= s->nrounds)
        continue;
      alive = 1;
      int left = 0;
      for (size_t i = s->round_start[st->round];
           i < s->round_start[st->round + 1]; i++) {
        if (st->done[i])
          continue;
        const sched_op_t *o = &s->ops[i];
        if (o->kind == SCHED_COPY) {
          memmove(st->buf[o->dst_buf] + o->dst_off * m->es,
                  st->buf[o->src_buf] + o->src_off * m->es, o->count * m->es);
          st->done[i] = 1;
          progress = 1;
          continue;
        }
        if (o->kind == SCHED_SEND || !is_head(m, r, i)) {
          left = 1;
          continue;
        }
        size_t j = active_send(m, o->peer, r, o->chan);
        if (j == SIZE_MAX) {
          left = 1;
          continue;
        }
        const sched_op_t *so = &m->s[o->peer].ops[j];
        rstate_t *ps = &m->st[o->peer];
        if (so->count != o->count)
          return err_set(SHARC_ERR_MISMATCH,
                         "%s: FIFO mismatch rank %d -> %d chan %d: SEND "
                         "(op %zu, round %zu) has %zu elements but %s (op "
                         "%zu, round %zu) expects %zu",
                         m->hdr, o->peer, r, o->chan, j, ps->round, so->count,
                         kind_names[o->kind], i, st->round, o->count);
        const uint8_t *in = ps->buf[so->src_buf] + so->src_off * m->es;
        uint8_t *dst = st->buf[o->dst_buf] + o->dst_off * m->es;
        if (o->kind == SCHED_RECV)
          memcpy(dst, in, o->count * m->es);
        else
          kernel_reduce(m->dtype, rop, dst, in,
                        st->buf[o->src_buf] + o->src_off * m->es, o->count);
        st->know |= ps->know;
        st->done[i] = 1;
        ps->done[j] = 1;
        progress = 1;
      }
      if (!left) {
        /* sends may still be pending: the round ends when all are done */
        int all = 1;
        for (size_t i = s->round_start[st->round];
             i < s->round_start[st->round + 1] && all; i++)
          all = st->done[i];
        if (all) {
          st->round++;
          progress = 1;
        }
      }
    }
    if (!alive)
      return SHARC_OK;
    if (!progress) {
      deadlock_report(m);
      return SHARC_ERR_INTERNAL;
    }
  }
}

/* ---- result check ---- */

static sharc_status_t mismatch(const sim_t *m, int r, size_t idx, double expect,
                               double got) {
  return err_set(SHARC_ERR_INTERNAL,
                 "%s: wrong result on rank %d index %zu: expected %.9g got "
                 "%.9g",
                 m->hdr, r, idx, expect, got);
}

static sharc_status_t check_result(sim_t *m, int bitwise_equal) {
  const sched_args_t *a = m->a;
  int n = m->n;
  size_t c = a->count, es = m->es;
  uint8_t tmp[8];
  if (a->coll == SCHED_BARRIER) {
    uint64_t all = n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1);
    for (int r = 0; r < n; r++)
      if (m->st[r].know != all)
        return err_set(SHARC_ERR_INTERNAL,
                       "%s: rank %d left the barrier without hearing from "
                       "every rank (heard mask 0x%llx)",
                       m->hdr, r, (unsigned long long)m->st[r].know);
    return SHARC_OK;
  }
  for (int r = 0; r < n; r++) {
    const uint8_t *out = m->st[r].buf[SCHED_BUF_RECV];
    size_t len = m->st[r].len[SCHED_BUF_RECV];
    if (a->coll == SCHED_ALL_GATHER || a->coll == SCHED_BROADCAST ||
        a->coll == SCHED_GATHER || a->coll == SCHED_SCATTER ||
        a->coll == SCHED_ALL_TO_ALL) {
      for (size_t i = 0; i < len; i++) {
        int blocks = a->coll == SCHED_ALL_GATHER || a->coll == SCHED_GATHER ||
                     a->coll == SCHED_ALL_TO_ALL;
        int src = blocks ? (int)(i / c) : a->root;
        /* all-to-all: RECV block p is rank p's SEND block r */
        size_t si = a->coll == SCHED_ALL_TO_ALL ? (size_t)r * c + i % c
                    : blocks                    ? i % c
                    : a->coll == SCHED_SCATTER  ? (size_t)r * c + i
                                                : i;
        store(m->dtype, tmp, 0, gen(m, src, si));
        if (memcmp(out + i * es, tmp, es) != 0)
          return mismatch(m, r, i, gen(m, src, si), load(m->dtype, out, i));
      }
      continue;
    }
    if (m->op == SHARC_AVG)
      kernel_div(m->dtype, m->st[r].buf[SCHED_BUF_RECV], len, n);
    size_t base = a->coll == SCHED_REDUCE_SCATTER ? (size_t)r * c : 0;
    double tol = tolerance(m->dtype);
    for (size_t i = 0; i < len; i++) {
      double e = reference(m, base + i), g = load(m->dtype, out, i);
      if (is_float(m->dtype)) {
        if (!(fabs(g - e) <= tol * fmax(1.0, fabs(e))))
          return mismatch(m, r, i, e, g);
      } else {
        store(m->dtype, tmp, 0, e);
        if (memcmp(out + i * es, tmp, es) != 0)
          return mismatch(m, r, i, e, g);
      }
    }
    if (bitwise_equal && a->coll == SCHED_ALL_REDUCE && r > 0 &&
        memcmp(out, m->st[0].buf[SCHED_BUF_RECV], len * es) != 0) {
      size_t i = 0;
      while (memcmp(out + i * es, m->st[0].buf[SCHED_BUF_RECV] + i * es, es) ==
             0)
        i++;
      return err_set(SHARC_ERR_INTERNAL,
                     "%s: rank %d differs from rank 0 at index %zu (%.9g vs "
                     "%.9g): all-reduce results must be bitwise identical",
                     m->hdr, r, i, load(m->dtype, out, i),
                     load(m->dtype, m->st[0].buf[SCHED_BUF_RECV], i));
    }
  }
  return SHARC_OK;
}

/* ---- entry points ---- */

sharc_status_t sched_simulate_given(const char *name, const sched_args_t *proto,
                                    sched_t *scheds, sharc_dtype_t dtype,
                                    sharc_op_t op, int check_bitwise_equal) {
  sim_t m = {.name = name,
             .a = proto,
             .dtype = dtype,
             .op = op,
             .n = proto->nranks,
             .s = scheds};
  snprintf(m.hdr, sizeof m.hdr,
           "sim %s %s nranks %d count %zu (inplace %d, nchan %d, chunk %zu, "
           "root %d, %s %s)",
           name, sched_coll_name(proto->coll), proto->nranks, proto->count,
           proto->inplace, proto->nchan, proto->chunk, proto->root,
           sharc_dtype_name(dtype), sharc_op_name(op));
  if (m.n < 1 || m.n > SIM_MAX_RANKS)
    return err_set(SHARC_ERR_INVALID_ARG, "%s: the simulator runs 1..%d ranks",
                   m.hdr, SIM_MAX_RANKS);
  if (proto->coll != SCHED_BARRIER &&
      ((unsigned)dtype >= SHARC_DTYPE_COUNT || (unsigned)op >= SHARC_OP_COUNT))
    return err_set(SHARC_ERR_INVALID_ARG, "%s: bad dtype %d or op %d", m.hdr,
                   (int)dtype, (int)op);
  m.es = proto->coll == SCHED_BARRIER ? 1 : sharc_dtype_size(dtype);
  sharc_status_t st = SHARC_OK;
  m.st = calloc((size_t)m.n, sizeof *m.st);
  if (!m.st)
    return err_set(SHARC_ERR_NO_MEM, "%s: no memory", m.hdr);
  for (int r = 0; r < m.n; r++)
    CHECK_GOTO(alloc_rank(&m, r), st, out);
  for (int r = 0; r < m.n; r++)
    CHECK_GOTO(check_static(&m, r), st, out);
  CHECK_GOTO(run(&m), st, out);
  CHECK_GOTO(check_result(&m, check_bitwise_equal), st, out);
out:
  for (int r = 0; r < m.n; r++) {
    for (int b = 0; b < 3; b++)
      free(m.st[r].own[b]);
    free(m.st[r].done);
  }
  free(m.st);
  return st;
}

sharc_status_t sched_simulate(sched_algo_t algo, const sched_args_t *proto,
                              sharc_dtype_t dtype, sharc_op_t op) {
  if (!proto || proto->nranks < 1 || proto->nranks > SIM_MAX_RANKS)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sched_simulate: nranks %d outside 1..%d",
                   proto ? proto->nranks : 0, SIM_MAX_RANKS);
  int n = proto->nranks;
  sched_t *s = calloc((size_t)n, sizeof *s);
  if (!s)
    return err_set(SHARC_ERR_NO_MEM, "sched_simulate: no memory");
  sharc_status_t st = SHARC_OK;
  for (int r = 0; r < n; r++)
    sched_init(&s[r]);
  for (int r = 0; r < n; r++) {
    sched_args_t a = *proto;
    a.rank = r;
    CHECK_GOTO(sched_build(algo, &a, &s[r]), st, out);
  }
  st = sched_simulate_given(sched_algo_name(algo), proto, s, dtype, op,
                            algo == SCHED_ALGO_RING ||
                                algo == SCHED_ALGO_DBTREE);
out:
  for (int r = 0; r < n; r++)
    sched_free(&s[r]);
  free(s);
  return st;
}

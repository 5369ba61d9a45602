/*
 * direct_queue.c - queueing one call on the direct GPU path (direct.h has
 * the protocol): the steps of each collective as copies, reduction kernels
 * and stream memory operations on the caller's CUDA stream, and the
 * setup's flag probe made of the same operations.
 */
#include "direct.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef SHARC_HAVE_CUDA

#include "device.h" /* kernels/ */

/* ---- queueing one call ---------------------------------------------------
 * q_t gathers the first error; every helper does nothing after one. */

typedef struct {
  devcomm_t *dc;
  cudaStream_t cs;
  const char *what; /* the first failed operation */
  int err;          /* cudaError_t or CUresult of it */
} q_t;

static void q_fail(q_t *q, int e, const char *what) {
  if (e && !q->err) {
    q->err = e;
    q->what = what;
  }
}

static uint32_t *word(const devcomm_t *dc, int owner, int idx) {
  return (uint32_t *)(void *)(dc->peer[owner] + 4 * (size_t)idx);
}

static uint8_t *slot(const devcomm_t *dc, int owner, uint32_t s) {
  return dc->peer[owner] + dc->stg_off + (size_t)(s % NSLOTS) * dc->slot_bytes;
}

static void q_wait(q_t *q, const uint32_t *w, uint32_t v) {
  if (!q->err)
    q_fail(q,
           (int)q->dc->wait32((CUstream)q->cs, (CUdeviceptr)(uintptr_t)w, v,
                              CU_STREAM_WAIT_VALUE_GEQ),
           "cuStreamWaitValue32");
}

static void q_write(q_t *q, uint32_t *w, uint32_t v) {
  if (!q->err)
    q_fail(
        q,
        (int)q->dc->write32((CUstream)q->cs, (CUdeviceptr)(uintptr_t)w, v, 0),
        "cuStreamWriteValue32");
}

/* Before this rank writes its slot of step s: every peer finished the step
 * that used it last. */
static void q_claim(q_t *q, uint32_t s) {
  const devcomm_t *dc = q->dc;
  for (int p = 0; p < dc->n && s > NSLOTS; p++)
    if (p != dc->rank)
      q_wait(q, word(dc, dc->rank, dc->n + p), s - NSLOTS);
}

/* This rank's slot of step s is filled. */
static void q_publish(q_t *q, uint32_t s) {
  const devcomm_t *dc = q->dc;
  for (int p = 0; p < dc->n; p++)
    if (p != dc->rank)
      q_write(q, word(dc, p, dc->rank), s);
}

/* Rank p's slot of step s is filled. */
static void q_await(q_t *q, int p, uint32_t s) {
  q_wait(q, word(q->dc, q->dc->rank, p), s);
}

/* This rank finished step s (and every step before it): the peers see it
 * (q_done_peers), then the watchdog (q_done_self; until then the rank
 * counts as inside the call). */
static void q_done_peers(q_t *q, uint32_t s) {
  const devcomm_t *dc = q->dc;
  for (int p = 0; p < dc->n; p++)
    if (p != dc->rank)
      q_write(q, word(dc, p, dc->n + dc->rank), s);
}

static void q_done_self(q_t *q, uint32_t s) {
  q_write(q, (uint32_t *)(uintptr_t)q->dc->words_dev + 1, s);
}

static void q_done(q_t *q, uint32_t s) {
  q_done_peers(q, s);
  q_done_self(q, s);
}

static void q_copy(q_t *q, void *dst, const void *src, size_t bytes) {
  if (!q->err && bytes && dst != src)
    q_fail(q, kernel_dev_copy(dst, src, bytes, q->cs), "cudaMemcpyAsync");
}

/* direct.h */
sharc_status_t dq_probe(devcomm_t *dc, const char *fn) {
  q_t q = {.dc = dc, .cs = dc->side};
  int n = dc->n;
  for (int p = 0; p < n; p++)
    if (p != dc->rank)
      q_write(&q, word(dc, p, 2 * n + dc->rank), 1);
  for (int p = 0; p < n; p++)
    if (p != dc->rank)
      q_wait(&q, word(dc, dc->rank, 2 * n + p), 1);
  uint64_t limit = SHARC_MIN(timeout_ns(), PROBE_NS);
  uint64_t deadline = time_ns() + limit;
  cudaError_t e = cudaErrorNotReady;
  while (!q.err && (e = cudaStreamQuery(dc->side)) == cudaErrorNotReady &&
         time_ns() < deadline) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  /* Let the waits queued pass: on a stream of its own (the legacy stream
   * would wait for the caller's blocking streams; the side stream holds the
   * waits). */
  if (e != cudaSuccess) {
    cudaStream_t rel = NULL;
    if (cudaStreamCreateWithFlags(&rel, cudaStreamNonBlocking) == cudaSuccess) {
      (void)cudaMemsetAsync(dc->mem + 8 * (size_t)n, RELEASED_BYTE,
                            4 * (size_t)n, rel);
      (void)cudaStreamDestroy(rel); /* released once the memset ran */
    }
  }
  (void)cudaGetLastError();
  if (q.err)
    return err_record(SHARC_ERR_UNSUPPORTED,
                      "%s (direct path): %s refused the flag probe (error %d)",
                      fn, q.what, q.err);
  if (e == cudaErrorNotReady)
    return err_record(SHARC_ERR_CUDA,
                      "%s (direct path): the peers' flag writes did not arrive "
                      "within %.0f s (cuStreamWriteValue32 on CUDA IPC memory "
                      "may not work between these devices)",
                      fn, (double)limit / 1e9);
  if (e != cudaSuccess)
    return err_record(SHARC_ERR_CUDA,
                      "%s (direct path): the flag probe: %s: %s", fn,
                      cudaGetErrorName(e), cudaGetErrorString(e));
  return SHARC_OK;
}

/* dst = OP over every rank r' of its source + at, len elements, starting
 * with this rank's own, AVG's division included: one kernel reading every
 * rank's slot s (base NULL) or buffer base[r'] (up to 8 ranks; f16/bf16
 * accumulate in f32). */
static void q_reduce(q_t *q, const coll_call_t *call, void *dst, uint32_t s,
                     const uint8_t *const *base, size_t at, size_t len) {
  const devcomm_t *dc = q->dc;
  size_t esize = sharc_dtype_size(call->dtype);
  const void *stack[64] = {0};
  const void **srcs =
      dc->n <= 64 ? stack : malloc((size_t)dc->n * sizeof *srcs);
  if (!srcs) {
    q_fail(q, (int)cudaErrorMemoryAllocation, "the reduction's sources");
    return;
  }
  for (int i = 0; i < dc->n; i++) {
    int p = (dc->rank + i) % dc->n;
    srcs[i] = (base ? base[p] : slot(dc, p, s)) + at * esize;
  }
  q_fail(
      q,
      kernel_dev_reduce_n(call->dtype, call->op, dst, srcs, dc->n, len, q->cs),
      "the reduction kernel");
  if (srcs != stack)
    free(srcs);
}

/* Block p of a piece of m elements split in n: [*off, *off + *len). */
static void block(size_t m, int n, int p, size_t *off, size_t *len) {
  size_t b = m / (size_t)n, rem = m % (size_t)n;
  *off = (size_t)p * b + ((size_t)p < rem ? (size_t)p : rem);
  *len = b + ((size_t)p < rem);
}

/* The size of one piece of call: bytes of each rank's block (all-gather,
 * broadcast, gather, scatter, all-to-all) or elements (the reductions: of
 * each block for reduce-scatter, of the whole piece for all-reduce and
 * reduce), so that what a rank publishes in one step fits its slot. */
static size_t piece(const devcomm_t *dc, const coll_call_t *call,
                    size_t esize) {
  size_t n = (size_t)dc->n;
  switch (call->coll) {
  case SCHED_REDUCE_SCATTER:
    return dc->slot_bytes / (n * esize);
  case SCHED_ALL_REDUCE:
  case SCHED_REDUCE:
    return dc->slot_bytes / esize;
  case SCHED_SCATTER:
  case SCHED_ALL_TO_ALL:
    return dc->slot_bytes / n / esize * esize;
  default:
    return dc->slot_bytes;
  }
}

/* The steps call takes (the entry word's count). */
static uint32_t call_steps(const devcomm_t *dc, const coll_call_t *call,
                           size_t esize) {
  if (call->coll == SCHED_BARRIER)
    return 1;
  int reduces = call->coll == SCHED_REDUCE_SCATTER ||
                call->coll == SCHED_ALL_REDUCE || call->coll == SCHED_REDUCE;
  size_t total = reduces ? call->count : call->count * esize;
  size_t per = piece(dc, call, esize);
  return (uint32_t)((reduces ? 2 : 1) * ((total + per - 1) / per));
}

/* Claims this rank's slot of step s, fills it with n blocks of l bytes
 * from src (block p at src + p * stride; one 2D copy) and publishes it. */
static void q_publish_blocks(q_t *q, uint32_t s, const uint8_t *src,
                             size_t stride, size_t l) {
  devcomm_t *dc = q->dc;
  q_claim(q, s);
  if (stride > MAX_PITCH) { /* past what a 2D copy's pitch may be */
    for (int p = 0; p < dc->n; p++)
      q_copy(q, slot(dc, dc->rank, s) + (size_t)p * l, src + (size_t)p * stride,
             l);
  } else if (!q->err && l) {
    q_fail(q,
           (int)cudaMemcpy2DAsync(slot(dc, dc->rank, s), l, src, stride, l,
                                  (size_t)dc->n, cudaMemcpyDefault, q->cs),
           "cudaMemcpy2DAsync");
  }
  q_publish(q, s);
}

/* Claims this rank's slot of step s, fills it with l bytes from src and
 * publishes it. */
static void q_publish_copy(q_t *q, uint32_t s, const void *src, size_t l) {
  q_claim(q, s);
  q_copy(q, slot(q->dc, q->dc->rank, s), src, l);
  q_publish(q, s);
}

/* all-gather and gather: each rank's block (every rank's, to the root
 * only for gather) through its slot. */
static void q_gathers(q_t *q, const coll_call_t *call, size_t cb) {
  devcomm_t *dc = q->dc;
  int all = call->coll == SCHED_ALL_GATHER, root = call->root;
  int receives = all || dc->rank == root;
  const uint8_t *send = call->sendbuf;
  uint8_t *recv = call->recvbuf;
  size_t per = piece(dc, call, 1);
  for (size_t o = 0; o < cb && !q->err; o += per) {
    size_t l = SHARC_MIN(per, cb - o);
    uint32_t s = ++dc->step;
    if (all || dc->rank != root)
      q_publish_copy(q, s, send + o, l);
    for (int i = 0; i < dc->n && receives; i++) {
      int p = (dc->rank + i) % dc->n;
      if (i)
        q_await(q, p, s);
      q_copy(q, recv + (size_t)p * cb + o, i ? slot(dc, p, s) : send + o, l);
    }
    q_done(q, s);
  }
}

/* broadcast, scatter and all-to-all: the sender's slot holds one block
 * (broadcast) or n blocks (scatter: the root's; all-to-all: every rank's),
 * each rank copies the block meant for it. */
static void q_spreads(q_t *q, const coll_call_t *call, size_t cb) {
  devcomm_t *dc = q->dc;
  int bc = call->coll == SCHED_BROADCAST, a2a = call->coll == SCHED_ALL_TO_ALL;
  int root = call->root, r = dc->rank;
  const uint8_t *send = call->sendbuf;
  uint8_t *recv = call->recvbuf;
  size_t per = piece(dc, call, sharc_dtype_size(call->dtype));
  for (size_t o = 0; o < cb && !q->err; o += per) {
    size_t l = SHARC_MIN(per, cb - o);
    uint32_t s = ++dc->step;
    if (bc && r == root)
      q_publish_copy(q, s, send + o, l);
    else if (a2a || r == root)
      q_publish_blocks(q, s, send + o, cb, l);
    if (a2a) { /* block r of every rank, to block p of recv */
      for (int i = 0; i < dc->n; i++) {
        int p = (r + i) % dc->n;
        if (i)
          q_await(q, p, s);
        q_copy(q, recv + (size_t)p * cb + o,
               i ? slot(dc, p, s) + (size_t)r * l : send + (size_t)r * cb + o,
               l);
      }
    } else if (r == root) {
      q_copy(q, recv + o, send + (bc ? 0 : (size_t)r * cb) + o, l);
    } else {
      q_await(q, root, s);
      q_copy(q, recv + o, slot(dc, root, s) + (bc ? 0 : (size_t)r * l), l);
    }
    q_done(q, s);
  }
}

/* reduce-scatter, all-reduce and reduce, per piece: step s publishes what
 * the others reduce (reduce-scatter: the piece of each of the n blocks;
 * otherwise m contiguous elements split into n blocks); in step t each
 * rank reduces its block of the piece into its slot t, starting with its
 * own contribution; then reduce-scatter copies it out, and all-reduce
 * (every rank) and reduce (the root) gather every rank's reduced block. */
static void q_reductions(q_t *q, const coll_call_t *call) {
  devcomm_t *dc = q->dc;
  size_t esize = sharc_dtype_size(call->dtype);
  size_t per = piece(dc, call, esize);
  int rs = call->coll == SCHED_REDUCE_SCATTER;
  int receives = call->coll == SCHED_ALL_REDUCE || dc->rank == call->root;
  const uint8_t *send = call->sendbuf;
  uint8_t *recv = call->recvbuf;
  for (size_t o = 0; o < call->count && !q->err; o += per) {
    size_t m = SHARC_MIN(per, call->count - o);
    uint32_t s = ++dc->step, t = ++dc->step;
    if (rs)
      q_publish_blocks(q, s, send + o * esize, call->count * esize, m * esize);
    else
      q_publish_copy(q, s, send + o * esize, m * esize);
    for (int i = 1; i < dc->n; i++)
      q_await(q, (dc->rank + i) % dc->n, s);
    size_t off, len;
    if (rs) {
      off = (size_t)dc->rank * m;
      len = m;
    } else {
      block(m, dc->n, dc->rank, &off, &len);
    }
    q_claim(q, t);
    q_reduce(q, call, slot(dc, dc->rank, t), s, NULL, off, len);
    if (rs) {
      q_copy(q, recv + o * esize, slot(dc, dc->rank, t), m * esize);
    } else {
      q_publish(q, t);
      for (int i = 0; i < dc->n && receives; i++) {
        int p = (dc->rank + i) % dc->n;
        block(m, dc->n, p, &off, &len);
        if (i)
          q_await(q, p, t);
        q_copy(q, recv + (o + off) * esize, slot(dc, p, t), len * esize);
      }
    }
    q_done(q, t);
  }
}

/* The steps of call in place. */
static uint32_t inplace_steps(const coll_call_t *call) {
  return call->coll == SCHED_ALL_REDUCE ? 2 : 1;
}

/* all-gather, broadcast, reduce-scatter and all-reduce reading the peers'
 * buffers (direct.h, "In place"). */
static void q_inplace(q_t *q, const coll_call_t *call, const dq_inplace_t *ip) {
  devcomm_t *dc = q->dc;
  int r = dc->rank, n = dc->n, root = call->root;
  size_t esize = sharc_dtype_size(call->dtype), cb = call->count * esize;
  uint8_t *recv = call->recvbuf;
  uint32_t s = ++dc->step;
  size_t off, len;
  switch (call->coll) {
  case SCHED_ALL_GATHER:
    q_publish(q, s);
    for (int i = 0; i < n; i++) {
      int p = (r + i) % n;
      if (i)
        q_await(q, p, s);
      q_copy(q, recv + (size_t)p * cb, ip->send[p], cb);
    }
    break;
  case SCHED_BROADCAST:
    if (r == root) {
      q_publish(q, s);
    } else {
      q_await(q, root, s);
    }
    q_copy(q, recv, ip->send[root], cb);
    break;
  case SCHED_REDUCE_SCATTER:
    q_publish(q, s);
    for (int i = 1; i < n; i++)
      q_await(q, (r + i) % n, s);
    q_reduce(q, call, recv, s, ip->send, (size_t)r * call->count, call->count);
    break;
  default: /* all-reduce */
    q_publish(q, s);
    for (int i = 1; i < n; i++)
      q_await(q, (r + i) % n, s);
    block(call->count, n, r, &off, &len);
    q_reduce(q, call, recv + off * esize, s, ip->send, off, len);
    s = ++dc->step;
    q_publish(q, s);
    for (int i = 1; i < n; i++) {
      int p = (r + i) % n;
      block(call->count, n, p, &off, &len);
      q_await(q, p, s);
      q_copy(q, recv + off * esize, ip->recv[p] + off * esize, len * esize);
    }
    break;
  }
  q_done_peers(q, s);
  /* the caller may overwrite what the peers read once the call is over:
   * until every peer finished reading, the watchdog sees this rank inside
   * the call (a peer that died or stalls then fails the communicator) */
  if (call->coll != SCHED_BROADCAST || r == root)
    for (int p = 0; p < n; p++)
      if (p != r)
        q_wait(q, word(dc, r, n + p), s);
  q_done_self(q, s);
}

/* barrier: one step, nothing moved. */
static void q_barrier(q_t *q) {
  uint32_t s = ++q->dc->step;
  q_publish(q, s);
  for (int p = 0; p < q->dc->n; p++)
    if (p != q->dc->rank)
      q_await(q, p, s);
  q_done(q, s);
}

/* Queues call on cs (dc->lock held). */
static void q_call(q_t *q, const coll_call_t *call, const dq_inplace_t *ip) {
  devcomm_t *dc = q->dc;
  size_t esize = sharc_dtype_size(call->dtype);
  size_t cb = call->count * esize;
  if (dc->have_last && dc->last_cs != q->cs)
    q_fail(q, (int)cudaStreamWaitEvent(q->cs, dc->last, 0),
           "cudaStreamWaitEvent (the previous call, on another stream)");
  uint32_t last =
      dc->step + (ip ? inplace_steps(call) : call_steps(dc, call, esize));
  q_write(q, (uint32_t *)(uintptr_t)dc->words_dev, last);
  if (dc->n == 1) { /* nobody to wait for */
    if (call->coll != SCHED_BARRIER)
      q_copy(q, call->recvbuf, call->sendbuf, cb);
    dc->step = last;
    q_write(q, (uint32_t *)(uintptr_t)dc->words_dev + 1, last);
  } else if (ip) {
    q_inplace(q, call, ip);
  } else {
    switch (call->coll) {
    case SCHED_ALL_GATHER:
    case SCHED_GATHER:
      q_gathers(q, call, cb);
      break;
    case SCHED_BROADCAST:
    case SCHED_SCATTER:
    case SCHED_ALL_TO_ALL:
      q_spreads(q, call, cb);
      break;
    case SCHED_BARRIER:
      q_barrier(q);
      break;
    default:
      q_reductions(q, call);
      break;
    }
  }
  if (!q->err) {
    q_fail(q, (int)cudaEventRecord(dc->last, q->cs), "cudaEventRecord");
    dc->last_cs = q->cs;
    dc->have_last = 1;
  }
}

int dq_call(devcomm_t *dc, cudaStream_t cs, const coll_call_t *call,
            const dq_inplace_t *ip, const char **what) {
  q_t q = {.dc = dc, .cs = cs};
  q_call(&q, call, ip);
  *what = q.what;
  return q.err;
}

#endif /* SHARC_HAVE_CUDA */

/*
 * algo.h - internal interface of the algorithm files (comm/algo/): one
 * schedule generator per (collective, algorithm), the small helpers they
 * share, and the simulator entry point that runs caller-built schedules (for
 * the negative unit tests).
 *
 * Every generator appends to an initialised, empty sched_t and assumes
 * sched_build validated its arguments (1 <= nranks <= 64 is not required,
 * but rank < nranks, nchan in [1, 255], root < nranks are).
 */
#ifndef SHARC_ALGO_H
#define SHARC_ALGO_H

#include "schedule.h"

/* ---- generators (comm/algo/<collective>_<algorithm>.c) ---- */
sharc_status_t ring_all_gather_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t tree_all_gather_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t ring_reduce_scatter_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t tree_reduce_scatter_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t ring_all_reduce_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t tree_all_reduce_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t rabenseifner_all_reduce_schedule(const sched_args_t *a,
                                                sched_t *s);
sharc_status_t dbtree_all_reduce_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t ring_broadcast_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t tree_broadcast_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t tree_barrier_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t ring_barrier_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t hier_all_gather_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t hier_reduce_scatter_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t hier_all_reduce_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t tree_reduce_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t ring_reduce_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t direct_gather_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t direct_scatter_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t direct_broadcast_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t direct_barrier_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t direct_all_to_all_schedule(const sched_args_t *a, sched_t *s);
sharc_status_t bruck_all_to_all_schedule(const sched_args_t *a, sched_t *s);

/* ---- shared helpers ---- */

/* Offset of block b when n elements are cut into nb near-equal blocks (the
 * first n % nb blocks get one more element). block_off(n, nb, nb) == n. */
static inline size_t block_off(size_t n, size_t nb, size_t b) {
  size_t q = n / nb, rem = n % nb;
  return b * q + (b < rem ? b : rem);
}

static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Largest power of two <= n (n >= 1). */
static inline int pow2_floor(int n) {
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  return p;
}

/* ceil(log2(n)) for n >= 1. */
static inline int log2_ceil(int n) {
  int l = 0;
  while ((1 << l) < n)
    l++;
  return l;
}

/* Point-to-point transfer of [off, off+count) cut into nchan near-equal
 * pieces, piece c on channel c, so that every channel carries a part of each
 * step. Both sides must use the same nchan, range and order. Zero-sized
 * pieces are dropped by the builder on both sides alike. */
static inline void send_split(sched_t *s, int peer, int nchan, sched_buf_t b,
                              size_t off, size_t count) {
  for (int c = 0; c < nchan; c++)
    sched_send(s, peer, c, b, off + block_off(count, (size_t)nchan, (size_t)c),
               block_off(count, (size_t)nchan, (size_t)c + 1) -
                   block_off(count, (size_t)nchan, (size_t)c));
}
static inline void recv_split(sched_t *s, int peer, int nchan, sched_buf_t b,
                              size_t off, size_t count) {
  for (int c = 0; c < nchan; c++)
    sched_recv(s, peer, c, b, off + block_off(count, (size_t)nchan, (size_t)c),
               block_off(count, (size_t)nchan, (size_t)c + 1) -
                   block_off(count, (size_t)nchan, (size_t)c));
}
/* dst[dst_off + i] = in[i] OP src[src_off + i], split like recv_split. */
static inline void recv_reduce_split(sched_t *s, int peer, int nchan,
                                     sched_buf_t src, size_t src_off,
                                     sched_buf_t dst, size_t dst_off,
                                     size_t count) {
  for (int c = 0; c < nchan; c++) {
    size_t lo = block_off(count, (size_t)nchan, (size_t)c);
    size_t hi = block_off(count, (size_t)nchan, (size_t)c + 1);
    sched_recv_reduce(s, peer, c, src, src_off + lo, dst, dst_off + lo,
                      hi - lo);
  }
}

/* ---- simulator on given schedules (comm/algo/schedule_sim.c) ---- */
/* The common start of the folded tree algorithms: nothing to do for count 0;
 * one rank just copies (out of place); an extra rank (r >= p, the largest
 * power of two <= n) sends its `sent` elements to r-p and receives its
 * `kept` result elements back. Returns 1 when that is the whole schedule. */
static inline int fold_prologue(const sched_args_t *a, sched_t *s, int p,
                                size_t sent, size_t kept) {
  s->nchan = a->nchan;
  if (kept == 0)
    return 1;
  if (a->nranks == 1) {
    if (!a->inplace)
      sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, kept);
    return 1;
  }
  if (a->rank < p)
    return 0;
  sched_round(s);
  send_split(s, a->rank - p, a->nchan, SCHED_BUF_SEND, 0, sent);
  sched_round(s);
  recv_split(s, a->rank - p, a->nchan, SCHED_BUF_RECV, 0, kept);
  return 1;
}

#endif /* SHARC_ALGO_H */

/*
 * reduce_ring.c - pipelined chain reduce, the mirror of broadcast_ring.c:
 * ranks in ring order from the root; the message is cut into chunks of
 * args->chunk elements and flows from the far end of the chain (position
 * n-1) towards the root (position 0). The rank at distance d = n-1-pos from
 * the far end folds chunk t-d, received from its successor, with its own
 * SEND in round t, while it forwards chunk t-d-1 (folded the round before)
 * to its predecessor, so all links are busy at once: nchunks + n - 1
 * rounds, each link carrying the message once. Each chunk is split across
 * the channels.
 *
 * Partial results live in TMP (count elements) on the ranks between the
 * ends and in RECV on the root; the far end sends SEND itself. In place on
 * the root the fold reads and writes the same elements (allowed).
 */
#include "algo.h"

sharc_status_t ring_reduce_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan;
  size_t N = a->count, ck = a->chunk ? a->chunk : N;
  s->nchan = nc;
  if (N == 0)
    return SHARC_OK;
  if (n == 1) {
    if (!a->inplace)
      sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, N);
    return SHARC_OK;
  }
  int pos = (r - a->root + n) % n, d = n - 1 - pos;
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  long nchunks = (long)((N + ck - 1) / ck);
  sched_buf_t acc = pos == 0 ? SCHED_BUF_RECV : SCHED_BUF_TMP;
  if (pos > 0 && d > 0)
    s->tmp_count = N;
  for (long t = 0; t < nchunks + n - 1; t++) {
    sched_round(s);
    long jr = t - d, js = d == 0 ? t : t - d - 1;
    if (d > 0 && jr >= 0 && jr < nchunks) {
      size_t off = (size_t)jr * ck, len = min_sz(ck, N - off);
      recv_reduce_split(s, next, nc, SCHED_BUF_SEND, off, acc, off, len);
    }
    if (pos > 0 && js >= 0 && js < nchunks) {
      size_t off = (size_t)js * ck, len = min_sz(ck, N - off);
      send_split(s, prev, nc, d == 0 ? SCHED_BUF_SEND : acc, off, len);
    }
  }
  return SHARC_OK;
}

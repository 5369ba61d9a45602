/*
 * broadcast_ring.c - pipelined chain broadcast: ranks in ring order from the
 * root; the message is cut into chunks of args->chunk elements and in round
 * t the rank at chain position p receives chunk t-p+1 from its predecessor
 * while it forwards chunk t-p to its successor, so all links are busy at
 * once. nchunks + n - 2 rounds. Each chunk is split across the channels.
 *
 * The root sends from SEND and copies SEND to RECV (skipped in place);
 * other ranks never touch SEND.
 */
#include "algo.h"

sharc_status_t ring_broadcast_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan;
  size_t N = a->count, ck = a->chunk ? a->chunk : N;
  s->nchan = nc;
  if (N == 0)
    return SHARC_OK;
  int pos = (r - a->root + n) % n;
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  long nchunks = (long)((N + ck - 1) / ck);
  if (n == 1) {
    if (!a->inplace)
      sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, N);
    return SHARC_OK;
  }
  sched_buf_t from = pos == 0 ? SCHED_BUF_SEND : SCHED_BUF_RECV;
  for (long t = 0; t < nchunks + n - 2; t++) {
    sched_round(s);
    if (t == 0 && pos == 0 && !a->inplace) /* concurrent: both read SEND */
      sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, N);
    long jr = t - pos + 1, js = t - pos;
    if (pos > 0 && jr >= 0 && jr < nchunks) {
      size_t off = (size_t)jr * ck, len = min_sz(ck, N - off);
      recv_split(s, prev, nc, SCHED_BUF_RECV, off, len);
    }
    if (pos < n - 1 && js >= 0 && js < nchunks) {
      size_t off = (size_t)js * ck, len = min_sz(ck, N - off);
      send_split(s, next, nc, from, off, len);
    }
  }
  return SHARC_OK;
}

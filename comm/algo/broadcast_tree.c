/*
 * broadcast_tree.c - binomial-tree broadcast: with v = (rank - root) mod n,
 * rank v receives the message from v - 2^k (2^k its highest bit) and then
 * sends it to v + 2^j for every 2^j > v with v + 2^j < n, all children in
 * one round (they only read RECV). ceil(log2 n) hops of the whole message,
 * split across channels: for small messages.
 *
 * The root sends from SEND and copies SEND to RECV in the same round
 * (skipped in place); other ranks never touch SEND.
 */
#include "algo.h"

sharc_status_t tree_broadcast_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan;
  size_t N = a->count;
  s->nchan = nc;
  if (N == 0)
    return SHARC_OK;
  int v = (r - a->root + n) % n;
  int m = 1;
  if (v > 0) {
    while (m * 2 <= v)
      m *= 2; /* highest bit of v */
    sched_round(s);
    recv_split(s, (v - m + a->root) % n, nc, SCHED_BUF_RECV, 0, N);
    m *= 2;
  }
  sched_round(s);
  if (v == 0 && !a->inplace)
    sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, N);
  /* farthest child first: it heads the largest subtree */
  int top = 1;
  while (top < n)
    top *= 2;
  for (int j = top; j >= m; j /= 2)
    if (v + j < n)
      send_split(s, (v + j + a->root) % n, nc,
                 v == 0 ? SCHED_BUF_SEND : SCHED_BUF_RECV, 0, N);
  return SHARC_OK;
}

/*
 * reduce_tree.c - binomial-tree reduce, the mirror of broadcast_tree.c: with
 * v = (rank - root) mod n, rank v folds in the partial results of its
 * children v + 2^j (2^j > v, v + 2^j < n), nearest child first (its subtree
 * is the smallest, so its result comes first), one child per round, then
 * sends its partial result to its parent v - 2^k (2^k its highest bit).
 * ceil(log2 n) hops of the whole message, split across channels: for small
 * messages.
 *
 * The partial result accumulates in RECV on the root and in TMP (count
 * elements) elsewhere; the first child's data is folded with SEND
 * (RECV_REDUCE from SEND into the accumulator), so SEND is only read. A
 * leaf sends SEND itself. In place (the root's sendbuf is its recvbuf) the
 * first fold reads and writes the same elements, which RECV_REDUCE allows.
 */
#include "algo.h"

sharc_status_t tree_reduce_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan;
  size_t N = a->count;
  s->nchan = nc;
  if (N == 0)
    return SHARC_OK;
  int v = (r - a->root + n) % n;
  sched_buf_t acc = v == 0 ? SCHED_BUF_RECV : SCHED_BUF_TMP;
  int hb = 1; /* the lowest power of two above v's highest bit: children
                 are v + j for hb <= j, j a power of two */
  while (v && hb <= v)
    hb *= 2;
  int folded = 0;
  for (int j = hb; v + j < n; j *= 2) {
    sched_round(s);
    recv_reduce_split(s, (v + j + a->root) % n, nc,
                      folded ? acc : SCHED_BUF_SEND, 0, acc, 0, N);
    folded = 1;
  }
  if (v == 0) {
    if (!folded && !a->inplace) /* one rank */
      sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, N);
    return SHARC_OK;
  }
  if (folded)
    s->tmp_count = N;
  int m = 1;
  while (m * 2 <= v)
    m *= 2; /* highest bit of v */
  sched_round(s);
  send_split(s, (v - m + a->root) % n, nc, folded ? acc : SCHED_BUF_SEND, 0, N);
  return SHARC_OK;
}

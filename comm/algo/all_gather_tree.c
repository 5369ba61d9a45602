/*
 * all_gather_tree.c - recursive-doubling all-gather, folded for rank counts
 * that are not powers of two.
 *
 * p = largest power of two <= n. Ranks e >= p ("extra") pair with q = e-p:
 * they send their block to q first and get the whole result back at the
 * end. The p core ranks run doubling over block SETS: core rank q stands for
 * {q, q+p (if < n)}. At the step of distance m, core rank q holds the sets
 * of its aligned group [q & ~(m-1), +m): blocks in that range and the same
 * range shifted by p, two contiguous pieces of RECV, which it swaps with
 * q ^ m. log2(p) steps, plus 2 when folded.
 *
 * RECV is (nranks*count), SEND (count); in place SEND == RECV + rank*count
 * and the local copy is skipped. Sends never read what a receive of the
 * same round writes (a group and its partner group are disjoint).
 */
#include "algo.h"

/* Sends (or receives) the sets of core group [g, g+m): blocks [g, g+m) and
 * [g+p, min(g+m+p, n)). */
static void xfer_group(sched_t *s, int send, int peer, const sched_args_t *a,
                       int p, int g, int m) {
  size_t c = a->count;
  int n = a->nranks, nc = a->nchan;
  int hi2 = g + m + p < n ? g + m + p : n;
  size_t off1 = (size_t)g * c, len1 = (size_t)m * c;
  size_t off2 = (size_t)(g + p) * c;
  size_t len2 = hi2 > g + p ? (size_t)(hi2 - g - p) * c : 0;
  if (send) {
    send_split(s, peer, nc, SCHED_BUF_RECV, off1, len1);
    send_split(s, peer, nc, SCHED_BUF_RECV, off2, len2);
  } else {
    recv_split(s, peer, nc, SCHED_BUF_RECV, off1, len1);
    recv_split(s, peer, nc, SCHED_BUF_RECV, off2, len2);
  }
}

sharc_status_t tree_all_gather_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan, p = pow2_floor(n);
  size_t c = a->count, total = (size_t)n * c;
  s->nchan = nc;
  if (c == 0)
    return SHARC_OK;
  sched_round(s);
  if (!a->inplace)
    sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, r * c, c);
  if (r >= p) { /* extra: hand our block in, get everything else back */
    send_split(s, r - p, nc, SCHED_BUF_SEND, 0, c);
    sched_round(s);
    recv_split(s, r - p, nc, SCHED_BUF_RECV, 0, (size_t)r * c);
    recv_split(s, r - p, nc, SCHED_BUF_RECV, (size_t)(r + 1) * c,
               total - (size_t)(r + 1) * c);
    return SHARC_OK;
  }
  int e = r + p < n ? r + p : -1;
  if (e >= 0)
    recv_split(s, e, nc, SCHED_BUF_RECV, (size_t)e * c, c);
  for (int m = 1; m < p; m *= 2) {
    int peer = r ^ m;
    sched_round(s);
    xfer_group(s, 1, peer, a, p, r & ~(m - 1), m);
    xfer_group(s, 0, peer, a, p, peer & ~(m - 1), m);
  }
  if (e >= 0) {
    sched_round(s);
    send_split(s, e, nc, SCHED_BUF_RECV, 0, (size_t)e * c);
    send_split(s, e, nc, SCHED_BUF_RECV, (size_t)(e + 1) * c,
               total - (size_t)(e + 1) * c);
  }
  return SHARC_OK;
}

/*
 * reduce_scatter_tree.c - recursive-halving reduce-scatter, folded for rank
 * counts that are not powers of two.
 *
 * p = largest power of two <= n. Extra ranks e >= p send all their input to
 * q = e-p, which reduces it into its working copy, and receive their block
 * back at the end. Core rank q stands for the block set {q, q+p (if < n)}.
 * At the step of distance m (p/2 down to 1), q's aligned group of 2m sets is
 * halved: q sends the partner's half (blocks [g, g+m) and [g+p, g+m+p) of
 * its current data) to q ^ m and reduces the partner's copy of its own half.
 *
 * SEND is (nranks*count), RECV (count). Partials live in TMP indexed like
 * SEND (tmp_count = nranks*count on core ranks), except the final value of
 * block q, which the last step writes straight into RECV. In place
 * (RECV == SEND + rank*count) nothing writes RECV before the last step,
 * whose source is TMP or exactly RECV itself.
 */
#include "algo.h"

/* The two pieces of group [g, g+m) of sets: blocks [g,g+m), [g+p, ..) < n. */
static void group_pieces(const sched_args_t *a, int p, int g, int m,
                         size_t off[2], size_t len[2]) {
  size_t c = a->count;
  int n = a->nranks, hi2 = g + m + p < n ? g + m + p : n;
  off[0] = (size_t)g * c;
  len[0] = (size_t)m * c;
  off[1] = (size_t)(g + p) * c;
  len[1] = hi2 > g + p ? (size_t)(hi2 - g - p) * c : 0;
}

sharc_status_t tree_reduce_scatter_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan, p = pow2_floor(n);
  size_t c = a->count, total = (size_t)n * c;
  if (fold_prologue(a, s, p, total, c))
    return SHARC_OK;
  s->tmp_count = total;
  int e = r + p < n ? r + p : -1;
  sched_buf_t cur = SCHED_BUF_SEND;
  if (e >= 0) {
    sched_round(s);
    recv_reduce_split(s, e, nc, SCHED_BUF_SEND, 0, SCHED_BUF_TMP, 0, total);
    cur = SCHED_BUF_TMP;
  }
  for (int m = p / 2; m >= 1; m /= 2) {
    int peer = r ^ m, g = r & ~(2 * m - 1);
    int mine = (r & m) ? g + m : g, theirs = (r & m) ? g : g + m;
    size_t so[2], sl[2], mo[2], ml[2];
    group_pieces(a, p, theirs, m, so, sl);
    group_pieces(a, p, mine, m, mo, ml);
    sched_round(s);
    for (int i = 0; i < 2; i++)
      send_split(s, peer, nc, cur, so[i], sl[i]);
    for (int i = 0; i < 2; i++) {
      /* last step: block r goes to RECV; block r+p stays in TMP for e */
      int to_recv = m == 1 && i == 0;
      recv_reduce_split(s, peer, nc, cur, mo[i],
                        to_recv ? SCHED_BUF_RECV : SCHED_BUF_TMP,
                        to_recv ? 0 : mo[i], ml[i]);
    }
    cur = SCHED_BUF_TMP;
  }
  if (e >= 0) {
    sched_round(s);
    send_split(s, e, nc, SCHED_BUF_TMP, (size_t)e * c, c);
  }
  return SHARC_OK;
}

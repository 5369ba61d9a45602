/*
 * all_reduce_rabenseifner.c - Rabenseifner all-reduce: recursive-halving
 * reduce-scatter over p near-equal blocks of the vector, then
 * recursive-doubling all-gather of the reduced blocks (p = largest power of
 * two <= n). Extra ranks e >= p fold into q = e-p: they send their vector
 * first and receive the result at the end. 2 log2(p) (+2) messages and
 * about 2 (p-1)/p of the vector moved per rank.
 *
 * Everything accumulates in RECV: a halving step sends the partner's half
 * (from SEND on the first step unless folded, else RECV) and reduces our
 * half as RECV = in + cur; the halves are disjoint. In place (SEND == RECV)
 * the same schedule holds. No TMP.
 */
#include "algo.h"

sharc_status_t rabenseifner_all_reduce_schedule(const sched_args_t *a,
                                                sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan, p = pow2_floor(n);
  size_t N = a->count;
  if (fold_prologue(a, s, p, N, N))
    return SHARC_OK;
#define BOFF(b) block_off(N, (size_t)p, (size_t)(b))
  int e = r + p < n ? r + p : -1;
  sched_buf_t cur = SCHED_BUF_SEND;
  if (e >= 0) {
    sched_round(s);
    recv_reduce_split(s, e, nc, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, N);
    cur = SCHED_BUF_RECV;
  }
  for (int m = p / 2; m >= 1; m /= 2) { /* halving reduce-scatter */
    int g = r & ~(2 * m - 1);
    int mine = (r & m) ? g + m : g, theirs = (r & m) ? g : g + m;
    sched_round(s);
    send_split(s, r ^ m, nc, cur, BOFF(theirs),
               BOFF(theirs + m) - BOFF(theirs));
    recv_reduce_split(s, r ^ m, nc, cur, BOFF(mine), SCHED_BUF_RECV, BOFF(mine),
                      BOFF(mine + m) - BOFF(mine));
    cur = SCHED_BUF_RECV;
  }
  for (int m = 1; m < p; m *= 2) { /* doubling all-gather */
    int mine = r & ~(m - 1), theirs = (r ^ m) & ~(m - 1);
    sched_round(s);
    send_split(s, r ^ m, nc, SCHED_BUF_RECV, BOFF(mine),
               BOFF(mine + m) - BOFF(mine));
    recv_split(s, r ^ m, nc, SCHED_BUF_RECV, BOFF(theirs),
               BOFF(theirs + m) - BOFF(theirs));
  }
#undef BOFF
  if (e >= 0) {
    sched_round(s);
    send_split(s, e, nc, SCHED_BUF_RECV, 0, N);
  }
  return SHARC_OK;
}

/*
 * all_reduce_tree.c - recursive-doubling all-reduce, folded for rank counts
 * that are not powers of two: log2(p) steps in which every core rank swaps
 * its whole partial vector with q ^ m and reduces; extra ranks e >= p hand
 * their vector to q = e-p first (one more reduction on q) and get the result
 * back at the end. Best for small messages: log2(p) (+2) messages.
 *
 * A step sends its current partial and reduces the partner's copy into a
 * different buffer (a step may not write what it sends), so partials
 * alternate between RECV and TMP[0, count), arranged to end in RECV. In
 * place, a first step that would write RECV (== SEND, still being sent)
 * goes to TMP[count, 2*count) instead, or, for a single step, to TMP
 * followed by a copy. tmp_count is 0, count or 2*count.
 */
#include "algo.h"

sharc_status_t tree_all_reduce_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan, p = pow2_floor(n);
  size_t N = a->count;
  if (fold_prologue(a, s, p, N, N))
    return SHARC_OK;
  int e = r + p < n ? r + p : -1;
  int lp = log2_ceil(p), nsteps = lp + (e >= 0); /* reductions on this rank */
  /* dst buffer/offset of each reduction: alternate, last one in RECV */
  sched_buf_t dbuf[40] = {SCHED_BUF_RECV};
  size_t doff[40];
  int copy_back = 0;
  for (int k = 0; k < nsteps; k++) {
    dbuf[k] = ((nsteps - 1 - k) % 2 == 0) ? SCHED_BUF_RECV : SCHED_BUF_TMP;
    doff[k] = 0;
  }
  /* in place, the first exchange (if not the fold) sends RECV itself */
  if (a->inplace && e < 0 && dbuf[0] == SCHED_BUF_RECV) {
    dbuf[0] = SCHED_BUF_TMP;
    if (nsteps >= 2) {
      doff[0] = N;
    } else {
      copy_back = 1;
    }
  }
  s->tmp_count = 0;
  for (int k = 0; k < nsteps; k++)
    if (dbuf[k] == SCHED_BUF_TMP && doff[k] + N > s->tmp_count)
      s->tmp_count = doff[k] + N;
  sched_buf_t cbuf = SCHED_BUF_SEND;
  size_t coff = 0;
  int k = 0;
  if (e >= 0) {
    sched_round(s);
    recv_reduce_split(s, e, nc, cbuf, coff, dbuf[k], doff[k], N);
    cbuf = dbuf[k];
    coff = doff[k];
    k++;
  }
  for (int m = 1; m < p; m *= 2, k++) {
    sched_round(s);
    send_split(s, r ^ m, nc, cbuf, coff, N);
    recv_reduce_split(s, r ^ m, nc, cbuf, coff, dbuf[k], doff[k], N);
    cbuf = dbuf[k];
    coff = doff[k];
  }
  if (copy_back) {
    sched_round(s);
    sched_copy(s, cbuf, coff, SCHED_BUF_RECV, 0, N);
  }
  if (e >= 0) {
    sched_round(s);
    send_split(s, e, nc, SCHED_BUF_RECV, 0, N);
  }
  return SHARC_OK;
}

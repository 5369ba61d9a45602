/*
 * all_gather_ring.c - ring all-gather: n-1 steps; in step s rank r forwards
 * block (r - s) mod n to r+1 and receives block (r - s - 1) mod n from r-1.
 * Blocks are `count` elements (the per-rank sendcount) and each is split
 * across the channels so every channel carries part of every step.
 *
 * RECV is (nranks*count); SEND is (count). In place (SEND == RECV +
 * rank*count) the local copy is skipped. Step 0 sends straight from SEND,
 * concurrently with the local copy (both only read SEND).
 */
#include "algo.h"

sharc_status_t ring_all_gather_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan;
  size_t c = a->count;
  s->nchan = nc;
  if (c == 0)
    return SHARC_OK;
  int right = (r + 1) % n, left = (r - 1 + n) % n;
  sched_round(s);
  if (!a->inplace)
    sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, r * c, c);
  for (int st = 0; st < n - 1; st++) {
    size_t bs = (size_t)((r - st + n) % n), br = (size_t)((r - st - 1 + n) % n);
    if (st > 0)
      sched_round(s);
    if (st == 0)
      send_split(s, right, nc, SCHED_BUF_SEND, 0, c);
    else
      send_split(s, right, nc, SCHED_BUF_RECV, bs * c, c);
    recv_split(s, left, nc, SCHED_BUF_RECV, br * c, c);
  }
  return SHARC_OK;
}

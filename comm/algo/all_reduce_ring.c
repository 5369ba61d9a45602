/*
 * all_reduce_ring.c - ring all-reduce: a ring reduce-scatter over the count
 * cut into n near-equal blocks (the first count % n blocks one element
 * longer), then a ring all-gather of the reduced blocks; 2(n-1) steps.
 *
 * Partials accumulate directly in RECV: in reduce-scatter step s rank r
 * sends block (r-s-1) (from SEND at s = 0, else RECV, where it was reduced
 * in step s-1) and reduces block (r-s-2) as RECV = in + SEND. Each block is
 * reduced once, on its owner, and then copied: every rank ends with the
 * same bits. In place (SEND == RECV) the same schedule is correct: a block
 * is first written when its own contribution is read, in the same op.
 */
#include "algo.h"

sharc_status_t ring_all_reduce_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan;
  size_t N = a->count, nb = (size_t)n;
  s->nchan = nc;
  if (N == 0)
    return SHARC_OK;
  if (n == 1) {
    if (!a->inplace)
      sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, N);
    return SHARC_OK;
  }
  int right = (r + 1) % n, left = (r - 1 + n) % n;
#define BOFF(b) block_off(N, nb, (size_t)(b))
#define BLEN(b) (BOFF((b) + 1) - BOFF(b))
  for (int st = 0; st < n - 1; st++) { /* reduce-scatter */
    int bs = (r - st - 1 + 2 * n) % n, br = (r - st - 2 + 2 * n) % n;
    sched_round(s);
    send_split(s, right, nc, st == 0 ? SCHED_BUF_SEND : SCHED_BUF_RECV,
               BOFF(bs), BLEN(bs));
    recv_reduce_split(s, left, nc, SCHED_BUF_SEND, BOFF(br), SCHED_BUF_RECV,
                      BOFF(br), BLEN(br));
  }
  for (int st = 0; st < n - 1; st++) { /* all-gather; rank r owns block r */
    int bs = (r - st + n) % n, br = (r - st - 1 + 2 * n) % n;
    sched_round(s);
    send_split(s, right, nc, SCHED_BUF_RECV, BOFF(bs), BLEN(bs));
    recv_split(s, left, nc, SCHED_BUF_RECV, BOFF(br), BLEN(br));
  }
#undef BOFF
#undef BLEN
  return SHARC_OK;
}

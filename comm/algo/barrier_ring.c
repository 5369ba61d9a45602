/*
 * barrier_ring.c - ring barrier: a token goes once around the ring from
 * rank 0 (rank 0 then knows everyone arrived) and a second time from rank 0
 * to rank n-1 to release them; 2n-1 messages in sequence. Only for forcing
 * SHARC_ALGO=ring; the dissemination barrier (tree) is faster. 1-element u8
 * messages in TMP (send TMP[0], receive TMP[1]; tmp_count = 2).
 */
#include "algo.h"

sharc_status_t ring_barrier_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  s->nchan = 1;
  if (n == 1)
    return SHARC_OK;
  s->tmp_count = 2;
  if (r == 0) {
    sched_round(s);
    sched_send(s, next, 0, SCHED_BUF_TMP, 0, 1);
    sched_round(s);
    sched_recv(s, prev, 0, SCHED_BUF_TMP, 1, 1);
    sched_round(s);
    sched_send(s, next, 0, SCHED_BUF_TMP, 0, 1);
    return SHARC_OK;
  }
  sched_round(s);
  sched_recv(s, prev, 0, SCHED_BUF_TMP, 1, 1);
  sched_round(s);
  sched_send(s, next, 0, SCHED_BUF_TMP, 0, 1);
  sched_round(s);
  sched_recv(s, prev, 0, SCHED_BUF_TMP, 1, 1);
  if (r < n - 1) {
    sched_round(s);
    sched_send(s, next, 0, SCHED_BUF_TMP, 0, 1);
  }
  return SHARC_OK;
}

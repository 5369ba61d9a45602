/*
 * barrier_tree.c - dissemination barrier: in round k every rank sends one
 * byte to rank + 2^k and receives one from rank - 2^k (mod n); after
 * ceil(log2 n) rounds every rank has heard, transitively, from all others.
 * Messages are 1 element of u8 in TMP (send TMP[0], receive TMP[1];
 * tmp_count = 2); no user buffer is touched.
 */
#include "algo.h"

sharc_status_t tree_barrier_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  s->nchan = 1;
  if (n == 1)
    return SHARC_OK;
  s->tmp_count = 2;
  for (int d = 1; d < n; d *= 2) {
    sched_round(s);
    sched_send(s, (r + d) % n, 0, SCHED_BUF_TMP, 0, 1);
    sched_recv(s, (r - d + n) % n, 0, SCHED_BUF_TMP, 1, 1);
  }
  return SHARC_OK;
}

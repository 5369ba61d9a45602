/*
 * all_to_all_direct.c - pairwise-exchange all-to-all: in round k (1..n-1)
 * rank r sends its block for rank r+k and receives the block of rank r-k,
 * so every round pairs each rank with one sender and one receiver and no
 * link carries two blocks at once; the rank's own block is a local copy.
 * n-1 rounds of one block each way: every byte crosses one link once, the
 * least an all-to-all can move. Each block is split across the channels.
 *
 * Buffers: SEND and RECV hold n blocks of count elements; block p of SEND
 * goes to rank p, block p of RECV comes from rank p. In place (SEND is
 * RECV) the blocks to send are first copied to TMP (n blocks), since RECV
 * block p is overwritten before block p could be sent.
 */
#include "algo.h"

sharc_status_t direct_all_to_all_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan;
  size_t N = a->count;
  s->nchan = nc;
  if (N == 0)
    return SHARC_OK;
  sched_buf_t from = SCHED_BUF_SEND;
  if (a->inplace) {
    if (n == 1)
      return SHARC_OK;
    s->tmp_count = (size_t)n * N;
    sched_round(s);
    sched_copy(s, SCHED_BUF_RECV, 0, SCHED_BUF_TMP, 0, (size_t)n * N);
    from = SCHED_BUF_TMP;
  } else {
    sched_round(s);
    sched_copy(s, SCHED_BUF_SEND, (size_t)r * N, SCHED_BUF_RECV, (size_t)r * N,
               N);
  }
  for (int k = 1; k < n; k++) {
    int to = (r + k) % n, fr = (r - k + n) % n;
    sched_round(s);
    send_split(s, to, nc, from, (size_t)to * N, N);
    recv_split(s, fr, nc, SCHED_BUF_RECV, (size_t)fr * N, N);
  }
  return SHARC_OK;
}

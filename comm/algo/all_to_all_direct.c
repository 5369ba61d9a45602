/*
 * all_to_all_direct.c - pairwise-exchange all-to-all: in round k (1..n-1)
 * rank r sends its block for rank r+k and receives the block of rank r-k,
 * so every round pairs each rank with one sender and one receiver and no
 * link carries two blocks at once; the rank's own block is a local copy.
 * n-1 rounds of one block each way: every byte crosses one link once, the
 * least an all-to-all can move. Each block is split across the channels.
 *
 * Buffers: SEND and RECV hold n blocks of count elements; block p of SEND
 * goes to rank p, block p of RECV comes from rank p.
 *
 * In place (SEND is RECV) block p is both what rank p gets and where its
 * block lands, so the pairs are symmetric instead: in stage k (0..n-1)
 * rank r swaps block p with rank p = k - r (mod n), whose partner in stage
 * k is r again (a rank whose partner is itself skips the stage). The swap
 * runs in chunks: in round t a rank sends chunk t of block p, receives
 * the partner's chunk t into one of two scratch chunks, and copies the
 * chunk received the round before into block p, where chunk t-1 was sent
 * from (a round ends when its sends are done). The copies overlap the
 * transfers; scratch is two chunks, not the whole buffer.
 */
#include "algo.h"

sharc_status_t direct_all_to_all_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan;
  size_t N = a->count;
  s->nchan = nc;
  if (N == 0)
    return SHARC_OK;
  if (a->inplace) {
    /* chunks of at least args->chunk, at most 8 per block: few rounds */
    size_t ck = a->chunk > (N + 7) / 8 ? a->chunk : (N + 7) / 8;
    size_t nch = (N + ck - 1) / ck;
    s->tmp_count = 2 * ck;
    for (int k = 0; k < n; k++) {
      int p = (k - r + n) % n;
      if (p == r)
        continue;
      size_t base = (size_t)p * N;
      for (size_t t = 0; t <= nch; t++) {
        sched_round(s);
        if (t < nch) {
          size_t len = min_sz(ck, N - t * ck);
          send_split(s, p, nc, SCHED_BUF_RECV, base + t * ck, len);
          recv_split(s, p, nc, SCHED_BUF_TMP, (t % 2) * ck, len);
        }
        if (t > 0)
          sched_copy(s, SCHED_BUF_TMP, ((t - 1) % 2) * ck, SCHED_BUF_RECV,
                     base + (t - 1) * ck, min_sz(ck, N - (t - 1) * ck));
      }
    }
    return SHARC_OK;
  }
  sched_round(s);
  sched_copy(s, SCHED_BUF_SEND, (size_t)r * N, SCHED_BUF_RECV, (size_t)r * N,
             N);
  for (int k = 1; k < n; k++) {
    int to = (r + k) % n, fr = (r - k + n) % n;
    sched_round(s);
    send_split(s, to, nc, SCHED_BUF_SEND, (size_t)to * N, N);
    recv_split(s, fr, nc, SCHED_BUF_RECV, (size_t)fr * N, N);
  }
  return SHARC_OK;
}

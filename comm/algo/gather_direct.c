/*
 * gather_direct.c, scatter: the direct (linear) algorithms of the rooted
 * block collectives, in one round: every other rank sends its block to the
 * root (gather), or the root sends each rank its block (scatter), all
 * transfers at once, each split across the channels. The root's own block
 * is a local copy (skipped in place). One step of latency; the root's
 * links carry (n-1) blocks, which is all a gather or scatter must move
 * through them.
 *
 * Buffers (NCCL's layout): gather's RECV holds n blocks on the root only,
 * block p from rank p; scatter's SEND holds n blocks on the root only. In
 * place, the root's own block already sits at its place (gather: SEND is
 * RECV block root; scatter: RECV is SEND block root).
 */
#include "algo.h"

/* gather (to_root) or scatter: the blocks between the root and the others
 * in one round; block p of the root's RECV (gather) or SEND (scatter). */
static sharc_status_t direct_rooted(const sched_args_t *a, sched_t *s,
                                    int to_root) {
  int n = a->nranks, r = a->rank, nc = a->nchan;
  size_t N = a->count;
  s->nchan = nc;
  if (N == 0)
    return SHARC_OK;
  sched_round(s);
  if (r != a->root) {
    if (to_root)
      send_split(s, a->root, nc, SCHED_BUF_SEND, 0, N);
    else
      recv_split(s, a->root, nc, SCHED_BUF_RECV, 0, N);
    return SHARC_OK;
  }
  size_t own = (size_t)r * N; /* the root's block in the big buffer */
  if (!a->inplace)
    sched_copy(s, SCHED_BUF_SEND, to_root ? 0 : own, SCHED_BUF_RECV,
               to_root ? own : 0, N);
  for (int i = 1; i < n; i++) {
    int p = (r + i) % n;
    if (to_root)
      recv_split(s, p, nc, SCHED_BUF_RECV, (size_t)p * N, N);
    else
      send_split(s, p, nc, SCHED_BUF_SEND, (size_t)p * N, N);
  }
  return SHARC_OK;
}

sharc_status_t direct_gather_schedule(const sched_args_t *a, sched_t *s) {
  return direct_rooted(a, s, 1);
}

sharc_status_t direct_scatter_schedule(const sched_args_t *a, sched_t *s) {
  return direct_rooted(a, s, 0);
}

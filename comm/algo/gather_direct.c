/*
 * gather_direct.c, scatter, broadcast: the direct (linear) algorithms of
 * the rooted collectives, in one round: every other rank sends its block to
 * the root (gather), or the root sends each rank its block (scatter) or the
 * whole message (broadcast), all transfers at once, each split across the
 * channels. The root's own block is a local copy (skipped in place). One
 * step of latency; the root's links carry (n-1) blocks, which is all a
 * gather or scatter must move through them.
 *
 * Broadcast: every rank waits on the root alone, never on a rank that
 * forwards (a binomial tree's inner ranks). With more ranks than cores a
 * forwarding rank may be descheduled, and its children then wait a
 * scheduler wake-up (4 us at 4 ranks on 2 cores, where the root's three
 * small sends take 0.1 us); the cost model picks this for small messages.
 * A small message sits in the peers' FIFOs once sent, so the root
 * returns without waiting for anyone.
 *
 * Buffers (NCCL's layout): gather's RECV holds n blocks on the root only,
 * block p from rank p; scatter's SEND holds n blocks on the root only. In
 * place, the root's own block already sits at its place (gather: SEND is
 * RECV block root; scatter: RECV is SEND block root).
 */
#include "algo.h"

enum { TO_ROOT, BLOCKS_FROM_ROOT, WHOLE_FROM_ROOT };

/* Where rank p's part lies in the root's big buffer: block p (gather's
 * RECV, scatter's SEND), or the whole message for every rank (broadcast). */
static size_t part_at(int how, int p, size_t N) {
  return how == WHOLE_FROM_ROOT ? 0 : (size_t)p * N;
}

/* gather (TO_ROOT), scatter or broadcast: N elements between the root and
 * each other rank in one round, at part_at in the root's buffer, nearest
 * rank after the root first; a rank's own part is a local copy. */
static sharc_status_t direct_rooted(const sched_args_t *a, sched_t *s,
                                    int how) {
  int n = a->nranks, r = a->rank, nc = a->nchan, to_root = how == TO_ROOT;
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
  size_t own = part_at(how, r, N);
  if (!a->inplace)
    sched_copy(s, SCHED_BUF_SEND, to_root ? 0 : own, SCHED_BUF_RECV,
               to_root ? own : 0, N);
  for (int i = 1; i < n; i++) {
    int p = (r + i) % n;
    if (to_root)
      recv_split(s, p, nc, SCHED_BUF_RECV, part_at(how, p, N), N);
    else
      send_split(s, p, nc, SCHED_BUF_SEND, part_at(how, p, N), N);
  }
  return SHARC_OK;
}

sharc_status_t direct_gather_schedule(const sched_args_t *a, sched_t *s) {
  return direct_rooted(a, s, TO_ROOT);
}

sharc_status_t direct_scatter_schedule(const sched_args_t *a, sched_t *s) {
  return direct_rooted(a, s, BLOCKS_FROM_ROOT);
}

/* Broadcast: the root sends SEND whole to every other rank; the others
 * receive it into RECV. */
sharc_status_t direct_broadcast_schedule(const sched_args_t *a, sched_t *s) {
  return direct_rooted(a, s, WHOLE_FROM_ROOT);
}

/* Barrier: every other rank sends one byte to rank 0, which answers each
 * once it has heard from all (fan-in, then fan-out). Two hops at any rank
 * count; rank 0 leaves first. TMP[0] is sent; rank 0 receives rank p's
 * byte into TMP[p] (p >= 1), the others the release into TMP[1]. */
sharc_status_t direct_barrier_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  s->nchan = 1;
  if (n == 1)
    return SHARC_OK;
  s->tmp_count = (size_t)n;
  sched_round(s);
  if (r != 0) {
    sched_send(s, 0, 0, SCHED_BUF_TMP, 0, 1);
    sched_round(s);
    sched_recv(s, 0, 0, SCHED_BUF_TMP, 1, 1);
    return SHARC_OK;
  }
  for (int p = 1; p < n; p++)
    sched_recv(s, p, 0, SCHED_BUF_TMP, (size_t)p, 1);
  sched_round(s);
  for (int p = 1; p < n; p++)
    sched_send(s, p, 0, SCHED_BUF_TMP, 0, 1);
  return SHARC_OK;
}

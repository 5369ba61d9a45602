/*
 * dispatch.c - builds a call's schedule: the table of algorithm x collective
 * generators (the algorithm files, algo.h) and the topology ring order.
 */
#include "dispatch.h"

#include <stdlib.h>

#include "algo.h"
#include "core.h"

typedef sharc_status_t (*gen_fn)(const sched_args_t *, sched_t *);

static const gen_fn generators[SCHED_ALGO_COUNT][SCHED_COLL_COUNT] = {
    [SCHED_ALGO_RING] = {[SCHED_ALL_GATHER] = ring_all_gather_schedule,
                         [SCHED_REDUCE_SCATTER] = ring_reduce_scatter_schedule,
                         [SCHED_ALL_REDUCE] = ring_all_reduce_schedule,
                         [SCHED_BROADCAST] = ring_broadcast_schedule,
                         [SCHED_BARRIER] = ring_barrier_schedule,
                         [SCHED_REDUCE] = ring_reduce_schedule},
    [SCHED_ALGO_TREE] = {[SCHED_ALL_GATHER] = tree_all_gather_schedule,
                         [SCHED_REDUCE_SCATTER] = tree_reduce_scatter_schedule,
                         [SCHED_ALL_REDUCE] = tree_all_reduce_schedule,
                         [SCHED_BROADCAST] = tree_broadcast_schedule,
                         [SCHED_BARRIER] = tree_barrier_schedule,
                         [SCHED_REDUCE] = tree_reduce_schedule},
    [SCHED_ALGO_RABENSEIFNER] = {[SCHED_ALL_REDUCE] =
                                     rabenseifner_all_reduce_schedule},
    [SCHED_ALGO_DBTREE] = {[SCHED_ALL_REDUCE] = dbtree_all_reduce_schedule},
    [SCHED_ALGO_HIER] = {[SCHED_ALL_GATHER] = hier_all_gather_schedule,
                         [SCHED_REDUCE_SCATTER] = hier_reduce_scatter_schedule,
                         [SCHED_ALL_REDUCE] = hier_all_reduce_schedule},
    [SCHED_ALGO_DIRECT] = {[SCHED_GATHER] = direct_gather_schedule,
                           [SCHED_SCATTER] = direct_scatter_schedule,
                           [SCHED_BROADCAST] = direct_broadcast_schedule,
                           [SCHED_BARRIER] = direct_barrier_schedule,
                           [SCHED_ALL_TO_ALL] = direct_all_to_all_schedule},
    [SCHED_ALGO_BRUCK] = {[SCHED_ALL_TO_ALL] = bruck_all_to_all_schedule},
};

int sched_algo_supports(sched_algo_t algo, sched_coll_t coll) {
  return (unsigned)algo < SCHED_ALGO_COUNT &&
         (unsigned)coll < SCHED_COLL_COUNT && generators[algo][coll] != NULL;
}

/* ---- ring order ----
 * A topology order runs an algorithm on virtual ranks (ring positions): the
 * schedule of position v = pos[rank] is built as usual and its peers mapped
 * back to ranks. Reductions and broadcasts need nothing else; all-gather
 * and reduce-scatter also map their per-rank blocks (RECV, resp. SEND,
 * block v is rank order[v]'s), which works for algorithms whose transfers
 * never straddle two blocks: the ring. */

static int reorders(sched_algo_t algo, sched_coll_t coll) {
  if (algo == SCHED_ALGO_HIER || algo == SCHED_ALGO_DIRECT)
    return 0; /* follows the hosts itself; needs no order */
  if (coll == SCHED_ALL_TO_ALL)
    return 0; /* SEND and RECV blocks are per rank; runs straddle them */
  if (coll == SCHED_ALL_GATHER || coll == SCHED_REDUCE_SCATTER)
    return algo == SCHED_ALGO_RING;
  return 1;
}

static int is_identity(const int *order, int n) {
  for (int i = 0; i < n; i++)
    if (order[i] != i)
      return 0;
  return 1;
}

/* Maps off in a buffer of n blocks of `count` from virtual to real block;
 * -1 if [off, off+len) straddles a block boundary. */
static int map_block(size_t *off, size_t len, size_t count, const int *order) {
  size_t b = *off / count, in = *off % count;
  if (in + len > count)
    return -1;
  *off = (size_t)order[b] * count + in;
  return 0;
}

static sharc_status_t build_in_order(sched_algo_t algo, const sched_args_t *a,
                                     sched_t *s) {
  int n = a->nranks;
  int *pos = malloc((size_t)n * sizeof *pos);
  if (!pos)
    return err_set(SHARC_ERR_NO_MEM, "sched_build: out of memory");
  for (int i = 0; i < n; i++)
    pos[i] = -1;
  for (int i = 0; i < n; i++) {
    int r = a->order[i];
    if (r < 0 || r >= n || pos[r] >= 0) {
      free(pos);
      return err_set(SHARC_ERR_INVALID_ARG,
                     "sched_build: ring order is not a permutation of %d "
                     "ranks (entry %d is %d)",
                     n, i, r);
    }
    pos[r] = i;
  }
  sched_args_t v = *a;
  v.rank = pos[a->rank];
  v.root = sched_coll_rooted(a->coll) ? pos[a->root] : a->root;
  v.order = NULL;
  sharc_status_t st = generators[algo][a->coll](&v, s);
  free(pos);
  CHECK(st);
  sched_buf_t blocks = a->coll == SCHED_ALL_GATHER       ? SCHED_BUF_RECV
                       : a->coll == SCHED_REDUCE_SCATTER ? SCHED_BUF_SEND
                                                         : (sched_buf_t)-1;
  for (size_t i = 0; i < s->nops; i++) {
    sched_op_t *op = &s->ops[i];
    if (op->peer >= 0)
      op->peer = a->order[op->peer];
    if ((int)blocks < 0)
      continue;
    int reads = op->kind != SCHED_RECV, writes = op->kind != SCHED_SEND;
    if ((reads && op->src_buf == blocks &&
         map_block(&op->src_off, op->count, a->count, a->order)) ||
        (writes && op->dst_buf == blocks &&
         map_block(&op->dst_off, op->count, a->count, a->order)))
      return err_set(SHARC_ERR_INTERNAL,
                     "sched_build: %s %s moves a range across two ranks' "
                     "blocks; it cannot run in a topology order",
                     sched_algo_name(algo), sched_coll_name(a->coll));
  }
  return SHARC_OK;
}

sharc_status_t sched_build(sched_algo_t algo, const sched_args_t *args,
                           sched_t *s) {
  if (!args || !s)
    return err_set(SHARC_ERR_INVALID_ARG, "sched_build: NULL %s",
                   args ? "schedule" : "arguments");
  if (!sched_algo_supports(algo, args->coll))
    return err_set(SHARC_ERR_UNSUPPORTED,
                   "sched_build: algorithm %s does not implement %s",
                   sched_algo_name(algo), sched_coll_name(args->coll));
  if (args->nranks < 1 || args->rank < 0 || args->rank >= args->nranks)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sched_build: rank %d of %d ranks is out of range",
                   args->rank, args->nranks);
  if (args->nchan < 1 || args->nchan > 255)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sched_build: nchan %d outside [1, 255]", args->nchan);
  if (sched_coll_rooted(args->coll) &&
      (args->root < 0 || args->root >= args->nranks))
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sched_build: %s root %d of %d ranks is out of range",
                   sched_coll_name(args->coll), args->root, args->nranks);
  if (s->nops != 0 || s->nrounds != 0)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sched_build: schedule not empty (%zu ops); sched_init it",
                   s->nops);
  s->nchan = 1;
  s->tmp_count = 0;
  s->fresh_sends = args->coll == SCHED_ALL_REDUCE;
  if (args->order && reorders(algo, args->coll) &&
      !is_identity(args->order, args->nranks))
    CHECK(build_in_order(algo, args, s));
  else
    CHECK(generators[algo][args->coll](args, s));
  return sched_finish(s);
}

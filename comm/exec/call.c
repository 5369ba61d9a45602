/*
 * call.c - one collective call as the executor sees it: which algorithm
 * runs it, its schedule's cache key and arguments, and its schedule
 * planned ahead (call.h).
 */
#include "call.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "cost.h"
#include "dispatch.h"

#define CALL_BCAST_DIRECT_MAX 524288 /* bytes; see pick() */

/* The links the cost model prices, from the rank table and SHARC_*. */
static sched_links_t comm_links(const struct sharc_comm *comm) {
  const comm_cfg_t *c = &comm->cfg;
  return (sched_links_t){comm->nhosts, comm->local_max, c->alpha_us,
                         c->beta_gbs,  c->net_alpha_us, c->net_beta_gbs};
}

/* The algorithm for coll at this size; *why: the reason, for the log. */
static sched_algo_t pick(struct sharc_comm *comm, sched_coll_t coll,
                         size_t bytes, const sched_links_t *links,
                         const char **why) {
  const comm_cfg_t *c = &comm->cfg;
  if (c->algo == COMM_ALGO_AUTO) {
    if (c->tree_max > 0) {
      *why = "SHARC_TREE_MAX_BYTES";
      return bytes <= (size_t)c->tree_max ? SCHED_ALGO_TREE : SCHED_ALGO_RING;
    }
    /* With more ranks on a host than cores, a barrier fans in to rank 0
     * and out from it: each rank waits once, not in each of log2 n rounds
     * that need every rank on a core, and rank 0 leaves first, so a
     * broadcast from it that follows finds its root running (measured at
     * 3, 4 and 8 ranks on 2 cores: docs/benchmarks.md). Every rank must
     * choose alike: the flag comes from the rank table. */
    if (coll == SCHED_BARRIER && comm->oversubscribed) {
      *why = "ranks share cores: fan-in/fan-out";
      return SCHED_ALGO_DIRECT;
    }
    *why = "the cost model's cheapest";
    sched_algo_t a = sched_pick_links(coll, comm->nranks, bytes, links);
    /* Where the model's broadcast is a tree on one such host, up to
     * CALL_BCAST_DIRECT_MAX, the root sends to every rank itself instead:
     * each of the tree's forwarding ranks must get a core before the
     * ranks below it see a byte, which the model's alpha does not price.
     * Measured on 2 cores against the tree: 8 ranks 16-512 KiB 1.34-1.57x,
     * 4 ranks 128-256 KiB 1.09-1.21x; larger, the root's n-1 copies cost
     * more than the hops (8 ranks 1 MiB 0.78-0.90x), and the model's
     * pipelined chain beats it from 512 KiB at 3 and 4 ranks
     * (bench/results/bcast_shared_cores/). */
    if (coll == SCHED_BROADCAST && a == SCHED_ALGO_TREE &&
        bytes <= CALL_BCAST_DIRECT_MAX && comm->oversubscribed &&
        comm->nhosts == 1) {
      *why = "ranks share cores: the root sends to all, not through a tree";
      a = SCHED_ALGO_DIRECT;
    }
    return a;
  }
  *why = "SHARC_ALGO";
  if (c->algo == COMM_ALGO_TREE_FAMILY) {
    if (coll != SCHED_ALL_REDUCE)
      return SCHED_ALGO_TREE;
    /* For all-reduce: the cheapest of the family's three members. */
    sched_algo_t best = SCHED_ALGO_TREE;
    const sched_algo_t fam[] = {SCHED_ALGO_RABENSEIFNER, SCHED_ALGO_DBTREE};
    for (int i = 0; i < 2; i++)
      if (sched_cost_links_us(fam[i], coll, comm->nranks, bytes, links) <
          sched_cost_links_us(best, coll, comm->nranks, bytes, links))
        best = fam[i];
    return best;
  }
  return (sched_algo_t)c->algo;
}

/* SHARC_DEBUG=INFO: says which algorithm runs coll at this size and
 * what the cost model estimated for each candidate, once per collective
 * and power of two of bytes (a size's choice holds for the communicator's
 * life: the inputs are fixed at init). */
static void log_choice(struct sharc_comm *comm, sched_coll_t coll, size_t bytes,
                       const sched_links_t *links, sched_algo_t a,
                       const char *why) {
  uint64_t mask = 1ull << (bytes > 1 ? 63 - __builtin_clzll(bytes) : 0);
  if ((unsigned)coll >= SCHED_COLL_COUNT || !log_enabled(LOG_INFO, SUB_COMM) ||
      (atomic_fetch_or_explicit(&comm->algo_logged[coll], mask,
                                memory_order_relaxed) &
       mask))
    return;
  char est[320];
  size_t o = 0;
  est[0] = '\0';
  for (int al = 0; al < SCHED_ALGO_COUNT && o + 40 < sizeof est; al++) {
    double us =
        sched_cost_links_us((sched_algo_t)al, coll, comm->nranks, bytes, links);
    if (isfinite(us))
      o += (size_t)snprintf(est + o, sizeof est - o, "%s%s %.3g", o ? ", " : "",
                            sched_algo_name((sched_algo_t)al), us);
  }
  INFO(SUB_COMM,
       "%s of %zu bytes on %d ranks: %s (%s; the cost model's estimates, us: "
       "%s; alpha %g us, beta %g GB/s)",
       sched_coll_fn(coll), bytes, comm->nranks, sched_algo_name(a), why,
       o ? est : "none", comm->cfg.alpha_us, comm->cfg.beta_gbs);
}

/* pick's choice, or the cost model's where the choice (forced by
 * SHARC_ALGO or SHARC_TREE_MAX_BYTES) lacks the collective: gather and
 * scatter have one algorithm. */
sched_algo_t call_pick_algo(struct sharc_comm *comm, sched_coll_t coll,
                            size_t bytes) {
  sched_links_t links = comm_links(comm);
  const char *why;
  sched_algo_t a = pick(comm, coll, bytes, &links, &why);
  if (!sched_algo_supports(a, coll)) {
    a = sched_pick_links(coll, comm->nranks, bytes, &links);
    why = "the cost model's cheapest: the algorithm asked for lacks it";
  }
  log_choice(comm, coll, bytes, &links, a, why);
  return a;
}

/* This rank's block's offset in a buffer of one block per rank; computed
 * only for the layouts that have one (on every call's path). */
static inline size_t block_off(const coll_call_t *c, size_t esize) {
  return (size_t)c->comm->rank * c->count * esize;
}

int call_inplace(const coll_call_t *c, size_t esize) {
  const uint8_t *s = c->sendbuf, *r = c->recvbuf;
  int root = c->comm->rank == c->root;
  switch (c->coll) {
  case SCHED_ALL_GATHER:
    return s == r + block_off(c, esize);
  case SCHED_REDUCE_SCATTER:
    return r == s + block_off(c, esize);
  case SCHED_ALL_REDUCE:
  case SCHED_BROADCAST:
  case SCHED_ALL_TO_ALL:
    return s == r;
  case SCHED_REDUCE: /* one buffer, and so one layout, on the root only */
    return root && s == r;
  case SCHED_GATHER:
    return root && s == r + block_off(c, esize);
  case SCHED_SCATTER:
    return root && r == s + block_off(c, esize);
  default:
    return 0;
  }
}

sched_key_t call_key(const coll_call_t *call, size_t esize) {
  sched_key_t key = {.coll = call->coll,
                     .root = sched_coll_rooted(call->coll) ? call->root : 0,
                     .inplace = call_inplace(call, esize),
                     .count = call->count,
                     .esize = esize};
  return key;
}

sched_args_t call_args(const coll_call_t *call, const sched_key_t *key) {
  struct sharc_comm *comm = call->comm;
  size_t bytes = key->count * key->esize;
  sched_args_t args = {
      .coll = call->coll,
      .rank = comm->rank,
      .nranks = comm->nranks,
      .count = key->count,
      .root = key->root,
      .inplace = key->inplace,
      .nchan = bytes >= 262144 ? comm->nchan : 1,
      .chunk = SHARC_MAX((size_t)65536 / key->esize, 1),
      .host_of = comm->host_of,
      .order = comm->ring_order,
  };
  return args;
}

sharc_status_t coll_plan(const coll_call_t *call, sched_t *out) {
  size_t esize = sharc_dtype_size(call->dtype);
  sched_key_t key = call_key(call, esize);
  sched_args_t args = call_args(call, &key);
  sched_init(out);
  return sched_build(
      call_pick_algo(call->comm, call->coll, call->count * esize), &args, out);
}

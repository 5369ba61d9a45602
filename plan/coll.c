/*
 * coll.c - the communicators of a configuration and the cost of one
 * collective on them, through sharc's own cost model (comm/algo/cost.h):
 * the algorithm is the one the runtime's dispatcher picks (exec/call.c:
 * sched_pick_links with the communicator's nodes, ranks per node and link
 * parameters), its time that model's prediction. Only the bytes per link
 * class are the planner's own (the volume each algorithm sends; see
 * docs/plan.md).
 */
#include "plan.h"

#include "cost.h"

void plan_comm_make(const sharc_plan_cluster_t *cl, int ranks, int stride,
                    plan_comm_t *out) {
  int G = cl->gpus_per_node;
  out->ranks = ranks;
  if (stride == 1) { /* contiguous: a node's ranks together */
    out->local = ranks < G ? ranks : G;
    out->nodes = (ranks + G - 1) / G;
  } else if (stride >= G) { /* one rank per node */
    out->local = 1;
    out->nodes = ranks;
  } else { /* G / stride ranks on each node */
    out->local = G / stride;
    out->nodes = (ranks + out->local - 1) / out->local;
  }
  out->alpha_us = cl->intra_lat_us;
  out->beta_gbs = cl->intra_gbs;
  out->net_alpha_us = cl->inter_lat_us;
  /* sharc's model has one network link per node (SHARC_NET_BETA_GBS): a
   * node with one NIC per GPU gives this communicator the NICs of its
   * ranks on the node; the node's other ranks use theirs for their own
   * communicators, which run at the same time. */
  out->net_beta_gbs = cl->inter_gbs * out->local;
}

static const sched_coll_t to_sched[SHARC_PLAN_NCOLL] = {
    SCHED_ALL_GATHER, SCHED_REDUCE_SCATTER, SCHED_ALL_REDUCE};

void plan_coll_cost(sharc_plan_coll_t coll, const plan_comm_t *c, size_t bytes,
                    double *seconds, const char **algo, double *intra,
                    double *inter) {
  *seconds = 0;
  *intra = *inter = 0;
  *algo = "-";
  if (c->ranks <= 1 || bytes == 0)
    return;
  sched_links_t links = {c->nodes,    c->local,        c->alpha_us,
                         c->beta_gbs, c->net_alpha_us, c->net_beta_gbs};
  sched_coll_t sc = to_sched[coll];
  sched_algo_t a = sched_pick_links(sc, c->ranks, bytes, &links);
  *seconds = sched_cost_links_us(a, sc, c->ranks, bytes, &links) * 1e-6;
  *algo = sched_algo_name(a);
  /* Bytes rank 0 sends. n ranks, h nodes of L; b the per-rank block
   * (all-gather, reduce-scatter) or B the vector (all-reduce). */
  double n = c->ranks, h = c->nodes, L = c->local, b = (double)bytes;
  double total, cross;
  if (a == SCHED_ALGO_HIER && h > 1) {
    if (coll == SHARC_PLAN_ALL_REDUCE) {
      /* within: reduce-scatter and all-gather of B over L; between: an
       * all-reduce of B / L over h */
      *intra = 2.0 * (L - 1) / L * b;
      *inter = 2.0 * (h - 1) / h * b / L;
    } else { /* within: (L-1) blocks of h; between: the node's h-1 blocks
              * of L ranks, over its L NICs */
      *intra = (L - 1) * h * b;
      *inter = (h - 1) * b;
    }
    return;
  }
  /* Ring volume (trees move about as much per rank); in rank order one
   * ring edge in L crosses a node boundary. */
  total = coll == SHARC_PLAN_ALL_REDUCE ? 2.0 * (n - 1) / n * b : (n - 1) * b;
  cross = h > 1 ? total * h / n : 0;
  *inter = cross;
  *intra = total - cross;
}

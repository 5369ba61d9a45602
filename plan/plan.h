/*
 * plan.h - the planner's insides, shared by its files: the communicators
 * of a configuration and the cost of one collective on them (coll.c), the
 * replay of one step (predict.c). Pure logic.
 */
#ifndef SHARC_PLAN_PLAN_H
#define SHARC_PLAN_PLAN_H

#include <stddef.h>

#include "sharc_plan.h"

/* A communicator as the cost model sees it: ranks, nodes it spans, its
 * ranks per node, and the links (alpha-beta per class). */
typedef struct {
  int ranks, nodes, local;
  double alpha_us, beta_gbs;         /* within a node, per GPU */
  double net_alpha_us, net_beta_gbs; /* between nodes, per node: its ranks'
                                      * NICs together */
} plan_comm_t;

/* The communicator of `ranks` ranks: a shard group (stride 1: ranks of a
 * node contiguous) when stride_one, else the replicas of one shard index
 * (stride = the shard group's size). */
void plan_comm_make(const sharc_plan_cluster_t *cl, int ranks, int stride,
                    plan_comm_t *out);

/* One collective of coll on c: bytes is the per-rank block for all-gather
 * and reduce-scatter (count * element size, as sharc's calls take it) and
 * the whole vector for all-reduce. Sets the seconds sharc's cost model
 * predicts for the algorithm it picks, the algorithm's name and the bytes
 * rank 0 sends within a node and between nodes. */
void plan_coll_cost(sharc_plan_coll_t coll, const plan_comm_t *c, size_t bytes,
                    double *seconds, const char **algo, double *intra,
                    double *inter);

#endif /* SHARC_PLAN_PLAN_H */

/*
 * cost.h - the alpha-beta cost model that picks an algorithm per call
 * (docs/design.md, decision 3). Pure logic.
 */
#ifndef SHARC_COST_H
#define SHARC_COST_H

#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* Cost model (alpha-beta): predicted microseconds for coll of `bytes`
 * (count * element size, with all-gather/reduce-scatter counted per rank as
 * in args->count) on nranks with algo. alpha_us per message, beta_gbs link
 * bandwidth. All ranks on one host. */
double sched_cost_us(sched_algo_t algo, sched_coll_t coll, int nranks,
                     size_t bytes, double alpha_us, double beta_gbs);
/* The algorithm with the lowest predicted cost among those supporting coll. */
sched_algo_t sched_pick(sched_coll_t coll, int nranks, size_t bytes,
                        double alpha_us, double beta_gbs);

/* Links of a communicator spanning hosts: within a host alpha_us/beta_gbs,
 * between hosts net_alpha_us/net_beta_gbs (one network link per host). */
typedef struct {
  int nhosts;    /* 1: one host, the plain model */
  int local_max; /* most ranks on one host */
  double alpha_us, beta_gbs, net_alpha_us, net_beta_gbs;
} sched_links_t;
double sched_cost_links_us(sched_algo_t algo, sched_coll_t coll, int nranks,
                           size_t bytes, const sched_links_t *links);
sched_algo_t sched_pick_links(sched_coll_t coll, int nranks, size_t bytes,
                              const sched_links_t *links);

#endif /* SHARC_COST_H */

/*
 * sharc_plan_topo.h - sharc-plan --topology FILE: one node's hwloc XML
 * export (read with topo/'s machine model) turned into the cluster's GPUs
 * per node, links and per-GPU numbers. Part of the command, not of the
 * planner library, which reads nothing (docs/plan.md, "A node from its
 * hwloc export").
 */
#ifndef SHARC_PLAN_TOPO_H
#define SHARC_PLAN_TOPO_H

#include <stdio.h>

#include "sharc_plan.h"

/* Which cluster fields flags gave (the export does not override them),
 * and the NIC rate of --nic-gbps. */
typedef struct {
  int gpus_per_node, intra, inter, gpu_mem, flops, hbm;
  double nic_gbs; /* GB/s per NIC, one way; 0: the default for its kind */
} plan_topo_given_t;

/* Loads the export at path, sets the fields of cl that given leaves open
 * and prints to info what it took from the file and where each number came
 * from. Returns 0, or 2 after printing why the file cannot be used (to
 * stderr, "sharc-plan: --topology FILE: ..."). */
int plan_topo_apply(const char *path, const plan_topo_given_t *given,
                    sharc_plan_cluster_t *cl, FILE *info);

#endif /* SHARC_PLAN_TOPO_H */

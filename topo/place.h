/*
 * place.h - rank placement: which ranks share a host, NUMA node or PCI
 * switch, ring orders that keep neighbours close, host-aware trees, and the
 * group arithmetic of hybrid sharding (HSDP).
 *
 * Everything here is a pure function of a rank map (one topo_loc_t per
 * rank): no hwloc, no communicator, no I/O. topo.c fills rank maps from a
 * machine (or an hwloc XML export); comm/ fills them from the bootstrap
 * rank table. Unit-tested in tests/unit/test_place.c.
 */
#ifndef SHARC_TOPO_PLACE_H
#define SHARC_TOPO_PLACE_H

/* Where one rank runs. Indices are local to the host (package 0 of host 0
 * and package 0 of host 1 are different sockets); -1 when unknown. */
typedef struct {
  int host;    /* 0..nhosts-1, numbered in order of first appearance */
  int package; /* socket */
  int numa;    /* NUMA node */
  int pcisw;   /* PCI switch (or host bridge) the rank's device hangs off */
  int gpu;     /* GPU index, -1 for a CPU rank */
} topo_loc_t;

/* Hosts in the map (max host index + 1). */
int place_nhosts(int n, const topo_loc_t *loc);

/* Whether ranks a and b share a host / NUMA node / PCI switch (an unknown
 * field never matches). */
int place_same_host(const topo_loc_t *a, const topo_loc_t *b);
int place_same_numa(const topo_loc_t *a, const topo_loc_t *b);
int place_same_pcisw(const topo_loc_t *a, const topo_loc_t *b);

/* Ring order: order[i] is the rank at ring position i. Hosts appear in
 * order of their lowest rank and each host's ranks are consecutive (so the
 * ring crosses each host boundary exactly once); within a host ranks are
 * grouped by package, then NUMA node, then PCI switch, then GPU index, then
 * rank. order[0] is rank 0 whenever rank 0's host comes first, which it
 * always does. */
void place_ring_order(int n, const topo_loc_t *loc, int *order);

/* Number of ring edges (including the wrap-around) joining different
 * hosts, for an order. A ring over h > 1 hosts that visits each host once
 * has exactly h. */
int place_ring_host_crossings(int n, const topo_loc_t *loc, const int *order);

/* Host-aware broadcast tree rooted at `root`: parent[r] for every rank
 * (-1 for the root). Each host has one leader (the root on its host, else
 * the host's first rank in ring order); leaders form a binary tree over the
 * hosts (root's host first), and each host's other ranks form a binary tree
 * under their leader in ring order. So every inter-host edge joins two
 * leaders: one rank per host. Returns the tree's depth. */
int place_tree(int n, const topo_loc_t *loc, int root, int *parent);

/* HSDP groups for a world of n ranks. group_size > 0: shard groups are
 * consecutive blocks of group_size ranks (it must divide n); group_size 0:
 * one shard group per host (every host must have the same number of
 * ranks). For each rank: shard_color/shard_key place it in its shard group
 * (key = position in the group) and rep_color/rep_key in its replicate
 * group (the ranks at the same position of every shard group, key = group
 * index). host may be NULL when group_size > 0. Returns 0, or -1 when the
 * sizes do not fit (group_size does not divide n, is negative or larger
 * than n, or hosts have different rank counts); `why` (if not NULL) then
 * gets a sentence saying what was wrong. */
int place_hsdp(int n, const int *host, int group_size, int *shard_color,
               int *shard_key, int *rep_color, int *rep_key, char *why,
               unsigned long why_len);

#endif /* SHARC_TOPO_PLACE_H */

/*
 * place.c - rank placement as pure functions of a rank map (see place.h).
 */
#include "place.h"

#include <stdio.h>
#include <stdlib.h>

int place_nhosts(int n, const topo_loc_t *loc) {
  int h = 0;
  for (int r = 0; r < n; r++)
    if (loc[r].host + 1 > h)
      h = loc[r].host + 1;
  return h;
}

static int same(int a, int b) { return a >= 0 && a == b; }

int place_same_host(const topo_loc_t *a, const topo_loc_t *b) {
  return same(a->host, b->host);
}

int place_same_numa(const topo_loc_t *a, const topo_loc_t *b) {
  return place_same_host(a, b) && same(a->numa, b->numa);
}

int place_same_pcisw(const topo_loc_t *a, const topo_loc_t *b) {
  return place_same_host(a, b) && same(a->pcisw, b->pcisw);
}

/* Each rank's sort key is computed once, so qsort needs no context. */
typedef struct {
  int rank;
  int key[5]; /* host order, package, numa, pcisw, gpu */
} sort_item_t;

static int cmp_item(const void *pa, const void *pb) {
  const sort_item_t *a = pa, *b = pb;
  for (int i = 0; i < 5; i++)
    if (a->key[i] != b->key[i])
      return a->key[i] < b->key[i] ? -1 : 1;
  return a->rank < b->rank ? -1 : a->rank > b->rank;
}

void place_ring_order(int n, const topo_loc_t *loc, int *order) {
  sort_item_t *it = malloc((size_t)n * sizeof *it);
  int nh = place_nhosts(n, loc);
  int *first = malloc((size_t)(nh > 0 ? nh : 1) * sizeof *first);
  if (!it || !first) { /* identity is a valid (if unaware) order */
    for (int r = 0; r < n; r++)
      order[r] = r;
    free(it);
    free(first);
    return;
  }
  for (int h = 0; h < nh; h++)
    first[h] = n;
  for (int r = 0; r < n; r++)
    if (loc[r].host >= 0 && first[loc[r].host] == n)
      first[loc[r].host] = r;
  for (int r = 0; r < n; r++) {
    const topo_loc_t *l = &loc[r];
    /* Unknown fields sort last within their level (INT_MAX-like). */
    it[r].rank = r;
    it[r].key[0] = l->host >= 0 ? first[l->host] : n;
    it[r].key[1] = l->package >= 0 ? l->package : 1 << 30;
    it[r].key[2] = l->numa >= 0 ? l->numa : 1 << 30;
    it[r].key[3] = l->pcisw >= 0 ? l->pcisw : 1 << 30;
    it[r].key[4] = l->gpu >= 0 ? l->gpu : 1 << 30;
  }
  qsort(it, (size_t)n, sizeof *it, cmp_item);
  for (int i = 0; i < n; i++)
    order[i] = it[i].rank;
  free(it);
  free(first);
}

int place_ring_host_crossings(int n, const topo_loc_t *loc, const int *order) {
  if (n < 2)
    return 0;
  int x = 0;
  for (int i = 0; i < n; i++)
    if (!place_same_host(&loc[order[i]], &loc[order[(i + 1) % n]]))
      x++;
  return x;
}

/* parent[] of a binary tree over list[0..m) rooted at list[0]: the node at
 * position i hangs off position (i-1)/2. */
static void binary_tree(const int *list, int m, int *parent) {
  for (int i = 1; i < m; i++)
    parent[list[i]] = list[(i - 1) / 2];
}

int place_tree(int n, const topo_loc_t *loc, int root, int *parent) {
  if (n <= 0 || root < 0 || root >= n)
    return -1;
  int *order = malloc((size_t)n * sizeof *order);
  int *list = malloc((size_t)n * sizeof *list);
  int nh = place_nhosts(n, loc);
  int *leader = malloc((size_t)(nh > 0 ? nh : 1) * sizeof *leader);
  if (!order || !list || !leader) {
    free(order);
    free(list);
    free(leader);
    return -1;
  }
  place_ring_order(n, loc, order);
  for (int h = 0; h < nh; h++)
    leader[h] = -1;
  for (int i = 0; i < n; i++) {
    int h = loc[order[i]].host;
    if (h >= 0 && leader[h] < 0)
      leader[h] = order[i];
  }
  int rh = loc[root].host;
  if (rh >= 0)
    leader[rh] = root;
  parent[root] = -1;
  /* Leaders: the root's host first, then the others in ring order. */
  int m = 0;
  list[m++] = root;
  for (int i = 0; i < n; i++) {
    int r = order[i], h = loc[r].host;
    if (h >= 0 && h != rh && leader[h] == r)
      list[m++] = r;
  }
  binary_tree(list, m, parent);
  /* Each host: its leader, then its other ranks in ring order. Ranks with
   * an unknown host hang off the root as a host of their own. */
  for (int h = -1; h < nh; h++) {
    int lead = h >= 0 ? leader[h] : root;
    if (lead < 0)
      continue;
    int k = 0;
    list[k++] = lead;
    for (int i = 0; i < n; i++) {
      int r = order[i];
      if (loc[r].host == h && r != lead)
        list[k++] = r;
    }
    binary_tree(list, k, parent);
  }
  int depth = 0;
  for (int r = 0; r < n; r++) {
    int d = 0;
    for (int x = r; parent[x] >= 0 && d <= n; x = parent[x])
      d++;
    if (d > depth)
      depth = d;
  }
  free(order);
  free(list);
  free(leader);
  return depth;
}

int place_hsdp(int n, const int *host, int group_size, int *shard_color,
               int *shard_key, int *rep_color, int *rep_key, char *why,
               unsigned long why_len) {
  char dummy[1];
  if (!why) {
    why = dummy;
    why_len = sizeof dummy;
  }
  if (n <= 0) {
    snprintf(why, why_len, "the communicator is empty");
    return -1;
  }
  if (group_size < 0) {
    snprintf(why, why_len,
             "group_size %d is negative; pass a divisor of %d, or 0 for one "
             "shard group per host",
             group_size, n);
    return -1;
  }
  if (group_size > n || (group_size > 0 && n % group_size)) {
    snprintf(why, why_len,
             "group_size %d does not divide the %d ranks; pass a divisor of "
             "%d, or 0 for one shard group per host",
             group_size, n, n);
    return -1;
  }
  if (group_size > 0) {
    for (int r = 0; r < n; r++) {
      shard_color[r] = r / group_size;
      shard_key[r] = r % group_size;
      rep_color[r] = r % group_size;
      rep_key[r] = r / group_size;
    }
    return 0;
  }
  if (!host) {
    snprintf(why, why_len, "group_size 0 (per host) needs the host map");
    return -1;
  }
  /* Per host: position = rank's index among its host's ranks. */
  int nh = 0;
  for (int r = 0; r < n; r++)
    if (host[r] + 1 > nh)
      nh = host[r] + 1;
  int *cnt = calloc((size_t)nh, sizeof *cnt);
  if (!cnt) {
    snprintf(why, why_len, "out of memory");
    return -1;
  }
  for (int r = 0; r < n; r++) {
    shard_color[r] = host[r];
    shard_key[r] = cnt[host[r]]++;
  }
  int ok = 1;
  for (int h = 1; h < nh && ok; h++)
    if (cnt[h] != cnt[0]) {
      snprintf(why, why_len,
               "hosts hold different numbers of ranks (host 0: %d, host %d: "
               "%d), so per-host shard groups would differ in size; pass a "
               "group_size that divides %d instead of 0",
               cnt[0], h, cnt[h], n);
      ok = 0;
    }
  free(cnt);
  if (!ok)
    return -1;
  for (int r = 0; r < n; r++) {
    rep_color[r] = shard_key[r];
    rep_key[r] = shard_color[r];
  }
  return 0;
}

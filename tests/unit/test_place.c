/*
 * test_place.c - the placement functions of topo/place.h: ring orders that
 * cross each host boundary once, host-aware trees whose inter-host edges
 * join one rank per host, and the HSDP group arithmetic, over many rank
 * maps.
 */
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "place.h"

/* A map from a string, one letter per rank naming its host ("abaa"). Hosts
 * are numbered in order of first appearance, as the bootstrap does. */
static int map_from(const char *s, topo_loc_t *loc) {
  int n = (int)strlen(s), nh = 0;
  char seen[32];
  for (int r = 0; r < n; r++) {
    int h = 0;
    while (h < nh && seen[h] != s[r])
      h++;
    if (h == nh)
      seen[nh++] = s[r];
    loc[r] = (topo_loc_t){h, -1, -1, -1, -1};
  }
  return n;
}

static int is_permutation(int n, const int *order) {
  char seen[256] = {0};
  for (int i = 0; i < n; i++) {
    if (order[i] < 0 || order[i] >= n || seen[order[i]])
      return 0;
    seen[order[i]] = 1;
  }
  return 1;
}

static void check_ring(const char *map) {
  topo_loc_t loc[64] = {{0}};
  int order[64];
  int n = map_from(map, loc), nh = place_nhosts(n, loc);
  place_ring_order(n, loc, order);
  EXPECT(is_permutation(n, order), "%s: not a permutation", map);
  EXPECT(order[0] == 0, "%s: ring starts at rank %d", map, order[0]);
  int x = place_ring_host_crossings(n, loc, order);
  EXPECT(x == (nh > 1 ? nh : 0), "%s: %d host crossings for %d hosts", map, x,
         nh);
  /* Within a host, ranks keep their order. */
  for (int i = 1; i < n; i++)
    if (loc[order[i]].host == loc[order[i - 1]].host)
      EXPECT(order[i] > order[i - 1], "%s: host order broken at %d", map, i);
}

static void check_tree(const char *map, int root) {
  topo_loc_t loc[64] = {{0}};
  int parent[64];
  int n = map_from(map, loc), nh = place_nhosts(n, loc);
  int depth = place_tree(n, loc, root, parent);
  EXPECT(depth >= 0 && depth < n, "%s root %d: depth %d", map, root, depth);
  EXPECT(parent[root] == -1, "%s: root has parent %d", map, parent[root]);
  /* Every rank reaches the root; inter-host edges join leaders, one per
   * host, and each host is entered exactly once. */
  int *entered = calloc((size_t)nh, sizeof *entered);
  int *leader = malloc((size_t)nh * sizeof *leader);
  for (int h = 0; h < nh; h++)
    leader[h] = -1;
  for (int r = 0; r < n; r++) {
    int steps = 0, x = r;
    while (x != root && steps <= n) {
      x = parent[x];
      steps++;
    }
    EXPECT(x == root, "%s: rank %d does not reach the root", map, r);
    if (r == root)
      continue;
    int p = parent[r];
    if (loc[p].host != loc[r].host) {
      entered[loc[r].host]++;
      EXPECT(leader[loc[r].host] < 0 || leader[loc[r].host] == r,
             "%s: two ranks of host %d have remote parents", map, loc[r].host);
      leader[loc[r].host] = r;
    }
  }
  for (int h = 0; h < nh; h++)
    EXPECT(entered[h] == (h == loc[root].host ? 0 : 1),
           "%s root %d: host %d entered %d times", map, root, h, entered[h]);
  /* A leader's parent across hosts is itself a leader (or the root). */
  for (int r = 0; r < n; r++)
    if (r != root && loc[parent[r]].host != loc[r].host) {
      int p = parent[r];
      EXPECT(p == root || leader[loc[p].host] == p,
             "%s: inter-host edge %d->%d from a non-leader", map, p, r);
    }
  free(entered);
  free(leader);
}

static void check_numa_order(void) {
  /* One host, two sockets, ranks interleaved across them: the ring keeps
   * each socket's ranks together. */
  topo_loc_t loc[8];
  int order[8];
  for (int r = 0; r < 8; r++)
    loc[r] = (topo_loc_t){0, r % 2, r % 2, -1, r};
  place_ring_order(8, loc, order);
  int changes = 0;
  for (int i = 0; i < 8; i++)
    changes += loc[order[i]].numa != loc[order[(i + 1) % 8]].numa;
  EXPECT(changes == 2, "socket changes around the ring: %d", changes);
  EXPECT(place_same_numa(&loc[0], &loc[2]) &&
             !place_same_numa(&loc[0], &loc[1]),
         "same_numa");
  topo_loc_t u = {0, -1, -1, -1, -1};
  EXPECT(!place_same_numa(&u, &u) && !place_same_pcisw(&u, &u),
         "unknown fields never match");
}

static void check_hsdp(void) {
  for (int n = 1; n <= 16; n++)
    for (int g = 1; g <= n; g++) {
      int sc[16], sk[16], rc[16], rk[16];
      int rc_ = place_hsdp(n, NULL, g, sc, sk, rc, rk, NULL, 0);
      if (n % g) {
        EXPECT(rc_ == -1, "n %d g %d accepted", n, g);
        continue;
      }
      EXPECT(rc_ == 0, "n %d g %d refused", n, g);
      for (int r = 0; r < n; r++) {
        EXPECT(sc[r] == r / g && sk[r] == r % g, "n %d g %d r %d shard", n, g,
               r);
        EXPECT(rc[r] == r % g && rk[r] == r / g, "n %d g %d r %d rep", n, g, r);
      }
    }
  char why[256] = "";
  int sc[8], sk[8], rc[8], rk[8];
  EXPECT(place_hsdp(6, NULL, 4, sc, sk, rc, rk, why, sizeof why) == -1 &&
             strstr(why, "does not divide"),
         "6/4: %s", why);
  EXPECT(place_hsdp(6, NULL, -1, sc, sk, rc, rk, why, sizeof why) == -1,
         "negative group size accepted");
  /* Per host: even hosts (interleaved) give host groups, uneven ones are
   * refused with a reason. */
  int even[6] = {0, 1, 0, 1, 0, 1};
  EXPECT(place_hsdp(6, even, 0, sc, sk, rc, rk, why, sizeof why) == 0,
         "even per host: %s", why);
  EXPECT(sc[4] == 0 && sk[4] == 2 && rc[4] == 2 && rk[4] == 0 && sc[5] == 1 &&
             sk[5] == 2,
         "per-host layout");
  int uneven[4] = {0, 1, 0, 0};
  EXPECT(place_hsdp(4, uneven, 0, sc, sk, rc, rk, why, sizeof why) == -1 &&
             strstr(why, "different numbers"),
         "uneven per host: %s", why);
}

int main(void) {
  const char *maps[] = {"a",        "aa",       "ab",        "aabb",
                        "abab",     "abaa",     "aaabbb",    "abcabc",
                        "aabbccdd", "abcdabcd", "abbbbbbba", "abcdefgh",
                        "aaaaaaab", "baaa",     "aabbaabb"};
  for (size_t i = 0; i < sizeof maps / sizeof *maps; i++) {
    check_ring(maps[i]);
    int n = (int)strlen(maps[i]);
    for (int root = 0; root < n; root++)
      check_tree(maps[i], root);
  }
  check_numa_order();
  check_hsdp();
  printf("test_place: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

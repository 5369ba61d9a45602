/*
 * test_schedule.c - proves every algorithm schedule correct in the
 * simulator (comm/algo/schedule_sim.c) over rank counts 1..64, counts including
 * 0 and counts no rank/chunk count divides, in and out of place, 1 and 2
 * channels, every dtype and op; checks that the simulator rejects broken
 * schedules (FIFO size mismatch, deadlock, hazard, wrong result, forbidden
 * buffer use, incomplete barrier); checks the cost model's picks and the
 * schedule cache's lookups and evictions.
 *
 * Exit 0 when all pass. SHARC_TEST_QUICK=1 runs a reduced sweep.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algo.h"
#include "cache.h"
#include "core.h"
#include "cost.h"
#include "dispatch.h"
#include "place.h"
#include "schedule.h"
#include "schedule_sim.h"

static int npass, nfail;

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (cond) {                                                                \
      npass++;                                                                 \
    } else {                                                                   \
      nfail++;                                                                 \
      if (nfail <= 20) {                                                       \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                   \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
      }                                                                        \
    }                                                                          \
  } while (0)

static void sim(sched_algo_t algo, sched_coll_t coll, int n, size_t count,
                int inplace, int nchan, size_t chunk, int root,
                sharc_dtype_t dt, sharc_op_t op) {
  sched_args_t a = {.coll = coll,
                    .rank = 0,
                    .nranks = n,
                    .count = count,
                    .root = root,
                    .inplace = inplace,
                    .nchan = nchan,
                    .chunk = chunk};
  sharc_status_t st = sched_simulate(algo, &a, dt, op);
  EXPECT(st == SHARC_OK, "%s: %s", sharc_status_name(st), err_last());
}

static int reduces(sched_coll_t c) {
  return c == SCHED_REDUCE_SCATTER || c == SCHED_ALL_REDUCE ||
         c == SCHED_REDUCE;
}

/* Every collective that moves data (all but the barrier and send/recv
 * batches, which have no algorithm), in turn. */
#define FOR_DATA_COLLS(co)                                                     \
  for (int co = 0; co < SCHED_COLL_COUNT; co++)                                \
    if (co != SCHED_BARRIER && co != SCHED_P2P)

/* Main sweep: every algorithm x collective x nranks 1..33 x counts x
 * in place x channels, int32 sum (plus u8 max on a subset). */
static void sweep_main(int quick) {
  static const size_t counts[] = {0, 1, 2, 3, 7, 33, 64, 129, 1000};
  size_t ncounts = sizeof counts / sizeof counts[0];
  int maxn = quick ? 17 : 33;
  for (int al = 0; al < SCHED_ALGO_COUNT; al++)
    FOR_DATA_COLLS(co) {
      if (!sched_algo_supports((sched_algo_t)al, (sched_coll_t)co))
        continue;
      for (int n = 1; n <= maxn; n++)
        for (size_t ci = 0; ci < ncounts; ci++)
          for (int ip = 0; ip < 2; ip++)
            for (int nc = 1; nc <= 2; nc++) {
              size_t c = counts[ci];
              size_t chunk = 1 + (c / 3 + (size_t)n) % 97; /* varied, odd */
              int root = (int)((c + (size_t)n / 2) % (size_t)n);
              sim((sched_algo_t)al, (sched_coll_t)co, n, c, ip, nc, chunk, root,
                  SHARC_I32, SHARC_SUM);
              if (ci % 3 == 1 && reduces((sched_coll_t)co))
                sim((sched_algo_t)al, (sched_coll_t)co, n, c, ip, nc, chunk,
                    root, SHARC_U8, SHARC_MAX);
            }
    }
}

/* Every dtype x op on a few rank counts. */
static void sweep_types(int quick) {
  static const int ranks[] = {1, 2, 3, 5, 8, 13};
  static const size_t counts[] = {1, 7, 100};
  for (int al = 0; al < SCHED_ALGO_COUNT; al++)
    FOR_DATA_COLLS(co) {
      if (!sched_algo_supports((sched_algo_t)al, (sched_coll_t)co))
        continue;
      for (int dt = 0; dt < SHARC_DTYPE_COUNT; dt++)
        for (int op = 0; op < SHARC_OP_COUNT; op++) {
          if (!reduces((sched_coll_t)co) && op > 0)
            continue;
          for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++)
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
              for (int ip = 0; ip < 2; ip++) {
                if (quick && ip)
                  continue;
                int n = ranks[ri];
                sim((sched_algo_t)al, (sched_coll_t)co, n, counts[ci], ip, 2, 8,
                    n - 1, (sharc_dtype_t)dt, (sharc_op_t)op);
              }
        }
    }
}

/* Large rank counts 34..64 on a few counts; barrier on 1..64. */
static void sweep_large(int quick) {
  static const size_t counts[] = {1, 5, 97};
  for (int n = 34; n <= 64; n += quick ? 10 : 1)
    for (int al = 0; al < SCHED_ALGO_COUNT; al++)
      FOR_DATA_COLLS(co) {
        if (!sched_algo_supports((sched_algo_t)al, (sched_coll_t)co))
          continue;
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
          sim((sched_algo_t)al, (sched_coll_t)co, n, counts[ci], (int)(ci % 2),
              2, 16, n / 3, SHARC_F32, SHARC_SUM);
      }
  for (int al = 0; al < SCHED_ALGO_COUNT; al++) {
    if (!sched_algo_supports((sched_algo_t)al, SCHED_BARRIER))
      continue;
    for (int n = 1; n <= 64; n++)
      for (int nc = 1; nc <= 2; nc++)
        sim((sched_algo_t)al, SCHED_BARRIER, n, 0, 0, nc, 1, 0, SHARC_U8,
            SHARC_SUM);
  }
}

/* ---- several hosts ----
 * Rank maps as strings, one letter per rank naming its host ("abaa"): the
 * hierarchical algorithm over those hosts, and every other algorithm run in
 * the topology ring order (hosts consecutive) instead of rank order. */

static int map_hosts(const char *map, int *host) {
  int n = (int)strlen(map), nh = 0;
  char seen[64];
  for (int r = 0; r < n; r++) {
    int h = 0;
    while (h < nh && seen[h] != map[r])
      h++;
    if (h == nh)
      seen[nh++] = map[r];
    host[r] = h;
  }
  return n;
}

/* host[] of a map and its topology ring order; returns the rank count. */
static int map_layout(const char *map, int *host, int *order) {
  topo_loc_t loc[64] = {{0}};
  int n = map_hosts(map, host);
  for (int r = 0; r < n; r++)
    loc[r] = (topo_loc_t){host[r], -1, -1, -1, -1};
  place_ring_order(n, loc, order);
  return n;
}

static void sim_map(sched_algo_t algo, sched_coll_t coll, const char *map,
                    size_t count, int inplace, int nchan, int root,
                    sharc_dtype_t dt, sharc_op_t op) {
  int host[64], order[64];
  int n = map_layout(map, host, order);
  sched_args_t a = {.coll = coll,
                    .rank = 0,
                    .nranks = n,
                    .count = count,
                    .root = root % n,
                    .inplace = inplace,
                    .nchan = nchan,
                    .chunk = 5,
                    .host_of = host,
                    .order = order};
  sharc_status_t st = sched_simulate(algo, &a, dt, op);
  EXPECT(st == SHARC_OK, "%s %s on hosts %s, count %zu, inplace %d: %s: %s",
         sched_algo_name(algo), sched_coll_name(coll), map, count, inplace,
         sharc_status_name(st), err_last());
}

static void sweep_hosts(int quick) {
  static const char *const maps[] = {"ab",
                                     "aabb",
                                     "abab",
                                     "abaa",
                                     "aaab",
                                     "aaabbb",
                                     "abcabc",
                                     "aabbcc",
                                     "abcd",
                                     "aabbccdd",
                                     "abcdabcd",
                                     "aaaabbbbc",
                                     "abbbbbbbbbbc",
                                     "a",
                                     "aaaa",
                                     "aabbbcccc",
                                     "abcdefghabcdefgh"};
  static const size_t counts[] = {0, 1, 2, 7, 33, 100};
  size_t nmaps = sizeof maps / sizeof *maps;
  for (size_t mi = 0; mi < nmaps; mi++)
    for (int al = 0; al < SCHED_ALGO_COUNT; al++)
      for (int co = 0; co < SCHED_COLL_COUNT; co++) {
        if (!sched_algo_supports((sched_algo_t)al, (sched_coll_t)co))
          continue;
        for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++)
          for (int ip = 0; ip < 2; ip++)
            for (int nc = 1; nc <= 2; nc++) {
              if (quick && (nc == 2 || ci % 2))
                continue;
              sim_map((sched_algo_t)al, (sched_coll_t)co, maps[mi], counts[ci],
                      ip, nc, (int)(ci + mi), SHARC_I32, SHARC_SUM);
            }
      }
  /* Every dtype and op through the hierarchical reductions, uneven hosts. */
  for (int dt = 0; dt < SHARC_DTYPE_COUNT; dt++)
    for (int op = 0; op < SHARC_OP_COUNT; op++)
      for (int co = SCHED_REDUCE_SCATTER; co <= SCHED_ALL_REDUCE; co++)
        sim_map(SCHED_ALGO_HIER, (sched_coll_t)co, "abaab", 7, op % 2, 2, 0,
                (sharc_dtype_t)dt, (sharc_op_t)op);
}

/* The hierarchical algorithm crosses hosts once per host pair: count the
 * elements rank 0's host sends to other hosts in a 2 x 2 all-reduce (half
 * the vector per host for two hosts) against the flat ring in topology
 * order (the ring's inter-host edge carries 2(n-1)/n of it). */
static size_t host_out_elems(sched_algo_t algo, const char *map, size_t count) {
  int host[64], order[64];
  int n = map_layout(map, host, order);
  size_t out = 0;
  for (int r = 0; r < n; r++) {
    if (host[r] != 0)
      continue;
    sched_args_t a = {.coll = SCHED_ALL_REDUCE,
                      .rank = r,
                      .nranks = n,
                      .count = count,
                      .nchan = 1,
                      .chunk = count,
                      .host_of = host,
                      .order = order};
    sched_t s;
    sched_init(&s);
    if (sched_build(algo, &a, &s) == SHARC_OK)
      for (size_t i = 0; i < s.nops; i++)
        if (s.ops[i].kind == SCHED_SEND && host[s.ops[i].peer] != 0)
          out += s.ops[i].count;
    sched_free(&s);
  }
  return out;
}

static void test_host_traffic(void) {
  size_t hier = host_out_elems(SCHED_ALGO_HIER, "aabb", 1000);
  size_t ring = host_out_elems(SCHED_ALGO_RING, "abab", 1000);
  EXPECT(hier == 1000, "hier 2x2 all-reduce: host 0 sends %zu of 1000", hier);
  EXPECT(ring == 1500, "ring 2x2 all-reduce: host 0 sends %zu of 1000", ring);
  size_t hier3 = host_out_elems(SCHED_ALGO_HIER, "abaa", 999);
  /* 3 + 1: host 0 sends the partial sum of rank 1's piece and its own three
   * pieces: every element once. */
  EXPECT(hier3 == 999, "hier 3+1: host 0 sends %zu of 999", hier3);
  /* Cost model: across slow links hier wins at large sizes. */
  sched_links_t l = {2, 2, 4, 5, 50, 1.25};
  EXPECT(sched_pick_links(SCHED_ALL_REDUCE, 4, 64 << 20, &l) == SCHED_ALGO_HIER,
         "2 x 2 hosts, 64 MiB all-reduce: picked %s",
         sched_algo_name(sched_pick_links(SCHED_ALL_REDUCE, 4, 64 << 20, &l)));
  EXPECT(sched_pick_links(SCHED_ALL_GATHER, 4, 16 << 20, &l) == SCHED_ALGO_HIER,
         "2 x 2 hosts, 16 MiB all-gather: not hier");
  /* all-to-all across hosts: flat algorithms at the network's pace, Bruck
   * for small blocks, pairwise exchange for large */
  EXPECT(sched_pick_links(SCHED_ALL_TO_ALL, 4, 8, &l) == SCHED_ALGO_BRUCK &&
             sched_pick_links(SCHED_ALL_TO_ALL, 4, 1 << 20, &l) ==
                 SCHED_ALGO_DIRECT,
         "2 x 2 hosts, all-to-all: picked %s (8 B) and %s (1 MiB)",
         sched_algo_name(sched_pick_links(SCHED_ALL_TO_ALL, 4, 8, &l)),
         sched_algo_name(sched_pick_links(SCHED_ALL_TO_ALL, 4, 1 << 20, &l)));
  sched_links_t one = {1, 4, 4, 5, 4, 5};
  EXPECT(sched_pick_links(SCHED_ALL_REDUCE, 4, 64 << 20, &one) ==
             SCHED_ALGO_RING,
         "one host: ring");
  /* A straddling algorithm is not run in a reordered layout. */
  int host[4] = {0, 1, 0, 1}, order[4] = {0, 2, 1, 3};
  sched_args_t a = {.coll = SCHED_ALL_GATHER,
                    .rank = 1,
                    .nranks = 4,
                    .count = 8,
                    .nchan = 1,
                    .chunk = 8,
                    .host_of = host,
                    .order = order};
  sched_t s;
  sched_init(&s);
  EXPECT(sched_build(SCHED_ALGO_RING, &a, &s) == SHARC_OK && s.nops > 0 &&
             s.ops[s.nops - 1].peer == 2,
         "ring all-gather in order 0 2 1 3: rank 1 receives from 2");
  sched_free(&s);
  int bad[4] = {0, 2, 2, 3};
  a.order = bad;
  sched_init(&s);
  EXPECT(sched_build(SCHED_ALGO_RING, &a, &s) == SHARC_ERR_INVALID_ARG,
         "a ring order that is not a permutation is refused");
  sched_free(&s);
}

/* fresh_sends: every all-reduce algorithm's schedule says that what it
 * sends from RECV or TMP was just written (the shm transport then copies
 * mid-size messages instead of letting the peer read them in place); no
 * other collective's does. */
static void test_fresh_sends(void) {
  static const sched_coll_t colls[] = {SCHED_ALL_GATHER, SCHED_REDUCE_SCATTER,
                                       SCHED_ALL_REDUCE, SCHED_BROADCAST,
                                       SCHED_REDUCE,     SCHED_BARRIER};
  for (int al = 0; al < SCHED_ALGO_COUNT; al++)
    for (size_t c = 0; c < sizeof colls / sizeof *colls; c++) {
      if (!sched_algo_supports((sched_algo_t)al, colls[c]))
        continue;
      sched_args_t a = {.coll = colls[c],
                        .rank = 1,
                        .nranks = 4,
                        .count = 64,
                        .nchan = 2,
                        .chunk = 16};
      sched_t s;
      sched_init(&s);
      sharc_status_t st = sched_build((sched_algo_t)al, &a, &s);
      if (st == SHARC_OK)
        EXPECT(s.fresh_sends == (colls[c] == SCHED_ALL_REDUCE),
               "%s %s: fresh_sends %d", sched_algo_name((sched_algo_t)al),
               sched_coll_name(colls[c]), s.fresh_sends);
      sched_free(&s);
    }
}

/* ---- structure ---- */

static size_t rounds_of(sched_algo_t al, sched_coll_t co, int n, int rank,
                        size_t count, int inplace) {
  sched_args_t a = {.coll = co,
                    .rank = rank,
                    .nranks = n,
                    .count = count,
                    .inplace = inplace,
                    .nchan = 1,
                    .chunk = count};
  sched_t s;
  sched_init(&s);
  sharc_status_t st = sched_build(al, &a, &s);
  size_t k = st == SHARC_OK ? s.nrounds : (size_t)-1;
  sched_free(&s);
  return k;
}

static void test_structure(void) {
  for (int n = 1; n <= 16; n++) {
    EXPECT(rounds_of(SCHED_ALGO_RING, SCHED_ALL_GATHER, n, n / 2, 10, 1) ==
               (size_t)(n - 1),
           "ring all-gather on %d ranks: n-1 rounds", n);
    EXPECT(rounds_of(SCHED_ALGO_RING, SCHED_ALL_REDUCE, n, 0, 100, 0) ==
               (n == 1 ? 1 : (size_t)(2 * (n - 1))),
           "ring all-reduce on %d ranks: 2(n-1) rounds", n);
    EXPECT(rounds_of(SCHED_ALGO_TREE, SCHED_BARRIER, n, n - 1, 0, 0) ==
               (size_t)log2_ceil(n),
           "dissemination barrier on %d ranks", n);
    EXPECT(rounds_of(SCHED_ALGO_RING, SCHED_ALL_REDUCE, n, 0, 0, 0) == 0,
           "count 0 gives an empty schedule");
  }
  /* double binary tree: every rank reduces (is internal) in at most one of
   * the two trees, which run on channels 0 and 1 */
  for (int n = 2; n <= 64; n++) {
    int both = 0, used1 = 0;
    for (int r = 0; r < n; r++) {
      sched_args_t a = {.coll = SCHED_ALL_REDUCE,
                        .rank = r,
                        .nranks = n,
                        .count = 1000,
                        .nchan = 2,
                        .chunk = 100};
      sched_t s;
      sched_init(&s);
      int red[2] = {0, 0};
      if (sched_build(SCHED_ALGO_DBTREE, &a, &s) == SHARC_OK)
        for (size_t i = 0; i < s.nops; i++) {
          if (s.ops[i].kind == SCHED_RECV_REDUCE)
            red[s.ops[i].chan & 1] = 1;
          used1 |= s.ops[i].chan == 1;
        }
      both += red[0] && red[1];
      sched_free(&s);
    }
    EXPECT(both == 0 && used1,
           "dbtree on %d ranks: %d ranks internal in both "
           "trees, channel 1 used %d",
           n, both, used1);
  }
  /* Bruck all-to-all: ceil(log2 n) rounds (in place one more, the copy to
   * scratch); a transfer per run of positions, not per block moved: at most
   * n-1 runs and a wrap of SEND's rotation per round; scratch of at most two
   * areas of n-1 blocks */
  for (int n = 2; n <= 64; n++)
    for (int ip = 0; ip < 2; ip++) {
      int L = log2_ceil(n), sends = 0, rounds_ok = 1;
      size_t tmp = 0;
      for (int r = 0; r < n; r++) {
        sched_args_t a = {.coll = SCHED_ALL_TO_ALL,
                          .rank = r,
                          .nranks = n,
                          .count = 3,
                          .inplace = ip,
                          .nchan = 1,
                          .chunk = 3};
        sched_t s;
        sched_init(&s);
        int k = 0;
        if (sched_build(SCHED_ALGO_BRUCK, &a, &s) == SHARC_OK) {
          for (size_t i = 0; i < s.nops; i++)
            k += s.ops[i].kind == SCHED_SEND;
          rounds_ok &= s.nrounds == (size_t)(L + ip);
          tmp = s.tmp_count > tmp ? s.tmp_count : tmp;
        } else {
          rounds_ok = 0;
        }
        sends = k > sends ? k : sends;
        sched_free(&s);
      }
      EXPECT(rounds_ok,
             "bruck all_to_all on %d ranks (inplace %d): not %d rounds", n, ip,
             L + ip);
      EXPECT(sends <= n - 1 + L,
             "bruck all_to_all on %d ranks (inplace %d): %d sends, want at "
             "most %d",
             n, ip, sends, n - 1 + L);
      EXPECT(tmp <= (size_t)(2 * (n - 1) * 3),
             "bruck all_to_all on %d ranks: %zu elements of scratch", n, tmp);
    }
  /* unsupported and invalid arguments */
  sched_args_t a = {.coll = SCHED_BROADCAST,
                    .rank = 0,
                    .nranks = 4,
                    .count = 10,
                    .nchan = 1,
                    .chunk = 4};
  sched_t s;
  sched_init(&s);
  EXPECT(sched_build(SCHED_ALGO_DBTREE, &a, &s) == SHARC_ERR_UNSUPPORTED,
         "dbtree broadcast is unsupported");
  a.root = 4;
  EXPECT(sched_build(SCHED_ALGO_RING, &a, &s) == SHARC_ERR_INVALID_ARG,
         "root out of range is rejected");
  a.root = 0;
  a.nchan = 0;
  EXPECT(sched_build(SCHED_ALGO_RING, &a, &s) == SHARC_ERR_INVALID_ARG,
         "nchan 0 is rejected");
  sched_free(&s);
  EXPECT(sched_algo_supports(SCHED_ALGO_RABENSEIFNER, SCHED_ALL_REDUCE) &&
             !sched_algo_supports(SCHED_ALGO_RABENSEIFNER, SCHED_ALL_GATHER),
         "rabenseifner is all-reduce only");
  EXPECT(!strcmp(sched_algo_name(SCHED_ALGO_DBTREE), "dbtree") &&
             !strcmp(sched_coll_name(SCHED_REDUCE_SCATTER), "reduce_scatter"),
         "names");
  /* builder: empty rounds dropped, zero-count ops dropped */
  sched_init(&s);
  sched_round(&s);
  sched_round(&s);
  sched_send(&s, 1, 0, SCHED_BUF_SEND, 0, 0);
  sched_copy(&s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, 3);
  sched_round(&s);
  EXPECT(sched_finish(&s) == SHARC_OK && s.nrounds == 1 && s.nops == 1 &&
             s.round_start[0] == 0 && s.round_start[1] == 1,
         "builder drops empty rounds and zero-count ops (%zu rounds, %zu ops)",
         s.nrounds, s.nops);
  sched_free(&s);
}

/* ---- the simulator rejects broken schedules ---- */

static sharc_status_t run_given(sched_coll_t coll, int n, size_t count,
                                sched_t *s) {
  sched_args_t a = {
      .coll = coll, .nranks = n, .count = count, .nchan = 1, .chunk = count};
  for (int r = 0; r < n; r++) {
    s[r].nchan = 1;
    sched_finish(&s[r]);
  }
  sharc_status_t st =
      sched_simulate_given("hand", &a, s, SHARC_I32, SHARC_SUM, 1);
  for (int r = 0; r < n; r++)
    sched_free(&s[r]);
  return st;
}

static void test_negative(void) {
  sched_t s[3];
  /* a correct hand-made 2-rank all-gather, to show the harness works */
  for (int r = 0; r < 2; r++) {
    sched_init(&s[r]);
    sched_copy(&s[r], SCHED_BUF_SEND, 0, SCHED_BUF_RECV, (size_t)r * 4, 4);
    sched_send(&s[r], 1 - r, 0, SCHED_BUF_SEND, 0, 4);
    sched_recv(&s[r], 1 - r, 0, SCHED_BUF_RECV, (size_t)(1 - r) * 4, 4);
  }
  EXPECT(run_given(SCHED_ALL_GATHER, 2, 4, s) == SHARC_OK,
         "hand-made all-gather passes: %s", err_last());
  /* FIFO size mismatch */
  for (int r = 0; r < 2; r++) {
    sched_init(&s[r]);
    sched_copy(&s[r], SCHED_BUF_SEND, 0, SCHED_BUF_RECV, (size_t)r * 4, 4);
    sched_send(&s[r], 1 - r, 0, SCHED_BUF_SEND, 0, r ? 4 : 3);
    sched_recv(&s[r], 1 - r, 0, SCHED_BUF_RECV, (size_t)(1 - r) * 4, 4);
  }
  EXPECT(run_given(SCHED_ALL_GATHER, 2, 4, s) == SHARC_ERR_MISMATCH &&
             strstr(err_last(), "mismatch"),
         "count mismatch rejected: %s", err_last());
  /* deadlock: both receive before they send (zero buffering) */
  for (int r = 0; r < 2; r++) {
    sched_init(&s[r]);
    sched_copy(&s[r], SCHED_BUF_SEND, 0, SCHED_BUF_RECV, (size_t)r * 4, 4);
    sched_recv(&s[r], 1 - r, 0, SCHED_BUF_RECV, (size_t)(1 - r) * 4, 4);
    sched_round(&s[r]);
    sched_send(&s[r], 1 - r, 0, SCHED_BUF_SEND, 0, 4);
  }
  EXPECT(run_given(SCHED_ALL_GATHER, 2, 4, s) != SHARC_OK &&
             strstr(err_last(), "deadlock") && strstr(err_last(), "rank 1"),
         "deadlock rejected: %s", err_last());
  /* deadlock from crossed order within a round on one FIFO is fine only if
   * both sides agree: sends 2 then 2 vs receives 2 then 2 from other
   * offsets still works; swapped sizes are a mismatch */
  for (int r = 0; r < 2; r++) {
    sched_init(&s[r]);
    sched_copy(&s[r], SCHED_BUF_SEND, 0, SCHED_BUF_RECV, (size_t)r * 4, 4);
    sched_send(&s[r], 1 - r, 0, SCHED_BUF_SEND, 0, r ? 1 : 3);
    sched_send(&s[r], 1 - r, 0, SCHED_BUF_SEND, r ? 1 : 3, r ? 3 : 1);
    sched_recv(&s[r], 1 - r, 0, SCHED_BUF_RECV, (size_t)(1 - r) * 4, 3);
    sched_recv(&s[r], 1 - r, 0, SCHED_BUF_RECV, (size_t)(1 - r) * 4 + 3, 1);
  }
  EXPECT(run_given(SCHED_ALL_GATHER, 2, 4, s) == SHARC_ERR_MISMATCH,
         "order mismatch on one FIFO rejected: %s", err_last());
  /* hazard: a round sends RECV while reducing into it */
  for (int r = 0; r < 2; r++) {
    sched_init(&s[r]);
    sched_send(&s[r], 1 - r, 0, SCHED_BUF_RECV, 0, 4);
    sched_recv_reduce(&s[r], 1 - r, 0, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, 4);
  }
  EXPECT(run_given(SCHED_ALL_REDUCE, 2, 4, s) != SHARC_OK &&
             strstr(err_last(), "hazard"),
         "hazard rejected: %s", err_last());
  /* wrong result: the local copy is missing */
  for (int r = 0; r < 2; r++) {
    sched_init(&s[r]);
    sched_send(&s[r], 1 - r, 0, SCHED_BUF_SEND, 0, 4);
    sched_recv(&s[r], 1 - r, 0, SCHED_BUF_RECV, (size_t)(1 - r) * 4, 4);
  }
  EXPECT(run_given(SCHED_ALL_GATHER, 2, 4, s) != SHARC_OK &&
             strstr(err_last(), "wrong result on rank 0 index 0"),
         "wrong result rejected: %s", err_last());
  /* writing SEND, and out-of-bounds TMP */
  sched_init(&s[0]);
  sched_copy(&s[0], SCHED_BUF_RECV, 0, SCHED_BUF_SEND, 0, 4);
  EXPECT(run_given(SCHED_ALL_REDUCE, 1, 4, s) != SHARC_OK &&
             strstr(err_last(), "writes SEND"),
         "write to SEND rejected: %s", err_last());
  sched_init(&s[0]);
  sched_copy(&s[0], SCHED_BUF_SEND, 0, SCHED_BUF_TMP, 0, 4);
  s[0].tmp_count = 3;
  sched_copy(&s[0], SCHED_BUF_TMP, 0, SCHED_BUF_RECV, 0, 4);
  EXPECT(run_given(SCHED_ALL_REDUCE, 1, 4, s) != SHARC_OK &&
             strstr(err_last(), "TMP"),
         "TMP overrun rejected: %s", err_last());
  /* broadcast: a non-root rank reading SEND */
  for (int r = 0; r < 2; r++)
    sched_init(&s[r]);
  sched_copy(&s[0], SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, 4);
  sched_send(&s[0], 1, 0, SCHED_BUF_SEND, 0, 4);
  sched_recv(&s[1], 0, 0, SCHED_BUF_RECV, 0, 4);
  sched_send(&s[1], 0, 0, SCHED_BUF_SEND, 0, 4);
  sched_recv(&s[0], 1, 0, SCHED_BUF_TMP, 0, 4);
  s[0].tmp_count = 4;
  EXPECT(run_given(SCHED_BROADCAST, 2, 4, s) != SHARC_OK &&
             strstr(err_last(), "only the root owns"),
         "non-root SEND read rejected: %s", err_last());
  /* barrier: rank 2 leaves without hearing from anyone */
  for (int r = 0; r < 3; r++) {
    sched_init(&s[r]);
    s[r].tmp_count = 2;
  }
  sched_send(&s[0], 1, 0, SCHED_BUF_TMP, 0, 1);
  sched_recv(&s[1], 0, 0, SCHED_BUF_TMP, 1, 1);
  sched_send(&s[1], 0, 0, SCHED_BUF_TMP, 0, 1);
  sched_recv(&s[0], 1, 0, SCHED_BUF_TMP, 1, 1);
  sched_send(&s[2], 0, 0, SCHED_BUF_TMP, 0, 1);
  sched_recv(&s[0], 2, 0, SCHED_BUF_TMP, 1, 1);
  EXPECT(run_given(SCHED_BARRIER, 3, 0, s) != SHARC_OK &&
             strstr(err_last(), "barrier"),
         "incomplete barrier rejected: %s", err_last());
}

/* ---- cost model ---- */

static void test_pick(void) {
  const double alpha = 4, beta = 5;
  static const int ranks[] = {2, 3, 4, 5, 8, 13, 16, 32, 64};
  for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
    int n = ranks[i];
    FOR_DATA_COLLS(co) {
      sched_algo_t big =
          sched_pick((sched_coll_t)co, n, (size_t)1 << 30, alpha, beta);
      sched_algo_t small = sched_pick((sched_coll_t)co, n, 8, alpha, beta);
      if (co == SCHED_GATHER || co == SCHED_SCATTER) { /* one algorithm */
        EXPECT(big == SCHED_ALGO_DIRECT && small == SCHED_ALGO_DIRECT,
               "%s picked %s and %s", sched_coll_name((sched_coll_t)co),
               sched_algo_name(big), sched_algo_name(small));
        continue;
      }
      if (co == SCHED_ALL_TO_ALL) {
        /* Bruck's log2 rounds for small blocks from 4 ranks on (on 2 and 3
         * it has as many rounds as pairwise exchange and moves more) */
        sched_algo_t want = n >= 4 ? SCHED_ALGO_BRUCK : SCHED_ALGO_DIRECT;
        EXPECT(big == SCHED_ALGO_DIRECT && small == want,
               "all_to_all on %d ranks: picked %s (1 GiB) and %s (8 bytes)", n,
               sched_algo_name(big), sched_algo_name(small));
        /* the crossover lies between 1 KiB and 64 KiB blocks */
        EXPECT(n < 4 || (sched_pick(SCHED_ALL_TO_ALL, n, 1024, alpha, beta) ==
                             SCHED_ALGO_BRUCK &&
                         sched_pick(SCHED_ALL_TO_ALL, n, 65536, alpha, beta) ==
                             SCHED_ALGO_DIRECT),
               "all_to_all on %d ranks: crossover outside 1..64 KiB", n);
        continue;
      }
      /* a broadcast on 2 ranks is one hop whatever the algorithm: the
       * direct one sends it in one round, without the chain's rounds */
      sched_algo_t want_big =
          co == SCHED_BROADCAST && n == 2 ? SCHED_ALGO_DIRECT : SCHED_ALGO_RING;
      EXPECT(big == want_big, "%s on %d ranks, 1 GiB: picked %s",
             sched_coll_name((sched_coll_t)co), n, sched_algo_name(big));
      /* broadcast: small messages go straight from the root (no rank
       * waits on a forwarding rank; on 2 ranks the chain is the same
       * single send) */
      EXPECT(co != SCHED_BROADCAST || small == SCHED_ALGO_DIRECT ||
                 (n == 2 && small == SCHED_ALGO_RING),
             "broadcast on %d ranks, 8 bytes: picked %s", n,
             sched_algo_name(small));
      /* on few ranks a ring has no more steps than a tree */
      EXPECT(n < 8 || small != SCHED_ALGO_RING,
             "%s on %d ranks, 8 bytes: picked %s",
             sched_coll_name((sched_coll_t)co), n, sched_algo_name(small));
    }
    /* barrier: dissemination's log2 n hops, except where fan-in and
     * fan-out through rank 0 (two hops, n-1 sends each way) cost less:
     * from 5 to 24 ranks (of those sampled: 5, 8, 13, 16) */
    sched_algo_t want_bar =
        n == 5 || (n >= 8 && n <= 16) ? SCHED_ALGO_DIRECT : SCHED_ALGO_TREE;
    EXPECT(sched_pick(SCHED_BARRIER, n, 0, alpha, beta) == want_bar,
           "barrier on %d ranks picks %s", n,
           sched_algo_name(sched_pick(SCHED_BARRIER, n, 0, alpha, beta)));
    /* costs grow with size and are finite where supported */
    for (int al = 0; al < SCHED_ALGO_COUNT; al++)
      for (int co = 0; co < SCHED_COLL_COUNT; co++) {
        double c1 = sched_cost_us((sched_algo_t)al, (sched_coll_t)co, n, 1024,
                                  alpha, beta);
        double c2 = sched_cost_us((sched_algo_t)al, (sched_coll_t)co, n,
                                  1 << 24, alpha, beta);
        if (sched_algo_supports((sched_algo_t)al, (sched_coll_t)co))
          EXPECT(isfinite(c1) && c1 > 0 && c2 >= c1, "%s %s cost %g %g",
                 sched_algo_name((sched_algo_t)al),
                 sched_coll_name((sched_coll_t)co), c1, c2);
        else
          EXPECT(isinf(c1), "unsupported costs infinity");
      }
  }
  EXPECT(sched_cost_us(SCHED_ALGO_RING, SCHED_ALL_REDUCE, 1, 1 << 20, alpha,
                       beta) == 0,
         "one rank costs nothing");
}

/* ---- schedule cache ---- */

static sched_key_t cache_key(size_t count) {
  sched_key_t k = {.coll = SCHED_ALL_REDUCE,
                   .root = 0,
                   .inplace = 0,
                   .count = count,
                   .esize = 4};
  return k;
}

/* Builds a tree all-reduce of count elements on rank 1 of 4. */
static void cache_build(size_t count, sched_t *s) {
  sched_args_t a = {.coll = SCHED_ALL_REDUCE,
                    .rank = 1,
                    .nranks = 4,
                    .count = count,
                    .nchan = 1,
                    .chunk = 16};
  sched_init(s);
  sharc_status_t st = sched_build(SCHED_ALGO_TREE, &a, s);
  EXPECT(st == SHARC_OK, "cache build: %s", err_last());
}

static void test_cache(void) {
  sched_cache_t c;
  memset(&c, 0, sizeof c);
  sched_key_t k1 = cache_key(1);
  EXPECT(!sched_cache_get(&c, &k1), "an empty cache misses");
  sched_t s;
  cache_build(1, &s);
  size_t nops = s.nops;
  const sched_cache_slot_t *e = sched_cache_put(&c, &k1, SCHED_ALGO_TREE, &s);
  EXPECT(s.ops == NULL && s.nops == 0, "put takes the schedule's memory");
  EXPECT(e && e->sched.nops == nops && e->algo == SCHED_ALGO_TREE,
         "put returns the stored schedule");
  EXPECT(sched_cache_get(&c, &k1) == e, "the same key hits its slot");
  /* every field of the key tells shapes apart */
  sched_key_t other[5];
  for (int i = 0; i < 5; i++)
    other[i] = k1;
  other[0].coll = SCHED_BROADCAST;
  other[1].root = 1;
  other[2].inplace = 1;
  other[3].count = 2;
  other[4].esize = 8;
  for (int i = 0; i < 5; i++)
    EXPECT(!sched_cache_get(&c, &other[i]), "key field %d is ignored", i);
  /* send/recv batches: keyed by their transfers, each field counting */
  sched_key_t p = {.coll = SCHED_P2P, .count = 12, .esize = 1, .np2p = 2};
  p.p2p[0] = (sched_p2p_t){1, 2, 8};
  p.p2p[1] = (sched_p2p_t){0, 0, 4};
  sched_t ps;
  sched_init(&ps);
  EXPECT(sched_p2p_build(p.p2p, 2, 1, 2, 262144, &ps) == SHARC_OK,
         "p2p build: %s", err_last());
  const sched_cache_slot_t *pe =
      sched_cache_put(&c, &p, SCHED_ALGO_DIRECT, &ps);
  sched_key_t same = p;
  EXPECT(sched_cache_get(&c, &same) == pe, "the same batch hits");
  sched_key_t q[5];
  for (int i = 0; i < 5; i++)
    q[i] = p;
  q[0].np2p = 1;
  q[1].p2p[1].send = 1;
  q[2].p2p[0].peer = 3;
  q[3].p2p[1].bytes = 5;
  q[4].coll = SCHED_ALL_TO_ALL;
  for (int i = 0; i < 5; i++)
    EXPECT(!sched_cache_get(&c, &q[i]), "batch key change %d is ignored", i);
  EXPECT(sched_cache_get(&c, &k1) == e, "the collective's slot stays");
  /* the memo of the last call's arguments: hits its slot, counted as a
   * hit, until any slot is refilled; other arguments miss */
  float b1[4], b2[4];
  sched_call_sig_t sig = {SCHED_ALL_REDUCE, SHARC_F32, 0, 1, b1, b2};
  EXPECT(!sched_cache_get_sig(&c, &sig), "no memo before one is made");
  sched_cache_memo(&c, &sig, e);
  uint64_t hits = c.hits;
  EXPECT(sched_cache_get_sig(&c, &sig) == e && c.hits == hits + 1,
         "the memo hits the slot and counts the hit");
  sched_call_sig_t osig[6];
  for (int i = 0; i < 6; i++)
    osig[i] = sig;
  osig[0].coll = SCHED_BROADCAST;
  osig[1].dtype = SHARC_F64;
  osig[2].root = 1;
  osig[3].count = 2;
  osig[4].sendbuf = b2;
  osig[5].recvbuf = b1;
  for (int i = 0; i < 6; i++)
    EXPECT(!sched_cache_get_sig(&c, &osig[i]), "memo field %d is ignored", i);
  EXPECT(sched_cache_get_sig(&c, &sig) == e, "the memo stays after misses");
  /* least recently used goes first: fill the cache with counts 1..SLOTS,
   * touch count 1, insert one more: count 2 is evicted, count 1 stays */
  for (size_t n = 2; n <= SCHED_CACHE_SLOTS; n++) {
    sched_key_t k = cache_key(n);
    cache_build(n, &s);
    sched_cache_put(&c, &k, SCHED_ALGO_TREE, &s);
  }
  EXPECT(sched_cache_get(&c, &k1) == e, "a full cache keeps its slots");
  EXPECT(!sched_cache_get_sig(&c, &sig), "a refilled slot ends the memo");
  sched_key_t kn = cache_key(SCHED_CACHE_SLOTS + 1);
  cache_build(SCHED_CACHE_SLOTS + 1, &s);
  sched_cache_put(&c, &kn, SCHED_ALGO_TREE, &s);
  sched_key_t k2 = cache_key(2);
  EXPECT(!sched_cache_get(&c, &k2), "the least recently used slot goes");
  EXPECT(sched_cache_get(&c, &k1) == e, "a recently used slot stays");
  const sched_cache_slot_t *en = sched_cache_get(&c, &kn);
  EXPECT(en && en->sched.ops && en->key.count == SCHED_CACHE_SLOTS + 1,
         "the new shape is cached");
  for (size_t n = 3; n <= SCHED_CACHE_SLOTS; n++) {
    sched_key_t k = cache_key(n);
    EXPECT(sched_cache_get(&c, &k), "count %zu stays cached", n);
  }
  sched_cache_free(&c);
  EXPECT(!sched_cache_get(&c, &k1), "a freed cache is empty");
  sched_cache_free(&c); /* and may be freed again */
}

/* The send/recv batch builder: transfers in posting order in one round,
 * large ones cut across channels, transfers with itself paired as copies,
 * unpaired or mismatched self transfers refused, empty ones dropped. */
static void test_p2p_build(void) {
  /* rank 1: send 10 B to 2, recv 300 KiB from 0, send 5 B to 2, recv 4 B
   * from itself, send 0 B to 3, send 4 B to itself */
  const sched_p2p_t ops[] = {{1, 2, 10}, {0, 0, 300000}, {1, 2, 5},
                             {0, 1, 4},  {1, 3, 0},      {1, 1, 4}};
  sched_t s;
  sched_init(&s);
  sharc_status_t st = sched_p2p_build(ops, 6, 1, 4, 262144, &s);
  EXPECT(st == SHARC_OK, "p2p build: %s", err_last());
  EXPECT(s.partial == 1 && s.nrounds == 1, "p2p: partial %d, %zu rounds",
         s.partial, s.nrounds);
  /* 10 B to 2; 4 pieces of the 300 KiB; 5 B to 2; the self copy */
  EXPECT(s.nops == 7, "p2p: %zu ops, want 7", s.nops);
  if (s.nops == 7) {
    const sched_op_t *o = s.ops;
    EXPECT(o[0].kind == SCHED_SEND && o[0].peer == 2 && o[0].count == 10 &&
               o[0].src_buf == SCHED_BUF_P2P + 0,
           "p2p op 0");
    size_t got = 0;
    for (int c = 0; c < 4; c++) {
      EXPECT(o[1 + c].kind == SCHED_RECV && o[1 + c].peer == 0 &&
                 o[1 + c].chan == c && o[1 + c].dst_buf == SCHED_BUF_P2P + 1 &&
                 o[1 + c].dst_off == got,
             "p2p piece %d", c);
      got += o[1 + c].count;
    }
    EXPECT(got == 300000, "p2p pieces hold %zu bytes", got);
    EXPECT(o[5].kind == SCHED_SEND && o[5].count == 5 &&
               o[5].src_buf == SCHED_BUF_P2P + 2,
           "p2p op 5: the second send to 2 after the first");
    EXPECT(o[6].kind == SCHED_COPY && o[6].src_buf == SCHED_BUF_P2P + 5 &&
               o[6].dst_buf == SCHED_BUF_P2P + 3 && o[6].count == 4,
           "p2p: self send 5 copies into self recv 3");
  }
  sched_free(&s);
  const sched_p2p_t lone[] = {{1, 0, 8}};
  sched_init(&s);
  st = sched_p2p_build(lone, 1, 0, 1, 262144, &s);
  EXPECT(st == SHARC_ERR_INVALID_ARG && strstr(err_last(), "itself"),
         "p2p: a lone send to self is refused (%s)", sharc_status_name(st));
  sched_free(&s);
  const sched_p2p_t uneven[] = {{0, 0, 8}, {1, 0, 9}};
  sched_init(&s);
  st = sched_p2p_build(uneven, 2, 0, 1, 262144, &s);
  EXPECT(st == SHARC_ERR_INVALID_ARG && strstr(err_last(), "must match"),
         "p2p: self sizes that differ are refused (%s)", sharc_status_name(st));
  sched_free(&s);
}

int main(void) {
  setenv("SHARC_DEBUG", "NONE", 0); /* negative tests set errors on purpose */
  const char *q = getenv("SHARC_TEST_QUICK");
  int quick = q && *q && *q != '0';
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  test_structure();
  test_negative();
  test_pick();
  test_cache();
  test_p2p_build();
  test_fresh_sends();
  sweep_main(quick);
  sweep_types(quick);
  sweep_large(quick);
  sweep_hosts(quick);
  test_host_traffic();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) +
                (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  printf("test_schedule: %d passed, %d failed (%.1f s)\n", npass, nfail, secs);
  return nfail ? 1 : 0;
}

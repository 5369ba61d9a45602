/*
 * test_devpipe.c - the pipelined staged path's plans (comm/gpu/devpipe.h) for
 * every algorithm x collective x rank count x in place x which buffers are
 * device memory x group sizes, checked byte by byte against the schedule:
 *
 *   - the layout puts every staged access of the schedule inside staging;
 *   - each byte of the D2H region is copied exactly once, and lands before
 *     the first round that reads or writes it;
 *   - each byte of the H2D region is copied back exactly once, and no
 *     earlier than after the last round that writes it (the last group is
 *     released only when the call ends);
 *   - groups come in round order, at most max_groups per direction, with
 *     pieces sorted and disjoint; SHARC_AVG keeps every H2D byte for the end.
 *
 * Pure logic, no CUDA: the copies themselves are path_staged.c's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "devpipe.h"
#include "dispatch.h"
#include "schedule.h"
#include "unit/expect.h"

static int quiet_fail(void) { return failed > 40; }

#define CHECK1(cond, ...)                                                      \
  do {                                                                         \
    if (cond)                                                                  \
      passed++;                                                                \
    else if (quiet_fail())                                                     \
      failed++;                                                                \
    else                                                                       \
      EXPECT(cond, __VA_ARGS__);                                               \
  } while (0)

typedef struct {
  const char *what; /* the case, for messages */
  const sched_t *s;
  const devpipe_args_t *a;
  const devpipe_t *p;
  size_t stage;
} pcase_t;

/* The staging range of an op's buffer access, or 0 when not staged. */
static int range(const devpipe_args_t *a, int buf, size_t off, size_t count,
                 size_t *lo, size_t *hi) {
  const devpipe_layout_t *l = &a->lay;
  if (buf == SCHED_BUF_SEND && l->send_staged)
    *lo = l->send_off + off * a->esize;
  else if (buf == SCHED_BUF_RECV && l->recv_staged)
    *lo = l->recv_off + off * a->esize;
  else
    return 0;
  *hi = *lo + count * a->esize;
  return 1;
}

/* owner[b]: index of the group holding byte b (-1: none); 0 if a byte is in
 * two groups or outside [off, off + bytes). */
static int owners(const pcase_t *c, const devpipe_group_t *g, size_t ng,
                  size_t off, size_t bytes, long *owner) {
  int ok = 1;
  for (size_t b = 0; b < c->stage; b++)
    owner[b] = -1;
  for (size_t k = 0; k < ng; k++) {
    size_t sum = 0, last_end = 0;
    for (size_t i = 0; i < g[k].npieces; i++) {
      const devpipe_piece_t *pc = &c->p->pieces[g[k].first + i];
      CHECK1(pc->len > 0 && (i == 0 || pc->off > last_end),
             "%s: group %zu piece %zu (%zu+%zu) empty, unsorted or touching "
             "the previous",
             c->what, k, i, pc->off, pc->len);
      last_end = pc->off + pc->len;
      sum += pc->len;
      for (size_t b = pc->off; b < pc->off + pc->len; b++) {
        if (b < off || b >= off + bytes || b >= c->stage || owner[b] != -1) {
          ok = 0;
          continue;
        }
        owner[b] = (long)k;
      }
    }
    CHECK1(sum == g[k].bytes, "%s: group %zu counts %zu bytes, holds %zu",
           c->what, k, g[k].bytes, sum);
    CHECK1(k == 0 || g[k].round >= g[k - 1].round,
           "%s: group %zu (round %zu) before group %zu (round %zu)", c->what, k,
           g[k].round, k - 1, g[k - 1].round);
  }
  for (size_t b = off; b < off + bytes && b < c->stage; b++)
    if (owner[b] == -1)
      ok = 0;
  return ok;
}

static void check_plan(const pcase_t *c) {
  const sched_t *s = c->s;
  const devpipe_args_t *a = c->a;
  const devpipe_t *p = c->p;
  const devpipe_layout_t *l = &a->lay;
  long *own_d = malloc(c->stage * sizeof *own_d);
  long *own_h = malloc(c->stage * sizeof *own_h);
  if (!own_d || !own_h) {
    EXPECT(0, "out of memory");
    free(own_d);
    free(own_h);
    return;
  }
  CHECK1(p->nd2h <= a->max_groups && p->nh2d <= a->max_groups,
         "%s: %zu D2H and %zu H2D groups, cap %zu", c->what, p->nd2h, p->nh2d,
         a->max_groups);
  CHECK1(!a->h2d_at_end || p->nh2d <= 1, "%s: SHARC_AVG with %zu H2D groups",
         c->what, p->nh2d);
  CHECK1(owners(c, p->d2h, p->nd2h, l->d2h_off, l->d2h_bytes, own_d),
         "%s: the D2H groups do not cover [%zu, +%zu) exactly once", c->what,
         l->d2h_off, l->d2h_bytes);
  CHECK1(owners(c, p->h2d, p->nh2d, l->h2d_off, l->h2d_bytes, own_h),
         "%s: the H2D groups do not cover [%zu, +%zu) exactly once", c->what,
         l->h2d_off, l->h2d_bytes);
  for (size_t r = 0; r < s->nrounds; r++) {
    for (size_t i = s->round_start[r]; i < s->round_start[r + 1]; i++) {
      const sched_op_t *op = &s->ops[i];
      size_t lo, hi;
      int rd = op->kind != SCHED_RECV, wr = op->kind != SCHED_SEND;
      for (int side = 0; side < 2; side++) {
        int is_write = side == 1;
        if ((is_write && !wr) || (!is_write && !rd))
          continue;
        int buf = is_write ? op->dst_buf : op->src_buf;
        size_t off = is_write ? op->dst_off : op->src_off;
        if (!range(a, buf, off, op->count, &lo, &hi))
          continue;
        CHECK1(hi <= c->stage,
               "%s: round %zu op %zu touches staging [%zu, %zu) beyond its "
               "%zu bytes",
               c->what, r, i, lo, hi, c->stage);
        for (size_t b = lo; b < hi && b < c->stage; b++) {
          long g = own_d[b];
          if (g >= 0 && p->d2h[g].round > r) {
            CHECK1(0, "%s: byte %zu used in round %zu lands before round %zu",
                   c->what, b, r, p->d2h[g].round);
            break;
          }
          long h = own_h[b];
          if (is_write && h >= 0 && (size_t)h + 1 < p->nh2d &&
              p->h2d[h].round < r) {
            CHECK1(0,
                   "%s: byte %zu written in round %zu released after "
                   "round %zu",
                   c->what, b, r, p->h2d[h].round);
            break;
          }
        }
      }
    }
  }
  free(own_d);
  free(own_h);
}

static const char *const coll_name[] = {"ag", "rs", "ar", "bc"};

/* One schedule (algo, coll, n, rank, count, inplace) against every device
 * placement and group setting. */
static void one(sched_algo_t algo, sched_coll_t coll, int n, int rank,
                size_t count, int inplace, int root, const int *host_of) {
  size_t esize = 4;
  sched_args_t sa = {.coll = coll,
                     .rank = rank,
                     .nranks = n,
                     .count = count,
                     .root = root,
                     .inplace = inplace,
                     .nchan = 2,
                     .chunk = 3,
                     .host_of = host_of};
  if (!sched_algo_supports(algo, coll))
    return;
  sched_t s;
  sched_init(&s);
  if (sched_build(algo, &sa, &s) != SHARC_OK) {
    EXPECT(0, "%s %s n=%d: sched_build: %s",
           sched_algo_name((sched_algo_t)algo), coll_name[coll], n, err_last());
    sched_free(&s);
    return;
  }
  static const int dev[3][2] = {{1, 1}, {1, 0}, {0, 1}};
  static const size_t mins[] = {1, 24, 1 << 30};
  static const size_t caps[] = {1, 3, 32};
  for (int d = 0; d < (inplace ? 1 : 3); d++) {
    for (int m = 0; m < 3; m++) {
      for (int k = 0; k < 3; k++) {
        for (int avg = 0; avg < 2; avg++) {
          devpipe_args_t a = {.esize = esize,
                              .min_group = mins[m],
                              .max_groups = caps[k],
                              .h2d_at_end = avg};
          devpipe_layout(coll, rank, n, root, count * esize, inplace, dev[d][0],
                         dev[d][1], &a.lay);
          char what[160];
          snprintf(what, sizeof what,
                   "%s %s n=%d rank=%d count=%zu %s dev=%d%d min=%zu cap=%zu "
                   "avg=%d",
                   sched_algo_name((sched_algo_t)algo), coll_name[coll], n,
                   rank, count, inplace ? "in-place" : "out-of-place",
                   dev[d][0], dev[d][1], mins[m], caps[k], avg);
          devpipe_t p;
          sharc_status_t st = devpipe_plan(&s, &a, &p);
          CHECK1(st == SHARC_OK, "%s: devpipe_plan: %s", what, err_last());
          if (st != SHARC_OK)
            continue;
          pcase_t c = {what, &s, &a, &p, a.lay.stage_bytes};
          check_plan(&c);
          devpipe_free(&p);
        }
      }
    }
  }
  sched_free(&s);
}

/* The layouts path_staged.c stages: in place the staging mirrors the user's
 * region; out of place [send][receive], the receive region aligned. */
static void layouts(void) {
  devpipe_layout_t l;
  devpipe_layout(SCHED_ALL_GATHER, 2, 4, 0, 100, 1, 1, 1, &l);
  EXPECT(l.stage_bytes == 400 && l.send_off == 200 && l.recv_off == 0 &&
             l.d2h_off == 200 && l.d2h_bytes == 100 && l.h2d_bytes == 400,
         "in-place all-gather: stage %zu send %zu recv %zu d2h %zu+%zu h2d "
         "%zu",
         l.stage_bytes, l.send_off, l.recv_off, l.d2h_off, l.d2h_bytes,
         l.h2d_bytes);
  devpipe_layout(SCHED_REDUCE_SCATTER, 3, 4, 0, 100, 1, 1, 1, &l);
  EXPECT(l.stage_bytes == 400 && l.send_off == 0 && l.recv_off == 300 &&
             l.d2h_bytes == 400 && l.h2d_off == 300 && l.h2d_bytes == 100,
         "in-place reduce-scatter: stage %zu recv %zu h2d %zu+%zu",
         l.stage_bytes, l.recv_off, l.h2d_off, l.h2d_bytes);
  devpipe_layout(SCHED_ALL_REDUCE, 0, 4, 0, 100, 0, 1, 1, &l);
  EXPECT(l.send_off == 0 && l.recv_off == DEVPIPE_ALIGN &&
             l.stage_bytes == DEVPIPE_ALIGN + 100,
         "out-of-place all-reduce: recv %zu stage %zu", l.recv_off,
         l.stage_bytes);
  devpipe_layout(SCHED_BROADCAST, 1, 4, 0, 100, 0, 1, 1, &l);
  EXPECT(l.no_send && !l.send_staged && l.d2h_bytes == 0 && l.recv_off == 0 &&
             l.h2d_bytes == 100,
         "broadcast off the root: no_send %d send_staged %d d2h %zu", l.no_send,
         l.send_staged, l.d2h_bytes);
  devpipe_layout(SCHED_ALL_REDUCE, 0, 4, 0, 100, 1, 0, 0, &l);
  EXPECT(l.stage_bytes == 0 && !l.send_staged && !l.recv_staged,
         "in-place host memory stages nothing (stage %zu)", l.stage_bytes);
  devpipe_layout(SCHED_ALL_GATHER, 1, 3, 0, 100, 0, 0, 1, &l);
  EXPECT(!l.send_staged && l.recv_staged && l.recv_off == 0 &&
             l.stage_bytes == 300 && l.d2h_bytes == 0,
         "host sendbuf, device recvbuf: recv %zu stage %zu d2h %zu", l.recv_off,
         l.stage_bytes, l.d2h_bytes);
}

/* A ring all-reduce in 1 MiB groups overlaps: several groups each way, the
 * first D2H group needed in round 0, H2D groups released before the end. */
static void overlaps(void) {
  int n = 4;
  size_t count = 4 << 20, esize = 4; /* 16 MiB */
  sched_args_t sa = {.coll = SCHED_ALL_REDUCE,
                     .rank = 1,
                     .nranks = n,
                     .count = count,
                     .nchan = 2,
                     .chunk = 16384};
  sched_t s;
  sched_init(&s);
  EXPECT(sched_build(SCHED_ALGO_RING, &sa, &s) == SHARC_OK, "ring: %s",
         err_last());
  devpipe_args_t a = {.esize = esize, .min_group = 1 << 20, .max_groups = 32};
  devpipe_layout(SCHED_ALL_REDUCE, 1, n, 0, count * esize, 0, 1, 1, &a.lay);
  devpipe_t p;
  EXPECT(devpipe_plan(&s, &a, &p) == SHARC_OK, "plan: %s", err_last());
  EXPECT(p.nd2h >= 2 && p.nh2d >= 2 && p.d2h[0].round == 0 &&
             p.h2d[0].round + 1 < s.nrounds,
         "ring all-reduce of 16 MiB on 4 ranks: %zu D2H groups (first for "
         "round %zu), %zu H2D groups (first after round %zu of %zu)",
         p.nd2h, p.nd2h ? p.d2h[0].round : 0, p.nh2d,
         p.nh2d ? p.h2d[0].round : 0, s.nrounds);
  printf("ring all-reduce, 16 MiB, 4 ranks, 1 MiB groups: %zu D2H groups, "
         "%zu H2D groups over %zu rounds\n",
         p.nd2h, p.nh2d, s.nrounds);
  devpipe_free(&p);
  sched_free(&s);
}

/* The shapes the library plans in practice: 65537 elements per block (odd
 * on purpose), the executor's channels and tree chunk (64 KiB), 64 KiB
 * groups, every algorithm on 2, 3, 4 and 8 ranks, the first and last rank. */
static void production(const int *hosts) {
  static const int ns[] = {2, 3, 4, 8};
  size_t esize = 4, count = 65537;
  for (int algo = 0; algo < SCHED_ALGO_COUNT; algo++)
    for (int coll = 0; coll < SCHED_BARRIER; coll++)
      for (int k = 0; k < 4; k++)
        for (int end = 0; end < 2; end++)
          for (int inplace = 0; inplace < 2; inplace++) {
            int n = ns[k], rank = end ? n - 1 : 0;
            if (!sched_algo_supports((sched_algo_t)algo, (sched_coll_t)coll))
              continue;
            sched_args_t sa = {.coll = (sched_coll_t)coll,
                               .rank = rank,
                               .nranks = n,
                               .count = count,
                               .root = coll == SCHED_BROADCAST ? n / 2 : 0,
                               .inplace = inplace,
                               .nchan = 2,
                               .chunk = 65536 / esize,
                               .host_of =
                                   algo == SCHED_ALGO_HIER ? hosts : NULL};
            sched_t s;
            sched_init(&s);
            EXPECT(sched_build((sched_algo_t)algo, &sa, &s) == SHARC_OK,
                   "%s %s n=%d: %s", sched_algo_name((sched_algo_t)algo),
                   coll_name[coll], n, err_last());
            devpipe_args_t a = {
                .esize = esize, .min_group = 65536, .max_groups = 32};
            devpipe_layout((sched_coll_t)coll, rank, n, sa.root, count * esize,
                           inplace, 1, 1, &a.lay);
            char what[128];
            snprintf(what, sizeof what, "production %s %s n=%d rank=%d %s",
                     sched_algo_name((sched_algo_t)algo), coll_name[coll], n,
                     rank, inplace ? "in-place" : "out-of-place");
            devpipe_t p;
            if (devpipe_plan(&s, &a, &p) == SHARC_OK) {
              pcase_t c = {what, &s, &a, &p, a.lay.stage_bytes};
              check_plan(&c);
              devpipe_free(&p);
            } else {
              EXPECT(0, "%s: devpipe_plan: %s", what, err_last());
            }
            sched_free(&s);
          }
}

int main(void) {
  layouts();
  overlaps();
  static const int hosts[9] = {0, 0, 1, 1, 0, 1, 2, 2, 2};
  static const size_t counts[] = {1, 5, 37};
  for (int algo = 0; algo < SCHED_ALGO_COUNT; algo++)
    for (int coll = 0; coll < SCHED_BARRIER; coll++)
      for (int n = 1; n <= 9; n++)
        for (int rank = 0; rank < n; rank++)
          for (int ci = 0; ci < 3; ci++)
            for (int inplace = 0; inplace < 2; inplace++)
              one((sched_algo_t)algo, (sched_coll_t)coll, n, rank, counts[ci],
                  inplace, coll == SCHED_BROADCAST ? (n - 1) / 2 : 0,
                  algo == SCHED_ALGO_HIER ? hosts : NULL);
  production(hosts);
  printf("test_devpipe: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

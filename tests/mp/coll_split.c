/*
 * coll_split.c - coll_check's test of sharc_comm_split: color rank % 2 with
 * key -rank gives the parity groups in reverse rank order; the last rank
 * passing SHARC_SPLIT_NOCOLOR gets NULL while the others form a communicator
 * in rank order. An all-reduce on each new communicator sums its members.
 * Then sharc_comm_abort on a duplicate while peers wait on it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "coll_check.h"

static struct {
  sharc_comm_t comm;
  int rank, n;
} S;

/* All-reduce (i64 sum, 1000 elements) of rank*1000 + i on sub; checks the
 * sum over the members `in` of the parent. */
static void sub_all_reduce(sharc_comm_t sub, int (*in)(int q),
                           const char *what) {
  enum { CNT = 1000 };
  int64_t *buf = malloc(CNT * sizeof *buf), want0 = 0;
  if (!buf)
    return;
  for (int i = 0; i < CNT; i++)
    buf[i] = (int64_t)S.rank * 1000 + i;
  sharc_status_t st =
      sharc_all_reduce(buf, buf, CNT, SHARC_I64, SHARC_SUM, sub, NULL);
  cc_check_st(st, sub, what);
  int members = 0;
  for (int q = 0; q < S.n; q++)
    if (in(q))
      want0 += (int64_t)q * 1000, members++;
  int bad = 0;
  for (int i = 0; i < CNT && st == SHARC_OK; i++)
    if (buf[i] != want0 + (int64_t)members * i && bad++ == 0)
      cc_check(0, what, (long)(want0 + (int64_t)members * i), (long)buf[i]);
  if (st == SHARC_OK && !bad)
    cc_check(1, what, 0, 0);
  free(buf);
}

static int same_parity(int q) { return q % 2 == S.rank % 2; }
static int not_last(int q) { return q != S.n - 1; }
static int everyone(int q) { return q >= 0; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* sharc_comm_abort: rank 0 aborts a duplicate of the communicator while the
 * others wait in an all-reduce on it. Its abort must return promptly, the
 * others must fail promptly (ABORTED, or PEER_LOST once rank 0's resources
 * are gone) instead of waiting for SHARC_TIMEOUT, and the parent
 * communicator must keep working. */
static void abort_check(void) {
  sharc_comm_t dup = NULL;
  sharc_status_t st = sharc_comm_split(S.comm, 0, S.rank, &dup);
  cc_check_st(st, S.comm, "abort: sharc_comm_split (duplicate)");
  if (st != SHARC_OK || !dup)
    return;
  sub_all_reduce(dup, everyone, "abort: all_reduce before the abort");
  double t0 = now_s();
  if (S.rank == 0) {
    usleep(200000);
    cc_check_st(sharc_comm_abort(dup), S.comm, "abort: sharc_comm_abort");
    double dt = now_s() - t0;
    cc_check(dt < 5.2, "abort: sharc_comm_abort returned within 5 s (ms)", 5000,
             (long)(dt * 1000));
  } else {
    int64_t x = 1, y = 0;
    st = sharc_all_reduce(&x, &y, 1, SHARC_I64, SHARC_SUM, dup, NULL);
    double dt = now_s() - t0;
    cc_check(st == SHARC_ERR_ABORTED || st == SHARC_ERR_PEER_LOST,
             "abort: a peer's all_reduce fails with ABORTED or PEER_LOST",
             SHARC_ERR_ABORTED, st);
    cc_check(dt < 10, "abort: peers fail within 10 s (ms)", 10000,
             (long)(dt * 1000));
    sharc_comm_destroy(dup);
  }
  int64_t one = 1, n = 0;
  st = sharc_all_reduce(&one, &n, 1, SHARC_I64, SHARC_SUM, S.comm, NULL);
  cc_check_st(st, S.comm, "abort: parent all_reduce after the abort");
  cc_check(st != SHARC_OK || n == S.n, "abort: parent all_reduce result", S.n,
           (long)n);
}

static int split_groups(void) {
  sharc_comm_t sub = NULL;
  int size = -1, rank = -1, want_size = 0, want_rank = 0;
  sharc_status_t st = sharc_comm_split(S.comm, S.rank % 2, -S.rank, &sub);
  cc_check_st(st, S.comm, "sharc_comm_split(color rank%2, key -rank)");
  if (st != SHARC_OK) {
    return -1;
  }
  for (int q = 0; q < S.n; q++)
    if (same_parity(q))
      want_size++, want_rank += q > S.rank; /* key -rank: reversed */
  cc_check(sub != NULL, "split: communicator returned", 1, sub != NULL);
  if (sub) {
    cc_check_st(sharc_comm_size(sub, &size), sub, "split: sharc_comm_size");
    cc_check_st(sharc_comm_rank(sub, &rank), sub, "split: sharc_comm_rank");
    cc_check(size == want_size, "split: size of the parity group", want_size,
             size);
    cc_check(rank == want_rank, "split: rank ordered by key -rank", want_rank,
             rank);
    sub_all_reduce(sub, same_parity, "split: all_reduce on the parity group");
    cc_check_st(sharc_comm_destroy(sub), sub, "split: sharc_comm_destroy");
  }
  sub = NULL;
  int color = S.rank == S.n - 1 ? SHARC_SPLIT_NOCOLOR : 0;
  st = sharc_comm_split(S.comm, color, S.rank, &sub);
  cc_check_st(st, S.comm, "sharc_comm_split(last rank SHARC_SPLIT_NOCOLOR)");
  if (st != SHARC_OK) {
    return -1;
  }
  if (color == SHARC_SPLIT_NOCOLOR) {
    cc_check(sub == NULL, "split: SHARC_SPLIT_NOCOLOR gives NULL", 0,
             sub != NULL);
    sharc_comm_destroy(sub);
    return 0;
  }
  cc_check(sub != NULL, "split: communicator returned", 1, sub != NULL);
  if (!sub)
    return 0;
  cc_check_st(sharc_comm_size(sub, &size), sub, "split: sharc_comm_size");
  cc_check_st(sharc_comm_rank(sub, &rank), sub, "split: sharc_comm_rank");
  cc_check(size == S.n - 1, "split: size without the last rank", S.n - 1, size);
  cc_check(rank == S.rank, "split: rank ordered by key rank", S.rank, rank);
  sub_all_reduce(sub, not_last, "split: all_reduce without the last rank");
  cc_check_st(sharc_comm_destroy(sub), sub, "split: sharc_comm_destroy");
  return 0;
}

int split_check(sharc_comm_t comm, int myrank, int nranks) {
  S.comm = comm, S.rank = myrank, S.n = nranks;
  int rc = split_groups();
  if (rc == 0)
    abort_check();
  return rc;
}

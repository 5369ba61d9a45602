/*
 * bad_args.c - every bad argument to the public API returns
 * SHARC_ERR_INVALID_ARG at once, with a message (sharc_comm_last_error) that
 * names the problem, and leaves the communicator usable.
 *
 *   sharcrun -n N bad_args
 *
 * Covers NULL buffers with count > 0, counts whose byte size overflows
 * size_t, unknown dtypes and ops, roots outside the communicator,
 * a NULL communicator, NULL output pointers, sharc_comm_init_rank with bad
 * arguments or a garbage unique id; plus the status/dtype/op name tables.
 * Every rank makes the same bad calls, so none of them may communicate.
 * Prints "bad_args: N passed, M failed" (this rank's checks) and exits 1 on
 * any failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sharc.h"

static int pass, fail, rank;
static sharc_comm_t comm;

static void ok(int cond, const char *what, const char *detail) {
  if (cond) {
    pass++;
    return;
  }
  fail++;
  printf("bad_args FAIL: %s%s%s\n", what, detail ? ": " : "",
         detail ? detail : "");
}

/* Does msg contain one of the '|'-separated words (case-insensitive)? */
static int names(const char *msg, const char *words) {
  char buf[128], *save = NULL;
  snprintf(buf, sizeof buf, "%s", words);
  for (char *w = strtok_r(buf, "|", &save); w; w = strtok_r(NULL, "|", &save))
    if (strcasestr(msg, w))
      return 1;
  return 0;
}

/* st must be SHARC_ERR_INVALID_ARG and the message of c (NULL: this
 * thread's) must be non-empty and mention one of words. */
static void expect_invalid(sharc_status_t st, sharc_comm_t c, const char *call,
                           const char *words) {
  const char *msg = sharc_comm_last_error(c);
  char d[640];
  if (!msg)
    msg = "(null)";
  snprintf(d, sizeof d,
           "returned %s, message '%s' (wanted SHARC_ERR_INVALID_ARG naming %s)",
           sharc_status_name(st), msg, words);
  ok(st == SHARC_ERR_INVALID_ARG && msg[0] && names(msg, words), call, d);
  if (rank == 0 && st == SHARC_ERR_INVALID_ARG)
    printf("bad_args: %s -> %s\n", call, msg);
}

static void check_names(void) {
  static const struct {
    sharc_status_t st;
    const char *name, *msg;
  } tab[] = {
#define ROW_(n, v, m) {n, #n, m},
      SHARC_STATUS_LIST(ROW_)
#undef ROW_
  };
  static const size_t sizes[SHARC_DTYPE_COUNT] = {4, 8, 2, 2, 1, 1, 4, 4, 8, 8};
  char v[32];
  for (size_t k = 0; k < sizeof tab / sizeof *tab; k++) {
    const char *n = sharc_status_name(tab[k].st),
               *s = sharc_status_string(tab[k].st);
    ok(n && !strcmp(n, tab[k].name), "sharc_status_name", tab[k].name);
    ok(s && !strcmp(s, tab[k].msg), "sharc_status_string", tab[k].msg);
  }
  const char *n = sharc_status_name((sharc_status_t)-99),
             *s = sharc_status_string((sharc_status_t)-99);
  ok(n && !strcmp(n, "SHARC_ERR_UNKNOWN"),
     "sharc_status_name(-99) is SHARC_ERR_UNKNOWN", n);
  ok(s && s[0], "sharc_status_string(-99) is a non-empty string", s);
  ok(sharc_status_name((sharc_status_t)1) &&
         !strcmp(sharc_status_name((sharc_status_t)1), "SHARC_ERR_UNKNOWN"),
     "sharc_status_name(1) is SHARC_ERR_UNKNOWN", NULL);
  for (int d = 0; d < SHARC_DTYPE_COUNT; d++) {
    ok(sharc_dtype_size((sharc_dtype_t)d) == sizes[d], "sharc_dtype_size",
       NULL);
    const char *dn = sharc_dtype_name((sharc_dtype_t)d);
    ok(dn && dn[0], "sharc_dtype_name is non-empty", NULL);
  }
  ok(sharc_dtype_size((sharc_dtype_t)99) == 0,
     "sharc_dtype_size of an unknown dtype is 0", NULL);
  ok(sharc_dtype_name((sharc_dtype_t)99) != NULL,
     "sharc_dtype_name(99) is not NULL", NULL);
  for (int o = 0; o < SHARC_OP_COUNT; o++) {
    const char *on = sharc_op_name((sharc_op_t)o);
    ok(on && on[0], "sharc_op_name is non-empty", NULL);
  }
  ok(sharc_op_name((sharc_op_t)99) != NULL, "sharc_op_name(99) is not NULL",
     NULL);
  snprintf(v, sizeof v, "%d.%d.%d", SHARC_VERSION_MAJOR, SHARC_VERSION_MINOR,
           SHARC_VERSION_PATCH);
  ok(sharc_version() && !strcmp(sharc_version(), v),
     "sharc_version matches the header", sharc_version());
}

static void check_bad_calls(int nranks) {
  float buf[64] = {0}, out[64 * 8] = {0};
  const size_t f32 = sizeof(float);
  /* sendcount * 4 * nranks overflows size_t; so does recvcount * 4 * nranks */
  size_t big_ag = SIZE_MAX / (f32 * (size_t)nranks) + 1,
         big = SIZE_MAX / f32 + 1;
  const char *nul = "NULL|null|sendbuf|recvbuf|buffer|pointer";
  const char *cnt = "count|overflow|too large|size";

  expect_invalid(
      sharc_all_reduce(NULL, out, 10, SHARC_F32, SHARC_SUM, comm, NULL), comm,
      "all_reduce(sendbuf NULL, count 10)", nul);
  expect_invalid(
      sharc_all_reduce(buf, NULL, 10, SHARC_F32, SHARC_SUM, comm, NULL), comm,
      "all_reduce(recvbuf NULL, count 10)", nul);
  expect_invalid(sharc_all_gather(NULL, out, 1, SHARC_F32, comm, NULL), comm,
                 "all_gather(sendbuf NULL, count 1)", nul);
  expect_invalid(sharc_all_gather(buf, NULL, 1, SHARC_F32, comm, NULL), comm,
                 "all_gather(recvbuf NULL, count 1)", nul);
  expect_invalid(
      sharc_reduce_scatter(NULL, out, 3, SHARC_F32, SHARC_SUM, comm, NULL),
      comm, "reduce_scatter(sendbuf NULL, count 3)", nul);
  expect_invalid(
      sharc_reduce_scatter(out, NULL, 3, SHARC_F32, SHARC_SUM, comm, NULL),
      comm, "reduce_scatter(recvbuf NULL, count 3)", nul);
  expect_invalid(sharc_broadcast(buf, NULL, 5, SHARC_F32, 0, comm, NULL), comm,
                 "broadcast(recvbuf NULL, count 5)", nul);

  expect_invalid(
      sharc_all_gather(buf, out, big_ag, SHARC_F32, comm, NULL), comm,
      "all_gather(sendcount * 4 bytes * nranks overflows size_t)", cnt);
  expect_invalid(
      sharc_reduce_scatter(out, buf, big_ag, SHARC_F32, SHARC_SUM, comm, NULL),
      comm, "reduce_scatter(recvcount * 4 bytes * nranks overflows size_t)",
      cnt);
  expect_invalid(
      sharc_all_reduce(buf, out, big, SHARC_F32, SHARC_SUM, comm, NULL), comm,
      "all_reduce(count * 4 bytes overflows size_t)", cnt);
  expect_invalid(sharc_broadcast(buf, out, SIZE_MAX, SHARC_F64, 0, comm, NULL),
                 comm, "broadcast(count SIZE_MAX of f64)", cnt);

  const char *dt = "dtype|type|99|10";
  expect_invalid(
      sharc_all_reduce(buf, out, 4, (sharc_dtype_t)99, SHARC_SUM, comm, NULL),
      comm, "all_reduce(dtype 99)", dt);
  expect_invalid(
      sharc_all_reduce(buf, out, 4, SHARC_DTYPE_COUNT, SHARC_SUM, comm, NULL),
      comm, "all_reduce(dtype SHARC_DTYPE_COUNT)", dt);
  expect_invalid(sharc_all_gather(buf, out, 4, (sharc_dtype_t)99, comm, NULL),
                 comm, "all_gather(dtype 99)", dt);
  expect_invalid(sharc_reduce_scatter(out, buf, 4, (sharc_dtype_t)99, SHARC_SUM,
                                      comm, NULL),
                 comm, "reduce_scatter(dtype 99)", dt);
  expect_invalid(sharc_broadcast(buf, out, 4, (sharc_dtype_t)99, 0, comm, NULL),
                 comm, "broadcast(dtype 99)", dt);

  const char *op = "op|reduction|99";
  expect_invalid(
      sharc_all_reduce(buf, out, 4, SHARC_F32, (sharc_op_t)99, comm, NULL),
      comm, "all_reduce(op 99)", op);
  expect_invalid(
      sharc_all_reduce(buf, out, 4, SHARC_I32, SHARC_OP_COUNT, comm, NULL),
      comm, "all_reduce(op SHARC_OP_COUNT)", op);
  expect_invalid(
      sharc_reduce_scatter(out, buf, 4, SHARC_F32, (sharc_op_t)99, comm, NULL),
      comm, "reduce_scatter(op 99)", op);

  expect_invalid(sharc_broadcast(buf, out, 4, SHARC_F32, -1, comm, NULL), comm,
                 "broadcast(root -1)", "root");
  expect_invalid(sharc_broadcast(buf, out, 4, SHARC_F32, nranks, comm, NULL),
                 comm, "broadcast(root nranks)", "root");

  /* reduce, gather, scatter: what is wrong on every rank alike (a buffer
   * only the root needs may be NULL elsewhere) */
  expect_invalid(
      sharc_reduce(NULL, out, 3, SHARC_F32, SHARC_SUM, 0, comm, NULL), comm,
      "reduce(sendbuf NULL, count 3)", nul);
  expect_invalid(sharc_gather(NULL, out, 3, SHARC_F32, 0, comm, NULL), comm,
                 "gather(sendbuf NULL, count 3)", nul);
  expect_invalid(sharc_scatter(out, NULL, 3, SHARC_F32, 0, comm, NULL), comm,
                 "scatter(recvbuf NULL, count 3)", nul);
  expect_invalid(
      sharc_reduce(buf, out, 4, SHARC_F32, (sharc_op_t)99, 0, comm, NULL), comm,
      "reduce(op 99)", op);
  expect_invalid(sharc_gather(buf, out, 4, (sharc_dtype_t)99, 0, comm, NULL),
                 comm, "gather(dtype 99)", dt);
  expect_invalid(sharc_gather(buf, out, big_ag, SHARC_F32, 0, comm, NULL), comm,
                 "gather(count * 4 bytes * nranks overflows size_t)", cnt);
  expect_invalid(
      sharc_reduce(buf, out, 4, SHARC_F32, SHARC_SUM, nranks, comm, NULL), comm,
      "reduce(root nranks)", "root");
  expect_invalid(sharc_gather(buf, out, 4, SHARC_F32, -1, comm, NULL), comm,
                 "gather(root -1)", "root");
  expect_invalid(sharc_scatter(buf, out, 4, SHARC_F32, nranks, comm, NULL),
                 comm, "scatter(root nranks)", "root");
  expect_invalid(sharc_all_to_all(NULL, out, 3, SHARC_F32, comm, NULL), comm,
                 "all_to_all(sendbuf NULL, count 3)", nul);
  expect_invalid(sharc_all_to_all(buf, out, big_ag, SHARC_F32, comm, NULL),
                 comm, "all_to_all(count * 4 bytes * nranks overflows size_t)",
                 cnt);

  const char *nc = "comm|NULL|null";
  expect_invalid(
      sharc_all_reduce(buf, out, 4, SHARC_F32, SHARC_SUM, NULL, NULL), NULL,
      "all_reduce(comm NULL)", nc);
  expect_invalid(sharc_all_gather(buf, out, 4, SHARC_F32, NULL, NULL), NULL,
                 "all_gather(comm NULL)", nc);
  expect_invalid(sharc_barrier(NULL, NULL), NULL, "barrier(comm NULL)", nc);
  int x;
  expect_invalid(sharc_comm_rank(NULL, &x), NULL, "comm_rank(comm NULL)", nc);
  ok(strlen(sharc_last_error()) > 0,
     "sharc_last_error() non-empty after a NULL-comm failure", NULL);
  expect_invalid(sharc_comm_rank(comm, NULL), comm,
                 "comm_rank(rank pointer NULL)", "NULL|null|pointer|rank");
  expect_invalid(sharc_comm_size(comm, NULL), comm,
                 "comm_size(size pointer NULL)", "NULL|null|pointer|size");

  /* A count of 0 is valid with any buffers and moves nothing. */
  ok(sharc_all_reduce(NULL, NULL, 0, SHARC_F32, SHARC_SUM, comm, NULL) ==
         SHARC_OK,
     "all_reduce(NULL, NULL, count 0) returns SHARC_OK",
     sharc_comm_last_error(comm));
  ok(sharc_all_gather(NULL, NULL, 0, SHARC_F32, comm, NULL) == SHARC_OK,
     "all_gather(NULL, NULL, count 0) returns SHARC_OK",
     sharc_comm_last_error(comm));
}

static void check_init_rank(void) {
  sharc_unique_id_t id;
  sharc_comm_t c = NULL;
  /* Garbage: no magic, no address, no token. Must fail now, not time out. */
  for (size_t k = 0; k < sizeof id.internal; k++)
    id.internal[k] = (char)(0x5a ^ (k * 37));
  expect_invalid(sharc_comm_init_rank(&c, 2, &id, 0), NULL,
                 "comm_init_rank(garbage unique id)",
                 "id|unique|invalid|magic|garbage|corrupt");
  ok(c == NULL, "comm_init_rank(garbage) leaves *comm NULL", NULL);
  expect_invalid(sharc_comm_init_rank(&c, 2, NULL, 0), NULL,
                 "comm_init_rank(id NULL)", "id|NULL|null");
  expect_invalid(sharc_comm_init_rank(NULL, 2, &id, 0), NULL,
                 "comm_init_rank(comm NULL)", "comm|NULL|null");
  expect_invalid(sharc_comm_init_rank(&c, 0, &id, 0), NULL,
                 "comm_init_rank(nranks 0)", "nranks|rank|size");
  expect_invalid(sharc_comm_init_rank(&c, 2, &id, 2), NULL,
                 "comm_init_rank(rank 2 of 2)", "rank");
  expect_invalid(sharc_comm_init_rank(&c, 2, &id, -1), NULL,
                 "comm_init_rank(rank -1)", "rank");
  expect_invalid(sharc_comm_init_env(NULL), NULL, "comm_init_env(NULL)",
                 "comm|NULL|null");
}

int main(void) {
  int nranks = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  check_names();
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    printf("bad_args: sharc_comm_init_env: %s: %s\n", sharc_status_name(st),
           sharc_last_error());
    return 2;
  }
  ok(sharc_comm_rank(comm, &rank) == SHARC_OK, "comm_rank", NULL);
  ok(sharc_comm_size(comm, &nranks) == SHARC_OK && nranks >= 1, "comm_size",
     NULL);
  check_bad_calls(nranks);
  check_init_rank();

  /* The communicator still works after all of that. */
  enum { CNT = 1000 };
  int32_t v[CNT];
  for (int i = 0; i < CNT; i++)
    v[i] = rank + 1 + i;
  st = sharc_all_reduce(v, v, CNT, SHARC_I32, SHARC_SUM, comm, NULL);
  ok(st == SHARC_OK, "all_reduce after the bad calls",
     sharc_comm_last_error(comm));
  int bad = 0;
  for (int i = 0; st == SHARC_OK && i < CNT; i++)
    bad += v[i] != nranks * (nranks + 1) / 2 + nranks * i;
  ok(st == SHARC_OK && !bad, "all_reduce result after the bad calls", NULL);
  ok(sharc_barrier(comm, NULL) == SHARC_OK, "barrier after the bad calls",
     sharc_comm_last_error(comm));
  ok(sharc_comm_destroy(comm) == SHARC_OK, "comm_destroy", NULL);

  printf("bad_args: %d passed, %d failed (rank %d of %d)\n", pass, fail, rank,
         nranks);
  return fail ? 1 : 0;
}

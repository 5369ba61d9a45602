/*
 * init_only.c - creates the world communicator from the environment and
 * nothing else, for tests of the bootstrap (timeout_test.sh).
 *
 *   init_only [--allreduce]
 *
 * On failure prints "init_only: init failed: STATUS_NAME: MESSAGE" (the
 * message from sharc_last_error()) and the seconds it took, and exits 2.
 * On success prints "init_only: rank R of N ok", optionally checks one
 * all-reduce, and exits 0 (1 if the all-reduce was wrong).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sharc.h"

int main(int argc, char **argv) {
  struct timespec a, b;
  sharc_comm_t comm = NULL;
  int rank = -1, n = 0, rc = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  clock_gettime(CLOCK_MONOTONIC, &a);
  sharc_status_t st = sharc_comm_init_env(&comm);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double secs = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
  if (st != SHARC_OK) {
    const char *msg = sharc_last_error();
    printf("init_only: init failed: %s: %s\n", sharc_status_name(st),
           msg ? msg : "(null)");
    printf("init_only: init returned after %.2f s\n", secs);
    return 2;
  }
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &n);
  printf("init_only: rank %d of %d ok (init %.2f s)\n", rank, n, secs);
  if (argc > 1 && !strcmp(argv[1], "--allreduce")) {
    long long v = rank + 1;
    st = sharc_all_reduce(&v, &v, 1, SHARC_I64, SHARC_SUM, comm, NULL);
    if (st != SHARC_OK || v != (long long)n * (n + 1) / 2) {
      printf("init_only: all_reduce: %s, sum %lld (expected %lld)\n",
             sharc_status_name(st), v, (long long)n * (n + 1) / 2);
      rc = 1;
    }
  }
  if (sharc_comm_destroy(comm) != SHARC_OK)
    rc = 1;
  return rc;
}

/*
 * colocated.c - ranks that start their calls on one CPU part (exec.c's
 * move_off): colocated_test.sh runs it on 2 ranks with SHARC_DEBUG=INFO.
 *
 *   colocated [CALLS]
 *
 * Each rank may run on at least two CPUs (else it says so and exits 77).
 * After init every rank narrows itself to the first CPU it may use, so
 * both run there, widens its set back (Linux leaves it where it is) and
 * runs CALLS (default 300) 8-byte all-reduces, checking each sum. Then the
 * ranks gather the CPU each ends on; rank 0 prints "colocated: ranks on
 * CPUs A and B" and exits 1 if they are the same or a sum was wrong.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getcpu, cpu_set_t */
#endif
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "sharc.h"

int main(int argc, char **argv) {
  int calls = argc > 1 ? atoi(argv[1]) : 300;
  setvbuf(stdout, NULL, _IOLBF, 0);
  cpu_set_t all, first;
  if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2) {
    printf("colocated: skipped: this process may run on fewer than 2 CPUs\n");
    return 77;
  }
  int c0 = 0;
  while (!CPU_ISSET(c0, &all))
    c0++;
  sharc_comm_t comm;
  if (sharc_comm_init_env(&comm) != SHARC_OK) {
    printf("colocated: init failed: %s\n", sharc_last_error());
    return 1;
  }
  int rank, n;
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &n);
  CPU_ZERO(&first);
  CPU_SET(c0, &first);
  if (sched_setaffinity(0, sizeof first, &first) != 0 ||
      sched_setaffinity(0, sizeof all, &all) != 0) {
    printf("colocated: sched_setaffinity failed\n");
    return 1;
  }
  int start = sched_getcpu(), bad = 0;
  for (int i = 0; i < calls && !bad; i++) {
    double v[1] = {rank + 1.0 + i};
    if (sharc_all_reduce(v, v, 1, SHARC_F64, SHARC_SUM, comm, NULL) !=
        SHARC_OK) {
      printf("colocated: all-reduce failed: %s\n", sharc_last_error());
      return 1;
    }
    bad = v[0] != n * (n + 1) / 2.0 + (double)n * i;
  }
  int mine[2] = {sched_getcpu(), bad}, cpus[64];
  if (n > 32 ||
      sharc_all_gather(mine, cpus, 2, SHARC_I32, comm, NULL) != SHARC_OK) {
    printf("colocated: all-gather failed\n");
    return 1;
  }
  printf("colocated: rank %d started on CPU %d, ended on CPU %d\n", rank, start,
         mine[0]);
  int rc = 0;
  if (rank == 0) {
    for (int r = 0; r < n; r++)
      if (cpus[2 * r + 1]) {
        printf("colocated: rank %d's sums were wrong\n", r);
        rc = 1;
      }
    printf("colocated: ranks on CPUs %d and %d\n", cpus[0], cpus[2]);
    if (n >= 2 && cpus[0] == cpus[2])
      rc = 1;
  }
  sharc_comm_destroy(comm);
  return rc;
}

/*
 * coloc.c - where a rank starts and where it runs (binding.md, "Placed,
 * not pinned"). Each rank prints the CPU it starts on, the CPU after
 * sharc_comm_init_env, then 8 blocks of 100 8-KiB all-reduces: the mean
 * time per call (us) and the CPU after the block.
 *
 *   gcc -O2 -I../../../../include coloc.c -L../../../../build-dev -lsharc \
 *       -Wl,-rpath,$PWD/../../../../build-dev -o /tmp/coloc
 *   SHARC_BIND=none|shared build-dev/sharcrun -n 2 /tmp/coloc
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sharc.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(void) {
  int c0 = sched_getcpu();
  sharc_comm_t comm;
  if (sharc_comm_init_env(&comm) != SHARC_OK)
    return 1;
  int r;
  sharc_comm_rank(comm, &r);
  int c1 = sched_getcpu();
  float *a = calloc(2048, sizeof *a), *b = calloc(2048, sizeof *b);
  if (!a || !b)
    return 1;
  double t[8];
  int cs[8];
  for (int blk = 0; blk < 8; blk++) {
    double t0 = now_us();
    for (int i = 0; i < 100; i++)
      if (sharc_all_reduce(a, b, 2048, SHARC_F32, SHARC_SUM, comm, NULL))
        return 1;
    t[blk] = (now_us() - t0) / 100;
    cs[blk] = sched_getcpu();
  }
  printf("r%d start cpu %d init cpu %d |", r, c0, c1);
  for (int blk = 0; blk < 8; blk++)
    printf(" %.1f@%d", t[blk], cs[blk]);
  printf("\n");
  free(a);
  free(b);
  sharc_comm_destroy(comm);
  return 0;
}

/*
 * firstsmall.c - the first small calls after large ones (README.md here).
 * Three times: 25 all-reduces of BIG bytes (default 32 MiB), then 30
 * 8-byte all-reduces, each after a barrier, each rank printing every small
 * call's wall and thread CPU time (us; the CPU clock's own cost, about 0.4
 * us here, included).
 *
 *   gcc -O2 -Iinclude bench/results/pause_budget/firstsmall.c -Lbuild-dev \
 *       -lsharc -Wl,-rpath,$PWD/build-dev -o /tmp/firstsmall
 *   build-dev/sharcrun -n 2 /tmp/firstsmall [BIG]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sharc.h"

static double now_us(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  size_t big = argc > 1 ? strtoull(argv[1], NULL, 0) : (32u << 20);
  sharc_comm_t comm;
  if (sharc_comm_init_env(&comm) != SHARC_OK)
    return 1;
  int r;
  sharc_comm_rank(comm, &r);
  float *a = calloc(big / 4, 4), *b = calloc(big / 4, 4);
  float s[2] = {1, 2}, d[2];
  if (!a || !b)
    return 1;
  for (int rep = 0; rep < 3; rep++) {
    for (int i = 0; i < 25; i++) {
      sharc_barrier(comm, NULL);
      sharc_all_reduce(a, b, big / 4, SHARC_F32, SHARC_SUM, comm, NULL);
    }
    double w[30], c[30];
    for (int i = 0; i < 30; i++) {
      sharc_barrier(comm, NULL);
      double c0 = now_us(CLOCK_THREAD_CPUTIME_ID), t0 = now_us(CLOCK_MONOTONIC);
      sharc_all_reduce(s, d, 2, SHARC_F32, SHARC_SUM, comm, NULL);
      w[i] = now_us(CLOCK_MONOTONIC) - t0;
      c[i] = now_us(CLOCK_THREAD_CPUTIME_ID) - c0;
    }
    printf("r%d rep%d wall:", r, rep);
    for (int i = 0; i < 30; i++)
      printf(" %.2f", w[i]);
    printf("\nr%d rep%d cpu :", r, rep);
    for (int i = 0; i < 30; i++)
      printf(" %.2f", c[i]);
    printf("\n");
  }
  free(a);
  free(b);
  sharc_comm_destroy(comm);
  return 0;
}

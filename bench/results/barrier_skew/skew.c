/* Barrier exit skew and broadcast latency on one host, timed on the
 * shared CLOCK_MONOTONIC: per iteration barrier, t0, 8-byte broadcast from
 * rank 0, t1. Prints medians of: rank 1's barrier exit minus rank 0's,
 * each rank's own t1-t0, max over ranks of t1-t0 (the per-call method),
 * and rank 1's t1 minus rank 0's t0 (root's call to the last receipt). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef USE_MPI
#include <mpi.h>
#else
#include <sharc.h>
#endif
#include "clock.h"
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000, rank, nr;
  char buf[8] = {0};
#ifdef USE_MPI
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nr);
#define BARRIER() MPI_Barrier(MPI_COMM_WORLD)
#define BCAST() MPI_Bcast(buf, 2, MPI_FLOAT, 0, MPI_COMM_WORLD)
#else
  sharc_comm_t c;
  if (sharc_comm_init_env(&c))
    return 1;
  sharc_comm_rank(c, &rank);
  sharc_comm_size(c, &nr);
#define BARRIER() sharc_barrier(c, NULL)
#define BCAST() sharc_broadcast(buf, buf, 2, SHARC_F32, 0, c, NULL)
#endif
  double *t = malloc(2 * (size_t)n * sizeof *t),
         *all = malloc(2 * (size_t)n * nr * sizeof *t);
  for (int it = -2000; it < n; it++) {
    BARRIER();
    double t0 = now();
    BCAST();
    double t1 = now();
    if (it >= 0) {
      t[2 * it] = t0;
      t[2 * it + 1] = t1;
    }
  }
#ifdef USE_MPI
  MPI_Gather(t, 2 * n, MPI_DOUBLE, all, 2 * n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
#else
  sharc_gather(t, all, 2 * (size_t)n, SHARC_F64, 0, c, NULL);
#endif
  if (rank == 0) {
    double *sk = malloc(n * sizeof *sk), *o0 = malloc(n * sizeof *sk),
           *o1 = malloc(n * sizeof *sk), *mx = malloc(n * sizeof *sk),
           *lat = malloc(n * sizeof *sk);
    for (int i = 0; i < n; i++) {
      double *a = all + 2 * i, *b = all + 2 * (size_t)n * (nr - 1) +
                                    2 * i; /* rank 0 and the last rank */
      sk[i] = b[0] - a[0];
      o0[i] = a[1] - a[0];
      o1[i] = b[1] - b[0];
      mx[i] = o0[i] > o1[i] ? o0[i] : o1[i];
      lat[i] = b[1] - a[0];
    }
    printf("exit skew (last rank - rank 0) %.0f ns | own: rank 0 %.0f, last "
           "%.0f | per-call max %.0f | root call to last receipt %.0f\n",
           med(sk, n), med(o0, n), med(o1, n), med(mx, n), med(lat, n));
  }
#ifdef USE_MPI
  MPI_Finalize();
#else
  sharc_comm_destroy(c);
#endif
  return 0;
}

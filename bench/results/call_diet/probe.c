/* The per-call method's pieces per rank: barrier, t0, call, t1, N times;
 * the CLOCK_MONOTONIC stamps of every rank gathered to rank 0, which prints
 * the medians (over the last 90% of the calls) of each rank's start after
 * rank 0's, its time in the call and its end after rank 0's start, and the
 * median of the per-call maximum over ranks (what sharc-bench reports).
 *   cc -O2 probe.c -Iinclude -Lbuild -lsharc   (here, for clock.h)
 *   sharcrun -n R ./a.out N COLL COUNT   (COLL 0 all-reduce, 1 broadcast
 *   from rank 0, 2 all-gather; COUNT floats) */
#include <sharc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../barrier_skew/clock.h" /* now, med */
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  int coll = argc > 2 ? atoi(argv[2]) : 1;
  size_t cnt = argc > 3 ? atoi(argv[3]) : 2;
  float *a = calloc(cnt * 8, 4), *b = calloc(cnt * 8, 4);
  sharc_comm_t c;
  if (sharc_comm_init_env(&c))
    return 1;
  int r, R;
  sharc_comm_rank(c, &r);
  sharc_comm_size(c, &R);
  double *st = malloc(sizeof(double) * 2 * n),
         *all = malloc(sizeof(double) * 2 * n * R);
  for (int i = 0; i < n; i++) {
    sharc_barrier(c, NULL);
    double t0 = now();
    if (coll == 0)
      sharc_all_reduce(a, b, cnt, SHARC_F32, SHARC_SUM, c, NULL);
    else if (coll == 1)
      sharc_broadcast(a, b, cnt, SHARC_F32, 0, c, NULL);
    else
      sharc_all_gather(a, b, cnt, SHARC_F32, c, NULL);
    double t1 = now();
    st[2 * i] = t0;
    st[2 * i + 1] = t1;
  }
  sharc_all_gather(st, all, 2 * n, SHARC_F64, c, NULL);
  if (r == 0) {
    double *v = malloc(sizeof(double) * n);
    int skip = n / 10;
    for (int q = 0; q < R; q++) {
      int m = 0;
      for (int i = skip; i < n; i++)
        v[m++] = all[(size_t)q * 2 * n + 2 * i] - all[2 * i];
      double s0 = med(v, m);
      m = 0;
      for (int i = skip; i < n; i++)
        v[m++] =
            all[(size_t)q * 2 * n + 2 * i + 1] - all[(size_t)q * 2 * n + 2 * i];
      double d = med(v, m);
      m = 0;
      for (int i = skip; i < n; i++)
        v[m++] = all[(size_t)q * 2 * n + 2 * i + 1] - all[2 * i];
      printf("rank %d: start-root0 %6.0f  dur %6.0f  end-root0start %6.0f ns\n",
             q, s0, d, med(v, m));
    }
    int m = 0;
    for (int i = skip; i < n; i++) {
      double mx = 0;
      for (int q = 0; q < R; q++) {
        double d =
            all[(size_t)q * 2 * n + 2 * i + 1] - all[(size_t)q * 2 * n + 2 * i];
        if (d > mx)
          mx = d;
      }
      v[m++] = mx;
    }
    printf("max over ranks median %.0f ns\n", med(v, m));
  }
  sharc_comm_destroy(c);
  return 0;
}

/* Per-rank broadcast timing on the shared CLOCK_MONOTONIC: per iteration
 * barrier, t0, broadcast from rank 0, t1; prints the per-call number (the
 * median over iterations of the slowest rank's t1 - t0), how often each
 * rank was the slowest, and per rank the median own time (its 90th
 * percentile) and its t0 and t1 against the root's t0.
 *   gcc -O2 ranks.c -I include -L build -lsharc -o ranks
 *   sharcrun -n 4 ./ranks ITERS BYTES [INPLACE [PRE_BYTES]]
 * PRE_BYTES: 2000 broadcasts of that size first. */
#include "../barrier_skew/clock.h"
#include <sharc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 5000;
  size_t bytes = argc > 2 ? atol(argv[2]) : 8;
  int rank, nr;
  sharc_comm_t c;
  if (sharc_comm_init_env(&c))
    return 1;
  sharc_comm_rank(c, &rank);
  sharc_comm_size(c, &nr);
  char *s = calloc(bytes, 1), *r = calloc(bytes, 1);
  if (argc > 3 && atoi(argv[3]))
    r = s;
  size_t pre = argc > 4 ? atol(argv[4]) : 0; /* broadcasts of this size first */
  if (pre) {
    char *p = calloc(pre, 1), *q = calloc(pre, 1);
    for (int i = 0; i < 2000; i++)
      sharc_broadcast(p, q, pre / 4, SHARC_F32, 0, c, NULL);
    free(p);
    free(q);
  }
  double *t = malloc(2 * (size_t)n * sizeof *t),
         *all = malloc(2 * (size_t)n * nr * sizeof *t);
  for (int it = -500; it < n; it++) {
    sharc_barrier(c, NULL);
    double t0 = now();
    sharc_broadcast(s, r, bytes / 4, SHARC_F32, 0, c, NULL);
    double t1 = now();
    if (it >= 0) {
      t[2 * it] = t0;
      t[2 * it + 1] = t1;
    }
  }
  sharc_gather(t, all, 2 * (size_t)n, SHARC_F64, 0, c, NULL);
  if (rank == 0) {
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *a),
           *m = malloc(n * sizeof *a), *cc = malloc(n * sizeof *a);
    for (int i = 0; i < n; i++) {
      m[i] = 0;
      for (int k = 0; k < nr; k++) {
        double o =
            all[2 * (size_t)n * k + 2 * i + 1] - all[2 * (size_t)n * k + 2 * i];
        if (o > m[i])
          m[i] = o;
      }
    }
    int who[64] = {0};
    for (int i = 0; i < n; i++) {
      int w = 0;
      double mm = 0;
      for (int k = 0; k < nr; k++) {
        double o =
            all[2 * (size_t)n * k + 2 * i + 1] - all[2 * (size_t)n * k + 2 * i];
        if (o > mm) {
          mm = o;
          w = k;
        }
      }
      who[w]++;
    }
    printf("%zu B: per-call max %.0f ns; max rank share:", bytes, med(m, n));
    for (int k = 0; k < nr; k++)
      printf(" %d:%d%%", k, who[k] * 100 / n);
    printf("\n");
    for (int k = 0; k < nr; k++) {
      for (int i = 0; i < n; i++) {
        double *x = all + 2 * (size_t)n * k + 2 * i, *z = all + 2 * i;
        a[i] = x[0] - z[0];
        b[i] = x[1] - x[0];
        cc[i] = x[1] - z[0];
      }
      {
        double p90;
        qsort(b, n, sizeof *b, cmp);
        p90 = b[n * 9 / 10];
        printf("  rank %d: t0 - root t0 %6.0f | own %6.0f (p90 %6.0f) | t1 - "
               "root t0 %6.0f\n",
               k, med(a, n), b[n / 2], p90, med(cc, n));
      }
    }
  }
  sharc_comm_destroy(c);
  return 0;
}

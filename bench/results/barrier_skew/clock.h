/* What skew.c, ../shm_outbox_slots/ranks.c and ../call_diet/probe.c share:
 * the time now on the host's shared CLOCK_MONOTONIC (ns), and the median of
 * n values (sorts them). */
#ifndef SKEW_CLOCK_H
#define SKEW_CLOCK_H
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double med(double *v, int n) {
  qsort(v, n, sizeof *v, cmp);
  return v[n / 2];
}
#endif

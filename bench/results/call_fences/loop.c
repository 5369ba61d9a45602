/* Back-to-back 8-byte calls on one thread, three passes of N calls after a
 * barrier; rank 0 prints ns per call of the last pass. coll 0 all-reduce,
 * 1 broadcast from rank 0 (in place), 2 all-gather.
 *   cc -O2 loop.c -Iinclude -Lbuild -lsharc; sharcrun -n R ./a.out N COLL */
#include <sharc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 200000;
  int coll = argc > 2 ? atoi(argv[2]) : 0;
  float a[2] = {1, 2}, b[2];
  sharc_comm_t c;
  if (sharc_comm_init_env(&c))
    return 1;
  int r;
  sharc_comm_rank(c, &r);
  for (int pass = 0; pass < 3; pass++) {
    sharc_barrier(c, NULL);
    double t0 = now();
    for (int i = 0; i < n; i++) {
      if (coll == 0)
        sharc_all_reduce(a, b, 2, SHARC_F32, SHARC_SUM, c, NULL);
      else if (coll == 1)
        sharc_broadcast(a, a, 2, SHARC_F32, 0, c, NULL);
      else
        sharc_all_gather(a, b, 1, SHARC_F32, c, NULL);
    }
    double t1 = now();
    if (r == 0)
      printf("coll %d: %.1f ns/call\n", coll, (t1 - t0) / n);
  }
  sharc_comm_destroy(c);
  return 0;
}

/* N calls of one 8-byte collective on one thread, for counting
 * instructions per call: coll 0 all-reduce, 1 broadcast from rank 0 (out
 * of place), 2 all-gather.
 *   cc -O2 one.c -Iinclude -Lbuild -lsharc
 *   sharcrun -n 1 valgrind --tool=callgrind ./a.out N COLL (twice, N and
 *   2N: the difference over N is the per-call count) */
#include <sharc.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int n = atoi(argv[1]), coll = atoi(argv[2]);
  float a[2] = {1, 2}, b[2];
  sharc_comm_t c;
  if (sharc_comm_init_env(&c))
    return 1;
  for (int i = 0; i < n; i++) {
    if (coll == 0)
      sharc_all_reduce(a, b, 2, SHARC_F32, SHARC_SUM, c, NULL);
    else if (coll == 1)
      sharc_broadcast(a, b, 2, SHARC_F32, 0, c, NULL);
    else
      sharc_all_gather(a, b, 1, SHARC_F32, c, NULL);
  }
  sharc_comm_destroy(c);
  return 0;
}

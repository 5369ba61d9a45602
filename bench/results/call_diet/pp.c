/* One cache line's round trip between two processes (fork, a shared
 * mapping, each waits with pause for the other's store): half is the one
 * way time of a line between cores.   cc -O2 pp.c; ./a.out */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
int main() {
  _Atomic long *p =
      mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  _Atomic long *a = p, *b = p + 16;
  int N = 2000000;
  if (fork() == 0) {
    for (long i = 1; i <= N; i++) {
      while (atomic_load_explicit(a, memory_order_acquire) != i)
        __builtin_ia32_pause();
      atomic_store_explicit(b, i, memory_order_release);
    }
    _exit(0);
  }
  for (int pass = 0; pass < 3; pass++) {
    atomic_store(a, 0);
    atomic_store(b, 0);
  }
  double t0 = now();
  for (long i = 1; i <= N; i++) {
    atomic_store_explicit(a, i, memory_order_release);
    while (atomic_load_explicit(b, memory_order_acquire) != i)
      __builtin_ia32_pause();
  }
  double t1 = now();
  printf("round trip %.1f ns, one way %.1f\n", (t1 - t0) / N,
         (t1 - t0) / N / 2);
  wait(0);
}

/* Copies N MiB in chunks for 3 s, mode 0 memcpy, 1 non-temporal stores;
 * prints the best and mean GB/s. Two at once: ./a.out 128 262144 M & ./a.out
 * 128 262144 M. cc -O2 -mavx2 nt_copies.c */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void nt_copy(void *d, const void *s, size_t n) {
  char *dd = d;
  const char *ss = s;
  for (size_t i = 0; i < n; i += 64) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(ss + i)),
            b = _mm256_loadu_si256((const __m256i *)(ss + i + 32));
    _mm256_stream_si256((__m256i *)(dd + i), a);
    _mm256_stream_si256((__m256i *)(dd + i + 32), b);
  }
  _mm_sfence();
}
int main(int argc, char **argv) {
  size_t N = (size_t)atol(argv[1]) << 20, chunk = atol(argv[2]);
  int mode = atoi(argv[3]);
  char *s = aligned_alloc(4096, N), *d = aligned_alloc(4096, N);
  memset(s, 1, N);
  memset(d, 2, N);
  double best = 0, tot = 0;
  double tend = now() + 3;
  int k = 0;
  while (now() < tend) {
    double t0 = now();
    for (size_t o = 0; o < N; o += chunk) {
      if (mode)
        nt_copy(d + o, s + o, chunk);
      else
        memcpy(d + o, s + o, chunk);
    }
    double t1 = now();
    double bw = N / (t1 - t0) / 1e9;
    if (bw > best)
      best = bw;
    tot += bw;
    k++;
  }
  printf("mode %s N %zu MiB: best %.2f mean %.2f GB/s\n",
         mode ? "NT" : "memcpy", N >> 20, best, tot / k);
}

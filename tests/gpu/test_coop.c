/*
 * test_coop.c - kernels whose threads cooperate (dynamic shared memory and
 * __syncthreads, tests/gpu/coop_kernels.cu), on a GPU or on softcuda's
 * cooperative blocks (tests/softcuda/softcuda_block.c):
 *  - a block-wide tree reduction of int64 values equals the host's sum,
 *    for block sizes 1, 2, 32, 96, 256, 1000 and 1024 (powers of two and
 *    not) and several blocks;
 *  - values written before a barrier are what a neighbour thread reads
 *    after it, twice over (so neither thread order can pass by luck; CTest
 *    runs it again in reverse grid order on softcuda);
 *  - on softcuda only (on a GPU these are undefined behaviour, not
 *    errors): a barrier that thread 0 returns without reaching, and
 *    __syncthreads in a launch without shared memory, each fail the
 *    context with cudaErrorLaunchFailure; each runs in a child process of
 *    its own (the context is unusable afterwards).
 * Without a usable CUDA device: one SKIP line, exit 77.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_ok.h"

cudaError_t coop_block_sum(int64_t *out, const int64_t *in, size_t n,
                           unsigned blocks, unsigned threads, cudaStream_t st);
cudaError_t coop_neighbour(int32_t *out, unsigned blocks, unsigned threads,
                           cudaStream_t st);
cudaError_t coop_divergent(int32_t *out, unsigned threads, cudaStream_t st);
cudaError_t coop_barrier_unshared(int32_t *out, unsigned threads,
                                  cudaStream_t st);

static int passed, failed;

/* Child mode: runs one mistake; exit 0 when the context failed with
 * cudaErrorLaunchFailure, 1 otherwise. */
static int mistake(const char *which) {
  int32_t *d;
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void **)&d, 64 * sizeof *d));
  cudaError_t e = !strcmp(which, "divergent")
                      ? coop_divergent(d, 64, st)
                      : coop_barrier_unshared(d, 64, st);
  if (e != cudaSuccess) {
    printf("the launch itself failed: %s\n", cudaGetErrorName(e));
    return 1;
  }
  e = cudaStreamSynchronize(st);
  printf("%s: cudaStreamSynchronize: %s\n", which, cudaGetErrorName(e));
  return e == cudaErrorLaunchFailure ? 0 : 1;
}

static void expect_refused(const char *self, const char *which) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl(self, self, "--mistake", which, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "softcuda did not refuse the %s kernel (child status 0x%x)", which,
        status);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--mistake"))
    return mistake(argv[2]);
  /* softcuda's symbol: the mistakes are checked there only */
  int soft = dlsym(RTLD_DEFAULT, "softcuda_kernel_launches") != NULL;
  if (soft) { /* before this process touches CUDA */
    expect_refused("/proc/self/exe", "divergent");
    expect_refused("/proc/self/exe", "unshared");
  }
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n",
           cudaGetErrorName(e), ndev);
    return 77;
  }
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const unsigned sizes[] = {1, 2, 32, 96, 256, 1000, 1024};
  const unsigned blocks = 3;
  const size_t n = 2500; /* per block: several values per thread */
  int64_t *hin = malloc(blocks * n * sizeof *hin), *din, *dout;
  int32_t *hn = malloc(blocks * 1024 * sizeof *hn), *dn;
  int64_t hout[3];
  if (!hin || !hn) {
    printf("FAIL: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < blocks * n; i++)
    hin[i] = (int64_t)((i * 2654435761u) % 1000003) - 500000;
  CUDA_OK(cudaMalloc((void **)&din, blocks * n * sizeof *din));
  CUDA_OK(cudaMalloc((void **)&dout, blocks * sizeof *dout));
  CUDA_OK(cudaMalloc((void **)&dn, blocks * 1024 * sizeof *dn));
  CUDA_OK(cudaMemcpyAsync(din, hin, blocks * n * sizeof *din,
                          cudaMemcpyHostToDevice, st));
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    unsigned nt = sizes[k];
    CUDA_OK(coop_block_sum(dout, din, n, blocks, nt, st));
    CUDA_OK(
        cudaMemcpyAsync(hout, dout, sizeof hout, cudaMemcpyDeviceToHost, st));
    CUDA_OK(coop_neighbour(dn, blocks, nt, st));
    CUDA_OK(cudaMemcpyAsync(hn, dn, blocks * nt * sizeof *hn,
                            cudaMemcpyDeviceToHost, st));
    CUDA_OK(cudaStreamSynchronize(st));
    for (unsigned b = 0; b < blocks; b++) {
      int64_t want = 0;
      for (size_t i = 0; i < n; i++)
        want += hin[b * n + i];
      CHECK(hout[b] == want, "block sum, %u threads, block %u: %lld, want %lld",
            nt, b, (long long)hout[b], (long long)want);
      for (unsigned t = 0; t < nt; t++) {
        /* thread t-1 read thread t's value, doubled it */
        int32_t w = 2 * (int32_t)(b * 1000 + t);
        CHECK(hn[b * nt + t] == w,
              "neighbours, %u threads, block %u thread %u: %d, want %d", nt, b,
              t, hn[b * nt + t], w);
      }
    }
  }
  CUDA_OK(cudaFree(din));
  CUDA_OK(cudaFree(dout));
  CUDA_OK(cudaFree(dn));
  CUDA_OK(cudaStreamDestroy(st));
  free(hin);
  free(hn);
  printf("test_coop: %d passed, %d failed%s\n", passed, failed,
         soft ? " (softcuda: mistakes refused as well)" : "");
  return failed ? 1 : 0;
}

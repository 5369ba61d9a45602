/*
 * test_softcuda.c - softcuda's own semantics, the ones sharc relies on:
 * pointer classes, checked copies, stream order and cuStreamWaitValue32,
 * the legacy stream's implicit waits, events, sticky last errors, host
 * functions that call CUDA, kernel launches (softcuda_launch: refused as a
 * GPU refuses them, run in order on the stream, their arguments released),
 * and CUDA IPC between two processes (this program re-executed with
 * --child HANDLE).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "softcuda/softcuda_launch.h"
#include "unit/expect.h"

#define IS(call, want)                                                         \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    EXPECT(e_ == (want), "got %s", cudaGetErrorName(e_));                      \
    (void)cudaGetLastError();                                                  \
  } while (0)

typedef CUresult (*wait32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

static void *entry(const char *sym) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPointByVersion(sym, &fn, 12000, cudaEnableDefault, &q);
  return q == cudaDriverEntryPointSuccess ? fn : NULL;
}

/* A "kernel" for softcuda_launch: counts its runs and releases. */
typedef struct {
  int runs, releases, reverse;
} kern_t;
static void kern_run(void *ctx, int reverse) {
  kern_t *k = ctx;
  k->runs++;
  k->reverse = reverse;
}
static void kern_release(void *ctx) { ((kern_t *)ctx)->releases++; }

static cudaError_t launch(kern_t *k, dim3 g, dim3 b, const void *p,
                          cudaStream_t s) {
  *k = (kern_t){0, 0, -1};
  const void *ptrs[1] = {p};
  return softcuda_launch((const void *)kern_run, g, b, 0, s, kern_run,
                         kern_release, k, ptrs, 1);
}

/* Launches are checked as a GPU checks them, and run once each. */
static void test_launch(cudaStream_t s, void *dev, void *pinned) {
  kern_t k;
  char pageable[64];
  dim3 one = {1, 1, 1}, ok_block = {256, 1, 1};
  IS(launch(&k, one, ok_block, dev, s), cudaSuccess);
  IS(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT(k.runs == 1 && k.releases == 1 && k.reverse == 0,
         "runs %d releases %d reverse %d", k.runs, k.releases, k.reverse);
  IS(launch(&k, one, ok_block, pinned, s), cudaSuccess); /* mapped host */
  IS(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT(k.runs == 1 && k.releases == 1, "pinned: runs %d", k.runs);
  static const struct {
    dim3 g, b;
  } bad[] = {{{1, 1, 1}, {1025, 1, 1}}, {{1, 1, 1}, {32, 32, 2}},
             {{1, 1, 1}, {1, 1, 65}},   {{1, 70000, 1}, {1, 1, 1}},
             {{0, 1, 1}, {32, 1, 1}},   {{1, 1, 1}, {0, 1, 1}}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    IS(launch(&k, bad[i].g, bad[i].b, dev, s), cudaErrorInvalidConfiguration);
    EXPECT(k.runs == 0 && k.releases == 1, "bad config %zu: runs %d rel %d", i,
           k.runs, k.releases);
  }
  IS(launch(&k, one, ok_block, pageable, s), cudaErrorIllegalAddress);
  EXPECT(k.runs == 0 && k.releases == 1, "pageable: runs %d rel %d", k.runs,
         k.releases);
  void *args[1] = {NULL};
  IS(cudaLaunchKernel((const void *)kern_run, one, one, args, 0, s),
     cudaErrorInvalidDeviceFunction);
  struct cudaFuncAttributes fa;
  IS(cudaFuncGetAttributes(&fa, (const void *)kern_run), cudaSuccess);
  EXPECT(fa.maxThreadsPerBlock == 1024, "%d", fa.maxThreadsPerBlock);
}

static void call_cuda(void *arg) {
  *(cudaError_t *)arg = cudaDeviceSynchronize();
}

/* The other process: opens the handle twice (one mapping), checks and
 * rewrites the bytes. */
static int child(const char *hex) {
  cudaIpcMemHandle_t h;
  for (size_t i = 0; i < sizeof h; i++)
    sscanf(hex + 2 * i, "%2hhx", (unsigned char *)&h.reserved[i]);
  void *p = NULL, *q = NULL;
  IS(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  IS(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  EXPECT(p && p == q, "two opens: %p and %p", p, q);
  struct cudaPointerAttributes a;
  IS(cudaPointerGetAttributes(&a, (char *)p + 100), cudaSuccess);
  EXPECT(a.type == cudaMemoryTypeDevice, "type %d", (int)a.type);
  unsigned char buf[4096];
  IS(cudaMemcpy(buf, p, sizeof buf, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT(buf[0] == 0x11 && buf[4095] == 0x11, "bytes %x %x", buf[0], buf[4095]);
  IS(cudaMemset(p, 0x22, sizeof buf), cudaSuccess);
  IS(cudaIpcCloseMemHandle(p), cudaSuccess);
  IS(cudaMemset(p, 0x22, 1), cudaSuccess); /* still open once */
  IS(cudaIpcCloseMemHandle(q), cudaSuccess);
  IS(cudaIpcCloseMemHandle(q), cudaErrorInvalidValue);
  return failed ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--child"))
    return child(argv[2]);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) { /* SOFTCUDA_DEVICES=0 */
    printf("SKIP: no CUDA device (%s)\n",
           cudaGetErrorString(cudaGetLastError()));
    return 77;
  }
  struct cudaDeviceProp prop;
  IS(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT(!strcmp(prop.name, "softcuda host device"), "%s", prop.name);

  /* sticky last error */
  int x;
  EXPECT(cudaFree(&x) == cudaErrorInvalidValue, "cudaFree of the stack");
  EXPECT(cudaPeekAtLastError() == cudaErrorInvalidValue, "peek");
  EXPECT(cudaGetLastError() == cudaErrorInvalidValue, "get");
  EXPECT(cudaGetLastError() == cudaSuccess, "cleared");
  EXPECT(!strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument"),
         "string");

  /* pointer classes and checked copies */
  char *d = NULL, *h = NULL, host[64];
  IS(cudaMalloc((void **)&d, 4096), cudaSuccess);
  IS(cudaHostAlloc((void **)&h, 4096, cudaHostAllocMapped), cudaSuccess);
  struct cudaPointerAttributes a;
  IS(cudaPointerGetAttributes(&a, d + 10), cudaSuccess);
  EXPECT(a.type == cudaMemoryTypeDevice && a.device == 0, "device");
  IS(cudaPointerGetAttributes(&a, h), cudaSuccess);
  EXPECT(a.type == cudaMemoryTypeHost, "host");
  IS(cudaPointerGetAttributes(&a, host), cudaSuccess);
  EXPECT(a.type == cudaMemoryTypeUnregistered, "unregistered");
  range_fn range = (range_fn)entry("cuMemGetAddressRange");
  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT(range && range(&base, &size, (CUdeviceptr)(uintptr_t)(d + 77)) ==
                      CUDA_SUCCESS,
         "cuMemGetAddressRange");
  EXPECT(base == (CUdeviceptr)(uintptr_t)d && size == 4096, "range");
  IS(cudaMemcpy(host, host + 8, 8, cudaMemcpyDeviceToHost),
     cudaErrorInvalidValue);
  IS(cudaMemcpy(d + 4090, host, 8, cudaMemcpyHostToDevice),
     cudaErrorInvalidValue);
  IS(cudaMemcpy(d, host, 8, cudaMemcpyHostToDevice), cudaSuccess);
  IS(cudaFree(d + 1), cudaErrorInvalidValue);

  /* stream order behind cuStreamWaitValue32; 2D copies */
  wait32_fn wait32 = (wait32_fn)entry("cuStreamWaitValue32");
  EXPECT(wait32 != NULL, "no cuStreamWaitValue32");
  cudaStream_t s, nb;
  IS(cudaStreamCreate(&s), cudaSuccess);
  IS(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
  uint32_t *flag = (uint32_t *)h;
  *flag = 0;
  /* a wait on a word the device cannot reach (pageable memory) is refused,
   * as the driver refuses an unmapped address */
  uint32_t pageable_word = 0;
  EXPECT(wait32(s, (CUdeviceptr)(uintptr_t)&pageable_word, 1,
                CU_STREAM_WAIT_VALUE_GEQ) == CUDA_ERROR_INVALID_VALUE,
         "wait32 on pageable memory accepted");
  EXPECT(wait32(s, (CUdeviceptr)(uintptr_t)flag, 2, CU_STREAM_WAIT_VALUE_GEQ) ==
             CUDA_SUCCESS,
         "wait32");
  IS(cudaMemsetAsync(d, 0x33, 4096, s), cudaSuccess);
  cudaEvent_t legacy_done, e0, e1;
  IS(cudaEventCreate(&legacy_done), cudaSuccess);
  IS(cudaMemsetAsync(h + 64, 0x44, 64, NULL), cudaSuccess); /* legacy */
  IS(cudaEventRecord(legacy_done, NULL), cudaSuccess);
  IS(cudaMemsetAsync(h + 128, 0x55, 64, nb), cudaSuccess); /* not blocked */
  IS(cudaStreamSynchronize(nb), cudaSuccess);
  EXPECT((unsigned char)h[128] == 0x55, "non-blocking stream waited");
  usleep(2000);
  IS(cudaStreamQuery(s), cudaErrorNotReady);
  IS(cudaEventQuery(legacy_done), cudaErrorNotReady); /* behind s */
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
  usleep(2000);
  IS(cudaStreamQuery(s), cudaErrorNotReady); /* 1 < 2 */
  __atomic_store_n(flag, 2, __ATOMIC_RELEASE);
  IS(cudaEventSynchronize(legacy_done), cudaSuccess);
  IS(cudaStreamQuery(s), cudaSuccess);
  EXPECT((unsigned char)h[64] == 0x44, "legacy memset");
  char grid[4][8];
  memset(grid, 0, sizeof grid);
  IS(cudaMemcpy2DAsync(grid, 8, d, 16, 4, 4, cudaMemcpyDeviceToHost, s),
     cudaSuccess);
  IS(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT(grid[3][3] == 0x33 && grid[3][4] == 0, "2D copy");

  /* events */
  IS(cudaEventCreate(&e0), cudaSuccess);
  IS(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming), cudaSuccess);
  IS(cudaEventRecord(e0, s), cudaSuccess);
  IS(cudaEventRecord(legacy_done, s), cudaSuccess);
  IS(cudaEventRecord(e1, s), cudaSuccess);
  IS(cudaEventSynchronize(legacy_done), cudaSuccess);
  float ms = -1;
  IS(cudaEventElapsedTime(&ms, e0, legacy_done), cudaSuccess);
  EXPECT(ms >= 0 && ms < 1000, "elapsed %f ms", ms);
  IS(cudaEventElapsedTime(&ms, e0, e1), cudaErrorInvalidResourceHandle);

  /* CUDA calls from a host function */
  cudaError_t inner = cudaSuccess;
  IS(cudaLaunchHostFunc(s, call_cuda, &inner), cudaSuccess);
  IS(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT(inner == cudaErrorNotPermitted, "got %s", cudaGetErrorName(inner));

  /* CUDA IPC */
  cudaIpcMemHandle_t ih;
  IS(cudaMemset(d, 0x11, 4096), cudaSuccess);
  IS(cudaIpcGetMemHandle(&ih, d + 5), cudaSuccess);
  void *self = NULL;
  IS(cudaIpcOpenMemHandle(&self, ih, cudaIpcMemLazyEnablePeerAccess),
     cudaErrorDeviceUninitialized);
  IS(cudaIpcGetMemHandle(&ih, h), cudaErrorInvalidValue);
  IS(cudaIpcGetMemHandle(&ih, d), cudaSuccess);
  char hex[2 * sizeof ih + 1];
  for (size_t i = 0; i < sizeof ih; i++)
    sprintf(hex + 2 * i, "%02x", (unsigned char)ih.reserved[i]);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", argv[0], "--child", hex, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x",
         status);
  unsigned char back[2];
  IS(cudaMemcpy(back, d + 4095, 1, cudaMemcpyDefault), cudaSuccess);
  IS(cudaMemcpy(back + 1, d, 1, cudaMemcpyDefault), cudaSuccess);
  EXPECT(back[0] == 0x22 && back[1] == 0x22, "child's bytes %x %x", back[0],
         back[1]);

  test_launch(s, d, h);

  IS(cudaEventDestroy(e0), cudaSuccess);
  IS(cudaEventDestroy(e1), cudaSuccess);
  IS(cudaEventDestroy(legacy_done), cudaSuccess);
  IS(cudaStreamDestroy(s), cudaSuccess);
  IS(cudaStreamDestroy(nb), cudaSuccess);
  IS(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  IS(cudaFreeHost(h), cudaSuccess);
  IS(cudaFree(d), cudaSuccess);
  printf("test_softcuda: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

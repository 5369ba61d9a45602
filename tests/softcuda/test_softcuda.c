/*
 * test_softcuda.c - softcuda's own semantics, the ones sharc relies on:
 * pointer classes, checked copies, stream order and cuStreamWaitValue32,
 * the legacy stream's implicit waits, events, sticky last errors, host
 * functions that call CUDA, kernel launches (softcuda_launch: refused as a
 * GPU refuses them, run in order on the stream, their arguments released;
 * a kernel's first launch synchronizes the device, as lazy loading may),
 * CUDA IPC between two processes (this program re-executed with --child
 * HANDLE), stream capture into graphs and what capture forbids, streams and
 * events of another device (--devices, under SOFTCUDA_DEVICES=2), work
 * whose memory goes away before it runs (--freed HANDLE: a fault, sticky),
 * and CU_POINTER_ATTRIBUTE_SYNC_MEMOPS (synchronous copies that land
 * before they return).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
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
typedef CUresult (*setattr_fn)(const void *, CUpointer_attribute, CUdeviceptr);

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

/* Lazy loading: the first launch of a kernel (or cudaFuncGetAttributes on
 * it) synchronizes the device; a kernel loaded before does not. The kernels
 * are told apart by their function pointer only. */
static void lazy_pre(void) {}
static void lazy_new(void) {}

static void *set_flag_later(void *arg) {
  usleep(50000);
  __atomic_store_n((uint32_t *)arg, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void test_lazy_load(wait32_fn wait32, cudaStream_t s, cudaStream_t nb,
                           void *dev, uint32_t *flag) {
  const char *mode = getenv("CUDA_MODULE_LOADING");
  if (mode && !strcmp(mode, "EAGER"))
    return;
  struct cudaFuncAttributes fa;
  IS(cudaFuncGetAttributes(&fa, (const void *)lazy_pre), cudaSuccess);
  *flag = 0;
  EXPECT(wait32(s, (CUdeviceptr)(uintptr_t)flag, 1, CU_STREAM_WAIT_VALUE_GEQ) ==
             CUDA_SUCCESS,
         "wait32");
  kern_t k = {0, 0, -1};
  const void *ptrs[1] = {dev};
  dim3 one = {1, 1, 1};
  /* loaded: no wait for s */
  IS(softcuda_launch((const void *)lazy_pre, one, one, 0, nb, kern_run,
                     kern_release, &k, ptrs, 1),
     cudaSuccess);
  IS(cudaStreamSynchronize(nb), cudaSuccess);
  IS(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT(k.runs == 1, "preloaded kernel: runs %d", k.runs);
  /* not loaded: waits until s is done, even on a non-blocking stream */
  pthread_t t;
  pthread_create(&t, NULL, set_flag_later, flag);
  k = (kern_t){0, 0, -1};
  IS(softcuda_launch((const void *)lazy_new, one, one, 0, nb, kern_run,
                     kern_release, &k, ptrs, 1),
     cudaSuccess);
  EXPECT(__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 1,
         "a first launch did not wait for the device");
  IS(cudaStreamQuery(s), cudaSuccess);
  pthread_join(t, NULL);
  IS(cudaStreamSynchronize(nb), cudaSuccess);
  EXPECT(k.runs == 1, "lazily loaded kernel: runs %d", k.runs);
}

static void call_cuda(void *arg) {
  *(cudaError_t *)arg = cudaDeviceSynchronize();
}

static void count_fn(void *arg) { (*(int *)arg)++; }

/* ---- stream capture ------------------------------------------------------ */

static cudaStream_t cap_stream;

/* Ends cap_stream's capture expecting want; a graph only on success. */
static void end_capture(cudaError_t want, const char *what) {
  cudaGraph_t g = (cudaGraph_t)1;
  cudaError_t e = cudaStreamEndCapture(cap_stream, &g);
  (void)cudaGetLastError();
  EXPECT(e == want, "%s: end capture: got %s", what, cudaGetErrorName(e));
  EXPECT((e == cudaSuccess) == (g != NULL), "%s: graph %p", what, (void *)g);
  if (g)
    IS(cudaGraphDestroy(g), cudaSuccess);
}

static void *malloc_thread(void *arg) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, 64);
  (void)cudaGetLastError();
  if (e == cudaSuccess)
    cudaFree(p);
  *(cudaError_t *)arg = e;
  return NULL;
}

/* cudaMalloc from another thread, as it fares while this one captures. */
static cudaError_t malloc_elsewhere(void) {
  cudaError_t e = cudaErrorUnknown;
  pthread_t t;
  pthread_create(&t, NULL, malloc_thread, &e);
  pthread_join(t, NULL);
  return e;
}

static void *end_thread(void *arg) {
  cudaGraph_t g = NULL;
  *(cudaError_t *)arg = cudaStreamEndCapture(cap_stream, &g);
  (void)cudaGetLastError();
  return NULL;
}

/* What capture forbids, one rule at a time; each broken rule ends the
 * capture with cudaErrorStreamCaptureInvalidated unless said. */
static void test_capture_refusals(cudaStream_t s, void *dev, void *pinned) {
  cudaStream_t s3, nb;
  cudaEvent_t ev, out;
  enum cudaStreamCaptureStatus st;
  IS(cudaStreamCreate(&s3), cudaSuccess);
  IS(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
  IS(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
  IS(cudaEventCreateWithFlags(&out, cudaEventDisableTiming), cudaSuccess);
  cap_stream = s;

  IS(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal),
     cudaErrorStreamCaptureUnsupported);
  IS(cudaStreamBeginCapture(s, (enum cudaStreamCaptureMode)7),
     cudaErrorInvalidValue);
  IS(cudaStreamEndCapture(s, (cudaGraph_t[1]){0}), cudaErrorIllegalState);

  /* synchronising or querying the capturing stream */
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal),
     cudaErrorIllegalState);
  IS(cudaStreamIsCapturing(s, &st), cudaSuccess);
  EXPECT(st == cudaStreamCaptureStatusActive, "status %d", (int)st);
  IS(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  IS(cudaStreamIsCapturing(s, &st), cudaSuccess);
  EXPECT(st == cudaStreamCaptureStatusInvalidated, "status %d", (int)st);
  IS(cudaMemsetAsync(dev, 0, 8, s), cudaErrorStreamCaptureInvalidated);
  end_capture(cudaErrorStreamCaptureInvalidated, "synchronize");
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaStreamQuery(s), cudaErrorStreamCaptureUnsupported);
  end_capture(cudaErrorStreamCaptureInvalidated, "query");

  /* the legacy stream while a blocking stream captures; not while only a
   * non-blocking one does */
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaMemsetAsync(pinned, 0, 8, NULL), cudaErrorStreamCaptureImplicit);
  end_capture(cudaErrorStreamCaptureInvalidated, "legacy stream");
  cap_stream = nb;
  IS(cudaStreamBeginCapture(nb, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaMemsetAsync(pinned, 0, 8, NULL), cudaSuccess);
  IS(cudaStreamIsCapturing(NULL, &st), cudaSuccess);
  EXPECT(st == cudaStreamCaptureStatusNone, "legacy status %d", (int)st);
  end_capture(cudaSuccess, "legacy stream, non-blocking capture");
  cap_stream = s;

  /* potentially unsafe calls, by mode */
  void *p = NULL;
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
  end_capture(cudaErrorStreamCaptureInvalidated, "cudaMalloc, global");
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT(malloc_elsewhere() == cudaErrorStreamCaptureUnsupported,
         "cudaMalloc in another thread during a global capture");
  end_capture(cudaErrorStreamCaptureInvalidated, "cudaMalloc elsewhere");
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaMemcpy(pinned, dev, 8, cudaMemcpyDeviceToHost),
     cudaErrorStreamCaptureUnsupported);
  end_capture(cudaErrorStreamCaptureInvalidated, "synchronous copy");
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
  end_capture(cudaErrorStreamCaptureInvalidated, "device synchronize");
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT(malloc_elsewhere() == cudaSuccess,
         "cudaMalloc in another thread during a thread-local capture");
  IS(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
  end_capture(cudaErrorStreamCaptureInvalidated, "cudaMalloc, thread-local");
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  IS(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
  EXPECT(m == cudaStreamCaptureModeGlobal, "old mode %d", (int)m);
  IS(cudaMalloc(&p, 64), cudaSuccess); /* relaxed: allowed */
  IS(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
  end_capture(cudaSuccess, "cudaMalloc, relaxed thread");
  IS(cudaFree(p), cudaSuccess);

  /* events recorded in a capture; waits across its boundary */
  IS(cudaEventRecord(out, nb), cudaSuccess);
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaEventRecord(ev, s), cudaSuccess);
  IS(cudaEventQuery(ev), cudaErrorCapturedEvent);
  IS(cudaEventSynchronize(ev), cudaErrorCapturedEvent);
  IS(cudaStreamWaitEvent(s, out, 0), cudaErrorStreamCaptureIsolation);
  end_capture(cudaErrorStreamCaptureInvalidated, "isolation");
  IS(cudaEventQuery(ev), cudaSuccess); /* the capture is over */

  /* forks must be joined; the capture ends where it began, in the thread
   * that began it */
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaEventRecord(ev, s), cudaSuccess);
  IS(cudaStreamWaitEvent(s3, ev, 0), cudaSuccess); /* fork */
  IS(cudaStreamIsCapturing(s3, &st), cudaSuccess);
  EXPECT(st == cudaStreamCaptureStatusActive, "forked status %d", (int)st);
  IS(cudaMemsetAsync(dev, 1, 8, s3), cudaSuccess);
  cudaGraph_t g = NULL;
  IS(cudaStreamEndCapture(s3, &g), cudaErrorStreamCaptureUnmatched);
  end_capture(cudaErrorStreamCaptureInvalidated, "unmatched");
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaEventRecord(ev, s), cudaSuccess);
  IS(cudaStreamWaitEvent(s3, ev, 0), cudaSuccess);
  IS(cudaMemsetAsync(dev, 1, 8, s3), cudaSuccess);
  end_capture(cudaErrorStreamCaptureUnjoined, "unjoined");
  IS(cudaStreamIsCapturing(s3, &st), cudaSuccess);
  EXPECT(st == cudaStreamCaptureStatusNone, "s3 left: status %d", (int)st);
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaError_t wrong = cudaSuccess;
  pthread_t t;
  pthread_create(&t, NULL, end_thread, &wrong);
  pthread_join(t, NULL);
  EXPECT(wrong == cudaErrorStreamCaptureWrongThread, "other thread: %s",
         cudaGetErrorName(wrong));
  end_capture(cudaSuccess, "after the wrong thread");

  /* two captures may not merge */
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  IS(cudaStreamBeginCapture(s3, cudaStreamCaptureModeRelaxed), cudaSuccess);
  IS(cudaEventRecord(ev, s3), cudaSuccess);
  IS(cudaStreamWaitEvent(s, ev, 0), cudaErrorStreamCaptureMerge);
  end_capture(cudaErrorStreamCaptureInvalidated, "merge");
  cap_stream = s3;
  end_capture(cudaErrorStreamCaptureInvalidated, "merge, the other");

  IS(cudaEventDestroy(ev), cudaSuccess);
  IS(cudaEventDestroy(out), cudaSuccess);
  IS(cudaStreamDestroy(s3), cudaSuccess);
  IS(cudaStreamDestroy(nb), cudaSuccess);
}

/* A captured graph runs nothing until launched, then all of it, each time
 * it is launched; forked work included. */
static void test_graph(cudaStream_t s, unsigned char *dev,
                       unsigned char *pinned) {
  kern_t k = {0, 0, -1};
  int calls = 0;
  cudaStream_t s3;
  cudaEvent_t fork, join;
  IS(cudaStreamCreate(&s3), cudaSuccess);
  IS(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  IS(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  IS(cudaMemset(dev, 0, 256), cudaSuccess);
  memset(pinned, 0, 256);
  IS(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  IS(cudaMemsetAsync(dev, 0x5a, 64, s), cudaSuccess);
  IS(cudaEventRecord(fork, s), cudaSuccess);
  IS(cudaStreamWaitEvent(s3, fork, 0), cudaSuccess);
  IS(cudaMemsetAsync(dev + 64, 0x6b, 64, s3), cudaSuccess);
  IS(cudaEventRecord(join, s3), cudaSuccess);
  IS(cudaStreamWaitEvent(s, join, 0), cudaSuccess);
  const void *ptrs[1] = {dev};
  IS(softcuda_launch((const void *)kern_run, (dim3){1, 1, 1}, (dim3){32, 1, 1},
                     0, s, kern_run, kern_release, &k, ptrs, 1),
     cudaSuccess);
  IS(cudaMemcpyAsync(pinned, dev, 128, cudaMemcpyDeviceToHost, s), cudaSuccess);
  IS(cudaLaunchHostFunc(s, count_fn, &calls), cudaSuccess);
  cudaGraph_t g = NULL;
  IS(cudaStreamEndCapture(s, &g), cudaSuccess);
  usleep(2000);
  unsigned char b[2];
  IS(cudaMemcpy(b, dev, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  IS(cudaMemcpy(b + 1, dev + 64, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT(b[0] == 0 && b[1] == 0 && k.runs == 0 && calls == 0,
         "captured work ran: %x %x runs %d calls %d", b[0], b[1], k.runs,
         calls);
  cudaGraphExec_t x = NULL;
  IS(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  IS(cudaGraphInstantiate(&x, g, 1), cudaErrorNotSupported);
  IS(cudaGraphDestroy(g), cudaSuccess); /* the instance keeps the nodes */
  IS(cudaGraphLaunch(x, s), cudaSuccess);
  IS(cudaGraphLaunch(x, s), cudaSuccess);
  IS(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT(pinned[0] == 0x5a && pinned[63] == 0x5a && pinned[64] == 0x6b &&
             pinned[127] == 0x6b,
         "graph copy: %x %x %x %x", pinned[0], pinned[63], pinned[64],
         pinned[127]);
  EXPECT(k.runs == 2 && calls == 2 && k.releases == 0,
         "two launches: runs %d calls %d releases %d", k.runs, calls,
         k.releases);
  IS(cudaGraphExecDestroy(x), cudaSuccess);
  EXPECT(k.releases == 1, "kernel arguments released %d times", k.releases);
  IS(cudaGraphExecDestroy(x), cudaErrorInvalidValue);
  IS(cudaEventDestroy(fork), cudaSuccess);
  IS(cudaEventDestroy(join), cudaSuccess);
  IS(cudaStreamDestroy(s3), cudaSuccess);
}

/* ---- other processes ----------------------------------------------------- */

/* Under SOFTCUDA_DEVICES=2: an event recorded, or a kernel launched, on a
 * stream of another device is refused; waits and copies across devices are
 * allowed, as in CUDA. */
static int child_devices(void) {
  cudaStream_t s1, s0;
  cudaEvent_t e1, e0;
  IS(cudaSetDevice(1), cudaSuccess);
  IS(cudaStreamCreate(&s1), cudaSuccess);
  IS(cudaEventCreate(&e1), cudaSuccess);
  IS(cudaSetDevice(0), cudaSuccess);
  IS(cudaStreamCreate(&s0), cudaSuccess);
  IS(cudaEventCreate(&e0), cudaSuccess);
  char *d = NULL;
  IS(cudaMalloc((void **)&d, 64), cudaSuccess);
  IS(cudaEventRecord(e0, s1), cudaErrorInvalidResourceHandle);
  IS(cudaEventRecord(e1, s0), cudaErrorInvalidResourceHandle);
  kern_t k;
  IS(launch(&k, (dim3){1, 1, 1}, (dim3){1, 1, 1}, d, s1),
     cudaErrorInvalidResourceHandle);
  EXPECT(k.runs == 0 && k.releases == 1, "other device: runs %d rel %d", k.runs,
         k.releases);
  IS(cudaEventRecord(e0, s0), cudaSuccess);
  IS(cudaStreamWaitEvent(s1, e0, 0), cudaSuccess);
  IS(cudaMemsetAsync(d, 7, 64, s1), cudaSuccess);
  IS(cudaStreamSynchronize(s1), cudaSuccess);
  IS(launch(&k, (dim3){1, 1, 1}, (dim3){1, 1, 1}, d, s0), cudaSuccess);
  IS(cudaStreamSynchronize(s0), cudaSuccess);
  EXPECT(k.runs == 1, "own device: runs %d", k.runs);
  IS(cudaFree(d), cudaSuccess);
  return failed ? 1 : 0;
}

static void read_handle(const char *hex, cudaIpcMemHandle_t *h) {
  for (size_t i = 0; i < sizeof *h; i++)
    sscanf(hex + 2 * i, "%2hhx", (unsigned char *)&h->reserved[i]);
}

/* Work queued on an IPC mapping that is closed before the work runs: the
 * work faults (cudaErrorIllegalAddress) and the error is sticky. */
static int child_freed(const char *hex) {
  cudaIpcMemHandle_t h;
  read_handle(hex, &h);
  void *p = NULL;
  uint32_t *flag = NULL;
  cudaStream_t s;
  IS(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), cudaSuccess);
  IS(cudaHostAlloc((void **)&flag, 4096, cudaHostAllocMapped), cudaSuccess);
  IS(cudaStreamCreate(&s), cudaSuccess);
  wait32_fn wait32 = (wait32_fn)entry("cuStreamWaitValue32");
  *flag = 0;
  EXPECT(wait32 && wait32(s, (CUdeviceptr)(uintptr_t)flag, 1,
                          CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS,
         "wait32");
  IS(cudaMemcpyAsync(flag + 64, p, 64, cudaMemcpyDeviceToHost, s), cudaSuccess);
  IS(cudaIpcCloseMemHandle(p), cudaSuccess);
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
  IS(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
  void *q = NULL;
  EXPECT(cudaMalloc(&q, 64) == cudaErrorIllegalAddress, "not sticky");
  EXPECT(cudaGetLastError() == cudaErrorIllegalAddress &&
             cudaGetLastError() == cudaErrorIllegalAddress,
         "last error not sticky");
  EXPECT(flag[64] == 0, "the copy ran: %x", flag[64]);
  return failed ? 1 : 0;
}

/* Runs this program again with args (and env NAME=VALUE, if name). */
static int run_child(const char *self, const char *mode, const char *arg,
                     const char *name, const char *value) {
  pid_t pid = fork();
  if (pid == 0) {
    if (name)
      setenv(name, value, 1);
    execl("/proc/self/exe", self, mode, arg, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The other process: opens the handle twice (one mapping), checks and
 * rewrites the bytes. */
static int child(const char *hex) {
  cudaIpcMemHandle_t h;
  read_handle(hex, &h);
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
  /* a memset of device memory returns before it ran: each is waited for
   * before its mapping is closed */
  IS(cudaMemset(p, 0x22, sizeof buf), cudaSuccess);
  IS(cudaDeviceSynchronize(), cudaSuccess);
  IS(cudaIpcCloseMemHandle(p), cudaSuccess);
  IS(cudaMemset(p, 0x22, 1), cudaSuccess); /* still open once */
  IS(cudaDeviceSynchronize(), cudaSuccess);
  IS(cudaIpcCloseMemHandle(q), cudaSuccess);
  IS(cudaIpcCloseMemHandle(q), cudaErrorInvalidValue);
  return failed ? 1 : 0;
}

/* Sets *gate (pinned, waited on by a stream) to its value after 50 ms. */
typedef struct {
  uint32_t *gate, value;
} opener_t;
static void *open_later(void *arg) {
  opener_t *o = arg;
  usleep(50000);
  __atomic_store_n(o->gate, o->value, __ATOMIC_RELEASE);
  return NULL;
}

/* Holds blocking stream s at a wait on *gate for value, opened 50 ms later
 * by a thread (joined by the caller). The legacy stream's next work waits
 * for s: a synchronous copy queued there meanwhile has not landed. */
static void hold(wait32_fn wait32, cudaStream_t s, opener_t *o, uint32_t v,
                 pthread_t *th) {
  o->value = v;
  EXPECT(wait32(s, (CUdeviceptr)(uintptr_t)o->gate, v,
                CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS,
         "wait32");
  pthread_create(th, NULL, open_later, o);
}

/* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS (what GPUDirect RDMA asks of memory a
 * NIC reads outside every stream): without it a cudaMemcpy from pageable
 * memory into device memory returns before the bytes land; setting it
 * waits for such a copy, and from then on copies and memsets into the
 * allocation return only once they landed; cleared, they are asynchronous
 * again. Device memory is host-readable here, which is how the test
 * looks. */
static void test_sync_memops(wait32_fn wait32, cudaStream_t s, char *d,
                             char *h) {
  setattr_fn set = (setattr_fn)entry("cuPointerSetAttribute");
  EXPECT(set != NULL, "no cuPointerSetAttribute");
  if (!set)
    return;
  volatile char *vd = d;
  char src[16];
  unsigned one = 1, zero = 0;
  opener_t o = {(uint32_t *)(h + 1024), 0};
  *o.gate = 0;
  pthread_t th;
  IS(cudaMemset(d, 0, 16), cudaSuccess);
  IS(cudaDeviceSynchronize(), cudaSuccess);

  hold(wait32, s, &o, 1, &th);
  memset(src, 0x5a, sizeof src);
  IS(cudaMemcpy(d, src, sizeof src, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT(vd[0] == 0, "a pageable cudaMemcpy landed behind a held stream");
  EXPECT(set(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
             (CUdeviceptr)(uintptr_t)(d + 8)) == CUDA_SUCCESS,
         "cuPointerSetAttribute(SYNC_MEMOPS)");
  EXPECT(vd[0] == 0x5a && vd[15] == 0x5a,
         "setting SYNC_MEMOPS returned before the pending copy landed");
  pthread_join(th, NULL);

  hold(wait32, s, &o, 2, &th);
  memset(src, 0x6b, sizeof src);
  IS(cudaMemcpy(d, src, sizeof src, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT(vd[0] == 0x6b && vd[15] == 0x6b,
         "a pageable cudaMemcpy into a SYNC_MEMOPS allocation returned before "
         "it landed");
  pthread_join(th, NULL);
  hold(wait32, s, &o, 3, &th);
  IS(cudaMemset(d, 0x7c, 16), cudaSuccess);
  EXPECT(vd[0] == 0x7c && vd[15] == 0x7c,
         "a cudaMemset of a SYNC_MEMOPS allocation returned before it landed");
  pthread_join(th, NULL);

  EXPECT(set(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
             (CUdeviceptr)(uintptr_t)h) == CUDA_ERROR_INVALID_VALUE,
         "SYNC_MEMOPS on pinned host memory accepted");
  EXPECT(set(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
             (CUdeviceptr)(uintptr_t)src) == CUDA_ERROR_INVALID_VALUE,
         "SYNC_MEMOPS on pageable memory accepted");
  EXPECT(set(NULL, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
             (CUdeviceptr)(uintptr_t)d) == CUDA_ERROR_INVALID_VALUE,
         "a NULL value accepted");

  EXPECT(set(&zero, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
             (CUdeviceptr)(uintptr_t)d) == CUDA_SUCCESS,
         "clearing SYNC_MEMOPS");
  hold(wait32, s, &o, 4, &th);
  IS(cudaMemset(d, 0x11, 16), cudaSuccess);
  EXPECT(vd[0] == 0x7c, "SYNC_MEMOPS cleared, a memset still waited");
  pthread_join(th, NULL);
  IS(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT(vd[0] == 0x11, "the memset never landed");
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--child"))
    return child(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--freed"))
    return child_freed(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--devices"))
    return child_devices();
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
  test_lazy_load(wait32, s, nb, d, flag);

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
  /* the memset returns before it lands (device memory): without this it
   * may land after the child's writes, as on a GPU */
  IS(cudaDeviceSynchronize(), cudaSuccess);
  IS(cudaIpcGetMemHandle(&ih, d + 5), cudaSuccess);
  void *self = NULL;
  IS(cudaIpcOpenMemHandle(&self, ih, cudaIpcMemLazyEnablePeerAccess),
     cudaErrorDeviceUninitialized);
  IS(cudaIpcGetMemHandle(&ih, h), cudaErrorInvalidValue);
  IS(cudaIpcGetMemHandle(&ih, d), cudaSuccess);
  char hex[2 * sizeof ih + 1];
  for (size_t i = 0; i < sizeof ih; i++)
    sprintf(hex + 2 * i, "%02x", (unsigned char)ih.reserved[i]);
  int rc = run_child(argv[0], "--child", hex, NULL, NULL);
  EXPECT(rc == 0, "child exit %d", rc);
  unsigned char back[2];
  IS(cudaMemcpy(back, d + 4095, 1, cudaMemcpyDefault), cudaSuccess);
  IS(cudaMemcpy(back + 1, d, 1, cudaMemcpyDefault), cudaSuccess);
  EXPECT(back[0] == 0x22 && back[1] == 0x22, "child's bytes %x %x", back[0],
         back[1]);

  rc = run_child(argv[0], "--freed", hex, NULL, NULL);
  EXPECT(rc == 0, "--freed child exit %d", rc);
  rc = run_child(argv[0], "--devices", "-", "SOFTCUDA_DEVICES", "2");
  EXPECT(rc == 0, "--devices child exit %d", rc);

  /* an IPC handle only of cudaMalloc memory; pageable memory in copies: an
   * async copy may read it (CUDA stages it), a device-to-device one not */
  IS(cudaIpcGetMemHandle(&ih, host), cudaErrorInvalidValue);
  IS(cudaMemcpyAsync(d, host, 8, cudaMemcpyHostToDevice, s), cudaSuccess);
  IS(cudaMemcpyAsync(d, host, 8, cudaMemcpyDeviceToDevice, s),
     cudaErrorInvalidValue);
  IS(cudaStreamSynchronize(s), cudaSuccess);

  test_launch(s, d, h);
  test_capture_refusals(s, d, h);
  test_graph(s, (unsigned char *)d, (unsigned char *)h);
  test_sync_memops(wait32, s, d, h);

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

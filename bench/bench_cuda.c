/*
 * bench_cuda.c - the CUDA side of sharc-bench (--mem cuda): the device of
 * this rank (local rank % devices: ranks share device 0 on the usual one-GPU
 * machine), the one cudaStream_t every backend enqueues on, device buffers
 * with their host-side fill and read-back, and the GPU's own copy rate, the
 * ceiling the device-memory results are printed against.
 *
 * Built with the CUDA runtime when sharc is (SHARC_HAVE_CUDA); otherwise the
 * probe reports that the build has no CUDA and --mem cuda skips.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static char err[256];

const char *bench_cuda_error(void) { return err; }

#ifdef SHARC_HAVE_CUDA

#include <cuda_runtime_api.h>

#define D2D_BYTES ((size_t)256 << 20) /* far past any L2: memory to memory */

static int ndev, dev = -1;
static cudaStream_t stream;

static int fail(const char *what, cudaError_t e) {
  snprintf(err, sizeof err, "%s: %s: %s", what, cudaGetErrorName(e),
           cudaGetErrorString(e));
  (void)cudaGetLastError(); /* clear a non-sticky error */
  return -1;
}

int bench_cuda_probe(char *why, size_t n) {
  int cnt = 0;
  cudaError_t e = cudaGetDeviceCount(&cnt);
  if (e != cudaSuccess) {
    snprintf(why, n, "cudaGetDeviceCount: %s: %s", cudaGetErrorName(e),
             cudaGetErrorString(e));
    return 0;
  }
  if (cnt <= 0)
    snprintf(why, n, "cudaGetDeviceCount found no device");
  return ndev = cnt > 0 ? cnt : 0;
}

int bench_cuda_setup(int local_rank) {
  if (ndev <= 0) {
    snprintf(err, sizeof err, "no CUDA device (call the probe first)");
    return -1;
  }
  int d = (local_rank < 0 ? 0 : local_rank) % ndev;
  cudaError_t e = cudaSetDevice(d);
  if (e != cudaSuccess)
    return fail("cudaSetDevice", e);
  /* non-blocking: nothing of the legacy default stream orders it */
  if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) !=
      cudaSuccess)
    return fail("cudaStreamCreateWithFlags", e);
  dev = d;
  return 0;
}

void *bench_cuda_stream(void) { return stream; }
int bench_cuda_device(void) { return dev; }
int bench_cuda_ndev(void) { return ndev; }

void bench_cuda_describe(char *buf, size_t n) {
  struct cudaDeviceProp p;
  if (dev < 0 || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    snprintf(buf, n, "[?] CUDA device %d", dev);
    return;
  }
  snprintf(buf, n, "[%04x:%02x:%02x] %s", p.pciDomainID, p.pciBusID,
           p.pciDeviceID, p.name);
}

int bench_cuda_alloc(void **p, size_t bytes) {
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    *p = NULL;
    char what[64];
    snprintf(what, sizeof what, "cudaMalloc(%zu)", bytes);
    return fail(what, e);
  }
  return 0;
}

void bench_cuda_free(void *p) {
  if (p)
    (void)cudaFree(p);
}

int bench_cuda_sync(void) {
  cudaError_t e = cudaStreamSynchronize(stream);
  return e == cudaSuccess ? 0 : fail("cudaStreamSynchronize", e);
}

int bench_cuda_copy(void *dst, const void *src, size_t bytes) {
  if (!bytes)
    return 0;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
  return e == cudaSuccess ? bench_cuda_sync() : fail("cudaMemcpyAsync", e);
}

int bench_cuda_memset(void *p, int v, size_t bytes) {
  if (!bytes)
    return 0;
  cudaError_t e = cudaMemsetAsync(p, v, bytes, stream);
  return e == cudaSuccess ? bench_cuda_sync() : fail("cudaMemsetAsync", e);
}

/* One D2D copy of D2D_BYTES timed with events on the bench's stream, best
 * of 5 after one untimed copy (first touch, clocks up): the rate of the
 * copy path every same-GPU transfer shares. Bytes counted once. */
double bench_cuda_d2d_rate(void) {
  void *a = NULL, *b = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  double best = 0;
  cudaError_t e = cudaMalloc(&a, D2D_BYTES);
  if (e == cudaSuccess)
    e = cudaMalloc(&b, D2D_BYTES);
  if (e == cudaSuccess)
    e = cudaEventCreate(&e0);
  if (e == cudaSuccess)
    e = cudaEventCreate(&e1);
  if (e == cudaSuccess)
    e = cudaMemsetAsync(a, 1, D2D_BYTES, stream);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(b, a, D2D_BYTES, cudaMemcpyDeviceToDevice, stream);
  for (int k = 0; k < 5 && e == cudaSuccess; k++) {
    float ms = 0;
    e = cudaEventRecord(e0, stream);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(b, a, D2D_BYTES, cudaMemcpyDeviceToDevice, stream);
    if (e == cudaSuccess)
      e = cudaEventRecord(e1, stream);
    if (e == cudaSuccess)
      e = cudaEventSynchronize(e1);
    if (e == cudaSuccess)
      e = cudaEventElapsedTime(&ms, e0, e1);
    if (e == cudaSuccess && ms > 0) {
      double r = (double)D2D_BYTES / (ms * 1e-3) / 1e9;
      best = r > best ? r : best;
    }
  }
  if (e != cudaSuccess) {
    fail("device-to-device copy rate (2 x 256 MiB)", e);
    best = 0;
  }
  if (e1)
    cudaEventDestroy(e1);
  if (e0)
    cudaEventDestroy(e0);
  bench_cuda_free(b);
  bench_cuda_free(a);
  return best;
}

void bench_cuda_teardown(void) {
  if (stream)
    (void)cudaStreamDestroy(stream);
  stream = NULL;
}

#else /* sharc built without CUDA */

int bench_cuda_probe(char *why, size_t n) {
  snprintf(why, n,
           "sharc-bench was built without CUDA: configure with an nvcc on "
           "PATH or -DSHARC_WITH_CUDA=ON");
  return 0;
}

static int none(void) {
  snprintf(err, sizeof err, "sharc-bench was built without CUDA");
  return -1;
}
int bench_cuda_setup(int local_rank) {
  (void)local_rank;
  return none();
}
void *bench_cuda_stream(void) { return NULL; }
int bench_cuda_device(void) { return -1; }
int bench_cuda_ndev(void) { return 0; }
void bench_cuda_describe(char *buf, size_t n) { snprintf(buf, n, "[?] none"); }
int bench_cuda_alloc(void **p, size_t bytes) {
  (void)bytes;
  *p = NULL;
  return none();
}
void bench_cuda_free(void *p) { (void)p; }
int bench_cuda_copy(void *dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return none();
}
int bench_cuda_memset(void *p, int v, size_t bytes) {
  (void)p, (void)v, (void)bytes;
  return none();
}
int bench_cuda_sync(void) { return none(); }
double bench_cuda_d2d_rate(void) { return 0; }
void bench_cuda_teardown(void) {}

#endif /* SHARC_HAVE_CUDA */

/*
 * softcuda_kernel.c - the C wrappers of kernels/device.h on softcuda (see
 * softcuda.c): the "kernels" are kernels/reduce.c's host loops, queued on
 * a stream like any other operation, their arguments checked on the
 * allocation table first.
 */
#include <stdint.h>
#include <stdio.h>

#include "softcuda_impl.h"

#include "dtypes.h"

/* ---- kernels/device.h --------------------------------------------------- */

/* Element sizes from the dtype table the kernels are built from. */
static const size_t dtype_size[SHARC_DTYPE_COUNT] = {
#define SC_SIZE(NAME, T, C, U, LD, ST) [SHARC_##NAME] = sizeof(T),
    SHARC_KERNEL_DTYPES(SC_SIZE)
#undef SC_SIZE
};

/* Queues a host reduction / division as a "kernel" on cuda_stream. Invalid
 * arguments come back without a CUDA error (device.h); a launch that
 * device.cu would make but that would fault on a GPU (a pointer that is not
 * device memory, a range past its allocation, a stream of another device)
 * fails here, with a line on stderr, instead of corrupting memory. */
static int launch(const char *fn, int kind, sharc_dtype_t dtype, sharc_op_t op,
                  void *dst, const void *a, const void *b, size_t n,
                  int divisor, void *cuda_stream) {
  size_t es = dtype_size[dtype];
  if (((uintptr_t)dst | (uintptr_t)a | (uintptr_t)b) % es)
    return (int)cudaErrorInvalidValue; /* misaligned elements */
  cudaError_t e = sc_enter_dev(fn);
  if (e != cudaSuccess)
    return (int)sc_fail(e);
  op_t *o = sc_op_new(kind);
  if (!o)
    return (int)sc_fail(cudaErrorMemoryAllocation);
  o->u.k.dtype = dtype;
  o->u.k.op = op;
  o->u.k.dst = dst;
  o->u.k.a = a;
  o->u.k.b = b;
  o->u.k.n = n;
  o->u.k.divisor = divisor;
  size_t bytes = n * es;
  const void *ptrs[3] = {dst, a, b};
  static const char *const names[3] = {"dst", "a", "b"};
  pthread_mutex_lock(&sc_state.lock);
  stream_t *s = NULL;
  e = sc_resolve((cudaStream_t)cuda_stream, &s);
  if (e == cudaSuccess && s->device != sc_cur_dev) {
    sc_say("%s: stream of device %d, current device %d", fn, s->device,
           sc_cur_dev);
    e = cudaErrorInvalidResourceHandle;
  }
  for (int i = 0; i < 3 && e == cudaSuccess; i++) {
    int k = sc_mem_kind(ptrs[i], bytes);
    if (k != M_DEVICE && k != M_HOST) {
      sc_say("%s: %s [%p, +%zu bytes) is %s: the kernel would fault", fn,
             names[i], ptrs[i], bytes, sc_mem_name(k));
      e = cudaErrorIllegalAddress;
    }
  }
  if (e == cudaSuccess)
    e = sc_submit(s, o);
  else
    sc_op_free(o);
  pthread_mutex_unlock(&sc_state.lock);
  return (int)sc_fail(e);
}

int kernel_dev_reduce(sharc_dtype_t dtype, sharc_op_t op, void *dst,
                      const void *a, const void *b, size_t n,
                      void *cuda_stream) {
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT || (unsigned)op >= SHARC_OP_COUNT)
    return (int)cudaErrorInvalidValue;
  if (n == 0)
    return 0;
  if (!dst || !a || !b)
    return (int)cudaErrorInvalidValue;
  return launch(__func__, OP_REDUCE, dtype, op, dst, a, b, n, 1, cuda_stream);
}

int kernel_dev_div(sharc_dtype_t dtype, void *buf, size_t n, int divisor,
                   void *cuda_stream) {
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT || divisor <= 0)
    return (int)cudaErrorInvalidValue;
  if (n == 0 || divisor == 1)
    return 0;
  if (!buf)
    return (int)cudaErrorInvalidValue;
  return launch(__func__, OP_DIV, dtype, SHARC_SUM, buf, buf, buf, n, divisor,
                cuda_stream);
}

int kernel_dev_copy(void *dst, const void *src, size_t bytes,
                    void *cuda_stream) {
  if (bytes == 0 || dst == src)
    return 0;
  if (!dst || !src)
    return (int)cudaErrorInvalidValue;
  return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                              (cudaStream_t)cuda_stream);
}

void kernel_dev_versions(char *buf, size_t len) {
  int drv = 0, rt = 0;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  (void)cudaGetLastError();
  snprintf(buf, len, "driver supports CUDA %d.%d, runtime is %d.%d (softcuda)",
           drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
}

int kernel_dev_available(int *ndev, char *why, size_t whylen) {
  int count = 0;
  if (ndev)
    *ndev = 0;
  if (why && whylen)
    why[0] = '\0';
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    char ver[96];
    kernel_dev_versions(ver, sizeof ver);
    if (why && whylen)
      snprintf(why, whylen, "cudaGetDeviceCount: %s: %s; %s",
               cudaGetErrorName(e), cudaGetErrorString(e), ver);
    (void)cudaGetLastError();
    return 0;
  }
  if (ndev)
    *ndev = count;
  return 1; /* the host loops run on any "device" */
}

const char *kernel_dev_error_string(int err) {
  static _Thread_local char buf[192];
  cudaError_t e = (cudaError_t)err;
  snprintf(buf, sizeof buf, "%s: %s", cudaGetErrorName(e),
           cudaGetErrorString(e));
  return buf;
}

/*
 * devptr.c - which memory a pointer is (devptr.h): the collectives'
 * argument checks ask for every call, so a process that never used CUDA
 * gets its answer without initialising CUDA, for the cost of a clock
 * read (the caller's, with dev_first_device_ptr_at) and a dynamic-loader
 * lookup once per clock tick.
 */
#include "devptr.h"

#include <stdio.h>

#ifdef SHARC_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>

#include "core.h" /* time_coarse_ns */

int dev_have_cuda(void) { return 1; }

void *dev_driver_entry(const char *sym, unsigned long long flags, char *why,
                       size_t n) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t e = cudaGetDriverEntryPointByVersion(sym, &fn, 12000, flags, &q);
#else
  cudaError_t e = cudaGetDriverEntryPoint(sym, &fn, flags, &q);
#endif
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
    (void)cudaGetLastError();
    snprintf(why, n, "the driver has no %s (%s, query %d)", sym,
             cudaGetErrorName(e), (int)q);
    return NULL;
  }
  return fn;
}

/* 1 device memory (or managed), 0 host memory or unknown to CUDA. */
static int is_device(const void *p) {
  struct cudaPointerAttributes a;
  if (!p)
    return 0;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* dl_iterate_phdr callback: the loader's count of objects loaded so far
 * (dlpi_adds), from the first object; stops the walk there. */
static int loads_cb(struct dl_phdr_info *info, size_t size, void *out) {
  (void)size;
  *(unsigned long long *)out = info->dlpi_adds;
  return 1;
}

/* 1 if this process may own device memory (CUDA is loaded and has a
 * device), else 0. */
static int cuda_in_use(uint64_t now) {
  /* 1: CUDA has devices, -1: no driver or no device (final), 0: unknown */
  static _Atomic int state;
  /* the loader's load count when libcuda was last found missing */
  static _Atomic unsigned long long checked_loads = ~0ull;
  /* the coarse clock's time before which the load count is not read */
  static _Atomic uint64_t next_look_ns;
  int s = atomic_load_explicit(&state, memory_order_acquire);
  if (s != 0)
    return s > 0;
  /* A process that never used CUDA has not loaded the driver library (the
   * runtime loads it on its first call) and cannot own device memory:
   * answer without initialising CUDA, and ask again once the program has
   * loaded a library since (it may start using CUDA later). dlopen
   * (RTLD_NOLOAD) costs about 30 us, too much for every collective call;
   * the load count 150-200 instructions and the loader's lock, a fifth of
   * a small call's path, so it is read at most once per tick of the
   * coarse clock (1-4 ms): a driver loaded since cannot have handed out
   * device memory yet, creating its first context takes longer. */
  if (now < atomic_load_explicit(&next_look_ns, memory_order_relaxed))
    return 0;
  unsigned long long loads = 0;
  dl_iterate_phdr(loads_cb, &loads);
  if (loads == atomic_load_explicit(&checked_loads, memory_order_relaxed)) {
    atomic_store_explicit(&next_look_ns, now + 1000000, memory_order_relaxed);
    return 0;
  }
  void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!drv) {
    atomic_store_explicit(&checked_loads, loads, memory_order_relaxed);
    atomic_store_explicit(&next_look_ns, now + 1000000, memory_order_relaxed);
    return 0;
  }
  dlclose(drv);
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    (void)cudaGetLastError();
  s = e == cudaSuccess && n > 0 ? 1 : -1;
  atomic_store_explicit(&state, s, memory_order_release);
  return s > 0;
}

int dev_is_device_ptr(const void *p) {
  return p && cuda_in_use(time_coarse_ns()) && is_device(p);
}

int dev_first_device_ptr_at(const void *a, const void *b, uint64_t now) {
  if (!(a || b) || !cuda_in_use(now))
    return 0;
  return is_device(a) ? 1 : is_device(b) ? 2 : 0;
}

int dev_first_device_ptr(const void *a, const void *b) {
  return dev_first_device_ptr_at(a, b, time_coarse_ns());
}

#else /* !SHARC_HAVE_CUDA: CPU-only build */

int dev_have_cuda(void) { return 0; }

void *dev_driver_entry(const char *sym, unsigned long long flags, char *why,
                       size_t n) {
  (void)flags;
  snprintf(why, n, "%s: built without CUDA", sym);
  return NULL;
}

int dev_is_device_ptr(const void *p) {
  (void)p;
  return 0;
}

int dev_first_device_ptr_at(const void *a, const void *b, uint64_t now) {
  (void)a;
  (void)b;
  (void)now;
  return 0;
}

int dev_first_device_ptr(const void *a, const void *b) {
  return dev_first_device_ptr_at(a, b, 0);
}

#endif /* SHARC_HAVE_CUDA */

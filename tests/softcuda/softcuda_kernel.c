/*
 * softcuda_kernel.c - kernel launches on softcuda (see softcuda.c): the
 * project's device code, compiled as host C++ through cuda_host.h, queues
 * each launch here (softcuda_launch), checked as a GPU checks it; the
 * stream's worker then runs the whole grid, one (block, thread) after
 * another, in forward order or, with SOFTCUDA_GRID_ORDER=reverse, in
 * reverse order. No kernel has a host stand-in.
 *
 * Lazy loading, as CUDA does it by default since 12.2 (CUDA_MODULE_LOADING
 * unset or LAZY): a kernel is loaded into a device's context the first time
 * it is launched there, or asked for (cudaFuncGetAttributes), and loading
 * may synchronize the context (the CUDA programming guide, "Lazy Loading",
 * potential hazards). softcuda always does: the first launch of a kernel on
 * a device waits until every stream of that device finished what was
 * queued before it. So a thread that launches a kernel for the first time
 * while a stream of the device waits for something only that thread (or a
 * thread waiting for it) will do hangs here as on a GPU; after 10 s it says
 * so on stderr, and keeps waiting. CUDA_MODULE_LOADING=EAGER loads
 * everything up front: no wait. Launches into a capturing stream load
 * without waiting (the capture forbids synchronizing).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "softcuda_impl.h"

#pragma GCC visibility push(default)
#include "softcuda_launch.h"
#pragma GCC visibility pop

/* The limits of fill_props (softcuda.c): an H100's. */
#define MAX_BLOCK_THREADS 1024u
#define MAX_BLOCK_X 1024u
#define MAX_BLOCK_Y 1024u
#define MAX_BLOCK_Z 64u
#define MAX_GRID_X 2147483647u
#define MAX_GRID_YZ 65535u
#define MAX_SHARED (48u << 10)

/* SOFTCUDA_GRID_ORDER: forward (default) or reverse; anything else is
 * refused once, loudly, and runs forward. */
static int grid_reverse(void) {
  static int v = -1;
  if (v < 0) {
    const char *s = getenv("SOFTCUDA_GRID_ORDER");
    v = s && !strcmp(s, "reverse");
    if (s && *s && strcmp(s, "reverse") && strcmp(s, "forward"))
      sc_say("SOFTCUDA_GRID_ORDER=%s: use forward or reverse; running "
             "forward",
             s);
  }
  return v;
}

/* Why grid x block (with shared_mem bytes) cannot launch, or NULL. */
static const char *bad_config(dim3 g, dim3 b, size_t shared_mem) {
  if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z)
    return "a zero grid or block dimension";
  if (b.x > MAX_BLOCK_X || b.y > MAX_BLOCK_Y || b.z > MAX_BLOCK_Z)
    return "a block dimension past the device's maximum (1024, 1024, 64)";
  if ((uint64_t)b.x * b.y * b.z > MAX_BLOCK_THREADS)
    return "more than 1024 threads per block";
  if (g.x > MAX_GRID_X || g.y > MAX_GRID_YZ || g.z > MAX_GRID_YZ)
    return "a grid dimension past the device's maximum (2^31-1, 65535, "
           "65535)";
  if (shared_mem > MAX_SHARED)
    return "more than 48 KiB of dynamic shared memory";
  return NULL;
}

/* ---- lazy loading (lock held) ------------------------------------------- */

typedef struct {
  const void *func;
  uint32_t devices; /* bit d: loaded into device d's context */
} loaded_t;

static loaded_t *loaded;
static size_t nloaded, loaded_cap;

static int lazy_loading(void) {
  static int v = -1;
  if (v < 0) {
    const char *m = getenv("CUDA_MODULE_LOADING");
    v = !(m && !strcmp(m, "EAGER"));
  }
  return v;
}

static loaded_t *loaded_find(const void *func) {
  for (size_t i = 0; i < nloaded; i++)
    if (loaded[i].func == func)
      return &loaded[i];
  if (nloaded == loaded_cap) {
    size_t cap = loaded_cap ? 2 * loaded_cap : 64;
    loaded_t *p = realloc(loaded, cap * sizeof *p);
    if (!p)
      return NULL;
    loaded = p;
    loaded_cap = cap;
  }
  loaded[nloaded] = (loaded_t){.func = func, .devices = 0};
  return &loaded[nloaded++];
}

/* Whether every stream of device dev finished what was queued on it. */
static int device_idle(int dev) {
  for (stream_t *s = sc_state.streams; s; s = s->next)
    if (s->device == dev && s->done < s->queued)
      return 0;
  return 1;
}

/* Loads func into the current device's context: the first time, waits
 * (sync: unless capturing) until the device is idle, as CUDA's loading may
 * synchronize the context. fn: the API call, for the warning. */
static void load_kernel(const void *func, int sync, const char *fn) {
  int dev = sc_cur_dev;
  if (!lazy_loading() || dev < 0 || dev >= MAX_DEVICES)
    return;
  loaded_t *l = loaded_find(func);
  if (!l || (l->devices & (1u << dev)))
    return;
  struct timespec t0;
  clock_gettime(CLOCK_REALTIME, &t0);
  int said = 0;
  while (sync && !device_idle(dev) && sc_state.sticky == cudaSuccess) {
    struct timespec until = t0;
    until.tv_sec += said ? 3600 : 10;
    if (pthread_cond_timedwait(&sc_state.done, &sc_state.lock, &until) ==
            ETIMEDOUT &&
        !said) {
      said = 1;
      sc_say("%s: loading kernel %p into device %d's context (lazy loading, "
             "CUDA's default: CUDA_MODULE_LOADING=LAZY) synchronizes the "
             "context, and a stream of the device has not finished its work "
             "for 10 s: it may wait for this very thread (deadlock, as on a "
             "GPU). Load kernels up front (cudaFuncGetAttributes) before "
             "queueing such waits, or set CUDA_MODULE_LOADING=EAGER",
             fn, func, dev);
    }
  }
  l = loaded_find(func); /* the table may have moved meanwhile */
  if (l)
    l->devices |= 1u << dev;
}

/* Kernels queued in this process (softcuda_kernel_launches). */
static _Atomic unsigned long long launches;

unsigned long long softcuda_kernel_launches(void) {
  return atomic_load(&launches);
}

cudaError_t softcuda_launch(const void *func, dim3 grid, dim3 block,
                            size_t shared_mem, cudaStream_t stream,
                            void (*run)(void *ctx, int reverse),
                            void (*release)(void *ctx), void *ctx,
                            const void *const *ptrs, int nptrs) {
  static const char fn[] = "cudaLaunchKernel";
  cudaError_t e = sc_enter_dev(fn);
  if (e != cudaSuccess) {
    release(ctx);
    return sc_fail(e);
  }
  const char *why = func ? bad_config(grid, block, shared_mem) : NULL;
  if (!func || why) {
    sc_say("%s: grid (%u, %u, %u) x block (%u, %u, %u): %s", fn, grid.x, grid.y,
           grid.z, block.x, block.y, block.z, func ? why : "no kernel");
    release(ctx);
    return sc_fail(func ? cudaErrorInvalidConfiguration
                        : cudaErrorInvalidDeviceFunction);
  }
  op_t *o = sc_op_new(OP_KERNEL);
  if (!o) {
    release(ctx);
    return sc_fail(cudaErrorMemoryAllocation);
  }
  atomic_fetch_add(&launches, 1);
  o->u.kern.run = run;
  o->u.kern.release = release;
  o->u.kern.ctx = ctx;
  o->u.kern.reverse = grid_reverse();
  if (nptrs > 0) {
    o->u.kern.ptrs = malloc((size_t)nptrs * sizeof *o->u.kern.ptrs);
    if (!o->u.kern.ptrs) {
      sc_op_free(o); /* releases ctx */
      return sc_fail(cudaErrorMemoryAllocation);
    }
    memcpy(o->u.kern.ptrs, ptrs, (size_t)nptrs * sizeof *ptrs);
    o->u.kern.nptrs = nptrs;
  }
  pthread_mutex_lock(&sc_state.lock);
  stream_t *s = NULL;
  e = sc_resolve(stream, &s);
  if (e == cudaSuccess && s->device != sc_cur_dev) {
    sc_say("%s: a stream of device %d while device %d is current", fn,
           s->device, sc_cur_dev);
    e = cudaErrorInvalidResourceHandle;
  }
  if (e == cudaSuccess) { /* may wait, the lock released meanwhile */
    load_kernel(func, !s->cap, fn);
    e = sc_resolve(stream, &s); /* it may be gone since */
  }
  /* A GPU reaches device memory and pinned host memory; a pointer to
   * pageable or freed memory makes the kernel fault. */
  for (int i = 0; i < nptrs && e == cudaSuccess; i++) {
    int k = ptrs[i] ? sc_mem_kind(ptrs[i], 1) : M_DEVICE;
    if (k != M_DEVICE && k != M_HOST) {
      sc_say("%s: pointer argument %p is %s: the kernel would fault", fn,
             ptrs[i], sc_mem_name(k));
      e = cudaErrorIllegalAddress;
    }
  }
  if (e == cudaSuccess) {
    e = sc_submit(s, o); /* takes o: released after it ran */
  } else {
    o->u.kern.release = NULL;
    sc_op_free(o);
    release(ctx);
  }
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

/* The runtime's untyped launch: device code compiled through cuda_host.h
 * always reaches the typed one. */
cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block,
                             void **args, size_t shared_mem,
                             cudaStream_t stream) {
  (void)grid;
  (void)block;
  (void)args;
  (void)shared_mem;
  (void)stream;
  sc_say("cudaLaunchKernel(%p): an untyped launch; softcuda runs kernels "
         "launched from device code compiled through cuda_host.h",
         func);
  return sc_fail(cudaErrorInvalidDeviceFunction);
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr,
                                  const void *func) {
  ENTER_DEV();
  if (!attr)
    return sc_fail(cudaErrorInvalidValue);
  if (!func)
    return sc_fail(cudaErrorInvalidDeviceFunction);
  pthread_mutex_lock(&sc_state.lock);
  load_kernel(func, 1, "cudaFuncGetAttributes");
  pthread_mutex_unlock(&sc_state.lock);
  memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = (int)MAX_BLOCK_THREADS;
  attr->numRegs = 32;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  attr->maxDynamicSharedSizeBytes = (int)MAX_SHARED;
  return cudaSuccess;
}

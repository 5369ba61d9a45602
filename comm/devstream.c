/*
 * devstream.c - collectives on device memory through pinned host staging
 * (issue 5 item 4): the baseline GPU data path, ordered on the caller's
 * cudaStream_t with NCCL's semantics (the call returns at once; the work
 * happens in stream order).
 *
 * One collective enqueued on a CUDA-bound sharc stream becomes, on the CUDA
 * stream (queued by dev_stage in the caller's thread):
 *
 *   D2H copy  send buffer -> staging          (skipped for host memory)
 *   event     E_k          "the send data is staged"
 *   wait      release word >= k               (cuStreamWaitValue32)
 *   H2D copy  staging -> receive buffer       (skipped for host memory)
 *
 * and, on the sharc stream's worker thread (stream.c): sleep on E_k
 * (cudaEventBlockingSync), run the host collective on the staging buffers,
 * store k into the release word. The release is stored whatever happened
 * (error, skip after an earlier error, a dead peer): the CUDA stream is
 * never left waiting, and the error becomes the stream's sticky error.
 *
 * Nothing spins on the GPU or the CPU (DESIGN.md 7 and 8): the worker
 * sleeps in cudaEventSynchronize; the stream's wait is a semaphore acquire
 * handled by the GPU's front end, not a kernel, so the ranks sharing one
 * GPU keep their time slices. Where the driver has no stream memory
 * operations the wait is a cudaLaunchHostFunc that sleeps on a condition
 * variable until the worker released that call. CUDA may run the host
 * functions of all streams on one thread, so with that fallback two
 * CUDA-bound sharc streams of one process can deadlock (one's host function
 * holds the thread while the other's earlier call waits behind its own):
 * keep to one per process there.
 *
 * Reductions run on the host here (this path is the baseline); the cudaipc
 * transport will add zero-copy device reductions with kernel_dev_reduce.
 *
 * Staging: one pinned buffer per stream, reused by every call. Calls on one
 * CUDA stream use it one after another by construction: call k+1's D2H copy
 * is queued behind call k's H2D copy, which waits for call k's release. A
 * call that needs more replaces it by a larger one; the old buffer may still
 * serve calls in flight, so it is freed only at the next synchronize.
 */
#include "devstream.h"

#include "device.h" /* kernels/: kernel_dev_versions */
#include "devipc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SHARC_HAVE_CUDA

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>

/* cuStreamWaitValue32 (the _v2 entry point of CUDA 11.7+), reached through
 * the runtime so that nothing links against libcuda. */
typedef CUresult (*wait_value32_fn)(CUstream stream, CUdeviceptr addr,
                                    cuuint32_t value, unsigned int flags);

#define STAGE_ALIGN 256         /* bytes: start of the receive region */
#define STAGE_ROUND (64u << 10) /* staging sizes are multiples of this */
#define HOLD_FALLBACK "host function"

static const char *const coll_fn[SCHED_COLL_COUNT] = {
    "sharc_all_gather", "sharc_reduce_scatter", "sharc_all_reduce",
    "sharc_broadcast", "sharc_barrier"};

typedef struct stage_buf {
  struct stage_buf *next;
  void *p;
} stage_buf_t;

struct dev_stream {
  cudaStream_t cs;
  int device;
  wait_value32_fn wait32; /* NULL: release through a host function */
  _Atomic uint32_t *flag; /* release word: pinned, mapped; the worker writes */
  CUdeviceptr flag_dev;   /* its device address */

  /* enqueueing side (serialised by the caller, see dev_stage) */
  void *stage;
  size_t stage_bytes;
  uint32_t next_seq; /* release number of the last staged call */

  pthread_mutex_t lock; /* everything below */
  pthread_cond_t cond;  /* released advanced (host-function fallback) */
  uint32_t released;    /* release number of the last released call */
  stage_buf_t *retired; /* outgrown staging, possibly still in use */
  cudaEvent_t *pool;    /* idle events */
  int npool, pool_cap;

  int worker_bound; /* the worker thread made ds->device current */

  /* the CUDA IPC path (devipc.c): its copies and reductions, and the event
   * the worker sleeps on; made by the first IPC call (dev_stage) */
  cudaStream_t ipc_cs;
  cudaEvent_t ipc_ev;
};

/* Records a failed CUDA call; clears the runtime's last error so the caller
 * of sharc does not find ours in cudaGetLastError. */
static sharc_status_t cuda_fail(cudaError_t e, const char *fn,
                                const char *what) {
  (void)cudaGetLastError();
  return err_set(SHARC_ERR_CUDA, "%s on a CUDA stream: %s: %s: %s", fn, what,
                 cudaGetErrorName(e), cudaGetErrorString(e));
}

/* ---- device pointers ------------------------------------------------------
 */

int dev_have_cuda(void) { return 1; }

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
static int cuda_in_use(void) {
  /* 1: CUDA has devices, -1: no driver or no device (final), 0: unknown */
  static _Atomic int state;
  /* the loader's load count when libcuda was last found missing */
  static _Atomic unsigned long long checked_loads = ~0ull;
  int s = atomic_load_explicit(&state, memory_order_acquire);
  if (s != 0)
    return s > 0;
  /* A process that never used CUDA has not loaded the driver library (the
   * runtime loads it on its first call) and cannot own device memory:
   * answer without initialising CUDA, and ask again once the program has
   * loaded a library since (it may start using CUDA later). The load count
   * costs tens of ns; dlopen(RTLD_NOLOAD) about 30 us, too much for every
   * collective call. */
  unsigned long long loads = 0;
  dl_iterate_phdr(loads_cb, &loads);
  if (loads == atomic_load_explicit(&checked_loads, memory_order_relaxed))
    return 0;
  void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!drv) {
    atomic_store_explicit(&checked_loads, loads, memory_order_relaxed);
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
  return p && cuda_in_use() && is_device(p);
}

int dev_first_device_ptr(const void *a, const void *b) {
  if (!(a || b) || !cuda_in_use())
    return 0;
  return is_device(a) ? 1 : is_device(b) ? 2 : 0;
}

/* ---- events ------------------------------------------------------------- */

/* An idle event from the pool, or a new one. Events wait by sleeping
 * (cudaEventBlockingSync), never by polling, and time nothing. */
static sharc_status_t get_event(dev_stream_t *ds, const char *fn,
                                cudaEvent_t *ev) {
  pthread_mutex_lock(&ds->lock);
  *ev = ds->npool ? ds->pool[--ds->npool] : NULL;
  pthread_mutex_unlock(&ds->lock);
  if (*ev)
    return SHARC_OK;
  cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventBlockingSync |
                                                   cudaEventDisableTiming);
  return e == cudaSuccess ? SHARC_OK
                          : cuda_fail(e, fn, "cudaEventCreateWithFlags");
}

/* Returns ev to the pool (destroys it when the pool cannot grow). */
static void put_event(dev_stream_t *ds, cudaEvent_t ev) {
  pthread_mutex_lock(&ds->lock);
  if (ds->npool == ds->pool_cap) {
    int cap = ds->pool_cap ? 2 * ds->pool_cap : 8;
    cudaEvent_t *p = realloc(ds->pool, (size_t)cap * sizeof *p);
    if (p) {
      ds->pool = p;
      ds->pool_cap = cap;
    }
  }
  if (ds->npool < ds->pool_cap) {
    ds->pool[ds->npool++] = ev;
    ev = NULL;
  }
  pthread_mutex_unlock(&ds->lock);
  if (ev)
    (void)cudaEventDestroy(ev);
}

/* ---- open / close --------------------------------------------------------
 */

/* Makes dev current in this thread; *prev receives the device to restore
 * (-1: nothing to restore). */
static cudaError_t enter_device(int dev, int *prev) {
  *prev = -1;
  int cur = 0;
  cudaError_t e = cudaGetDevice(&cur);
  if (e != cudaSuccess || cur == dev)
    return e;
  e = cudaSetDevice(dev);
  if (e == cudaSuccess)
    *prev = cur;
  return e;
}

static void leave_device(int prev) {
  if (prev >= 0)
    (void)cudaSetDevice(prev);
}

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

/* The stream-ordered wait of cuStreamWaitValue32 when the device and the
 * driver offer it, else NULL (the host-function fallback); why says which.
 * Since CUDA 12 the v2 stream memory operations are on by default (the
 * CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 attribute and the driver
 * module parameter concern the deprecated v1 API); the wait needs a host
 * word the device can map, and the GEQ comparison needs no attribute (only
 * NOR does: CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR). A driver
 * that refuses the first wait anyway (CUDA_ERROR_NOT_SUPPORTED) switches the
 * stream to the fallback then (dev_stage). */
static wait_value32_fn find_wait_value32(int dev, char *why, size_t n) {
  /* SHARC_CUDA_RELEASE=hostfn tests the fallback on GPUs with the wait. */
  const char *mode = param_str(PARAM_CUDA_RELEASE);
  if (mode && !strcmp(mode, "hostfn")) {
    snprintf(why, n, "SHARC_CUDA_RELEASE=hostfn");
    return NULL;
  }
  int can_map = 0;
  if (cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, dev) !=
          cudaSuccess ||
      !can_map) {
    (void)cudaGetLastError();
    snprintf(why, n, "device %d cannot map host memory", dev);
    return NULL;
  }
  /* Legacy-stream flavour: a NULL stream means the legacy default stream,
   * as in the runtime calls of this file (built without per-thread default
   * streams). */
  void *fn =
      dev_driver_entry("cuStreamWaitValue32", cudaEnableLegacyStream, why, n);
  if (!fn)
    return NULL;
  snprintf(why, n, "cuStreamWaitValue32");
  return (wait_value32_fn)fn;
}

/* Why no device can be used, with the driver and runtime versions. */
static sharc_status_t no_device(cudaError_t e, int ndev) {
  char ver[96];
  kernel_dev_versions(ver, sizeof ver);
  if (e != cudaSuccess)
    return err_set(SHARC_ERR_CUDA,
                   "sharc_stream_create_cuda: no usable CUDA device: "
                   "cudaGetDeviceCount: %s: %s; %s",
                   cudaGetErrorName(e), cudaGetErrorString(e), ver);
  return err_set(SHARC_ERR_CUDA,
                 "sharc_stream_create_cuda: no usable CUDA device: "
                 "cudaGetDeviceCount found %d devices; %s",
                 ndev, ver);
}

sharc_status_t dev_stream_open(dev_stream_t **out, void *cuda_stream) {
  static const char fn[] = "sharc_stream_create_cuda";
  CHECK(devipc_check_env(fn));
  int ndev = 0, prev = -1;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0)
    return no_device(e, ndev);
  cudaStream_t cs = (cudaStream_t)cuda_stream;
  int dev = 0;
  e = cudaGetDevice(&dev);
#if CUDART_VERSION >= 12080
  if (e == cudaSuccess && cs)
    e = cudaStreamGetDevice(cs, &dev);
#endif
  if (e != cudaSuccess)
    return cuda_fail(e, fn,
                     "finding the stream's device (cudaStreamGetDevice)");
  e = enter_device(dev, &prev);
  if (e != cudaSuccess)
    return cuda_fail(e, fn, "cudaSetDevice");
  sharc_status_t st = SHARC_OK;
  dev_stream_t *ds = calloc(1, sizeof *ds);
  if (!ds) {
    leave_device(prev);
    return err_set(SHARC_ERR_NO_MEM, "%s: out of memory", fn);
  }
  ds->cs = cs;
  ds->device = dev;
  pthread_mutex_init(&ds->lock, NULL);
  pthread_cond_init(&ds->cond, NULL);
  void *flag = NULL;
  e = cudaHostAlloc(&flag, 64, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    st = cuda_fail(e, fn, "the release word (cudaHostAlloc, mapped)");
    goto fail;
  }
  ds->flag = flag;
  atomic_store(ds->flag, 0);
  char why[128];
  ds->wait32 = find_wait_value32(dev, why, sizeof why);
  if (ds->wait32) {
    void *dptr = NULL;
    e = cudaHostGetDevicePointer(&dptr, flag, 0);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(why, sizeof why, "cudaHostGetDevicePointer: %s",
               cudaGetErrorName(e));
      ds->wait32 = NULL;
    }
    ds->flag_dev = (CUdeviceptr)(uintptr_t)dptr;
  }
  INFO(SUB_CUDA,
       "CUDA stream %p on device %d: staged collectives, release by %s",
       cuda_stream, dev, ds->wait32 ? "cuStreamWaitValue32" : HOLD_FALLBACK);
  if (!ds->wait32)
    INFO(SUB_CUDA, "no stream wait on device %d: %s", dev, why);
  leave_device(prev);
  *out = ds;
  return SHARC_OK;
fail:
  pthread_cond_destroy(&ds->cond);
  pthread_mutex_destroy(&ds->lock);
  free(ds);
  leave_device(prev);
  return st;
}

void dev_stream_close(dev_stream_t *ds) {
  if (!ds)
    return;
  for (int i = 0; i < ds->npool; i++)
    (void)cudaEventDestroy(ds->pool[i]);
  free(ds->pool);
  for (stage_buf_t *b = ds->retired, *next; b; b = next) {
    next = b->next;
    (void)cudaFreeHost(b->p);
    free(b);
  }
  if (ds->stage)
    (void)cudaFreeHost(ds->stage);
  if (ds->flag)
    (void)cudaFreeHost((void *)ds->flag);
  if (ds->ipc_ev)
    (void)cudaEventDestroy(ds->ipc_ev);
  if (ds->ipc_cs)
    (void)cudaStreamDestroy(ds->ipc_cs);
  (void)cudaGetLastError();
  pthread_cond_destroy(&ds->cond);
  pthread_mutex_destroy(&ds->lock);
  free(ds);
}

/* ---- staging -------------------------------------------------------------
 */

/* Where one call's data goes: the staging bytes it needs, its buffers as
 * the host collective sees them (offsets into staging where staged), and
 * the two copies. */
typedef struct {
  size_t stage_bytes;
  const uint8_t *send; /* staged: offset into staging, else the user's */
  uint8_t *recv;
  int send_staged, recv_staged;
  const void *d2h_src; /* device; copied to staging + d2h_off */
  size_t d2h_off, d2h_bytes;
  void *h2d_dst; /* device; copied from staging + h2d_off */
  size_t h2d_off, h2d_bytes;
} plan_t;

/* Plans call c. In place (NCCL's layouts, sharc.h) the staging mirrors the
 * user's region so the host collective sees the same layout: all-gather's
 * recvbuf with sendbuf inside, reduce-scatter's sendbuf with recvbuf
 * inside, all-reduce's and broadcast's single buffer. Out of place the
 * staging holds [send region][receive region], each only for a buffer in
 * device memory; host memory is used where it is. */
static void plan_call(const coll_call_t *c, plan_t *p) {
  memset(p, 0, sizeof *p);
  p->send = c->sendbuf;
  p->recv = c->recvbuf;
  if (c->coll == SCHED_BARRIER)
    return;
  size_t cb = c->count * sharc_dtype_size(c->dtype);
  size_t n = (size_t)c->comm->nranks, off = (size_t)c->comm->rank * cb;
  const uint8_t *s = c->sendbuf;
  uint8_t *r = c->recvbuf;
  size_t sb = cb, rb = cb; /* bytes of the send and receive regions */
  int inplace = s == r;
  if (c->coll == SCHED_ALL_GATHER) {
    rb = n * cb;
    inplace = s == r + off;
  } else if (c->coll == SCHED_REDUCE_SCATTER) {
    sb = n * cb;
    inplace = r == s + off;
  } else if (c->coll == SCHED_BROADCAST && c->comm->rank != c->root) {
    sb = 0; /* sendbuf is read on the root only */
  }
  if (inplace) {
    const uint8_t *base = c->coll == SCHED_REDUCE_SCATTER ? s : r;
    size_t bytes = c->coll == SCHED_ALL_GATHER       ? rb
                   : c->coll == SCHED_REDUCE_SCATTER ? sb
                                                     : cb;
    if (!is_device(base))
      return; /* host memory: the collective runs on it */
    p->stage_bytes = bytes;
    p->send = (const uint8_t *)(uintptr_t)(s - base);
    p->recv = (uint8_t *)(uintptr_t)(r - base);
    p->send_staged = p->recv_staged = 1;
    p->d2h_src = s;
    p->d2h_off = (size_t)(s - base);
    p->d2h_bytes = sb;
    p->h2d_dst = r;
    p->h2d_off = (size_t)(r - base);
    p->h2d_bytes = rb;
    return;
  }
  if (!sb)
    p->send = NULL; /* broadcast off the root */
  if (sb && is_device(s)) {
    p->send = NULL; /* offset 0 */
    p->send_staged = 1;
    p->d2h_src = s;
    p->d2h_bytes = sb;
    p->stage_bytes = (sb + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN;
  }
  if (is_device(r)) {
    p->recv = (uint8_t *)(uintptr_t)p->stage_bytes;
    p->recv_staged = 1;
    p->h2d_dst = r;
    p->h2d_off = p->stage_bytes;
    p->h2d_bytes = rb;
    p->stage_bytes += rb;
  }
}

/* Makes the staging buffer at least need bytes. The old one is kept until
 * the next synchronize: calls still in flight may use it. */
static sharc_status_t ensure_stage(dev_stream_t *ds, size_t need,
                                   const char *fn) {
  if (need <= ds->stage_bytes)
    return SHARC_OK;
  size_t want = ds->stage_bytes * 2 > need ? ds->stage_bytes * 2 : need;
  if (want <= SIZE_MAX - STAGE_ROUND)
    want = (want + STAGE_ROUND - 1) / STAGE_ROUND * STAGE_ROUND;
  stage_buf_t *old = ds->stage ? malloc(sizeof *old) : NULL;
  if (ds->stage && !old)
    return err_set(SHARC_ERR_NO_MEM, "%s on a CUDA stream: out of memory", fn);
  void *p = NULL;
  cudaError_t e = cudaHostAlloc(&p, want, cudaHostAllocPortable);
  if (e != cudaSuccess && want > need) { /* the doubling was too greedy */
    (void)cudaGetLastError();
    want = need;
    e = cudaHostAlloc(&p, want, cudaHostAllocPortable);
  }
  if (e != cudaSuccess) {
    free(old);
    (void)cudaGetLastError();
    return err_set(SHARC_ERR_NO_MEM,
                   "%s on a CUDA stream: %zu bytes of pinned staging memory: "
                   "cudaHostAlloc: %s: %s; pass smaller buffers or free "
                   "pinned memory",
                   fn, need, cudaGetErrorName(e), cudaGetErrorString(e));
  }
  if (old) {
    old->p = ds->stage;
    pthread_mutex_lock(&ds->lock);
    old->next = ds->retired;
    ds->retired = old;
    pthread_mutex_unlock(&ds->lock);
  }
  TRACE(SUB_CUDA, "staging buffer %zu -> %zu bytes", ds->stage_bytes, want);
  ds->stage = p;
  ds->stage_bytes = want;
  return SHARC_OK;
}

/* Worker side of the fallback: a host function on the CUDA stream that
 * sleeps until the worker released call seq. */
typedef struct {
  dev_stream_t *ds;
  uint32_t seq;
} hold_t;

static void hold_until_released(void *arg) {
  hold_t *h = arg;
  dev_stream_t *ds = h->ds;
  pthread_mutex_lock(&ds->lock);
  while ((int32_t)(ds->released - h->seq) < 0) /* wraps as the GEQ wait */
    pthread_cond_wait(&ds->cond, &ds->lock);
  pthread_mutex_unlock(&ds->lock);
  free(h);
}

/* Queues "wait until call seq is released" on the CUDA stream. */
static sharc_status_t queue_release_wait(dev_stream_t *ds, uint32_t seq,
                                         const char *fn) {
  if (ds->wait32) {
    CUresult r = ds->wait32((CUstream)ds->cs, ds->flag_dev, seq,
                            CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_SUCCESS)
      return SHARC_OK;
    if (r != CUDA_ERROR_NOT_SUPPORTED)
      return err_set(SHARC_ERR_CUDA,
                     "%s on a CUDA stream: cuStreamWaitValue32: CUresult %d",
                     fn, (int)r);
    INFO(SUB_CUDA,
         "cuStreamWaitValue32 not supported on device %d; "
         "releasing through a host function from now on",
         ds->device);
    ds->wait32 = NULL;
  }
  hold_t *h = malloc(sizeof *h);
  if (!h)
    return err_set(SHARC_ERR_NO_MEM, "%s on a CUDA stream: out of memory", fn);
  h->ds = ds;
  h->seq = seq;
  cudaError_t e = cudaLaunchHostFunc(ds->cs, hold_until_released, h);
  if (e != cudaSuccess) {
    free(h);
    return cuda_fail(e, fn, "cudaLaunchHostFunc");
  }
  return SHARC_OK;
}

/* The IPC path's stream and event (first IPC call of ds). */
static sharc_status_t ensure_ipc(dev_stream_t *ds, const char *fn) {
  if (ds->ipc_ev)
    return SHARC_OK;
  cudaError_t e = cudaSuccess;
  if (!ds->ipc_cs)
    e = cudaStreamCreateWithFlags(&ds->ipc_cs, cudaStreamNonBlocking);
  if (e == cudaSuccess)
    e = cudaEventCreateWithFlags(&ds->ipc_ev, cudaEventBlockingSync |
                                                  cudaEventDisableTiming);
  return e == cudaSuccess ? SHARC_OK
                          : cuda_fail(e, fn, "the CUDA IPC path's stream");
}

void *dev_stream_ipc(dev_stream_t *ds, int *device, void **event) {
  *device = ds->device;
  *event = ds->ipc_ev;
  return ds->ipc_cs;
}

sharc_status_t dev_stage(dev_stream_t *ds, coll_call_t *call, dev_work_t *w) {
  const char *fn = coll_fn[call->coll];
  memset(w, 0, sizeof *w);
  plan_t p;
  /* The IPC path (devipc.h) moves the data itself on the worker: the CUDA
   * stream only marks the call (the event) and waits for its release. */
  int ipc = call->coll != SCHED_BARRIER && devipc_wanted(call->comm);
  if (ipc)
    memset(&p, 0, sizeof p);
  else
    plan_call(call, &p);
  int prev = -1;
  cudaEvent_t ev = NULL;
  cudaError_t e = enter_device(ds->device, &prev);
  if (e != cudaSuccess)
    return cuda_fail(e, fn, "cudaSetDevice");
  sharc_status_t st;
  /* A captured stream would turn the event and the wait into graph nodes
   * that no worker could follow (graphs need the device-side path). */
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(ds->cs, &cap) != cudaSuccess)
    (void)cudaGetLastError();
  if (cap != cudaStreamCaptureStatusNone) {
    st = err_set(SHARC_ERR_UNSUPPORTED,
                 "%s on a CUDA stream: the stream is being captured into a "
                 "CUDA graph; the staged path cannot be captured: enqueue "
                 "outside the capture",
                 fn);
    goto fail;
  }
  if (ipc)
    CHECK_GOTO(ensure_ipc(ds, fn), st, fail);
  else
    CHECK_GOTO(ensure_stage(ds, p.stage_bytes, fn), st, fail);
  uint8_t *stage = ds->stage;
  CHECK_GOTO(get_event(ds, fn, &ev), st, fail);
  if (p.d2h_bytes) {
    e = cudaMemcpyAsync(stage + p.d2h_off, p.d2h_src, p.d2h_bytes,
                        cudaMemcpyDefault, ds->cs);
    if (e != cudaSuccess) {
      st = cuda_fail(e, fn, "copying the send buffer to staging");
      goto fail;
    }
  }
  /* Recorded even without a copy: the host collective then still runs
   * after the work queued on the stream before it. */
  e = cudaEventRecord(ev, ds->cs);
  if (e != cudaSuccess) {
    st = cuda_fail(e, fn, "cudaEventRecord");
    goto fail;
  }
  uint32_t seq = ds->next_seq + 1;
  CHECK_GOTO(queue_release_wait(ds, seq, fn), st, fail);
  /* From here the CUDA stream waits for seq: the worker must release it,
   * so every outcome hands *w to the worker. */
  ds->next_seq = seq;
  w->ds = ds;
  w->fn = fn;
  w->event = ev;
  w->seq = seq;
  if (ipc) {
    call->ipc = ds;
    TRACE(SUB_CUDA, "%s #%u: through CUDA IPC", fn, seq);
    leave_device(prev);
    return SHARC_OK;
  }
  call->sendbuf = p.send_staged ? stage + (uintptr_t)p.send : p.send;
  call->recvbuf = p.recv_staged ? stage + (uintptr_t)p.recv : p.recv;
  st = SHARC_OK;
  if (p.h2d_bytes) {
    e = cudaMemcpyAsync(p.h2d_dst, stage + p.h2d_off, p.h2d_bytes,
                        cudaMemcpyDefault, ds->cs);
    if (e != cudaSuccess) {
      st = w->err = cuda_fail(e, fn, "copying the result from staging");
      snprintf(w->msg, sizeof w->msg, "%s", err_last());
    }
  }
  TRACE(SUB_CUDA, "%s #%u: %zu bytes staged, D2H %zu, H2D %zu", fn, seq,
        p.stage_bytes, p.d2h_bytes, p.h2d_bytes);
  leave_device(prev);
  return st;
fail:
  if (ev)
    put_event(ds, ev);
  leave_device(prev);
  return st;
}

/* ---- worker side ---------------------------------------------------------
 */

sharc_status_t dev_ready(dev_work_t *w) {
  dev_stream_t *ds = w->ds;
  if (!ds->worker_bound) { /* the worker's CUDA calls go to that device */
    if (cudaSetDevice(ds->device) != cudaSuccess)
      (void)cudaGetLastError();
    ds->worker_bound = 1;
  }
  sharc_status_t st = w->err;
  if (st != SHARC_OK)
    err_record(st, "%s", w->msg);
  if (w->event) {
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)w->event);
    if (e != cudaSuccess && st == SHARC_OK)
      st = cuda_fail(e, w->fn,
                     "waiting for the send buffer's copy to staging "
                     "(cudaEventSynchronize; an earlier kernel on the stream "
                     "may have failed)");
    put_event(ds, (cudaEvent_t)w->event);
    w->event = NULL;
  }
  return st;
}

void dev_release(dev_work_t *w) {
  dev_stream_t *ds = w->ds;
  if (!ds)
    return;
  /* Release ordering: the host collective's stores to staging are visible
   * before the device sees the number (then it copies staging out). */
  atomic_store_explicit(ds->flag, w->seq, memory_order_release);
  pthread_mutex_lock(&ds->lock);
  ds->released = w->seq;
  pthread_cond_broadcast(&ds->cond);
  pthread_mutex_unlock(&ds->lock);
}

sharc_status_t dev_stream_sync(dev_stream_t *ds) {
  static const char fn[] = "sharc_stream_synchronize";
  /* Buffers retired so far served calls queued before the event below. */
  pthread_mutex_lock(&ds->lock);
  stage_buf_t *old = ds->retired;
  ds->retired = NULL;
  pthread_mutex_unlock(&ds->lock);
  int prev = -1;
  cudaEvent_t ev = NULL;
  sharc_status_t st = SHARC_OK;
  cudaError_t e = enter_device(ds->device, &prev);
  if (e != cudaSuccess) {
    st = cuda_fail(e, fn, "cudaSetDevice");
  } else if ((st = get_event(ds, fn, &ev)) == SHARC_OK) {
    /* an event, not cudaStreamSynchronize: it sleeps whatever the
     * context's scheduling flags */
    e = cudaEventRecord(ev, ds->cs);
    if (e == cudaSuccess)
      e = cudaEventSynchronize(ev);
    if (e != cudaSuccess)
      st = cuda_fail(e, fn, "waiting for the CUDA stream");
    put_event(ds, ev);
  }
  leave_device(prev);
  if (st != SHARC_OK) { /* not known to be idle: keep them */
    pthread_mutex_lock(&ds->lock);
    for (stage_buf_t *b = old, *next; b; b = next) {
      next = b->next;
      b->next = ds->retired;
      ds->retired = b;
    }
    pthread_mutex_unlock(&ds->lock);
    return st;
  }
  for (stage_buf_t *b = old, *next; b; b = next) {
    next = b->next;
    (void)cudaFreeHost(b->p);
    free(b);
  }
  /* The stream is idle: its IPC calls hold no mapping any more. */
  if (ds->ipc_cs)
    devipc_trim();
  return SHARC_OK;
}

#else /* !SHARC_HAVE_CUDA: CPU-only build */

int dev_have_cuda(void) { return 0; }

int dev_is_device_ptr(const void *p) {
  (void)p;
  return 0;
}

int dev_first_device_ptr(const void *a, const void *b) {
  (void)a;
  (void)b;
  return 0;
}

sharc_status_t dev_stream_open(dev_stream_t **out, void *cuda_stream) {
  (void)out;
  (void)cuda_stream;
  return err_set(SHARC_ERR_UNSUPPORTED,
                 "sharc_stream_create_cuda: this sharc was built without "
                 "CUDA (SHARC_WITH_CUDA=OFF, or no nvcc at configure time); "
                 "rebuild with the CUDA toolkit to use device memory");
}

sharc_status_t dev_stage(dev_stream_t *ds, coll_call_t *call, dev_work_t *w) {
  (void)ds;
  (void)call;
  memset(w, 0, sizeof *w);
  return err_set(SHARC_ERR_UNSUPPORTED, "built without CUDA");
}

void *dev_driver_entry(const char *sym, unsigned long long flags, char *why,
                       size_t n) {
  (void)flags;
  snprintf(why, n, "%s: built without CUDA", sym);
  return NULL;
}

void *dev_stream_ipc(dev_stream_t *ds, int *device, void **event) {
  (void)ds;
  *device = -1;
  *event = NULL;
  return NULL;
}

sharc_status_t dev_ready(dev_work_t *w) { return w->err; }

void dev_release(dev_work_t *w) { (void)w; }

sharc_status_t dev_stream_sync(dev_stream_t *ds) {
  (void)ds;
  return SHARC_OK;
}

void dev_stream_close(dev_stream_t *ds) { (void)ds; }

#endif /* SHARC_HAVE_CUDA */

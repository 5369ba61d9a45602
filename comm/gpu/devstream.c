/*
 * devstream.c - collectives on device memory through pinned host staging
 *: the baseline GPU data path, ordered on the caller's
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
 * Nothing spins on the GPU or the CPU (docs/design.md, decisions 7 and 8): the
 *worker sleeps in cudaEventSynchronize; the stream's wait is a semaphore
 *acquire handled by the GPU's front end, not a kernel, so the ranks sharing one
 * GPU keep their time slices. Where the driver has no stream memory
 * operations the wait is a cudaLaunchHostFunc that sleeps on a condition
 * variable until the worker released that call. CUDA may run the host
 * functions of all streams on one thread, so with that fallback two
 * CUDA-bound sharc streams of one process can deadlock (one's host function
 * holds the thread while the other's earlier call waits behind its own):
 * keep to one per process there.
 *
 * Pipelined (devpipe.h; calls of 2 x SHARC_CUDA_PIPE_BYTES and
 * more): the copies go in groups planned on the call's schedule. Each D2H
 * group gets its own event, and the worker waits for it just before the
 * first round that touches its bytes (exec.h's hook); each H2D group gets
 * its own release number, which the worker stores right after the last
 * round that writes its bytes, so the stream copies it back while the
 * later rounds still move data:
 *
 *   D2H g0, E_k0, D2H g1, E_k1, ...   wait >= k0, H2D h0, wait >= k0+1, ...
 *
 * The last H2D group is released when the call ends, as above.
 *
 * Reductions run on the host here (this path is the baseline); the cudaipc
 * path (devipc.c) has zero-copy device reductions with kernel_dev_reduce.
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
#include "devpipe.h"
#include "exec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SHARC_HAVE_CUDA

#include <cuda.h>
#include <cuda_runtime_api.h>

/* cuStreamWaitValue32 (the _v2 entry point of CUDA 11.7+), reached through
 * the runtime so that nothing links against libcuda. */
typedef CUresult (*wait_value32_fn)(CUstream stream, CUdeviceptr addr,
                                    cuuint32_t value, unsigned int flags);

#define STAGE_ROUND (64u << 10) /* staging sizes are multiples of this */
#define HOLD_FALLBACK "host function"

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
  devipc_ctx_t ipc_ctx; /* what call->ipc points to: the three above */
};

/* Records a failed CUDA call; clears the runtime's last error so the caller
 * of sharc does not find ours in cudaGetLastError. */
static sharc_status_t cuda_fail(cudaError_t e, const char *fn,
                                const char *what) {
  (void)cudaGetLastError();
  return err_set(SHARC_ERR_CUDA, "%s on a CUDA stream: %s: %s: %s", fn, what,
                 cudaGetErrorName(e), cudaGetErrorString(e));
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

/* Where one call's data goes (devpipe.h's layout) and its user buffers. */
typedef struct {
  devpipe_layout_t l;
  const uint8_t *s; /* the call's sendbuf and recvbuf */
  uint8_t *r;
} plan_t;

static void plan_call(const coll_call_t *c, plan_t *p) {
  memset(p, 0, sizeof *p);
  p->s = c->sendbuf;
  p->r = c->recvbuf;
  if (c->coll == SCHED_BARRIER)
    return;
  int rank = c->comm->rank;
  size_t cb = c->count * sharc_dtype_size(c->dtype);
  size_t off = (size_t)rank * cb;
  int inplace = c->coll == SCHED_ALL_GATHER       ? p->s == p->r + off
                : c->coll == SCHED_REDUCE_SCATTER ? p->r == p->s + off
                                                  : p->s == p->r;
  int sdev, rdev;
  if (inplace) {
    sdev = rdev =
        dev_is_device_ptr(c->coll == SCHED_REDUCE_SCATTER ? p->s : p->r);
  } else {
    /* sendbuf is read on the broadcast root only */
    sdev = (c->coll != SCHED_BROADCAST || rank == c->root) &&
           dev_is_device_ptr(p->s);
    rdev = dev_is_device_ptr(p->r);
  }
  devpipe_layout(c->coll, rank, c->comm->nranks, c->root, cb, inplace, sdev,
                 rdev, &p->l);
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
  if (e != cudaSuccess)
    return cuda_fail(e, fn, "the CUDA IPC path's stream");
  ds->ipc_ctx = (devipc_ctx_t){ds->device, ds->ipc_cs, ds->ipc_ev};
  return SHARC_OK;
}

/* ---- pipelined copies (devpipe.h) ----------------------------------------
 */

/* Groups per direction at most: each costs an event or a release wait. */
#define PIPE_MAX_GROUPS 32

/* A pipelined call on the worker: waits before the rounds for the D2H
 * groups after the first (dev_ready waits for that one), releases after the
 * rounds the H2D groups before the last (dev_release releases that one). */
struct dev_pipe {
  exec_hook_t hook; /* first: exec.c calls back with its address */
  dev_stream_t *ds;
  struct sharc_comm *comm;
  sched_t sched; /* planned on and run (coll_call_t.sched) */
  size_t nev, ev_next;
  cudaEvent_t *ev;
  size_t *ev_round; /* ev[i] must have fired before this round */
  size_t nrel, rel_next;
  uint32_t seq_first;
  size_t *rel_round;  /* seq_first + i is final after this round */
  sharc_status_t err; /* the first failed event wait */
  char msg[192];
};

static void release_to(dev_stream_t *ds, uint32_t seq) {
  /* Release ordering: the host collective's stores to staging are visible
   * before the device sees the number (then it copies staging out). */
  atomic_store_explicit(ds->flag, seq, memory_order_release);
  pthread_mutex_lock(&ds->lock);
  ds->released = seq;
  pthread_cond_broadcast(&ds->cond);
  pthread_mutex_unlock(&ds->lock);
}

static void pipe_wait(dev_pipe_t *pp, size_t i) {
  cudaError_t e = cudaEventSynchronize(pp->ev[i]);
  if (e != cudaSuccess && pp->err == SHARC_OK) {
    /* The send data never reached staging: fail the collective on every
     * rank (the peers are in it), as any failed step does. */
    pp->err = cuda_fail(e, "staged collective",
                        "waiting for a piece of the send buffer's copy to "
                        "staging (cudaEventSynchronize)");
    snprintf(pp->msg, sizeof pp->msg, "%s", err_last());
    comm_fail(pp->comm, pp->comm->rank, pp->err, pp->msg);
  }
  put_event(pp->ds, pp->ev[i]);
  pp->ev[i] = NULL;
}

static void pipe_before(exec_hook_t *h, const sched_t *s, size_t round) {
  (void)s; /* pp->sched itself (coll_call_t.sched) */
  dev_pipe_t *pp = (dev_pipe_t *)h;
  while (pp->ev_next < pp->nev && pp->ev_round[pp->ev_next] <= round)
    pipe_wait(pp, pp->ev_next++);
}

static void pipe_after(exec_hook_t *h, const sched_t *s, size_t round) {
  (void)s;
  dev_pipe_t *pp = (dev_pipe_t *)h;
  while (pp->rel_next < pp->nrel && pp->rel_round[pp->rel_next] <= round)
    release_to(pp->ds, pp->seq_first + (uint32_t)pp->rel_next++);
}

static dev_pipe_t *pipe_new(dev_stream_t *ds, size_t nev, size_t nrel) {
  dev_pipe_t *pp = calloc(1, sizeof *pp);
  if (!pp)
    return NULL;
  pp->ev = calloc(nev ? nev : 1, sizeof *pp->ev);
  pp->ev_round = calloc(nev ? nev : 1, sizeof *pp->ev_round);
  pp->rel_round = calloc(nrel ? nrel : 1, sizeof *pp->rel_round);
  if (!pp->ev || !pp->ev_round || !pp->rel_round) {
    free(pp->ev);
    free(pp->ev_round);
    free(pp->rel_round);
    free(pp);
    return NULL;
  }
  pp->hook.before = pipe_before;
  pp->hook.after = pipe_after;
  pp->ds = ds;
  return pp;
}

static void pipe_free(dev_pipe_t *pp) {
  if (!pp)
    return;
  for (size_t i = 0; i < pp->nev; i++) /* queued before any wait: they fire */
    if (pp->ev[i])
      put_event(pp->ds, pp->ev[i]);
  free(pp->ev);
  free(pp->ev_round);
  free(pp->rel_round);
  sched_free(&pp->sched);
  free(pp);
}

/* The staged buffers of call as the host collective sees them. */
static void staged_bufs(const plan_t *p, uint8_t *stage, const void **send,
                        void **recv) {
  *send = p->l.send_staged ? stage + p->l.send_off : p->l.no_send ? NULL : p->s;
  *recv = p->l.recv_staged ? stage + p->l.recv_off : p->r;
}

/* Plans call's copies round by round into *pipe on the schedule *s the
 * worker will run (1, *s built: the caller owns it) when that makes more
 * than one group in a direction, else 0 (one copy each way). */
static int plan_pipe(const coll_call_t *call, const plan_t *p, uint8_t *stage,
                     devpipe_t *pipe, sched_t *s) {
  int64_t min = param_int(PARAM_CUDA_PIPE_BYTES);
  if (min <= 0 || call->coll == SCHED_BARRIER ||
      p->l.d2h_bytes + p->l.h2d_bytes < 2 * (uint64_t)min)
    return 0;
  coll_call_t staged = *call; /* the schedule depends on the in-place-ness */
  staged_bufs(p, stage, &staged.sendbuf, &staged.recvbuf);
  if (coll_plan(&staged, s) != SHARC_OK) {
    sched_free(s);
    return 0;
  }
  devpipe_args_t a = {
      .lay = p->l,
      .esize = sharc_dtype_size(call->dtype),
      .min_group = (size_t)min,
      .max_groups = PIPE_MAX_GROUPS,
      .h2d_at_end =
          call->op == SHARC_AVG && (call->coll == SCHED_ALL_REDUCE ||
                                    call->coll == SCHED_REDUCE_SCATTER),
  };
  int ok = devpipe_plan(s, &a, pipe) == SHARC_OK;
  if (ok && pipe->nd2h <= 1 && pipe->nh2d <= 1) {
    devpipe_free(pipe);
    ok = 0;
  }
  if (!ok)
    sched_free(s);
  return ok;
}

/* Queues pipe's copies of call on the CUDA stream: each D2H group then an
 * event (at least one: the host collective runs after the work queued
 * before it), then per H2D group a release wait and its copies (at least
 * one wait: the next call's copies must not overwrite staging in use). */
static sharc_status_t queue_copies(dev_stream_t *ds, coll_call_t *call,
                                   const plan_t *p, const devpipe_t *pipe,
                                   sched_t *sched, dev_work_t *w,
                                   const char *fn) {
  uint8_t *stage = ds->stage;
  size_t nev = pipe->nd2h ? pipe->nd2h : 1;
  size_t nwait = pipe->nh2d ? pipe->nh2d : 1;
  dev_pipe_t *pp = NULL;
  cudaEvent_t ev0 = NULL;
  sharc_status_t st = SHARC_OK;
  cudaError_t e;
  if ((nev > 1 || nwait > 1) && !(pp = pipe_new(ds, nev - 1, nwait - 1)))
    return err_set(SHARC_ERR_NO_MEM, "%s on a CUDA stream: out of memory", fn);
  if (pp) { /* the schedule the copies are planned on: the worker runs it */
    pp->sched = *sched;
    sched_init(sched);
  }
  for (size_t g = 0; g < nev; g++) {
    const devpipe_group_t *gr = g < pipe->nd2h ? &pipe->d2h[g] : NULL;
    for (size_t i = 0; gr && i < gr->npieces; i++) {
      const devpipe_piece_t *pc = &pipe->pieces[gr->first + i];
      e = cudaMemcpyAsync(stage + pc->off, p->s + (pc->off - p->l.d2h_off),
                          pc->len, cudaMemcpyDefault, ds->cs);
      if (e != cudaSuccess) {
        st = cuda_fail(e, fn, "copying the send buffer to staging");
        goto fail;
      }
    }
    cudaEvent_t ev;
    CHECK_GOTO(get_event(ds, fn, &ev), st, fail);
    if (g == 0) {
      ev0 = ev;
    } else {
      pp->ev[g - 1] = ev;
      pp->ev_round[g - 1] = gr->round;
      pp->nev = g;
    }
    e = cudaEventRecord(ev, ds->cs);
    if (e != cudaSuccess) {
      st = cuda_fail(e, fn, "cudaEventRecord");
      goto fail;
    }
  }
  uint32_t seq = ds->next_seq + 1;
  CHECK_GOTO(queue_release_wait(ds, seq, fn), st, fail);
  /* From here the CUDA stream waits for seq: the worker must release it,
   * so every outcome hands *w to the worker. */
  ds->next_seq = seq;
  w->ds = ds;
  w->fn = fn;
  w->event = ev0;
  w->seq = seq;
  w->pipe = pp;
  staged_bufs(p, stage, &call->sendbuf, &call->recvbuf);
  if (pp) {
    pp->seq_first = seq;
    pp->comm = call->comm;
    call->hook = &pp->hook;
    call->sched = &pp->sched;
  }
  for (size_t j = 0; j < nwait && st == SHARC_OK; j++) {
    if (j > 0) {
      if ((st = queue_release_wait(ds, seq + (uint32_t)j, fn)) != SHARC_OK)
        break;
      ds->next_seq = w->seq = seq + (uint32_t)j;
      pp->rel_round[j - 1] = pipe->h2d[j - 1].round; /* no longer the last */
      pp->nrel = j;
    }
    const devpipe_group_t *gr = j < pipe->nh2d ? &pipe->h2d[j] : NULL;
    for (size_t i = 0; gr && i < gr->npieces && st == SHARC_OK; i++) {
      const devpipe_piece_t *pc = &pipe->pieces[gr->first + i];
      e = cudaMemcpyAsync(p->r + (pc->off - p->l.h2d_off), stage + pc->off,
                          pc->len, cudaMemcpyDefault, ds->cs);
      if (e != cudaSuccess)
        st = cuda_fail(e, fn, "copying the result from staging");
    }
  }
  if (st != SHARC_OK) { /* the worker skips the call and releases */
    w->err = st;
    snprintf(w->msg, sizeof w->msg, "%s", err_last());
  }
  TRACE(SUB_CUDA, "%s #%u: %zu bytes staged, D2H %zu in %zu, H2D %zu in %zu",
        fn, seq, p->l.stage_bytes, p->l.d2h_bytes, nev, p->l.h2d_bytes, nwait);
  return st;
fail:
  if (ev0)
    put_event(ds, ev0);
  pipe_free(pp);
  return st;
}

sharc_status_t dev_stage(dev_stream_t *ds, coll_call_t *call, dev_work_t *w) {
  const char *fn = sched_coll_fn(call->coll);
  memset(w, 0, sizeof *w);
  plan_t p;
  /* The IPC path (devipc.h) moves the data itself on the worker: the CUDA
   * stream only marks the call (the event) and waits for its release. */
  int ipc = call->coll != SCHED_BARRIER && devipc_wanted(call->comm);
  if (ipc) { /* the call's own buffers; nothing staged */
    memset(&p, 0, sizeof p);
    p.s = call->sendbuf;
    p.r = call->recvbuf;
  } else {
    plan_call(call, &p);
  }
  int prev = -1;
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
    goto out;
  }
  if (ipc)
    CHECK_GOTO(ensure_ipc(ds, fn), st, out);
  else
    CHECK_GOTO(ensure_stage(ds, p.l.stage_bytes, fn), st, out);
  /* One copy each way unless planning per round pays (devpipe.h). */
  devpipe_group_t dg = {0, 0, 1, p.l.d2h_bytes}, hg = {0, 1, 1, p.l.h2d_bytes};
  devpipe_piece_t pcs[2] = {{p.l.d2h_off, p.l.d2h_bytes},
                            {p.l.h2d_off, p.l.h2d_bytes}};
  devpipe_t whole = {.d2h = &dg,
                     .h2d = &hg,
                     .nd2h = p.l.d2h_bytes > 0,
                     .nh2d = p.l.h2d_bytes > 0,
                     .pieces = pcs,
                     .npieces = 2};
  devpipe_t pipe;
  sched_t sched; /* the pipelined call's, moved into its worker state */
  sched_init(&sched);
  int piped = !ipc && plan_pipe(call, &p, ds->stage, &pipe, &sched);
  st = queue_copies(ds, call, &p, piped ? &pipe : &whole, &sched, w, fn);
  sched_free(&sched); /* empty unless queue_copies did not take it */
  if (piped)
    devpipe_free(&pipe);
  if (ipc && w->ds) {
    call->ipc = &ds->ipc_ctx;
    TRACE(SUB_CUDA, "%s #%u: through CUDA IPC", fn, w->seq);
  }
out:
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

sharc_status_t dev_release(dev_work_t *w) {
  dev_stream_t *ds = w->ds;
  if (!ds)
    return SHARC_OK;
  sharc_status_t st = SHARC_OK;
  if (w->pipe) {
    if ((st = w->pipe->err) != SHARC_OK)
      err_record(st, "%s", w->pipe->msg);
    pipe_free(w->pipe);
    w->pipe = NULL;
  }
  release_to(ds, w->seq); /* and every release number before it */
  return st;
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

sharc_status_t dev_ready(dev_work_t *w) { return w->err; }

sharc_status_t dev_release(dev_work_t *w) {
  (void)w;
  return SHARC_OK;
}

sharc_status_t dev_stream_sync(dev_stream_t *ds) {
  (void)ds;
  return SHARC_OK;
}

void dev_stream_close(dev_stream_t *ds) { (void)ds; }

#endif /* SHARC_HAVE_CUDA */

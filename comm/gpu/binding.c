/*
 * binding.c - a sharc stream bound to a cudaStream_t (gpu.h): the binding
 * the generic stream drives, the table of GPU paths, and opening and
 * closing a bound stream (cuda_stream.c has what the paths use).
 *
 * Per call the path chosen for it (gpu_paths, the first that takes it)
 * queues its work on the CUDA stream, then an event E_k "the call's input
 * is ready" and a wait until the worker stored release k into the release
 * word. The worker sleeps on E_k (before), runs the call in its turn, and
 * stores k (after), whatever happened (error, skip after an earlier error,
 * a dead peer): the CUDA stream is never left waiting, and the error
 * becomes the stream's sticky error.
 *
 * Nothing spins on the GPU or the CPU (docs/design.md, decisions 7 and 8):
 * the worker sleeps in cudaEventSynchronize; the stream's wait is a
 * semaphore acquire handled by the GPU's front end, not a kernel, so the
 * ranks sharing one GPU keep their time slices. Where the driver has no
 * stream memory operations the wait is a cudaLaunchHostFunc that sleeps on
 * a condition variable until the worker released that call. CUDA may run
 * the host functions of all streams on one thread, so with that fallback
 * two CUDA-bound sharc streams of one process can deadlock (one's host
 * function holds the thread while the other's earlier call waits behind
 * its own): keep to one per process there.
 *
 * Opening a bound stream loads all of sharc's kernels into the device's
 * context (kernel_dev_preload): under CUDA's lazy loading a kernel's first
 * launch may synchronize the context, and the worker (the ipc path's
 * reductions) and the enqueueing thread (the staged path's GPU reduction,
 * queued behind a release wait) launch kernels while the CUDA stream waits
 * for a release only the worker gives: a deadlock on a GPU (softcuda models
 * it: softcuda_kernel.c).
 */
#include "device.h" /* kernels/: kernel_dev_versions */
#include "gpu_impl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SHARC_HAVE_CUDA

#define HOLD_FALLBACK "host function"

/* The stream-ordered wait of cuStreamWaitValue32 when the device and the
 * driver offer it, else NULL (the host-function fallback); why says which.
 * Since CUDA 12 the v2 stream memory operations are on by default (the
 * CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 attribute and the driver
 * module parameter concern the deprecated v1 API); the wait needs a host
 * word the device can map, and the GEQ comparison needs no attribute (only
 * NOR does: CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR). A driver
 * that refuses the first wait anyway (CUDA_ERROR_NOT_SUPPORTED) switches the
 * stream to the fallback then (gs_queue_release_wait). */
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

/* SHARC_CUDA_PATH names a path, and that path's requirements hold. */
static sharc_status_t check_paths(const char *fn) {
  const char *want = param_str(PARAM_CUDA_PATH);
  int known = !want || !strcmp(want, "auto");
  for (int i = 0; i < GPU_NPATHS; i++) {
    const gpu_path_t *gp = gpu_paths[i];
    if (gp->check_env)
      CHECK(gp->check_env(fn));
    known |= want && !strcmp(want, gp->call.name);
  }
  if (!known)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%s: SHARC_CUDA_PATH=%s: use auto, direct, staged or ipc",
                   fn, want);
  return SHARC_OK;
}

sharc_status_t gpu_stream_open(void **out, void *cuda_stream) {
  static const char fn[] = "sharc_stream_create_cuda";
  CHECK(check_paths(fn));
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
    return gs_cuda_fail(e, fn,
                        "finding the stream's device (cudaStreamGetDevice)");
  e = gs_enter_device(dev, &prev);
  if (e != cudaSuccess)
    return gs_cuda_fail(e, fn, "cudaSetDevice");
  /* Every kernel loaded now (lazy loading would load each at its first
   * launch, and may synchronize the device then: a launch by the worker,
   * or by the enqueueing thread behind a release wait, would wait for this
   * stream, which waits for the worker). Not fatal: a device without this
   * build's kernel image still runs the paths without kernels, and a
   * launch says why. */
  int kerr = kernel_dev_preload();
  if (kerr != 0) {
    (void)cudaGetLastError();
    INFO(SUB_CUDA, "device %d: loading sharc's kernels: %s", dev,
         kernel_dev_error_string(kerr));
  }
  sharc_status_t st = SHARC_OK;
  dev_stream_t *ds = calloc(1, sizeof *ds);
  if (!ds) {
    gs_leave_device(prev);
    return err_set(SHARC_ERR_NO_MEM, "%s: out of memory", fn);
  }
  ds->cs = cs;
  ds->device = dev;
  pthread_mutex_init(&ds->lock, NULL);
  pthread_cond_init(&ds->cond, NULL);
  void *flag = NULL;
  e = cudaHostAlloc(&flag, 64, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    st = gs_cuda_fail(e, fn, "the release word (cudaHostAlloc, mapped)");
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
  INFO(SUB_CUDA, "CUDA stream %p on device %d: collectives released by %s",
       cuda_stream, dev, ds->wait32 ? "cuStreamWaitValue32" : HOLD_FALLBACK);
  if (!ds->wait32)
    INFO(SUB_CUDA, "no stream wait on device %d: %s", dev, why);
  gs_leave_device(prev);
  *out = ds;
  return SHARC_OK;
fail:
  pthread_cond_destroy(&ds->cond);
  pthread_mutex_destroy(&ds->lock);
  free(ds);
  gs_leave_device(prev);
  return st;
}

static void gs_close(void *dev) {
  dev_stream_t *ds = dev;
  if (!ds)
    return;
  for (int i = 0; i < GPU_NPATHS; i++)
    if (gpu_paths[i]->close)
      gpu_paths[i]->close(ds);
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
  (void)cudaGetLastError();
  pthread_cond_destroy(&ds->cond);
  pthread_mutex_destroy(&ds->lock);
  free(ds);
}

/* The enqueueing thread (stream_binding_t.enqueue): the first path that
 * takes call queues it on the CUDA stream. */
static sharc_status_t gs_enqueue(void *dev, coll_call_t *call, void *work,
                                 int *owed, call_now_fn now) {
  dev_stream_t *ds = dev;
  dev_work_t *w = work;
  const char *fn = sched_coll_fn(call->coll);
  memset(w, 0, sizeof *w);
  *owed = 0;
  const gpu_path_t *gp = gpu_paths[GPU_NPATHS - 1];
  for (int i = 0; i < GPU_NPATHS; i++)
    if (gpu_paths[i]->takes(call)) {
      gp = gpu_paths[i];
      break;
    }
  int prev = -1;
  cudaError_t e = gs_enter_device(ds->device, &prev);
  if (e != cudaSuccess)
    return gs_cuda_fail(e, fn, "cudaSetDevice");
  sharc_status_t st;
  /* A captured stream would turn the event and the wait into graph nodes
   * that no worker could follow (graphs need a device-side path). */
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(ds->cs, &cap) != cudaSuccess)
    (void)cudaGetLastError();
  if (cap != cudaStreamCaptureStatusNone)
    st = err_set(SHARC_ERR_UNSUPPORTED,
                 "%s on a CUDA stream: the stream is being captured into a "
                 "CUDA graph; the %s path cannot be captured (%s): enqueue "
                 "outside the capture",
                 fn, gp->call.name, gp->no_capture);
  else
    st = gp->stage(ds, call, w, fn, now);
  if (w->ds)
    TRACE(SUB_CUDA, "%s #%u: %s path", fn, w->seq, gp->call.name);
  gs_leave_device(prev);
  *owed = w->ds != NULL;
  return st;
}

/* ---- worker side ---------------------------------------------------------
 */

/* Worker (stream_binding_t.before): sleeps until the call's input is
 * ready (E_k). */
static sharc_status_t gs_before(void *work) {
  dev_work_t *w = work;
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
      st =
          gs_cuda_fail(e, w->fn,
                       "waiting for the send buffer's copy to staging "
                       "(cudaEventSynchronize; an earlier kernel on the stream "
                       "may have failed)");
    gs_put_event(ds, (cudaEvent_t)w->event);
    w->event = NULL;
  }
  return st;
}

/* Worker (stream_binding_t.after): the path finishes the call, then the
 * CUDA stream goes on. */
static sharc_status_t gs_after(void *work) {
  dev_work_t *w = work;
  dev_stream_t *ds = w->ds;
  if (!ds)
    return SHARC_OK;
  sharc_status_t st = SHARC_OK;
  if (w->finish) {
    st = w->finish(w->state);
    w->finish = NULL;
  }
  gs_release_to(ds, w->seq); /* and every release number before it */
  return st;
}

/* stream_binding_t.sync: waits for the CUDA stream, then tells the paths
 * it is idle. Staging that earlier calls outgrew stays until the stream is
 * destroyed (gs_close): cudaFreeHost waits for every stream of the device,
 * and another stream of this process (another rank's thread, another
 * communicator's stream) may be inside a collective that waits for this
 * rank's next call, so freeing here can hang (test_stream_sync.c). Staging
 * doubles when it grows, so what is kept is less than what is in use. */
static sharc_status_t gs_sync(void *dev) {
  dev_stream_t *ds = dev;
  static const char fn[] = "sharc_stream_synchronize";
  int prev = -1;
  cudaEvent_t ev = NULL;
  sharc_status_t st = SHARC_OK;
  cudaError_t e = gs_enter_device(ds->device, &prev);
  if (e != cudaSuccess) {
    st = gs_cuda_fail(e, fn, "cudaSetDevice");
  } else if ((st = gs_get_event(ds, fn, &ev)) == SHARC_OK) {
    /* an event, not cudaStreamSynchronize: it sleeps whatever the
     * context's scheduling flags */
    e = cudaEventRecord(ev, ds->cs);
    if (e == cudaSuccess)
      e = cudaEventSynchronize(ev);
    if (e != cudaSuccess)
      st = gs_cuda_fail(e, fn, "waiting for the CUDA stream");
    gs_put_event(ds, ev);
  }
  gs_leave_device(prev);
  if (st != SHARC_OK)
    return st;
  for (int i = 0; i < GPU_NPATHS; i++)
    if (gpu_paths[i]->synced) {
      sharc_status_t ps = gpu_paths[i]->synced(ds);
      if (st == SHARC_OK)
        st = ps;
    }
  return st;
}

const stream_binding_t gpu_stream_binding = {
    .name = "CUDA stream",
    .work_size = sizeof(dev_work_t),
    .enqueue = gs_enqueue,
    .before = gs_before,
    .after = gs_after,
    .sync = gs_sync,
    .close = gs_close,
};

#else /* !SHARC_HAVE_CUDA: CPU-only build */

sharc_status_t gpu_stream_open(void **out, void *cuda_stream) {
  (void)out;
  (void)cuda_stream;
  return err_set(SHARC_ERR_UNSUPPORTED,
                 "sharc_stream_create_cuda: this sharc was built without "
                 "CUDA (SHARC_WITH_CUDA=OFF, or no nvcc at configure time); "
                 "rebuild with the CUDA toolkit to use device memory");
}

/* Never bound: gpu_stream_open fails first. */
const stream_binding_t gpu_stream_binding = {.name = "CUDA stream"};

#endif /* SHARC_HAVE_CUDA */

/* The paths, in the order they are asked: the direct and the IPC paths
 * take what they can when chosen, the staged path everything else. */
const gpu_path_t *const gpu_paths[GPU_NPATHS] = {
    &gpu_path_direct, &gpu_path_ipc, &gpu_path_staged};

/*
 * cuda_stream.c - what the CUDA stream binding offers the GPU paths
 * (gpu_impl.h): CUDA errors as sharc errors, the event pool, the device
 * made current for a call, pinned staging, and the release word with the
 * stream-ordered wait on it (binding.c drives them per call).
 */
#include "gpu_impl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int gpu_path_chosen(const char *name) {
  const char *path = param_str(PARAM_CUDA_PATH);
  return path && !strcmp(path, name);
}

sharc_status_t gpu_check_queues(const char *fn, const char *name) {
  const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (gpu_path_chosen(name) && conn && atoi(conn) == 1)
    return err_set(SHARC_ERR_UNSUPPORTED,
                   "%s: SHARC_CUDA_PATH=%s needs more than one hardware "
                   "queue per device, and CUDA_DEVICE_MAX_CONNECTIONS=1; "
                   "raise it or use SHARC_CUDA_PATH=staged",
                   fn, name);
  return SHARC_OK;
}

#ifdef SHARC_HAVE_CUDA

/* This process's nonce: pids alone are reused, and repeat across pid
 * namespaces. */
uint64_t gs_process_nonce(void) {
  static _Atomic uint64_t nonce;
  uint64_t n = atomic_load(&nonce);
  while (!n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
                 ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&nonce;
    x ^= x >> 33; /* splitmix64's finaliser */
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&nonce, &zero, x ? x : 1);
    n = atomic_load(&nonce);
  }
  return n;
}

#define STAGE_ROUND (64u << 10) /* staging sizes are multiples of this */

sharc_status_t gs_cuda_fail(cudaError_t e, const char *fn, const char *what) {
  (void)cudaGetLastError();
  return err_set(SHARC_ERR_CUDA, "%s on a CUDA stream: %s: %s: %s", fn, what,
                 cudaGetErrorName(e), cudaGetErrorString(e));
}

/* ---- events ------------------------------------------------------------- */

/* An idle event from the pool, or a new one. Events wait by sleeping
 * (cudaEventBlockingSync), never by polling, and time nothing. */
sharc_status_t gs_get_event(dev_stream_t *ds, const char *fn, cudaEvent_t *ev) {
  pthread_mutex_lock(&ds->lock);
  *ev = ds->npool ? ds->pool[--ds->npool] : NULL;
  pthread_mutex_unlock(&ds->lock);
  if (*ev)
    return SHARC_OK;
  cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventBlockingSync |
                                                   cudaEventDisableTiming);
  return e == cudaSuccess ? SHARC_OK
                          : gs_cuda_fail(e, fn, "cudaEventCreateWithFlags");
}

/* Returns ev to the pool (destroys it when the pool cannot grow). */
void gs_put_event(dev_stream_t *ds, cudaEvent_t ev) {
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

/* Makes dev current in this thread; *prev receives the device to restore
 * (-1: nothing to restore). */
cudaError_t gs_enter_device(int dev, int *prev) {
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

void gs_leave_device(int prev) {
  if (prev >= 0)
    (void)cudaSetDevice(prev);
}

/* ---- pinned staging (gs_ensure_stage, gpu_impl.h) ---------------------- */

sharc_status_t gs_ensure_stage(dev_stream_t *ds, size_t need, const char *fn) {
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
sharc_status_t gs_queue_release_wait(dev_stream_t *ds, uint32_t seq,
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
    return gs_cuda_fail(e, fn, "cudaLaunchHostFunc");
  }
  return SHARC_OK;
}

void gs_release_to(dev_stream_t *ds, uint32_t seq) {
  /* Release ordering: the host collective's stores to staging are visible
   * before the device sees the number (then it copies staging out). */
  atomic_store_explicit(ds->flag, seq, memory_order_release);
  pthread_mutex_lock(&ds->lock);
  ds->released = seq;
  pthread_cond_broadcast(&ds->cond);
  pthread_mutex_unlock(&ds->lock);
}

sharc_status_t gs_mark(dev_stream_t *ds, dev_work_t *w, const char *fn) {
  cudaEvent_t ev;
  CHECK(gs_get_event(ds, fn, &ev));
  cudaError_t e = cudaEventRecord(ev, ds->cs);
  if (e != cudaSuccess) {
    gs_put_event(ds, ev);
    return gs_cuda_fail(e, fn, "cudaEventRecord");
  }
  uint32_t seq = ds->next_seq + 1;
  sharc_status_t st = gs_queue_release_wait(ds, seq, fn);
  if (st != SHARC_OK) { /* recorded: it fires, nothing waits on it */
    gs_put_event(ds, ev);
    return st;
  }
  ds->next_seq = seq;
  w->ds = ds;
  w->fn = fn;
  w->event = ev;
  w->seq = seq;
  return SHARC_OK;
}

#endif /* SHARC_HAVE_CUDA */

/*
 * gpu_impl.h - inside the GPU layer: the interface a GPU path implements
 * (gpu_path_t; the table in binding.c), and what a CUDA-bound stream
 * offers the paths (cuda_stream.c): its CUDA stream and device, events, the
 * release wait, pinned staging. Included by comm/gpu/ only.
 */
#ifndef SHARC_COMM_GPU_IMPL_H
#define SHARC_COMM_GPU_IMPL_H

#include <stdint.h>

#include "gpu.h"

/* One CUDA-bound stream's device side (cuda_stream.c). */
typedef struct dev_stream dev_stream_t;

/* The binding's state of one call, kept with it by the generic stream. */
typedef struct {
  dev_stream_t *ds;   /* NULL: nothing queued on the CUDA stream waits */
  const char *fn;     /* the collective's name, for messages */
  void *event;        /* cudaEvent_t: the call's input is ready */
  uint32_t seq;       /* release number the CUDA stream waits for */
  sharc_status_t err; /* the path failed after the CUDA stream was made to
                         wait: the worker skips the call, then releases */
  char msg[192];      /* err's message */
  /* The path's state of this call, finished after the call ran or was
   * skipped: finish returns an error met during the call (its message
   * recorded) and frees state. NULL: none. */
  sharc_status_t (*finish)(void *state);
  void *state;
} dev_work_t;

/* A GPU path: SHARC_CUDA_PATH names it (call.name), gpu_paths lists them. */
typedef struct gpu_path {
  call_path_t call; /* its name, and how the worker runs a call it marked
                       (coll_call_t.path; a path may leave calls to the host
                       collective on the buffers it gave them) */
  /* Why a call on it cannot be captured into a CUDA graph (the refusal's
   * message says it). */
  const char *no_capture;
  /* 1 if the path takes call (asked in table order; the last takes all). */
  int (*takes)(const coll_call_t *call);
  /* Requirements of the environment, checked at gpu_stream_open; fn names
   * the caller. May be NULL. */
  sharc_status_t (*check_env)(const char *fn);
  /* Enqueueing thread, on ds's device: queues call's device work, its
   * event and its release wait (gs_mark or its own), and fills *w. On
   * error nothing waits on the CUDA stream and w->ds is NULL, except when
   * w->ds is set with w->err: the worker must still release it. */
  sharc_status_t (*stage)(dev_stream_t *ds, coll_call_t *call, dev_work_t *w,
                          const char *fn, call_now_fn now);
  /* ds's CUDA stream is idle (sharc_stream_synchronize); returns an error
   * the path met since the last one (its message recorded). May be NULL. */
  sharc_status_t (*synced)(dev_stream_t *ds);
  /* ds closes: frees the path's state of it. May be NULL. */
  void (*close)(dev_stream_t *ds);
} gpu_path_t;

extern const gpu_path_t gpu_path_direct, gpu_path_ipc, gpu_path_staged;

/* The paths, in the order they are asked whether they take a call. */
#define GPU_NPATHS 3
extern const gpu_path_t *const gpu_paths[GPU_NPATHS];

/* 1 if SHARC_CUDA_PATH names the path `name`. */
int gpu_path_chosen(const char *name);
/* For a path (`name`, when chosen) whose internal stream must run while
 * the caller's stream waits: refused with one hardware queue per device
 * (CUDA_DEVICE_MAX_CONNECTIONS=1), where the internal work would queue
 * behind that wait. */
sharc_status_t gpu_check_queues(const char *fn, const char *name);

#ifdef SHARC_HAVE_CUDA

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

typedef struct stage_buf {
  struct stage_buf *next;
  void *p;
} stage_buf_t;

/* cuStreamWaitValue32 (the _v2 entry point of CUDA 11.7+), reached through
 * the runtime so that nothing links against libcuda. */
typedef CUresult (*wait_value32_fn)(CUstream stream, CUdeviceptr addr,
                                    cuuint32_t value, unsigned int flags);

struct dev_stream {
  cudaStream_t cs;
  int device;
  wait_value32_fn wait32; /* NULL: release through a host function */
  _Atomic uint32_t *flag; /* release word: pinned, mapped; the worker writes */
  CUdeviceptr flag_dev;   /* its device address */

  /* enqueueing side (serialised by the generic stream) */
  void *stage; /* pinned staging (gs_ensure_stage) */
  size_t stage_bytes;
  uint32_t next_seq; /* release number of the last queued call */

  pthread_mutex_t lock; /* everything below */
  pthread_cond_t cond;  /* released advanced (host-function fallback) */
  uint32_t released;    /* release number of the last released call */
  stage_buf_t *retired; /* outgrown staging, possibly still in use */
  cudaEvent_t *pool;    /* idle events */
  int npool, pool_cap;

  int worker_bound; /* the worker thread made ds->device current */

  void *path_state[GPU_NPATHS]; /* each path's own, made on first use */
};

/* Makes dev current in this thread; *prev receives the device to restore
 * (-1: nothing to restore). */
cudaError_t gs_enter_device(int dev, int *prev);
void gs_leave_device(int prev);
/* Records a failed CUDA call (SHARC_ERR_CUDA); clears the runtime's last
 * error so the caller of sharc does not find ours in cudaGetLastError. */
sharc_status_t gs_cuda_fail(cudaError_t e, const char *fn, const char *what);
/* An idle event from ds's pool, or a new one (blocking sync, no timing). */
sharc_status_t gs_get_event(dev_stream_t *ds, const char *fn, cudaEvent_t *ev);
/* Returns ev to the pool. */
void gs_put_event(dev_stream_t *ds, cudaEvent_t ev);
/* Queues "wait until call seq is released" on ds's CUDA stream. */
sharc_status_t gs_queue_release_wait(dev_stream_t *ds, uint32_t seq,
                                     const char *fn);
/* Releases seq and every number before it (worker). */
void gs_release_to(dev_stream_t *ds, uint32_t seq);
/* Makes ds's pinned staging at least need bytes; the old buffer is kept
 * until the next synchronize (calls in flight may use it). */
sharc_status_t gs_ensure_stage(dev_stream_t *ds, size_t need, const char *fn);
/* Queues on ds's CUDA stream the event E_k and the wait for release k of a
 * call (after whatever the path queued before: the staged send/recv
 * batch's copies to staging), and fills *w. */
sharc_status_t gs_mark(dev_stream_t *ds, dev_work_t *w, const char *fn);
/* This process, told apart from a later one with the same pid (pids are
 * reused and repeat across pid namespaces): never 0. */
uint64_t gs_process_nonce(void);

#endif /* SHARC_HAVE_CUDA */

#endif /* SHARC_COMM_GPU_IMPL_H */

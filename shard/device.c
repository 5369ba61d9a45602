/*
 * device.c - the engine's side of GPU training (cfg.device
 * SHARC_DEVICE_CUDA): its CUDA streams, events and memory (device.h).
 *
 * Two streams of the current device: compute (the model's callbacks, the
 * optimizer) and comm (the collectives, through a sharc stream bound to it
 * with sharc_stream_create_cuda). Every dependency between them is an
 * event: a unit's gathered parameters are used after compute waited for
 * the event recorded behind its all-gather; a unit's gradients are
 * reduce-scattered after comm waited for an event recorded behind the
 * backward that wrote them. The host waits only where it must: reading
 * the statistics and the gradient norm, and before it frees device memory
 * (cudaFree, which a GPU runs only once the device is idle anyway).
 */
#include <stdio.h>

#include "device.h"

#ifdef SHARC_HAVE_CUDA
#include <cuda_runtime_api.h>

#define CS(d) ((cudaStream_t)(d)->compute)
#define MS(d) ((cudaStream_t)(d)->comm)

/* SHARC_OK for cudaSuccess; otherwise the message, naming what failed. */
static sharc_status_t check(devctx_t *d, cudaError_t err, const char *what) {
  if (err == cudaSuccess)
    return SHARC_OK;
  (void)cudaGetLastError();
  snprintf(d->err, d->errlen, "shard: %s: %s: %s", what, cudaGetErrorName(err),
           cudaGetErrorString(err));
  return SHARC_ERR_CUDA;
}

sharc_status_t dev_setup(devctx_t *d, size_t partials_bytes,
                         sharc_stream_t *stream) {
  cudaError_t err = cudaStreamCreateWithFlags((cudaStream_t *)&d->compute,
                                              cudaStreamNonBlocking);
  if (err == cudaSuccess)
    err = cudaStreamCreateWithFlags((cudaStream_t *)&d->comm,
                                    cudaStreamNonBlocking);
  if (err == cudaSuccess)
    err = cudaEventCreateWithFlags((cudaEvent_t *)&d->grads_ev,
                                   cudaEventDisableTiming);
  if (err == cudaSuccess && partials_bytes)
    err = cudaMalloc((void **)&d->partials, partials_bytes);
  sharc_status_t st = check(d, err,
                            "sharc_shard_create: setting up the CUDA device "
                            "(is one there and current on this thread?)");
  if (st == SHARC_OK && sharc_stream_create_cuda(stream, d->comm) != SHARC_OK) {
    snprintf(d->err, d->errlen, "sharc_shard_create: no stream: %s",
             sharc_last_error());
    st = SHARC_ERR_CUDA;
  }
  return st;
}

void dev_teardown(devctx_t *d) {
  if (d->compute)
    cudaStreamSynchronize(CS(d));
  if (d->partials)
    cudaFree(d->partials);
  if (d->grads_ev)
    cudaEventDestroy((cudaEvent_t)d->grads_ev);
  if (d->compute)
    cudaStreamDestroy(CS(d));
  if (d->comm)
    cudaStreamDestroy(MS(d));
  (void)cudaGetLastError();
}

sharc_status_t dev_events(devctx_t *d, void **gather, void **reduce) {
  cudaError_t err =
      cudaEventCreateWithFlags((cudaEvent_t *)gather, cudaEventDisableTiming);
  if (err == cudaSuccess)
    err =
        cudaEventCreateWithFlags((cudaEvent_t *)reduce, cudaEventDisableTiming);
  return check(d, err, "sharc_shard_create: events");
}

void dev_events_free(void *gather, void *reduce) {
  if (gather)
    cudaEventDestroy((cudaEvent_t)gather);
  if (reduce)
    cudaEventDestroy((cudaEvent_t)reduce);
}

void *dev_alloc(int pinned, size_t bytes) {
  void *p = NULL;
  cudaError_t err = pinned ? cudaMallocHost(&p, bytes) : cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return p;
}

void dev_free(devctx_t *d, int pinned, void *p) {
  if (pinned) {
    cudaFreeHost(p);
    return;
  }
  cudaStreamSynchronize(CS(d)); /* callbacks and kernels may still use it */
  cudaFree(p);
  (void)cudaGetLastError();
}

sharc_status_t dev_zero(devctx_t *d, void *p, size_t bytes) {
  return check(d, cudaMemsetAsync(p, 0, bytes, CS(d)), "cudaMemsetAsync");
}

sharc_status_t dev_copy(devctx_t *d, void *dst, const void *src, size_t bytes) {
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, CS(d));
  if (err == cudaSuccess)
    err = cudaStreamSynchronize(CS(d));
  return check(d, err, "copying between host and device");
}

sharc_status_t dev_compute_sync(devctx_t *d) {
  return check(d, cudaStreamSynchronize(CS(d)), "the compute stream");
}

sharc_status_t dev_record(devctx_t *d, void *ev) {
  return check(d, cudaEventRecord((cudaEvent_t)ev, MS(d)), "cudaEventRecord");
}

sharc_status_t dev_wait(devctx_t *d, void *ev, int host) {
  cudaError_t err = host ? cudaEventSynchronize((cudaEvent_t)ev)
                         : cudaStreamWaitEvent(CS(d), (cudaEvent_t)ev, 0);
  return check(d, err, "waiting for a collective");
}

sharc_status_t dev_grads_ready(devctx_t *d) {
  cudaError_t err = cudaEventRecord((cudaEvent_t)d->grads_ev, CS(d));
  if (err == cudaSuccess)
    err = cudaStreamWaitEvent(MS(d), (cudaEvent_t)d->grads_ev, 0);
  return check(d, err, "ordering a gradient reduction");
}

sharc_status_t dev_query(devctx_t *d, void *ev, int wait, int *done) {
  cudaError_t err = wait ? cudaEventSynchronize((cudaEvent_t)ev)
                         : cudaEventQuery((cudaEvent_t)ev);
  *done = err == cudaSuccess;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return SHARC_OK;
  }
  return check(d, err, "a gradient reduction");
}

#else /* no CUDA: sharc_shard_create refuses SHARC_DEVICE_CUDA first */

static sharc_status_t no_cuda(devctx_t *d) {
  snprintf(d->err, d->errlen, "shard: this build of sharc has no CUDA");
  return SHARC_ERR_UNSUPPORTED;
}
sharc_status_t dev_setup(devctx_t *d, size_t partials_bytes,
                         sharc_stream_t *stream) {
  (void)partials_bytes, (void)stream;
  return no_cuda(d);
}
void dev_teardown(devctx_t *d) { (void)d; }
sharc_status_t dev_events(devctx_t *d, void **gather, void **reduce) {
  (void)gather, (void)reduce;
  return no_cuda(d);
}
void dev_events_free(void *gather, void *reduce) { (void)gather, (void)reduce; }
void *dev_alloc(int pinned, size_t bytes) {
  (void)pinned, (void)bytes;
  return NULL;
}
void dev_free(devctx_t *d, int pinned, void *p) {
  (void)d, (void)pinned, (void)p;
}
sharc_status_t dev_zero(devctx_t *d, void *p, size_t bytes) {
  (void)p, (void)bytes;
  return no_cuda(d);
}
sharc_status_t dev_copy(devctx_t *d, void *dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return no_cuda(d);
}
sharc_status_t dev_compute_sync(devctx_t *d) { return no_cuda(d); }
sharc_status_t dev_record(devctx_t *d, void *ev) {
  (void)ev;
  return no_cuda(d);
}
sharc_status_t dev_wait(devctx_t *d, void *ev, int host) {
  (void)ev, (void)host;
  return no_cuda(d);
}
sharc_status_t dev_grads_ready(devctx_t *d) { return no_cuda(d); }
sharc_status_t dev_query(devctx_t *d, void *ev, int wait, int *done) {
  (void)ev, (void)wait;
  *done = 1;
  return no_cuda(d);
}
#endif

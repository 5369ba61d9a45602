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
 * the statistics and the gradient norm. Freed device memory is kept for
 * reuse (a caching allocator, as PyTorch's: cudaFree would wait for the
 * whole device) behind an event on compute; the engine's sizes repeat
 * every step, so after the first step nothing is allocated. Each block is
 * registered with sharc_mem_register while it lives, so that on the direct
 * path the peers read the engine's large gathers and reduce-scatters in
 * place (its end-of-call wait keeps a block in use until the peers read
 * it: the events behind the collectives on comm come after it).
 */
#include <stdio.h>
#include <stdlib.h>

#include "device.h"

#ifdef SHARC_HAVE_CUDA
#include <cuda_runtime_api.h>

#define CS(d) ((cudaStream_t)(d)->compute)
#define MS(d) ((cudaStream_t)(d)->comm)

/* SHARC_OK for cudaSuccess; otherwise SHARC_ERR_CUDA and the message,
 * naming what failed, unless the engine has one already: after a failure
 * the cleanup's waits fail too (a CUDA error is sticky), and the first
 * message is the one that says what went wrong. */
static sharc_status_t check(devctx_t *d, cudaError_t err, const char *what) {
  if (err == cudaSuccess)
    return SHARC_OK;
  (void)cudaGetLastError();
  if (!d->err[0])
    snprintf(d->err, d->errlen, "shard: %s: %s: %s", what,
             cudaGetErrorName(err), cudaGetErrorString(err));
  return SHARC_ERR_CUDA;
}

struct devblk {
  void *p;
  size_t bytes;
  void *ev;       /* cudaEvent_t recorded on compute when it was freed */
  unsigned epoch; /* devctx_t.epoch then */
  devblk_t *next;
};

/* A device block from cudaMalloc: registered (a failure only costs the
 * in-place reads), and deregistered before cudaFree. */
static void blk_register(void *p, size_t bytes) {
  if (sharc_mem_register(p, bytes) != SHARC_OK)
    (void)cudaGetLastError();
}

static void blk_free(void *p) {
  (void)sharc_mem_deregister(p);
  cudaFree(p);
}

/* Frees every cached block once both streams are idle. */
static void cache_release(devctx_t *d) {
  if (!d->cache)
    return;
  cudaStreamSynchronize(CS(d));
  cudaStreamSynchronize(MS(d));
  while (d->cache) {
    devblk_t *b = d->cache;
    d->cache = b->next;
    cudaEventDestroy((cudaEvent_t)b->ev);
    blk_free(b->p);
    free(b);
  }
  d->cached = 0;
  (void)cudaGetLastError();
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
  if (d->compute && d->comm)
    cache_release(d);
  if (d->compute)
    cudaStreamSynchronize(CS(d));
  for (int i = 0; i < d->tm.cap; i++)
    cudaEventDestroy((cudaEvent_t)d->tm.ev[i]);
  free(d->tm.ev);
  free(d->tm.span);
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

void dev_trim(devctx_t *d) {
  for (devblk_t **pb = &d->cache; *pb;) {
    devblk_t *b = *pb;
    if (b->epoch == d->epoch) { /* freed during this step */
      pb = &b->next;
      continue;
    }
    *pb = b->next;
    d->cached -= b->bytes;
    cudaEventSynchronize((cudaEvent_t)b->ev);
    cudaEventDestroy((cudaEvent_t)b->ev);
    blk_free(b->p);
    free(b);
  }
  (void)cudaGetLastError();
  d->epoch++;
  d->cached_peak = d->cached;
}

void *dev_alloc(devctx_t *d, int pinned, size_t bytes, int for_comm) {
  void *p = NULL;
  if (pinned) {
    if (cudaMallocHost(&p, bytes) != cudaSuccess)
      p = NULL;
    (void)cudaGetLastError();
    return p;
  }
  for (devblk_t **pb = &d->cache; *pb; pb = &(*pb)->next) {
    devblk_t *b = *pb;
    if (b->bytes != bytes)
      continue;
    if (for_comm &&
        cudaStreamWaitEvent(MS(d), (cudaEvent_t)b->ev, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      break; /* not reusable in order: allocate afresh */
    }
    *pb = b->next;
    d->cached -= b->bytes;
    cudaEventDestroy((cudaEvent_t)b->ev); /* released once it completed */
    p = b->p;
    free(b);
    return p;
  }
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    cache_release(d); /* the device is full: give the cache back, retry */
    if (cudaMalloc(&p, bytes) != cudaSuccess)
      p = NULL;
    (void)cudaGetLastError();
  }
  if (p)
    blk_register(p, bytes);
  return p;
}

void dev_free(devctx_t *d, int pinned, void *p, size_t bytes) {
  if (pinned) {
    cudaFreeHost(p);
    return;
  }
  devblk_t *b = malloc(sizeof *b);
  cudaEvent_t ev = NULL;
  if (b &&
      cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess &&
      cudaEventRecord(ev, CS(d)) == cudaSuccess) {
    *b = (devblk_t){
        .p = p, .bytes = bytes, .ev = ev, .epoch = d->epoch, .next = d->cache};
    d->cache = b;
    d->cached += bytes;
    if (d->cached > d->cached_peak)
      d->cached_peak = d->cached;
    return;
  }
  /* no event: free it the slow way */
  if (ev)
    cudaEventDestroy(ev);
  free(b);
  cudaStreamSynchronize(CS(d));
  blk_free(p);
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

/* ---- stream timing ------------------------------------------------------
 * A step records a few events per collective; the pool keeps them for the
 * next step, so after the first nothing is created. */

/* The pool's next event, created (timing: the default flags) when the pool
 * is short; -1 when that fails. */
static int time_take(devtime_t *t) {
  if (t->nev == t->cap) {
    int cap = t->cap ? 2 * t->cap : 64;
    void **ev = realloc(t->ev, (size_t)cap * sizeof *ev);
    if (!ev)
      return -1;
    t->ev = ev;
    for (; t->cap < cap; t->cap++)
      if (cudaEventCreate((cudaEvent_t *)&t->ev[t->cap]) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
      }
  }
  return t->nev++;
}

void dev_time_begin(devctx_t *d) {
  d->tm.nev = d->tm.nspan = 0;
  d->tm.on = 1;
  d->tm.broken = 0;
}

int dev_time_mark(devctx_t *d, int on_comm) {
  devtime_t *t = &d->tm;
  if (!t->on || t->broken)
    return -1;
  int i = time_take(t);
  if (i >= 0 && cudaEventRecord((cudaEvent_t)t->ev[i],
                                on_comm ? MS(d) : CS(d)) == cudaSuccess)
    return i;
  (void)cudaGetLastError();
  t->broken = 1; /* this step reports host times instead */
  return -1;
}

void dev_time_span(devctx_t *d, int a, int b, int wait) {
  devtime_t *t = &d->tm;
  if (a < 0 || b < 0 || t->broken)
    return;
  if (t->nspan == t->spancap) {
    int cap = t->spancap ? 2 * t->spancap : 64;
    devspan_t *sp = realloc(t->span, (size_t)cap * sizeof *sp);
    if (!sp) {
      t->broken = 1;
      return;
    }
    t->span = sp;
    t->spancap = cap;
  }
  t->span[t->nspan++] = (devspan_t){a, b, wait};
}

/* *sec = t(b) - t(a); 0 when an event cannot be timed. Both are complete
 * after the step's synchronize; waiting for them first is only a guard
 * against cudaErrorNotReady. */
static int span_seconds(const devtime_t *t, const devspan_t *sp, double *sec) {
  cudaEvent_t a = (cudaEvent_t)t->ev[sp->a], b = (cudaEvent_t)t->ev[sp->b];
  float ms = 0;
  cudaError_t err = cudaEventSynchronize(a);
  if (err == cudaSuccess)
    err = cudaEventSynchronize(b);
  if (err == cudaSuccess)
    err = cudaEventElapsedTime(&ms, a, b);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  *sec = 1e-3 * (double)ms;
  return 1;
}

int dev_time_read(devctx_t *d, double *comm_s, double *exposed_s) {
  devtime_t *t = &d->tm;
  int ok = t->on && !t->broken;
  double comm = 0, exposed = 0;
  for (int k = 0; ok && k < t->nspan; k++) {
    double dt = 0;
    ok = span_seconds(t, &t->span[k], &dt);
    if (!t->span[k].wait)
      comm += dt; /* one stream: its spans never overlap */
    else if (dt > 0)
      exposed += dt; /* else comm was done before compute got there */
  }
  t->on = 0;
  if (ok) {
    *comm_s = comm;
    *exposed_s = exposed;
  }
  return ok;
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
void *dev_alloc(devctx_t *d, int pinned, size_t bytes, int for_comm) {
  (void)d, (void)pinned, (void)bytes, (void)for_comm;
  return NULL;
}
void dev_free(devctx_t *d, int pinned, void *p, size_t bytes) {
  (void)d, (void)pinned, (void)p, (void)bytes;
}
void dev_trim(devctx_t *d) { (void)d; }
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
void dev_time_begin(devctx_t *d) { (void)d; }
int dev_time_mark(devctx_t *d, int on_comm) {
  (void)d, (void)on_comm;
  return -1;
}
void dev_time_span(devctx_t *d, int a, int b, int wait) {
  (void)d, (void)a, (void)b, (void)wait;
}
int dev_time_read(devctx_t *d, double *comm_s, double *exposed_s) {
  (void)d, (void)comm_s, (void)exposed_s;
  return 0;
}
#endif

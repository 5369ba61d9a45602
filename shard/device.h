/*
 * device.h - the CUDA side of GPU training for the engine (device.c): its
 * two streams, the events that order them, device and pinned memory.
 * Streams and events are passed as void * (cudaStream_t, cudaEvent_t), so
 * that the engine's C code needs no CUDA header. Every call returns
 * SHARC_OK or SHARC_ERR_CUDA with the runtime's message written into
 * d->err (the engine's error buffer); a build without CUDA has the same
 * functions, failing, and the engine refuses GPU training before any.
 */
#ifndef SHARC_SHARD_DEVICE_H
#define SHARC_SHARD_DEVICE_H

#include <stddef.h>

#include "sharc.h"

typedef struct devblk devblk_t; /* a freed block kept for reuse */

/* Two timing events of a step: t(b) - t(a) is a collective's span on comm
 * (wait 0), or how long compute stalled at a wait (wait 1: a on compute
 * just before it, b the comm event it waits for; counted when positive). */
typedef struct {
  int a, b, wait;
} devspan_t;

/* A step's timing on the streams: events that record time (never the
 * ordering events, created with cudaEventDisableTiming), taken from a pool
 * that grows to the step's need and is reused by every later step. */
typedef struct {
  void **ev;       /* cudaEvent_t */
  int nev, cap;    /* used this step, created */
  devspan_t *span; /* this step's pairs */
  int nspan, spancap;
  int on;     /* between dev_time_begin and dev_time_read */
  int broken; /* an event or the memory failed: no reading this step */
} devtime_t;

typedef struct {
  void *compute;      /* cudaStream_t: the model's callbacks, the optimizer */
  void *comm;         /* cudaStream_t: the collectives (the engine's sharc
                       * stream is bound to it) */
  void *grads_ev;     /* cudaEvent_t: comm waits for backward's gradients */
  double *partials;   /* device: the gradient norm's partial sums */
  devblk_t *cache;    /* freed device blocks, by size (dev_free) */
  size_t cached;      /* their bytes */
  size_t cached_peak; /* the most since dev_trim */
  unsigned epoch;     /* dev_trim calls so far */
  devtime_t tm;       /* the step's timing events */
  char *err;          /* where messages go */
  size_t errlen;
} devctx_t;

/* Creates the streams (and, with partials, the norm's buffer of
 * partials_bytes) on the current device and a sharc stream bound to comm
 * into *stream. */
sharc_status_t dev_setup(devctx_t *d, size_t partials_bytes,
                         sharc_stream_t *stream);
/* After the sharc stream is destroyed. */
void dev_teardown(devctx_t *d);
/* A unit's two events (free with dev_events_free). */
sharc_status_t dev_events(devctx_t *d, void **gather, void **reduce);
void dev_events_free(void *gather, void *reduce);
/* Pinned host memory, or device memory: a cached block of exactly bytes
 * if one is free (for_comm: comm, which will write it, first waits for
 * compute's last use of it), else cudaMalloc (after releasing the cache
 * when the device is full). NULL when out of memory. */
void *dev_alloc(devctx_t *d, int pinned, size_t bytes, int for_comm);
/* Pinned memory is freed. A device block goes to the cache, behind an
 * event recorded on compute: the caller guarantees that nothing but work
 * already queued on compute may still use it (the engine waits for the
 * collectives that read or write a buffer before it frees it), so reuse
 * on compute is stream-ordered and reuse on comm waits for the event. The
 * host never waits here. */
void dev_free(devctx_t *d, int pinned, void *p, size_t bytes);
/* At the end of a step: frees the cached blocks the step did not reuse
 * (freed before it began), so a size that stopped recurring (another
 * batch size, an evaluation) does not hold device memory; blocking. */
void dev_trim(devctx_t *d);
/* Zeroes device memory, queued on compute. */
sharc_status_t dev_zero(devctx_t *d, void *p, size_t bytes);
/* Copies in any direction after compute's earlier work; blocking. */
sharc_status_t dev_copy(devctx_t *d, void *dst, const void *src, size_t bytes);
sharc_status_t dev_compute_sync(devctx_t *d);
/* Records ev behind the work queued on comm so far. */
sharc_status_t dev_record(devctx_t *d, void *ev);
/* Compute waits for ev (host 1: this thread waits). */
sharc_status_t dev_wait(devctx_t *d, void *ev, int host);
/* Comm waits for the work queued on compute so far. */
sharc_status_t dev_grads_ready(devctx_t *d);
/* *done: ev has completed (waiting for it if wait). */
sharc_status_t dev_query(devctx_t *d, void *ev, int wait, int *done);

/* Stream timing of a step (the engine's t_comm and t_exposed in GPU
 * training). dev_time_begin starts a step's timing (the pool's events are
 * reused). dev_time_mark records the pool's next event on comm (on_comm)
 * or compute and returns its index; -1 outside a step or when it failed
 * (the step then reports host times; training goes on). dev_time_span
 * keeps a pair of marks (devspan_t; ignored when either is -1).
 * dev_time_read, after the step's synchronize, waits for the marked events
 * (complete by then: a guard against cudaErrorNotReady), reads each pair
 * with cudaEventElapsedTime, sums the spans into *comm_s and the positive
 * stalls into *exposed_s (seconds) and ends the step's timing: 1 when
 * measured, 0 when not (no step begun, a failed mark or read). */
void dev_time_begin(devctx_t *d);
int dev_time_mark(devctx_t *d, int on_comm);
void dev_time_span(devctx_t *d, int a, int b, int wait);
int dev_time_read(devctx_t *d, double *comm_s, double *exposed_s);

#endif /* SHARC_SHARD_DEVICE_H */

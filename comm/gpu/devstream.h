/*
 * devstream.h - device memory in the collectives through pinned host staging
 *, the first GPU data path: what stream.c needs to run a
 * collective enqueued on a sharc stream bound to a cudaStream_t
 * (sharc_stream_create_cuda), and dev_is_device_ptr for the argument checks.
 *
 * Per collective, in the order of the CUDA stream and of the sharc stream's
 * worker thread (devstream.c's opening comment has the whole picture):
 *   enqueueing thread  dev_stage: D2H copy of the send buffer into pinned
 *                      staging, an event, a release wait, the H2D copy of
 *                      the staged result; the call's buffers now point
 *                      into staging
 *   worker thread      dev_ready (the event: the send data is staged), the
 *                      host collective on the staging buffers, dev_release
 *                      (always, also after an error or a skip)
 * The header needs no CUDA header (streams are `void *`), and exists in
 * every build: without CUDA (SHARC_HAVE_CUDA undefined) dev_stream_open
 * returns SHARC_ERR_UNSUPPORTED and dev_is_device_ptr returns 0.
 * The device kernels are in kernels/device.h.
 */
#ifndef SHARC_COMM_DEVSTREAM_H
#define SHARC_COMM_DEVSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "call.h"
#include "devptr.h"

/* The CUDA side of one CUDA-bound sharc stream (private to devstream.c). */
typedef struct dev_stream dev_stream_t;

/* A pipelined call's worker state (devstream.c). */
typedef struct dev_pipe dev_pipe_t;

/* What the worker needs to finish one staged call (filled by dev_stage). */
typedef struct {
  dev_stream_t *ds;   /* NULL: not a staged call */
  const char *fn;     /* the collective's name, for messages */
  void *event;        /* cudaEvent_t: the staged send data is ready */
  uint32_t seq;       /* release number the CUDA stream waits for */
  sharc_status_t err; /* staging failed after the CUDA stream was made to
                         wait: the worker skips the call, then releases */
  char msg[192];      /* err's message */
  dev_pipe_t *pipe;   /* copies planned per round (devpipe.h), else NULL */
} dev_work_t;

/* Binds a new dev_stream_t to cuda_stream (a cudaStream_t; NULL: the legacy
 * default stream) on that stream's device. Fails with SHARC_ERR_CUDA (no
 * usable device, CUDA errors) or SHARC_ERR_UNSUPPORTED (built without
 * CUDA), the message naming the reason. */
sharc_status_t dev_stream_open(dev_stream_t **out, void *cuda_stream);

/* Queues call's copies and release wait on the CUDA stream and points
 * call's buffers into staging; fills *w. Not thread safe for one ds: the
 * caller serialises dev_stage and the push of *w to the worker, so the
 * worker sees calls in release order. On error nothing waits on the CUDA
 * stream and w->ds is NULL (the caller passes the call's ticket); except
 * when w->ds is set with w->err: then the caller must still push *w. */
sharc_status_t dev_stage(dev_stream_t *ds, coll_call_t *call, dev_work_t *w);

/* Worker thread, before running the call: waits (sleeping) until the
 * call's send data is staged. Returns w->err or a CUDA error (message in
 * err_last()); the call must then be skipped. */
sharc_status_t dev_ready(dev_work_t *w);

/* Worker thread, after running or skipping the call: lets the CUDA stream
 * go on (copy the staged result out). Must be called exactly once per
 * staged call, in order, whatever happened to the call. Returns an error
 * the pipelined copies met during the call (a piece of the send data that
 * never reached staging), with its message recorded, else SHARC_OK. */
sharc_status_t dev_release(dev_work_t *w);

/* Waits (sleeping) until the CUDA stream has done everything queued on it
 * so far, then frees staging buffers that earlier calls outgrew. Call after
 * the worker finished the calls queued before. */
sharc_status_t dev_stream_sync(dev_stream_t *ds);

/* Frees ds; the CUDA stream must be idle (dev_stream_sync). NULL is
 * accepted. */
void dev_stream_close(dev_stream_t *ds);

#endif /* SHARC_COMM_DEVSTREAM_H */

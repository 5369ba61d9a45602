/*
 * stream.h - host streams as the collectives use them (stream.c): a work
 * queue with its own thread that runs the calls enqueued on it in order,
 * through the functions the caller gives (coll.c: coll_execute and
 * coll_skip), so a stream knows nothing of collectives.
 */
#ifndef SHARC_STREAM_H
#define SHARC_STREAM_H

#include "call.h"

typedef struct {
  sharc_status_t (*run)(coll_call_t *call); /* runs it */
  void (*skip)(coll_call_t *call); /* passes it (its ticket) after an error */
  call_now_fn now; /* host collectives in its turn, while it is enqueued */
} stream_ops_t;

/* A stream and its worker thread; bind and dev: the device queue it is
 * bound to and its state (owned from here on, closed on failure), or NULL
 * for a host stream; fn names the caller in messages. */
sharc_status_t stream_new(sharc_stream_t *stream, const stream_binding_t *bind,
                          void *dev, const char *fn);

/* 1 if stream is bound to a device queue (sharc_stream_create_cuda: its
 * collectives may take device memory), 0 for a host stream or NULL. */
int stream_is_bound(sharc_stream_t stream);

/* Enqueues call on stream, call->ticket already taken; ops says how the
 * worker runs it (or passes it, here too when enqueueing fails, so the
 * communicator's order moves on). */
sharc_status_t stream_enqueue(sharc_stream_t stream, const coll_call_t *call,
                              const stream_ops_t *ops);

#endif /* SHARC_STREAM_H */

/*
 * stream.c - host streams (in-order work queues, one thread each) and
 * events, the host-memory counterpart of CUDA streams (docs/design.md, decision
 * 6).
 *
 * A stream numbers the work enqueued on it; an event records the number of
 * the last item at record time and completes when the stream's completed
 * count reaches it. The stream's first error is sticky: later work on it is
 * skipped (its tickets still passed, so other streams are not blocked) and
 * synchronize returns that error.
 *
 * A stream may be bound to a device queue (stream_binding_t, call.h; a
 * cudaStream_t through sharc_stream_create_cuda, stream_cuda.c): the
 * binding prepares each collective as it is enqueued, the worker asks it
 * before running the call whether its input is ready and tells it after,
 * also for a call it skipped or that failed, so the device queue never
 * waits forever. The stream knows nothing else of the device.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream.h"

typedef struct work {
  struct work *next;
  coll_call_t call;
  void (*host_fn)(void *); /* non-NULL: a host function, not a collective */
  union {
    void *host_arg;          /* a host function's argument */
    const stream_ops_t *ops; /* how a collective runs or is passed */
  };
  /* a call on a bound stream: the binding's state of it, stored right
   * after the item (unbound streams: NULL, so their items stay small) */
  void *dev;
} work_t;
/* An item is allocated by the enqueuing thread and freed by the worker: at
 * most 120 bytes, glibc frees it to a fastbin; 8 bytes more (the ops
 * pointer beside host_arg instead of with it) cost 70 ns on an 8-byte
 * all-reduce at 2 ranks (_int_free's slow path, measured). */
_Static_assert(sizeof(work_t) <= 120, "keep stream items in glibc's fastbins");

struct sharc_stream {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond; /* work arrived / work completed */
  work_t *head, *tail;
  uint64_t enqueued;
  _Atomic uint64_t completed; /* written by the worker only */
  uint64_t err_at;            /* item number of the first error (0: none) */
  sharc_status_t err;
  char err_msg[512];
  int stop;
  int worker_idle;              /* the stream thread sleeps on cond for work */
  _Atomic int waiters;          /* threads sleeping on cond for completions */
  _Atomic uint64_t wake_at;     /* smallest count a waiter needs (UINT64_MAX) */
  const stream_binding_t *bind; /* a bound stream's device queue, else */
  void *dev;                    /* NULL, and its state */
  pthread_mutex_t enq_lock;     /* bound: preparing and queueing in one order */
};

struct sharc_event {
  pthread_mutex_t lock;
  struct sharc_stream *stream;
  uint64_t target;
};

/* Marks one item done; wakes waiters only if there are any (the
 * worker's increment and the waiter's registration are both seq_cst, so
 * either the waiter sees the new count or the worker sees the waiter). */
static void complete_one(struct sharc_stream *s) {
  uint64_t done = atomic_fetch_add(&s->completed, 1) + 1;
  /* Wake only when some waiter's target is reached, not per item: a
   * waiter woken early would sleep again, two context switches per op. */
  if (atomic_load(&s->waiters) && done >= atomic_load(&s->wake_at)) {
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->wake_at, UINT64_MAX);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
  }
}

/* The stream thread: takes every queued item at once (one lock round trip
 * per batch, not per item, so the enqueueing thread and the worker rarely
 * contend), runs them in order, then looks for more. */
static void *stream_main(void *arg) {
  struct sharc_stream *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->lock);
    while (!s->head && !s->stop) {
      s->worker_idle = 1;
      pthread_cond_wait(&s->cond, &s->lock);
      s->worker_idle = 0;
    }
    work_t *batch = s->head;
    s->head = s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    if (!batch)
      break; /* stopped and drained */
    while (batch) {
      work_t *w = batch;
      batch = w->next;
      sharc_status_t st = SHARC_OK;
      const char *msg = NULL;
      if (w->dev && (st = s->bind->before(w->dev)) != SHARC_OK) {
        msg = err_last(); /* the call's input never became ready */
        w->ops->skip(&w->call);
      } else if (w->host_fn) { /* runs even after an error: it may free */
        w->host_fn(w->host_arg);
      } else if (s->err != SHARC_OK) { /* sticky: skip, keep the order */
        w->ops->skip(&w->call);
      } else if ((st = w->ops->run(&w->call)) != SHARC_OK) {
        msg = sharc_comm_last_error(w->call.comm);
      }
      if (w->dev) { /* always: the device queue waits for it */
        sharc_status_t rst = s->bind->after(w->dev);
        if (st == SHARC_OK && rst != SHARC_OK) {
          st = rst;
          msg = err_last();
        }
      }
      if (st != SHARC_OK && s->err == SHARC_OK) { /* the first error sticks */
        pthread_mutex_lock(&s->lock);
        s->err = st;
        s->err_at = atomic_load(&s->completed) + 1;
        snprintf(s->err_msg, sizeof s->err_msg, "%s", msg);
        pthread_mutex_unlock(&s->lock);
      }
      free(w);
      complete_one(s);
    }
  }
  return NULL;
}

sharc_status_t stream_new(sharc_stream_t *stream, const stream_binding_t *bind,
                          void *dev, const char *fn) {
  struct sharc_stream *s = calloc(1, sizeof *s);
  if (!s) {
    if (bind)
      bind->close(dev);
    return err_set(SHARC_ERR_NO_MEM, "%s: out of memory", fn);
  }
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  pthread_mutex_init(&s->enq_lock, NULL);
  atomic_store(&s->wake_at, UINT64_MAX);
  s->bind = bind;
  s->dev = dev;
  int rc = pthread_create(&s->thread, NULL, stream_main, s);
  if (rc != 0) {
    pthread_mutex_destroy(&s->enq_lock);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
    if (bind)
      bind->close(dev);
    return err_set(SHARC_ERR_SYSTEM, "%s: pthread_create: %s", fn,
                   strerror(rc));
  }
  *stream = s;
  return SHARC_OK;
}

sharc_status_t sharc_stream_create(sharc_stream_t *stream) {
  if (!stream)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_stream_create: stream is NULL");
  return stream_new(stream, NULL, NULL, "sharc_stream_create");
}

static sharc_status_t push(struct sharc_stream *s, work_t *w);

int stream_is_bound(sharc_stream_t s) { return s && s->bind; }

sharc_status_t stream_enqueue(sharc_stream_t s, const coll_call_t *call,
                              const stream_ops_t *ops) {
  work_t *w = malloc(sizeof *w + (s->bind ? s->bind->work_size : 0));
  if (!w) {
    coll_call_t skip = *call;
    ops->skip(&skip); /* keep the comm's order moving */
    return err_set(SHARC_ERR_NO_MEM, "stream: out of memory");
  }
  w->next = NULL;
  w->call = *call;
  w->host_fn = NULL;
  w->ops = ops;
  w->dev = NULL;
  if (!s->bind)
    return push(s, w);
  w->dev = w + 1; /* work_t's size keeps pointer alignment */
  /* Bound: the worker must see the calls in the order the binding queued
   * them on the device, whichever thread enqueues. */
  pthread_mutex_lock(&s->enq_lock);
  int queued = 0; /* the device queue waits for the worker */
  sharc_status_t st =
      s->bind->enqueue(s->dev, &w->call, w->dev, &queued, ops->now);
  if (queued)
    push(s, w); /* w belongs to the worker now */
  pthread_mutex_unlock(&s->enq_lock);
  if (!queued) {
    ops->skip(&w->call); /* keep the comm's order moving */
    free(w);
  }
  return st;
}

sharc_status_t sharc_stream_launch_host_func(sharc_stream_t s,
                                             void (*fn)(void *), void *arg) {
  if (!s || !fn)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_stream_launch_host_func: stream or fn is NULL");
  work_t *w = calloc(1, sizeof *w);
  if (!w)
    return err_set(SHARC_ERR_NO_MEM, "stream: out of memory");
  w->host_fn = fn;
  w->host_arg = arg;
  return push(s, w);
}

/* Appends w to the queue, waking the worker when it sleeps. */
static sharc_status_t push(struct sharc_stream *s, work_t *w) {
  pthread_mutex_lock(&s->lock);
  if (s->tail)
    s->tail->next = w;
  else
    s->head = w;
  s->tail = w;
  s->enqueued++;
  if (s->worker_idle) /* busy workers find the item without a wake-up */
    pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  return SHARC_OK;
}

/* Waits until item `target` completed; returns the error of the items up to
 * it, if any. */
static sharc_status_t wait_for(struct sharc_stream *s, uint64_t target) {
  pthread_mutex_lock(&s->lock);
  atomic_fetch_add(&s->waiters, 1);
  for (;;) {
    if (target < atomic_load(&s->wake_at))
      atomic_store(&s->wake_at, target); /* before re-reading completed */
    if (atomic_load(&s->completed) >= target)
      break;
    pthread_cond_wait(&s->cond, &s->lock);
  }
  atomic_fetch_sub(&s->waiters, 1);
  sharc_status_t st = SHARC_OK;
  if (s->err != SHARC_OK && s->err_at <= target) {
    st = s->err;
    err_record(st, "%s", s->err_msg);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

sharc_status_t sharc_stream_synchronize(sharc_stream_t s) {
  if (!s)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_stream_synchronize: stream is NULL");
  pthread_mutex_lock(&s->lock);
  uint64_t target = s->enqueued;
  pthread_mutex_unlock(&s->lock);
  sharc_status_t st = wait_for(s, target);
  if (s->bind) { /* then the device queue's work after the calls */
    sharc_status_t dst = s->bind->sync(s->dev);
    if (st == SHARC_OK)
      st = dst;
  }
  return st;
}

sharc_status_t sharc_stream_destroy(sharc_stream_t s) {
  if (!s)
    return SHARC_OK;
  sharc_status_t st = sharc_stream_synchronize(s);
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  if (s->bind)
    s->bind->close(s->dev);
  pthread_mutex_destroy(&s->enq_lock);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
  return st;
}

sharc_status_t sharc_event_create(sharc_event_t *event) {
  if (!event)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_event_create: event is NULL");
  struct sharc_event *e = calloc(1, sizeof *e);
  if (!e)
    return err_set(SHARC_ERR_NO_MEM, "sharc_event_create: out of memory");
  pthread_mutex_init(&e->lock, NULL);
  *event = e;
  return SHARC_OK;
}

sharc_status_t sharc_event_destroy(sharc_event_t e) {
  if (!e)
    return SHARC_OK;
  pthread_mutex_destroy(&e->lock);
  free(e);
  return SHARC_OK;
}

sharc_status_t sharc_event_record(sharc_event_t e, sharc_stream_t s) {
  if (!e || !s)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_event_record: %s is NULL",
                   !e ? "event" : "stream");
  pthread_mutex_lock(&s->lock);
  uint64_t target = s->enqueued;
  pthread_mutex_unlock(&s->lock);
  pthread_mutex_lock(&e->lock);
  e->stream = s;
  e->target = target;
  pthread_mutex_unlock(&e->lock);
  return SHARC_OK;
}

sharc_status_t sharc_event_synchronize(sharc_event_t e) {
  if (!e)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_event_synchronize: event is NULL");
  pthread_mutex_lock(&e->lock);
  struct sharc_stream *s = e->stream;
  uint64_t target = e->target;
  pthread_mutex_unlock(&e->lock);
  return s ? wait_for(s, target) : SHARC_OK;
}

sharc_status_t sharc_event_query(sharc_event_t e, int *done) {
  if (!e || !done)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_event_query: %s is NULL",
                   !e ? "event" : "done");
  pthread_mutex_lock(&e->lock);
  struct sharc_stream *s = e->stream;
  uint64_t target = e->target;
  pthread_mutex_unlock(&e->lock);
  *done = 1;
  if (s) {
    pthread_mutex_lock(&s->lock);
    *done = s->completed >= target;
    pthread_mutex_unlock(&s->lock);
  }
  return SHARC_OK;
}

/*
 * softcuda_stream.c - softcuda's streams (see softcuda.c): a worker thread
 * per stream runs its operations in FIFO order, after the dependencies
 * (legacy-stream order, event waits) that sc_submit attaches; the stream and
 * event API; cuStreamWaitValue32 / cuStreamWriteValue32.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "softcuda_impl.h"

/* ---- streams (lock held unless said) ------------------------------------ */

static stream_t *stream_by_id(uint64_t id) {
  for (stream_t *s = sc_state.streams; s; s = s->next)
    if (s->id == id)
      return s;
  return NULL;
}

static int dep_done(const dep_t *d) {
  stream_t *s = stream_by_id(d->sid);
  return !s || s->done >= d->seq;
}

static void wait_deps(const dep_t *d, int n) {
  for (int i = 0; i < n; i++)
    while (!dep_done(&d[i]))
      pthread_cond_wait(&sc_state.done, &sc_state.lock);
}

static int add_dep(op_t *op, uint64_t sid, uint64_t seq) {
  dep_t *d = realloc(op->deps, (size_t)(op->ndeps + 1) * sizeof *d);
  if (!d)
    return -1;
  d[op->ndeps].sid = sid;
  d[op->ndeps].seq = seq;
  op->deps = d;
  op->ndeps++;
  return 0;
}

void sc_op_free(op_t *op) {
  if (op->kind == OP_KERNEL && !op->u.kern.borrowed) {
    if (op->u.kern.release)
      op->u.kern.release(op->u.kern.ctx);
    free(op->u.kern.ptrs);
  }
  free(op->owned);
  free(op->deps);
  free(op);
}

static void run_op(stream_t *s, op_t *op);

/* ---- SOFTCUDA_JITTER (worker thread) ------------------------------------ */

static uint64_t jitter_next(stream_t *s) { /* splitmix64 */
  uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void sleep_us(unsigned us);

/* A random pause: none half the time, else up to 50 us, 500 us or 3 ms,
 * and one time in 200 a stall of 5-20 ms, as a GPU busy with other work
 * (or a preempted process) gives: rare, long enough for the host to run
 * far ahead. */
static void jitter_pause(stream_t *s) {
  if (!sc_state.jitter)
    return;
  uint64_t r = jitter_next(s);
  unsigned k = (unsigned)(r % 200), us = (unsigned)(r >> 32);
  if (k < 100)
    return;
  sleep_us(k < 160   ? 1 + us % 50
           : k < 190 ? 50 + us % 450
           : k < 199 ? 500 + us % 2500
                     : 5000 + us % 15000);
}

/* A copy of rows in up to 8 chunks per row, in random order, with pauses:
 * what a host read racing the copy sees is a mix of old and new bytes. */
static void jitter_copy(stream_t *s, uint8_t *d, const uint8_t *src,
                        size_t width, size_t height, size_t dpitch,
                        size_t spitch) {
  enum { MAXC = 8 };
  for (size_t r = 0; r < height; r++) {
    size_t nc = width < MAXC ? (width ? width : 1) : MAXC;
    size_t order[MAXC];
    for (size_t i = 0; i < nc; i++)
      order[i] = i;
    for (size_t i = nc; i > 1; i--) { /* Fisher-Yates */
      size_t j = (size_t)(jitter_next(s) % i), t = order[i - 1];
      order[i - 1] = order[j];
      order[j] = t;
    }
    for (size_t i = 0; i < nc; i++) {
      size_t lo = width * order[i] / nc, hi = width * (order[i] + 1) / nc;
      memcpy(d + r * dpitch + lo, src + r * spitch + lo, hi - lo);
      if (jitter_next(s) % 4 == 0)
        sleep_us(1 + (unsigned)(jitter_next(s) % 100));
    }
  }
}

/* ---- memory checks at run time (lock held) ------------------------------
 * An operation was checked when it was queued; memory freed or unmapped
 * since (an IPC mapping closed while work on it was queued) makes a GPU
 * fault when the work runs: an illegal address, and the context is lost. */

static int dev_side(const void *p, size_t n) {
  int k = sc_mem_kind(p, n);
  return k == M_DEVICE || k == M_HOST;
}

/* NULL, or what op touches that is no longer there. */
static const char *op_memory_gone(const op_t *op) {
  switch (op->kind) {
  case OP_COPY: {
    size_t w = op->u.copy.width, h = op->u.copy.height;
    if (!w || !h)
      return NULL;
    if (!sc_mem_still(op->u.copy.dst, op->u.copy.dpitch * (h - 1) + w,
                      op->u.copy.dk))
      return "a copy's destination";
    if (!sc_mem_still(op->u.copy.src, op->u.copy.spitch * (h - 1) + w,
                      op->u.copy.sk))
      return "a copy's source";
    return NULL;
  }
  case OP_SET:
    return dev_side(op->u.set.dst, op->u.set.bytes) ? NULL : "a memset";
  case OP_WAIT32:
  case OP_WRITE32:
    return dev_side(op->u.v32.addr, 4) ? NULL : "a stream memory operation";
  case OP_KERNEL:
    for (int i = 0; i < op->u.kern.nptrs; i++)
      if (op->u.kern.ptrs[i] && !dev_side(op->u.kern.ptrs[i], 1))
        return "a kernel's pointer argument";
    return NULL;
  default:
    return NULL;
  }
}

/* The fault: every later call fails with cudaErrorIllegalAddress. */
static void fault(const char *what) {
  if (!sc_state.sticky)
    sc_say("%s touches memory freed or unmapped after it was queued: "
           "cudaErrorIllegalAddress; the context is unusable from now on, "
           "as after a fault on a GPU",
           what);
  __atomic_store_n(&sc_state.sticky, cudaErrorIllegalAddress, __ATOMIC_RELEASE);
}

static void *worker(void *arg) {
  stream_t *s = arg;
  sc_cur_dev = s->device; /* host functions see the stream's device */
  pthread_mutex_lock(&sc_state.lock);
  for (;;) {
    while (!s->head && !s->destroyed)
      pthread_cond_wait(&s->wake, &sc_state.lock);
    op_t *op = s->head;
    if (!op)
      break;
    wait_deps(op->deps, op->ndeps);
    const char *gone = op_memory_gone(op);
    int run = !gone && !sc_state.sticky; /* after a fault nothing runs */
    if (gone)
      fault(gone);
    /* a wait may last: it checks its word at every poll instead */
    int held = run && op->kind != OP_WAIT32;
    sc_state.running += held;
    pthread_mutex_unlock(&sc_state.lock);
    jitter_pause(s); /* independent streams interleave at random */
    if (run)
      run_op(s, op);
    jitter_pause(s); /* completion comes later than the effects */
    pthread_mutex_lock(&sc_state.lock);
    sc_state.running -= held;
    s->head = op->next;
    if (!s->head)
      s->tail = NULL;
    s->done = op->seq;
    pthread_cond_broadcast(&sc_state.done);
    sc_op_free(op);
  }
  for (stream_t **pp = &sc_state.streams; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  pthread_cond_broadcast(&sc_state.done);
  pthread_mutex_unlock(&sc_state.lock);
  pthread_cond_destroy(&s->wake);
  free(s);
  return NULL;
}

static cudaError_t stream_new(int device, unsigned flags, int legacy,
                              stream_t **out) {
  stream_t *s = calloc(1, sizeof *s);
  if (!s)
    return cudaErrorMemoryAllocation;
  s->id = ++sc_state.next_id;
  s->device = device;
  s->flags = flags;
  s->legacy = legacy;
  s->rng = sc_state.jitter_seed ^ (s->id * 0xd1b54a32d192ed03ull);
  pthread_cond_init(&s->wake, NULL);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  int rc = pthread_create(&t, &attr, worker, s);
  pthread_attr_destroy(&attr);
  if (rc) {
    pthread_cond_destroy(&s->wake);
    free(s);
    return cudaErrorMemoryAllocation;
  }
  s->next = sc_state.streams;
  sc_state.streams = s;
  *out = s;
  return cudaSuccess;
}

/* The stream a handle names: NULL, cudaStreamLegacy and cudaStreamPerThread
 * are the current device's legacy stream. */
cudaError_t sc_resolve(cudaStream_t h, stream_t **out) {
  if (h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread) {
    if (sc_state.ndev == 0)
      return cudaErrorNoDevice;
    stream_t **l = &sc_state.legacy[sc_cur_dev];
    if (!*l) {
      cudaError_t e = stream_new(sc_cur_dev, 0, 1, l);
      if (e != cudaSuccess)
        return e;
    }
    *out = *l;
    return cudaSuccess;
  }
  for (stream_t *s = sc_state.streams; s; s = s->next)
    if (s == h && !s->destroyed && !s->legacy) {
      *out = s;
      return cudaSuccess;
    }
  return cudaErrorInvalidResourceHandle;
}

/* Queues op on s, after the legacy-stream dependencies; takes op. A
 * capturing stream adds it to its graph instead. */
cudaError_t sc_submit(stream_t *s, op_t *op) {
  if (s->cap)
    return sc_capture_add(s, op);
  int bad = 0;
  if (s->legacy) {
    cudaError_t e = sc_capture_implicit(s->device, "an operation");
    if (e != cudaSuccess) {
      sc_op_free(op);
      return e;
    }
    for (stream_t *t = sc_state.streams; t; t = t->next)
      if (t != s && t->device == s->device && !t->legacy &&
          !(t->flags & cudaStreamNonBlocking) && t->done < t->queued)
        bad |= add_dep(op, t->id, t->queued);
  } else if (!(s->flags & cudaStreamNonBlocking)) {
    stream_t *l = sc_state.legacy[s->device];
    if (l && l->done < l->queued)
      bad |= add_dep(op, l->id, l->queued);
  }
  if (bad) {
    sc_op_free(op);
    return cudaErrorMemoryAllocation;
  }
  op->seq = ++s->queued;
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  pthread_cond_signal(&s->wake);
  return cudaSuccess;
}

op_t *sc_op_new(int kind) {
  op_t *op = calloc(1, sizeof *op);
  if (op)
    op->kind = kind;
  return op;
}

/* Resolves h and queues op (taken in every case). */
cudaError_t sc_enqueue(cudaStream_t h, op_t *op, stream_t **on) {
  if (!op)
    return cudaErrorMemoryAllocation;
  stream_t *s = NULL;
  cudaError_t e = sc_resolve(h, &s);
  if (e != cudaSuccess) {
    sc_op_free(op);
    return e;
  }
  if (on)
    *on = s;
  return sc_submit(s, op);
}

/* Waits (lock held) until stream s finished everything queued so far. */
void sc_wait_stream(stream_t *s) {
  dep_t d = {s->id, s->queued};
  wait_deps(&d, 1);
}

/* Waits (lock held) until stream sid finished operation seq. */
void sc_wait_seq(uint64_t sid, uint64_t seq) {
  dep_t d = {sid, seq};
  wait_deps(&d, 1);
}

/* Waits (lock held) until every stream of device dev (-1: all) finished
 * what was queued on it so far. */
void sc_wait_all(int dev) {
  for (;;) {
    int again = 0;
    for (stream_t *s = sc_state.streams; s; s = s->next)
      if ((dev < 0 || s->device == dev) && s->done < s->queued) {
        sc_wait_stream(s); /* the list may change meanwhile: start over */
        again = 1;
        break;
      }
    if (!again)
      return;
  }
}

/* ---- running operations (worker thread, lock not held) ------------------ */

static void sleep_us(unsigned us) {
  struct timespec ts = {0, (long)us * 1000};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

static int wait32_met(uint32_t v, uint32_t want, unsigned flags) {
  switch (flags & 3u) {
  case CU_STREAM_WAIT_VALUE_GEQ:
    return (int32_t)(v - want) >= 0;
  case CU_STREAM_WAIT_VALUE_EQ:
    return v == want;
  case CU_STREAM_WAIT_VALUE_AND:
    return (v & want) != 0;
  default: /* NOR */
    return ~(v | want) != 0;
  }
}

static void run_op(stream_t *s, op_t *op) {
  switch (op->kind) {
  case OP_COPY: {
    uint8_t *d = op->u.copy.dst;
    const uint8_t *src = op->u.copy.src;
    if (sc_state.jitter) {
      jitter_copy(s, d, src, op->u.copy.width, op->u.copy.height,
                  op->u.copy.dpitch, op->u.copy.spitch);
      break;
    }
    for (size_t r = 0; r < op->u.copy.height; r++)
      memcpy(d + r * op->u.copy.dpitch, src + r * op->u.copy.spitch,
             op->u.copy.width);
    break;
  }
  case OP_SET:
    memset(op->u.set.dst, op->u.set.value, op->u.set.bytes);
    break;
  case OP_HOST_FN:
    sc_in_host_fn = 1;
    op->u.host.fn(op->u.host.arg);
    sc_in_host_fn = 0;
    break;
  case OP_RECORD: {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    pthread_mutex_lock(&sc_state.lock);
    for (event_t *ev = sc_state.events; ev; ev = ev->next)
      if (ev->id == op->u.rec.eid && ev->sid == s->id && ev->seq == op->seq) {
        ev->t = t;
        ev->timed = 1;
      }
    pthread_mutex_unlock(&sc_state.lock);
    break;
  }
  case OP_WAIT32: {
    unsigned us = 20;
    for (;;) {
      pthread_mutex_lock(&sc_state.lock);
      int there = dev_side(op->u.v32.addr, 4);
      uint32_t v =
          there ? __atomic_load_n(op->u.v32.addr, __ATOMIC_ACQUIRE) : 0;
      if (!there)
        fault("cuStreamWaitValue32");
      int stop = !there || sc_state.sticky;
      pthread_mutex_unlock(&sc_state.lock);
      if (stop || wait32_met(v, op->u.v32.value, op->u.v32.flags))
        break;
      sleep_us(us);
      if (us < sc_state.poll_max_us)
        us = us * 2 < sc_state.poll_max_us ? us * 2 : sc_state.poll_max_us;
    }
    break;
  }
  case OP_WRITE32:
    if (op->u.v32.flags & CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)
      __atomic_store_n(op->u.v32.addr, op->u.v32.value, __ATOMIC_RELAXED);
    else
      __atomic_store_n(op->u.v32.addr, op->u.v32.value, __ATOMIC_RELEASE);
    break;
  case OP_KERNEL:
    op->u.kern.run(op->u.kern.ctx, op->u.kern.reverse);
    break;
  default:
    break;
  }
}

/* ---- streams API -------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream,
                                      unsigned int flags) {
  ENTER_DEV();
  if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking))
    return sc_fail(cudaErrorInvalidValue);
  stream_t *s = NULL;
  pthread_mutex_lock(&sc_state.lock);
  cudaError_t e = stream_new(sc_cur_dev, flags, 0, &s);
  pthread_mutex_unlock(&sc_state.lock);
  if (e != cudaSuccess)
    return sc_fail(e);
  *pStream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

/* Returns at once, as CUDA does: queued work still runs, then the thread
 * ends. */
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  stream_t *s = NULL;
  cudaError_t e =
      stream ? sc_resolve(stream, &s) : cudaErrorInvalidResourceHandle;
  if (e == cudaSuccess && s->legacy)
    e = cudaErrorInvalidResourceHandle;
  if (e == cudaSuccess) {
    s->destroyed = 1;
    pthread_cond_signal(&s->wake);
  }
  pthread_mutex_unlock(&sc_state.lock);
  if (e != cudaSuccess)
    REFUSE(e, "cudaStreamDestroy(%p): not a live stream", (void *)stream);
  return cudaSuccess;
}

/* Synchronising or querying a capturing stream breaks its capture. */
static cudaError_t not_capturing(stream_t *s, const char *fn) {
  if (!s->cap)
    return cudaSuccess;
  sc_capture_invalidate(s->cap, fn);
  REFUSE(cudaErrorStreamCaptureUnsupported,
         "%s: the stream is being captured into a CUDA graph", fn);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  stream_t *s = NULL;
  cudaError_t e = sc_resolve(stream, &s);
  if (e == cudaSuccess)
    e = not_capturing(s, __func__);
  if (e == cudaSuccess && s->legacy) {
    /* the legacy stream also waits for the blocking streams: a marker on
     * it carries those dependencies */
    op_t *op = sc_op_new(OP_NOP);
    e = op ? sc_submit(s, op) : cudaErrorMemoryAllocation;
  }
  if (e == cudaSuccess) {
    sc_wait_stream(s);
    e = sc_sticky_or(e);
  }
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  stream_t *s = NULL;
  cudaError_t e = sc_resolve(stream, &s);
  if (e == cudaSuccess)
    e = not_capturing(s, __func__);
  if (e == cudaSuccess && s->legacy)
    e = sc_capture_implicit(s->device, __func__);
  if (e == cudaSuccess && s->done < s->queued)
    e = cudaErrorNotReady;
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int *device) {
  ENTER_DEV();
  if (!device)
    return sc_fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&sc_state.lock);
  stream_t *s = NULL;
  cudaError_t e = sc_resolve(stream, &s);
  if (e == cudaSuccess)
    *device = s->device;
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn,
                               void *userData) {
  ENTER_DEV();
  if (!fn)
    return sc_fail(cudaErrorInvalidValue);
  op_t *op = sc_op_new(OP_HOST_FN);
  if (op) {
    op->u.host.fn = fn;
    op->u.host.arg = userData;
  }
  pthread_mutex_lock(&sc_state.lock);
  cudaError_t e = sc_enqueue(stream, op, NULL);
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

/* ---- events ------------------------------------------------------------- */

static event_t *event_find(cudaEvent_t h) {
  for (event_t *ev = sc_state.events; ev; ev = ev->next)
    if (ev == h)
      return ev;
  return NULL;
}

/* ev, unless it was last recorded in a capture still in progress (it has
 * no completion to wait for or time: cudaErrorCapturedEvent). */
static cudaError_t event_usable(const event_t *ev, const char *fn) {
  if (!ev)
    return cudaErrorInvalidResourceHandle;
  if (!sc_capture_find(ev->cap_id))
    return cudaSuccess;
  REFUSE(cudaErrorCapturedEvent,
         "%s: the event was last recorded in a stream being captured", fn);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  ENTER_DEV();
  unsigned known =
      cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~known) ||
      ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)))
    return sc_fail(cudaErrorInvalidValue);
  if (flags & cudaEventInterprocess)
    REFUSE(cudaErrorNotSupported, "cudaEventCreateWithFlags: interprocess "
                                  "events are not modelled");
  event_t *ev = calloc(1, sizeof *ev);
  if (!ev)
    return sc_fail(cudaErrorMemoryAllocation);
  ev->flags = flags;
  ev->device = sc_cur_dev;
  pthread_mutex_lock(&sc_state.lock);
  ev->id = ++sc_state.next_id;
  ev->next = sc_state.events;
  sc_state.events = ev;
  pthread_mutex_unlock(&sc_state.lock);
  *event = ev;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  event_t *ev = event_find(event);
  if (ev)
    for (event_t **pp = &sc_state.events; *pp; pp = &(*pp)->next)
      if (*pp == ev) {
        *pp = ev->next;
        break;
      }
  pthread_mutex_unlock(&sc_state.lock);
  if (!ev)
    REFUSE(cudaErrorInvalidResourceHandle,
           "cudaEventDestroy(%p): no such "
           "event",
           (void *)event);
  free(ev); /* a pending record finds it gone and does nothing */
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  event_t *ev = event_find(event);
  stream_t *s = NULL;
  cudaError_t e = ev ? sc_resolve(stream, &s) : cudaErrorInvalidResourceHandle;
  if (e == cudaSuccess && s->device != ev->device) {
    if (sc_debug_on())
      sc_say("cudaEventRecord: event of device %d, stream of device %d",
             ev->device, s->device);
    e = cudaErrorInvalidResourceHandle;
  }
  if (e == cudaSuccess && s->cap) {
    /* a position in the capture: what a wait for it forks or joins */
    if (s->cap->invalid) {
      e = cudaErrorStreamCaptureInvalidated;
    } else {
      ev->cap_id = s->cap->id;
      ev->cap_sid = s->id;
      ev->cap_pos = sc_capture_nodes(s->cap);
      ev->recorded = 0;
    }
    pthread_mutex_unlock(&sc_state.lock);
    return sc_fail(e);
  }
  op_t *op = e == cudaSuccess ? sc_op_new(OP_RECORD) : NULL;
  if (e == cudaSuccess && !op)
    e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) {
    op->u.rec.eid = ev->id;
    e = sc_submit(s, op);
  }
  if (e == cudaSuccess) {
    ev->recorded = 1;
    ev->sid = s->id;
    ev->seq = s->queued;
    ev->timed = 0;
    ev->cap_id = 0;
  }
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  event_t *ev = event_find(event);
  cudaError_t e = event_usable(ev, __func__);
  if (e == cudaSuccess && ev->recorded) {
    dep_t d = {ev->sid, ev->seq};
    wait_deps(&d, 1);
    e = sc_sticky_or(e);
  }
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  event_t *ev = event_find(event);
  cudaError_t e = event_usable(ev, __func__);
  if (e == cudaSuccess) {
    dep_t d = {ev->sid, ev->seq};
    e = !ev->recorded || dep_done(&d) ? cudaSuccess : cudaErrorNotReady;
  }
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  ENTER_DEV();
  if (!ms)
    return sc_fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&sc_state.lock);
  event_t *a = event_find(start), *b = event_find(end);
  cudaError_t e = event_usable(a, __func__);
  if (e == cudaSuccess)
    e = event_usable(b, __func__);
  if (e != cudaSuccess) {
  } else if (!a->recorded || !b->recorded ||
             ((a->flags | b->flags) & cudaEventDisableTiming)) {
    e = cudaErrorInvalidResourceHandle;
  } else {
    dep_t da = {a->sid, a->seq}, db = {b->sid, b->seq};
    if (!dep_done(&da) || !dep_done(&db) || !a->timed || !b->timed)
      e = cudaErrorNotReady;
    else
      *ms = (float)((double)(b->t.tv_sec - a->t.tv_sec) * 1e3 +
                    (double)(b->t.tv_nsec - a->t.tv_nsec) / 1e6);
  }
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

/* Lock held: stream s waits for event ev while s is capturing or ev was
 * last recorded in capture c (in progress). */
static cudaError_t capture_wait(stream_t *s, event_t *ev, capture_t *c) {
  if (c && !s->cap && !s->legacy) { /* a fork: s joins the capture */
    s->cap = c;
    s->cap_last = s->cap_joined = 0;
    return cudaSuccess;
  }
  if (c && s->cap == c) { /* a join (or an order inside the capture) */
    stream_t *from = stream_by_id(ev->cap_sid);
    if (from && from->cap_joined < ev->cap_pos)
      from->cap_joined = ev->cap_pos;
    return c->invalid ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
  }
  if (c && s->legacy)
    return sc_capture_implicit(s->device, "cudaStreamWaitEvent");
  if (c) {
    sc_capture_invalidate(c, "merged with another capture");
    sc_capture_invalidate(s->cap, "merged with another capture");
    REFUSE(cudaErrorStreamCaptureMerge,
           "cudaStreamWaitEvent: the event and the stream belong to two "
           "different capture sequences");
  }
  if (!ev->recorded) /* never recorded: complete, nothing to wait for */
    return s->cap->invalid ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
  sc_capture_invalidate(s->cap, "waited for work outside the capture");
  REFUSE(cudaErrorStreamCaptureIsolation,
         "cudaStreamWaitEvent: a capturing stream waits for an event recorded "
         "outside the capture (only in-stream order may cross its boundary)");
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned int flags) {
  ENTER_DEV();
  if (flags & ~1u) /* cudaEventWaitDefault, cudaEventWaitExternal */
    return sc_fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&sc_state.lock);
  event_t *ev = event_find(event);
  stream_t *s = NULL;
  cudaError_t e = ev ? sc_resolve(stream, &s) : cudaErrorInvalidResourceHandle;
  capture_t *c = ev && e == cudaSuccess ? sc_capture_find(ev->cap_id) : NULL;
  if (e == cudaSuccess && (c || s->cap) && (flags & 1u)) {
    sc_say("cudaStreamWaitEvent: cudaEventWaitExternal in a capture is not "
           "modelled");
    e = cudaErrorNotSupported;
  } else if (e == cudaSuccess && (c || s->cap)) {
    e = capture_wait(s, ev, c);
  } else if (e == cudaSuccess) {
    op_t *op = sc_op_new(OP_NOP);
    /* the record as of now; an event never recorded is complete */
    if (op && ev->recorded && add_dep(op, ev->sid, ev->seq)) {
      sc_op_free(op);
      op = NULL;
    }
    e = op ? sc_submit(s, op) : cudaErrorMemoryAllocation;
  }
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

/* ---- stream memory operations (driver entry points) --------------------- */

static CUresult to_cu(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return CUDA_SUCCESS;
  case cudaErrorInvalidValue:
    return CUDA_ERROR_INVALID_VALUE;
  case cudaErrorInvalidResourceHandle:
    return CUDA_ERROR_INVALID_HANDLE;
  case cudaErrorNoDevice:
    return CUDA_ERROR_NO_DEVICE;
  case cudaErrorNotPermitted:
    return CUDA_ERROR_NOT_PERMITTED;
  case cudaErrorMemoryAllocation:
    return CUDA_ERROR_OUT_OF_MEMORY;
  default:
    return CUDA_ERROR_UNKNOWN;
  }
}

static CUresult stream_value32(const char *fn, int kind, CUstream stream,
                               CUdeviceptr addr, cuuint32_t value,
                               unsigned int flags) {
  cudaError_t e = sc_enter_dev(fn);
  if (e != cudaSuccess)
    return to_cu(e);
  uint32_t *p = (uint32_t *)(uintptr_t)addr;
  unsigned known = kind == OP_WAIT32 ? 3u | CU_STREAM_WAIT_VALUE_FLUSH
                                     : CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
  if (!p || (addr & 3) || (flags & ~known)) {
    if (sc_debug_on())
      sc_say("%s: address %p, flags %#x", fn, (void *)p, flags);
    return CUDA_ERROR_INVALID_VALUE;
  }
  op_t *op = sc_op_new(kind);
  if (!op)
    return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.v32.addr = p;
  op->u.v32.value = value;
  op->u.v32.flags = flags;
  pthread_mutex_lock(&sc_state.lock);
  e = sc_check_dev_side(fn, "addr", p, sizeof *p);
  if (e == cudaSuccess)
    e = sc_enqueue((cudaStream_t)stream, op, NULL);
  else
    sc_op_free(op);
  pthread_mutex_unlock(&sc_state.lock);
  (void)cudaGetLastError(); /* driver calls leave no runtime error */
  return to_cu(e);
}

CUresult sc_stream_wait_value32(CUstream stream, CUdeviceptr addr,
                                cuuint32_t value, unsigned int flags) {
  return stream_value32("cuStreamWaitValue32", OP_WAIT32, stream, addr, value,
                        flags);
}

CUresult sc_stream_write_value32(CUstream stream, CUdeviceptr addr,
                                 cuuint32_t value, unsigned int flags) {
  return stream_value32("cuStreamWriteValue32", OP_WRITE32, stream, addr, value,
                        flags);
}

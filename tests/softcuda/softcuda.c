/*
 * softcuda.c - a CUDA runtime made of host memory and threads, for running
 * sharc's GPU data path (comm/devstream.c, comm/devipc.c) and the gpu tests
 * on machines without a GPU (cmake -DSHARC_SOFTCUDA=ON; the precedent is
 * tests/unit/mock_verbs.c, a software HCA for the ib transport).
 *
 * It implements exactly the subset of the runtime API that sharc, its tests
 * and its benchmark call, the driver entry points they fetch through
 * cudaGetDriverEntryPoint[ByVersion] (cuStreamWaitValue32,
 * cuStreamWriteValue32, cuMemGetAddressRange), and the C wrappers of
 * kernels/device.h (the kernels run as host loops: kernels/reduce.c).
 *
 * What it models (what sharc relies on):
 *  - devices: SOFTCUDA_DEVICES=N (default 1; 0: no device, every device call
 *    fails with cudaErrorNoDevice so the skip paths stay testable); a current
 *    device per thread;
 *  - memory: cudaMalloc is a memfd mapped MAP_SHARED, so that another
 *    process can map it (CUDA IPC); a process-wide table of allocations
 *    answers cudaPointerGetAttributes (device / host / unregistered) and
 *    cuMemGetAddressRange and checks every copy, memset and kernel argument:
 *    device-side pointers that are not device (or pinned) memory, and ranges
 *    that run past the end of an allocation, fail with an error instead of
 *    corrupting memory;
 *  - streams: each cudaStream_t, and each device's legacy NULL stream, runs
 *    its operations in FIFO order on its own thread, asynchronously to the
 *    caller. The legacy stream waits for earlier work of the blocking
 *    streams of its device and they wait for its earlier work
 *    (cudaStreamNonBlocking streams do neither). cudaMemcpy / cudaMemset are
 *    legacy-stream operations the caller waits for; cudaFree, cudaFreeHost
 *    and cudaDeviceSynchronize wait until every stream is idle;
 *  - cuStreamWaitValue32 polls the word with sleeps of 20..100 us (never a
 *    busy spin: tests run 8 ranks on 2 cores);
 *  - events: completion = the recording stream reached the record;
 *    cudaEventElapsedTime from CLOCK_MONOTONIC taken when the record runs;
 *  - CUDA IPC: a handle names the allocation (creator pid, memfd number,
 *    size, inode, a unique id); another process maps /proc/PID/fd/FD; opens
 *    in one process are reference counted; opening in the creating process
 *    fails (cudaErrorDeviceUninitialized, "invalid device context", as
 *    CUDA);
 *  - errors: a sticky last error per thread, names and strings for every
 *    code returned here; a CUDA call from inside a host function
 *    (cudaLaunchHostFunc) fails with cudaErrorNotPermitted and a line on
 *    stderr (CUDA forbids it and may deadlock).
 *
 * What it does not model: real device memory (a "device" pointer is
 * readable by the host, so a host access to device memory goes unnoticed),
 * kernels other than kernels/device.h's, managed memory, cudaMallocAsync
 * pools, graphs and stream capture (cudaStreamIsCapturing says none),
 * priorities, peer access limits, context-corrupting (sticky) errors,
 * per-thread default streams (cudaStreamPerThread is the legacy stream
 * here), and timing (copies run at memcpy speed). cudaMemcpyAsync is always
 * asynchronous, also for pageable memory (CUDA may be synchronous there):
 * the stricter order.
 *
 * SOFTCUDA_DEBUG=1 prints a line on stderr for every argument a call
 * refuses; SOFTCUDA_POLL_US caps the wait poll interval (default 100).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The CUDA API and the kernel wrappers are what this library exports (the
 * target builds with -fvisibility=hidden, like the rest of sharc). */
#pragma GCC visibility push(default)
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "device.h"
#pragma GCC visibility pop

#include "core.h" /* log_msg, which reduce.c calls */
#include "dtypes.h"
#include "reduce.h"

#define MAX_DEVICES 16
#define IPC_MAGIC "softcuda"

/* ---- errors --------------------------------------------------------------
 * Every code softcuda returns, with CUDA's own name and message. */
#define SC_ERRORS(X)                                                           \
  X(cudaSuccess, "no error")                                                   \
  X(cudaErrorInvalidValue, "invalid argument")                                 \
  X(cudaErrorMemoryAllocation, "out of memory")                                \
  X(cudaErrorInitializationError, "initialization error")                      \
  X(cudaErrorInvalidPitchValue, "invalid pitch argument")                      \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")      \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                   \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                          \
  X(cudaErrorDeviceUninitialized, "invalid device context")                    \
  X(cudaErrorMapBufferObjectFailed, "mapping of buffer object failed")         \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                 \
  X(cudaErrorNotReady, "device not ready")                                     \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")       \
  X(cudaErrorNotPermitted, "operation not permitted")                          \
  X(cudaErrorNotSupported, "operation not supported")                          \
  X(cudaErrorUnknown, "unknown error")

static _Thread_local cudaError_t last_error;
static _Thread_local int cur_dev;
static _Thread_local int in_host_fn; /* this thread runs a host function */

static int debug_on(void) {
  static int on = -1;
  if (on < 0) {
    const char *e = getenv("SOFTCUDA_DEBUG");
    on = e && *e && strcmp(e, "0");
  }
  return on;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "softcuda[%d]: %s\n", (int)getpid(), line);
}

/* Records e as this thread's last error (cudaErrorNotReady is a status, not
 * an error, in CUDA too) and returns it. */
static cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady)
    last_error = e;
  return e;
}

/* fail() with a line on stderr under SOFTCUDA_DEBUG. */
#define REFUSE(e, ...)                                                         \
  do {                                                                         \
    if (debug_on())                                                            \
      say(__VA_ARGS__);                                                        \
    return fail(e);                                                            \
  } while (0)

/* reduce.c reports out-of-range arguments through sharc's logger; softcuda
 * checks them first, so this only runs on a softcuda bug. */
void log_msg(log_level_t lvl, log_subsys_t sub, const char *fmt, ...) {
  (void)lvl;
  (void)sub;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  say("%s", line);
}

/* ---- process state -------------------------------------------------------
 * One lock for everything; `done` is broadcast whenever a stream finishes an
 * operation (or a stream goes away), and every wait re-checks its
 * condition. Operations themselves run outside the lock. */

typedef struct { /* satisfied when stream sid finished operation seq */
  uint64_t sid, seq;
} dep_t;

enum {
  OP_NOP,
  OP_COPY,
  OP_SET,
  OP_HOST_FN,
  OP_RECORD,
  OP_WAIT32,
  OP_WRITE32,
  OP_REDUCE,
  OP_DIV
};

typedef struct op {
  struct op *next;
  int kind;
  uint64_t seq;
  dep_t *deps;
  int ndeps;
  union {
    struct { /* rows of `width` bytes: one row for a plain copy */
      void *dst;
      const void *src;
      size_t width, height, dpitch, spitch;
    } copy;
    struct {
      void *dst;
      int value;
      size_t bytes;
    } set;
    struct {
      cudaHostFn_t fn;
      void *arg;
    } host;
    struct {
      uint64_t eid;
    } rec;
    struct {
      uint32_t *addr;
      uint32_t value;
      unsigned flags;
    } v32;
    struct {
      sharc_dtype_t dtype;
      sharc_op_t op;
      void *dst;
      const void *a, *b;
      size_t n;
      int divisor;
    } k;
  } u;
} op_t;

struct CUstream_st {
  struct CUstream_st *next;
  uint64_t id;
  int device;
  unsigned flags;
  int legacy;
  int destroyed; /* the handle is gone; the thread drains, then frees */
  pthread_cond_t wake;
  op_t *head, *tail;
  uint64_t queued, done; /* sequence numbers */
};
typedef struct CUstream_st stream_t;

struct CUevent_st {
  struct CUevent_st *next;
  uint64_t id;
  unsigned flags;
  int device;
  int recorded;
  uint64_t sid, seq; /* the last record */
  int timed;         /* t is that record's time */
  struct timespec t;
};
typedef struct CUevent_st event_t;

enum { R_DEVICE, R_HOST, R_IPC };

typedef struct range {
  struct range *next;
  uintptr_t base;
  size_t size;     /* bytes asked for: the bound that copies are checked on */
  size_t map_size; /* bytes mapped */
  int kind;
  int device;
  int fd;          /* R_DEVICE: the memfd */
  uint64_t id;     /* R_DEVICE: unique; R_IPC: the creator's id */
  uint64_t ino;    /* R_DEVICE: the memfd's inode */
  int64_t creator; /* R_IPC: the creator's pid */
  int refs;        /* R_IPC: opens */
} range_t;

/* What a cudaIpcMemHandle_t holds (zero-padded to 64 bytes). */
typedef struct {
  char magic[8];
  int64_t pid;
  int32_t fd;
  int32_t device;
  uint64_t id, size, ino;
} ipc_handle_t;

_Static_assert(sizeof(ipc_handle_t) <= sizeof(cudaIpcMemHandle_t),
               "ipc handle does not fit");

static struct {
  pthread_once_t once;
  pthread_mutex_t lock;
  pthread_cond_t done;
  int ndev;
  unsigned poll_max_us;
  uint64_t next_id;
  stream_t *streams; /* including legacy and draining ones */
  stream_t *legacy[MAX_DEVICES];
  event_t *events;
  range_t *ranges;
} G = {.once = PTHREAD_ONCE_INIT,
       .lock = PTHREAD_MUTEX_INITIALIZER,
       .done = PTHREAD_COND_INITIALIZER};

static void init_once(void) {
  const char *e = getenv("SOFTCUDA_DEVICES");
  G.ndev = 1;
  if (e && *e) {
    char *end;
    long n = strtol(e, &end, 10);
    if (*end || n < 0 || n > MAX_DEVICES)
      say("SOFTCUDA_DEVICES=%s: want 0..%d; using 1", e, MAX_DEVICES);
    else
      G.ndev = (int)n;
  }
  G.poll_max_us = 100;
  e = getenv("SOFTCUDA_POLL_US");
  if (e && atoi(e) >= 20)
    G.poll_max_us = (unsigned)atoi(e);
    /* The real runtime loads the driver (libcuda.so.1) on its first call, and
     * sharc asks the loader whether it is there (devstream.c cuda_in_use):
     * load the stub whose soname is libcuda.so.1 now, not at startup. */
#ifdef SOFTCUDA_DRIVER
  if (!dlopen(SOFTCUDA_DRIVER, RTLD_NOW | RTLD_GLOBAL))
    say("cannot load the driver stub %s: %s", SOFTCUDA_DRIVER, dlerror());
#endif
}

/* Every API call starts here. */
static cudaError_t enter(const char *fn) {
  pthread_once(&G.once, init_once);
  if (in_host_fn) {
    say("%s called from a host function (cudaLaunchHostFunc); CUDA forbids "
        "CUDA calls there: cudaErrorNotPermitted",
        fn);
    return cudaErrorNotPermitted;
  }
  return cudaSuccess;
}

/* enter() for calls that need a device. */
static cudaError_t enter_dev(const char *fn) {
  cudaError_t e = enter(fn);
  if (e == cudaSuccess && G.ndev == 0)
    e = cudaErrorNoDevice;
  return e;
}

#define ENTER()                                                                \
  do {                                                                         \
    cudaError_t e_ = enter(__func__);                                          \
    if (e_ != cudaSuccess)                                                     \
      return fail(e_);                                                         \
  } while (0)

#define ENTER_DEV()                                                            \
  do {                                                                         \
    cudaError_t e_ = enter_dev(__func__);                                      \
    if (e_ != cudaSuccess)                                                     \
      return fail(e_);                                                         \
  } while (0)

/* ---- the allocation table (lock held) ----------------------------------- */

static range_t *range_find(const void *p) {
  uintptr_t a = (uintptr_t)p;
  for (range_t *r = G.ranges; r; r = r->next)
    if (a >= r->base && a - r->base < (r->size ? r->size : 1))
      return r;
  return NULL;
}

static void range_unlink(range_t *r) {
  for (range_t **pp = &G.ranges; *pp; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      return;
    }
}

enum { M_UNREG, M_DEVICE, M_HOST, M_OVERRUN };

/* What [p, p + n) is; M_OVERRUN: it starts in an allocation and runs past
 * its end. */
static int mem_kind(const void *p, size_t n) {
  range_t *r = range_find(p);
  if (!r)
    return M_UNREG;
  if (n > r->size - ((uintptr_t)p - r->base))
    return M_OVERRUN;
  return r->kind == R_HOST ? M_HOST : M_DEVICE;
}

static const char *mem_name(int k) {
  static const char *const names[] = {"unregistered host memory",
                                      "device memory", "pinned host memory",
                                      "past the end of its allocation"};
  return names[k];
}

/* A pointer the device side of an operation may use: device memory, or
 * pinned (mapped) host memory, [p, p + n) inside its allocation. */
static cudaError_t check_dev_side(const char *fn, const char *what,
                                  const void *p, size_t n) {
  int k = mem_kind(p, n);
  if (k == M_DEVICE || k == M_HOST)
    return cudaSuccess;
  REFUSE(cudaErrorInvalidValue, "%s: %s [%p, +%zu bytes) is %s", fn, what, p, n,
         mem_name(k));
}

/* A pointer that may be anything but must not overrun an allocation. */
static cudaError_t check_any(const char *fn, const char *what, const void *p,
                             size_t n) {
  if (mem_kind(p, n) != M_OVERRUN)
    return cudaSuccess;
  REFUSE(cudaErrorInvalidValue, "%s: %s [%p, +%zu bytes) is %s", fn, what, p, n,
         mem_name(M_OVERRUN));
}

/* ---- streams (lock held unless said) ------------------------------------ */

static stream_t *stream_by_id(uint64_t id) {
  for (stream_t *s = G.streams; s; s = s->next)
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
      pthread_cond_wait(&G.done, &G.lock);
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

static void op_free(op_t *op) {
  free(op->deps);
  free(op);
}

static void run_op(stream_t *s, op_t *op);

static void *worker(void *arg) {
  stream_t *s = arg;
  cur_dev = s->device; /* host functions see the stream's device */
  pthread_mutex_lock(&G.lock);
  for (;;) {
    while (!s->head && !s->destroyed)
      pthread_cond_wait(&s->wake, &G.lock);
    op_t *op = s->head;
    if (!op)
      break;
    wait_deps(op->deps, op->ndeps);
    pthread_mutex_unlock(&G.lock);
    run_op(s, op);
    pthread_mutex_lock(&G.lock);
    s->head = op->next;
    if (!s->head)
      s->tail = NULL;
    s->done = op->seq;
    pthread_cond_broadcast(&G.done);
    op_free(op);
  }
  for (stream_t **pp = &G.streams; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  pthread_cond_broadcast(&G.done);
  pthread_mutex_unlock(&G.lock);
  pthread_cond_destroy(&s->wake);
  free(s);
  return NULL;
}

static cudaError_t stream_new(int device, unsigned flags, int legacy,
                              stream_t **out) {
  stream_t *s = calloc(1, sizeof *s);
  if (!s)
    return cudaErrorMemoryAllocation;
  s->id = ++G.next_id;
  s->device = device;
  s->flags = flags;
  s->legacy = legacy;
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
  s->next = G.streams;
  G.streams = s;
  *out = s;
  return cudaSuccess;
}

/* The stream a handle names: NULL, cudaStreamLegacy and cudaStreamPerThread
 * are the current device's legacy stream. */
static cudaError_t resolve(cudaStream_t h, stream_t **out) {
  if (h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread) {
    if (G.ndev == 0)
      return cudaErrorNoDevice;
    stream_t **l = &G.legacy[cur_dev];
    if (!*l) {
      cudaError_t e = stream_new(cur_dev, 0, 1, l);
      if (e != cudaSuccess)
        return e;
    }
    *out = *l;
    return cudaSuccess;
  }
  for (stream_t *s = G.streams; s; s = s->next)
    if (s == h && !s->destroyed && !s->legacy) {
      *out = s;
      return cudaSuccess;
    }
  return cudaErrorInvalidResourceHandle;
}

/* Queues op on s, after the legacy-stream dependencies; takes op. */
static cudaError_t submit(stream_t *s, op_t *op) {
  int bad = 0;
  if (s->legacy) {
    for (stream_t *t = G.streams; t; t = t->next)
      if (t != s && t->device == s->device && !t->legacy &&
          !(t->flags & cudaStreamNonBlocking) && t->done < t->queued)
        bad |= add_dep(op, t->id, t->queued);
  } else if (!(s->flags & cudaStreamNonBlocking)) {
    stream_t *l = G.legacy[s->device];
    if (l && l->done < l->queued)
      bad |= add_dep(op, l->id, l->queued);
  }
  if (bad) {
    op_free(op);
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

static op_t *op_new(int kind) {
  op_t *op = calloc(1, sizeof *op);
  if (op)
    op->kind = kind;
  return op;
}

/* Resolves h and queues op (taken in every case). */
static cudaError_t enqueue(cudaStream_t h, op_t *op, stream_t **on) {
  if (!op)
    return cudaErrorMemoryAllocation;
  stream_t *s = NULL;
  cudaError_t e = resolve(h, &s);
  if (e != cudaSuccess) {
    op_free(op);
    return e;
  }
  if (on)
    *on = s;
  return submit(s, op);
}

/* Waits (lock held) until stream s finished everything queued so far. */
static void wait_stream(stream_t *s) {
  dep_t d = {s->id, s->queued};
  wait_deps(&d, 1);
}

/* Waits (lock held) until every stream of device dev (-1: all) finished
 * what was queued on it so far. */
static void wait_all(int dev) {
  for (;;) {
    int again = 0;
    for (stream_t *s = G.streams; s; s = s->next)
      if ((dev < 0 || s->device == dev) && s->done < s->queued) {
        wait_stream(s); /* the list may change meanwhile: start over */
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
    for (size_t r = 0; r < op->u.copy.height; r++)
      memcpy(d + r * op->u.copy.dpitch, src + r * op->u.copy.spitch,
             op->u.copy.width);
    break;
  }
  case OP_SET:
    memset(op->u.set.dst, op->u.set.value, op->u.set.bytes);
    break;
  case OP_HOST_FN:
    in_host_fn = 1;
    op->u.host.fn(op->u.host.arg);
    in_host_fn = 0;
    break;
  case OP_RECORD: {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    pthread_mutex_lock(&G.lock);
    for (event_t *ev = G.events; ev; ev = ev->next)
      if (ev->id == op->u.rec.eid && ev->sid == s->id && ev->seq == op->seq) {
        ev->t = t;
        ev->timed = 1;
      }
    pthread_mutex_unlock(&G.lock);
    break;
  }
  case OP_WAIT32: {
    unsigned us = 20;
    while (!wait32_met(__atomic_load_n(op->u.v32.addr, __ATOMIC_ACQUIRE),
                       op->u.v32.value, op->u.v32.flags)) {
      sleep_us(us);
      if (us < G.poll_max_us)
        us = us * 2 < G.poll_max_us ? us * 2 : G.poll_max_us;
    }
    break;
  }
  case OP_WRITE32:
    if (op->u.v32.flags & CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)
      __atomic_store_n(op->u.v32.addr, op->u.v32.value, __ATOMIC_RELAXED);
    else
      __atomic_store_n(op->u.v32.addr, op->u.v32.value, __ATOMIC_RELEASE);
    break;
  case OP_REDUCE:
    kernel_reduce(op->u.k.dtype, op->u.k.op, op->u.k.dst, op->u.k.a, op->u.k.b,
                  op->u.k.n);
    break;
  case OP_DIV:
    kernel_div(op->u.k.dtype, op->u.k.dst, op->u.k.n, op->u.k.divisor);
    break;
  default:
    break;
  }
}

/* ---- errors API --------------------------------------------------------- */

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t error) {
#define SC_NAME(code, msg)                                                     \
  case code:                                                                   \
    return #code;
  switch ((int)error) {
    SC_ERRORS(SC_NAME)
  default:
    return "unrecognized error code";
  }
#undef SC_NAME
}

const char *cudaGetErrorString(cudaError_t error) {
#define SC_MSG(code, msg)                                                      \
  case code:                                                                   \
    return msg;
  switch ((int)error) {
    SC_ERRORS(SC_MSG)
  default:
    return "unrecognized error code";
  }
#undef SC_MSG
}

/* ---- versions and devices ----------------------------------------------- */

cudaError_t cudaDriverGetVersion(int *v) {
  ENTER();
  if (!v)
    return fail(cudaErrorInvalidValue);
  *v = CUDA_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  if (!v)
    return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count) {
  ENTER();
  if (!count)
    return fail(cudaErrorInvalidValue);
  *count = G.ndev;
  return G.ndev ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  ENTER_DEV();
  if (device < 0 || device >= G.ndev)
    REFUSE(cudaErrorInvalidDevice, "cudaSetDevice(%d): %d devices", device,
           G.ndev);
  cur_dev = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  ENTER_DEV();
  if (!device)
    return fail(cudaErrorInvalidValue);
  *device = cur_dev;
  return cudaSuccess;
}

static void fill_props(struct cudaDeviceProp *p, int dev) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "softcuda host device");
  for (size_t i = 0; i < sizeof p->uuid.bytes; i++)
    p->uuid.bytes[i] = (char)(0x5c + dev + (int)i);
  p->totalGlobalMem = (size_t)16 << 30;
  p->sharedMemPerBlock = 48 << 10;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = SIZE_MAX;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = INT32_MAX;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->totalConstMem = 64 << 10;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 4;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->pciBusID = 0x10 + dev;
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = 256;
  p->l2CacheSize = 4 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->sharedMemPerMultiprocessor = 228 << 10;
  p->regsPerMultiprocessor = 65536;
  p->maxBlocksPerMultiProcessor = 32;
  p->hostRegisterSupported = 0;
  p->memoryPoolsSupported = 0; /* no cudaMallocAsync */
  p->managedMemory = 0;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  ENTER_DEV();
  if (!prop)
    return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= G.ndev)
    return fail(cudaErrorInvalidDevice);
  fill_props(prop, device);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr,
                                   int device) {
  ENTER_DEV();
  if (!value)
    return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= G.ndev)
    return fail(cudaErrorInvalidDevice);
  struct cudaDeviceProp p;
  fill_props(&p, device);
  switch (attr) {
  case cudaDevAttrMultiProcessorCount:
    *value = p.multiProcessorCount;
    break;
  case cudaDevAttrCanMapHostMemory:
    *value = p.canMapHostMemory;
    break;
  case cudaDevAttrComputeCapabilityMajor:
    *value = p.major;
    break;
  case cudaDevAttrComputeCapabilityMinor:
    *value = p.minor;
    break;
  case cudaDevAttrUnifiedAddressing:
    *value = p.unifiedAddressing;
    break;
  case cudaDevAttrWarpSize:
    *value = p.warpSize;
    break;
  case cudaDevAttrMaxThreadsPerBlock:
    *value = p.maxThreadsPerBlock;
    break;
  case cudaDevAttrPciBusId:
    *value = p.pciBusID;
    break;
  case cudaDevAttrAsyncEngineCount:
    *value = p.asyncEngineCount;
    break;
  case cudaDevAttrL2CacheSize:
    *value = p.l2CacheSize;
    break;
  case cudaDevAttrConcurrentKernels:
    *value = p.concurrentKernels;
    break;
  default:
    *value = 0; /* not modelled: absent */
    break;
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  ENTER_DEV();
  pthread_mutex_lock(&G.lock);
  wait_all(cur_dev);
  pthread_mutex_unlock(&G.lock);
  return cudaSuccess;
}

/* ---- memory ------------------------------------------------------------- */

static size_t page_round(size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (n + pg - 1) / pg * pg;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  ENTER_DEV();
  if (!devPtr)
    return fail(cudaErrorInvalidValue);
  *devPtr = NULL;
  if (size == 0)
    return cudaSuccess;
  range_t *r = calloc(1, sizeof *r);
  if (!r)
    return fail(cudaErrorMemoryAllocation);
  r->map_size = page_round(size);
  r->fd = memfd_create("softcuda", MFD_CLOEXEC);
  struct stat st;
  void *p = MAP_FAILED;
  if (r->fd >= 0 && ftruncate(r->fd, (off_t)r->map_size) == 0 &&
      fstat(r->fd, &st) == 0)
    p = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    if (r->fd >= 0)
      close(r->fd);
    free(r);
    REFUSE(cudaErrorMemoryAllocation, "cudaMalloc(%zu): %s", size,
           strerror(err));
  }
  r->base = (uintptr_t)p;
  r->size = size;
  r->kind = R_DEVICE;
  r->device = cur_dev;
  r->ino = (uint64_t)st.st_ino;
  pthread_mutex_lock(&G.lock);
  r->id = ++G.next_id;
  r->next = G.ranges;
  G.ranges = r;
  pthread_mutex_unlock(&G.lock);
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr) {
  ENTER();
  if (!devPtr)
    return cudaSuccess;
  pthread_mutex_lock(&G.lock);
  wait_all(-1); /* cudaFree synchronizes */
  range_t *r = range_find(devPtr);
  if (!r || r->kind != R_DEVICE || r->base != (uintptr_t)devPtr) {
    pthread_mutex_unlock(&G.lock);
    REFUSE(cudaErrorInvalidValue, "cudaFree(%p): not a cudaMalloc allocation",
           devPtr);
  }
  range_unlink(r);
  pthread_mutex_unlock(&G.lock);
  munmap((void *)r->base, r->map_size);
  close(r->fd);
  free(r);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  ENTER_DEV();
  if (!pHost ||
      (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped |
                           cudaHostAllocWriteCombined)))
    return fail(cudaErrorInvalidValue);
  *pHost = NULL;
  if (size == 0)
    return cudaSuccess;
  range_t *r = calloc(1, sizeof *r);
  if (!r)
    return fail(cudaErrorMemoryAllocation);
  r->map_size = page_round(size);
  void *p = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    free(r);
    return fail(cudaErrorMemoryAllocation);
  }
  r->base = (uintptr_t)p;
  r->size = size;
  r->kind = R_HOST;
  r->device = cur_dev;
  r->fd = -1;
  pthread_mutex_lock(&G.lock);
  r->next = G.ranges;
  G.ranges = r;
  pthread_mutex_unlock(&G.lock);
  *pHost = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void *ptr) {
  ENTER();
  if (!ptr)
    return cudaSuccess;
  pthread_mutex_lock(&G.lock);
  wait_all(-1); /* like cudaFree, it synchronizes */
  range_t *r = range_find(ptr);
  if (!r || r->kind != R_HOST || r->base != (uintptr_t)ptr) {
    pthread_mutex_unlock(&G.lock);
    REFUSE(cudaErrorInvalidValue,
           "cudaFreeHost(%p): not a cudaHostAlloc allocation", ptr);
  }
  range_unlink(r);
  pthread_mutex_unlock(&G.lock);
  munmap((void *)r->base, r->map_size);
  free(r);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost,
                                     unsigned int flags) {
  ENTER_DEV();
  if (!pDevice || flags)
    return fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&G.lock);
  range_t *r = range_find(pHost);
  int ok = r && r->kind == R_HOST;
  pthread_mutex_unlock(&G.lock);
  if (!ok)
    REFUSE(cudaErrorInvalidValue,
           "cudaHostGetDevicePointer(%p): not pinned host memory", pHost);
  *pDevice = pHost; /* identity: unified addressing */
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a,
                                     const void *ptr) {
  ENTER();
  if (!a)
    return fail(cudaErrorInvalidValue);
  memset(a, 0, sizeof *a);
  pthread_mutex_lock(&G.lock);
  range_t *r = range_find(ptr);
  if (!r) {
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
    a->hostPointer = (void *)(uintptr_t)ptr;
  } else if (r->kind == R_HOST) {
    a->type = cudaMemoryTypeHost;
    a->device = r->device;
    a->hostPointer = a->devicePointer = (void *)(uintptr_t)ptr;
  } else {
    a->type = cudaMemoryTypeDevice;
    a->device = r->device;
    a->devicePointer = (void *)(uintptr_t)ptr;
  }
  pthread_mutex_unlock(&G.lock);
  return cudaSuccess;
}

/* cuMemGetAddressRange, through the entry point table. */
static CUresult sc_mem_get_address_range(CUdeviceptr *pbase, size_t *psize,
                                         CUdeviceptr dptr) {
  if (enter(__func__) != cudaSuccess)
    return CUDA_ERROR_NOT_PERMITTED;
  pthread_mutex_lock(&G.lock);
  range_t *r = range_find((const void *)(uintptr_t)dptr);
  uintptr_t base = r ? r->base : 0;
  size_t size = r ? r->size : 0;
  pthread_mutex_unlock(&G.lock);
  if (!r)
    return CUDA_ERROR_NOT_FOUND;
  if (pbase)
    *pbase = (CUdeviceptr)base;
  if (psize)
    *psize = size;
  return CUDA_SUCCESS;
}

/* ---- copies and memsets ------------------------------------------------- */

/* Checks a copy of rows (extent: bytes from the first to the last byte
 * touched) against kind; lock held. */
static cudaError_t check_copy(const char *fn, void *dst, size_t dext,
                              const void *src, size_t sext,
                              enum cudaMemcpyKind kind) {
  cudaError_t e = cudaSuccess;
  switch (kind) {
  case cudaMemcpyHostToHost:
  case cudaMemcpyDefault:
    if ((e = check_any(fn, "dst", dst, dext)) == cudaSuccess)
      e = check_any(fn, "src", src, sext);
    break;
  case cudaMemcpyHostToDevice:
    if ((e = check_dev_side(fn, "dst", dst, dext)) == cudaSuccess)
      e = check_any(fn, "src", src, sext);
    break;
  case cudaMemcpyDeviceToHost:
    if ((e = check_any(fn, "dst", dst, dext)) == cudaSuccess)
      e = check_dev_side(fn, "src", src, sext);
    break;
  case cudaMemcpyDeviceToDevice:
    if ((e = check_dev_side(fn, "dst", dst, dext)) == cudaSuccess)
      e = check_dev_side(fn, "src", src, sext);
    break;
  default:
    REFUSE(cudaErrorInvalidMemcpyDirection, "%s: kind %d", fn, (int)kind);
  }
  if (e == cudaSuccess && dext && sext &&
      (uintptr_t)dst < (uintptr_t)src + sext &&
      (uintptr_t)src < (uintptr_t)dst + dext)
    say("%s: dst [%p, +%zu) and src [%p, +%zu) overlap (undefined in CUDA)", fn,
        dst, dext, src, sext);
  return e;
}

static cudaError_t copy_2d(const char *fn, void *dst, size_t dpitch,
                           const void *src, size_t spitch, size_t width,
                           size_t height, enum cudaMemcpyKind kind,
                           cudaStream_t stream, int sync) {
  cudaError_t e = enter_dev(fn);
  if (e != cudaSuccess)
    return fail(e);
  if (width > dpitch || width > spitch)
    REFUSE(cudaErrorInvalidPitchValue, "%s: width %zu, pitches %zu and %zu", fn,
           width, dpitch, spitch);
  if (width && height && (!dst || !src))
    return fail(cudaErrorInvalidValue);
  size_t dext = width && height ? dpitch * (height - 1) + width : 0;
  size_t sext = width && height ? spitch * (height - 1) + width : 0;
  op_t *op = op_new(OP_COPY);
  if (!op)
    return fail(cudaErrorMemoryAllocation);
  op->u.copy.dst = dst;
  op->u.copy.src = src;
  op->u.copy.width = width;
  op->u.copy.height = width ? height : 0;
  op->u.copy.dpitch = dpitch;
  op->u.copy.spitch = spitch;
  pthread_mutex_lock(&G.lock);
  e = check_copy(fn, dst, dext, src, sext, kind);
  stream_t *s = NULL;
  if (e != cudaSuccess)
    op_free(op);
  else
    e = enqueue(sync ? NULL : stream, op, &s);
  if (e == cudaSuccess && sync)
    wait_stream(s);
  pthread_mutex_unlock(&G.lock);
  return fail(e);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream) {
  return copy_2d(__func__, dst, count, src, count, count, 1, kind, stream, 0);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                       enum cudaMemcpyKind kind) {
  return copy_2d(__func__, dst, count, src, count, count, 1, kind, NULL, 1);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                              size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream) {
  return copy_2d(__func__, dst, dpitch, src, spitch, width, height, kind,
                 stream, 0);
}

static cudaError_t memset_op(const char *fn, void *dst, int value, size_t count,
                             cudaStream_t stream, int sync) {
  cudaError_t e = enter_dev(fn);
  if (e != cudaSuccess)
    return fail(e);
  if (count == 0)
    return cudaSuccess;
  op_t *op = op_new(OP_SET);
  if (!op)
    return fail(cudaErrorMemoryAllocation);
  op->u.set.dst = dst;
  op->u.set.value = value;
  op->u.set.bytes = count;
  pthread_mutex_lock(&G.lock);
  e = check_dev_side(fn, "dst", dst, count);
  stream_t *s = NULL;
  if (e != cudaSuccess)
    op_free(op);
  else
    e = enqueue(sync ? NULL : stream, op, &s);
  if (e == cudaSuccess && sync)
    wait_stream(s);
  pthread_mutex_unlock(&G.lock);
  return fail(e);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                            cudaStream_t stream) {
  return memset_op(__func__, devPtr, value, count, stream, 0);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  return memset_op(__func__, devPtr, value, count, NULL, 1);
}

/* ---- streams API -------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream,
                                      unsigned int flags) {
  ENTER_DEV();
  if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking))
    return fail(cudaErrorInvalidValue);
  stream_t *s = NULL;
  pthread_mutex_lock(&G.lock);
  cudaError_t e = stream_new(cur_dev, flags, 0, &s);
  pthread_mutex_unlock(&G.lock);
  if (e != cudaSuccess)
    return fail(e);
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
  pthread_mutex_lock(&G.lock);
  stream_t *s = NULL;
  cudaError_t e = stream ? resolve(stream, &s) : cudaErrorInvalidResourceHandle;
  if (e == cudaSuccess && s->legacy)
    e = cudaErrorInvalidResourceHandle;
  if (e == cudaSuccess) {
    s->destroyed = 1;
    pthread_cond_signal(&s->wake);
  }
  pthread_mutex_unlock(&G.lock);
  if (e != cudaSuccess)
    REFUSE(e, "cudaStreamDestroy(%p): not a live stream", (void *)stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  ENTER_DEV();
  pthread_mutex_lock(&G.lock);
  stream_t *s = NULL;
  cudaError_t e = resolve(stream, &s);
  if (e == cudaSuccess && s->legacy) {
    /* the legacy stream also waits for the blocking streams: a marker on
     * it carries those dependencies */
    op_t *op = op_new(OP_NOP);
    e = op ? submit(s, op) : cudaErrorMemoryAllocation;
  }
  if (e == cudaSuccess)
    wait_stream(s);
  pthread_mutex_unlock(&G.lock);
  return fail(e);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  ENTER_DEV();
  pthread_mutex_lock(&G.lock);
  stream_t *s = NULL;
  cudaError_t e = resolve(stream, &s);
  if (e == cudaSuccess && s->done < s->queued)
    e = cudaErrorNotReady;
  pthread_mutex_unlock(&G.lock);
  return fail(e);
}

cudaError_t
cudaStreamIsCapturing(cudaStream_t stream,
                      enum cudaStreamCaptureStatus *pCaptureStatus) {
  ENTER_DEV();
  if (!pCaptureStatus)
    return fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&G.lock);
  stream_t *s = NULL;
  cudaError_t e = resolve(stream, &s);
  pthread_mutex_unlock(&G.lock);
  if (e == cudaSuccess)
    *pCaptureStatus = cudaStreamCaptureStatusNone;
  return fail(e);
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int *device) {
  ENTER_DEV();
  if (!device)
    return fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&G.lock);
  stream_t *s = NULL;
  cudaError_t e = resolve(stream, &s);
  if (e == cudaSuccess)
    *device = s->device;
  pthread_mutex_unlock(&G.lock);
  return fail(e);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn,
                               void *userData) {
  ENTER_DEV();
  if (!fn)
    return fail(cudaErrorInvalidValue);
  op_t *op = op_new(OP_HOST_FN);
  if (op) {
    op->u.host.fn = fn;
    op->u.host.arg = userData;
  }
  pthread_mutex_lock(&G.lock);
  cudaError_t e = enqueue(stream, op, NULL);
  pthread_mutex_unlock(&G.lock);
  return fail(e);
}

/* ---- events ------------------------------------------------------------- */

static event_t *event_find(cudaEvent_t h) {
  for (event_t *ev = G.events; ev; ev = ev->next)
    if (ev == h)
      return ev;
  return NULL;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  ENTER_DEV();
  unsigned known =
      cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~known) ||
      ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)))
    return fail(cudaErrorInvalidValue);
  if (flags & cudaEventInterprocess)
    REFUSE(cudaErrorNotSupported, "cudaEventCreateWithFlags: interprocess "
                                  "events are not modelled");
  event_t *ev = calloc(1, sizeof *ev);
  if (!ev)
    return fail(cudaErrorMemoryAllocation);
  ev->flags = flags;
  ev->device = cur_dev;
  pthread_mutex_lock(&G.lock);
  ev->id = ++G.next_id;
  ev->next = G.events;
  G.events = ev;
  pthread_mutex_unlock(&G.lock);
  *event = ev;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  ENTER_DEV();
  pthread_mutex_lock(&G.lock);
  event_t *ev = event_find(event);
  if (ev)
    for (event_t **pp = &G.events; *pp; pp = &(*pp)->next)
      if (*pp == ev) {
        *pp = ev->next;
        break;
      }
  pthread_mutex_unlock(&G.lock);
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
  pthread_mutex_lock(&G.lock);
  event_t *ev = event_find(event);
  stream_t *s = NULL;
  cudaError_t e = ev ? resolve(stream, &s) : cudaErrorInvalidResourceHandle;
  if (e == cudaSuccess && s->device != ev->device) {
    if (debug_on())
      say("cudaEventRecord: event of device %d, stream of device %d",
          ev->device, s->device);
    e = cudaErrorInvalidResourceHandle;
  }
  op_t *op = e == cudaSuccess ? op_new(OP_RECORD) : NULL;
  if (e == cudaSuccess && !op)
    e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) {
    op->u.rec.eid = ev->id;
    e = submit(s, op);
  }
  if (e == cudaSuccess) {
    ev->recorded = 1;
    ev->sid = s->id;
    ev->seq = s->queued;
    ev->timed = 0;
  }
  pthread_mutex_unlock(&G.lock);
  return fail(e);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  ENTER_DEV();
  pthread_mutex_lock(&G.lock);
  event_t *ev = event_find(event);
  if (ev && ev->recorded) {
    dep_t d = {ev->sid, ev->seq};
    wait_deps(&d, 1);
  }
  pthread_mutex_unlock(&G.lock);
  return ev ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  ENTER_DEV();
  pthread_mutex_lock(&G.lock);
  event_t *ev = event_find(event);
  cudaError_t e = cudaErrorInvalidResourceHandle;
  if (ev) {
    dep_t d = {ev->sid, ev->seq};
    e = !ev->recorded || dep_done(&d) ? cudaSuccess : cudaErrorNotReady;
  }
  pthread_mutex_unlock(&G.lock);
  return fail(e);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  ENTER_DEV();
  if (!ms)
    return fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&G.lock);
  event_t *a = event_find(start), *b = event_find(end);
  cudaError_t e = cudaSuccess;
  if (!a || !b || !a->recorded || !b->recorded ||
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
  pthread_mutex_unlock(&G.lock);
  return fail(e);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned int flags) {
  ENTER_DEV();
  if (flags & ~1u) /* cudaEventWaitDefault, cudaEventWaitExternal */
    return fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&G.lock);
  event_t *ev = event_find(event);
  cudaError_t e = cudaErrorInvalidResourceHandle;
  if (ev) {
    op_t *op = op_new(OP_NOP);
    /* the record as of now; an event never recorded is complete */
    if (op && ev->recorded && add_dep(op, ev->sid, ev->seq)) {
      op_free(op);
      op = NULL;
    }
    e = enqueue(stream, op, NULL);
  }
  pthread_mutex_unlock(&G.lock);
  return fail(e);
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
  cudaError_t e = enter_dev(fn);
  if (e != cudaSuccess)
    return to_cu(e);
  uint32_t *p = (uint32_t *)(uintptr_t)addr;
  unsigned known = kind == OP_WAIT32 ? 3u | CU_STREAM_WAIT_VALUE_FLUSH
                                     : CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
  if (!p || (addr & 3) || (flags & ~known)) {
    if (debug_on())
      say("%s: address %p, flags %#x", fn, (void *)p, flags);
    return CUDA_ERROR_INVALID_VALUE;
  }
  op_t *op = op_new(kind);
  if (!op)
    return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.v32.addr = p;
  op->u.v32.value = value;
  op->u.v32.flags = flags;
  pthread_mutex_lock(&G.lock);
  e = check_dev_side(fn, "addr", p, sizeof *p);
  if (e == cudaSuccess)
    e = enqueue((cudaStream_t)stream, op, NULL);
  else
    op_free(op);
  pthread_mutex_unlock(&G.lock);
  (void)cudaGetLastError(); /* driver calls leave no runtime error */
  return to_cu(e);
}

static CUresult sc_stream_wait_value32(CUstream stream, CUdeviceptr addr,
                                       cuuint32_t value, unsigned int flags) {
  return stream_value32("cuStreamWaitValue32", OP_WAIT32, stream, addr, value,
                        flags);
}

static CUresult sc_stream_write_value32(CUstream stream, CUdeviceptr addr,
                                        cuuint32_t value, unsigned int flags) {
  return stream_value32("cuStreamWriteValue32", OP_WRITE32, stream, addr, value,
                        flags);
}

static const struct {
  const char *name;
  void *fn;
  unsigned since; /* CUDA version of the versioned entry point returned */
} entry_points[] = {
    {"cuStreamWaitValue32", (void *)sc_stream_wait_value32, 11070},
    {"cuStreamWriteValue32", (void *)sc_stream_write_value32, 11070},
    {"cuMemGetAddressRange", (void *)sc_mem_get_address_range, 3020},
};

cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion,
    unsigned long long flags, enum cudaDriverEntryPointQueryResult *status) {
  ENTER();
  if (!symbol || !funcPtr || cudaVersion > CUDA_VERSION ||
      (flags & ~(unsigned long long)(cudaEnableLegacyStream |
                                     cudaEnablePerThreadDefaultStream)))
    return fail(cudaErrorInvalidValue);
  *funcPtr = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  for (size_t i = 0; i < sizeof entry_points / sizeof *entry_points; i++)
    if (!strcmp(symbol, entry_points[i].name)) {
      if (cudaVersion < entry_points[i].since) {
        q = cudaDriverEntryPointVersionNotSufficent;
      } else {
        q = cudaDriverEntryPointSuccess;
        *funcPtr = entry_points[i].fn;
      }
    }
  if (q != cudaDriverEntryPointSuccess && debug_on())
    say("cudaGetDriverEntryPointByVersion(%s, %u): not provided", symbol,
        cudaVersion);
  if (status)
    *status = q;
  return cudaSuccess;
}

cudaError_t
cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                        unsigned long long flags,
                        enum cudaDriverEntryPointQueryResult *driverStatus) {
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION,
                                          flags, driverStatus);
}

/* ---- CUDA IPC ----------------------------------------------------------- */

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
  ENTER_DEV();
  if (!handle)
    return fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&G.lock);
  range_t *r = range_find(devPtr);
  ipc_handle_t h;
  memset(&h, 0, sizeof h);
  int ok = r && r->kind == R_DEVICE;
  if (ok) {
    memcpy(h.magic, IPC_MAGIC, sizeof h.magic);
    h.pid = (int64_t)getpid();
    h.fd = r->fd;
    h.device = r->device;
    h.id = r->id;
    h.size = r->size;
    h.ino = r->ino;
  }
  pthread_mutex_unlock(&G.lock);
  if (!ok)
    REFUSE(cudaErrorInvalidValue,
           "cudaIpcGetMemHandle(%p): not in a cudaMalloc allocation of this "
           "process",
           devPtr);
  memset(handle, 0, sizeof *handle);
  memcpy(handle, &h, sizeof h);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle,
                                 unsigned int flags) {
  ENTER_DEV();
  ipc_handle_t h;
  memcpy(&h, &handle, sizeof h);
  if (!devPtr || memcmp(h.magic, IPC_MAGIC, sizeof h.magic) ||
      (flags & ~(unsigned)cudaIpcMemLazyEnablePeerAccess))
    return fail(cudaErrorInvalidValue);
  if (h.pid == (int64_t)getpid())
    REFUSE(cudaErrorDeviceUninitialized,
           "cudaIpcOpenMemHandle: the handle was made by this process (CUDA "
           "refuses that too)");
  pthread_mutex_lock(&G.lock);
  for (range_t *r = G.ranges; r; r = r->next)
    if (r->kind == R_IPC && r->creator == h.pid && r->id == h.id) {
      r->refs++;
      *devPtr = (void *)r->base;
      pthread_mutex_unlock(&G.lock);
      return cudaSuccess;
    }
  pthread_mutex_unlock(&G.lock);
  char path[64];
  snprintf(path, sizeof path, "/proc/%lld/fd/%d", (long long)h.pid, h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || (uint64_t)st.st_ino != h.ino) {
    int err = fd < 0 ? errno : ESTALE;
    if (fd >= 0)
      close(fd);
    REFUSE(cudaErrorMapBufferObjectFailed,
           "cudaIpcOpenMemHandle: %s: %s (the allocation or its process is "
           "gone)",
           path, strerror(err));
  }
  range_t *r = calloc(1, sizeof *r);
  void *p = MAP_FAILED;
  size_t map_size = page_round(h.size);
  if (r)
    p = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    free(r);
    return fail(cudaErrorMapBufferObjectFailed);
  }
  r->base = (uintptr_t)p;
  r->size = h.size;
  r->map_size = map_size;
  r->kind = R_IPC;
  r->device = cur_dev;
  r->fd = -1;
  r->id = h.id;
  r->creator = h.pid;
  r->refs = 1;
  pthread_mutex_lock(&G.lock);
  r->next = G.ranges;
  G.ranges = r;
  pthread_mutex_unlock(&G.lock);
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *devPtr) {
  ENTER_DEV();
  pthread_mutex_lock(&G.lock);
  range_t *r = range_find(devPtr);
  if (!r || r->kind != R_IPC || r->base != (uintptr_t)devPtr) {
    pthread_mutex_unlock(&G.lock);
    REFUSE(cudaErrorInvalidValue,
           "cudaIpcCloseMemHandle(%p): not an opened IPC mapping", devPtr);
  }
  if (--r->refs > 0) {
    pthread_mutex_unlock(&G.lock);
    return cudaSuccess;
  }
  range_unlink(r);
  pthread_mutex_unlock(&G.lock);
  munmap((void *)r->base, r->map_size);
  free(r);
  return cudaSuccess;
}

/* ---- kernels/device.h --------------------------------------------------- */

/* Element sizes from the dtype table the kernels are built from. */
static const size_t dtype_size[SHARC_DTYPE_COUNT] = {
#define SC_SIZE(NAME, T, C, U, LD, ST) [SHARC_##NAME] = sizeof(T),
    SHARC_KERNEL_DTYPES(SC_SIZE)
#undef SC_SIZE
};

/* Queues a host reduction / division as a "kernel" on cuda_stream. Invalid
 * arguments come back without a CUDA error (device.h); a launch that
 * device.cu would make but that would fault on a GPU (a pointer that is not
 * device memory, a range past its allocation, a stream of another device)
 * fails here, with a line on stderr, instead of corrupting memory. */
static int launch(const char *fn, int kind, sharc_dtype_t dtype, sharc_op_t op,
                  void *dst, const void *a, const void *b, size_t n,
                  int divisor, void *cuda_stream) {
  size_t es = dtype_size[dtype];
  if (((uintptr_t)dst | (uintptr_t)a | (uintptr_t)b) % es)
    return (int)cudaErrorInvalidValue; /* misaligned elements */
  cudaError_t e = enter_dev(fn);
  if (e != cudaSuccess)
    return (int)fail(e);
  op_t *o = op_new(kind);
  if (!o)
    return (int)fail(cudaErrorMemoryAllocation);
  o->u.k.dtype = dtype;
  o->u.k.op = op;
  o->u.k.dst = dst;
  o->u.k.a = a;
  o->u.k.b = b;
  o->u.k.n = n;
  o->u.k.divisor = divisor;
  size_t bytes = n * es;
  const void *ptrs[3] = {dst, a, b};
  static const char *const names[3] = {"dst", "a", "b"};
  pthread_mutex_lock(&G.lock);
  stream_t *s = NULL;
  e = resolve((cudaStream_t)cuda_stream, &s);
  if (e == cudaSuccess && s->device != cur_dev) {
    say("%s: stream of device %d, current device %d", fn, s->device, cur_dev);
    e = cudaErrorInvalidResourceHandle;
  }
  for (int i = 0; i < 3 && e == cudaSuccess; i++) {
    int k = mem_kind(ptrs[i], bytes);
    if (k != M_DEVICE && k != M_HOST) {
      say("%s: %s [%p, +%zu bytes) is %s: the kernel would fault", fn, names[i],
          ptrs[i], bytes, mem_name(k));
      e = cudaErrorIllegalAddress;
    }
  }
  if (e == cudaSuccess)
    e = submit(s, o);
  else
    op_free(o);
  pthread_mutex_unlock(&G.lock);
  return (int)fail(e);
}

int kernel_dev_reduce(sharc_dtype_t dtype, sharc_op_t op, void *dst,
                      const void *a, const void *b, size_t n,
                      void *cuda_stream) {
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT || (unsigned)op >= SHARC_OP_COUNT)
    return (int)cudaErrorInvalidValue;
  if (n == 0)
    return 0;
  if (!dst || !a || !b)
    return (int)cudaErrorInvalidValue;
  return launch(__func__, OP_REDUCE, dtype, op, dst, a, b, n, 1, cuda_stream);
}

int kernel_dev_div(sharc_dtype_t dtype, void *buf, size_t n, int divisor,
                   void *cuda_stream) {
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT || divisor <= 0)
    return (int)cudaErrorInvalidValue;
  if (n == 0 || divisor == 1)
    return 0;
  if (!buf)
    return (int)cudaErrorInvalidValue;
  return launch(__func__, OP_DIV, dtype, SHARC_SUM, buf, buf, buf, n, divisor,
                cuda_stream);
}

int kernel_dev_copy(void *dst, const void *src, size_t bytes,
                    void *cuda_stream) {
  if (bytes == 0 || dst == src)
    return 0;
  if (!dst || !src)
    return (int)cudaErrorInvalidValue;
  return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                              (cudaStream_t)cuda_stream);
}

void kernel_dev_versions(char *buf, size_t len) {
  int drv = 0, rt = 0;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  (void)cudaGetLastError();
  snprintf(buf, len, "driver supports CUDA %d.%d, runtime is %d.%d (softcuda)",
           drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
}

int kernel_dev_available(int *ndev, char *why, size_t whylen) {
  int count = 0;
  if (ndev)
    *ndev = 0;
  if (why && whylen)
    why[0] = '\0';
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    char ver[96];
    kernel_dev_versions(ver, sizeof ver);
    if (why && whylen)
      snprintf(why, whylen, "cudaGetDeviceCount: %s: %s; %s",
               cudaGetErrorName(e), cudaGetErrorString(e), ver);
    (void)cudaGetLastError();
    return 0;
  }
  if (ndev)
    *ndev = count;
  return 1; /* the host loops run on any "device" */
}

const char *kernel_dev_error_string(int err) {
  static _Thread_local char buf[192];
  cudaError_t e = (cudaError_t)err;
  snprintf(buf, sizeof buf, "%s: %s", cudaGetErrorName(e),
           cudaGetErrorString(e));
  return buf;
}

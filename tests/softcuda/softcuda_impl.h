/*
 * softcuda_impl.h - what the files of softcuda share (private; see
 * softcuda.c for what softcuda is and models):
 *  - softcuda.c: errors, process state, entry checks, devices, the driver
 *    entry point lookup;
 *  - softcuda_mem.c: the allocation table, allocations, pointer attributes,
 *    copies and memsets, CUDA IPC;
 *  - softcuda_stream.c: streams (worker threads, the op queue, waits),
 *    events, the driver's stream memory operations;
 *  - softcuda_kernel.c: kernel launches (softcuda_launch.h): the project's
 *    device code, compiled as host C++ through cuda_host.h, run grid by
 *    grid on the stream's worker;
 *  - softcuda_graph.c: stream capture into CUDA graphs, what capture
 *    forbids, and graph launch.
 *
 * Every file includes this header first: it includes the CUDA headers
 * under default visibility, which is what keeps the CUDA API exported
 * while everything else (this header's sc_* included) stays hidden
 * (-fvisibility=hidden).
 */
#ifndef SHARC_SOFTCUDA_IMPL_H
#define SHARC_SOFTCUDA_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The CUDA API is what this library exports (the target builds with
 * -fvisibility=hidden, like the rest of sharc). */
#pragma GCC visibility push(default)
#include <cuda.h>
#include <cuda_runtime_api.h>
#pragma GCC visibility pop

#define MAX_DEVICES 16

/* ---- errors and entry (softcuda.c) -------------------------------------- */

extern _Thread_local int sc_cur_dev;
extern _Thread_local int sc_in_host_fn; /* this thread runs a host function */

/* SOFTCUDA_DEBUG is set. */
int sc_debug_on(void);

/* A line on stderr, "softcuda[pid]: ...". */
void sc_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Records e as this thread's last error (cudaErrorNotReady is a status, not
 * an error, in CUDA too) and returns it. */
cudaError_t sc_fail(cudaError_t e);

/* e, or the fault that lost the context (a wait just ended: the work it
 * waited for may have faulted). */
cudaError_t sc_sticky_or(cudaError_t e);

/* Every API call starts here: initializes once, refuses calls from host
 * functions. sc_enter_dev also refuses when there is no device. */
cudaError_t sc_enter(const char *fn);
cudaError_t sc_enter_dev(const char *fn);

/* sc_fail() with a line on stderr under SOFTCUDA_DEBUG. */
#define REFUSE(e, ...)                                                         \
  do {                                                                         \
    if (sc_debug_on())                                                         \
      sc_say(__VA_ARGS__);                                                     \
    return sc_fail(e);                                                         \
  } while (0)

#define ENTER()                                                                \
  do {                                                                         \
    cudaError_t e_ = sc_enter(__func__);                                       \
    if (e_ != cudaSuccess)                                                     \
      return sc_fail(e_);                                                      \
  } while (0)

#define ENTER_DEV()                                                            \
  do {                                                                         \
    cudaError_t e_ = sc_enter_dev(__func__);                                   \
    if (e_ != cudaSuccess)                                                     \
      return sc_fail(e_);                                                      \
  } while (0)

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
  OP_KERNEL
};

typedef struct op {
  struct op *next;
  int kind;
  uint64_t seq;
  dep_t *deps;
  int ndeps;
  void *owned; /* freed with the op: a pageable copy's staged source */
  union {
    struct { /* rows of `width` bytes: one row for a plain copy */
      void *dst;
      const void *src;
      size_t width, height, dpitch, spitch;
      int dk, sk; /* sc_mem_kind of dst and src when queued */
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
    struct { /* softcuda_launch: run(ctx, reverse), then release(ctx) */
      void (*run)(void *ctx, int reverse);
      void (*release)(void *ctx);
      void *ctx;
      int reverse;
      const void **ptrs; /* its pointer arguments, checked again at run */
      int nptrs;
      int borrowed; /* a graph launch's copy: ctx and ptrs are the graph's */
    } kern;
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
  uint64_t rng;          /* SOFTCUDA_JITTER: this stream's delays (worker) */
  struct capture *cap;   /* the capture sequence it belongs to, or NULL */
  size_t cap_last;       /* nodes of cap when this stream last added one */
  size_t cap_joined;     /* nodes of cap that its origin has waited for */
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
  uint64_t cap_id;  /* last recorded in that capture sequence (0: none) */
  uint64_t cap_sid; /* the stream it was recorded on then */
  size_t cap_pos;   /* the capture's node count at that record */
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
  /* R_DEVICE: CU_POINTER_ATTRIBUTE_SYNC_MEMOPS is set (synchronous copies
   * and memsets into it return only once they landed), and, per device's
   * legacy stream, the sequence number of the last synchronous copy or
   * memset into it that returned before it ran (0: none) */
  int sync_memops;
  uint64_t pend[MAX_DEVICES];
} range_t;

typedef struct {
  pthread_once_t once;
  pthread_mutex_t lock;
  pthread_cond_t done;
  int ndev;
  unsigned poll_max_us;
  int jitter;           /* SOFTCUDA_JITTER set */
  uint64_t jitter_seed; /* its value */
  uint64_t next_id;
  stream_t *streams; /* including legacy and draining ones */
  stream_t *legacy[MAX_DEVICES];
  event_t *events;
  range_t *ranges;
  struct capture *captures; /* the capture sequences in progress */
  int running;              /* operations running on workers (their
                               memory checked) */
  cudaError_t sticky;       /* a fault: every later call fails with it */
} sc_state_t;

extern sc_state_t sc_state;

/* ---- stream capture (softcuda_graph.c; lock held unless said) ---------- */

typedef struct capture {
  struct capture *next;
  uint64_t id;
  stream_t *origin;
  pthread_t thread; /* that began it */
  int mode;         /* enum cudaStreamCaptureMode */
  int invalid;      /* a rule was broken: ends with no graph */
  struct CUgraph_st *graph;
} capture_t;

/* The capture sequence with that id, if in progress. */
capture_t *sc_capture_find(uint64_t id);

/* Stops the capture sequence (an error broke a rule). */
void sc_capture_invalidate(capture_t *c, const char *why);

/* How many nodes c's graph has so far. */
size_t sc_capture_nodes(const capture_t *c);

/* Adds op (taken) to s's capture sequence instead of running it. */
cudaError_t sc_capture_add(stream_t *s, op_t *op);

/* A blocking stream of device dev is capturing: the legacy stream may not
 * be used (cudaErrorStreamCaptureImplicit); invalidates those sequences. */
cudaError_t sc_capture_implicit(int dev, const char *fn);

/* fn is a potentially unsafe call (cudaMalloc, a synchronous copy, device
 * synchronisation...): cudaErrorStreamCaptureUnsupported while a capture
 * sequence forbids it to this thread (cudaThreadExchangeStreamCaptureMode);
 * the sequences that forbid it are invalidated. Lock not held. */
cudaError_t sc_capture_unsafe(const char *fn);

#define UNSAFE_IN_CAPTURE()                                                    \
  do {                                                                         \
    cudaError_t e_ = sc_capture_unsafe(__func__);                              \
    if (e_ != cudaSuccess)                                                     \
      return e_;                                                               \
  } while (0)

/* ---- the allocation table (softcuda_mem.c; lock held) ------------------- */

enum { M_UNREG, M_DEVICE, M_HOST, M_OVERRUN };

/* What [p, p + n) is; M_OVERRUN: it starts in an allocation and runs past
 * its end. */
int sc_mem_kind(const void *p, size_t n);
const char *sc_mem_name(int k);

/* A pointer the device side of an operation may use: device memory, or
 * pinned (mapped) host memory, [p, p + n) inside its allocation. */
cudaError_t sc_check_dev_side(const char *fn, const char *what, const void *p,
                              size_t n);

/* An operation queued on a stream may use [p, p + n) as it did when it was
 * queued: k, what sc_mem_kind said then, and nothing was freed since. */
int sc_mem_still(const void *p, size_t n, int k);

/* cuMemGetAddressRange, through the entry point table. */
/* cuPointerGetAttribute: CU_POINTER_ATTRIBUTE_BUFFER_ID only (the
 * allocation's unique id, for memory a process allocated or mapped). */
CUresult sc_pointer_get_attribute(void *data, CUpointer_attribute attribute,
                                  CUdeviceptr ptr);
/* cuPointerSetAttribute: CU_POINTER_ATTRIBUTE_SYNC_MEMOPS only, on device
 * memory this process allocated; setting it waits for the synchronous
 * copies and memsets into the allocation that returned before they ran. */
CUresult sc_pointer_set_attribute(const void *value,
                                  CUpointer_attribute attribute,
                                  CUdeviceptr ptr);
CUresult sc_mem_get_address_range(CUdeviceptr *pbase, size_t *psize,
                                  CUdeviceptr dptr);
/* cuMemGetHandleForAddressRange (dma-buf export) and whether the modelled
 * device supports it (SOFTCUDA_NO_DMABUF unset). */
CUresult sc_mem_get_handle_for_range(void *handle, CUdeviceptr dptr,
                                     size_t size, CUmemRangeHandleType type,
                                     unsigned long long flags);
int sc_dmabuf_supported(void);

/* ---- streams (softcuda_stream.c; lock held unless said) ----------------- */

/* An operation of that kind, zeroed (lock not needed); NULL: no memory.
 * sc_op_free releases a kernel's arguments too. */
op_t *sc_op_new(int kind);
void sc_op_free(op_t *op);

/* The stream a handle names: NULL, cudaStreamLegacy and cudaStreamPerThread
 * are the current device's legacy stream. */
cudaError_t sc_resolve(cudaStream_t h, stream_t **out);

/* Queues op on s, after the legacy-stream dependencies; takes op. */
cudaError_t sc_submit(stream_t *s, op_t *op);

/* Resolves h and queues op (taken in every case). */
cudaError_t sc_enqueue(cudaStream_t h, op_t *op, stream_t **on);

/* Waits until stream s finished everything queued so far. */
void sc_wait_stream(stream_t *s);

/* Waits until the stream with id sid (gone: at once) finished operation
 * seq. */
void sc_wait_seq(uint64_t sid, uint64_t seq);

/* Waits until every stream of device dev (-1: all) finished what was
 * queued on it so far. */
void sc_wait_all(int dev);

/* cuStreamWaitValue32 and cuStreamWriteValue32, through the entry point
 * table (lock not held). */
CUresult sc_stream_wait_value32(CUstream stream, CUdeviceptr addr,
                                cuuint32_t value, unsigned int flags);
CUresult sc_stream_write_value32(CUstream stream, CUdeviceptr addr,
                                 cuuint32_t value, unsigned int flags);

#endif

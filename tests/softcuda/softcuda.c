/*
 * softcuda.c - a CUDA runtime made of host memory and threads, for running
 * sharc's GPU data path (comm/gpu/: cuda_stream.c, path_staged.c, path_ipc.c)
 * and the gpu tests on machines without a GPU (cmake -DSHARC_SOFTCUDA=ON; the
 * precedent is tests/unit/mock_verbs.c, a software HCA for the ib transport).
 *
 * It implements exactly the subset of the runtime API that sharc, its tests
 * and its benchmark call, the driver entry points they fetch through
 * cudaGetDriverEntryPoint[ByVersion] (cuStreamWaitValue32,
 * cuStreamWriteValue32, cuMemGetAddressRange), and kernel launches of the
 * project's own device code, compiled as host C++ through cuda_host.h
 * (softcuda_kernel.c runs each grid on the stream's worker).
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
 *  - errors: a last error per thread, names and strings for every code
 *    returned here; a CUDA call from inside a host function
 *    (cudaLaunchHostFunc) fails with cudaErrorNotPermitted and a line on
 *    stderr (CUDA forbids it and may deadlock);
 *  - faults: each operation's memory is checked again when it runs; memory
 *    unmapped since it was queued (an IPC mapping closed under queued work)
 *    is an illegal address, and, as after a fault on a GPU, the error is
 *    sticky: every later call returns cudaErrorIllegalAddress and no
 *    further work runs (cudaFree and cudaFreeHost synchronise first, as in
 *    CUDA, so they cannot cause it); a divergent barrier in a cooperative
 *    block (softcuda_block.c) is sticky the same way, as
 *    cudaErrorLaunchFailure;
 *  - devices: a kernel launched on a stream of another device than the
 *    current one, and an event recorded on a stream of another device than
 *    the event's, are refused (cudaErrorInvalidResourceHandle); waits and
 *    copies across devices are allowed, as in CUDA;
 *  - stream capture and graphs (softcuda_graph.c): what is queued on a
 *    capturing stream becomes a graph node, forks and joins through events,
 *    and the calls capture forbids, refused with CUDA's errors; a launched
 *    graph runs its nodes in capture order on the launch stream.
 *
 * What it does not model: real device memory (a "device" pointer is
 * readable by the host, so a host access to device memory goes unnoticed),
 * shared memory and barriers inside a kernel (its grid is serial), warps,
 * managed memory, cudaMallocAsync pools, graphs built node by node,
 * priorities, peer access limits, per-thread default streams
 * (cudaStreamPerThread is the legacy stream here), and timing (copies run
 * at memcpy speed). cudaMemcpyAsync is always asynchronous, also for
 * pageable memory (CUDA may be synchronous there): the stricter order.
 * cudaMemcpy from pageable host memory to device memory returns, as in
 * CUDA, once the source was copied aside, before the copy reached the
 * device: it runs on the legacy stream, so a cudaStreamNonBlocking
 * stream's work may see the destination's old bytes (a GPU's copy
 * engines do that to a program that does not synchronise in between).
 * cudaMemset of device memory and a device-to-device cudaMemcpy return at
 * once too (queued on the legacy stream), as in CUDA. Into an allocation
 * with CU_POINTER_ATTRIBUTE_SYNC_MEMOPS set (cuPointerSetAttribute, which
 * waits for such copies still in flight) all three return only once they
 * landed, as GPUDirect RDMA relies on.
 *
 * Files: softcuda.c (errors, process state, devices, the driver entry point
 * lookup), softcuda_mem.c (allocations, pointer attributes, copies and
 * memsets, CUDA IPC), softcuda_stream.c (streams, events, stream memory
 * operations), softcuda_kernel.c (kernel launches); softcuda_impl.h holds
 * what they share.
 *
 * SOFTCUDA_DEBUG=1 prints a line on stderr for every argument a call
 * refuses; SOFTCUDA_POLL_US caps the wait poll interval (default 100).
 *
 * SOFTCUDA_JITTER=<seed> (mixed with the process's rank, SHARC_RANK or RANK,
 * else its pid, so that ranks do not pause in step) shakes the timing as a
 * GPU under load does, within
 * what the CUDA programming model allows (softcuda_stream.c, jitter): each
 * stream's worker waits a random while before each operation, so the
 * operations of independent streams interleave at random and host code
 * overtakes the device; a copy moves its bytes in chunks in random order
 * with pauses between them, so a host read before the copy completed sees
 * a mix; and an operation's completion (what events, queries and
 * synchronisation see) comes a random while after its effects. A program
 * that relies on an order CUDA does not promise (a missing event wait, a
 * host read before synchronising, a buffer reused before the copy reading
 * it finished) then fails at random, as it would on a GPU once in a
 * thousand steps. The seed fixes the delays, not the threads' schedule.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "softcuda_impl.h"

#include "core.h" /* log_msg, which reduce.c calls */

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
  X(cudaErrorLaunchFailure, "unspecified launch failure")                      \
  X(cudaErrorNotPermitted, "operation not permitted")                          \
  X(cudaErrorNotSupported, "operation not supported")                          \
  X(cudaErrorIllegalState, "the resource is in an illegal state")              \
  X(cudaErrorStreamCaptureUnsupported,                                         \
    "operation not permitted when stream is capturing")                        \
  X(cudaErrorStreamCaptureInvalidated,                                         \
    "operation failed due to a previous error during capture")                 \
  X(cudaErrorStreamCaptureMerge,                                               \
    "operation would result in a merge of separate capture sequences")         \
  X(cudaErrorStreamCaptureUnmatched,                                           \
    "capture was not ended in the same stream as it began")                    \
  X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work")      \
  X(cudaErrorStreamCaptureIsolation,                                           \
    "dependency created on uncaptured work in another stream")                 \
  X(cudaErrorStreamCaptureImplicit,                                            \
    "operation would make the legacy stream depend on a capturing blocking "   \
    "stream")                                                                  \
  X(cudaErrorCapturedEvent,                                                    \
    "operation not permitted on an event last recorded in a capturing "        \
    "stream")                                                                  \
  X(cudaErrorStreamCaptureWrongThread,                                         \
    "attempt to terminate a thread-local capture sequence from another "       \
    "thread")                                                                  \
  X(cudaErrorUnknown, "unknown error")

static _Thread_local cudaError_t last_error;
_Thread_local int sc_cur_dev;
_Thread_local int sc_in_host_fn;

int sc_debug_on(void) {
  static int on = -1;
  if (on < 0) {
    const char *e = getenv("SOFTCUDA_DEBUG");
    on = e && *e && strcmp(e, "0");
  }
  return on;
}

void sc_say(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "softcuda[%d]: %s\n", (int)getpid(), line);
}

/* Records e as this thread's last error (cudaErrorNotReady is a status, not
 * an error, in CUDA too) and returns it. */
cudaError_t sc_fail(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady)
    last_error = e;
  return e;
}

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
  sc_say("%s", line);
}

/* ---- process state (softcuda_impl.h) ----------------------------------- */

sc_state_t sc_state = {.once = PTHREAD_ONCE_INIT,
                       .lock = PTHREAD_MUTEX_INITIALIZER,
                       .done = PTHREAD_COND_INITIALIZER};

static void init_once(void) {
  const char *e = getenv("SOFTCUDA_DEVICES");
  sc_state.ndev = 1;
  if (e && *e) {
    char *end;
    long n = strtol(e, &end, 10);
    if (*end || n < 0 || n > MAX_DEVICES)
      sc_say("SOFTCUDA_DEVICES=%s: want 0..%d; using 1", e, MAX_DEVICES);
    else
      sc_state.ndev = (int)n;
  }
  sc_state.poll_max_us = 100;
  e = getenv("SOFTCUDA_POLL_US");
  if (e && atoi(e) >= 20)
    sc_state.poll_max_us = (unsigned)atoi(e);
  e = getenv("SOFTCUDA_JITTER");
  if (e && *e) {
    char *end;
    unsigned long long seed = strtoull(e, &end, 0);
    if (*end)
      sc_say("SOFTCUDA_JITTER=%s: want a seed (an integer); jitter off", e);
    else {
      /* Each process its own delays: with one seed everywhere the ranks'
       * corresponding streams would pause in step and never overtake one
       * another. The rank (sharcrun, torchrun) keeps a run repeatable;
       * without one, the pid. */
      const char *rank = getenv("SHARC_RANK");
      if (!rank || !*rank)
        rank = getenv("RANK");
      uint64_t who = rank && *rank ? (uint64_t)strtoull(rank, NULL, 10) + 1
                                   : (uint64_t)getpid() << 20;
      sc_state.jitter = 1;
      sc_state.jitter_seed = seed ^ (who * 0x9e3779b97f4a7c15ull);
    }
  }
  /* The real runtime loads the driver (libcuda.so.1) on its first call, and
   * sharc asks the loader whether it is there (devptr.c cuda_in_use):
   * load the stub whose soname is libcuda.so.1 now, not at startup. It
   * is found by its build-tree path (SOFTCUDA_DRIVER): softcuda is a test
   * double, not meant to be installed. */
#ifdef SOFTCUDA_DRIVER
  if (!dlopen(SOFTCUDA_DRIVER, RTLD_NOW | RTLD_GLOBAL))
    sc_say("cannot load the driver stub %s: %s; sharc will take device "
           "pointers for host memory (rebuild the softcuda_driver target)",
           SOFTCUDA_DRIVER, dlerror());
#endif
}

/* Every API call starts here. */
cudaError_t sc_enter(const char *fn) {
  pthread_once(&sc_state.once, init_once);
  cudaError_t sticky = __atomic_load_n(&sc_state.sticky, __ATOMIC_ACQUIRE);
  if (sticky != cudaSuccess)
    return sticky; /* a fault lost the context */
  if (sc_in_host_fn) {
    sc_say("%s called from a host function (cudaLaunchHostFunc); CUDA forbids "
           "CUDA calls there: cudaErrorNotPermitted",
           fn);
    return cudaErrorNotPermitted;
  }
  return cudaSuccess;
}

/* sc_enter() for calls that need a device. */
cudaError_t sc_enter_dev(const char *fn) {
  cudaError_t e = sc_enter(fn);
  if (e == cudaSuccess && sc_state.ndev == 0)
    e = cudaErrorNoDevice;
  return e;
}

/* ---- errors API --------------------------------------------------------- */

/* After a fault the error stays: it is sticky, as on a GPU. */
static cudaError_t sticky_error(void) {
  return __atomic_load_n(&sc_state.sticky, __ATOMIC_ACQUIRE);
}

cudaError_t sc_sticky_or(cudaError_t e) {
  return sticky_error() != cudaSuccess ? sticky_error() : e;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return sticky_error() != cudaSuccess ? sticky_error() : e;
}

cudaError_t cudaPeekAtLastError(void) {
  return sticky_error() != cudaSuccess ? sticky_error() : last_error;
}

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
    return sc_fail(cudaErrorInvalidValue);
  *v = CUDA_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  if (!v)
    return sc_fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count) {
  ENTER();
  if (!count)
    return sc_fail(cudaErrorInvalidValue);
  *count = sc_state.ndev;
  return sc_state.ndev ? cudaSuccess : sc_fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  ENTER_DEV();
  if (device < 0 || device >= sc_state.ndev)
    REFUSE(cudaErrorInvalidDevice, "cudaSetDevice(%d): %d devices", device,
           sc_state.ndev);
  sc_cur_dev = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  ENTER_DEV();
  if (!device)
    return sc_fail(cudaErrorInvalidValue);
  *device = sc_cur_dev;
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
    return sc_fail(cudaErrorInvalidValue);
  if (device < 0 || device >= sc_state.ndev)
    return sc_fail(cudaErrorInvalidDevice);
  fill_props(prop, device);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr,
                                   int device) {
  ENTER_DEV();
  if (!value)
    return sc_fail(cudaErrorInvalidValue);
  if (device < 0 || device >= sc_state.ndev)
    return sc_fail(cudaErrorInvalidDevice);
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
  UNSAFE_IN_CAPTURE();
  pthread_mutex_lock(&sc_state.lock);
  sc_wait_all(sc_cur_dev);
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(sc_sticky_or(cudaSuccess));
}

/* ---- the driver entry points ------------------------------------------- */

static const struct {
  const char *name;
  void *fn;
  unsigned since; /* CUDA version of the versioned entry point returned */
} entry_points[] = {
    {"cuStreamWaitValue32", (void *)sc_stream_wait_value32, 11070},
    {"cuStreamWriteValue32", (void *)sc_stream_write_value32, 11070},
    {"cuMemGetAddressRange", (void *)sc_mem_get_address_range, 3020},
    {"cuPointerGetAttribute", (void *)sc_pointer_get_attribute, 4000},
    {"cuPointerSetAttribute", (void *)sc_pointer_set_attribute, 6000},
    {"cuMemGetHandleForAddressRange", (void *)sc_mem_get_handle_for_range,
     11070},
};

cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion,
    unsigned long long flags, enum cudaDriverEntryPointQueryResult *status) {
  ENTER();
  if (!symbol || !funcPtr || cudaVersion > CUDA_VERSION ||
      (flags & ~(unsigned long long)(cudaEnableLegacyStream |
                                     cudaEnablePerThreadDefaultStream)))
    return sc_fail(cudaErrorInvalidValue);
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
  if (q != cudaDriverEntryPointSuccess && sc_debug_on())
    sc_say("cudaGetDriverEntryPointByVersion(%s, %u): not provided", symbol,
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

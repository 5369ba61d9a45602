/*
 * path_direct.c - the direct GPU path (SHARC_CUDA_PATH=direct): collectives
 * on device memory between the GPU ranks of one host, queued on the
 * caller's CUDA stream itself. No host thread takes part in a call: the
 * enqueueing thread queues copies, reduction kernels and stream memory
 * operations and returns; the CUDA stream carries them out.
 *
 * Per communicator (its "device comm", made by the first call that takes
 * the path, all ranks at the same call) every rank allocates one device
 * buffer and shares it through CUDA IPC:
 *
 *   [ready[0..n) | done[0..n)]  flags, 32-bit step numbers, written by peers
 *   [slot 0 | slot 1]           staging, SHARC_CUDA_SLOT_BYTES each
 *
 * A call is a series of steps, numbered alike on every rank (the ranks
 * issue the same calls in the same order). In step s a rank may publish:
 * it waits until every peer's done word in its buffer says the peers
 * finished step s - 2 (the last step that used slot s % 2), copies its
 * data into slot s % 2, and writes s into its ready word in every peer's
 * buffer. A reader waits for the ready word of the rank it reads, in its
 * own buffer, to reach s, then copies or reduces from that rank's slot.
 * At the end of each step every rank writes s into its done word in every
 * peer's buffer. Waits are cuStreamWaitValue32 (GEQ, cyclic) on the
 * waiter's own memory, handled by the GPU's front end: no kernel ever waits
 * for another process, so ranks sharing one GPU keep their time slices.
 * Writes are cuStreamWriteValue32 with its default memory barrier, so the
 * data copied before a flag is visible to the peer that sees the flag.
 *
 *   all-gather  per piece: publish the own piece; copy every peer's piece
 *               from its slot (copy engines only, no kernel)
 *   broadcast   the root publishes; the others copy from its slot
 *   reduce-     step s: publish the piece of every block (one 2D copy);
 *   scatter     step s+1: reduce the own block from every rank's slot into
 *               the own slot s+1, starting with the own contribution, then
 *               copy it to recvbuf
 *   all-reduce  step s as reduce-scatter, on a piece split into n blocks;
 *               step s+1: publish the reduced block; copy every peer's
 *               reduced block from its slot. Each block is reduced by one
 *               rank only, so every rank gets the same bits.
 *   reduce      as all-reduce; only the root copies the reduced blocks
 *   gather      as all-gather; only the root copies, and does not publish
 *   scatter     the root publishes its n blocks' pieces (one 2D copy);
 *               each rank copies its own from the root's slot
 *   all-to-all  every rank publishes its n blocks' pieces; each copies
 *               block r of every rank's slot
 *   barrier     one step: publish, wait for every peer's ready word
 *
 * Buffers may be device, managed or host memory (the copies handle each);
 * the reduction kernels touch only the device staging. Calls on different
 * CUDA streams of one communicator are chained by an event, in the order
 * they were enqueued.
 *
 * Failure. A CUDA call that fails while a call is queued leaves the peers
 * waiting, so it fails the communicator (comm_fail): the peers are told,
 * and on every rank the abort hook (direct_abort) overwrites the rank's
 * flags with a step number no wait can exceed, from an internal stream, so
 * every queued wait passes and the CUDA streams drain (with undefined
 * results); sharc_stream_synchronize and every later call return the
 * error. A peer's flag write queued before its own release may still land
 * after this rank's and lower a flag again, so the watchdog repeats the
 * release while this rank's calls are in flight. The watchdog thread (one
 * per process, asleep unless a call is in flight) also fails the
 * communicator when a peer process died (SHARC_ERR_PEER_LOST) or when a
 * rank has sat inside a call without finishing a step for SHARC_TIMEOUT
 * (SHARC_ERR_TIMEOUT), also after the communicator was destroyed with
 * calls still queued. A call refused after the setup (a CUDA stream on
 * another device) fails the communicator too: its peers number the calls
 * they queue, and would otherwise pair the next call with this one. A CUDA
 * graph capture is refused on every rank alike (the binding), which skips
 * the call everywhere and keeps the numbering.
 */
#include "gpu_impl.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devptr.h"

/* This path's index in dev_stream_t.path_state (gpu_paths). */
#define DIRECT_SLOT 0

/* comm->gpu when the ranks found at setup that the path cannot work here
 * (SHARC_CUDA_PATH=auto): its calls take the staged path. */
static char declined_mark;

static void *comm_gpu(const struct sharc_comm *comm) {
  return __atomic_load_n(&comm->gpu, __ATOMIC_ACQUIRE);
}

/* Every collective, when chosen (SHARC_CUDA_PATH=direct, or auto unless
 * the setup declined it) and all of comm's ranks are on one host. */
static int direct_takes(const coll_call_t *call) {
  return (gpu_path_chosen("direct") || gpu_path_chosen("auto")) &&
         dev_have_cuda() && call->comm->nhosts == 1 &&
         comm_gpu(call->comm) != &declined_mark;
}

static sharc_status_t direct_check_env(const char *fn) {
  return gpu_check_queues(fn, "direct");
}

#ifdef SHARC_HAVE_CUDA

#include "device.h" /* kernels/ */

#define NSLOTS 2
#define NWORDS 3                /* flag words per peer: ready, done, probe */
#define PROBE_NS 10000000000ull /* the setup's probe waits at most this */
/* 2D copies with a larger source pitch go as n 1D copies (the device's
 * cudaDevAttrMaxPitch is 2^31 - 1 or more on the GPUs this targets) */
#define MAX_PITCH ((size_t)INT32_MAX)
#define RELEASED_BYTE 0x7f /* flags memset to 0x7f7f7f7f pass every wait */

typedef CUresult (*write_value32_fn)(CUstream stream, CUdeviceptr addr,
                                     cuuint32_t value, unsigned int flags);

/* One rank's buffer as it shares it in the setup. */
typedef struct {
  cudaIpcMemHandle_t handle;
  uint64_t base; /* its address in the owner */
  uint64_t slot_bytes;
  int64_t pid;
  uint64_t nonce;
  int32_t status; /* SHARC_OK, or why the owner cannot take part */
  int32_t pad;
} dc_desc_t;

typedef struct devcomm {
  struct sharc_comm *comm; /* NULL once the comm is freed (wd.lock) */
  int refs;                /* the comm's, and each stream's using it */
  int rank, n, device;
  size_t slot_bytes, stg_off, bytes;
  uint8_t *mem;      /* this rank's buffer */
  uint8_t **peer;    /* [n] every rank's buffer, as mapped here */
  int *opened;       /* [n] mapped with cudaIpcOpenMemHandle */
  pid_t *pid;        /* [n] */
  cudaStream_t side; /* internal: the abort's release, the teardown wait */
  cudaEvent_t last;  /* the end of the last call queued */
  cudaStream_t last_cs;
  int have_last;
  wait_value32_fn wait32;
  write_value32_fn write32;
  /* pinned, mapped: [0] the last step of the call the CUDA stream entered,
   * [1] the last step it finished (the watchdog's view) */
  _Atomic uint32_t *words;
  CUdeviceptr words_dev;
  pthread_mutex_t lock; /* enqueueing: step, last, last_cs */
  uint32_t step;        /* the last step queued */
  _Atomic uint32_t issued;
  /* the watchdog's state (wd.lock) */
  uint32_t seen_in, seen_out;
  uint64_t seen_at;
  struct devcomm *next;
  /* the failure, once the comm failed (failing: claimed) */
  _Atomic int failing, failed;
  sharc_status_t fail_st;
  char msg[sizeof(((struct sharc_comm *)0)->unusable_msg)];
} devcomm_t;

/* comm's device comm, NULL before the setup or when it was declined. */
static devcomm_t *comm_dc(const struct sharc_comm *comm) {
  void *g = comm_gpu(comm);
  return g == &declined_mark ? NULL : g;
}

/* ---- the watchdog -------------------------------------------------------
 * One thread per process, started with the first device comm: every 100
 * ms while some call is in flight, a dead peer process or a rank stuck in a
 * call for SHARC_TIMEOUT fails the comm. It sleeps on its condition
 * variable while nothing is in flight. */

#define WD_PERIOD_NS 100000000ull

static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  devcomm_t *head;
  int started;
} wd = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0};

static int in_flight(const devcomm_t *dc) {
  return atomic_load(&dc->words[1]) != atomic_load(&dc->issued);
}

/* Lets every wait queued on this rank's flags pass: the flag words set to a
 * step number no wait reaches, from the internal stream (which runs while
 * the caller's stream waits). */
static void release_waits(devcomm_t *dc) {
  int prev = -1;
  cudaError_t e = gs_enter_device(dc->device, &prev);
  if (e == cudaSuccess)
    e = cudaMemsetAsync(dc->mem, RELEASED_BYTE, dc->stg_off, dc->side);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    WARN(SUB_CUDA,
         "direct path: releasing this rank's device waits after the "
         "failure: %s; its CUDA streams may not drain",
         cudaGetErrorName(e));
  }
  gs_leave_device(prev);
}

/* Records dc's failure (the first caller's status and message; `failed`
 * is published after them), then releases its waits. */
static void mark_failed(devcomm_t *dc, sharc_status_t st, const char *msg) {
  if (!atomic_exchange(&dc->failing, 1)) {
    dc->fail_st = st;
    snprintf(dc->msg, sizeof dc->msg, "%s", msg);
    atomic_store(&dc->failed, 1);
  }
  release_waits(dc);
}

/* The communicator failed (or dc's watchdog found why it must): comm
 * failed for it when there still is one (its hook then marks dc), dc marked
 * in any case. */
static void wd_fail(devcomm_t *dc, int who, sharc_status_t st,
                    const char *why) {
  if (dc->comm) {
    comm_fail(dc->comm, who, st, why);
    comm_record(dc->comm, st, "%s", why); /* its last error */
  }
  mark_failed(dc, st, why);
}

/* wd.lock held (so dc->comm is not freed meanwhile). Fails dc when it must;
 * 1 while a call is in flight. */
static int wd_check(devcomm_t *dc, uint64_t now) {
  if (!in_flight(dc))
    return 0;
  struct sharc_comm *comm = dc->comm;
  if (atomic_load(&dc->failed)) {
    /* a peer's flag write queued before it was released may land after
     * the release and lower a flag again: release until this rank's
     * streams drained */
    release_waits(dc);
    return 1;
  }
  if (comm && atomic_load(&comm->unusable)) {
    /* the comm failed without its hook (before the setup installed it) */
    char msg[sizeof dc->msg];
    pthread_mutex_lock(&comm->err_lock);
    sharc_status_t st = comm->unusable_st;
    snprintf(msg, sizeof msg, "%s", comm->unusable_msg);
    pthread_mutex_unlock(&comm->err_lock);
    mark_failed(dc, st, msg);
    return 1;
  }
  uint32_t in = atomic_load(&dc->words[0]), out = atomic_load(&dc->words[1]);
  if (in != dc->seen_in || out != dc->seen_out || !dc->seen_at) {
    dc->seen_in = in;
    dc->seen_out = out;
    dc->seen_at = now;
  }
  char why[256];
  for (int p = 0; p < dc->n; p++)
    if (p != dc->rank && kill(dc->pid[p], 0) != 0 && errno == ESRCH) {
      snprintf(why, sizeof why,
               "rank %d (host %s, pid %d) died while device collectives "
               "of this rank waited for it (direct path)",
               p, comm ? comm->peers[p].host : "?", (int)dc->pid[p]);
      wd_fail(dc, p, SHARC_ERR_PEER_LOST, why);
      return 1;
    }
  uint64_t limit = comm ? comm->cfg.timeout_ns : timeout_ns();
  if (in != out && now - dc->seen_at > limit) {
    snprintf(why, sizeof why,
             "a device collective (direct path, step %u) made no progress "
             "for %.0f s (SHARC_TIMEOUT): a peer did not make the same "
             "call, or its CUDA stream is stuck before it",
             in, (double)limit / 1e9);
    wd_fail(dc, dc->rank, SHARC_ERR_TIMEOUT, why);
    return 1;
  }
  return 1;
}

static void *wd_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&wd.lock);
  for (;;) {
    int busy = 0;
    uint64_t now = time_ns();
    for (devcomm_t *dc = wd.head; dc; dc = dc->next)
      busy |= wd_check(dc, now);
    if (!busy) { /* woken by the next call queued */
      pthread_cond_wait(&wd.cond, &wd.lock);
      continue;
    }
    pthread_mutex_unlock(&wd.lock);
    struct timespec ts = {0, (long)WD_PERIOD_NS};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&wd.lock);
  }
  return NULL;
}

/* Starts the watchdog thread unless it runs (part of a rank's setup, so a
 * failure is agreed like the others); recorded, not logged. */
static sharc_status_t wd_start(const char *fn) {
  pthread_mutex_lock(&wd.lock);
  if (!wd.started) {
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &at, wd_main, NULL);
    pthread_attr_destroy(&at);
    if (e) {
      pthread_mutex_unlock(&wd.lock);
      return err_record(SHARC_ERR_SYSTEM,
                        "%s (direct path): starting the watchdog thread: %s",
                        fn, strerror(e));
    }
    wd.started = 1;
  }
  pthread_mutex_unlock(&wd.lock);
  return SHARC_OK;
}

static void wd_add(devcomm_t *dc) {
  pthread_mutex_lock(&wd.lock);
  dc->next = wd.head;
  wd.head = dc;
  pthread_mutex_unlock(&wd.lock);
}

static void wd_remove(devcomm_t *dc) {
  pthread_mutex_lock(&wd.lock);
  for (devcomm_t **pp = &wd.head; *pp; pp = &(*pp)->next)
    if (*pp == dc) {
      *pp = dc->next;
      break;
    }
  pthread_mutex_unlock(&wd.lock);
}

/* ---- a device comm's life ---------------------------------------------- */

/* Frees dc once the last reference went: waits (bounded) until every peer
 * finished the steps that may read this rank's slots, then unmaps and
 * frees. */
static void dc_free(devcomm_t *dc) {
  wd_remove(dc);
  int prev = -1;
  if (gs_enter_device(dc->device, &prev) != cudaSuccess)
    (void)cudaGetLastError();
  int leak = 0;
  if (dc->mem && dc->side) {
    for (int p = 0; p < dc->n && dc->step && !atomic_load(&dc->failed); p++)
      if (p != dc->rank)
        (void)dc->wait32(
            (CUstream)dc->side,
            (CUdeviceptr)(uintptr_t)(dc->mem + 4 * (size_t)(dc->n + p)),
            dc->step, CU_STREAM_WAIT_VALUE_GEQ);
    uint64_t deadline = time_ns() + timeout_ns();
    cudaError_t e;
    while ((e = cudaStreamQuery(dc->side)) == cudaErrorNotReady &&
           time_ns() < deadline) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    if (e != cudaSuccess) {
      WARN(SUB_CUDA,
           "direct path: the peers did not finish reading this rank's device "
           "staging (%s); it is left allocated",
           cudaGetErrorName(e));
      leak = 1;
    }
  }
  for (int p = 0; dc->peer && p < dc->n; p++)
    if (dc->opened && dc->opened[p])
      (void)cudaIpcCloseMemHandle(dc->peer[p]);
  if (dc->mem && !leak)
    (void)cudaFree(dc->mem);
  if (dc->side && !leak)
    (void)cudaStreamDestroy(dc->side);
  if (dc->last)
    (void)cudaEventDestroy(dc->last);
  if (dc->words)
    (void)cudaFreeHost((void *)dc->words);
  (void)cudaGetLastError();
  gs_leave_device(prev);
  pthread_mutex_destroy(&dc->lock);
  free(dc->peer);
  free(dc->opened);
  free(dc->pid);
  free(dc);
}

static void dc_put(devcomm_t *dc) {
  pthread_mutex_lock(&dc->lock);
  int last = --dc->refs == 0;
  pthread_mutex_unlock(&dc->lock);
  if (last)
    dc_free(dc);
}

/* Guards comm->gpu against gpu_comm_release while direct_abort (a
 * transport's thread) takes its reference. */
static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;

/* comm_fail_as's hook: records the failure and lets every queued wait of
 * this rank pass. */
static void direct_abort(struct sharc_comm *comm) {
  pthread_mutex_lock(&hook_lock);
  devcomm_t *dc = comm_dc(comm);
  if (dc) {
    pthread_mutex_lock(&dc->lock);
    dc->refs++;
    pthread_mutex_unlock(&dc->lock);
  }
  pthread_mutex_unlock(&hook_lock);
  if (!dc)
    return;
  char msg[sizeof dc->msg];
  pthread_mutex_lock(&comm->err_lock);
  sharc_status_t st = comm->unusable_st;
  snprintf(msg, sizeof msg, "%s", comm->unusable_msg);
  pthread_mutex_unlock(&comm->err_lock);
  mark_failed(dc, st, msg);
  dc_put(dc);
}

void gpu_comm_release(struct sharc_comm *comm) {
  pthread_mutex_lock(&hook_lock);
  devcomm_t *dc = comm_dc(comm);
  comm->gpu = NULL;
  comm->gpu_abort = NULL;
  pthread_mutex_unlock(&hook_lock);
  if (!dc)
    return;
  pthread_mutex_lock(&wd.lock); /* the watchdog no longer reaches comm */
  dc->comm = NULL;
  pthread_mutex_unlock(&wd.lock);
  dc_put(dc);
}

/* What every rank checks of the others' descriptors: a rank that cannot
 * take part, or different slot sizes. */
static sharc_status_t check_descs(struct sharc_comm *comm, const dc_desc_t *all,
                                  const char *fn) {
  for (int p = 0; p < comm->nranks; p++) {
    if (all[p].status != SHARC_OK)
      return comm_record(comm, (sharc_status_t)all[p].status,
                         "%s on a CUDA stream (direct path): rank %d could not "
                         "set up its device staging (its log says why)",
                         fn, p);
    if (all[p].slot_bytes != all[0].slot_bytes)
      return comm_record(comm, SHARC_ERR_INVALID_ARG,
                         "%s on a CUDA stream (direct path): rank %d has "
                         "SHARC_CUDA_SLOT_BYTES=%llu, rank 0 %llu; set the "
                         "same on every rank",
                         fn, p, (unsigned long long)all[p].slot_bytes,
                         (unsigned long long)all[0].slot_bytes);
  }
  return SHARC_OK;
}

/* A failed CUDA call of the setup, recorded without logging (dc_setup
 * says it once, as a warning or, where auto falls back, information). */
static sharc_status_t cuda_record(cudaError_t e, const char *fn,
                                  const char *what) {
  (void)cudaGetLastError();
  return err_record(SHARC_ERR_CUDA, "%s on a CUDA stream: %s: %s: %s", fn, what,
                    cudaGetErrorName(e), cudaGetErrorString(e));
}

/* This rank's part of the setup: its buffer, stream, event and words;
 * a failure is recorded (err_record) and returned. */
static sharc_status_t dc_alloc(devcomm_t *dc, dev_stream_t *ds, dc_desc_t *mine,
                               const char *fn) {
  char why[128];
  dc->wait32 = ds->wait32;
  if (!dc->wait32)
    return err_record(SHARC_ERR_UNSUPPORTED,
                      "%s: SHARC_CUDA_PATH=direct needs cuStreamWaitValue32, "
                      "which device %d does not offer here; use "
                      "SHARC_CUDA_PATH=staged",
                      fn, ds->device);
  dc->write32 = (write_value32_fn)dev_driver_entry(
      "cuStreamWriteValue32", cudaEnableLegacyStream, why, sizeof why);
  if (!dc->write32)
    return err_record(SHARC_ERR_UNSUPPORTED,
                      "%s: SHARC_CUDA_PATH=direct needs cuStreamWriteValue32: "
                      "%s; use SHARC_CUDA_PATH=staged",
                      fn, why);
  /* auto: with one hardware queue the release after a failure (on the
   * internal stream) would queue behind the waits it must release */
  const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (conn && atoi(conn) == 1)
    return err_record(SHARC_ERR_UNSUPPORTED,
                      "%s: the direct path needs more than one hardware queue "
                      "per device, and CUDA_DEVICE_MAX_CONNECTIONS=1",
                      fn);
  CHECK(wd_start(fn));
  cudaError_t e = cudaMalloc((void **)&dc->mem, dc->bytes);
  if (e == cudaSuccess)
    e = cudaMemset(dc->mem, 0, dc->stg_off);
  if (e == cudaSuccess)
    e = cudaIpcGetMemHandle(&mine->handle, dc->mem);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithFlags(&dc->side, cudaStreamNonBlocking);
  if (e == cudaSuccess)
    e = cudaEventCreateWithFlags(&dc->last, cudaEventDisableTiming);
  void *words = NULL;
  if (e == cudaSuccess)
    e = cudaHostAlloc(&words, 64, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e == cudaSuccess) {
    dc->words = words;
    memset(words, 0, 64);
    void *d = NULL;
    e = cudaHostGetDevicePointer(&d, words, 0);
    dc->words_dev = (CUdeviceptr)(uintptr_t)d;
  }
  if (e != cudaSuccess)
    return cuda_record(e, fn, "the direct path's device staging and flags");
  mine->base = (uint64_t)(uintptr_t)dc->mem;
  return SHARC_OK;
}

/* Maps every peer's buffer; a failure recorded and returned. */
static sharc_status_t dc_map(devcomm_t *dc, const dc_desc_t *all,
                             const char *fn) {
  for (int p = 0; p < dc->n; p++) {
    dc->pid[p] = (pid_t)all[p].pid;
    if (p == dc->rank) {
      dc->peer[p] = dc->mem;
    } else if (all[p].pid == (int64_t)getpid() &&
               all[p].nonce == gs_process_nonce()) {
      dc->peer[p] = (uint8_t *)(uintptr_t)all[p].base; /* this process */
    } else {
      void *ptr = NULL;
      cudaError_t e = cudaIpcOpenMemHandle(&ptr, all[p].handle,
                                           cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return err_record(SHARC_ERR_CUDA,
                          "%s (direct path): mapping rank %d's device staging: "
                          "cudaIpcOpenMemHandle: %s: %s (ranks in separate "
                          "containers or without peer access cannot share "
                          "device memory; SHARC_CUDA_PATH=staged works there)",
                          fn, p, cudaGetErrorName(e), cudaGetErrorString(e));
      }
      dc->peer[p] = ptr;
      dc->opened[p] = 1;
    }
  }
  return SHARC_OK;
}

/* An all-gather of one int32 status per rank through now: the first
 * failed rank's status, with a message naming it. */
/* An all-gather of bytes from every rank into all, over the host transport
 * in call's turn. */
static sharc_status_t gather_now(coll_call_t *call, call_now_fn now,
                                 const void *mine, void *all, size_t bytes) {
  coll_call_t h = {.coll = SCHED_ALL_GATHER,
                   .sendbuf = mine,
                   .recvbuf = all,
                   .count = bytes,
                   .dtype = SHARC_U8,
                   .op = SHARC_SUM,
                   .comm = call->comm};
  return now(call, &h);
}

static sharc_status_t agree(coll_call_t *call, call_now_fn now,
                            sharc_status_t mine, const char *fn,
                            const char *what) {
  struct sharc_comm *comm = call->comm;
  int32_t me = (int32_t)mine, *all = calloc((size_t)comm->nranks, sizeof *all);
  if (!all)
    return comm_record(comm, SHARC_ERR_NO_MEM, "%s: out of memory", fn);
  sharc_status_t st = gather_now(call, now, &me, all, sizeof me);
  for (int p = 0; st == SHARC_OK && p < comm->nranks; p++)
    if (all[p] != SHARC_OK)
      st = comm_record(comm, (sharc_status_t)all[p],
                       "%s on a CUDA stream (direct path): rank %d could not "
                       "%s (its log says why)",
                       fn, p, what);
  free(all);
  return st;
}

/* The first call of comm on this path: every rank's buffer allocated,
 * shared, mapped, and the comm's hook set. All ranks reach it at the same
 * call, in that call's turn (now). */
static sharc_status_t dc_probe(devcomm_t *dc, const char *fn);

/* A local failure of the setup: a warning where the path was asked for,
 * information where it was chosen by default (auto falls back). */
static void say(int autom, const char *msg) {
  if (autom)
    INFO(SUB_CUDA, "direct path: %s", msg);
  else
    WARN(SUB_CUDA, "%s", msg);
}

static sharc_status_t dc_setup(dev_stream_t *ds, coll_call_t *call,
                               call_now_fn now, const char *fn, int *declined) {
  *declined = 0;
  struct sharc_comm *comm = call->comm;
  int n = comm->nranks;
  devcomm_t *dc = calloc(1, sizeof *dc);
  dc_desc_t *all = calloc((size_t)n, sizeof *all);
  if (dc) {
    dc->peer = calloc((size_t)n, sizeof *dc->peer);
    dc->opened = calloc((size_t)n, sizeof *dc->opened);
    dc->pid = calloc((size_t)n, sizeof *dc->pid);
  }
  if (!dc || !all || !dc->peer || !dc->opened || !dc->pid) {
    if (dc) {
      free(dc->peer);
      free(dc->opened);
      free(dc->pid);
    }
    free(dc);
    free(all);
    return comm_error(comm, SHARC_ERR_NO_MEM, "%s: out of memory", fn);
  }
  pthread_mutex_init(&dc->lock, NULL);
  dc->refs = 1;
  dc->comm = comm;
  dc->rank = comm->rank;
  dc->n = n;
  dc->device = ds->device;
  int64_t want = param_int(PARAM_CUDA_SLOT_BYTES);
  size_t floor_bytes = (size_t)64 * (size_t)n;
  dc->slot_bytes = want > 0 ? (size_t)want : 0;
  dc->slot_bytes = (dc->slot_bytes + 255) & ~(size_t)255;
  if (dc->slot_bytes < floor_bytes)
    dc->slot_bytes = (floor_bytes + 255) & ~(size_t)255;
  dc->stg_off = ((size_t)4 * NWORDS * (size_t)n + 255) & ~(size_t)255;
  dc->bytes = dc->stg_off + NSLOTS * dc->slot_bytes;
  dc_desc_t mine;
  memset(&mine, 0, sizeof mine);
  mine.slot_bytes = dc->slot_bytes;
  mine.pid = (int64_t)getpid();
  mine.nonce = gs_process_nonce();
  int autom = gpu_path_chosen("auto");
  sharc_status_t st = dc_alloc(dc, ds, &mine, fn);
  if (st != SHARC_OK)
    say(autom, err_last());
  mine.status = (int32_t)st;
  st = gather_now(call, now, &mine, all, sizeof mine);
  if (st == SHARC_OK)
    st = check_descs(comm, all, fn);
  if (st == SHARC_OK) {
    sharc_status_t m = dc_map(dc, all, fn);
    if (m != SHARC_OK)
      say(autom, err_last());
    st = agree(call, now, m, fn, "map its peers' device staging");
  }
  if (st == SHARC_OK) {
    sharc_status_t m = dc_probe(dc, fn);
    if (m != SHARC_OK)
      say(autom, err_last());
    st = agree(call, now, m, fn, "exchange flags with its peers");
  }
  free(all);
  if (st != SHARC_OK) {
    /* every rank failed here alike: no peer reads this rank's buffer */
    dc->comm = NULL;
    dc_free(dc);
    /* auto: every rank agreed the path cannot work here (the host
     * exchanges worked): the staged path carries this comm's calls */
    *declined = autom && !atomic_load(&comm->unusable);
    if (!*declined)
      WARN(SUB_CUDA, "%s", sharc_comm_last_error(comm));
    if (*declined) {
      INFO(SUB_CUDA,
           "direct path unavailable, device collectives of this "
           "communicator take the staged path: %s",
           sharc_comm_last_error(comm));
      __atomic_store_n(&comm->gpu, (void *)&declined_mark, __ATOMIC_RELEASE);
    }
    return st;
  }
  pthread_mutex_lock(&hook_lock);
  comm->gpu_abort = direct_abort;
  __atomic_store_n(&comm->gpu, (void *)dc, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&hook_lock);
  wd_add(dc);
  if (atomic_load(&comm->unusable)) /* failed before the hook was there */
    direct_abort(comm);
  INFO(SUB_CUDA,
       "direct path: %d ranks on device %d, two staging slots of %zu bytes "
       "each",
       n, dc->device, dc->slot_bytes);
  return SHARC_OK;
}

/* ---- queueing one call ---------------------------------------------------
 * q_t gathers the first error; every helper does nothing after one. */

typedef struct {
  devcomm_t *dc;
  cudaStream_t cs;
  const char *what; /* the first failed operation */
  int err;          /* cudaError_t or CUresult of it */
} q_t;

static void q_fail(q_t *q, int e, const char *what) {
  if (e && !q->err) {
    q->err = e;
    q->what = what;
  }
}

static uint32_t *word(const devcomm_t *dc, int owner, int idx) {
  return (uint32_t *)(void *)(dc->peer[owner] + 4 * (size_t)idx);
}

static uint8_t *slot(const devcomm_t *dc, int owner, uint32_t s) {
  return dc->peer[owner] + dc->stg_off + (size_t)(s % NSLOTS) * dc->slot_bytes;
}

static void q_wait(q_t *q, const uint32_t *w, uint32_t v) {
  if (!q->err)
    q_fail(q,
           (int)q->dc->wait32((CUstream)q->cs, (CUdeviceptr)(uintptr_t)w, v,
                              CU_STREAM_WAIT_VALUE_GEQ),
           "cuStreamWaitValue32");
}

static void q_write(q_t *q, uint32_t *w, uint32_t v) {
  if (!q->err)
    q_fail(
        q,
        (int)q->dc->write32((CUstream)q->cs, (CUdeviceptr)(uintptr_t)w, v, 0),
        "cuStreamWriteValue32");
}

/* Before this rank writes its slot of step s: every peer finished the step
 * that used it last. */
static void q_claim(q_t *q, uint32_t s) {
  const devcomm_t *dc = q->dc;
  for (int p = 0; p < dc->n && s > NSLOTS; p++)
    if (p != dc->rank)
      q_wait(q, word(dc, dc->rank, dc->n + p), s - NSLOTS);
}

/* This rank's slot of step s is filled. */
static void q_publish(q_t *q, uint32_t s) {
  const devcomm_t *dc = q->dc;
  for (int p = 0; p < dc->n; p++)
    if (p != dc->rank)
      q_write(q, word(dc, p, dc->rank), s);
}

/* Rank p's slot of step s is filled. */
static void q_await(q_t *q, int p, uint32_t s) {
  q_wait(q, word(q->dc, q->dc->rank, p), s);
}

/* This rank finished step s (and every step before it); the watchdog sees
 * the progress. */
static void q_done(q_t *q, uint32_t s) {
  const devcomm_t *dc = q->dc;
  for (int p = 0; p < dc->n; p++)
    if (p != dc->rank)
      q_write(q, word(dc, p, dc->n + dc->rank), s);
  q_write(q, (uint32_t *)(uintptr_t)dc->words_dev + 1, s);
}

static void q_copy(q_t *q, void *dst, const void *src, size_t bytes) {
  if (!q->err && bytes && dst != src)
    q_fail(q, kernel_dev_copy(dst, src, bytes, q->cs), "cudaMemcpyAsync");
}

/* The setup's probe, on the internal stream: each rank writes 1 into its
 * probe word in every peer's buffer and waits for every peer's in its own,
 * so the stream memory operations this path is made of have worked across
 * these processes before any call relies on them. */
static sharc_status_t dc_probe(devcomm_t *dc, const char *fn) {
  q_t q = {.dc = dc, .cs = dc->side};
  int n = dc->n;
  for (int p = 0; p < n; p++)
    if (p != dc->rank)
      q_write(&q, word(dc, p, 2 * n + dc->rank), 1);
  for (int p = 0; p < n; p++)
    if (p != dc->rank)
      q_wait(&q, word(dc, dc->rank, 2 * n + p), 1);
  uint64_t limit = SHARC_MIN(timeout_ns(), PROBE_NS);
  uint64_t deadline = time_ns() + limit;
  cudaError_t e = cudaErrorNotReady;
  while (!q.err && (e = cudaStreamQuery(dc->side)) == cudaErrorNotReady &&
         time_ns() < deadline) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (e != cudaSuccess) /* let the waits queued pass */
    (void)cudaMemset(dc->mem + 8 * (size_t)n, RELEASED_BYTE, 4 * (size_t)n);
  (void)cudaGetLastError();
  if (q.err)
    return err_record(SHARC_ERR_UNSUPPORTED,
                      "%s (direct path): %s refused the flag probe (error %d)",
                      fn, q.what, q.err);
  if (e == cudaErrorNotReady)
    return err_record(SHARC_ERR_CUDA,
                      "%s (direct path): the peers' flag writes did not arrive "
                      "within %.0f s (cuStreamWriteValue32 on CUDA IPC memory "
                      "may not work between these devices)",
                      fn, (double)limit / 1e9);
  if (e != cudaSuccess)
    return cuda_record(e, fn, "the direct path's flag probe");
  return SHARC_OK;
}

/* dst = OP over every rank r' of slot(r', s) + at, len elements, starting
 * with this rank's own; then AVG's division. */
static void q_reduce(q_t *q, const coll_call_t *call, void *dst, uint32_t s,
                     size_t at, size_t len) {
  const devcomm_t *dc = q->dc;
  size_t esize = sharc_dtype_size(call->dtype);
  const uint8_t *own = slot(dc, dc->rank, s) + at * esize;
  for (int i = 1; i < dc->n && !q->err; i++) {
    int p = (dc->rank + i) % dc->n;
    q_fail(q,
           kernel_dev_reduce(call->dtype, call->op, dst, i == 1 ? own : dst,
                             slot(dc, p, s) + at * esize, len, q->cs),
           "the reduction kernel");
  }
  if (!q->err && call->op == SHARC_AVG)
    q_fail(q, kernel_dev_div(call->dtype, dst, len, dc->n, q->cs),
           "the AVG division kernel");
}

/* Block p of a piece of m elements split in n: [*off, *off + *len). */
static void block(size_t m, int n, int p, size_t *off, size_t *len) {
  size_t b = m / (size_t)n, rem = m % (size_t)n;
  *off = (size_t)p * b + ((size_t)p < rem ? (size_t)p : rem);
  *len = b + ((size_t)p < rem);
}

/* The size of one piece of call: bytes of each rank's block (all-gather,
 * broadcast, gather, scatter, all-to-all) or elements (the reductions: of
 * each block for reduce-scatter, of the whole piece for all-reduce and
 * reduce), so that what a rank publishes in one step fits its slot. */
static size_t piece(const devcomm_t *dc, const coll_call_t *call,
                    size_t esize) {
  size_t n = (size_t)dc->n;
  switch (call->coll) {
  case SCHED_REDUCE_SCATTER:
    return dc->slot_bytes / (n * esize);
  case SCHED_ALL_REDUCE:
  case SCHED_REDUCE:
    return dc->slot_bytes / esize;
  case SCHED_SCATTER:
  case SCHED_ALL_TO_ALL:
    return dc->slot_bytes / n / esize * esize;
  default:
    return dc->slot_bytes;
  }
}

/* The steps call takes (the entry word's count). */
static uint32_t call_steps(const devcomm_t *dc, const coll_call_t *call,
                           size_t esize) {
  if (call->coll == SCHED_BARRIER)
    return 1;
  int reduces = call->coll == SCHED_REDUCE_SCATTER ||
                call->coll == SCHED_ALL_REDUCE || call->coll == SCHED_REDUCE;
  size_t total = reduces ? call->count : call->count * esize;
  size_t per = piece(dc, call, esize);
  return (uint32_t)((reduces ? 2 : 1) * ((total + per - 1) / per));
}

/* Claims this rank's slot of step s, fills it with n blocks of l bytes
 * from src (block p at src + p * stride; one 2D copy) and publishes it. */
static void q_publish_blocks(q_t *q, uint32_t s, const uint8_t *src,
                             size_t stride, size_t l) {
  devcomm_t *dc = q->dc;
  q_claim(q, s);
  if (stride > MAX_PITCH) { /* past what a 2D copy's pitch may be */
    for (int p = 0; p < dc->n; p++)
      q_copy(q, slot(dc, dc->rank, s) + (size_t)p * l, src + (size_t)p * stride,
             l);
  } else if (!q->err && l) {
    q_fail(q,
           (int)cudaMemcpy2DAsync(slot(dc, dc->rank, s), l, src, stride, l,
                                  (size_t)dc->n, cudaMemcpyDefault, q->cs),
           "cudaMemcpy2DAsync");
  }
  q_publish(q, s);
}

/* Claims this rank's slot of step s, fills it with l bytes from src and
 * publishes it. */
static void q_publish_copy(q_t *q, uint32_t s, const void *src, size_t l) {
  q_claim(q, s);
  q_copy(q, slot(q->dc, q->dc->rank, s), src, l);
  q_publish(q, s);
}

/* all-gather and gather: each rank's block (every rank's, to the root
 * only for gather) through its slot. */
static void q_gathers(q_t *q, const coll_call_t *call, size_t cb) {
  devcomm_t *dc = q->dc;
  int all = call->coll == SCHED_ALL_GATHER, root = call->root;
  int receives = all || dc->rank == root;
  const uint8_t *send = call->sendbuf;
  uint8_t *recv = call->recvbuf;
  size_t per = piece(dc, call, 1);
  for (size_t o = 0; o < cb && !q->err; o += per) {
    size_t l = SHARC_MIN(per, cb - o);
    uint32_t s = ++dc->step;
    if (all || dc->rank != root)
      q_publish_copy(q, s, send + o, l);
    for (int i = 0; i < dc->n && receives; i++) {
      int p = (dc->rank + i) % dc->n;
      if (i)
        q_await(q, p, s);
      q_copy(q, recv + (size_t)p * cb + o, i ? slot(dc, p, s) : send + o, l);
    }
    q_done(q, s);
  }
}

/* broadcast, scatter and all-to-all: the sender's slot holds one block
 * (broadcast) or n blocks (scatter: the root's; all-to-all: every rank's),
 * each rank copies the block meant for it. */
static void q_spreads(q_t *q, const coll_call_t *call, size_t cb) {
  devcomm_t *dc = q->dc;
  int bc = call->coll == SCHED_BROADCAST, a2a = call->coll == SCHED_ALL_TO_ALL;
  int root = call->root, r = dc->rank;
  const uint8_t *send = call->sendbuf;
  uint8_t *recv = call->recvbuf;
  size_t per = piece(dc, call, sharc_dtype_size(call->dtype));
  for (size_t o = 0; o < cb && !q->err; o += per) {
    size_t l = SHARC_MIN(per, cb - o);
    uint32_t s = ++dc->step;
    if (bc && r == root)
      q_publish_copy(q, s, send + o, l);
    else if (a2a || r == root)
      q_publish_blocks(q, s, send + o, cb, l);
    if (a2a) { /* block r of every rank, to block p of recv */
      for (int i = 0; i < dc->n; i++) {
        int p = (r + i) % dc->n;
        if (i)
          q_await(q, p, s);
        q_copy(q, recv + (size_t)p * cb + o,
               i ? slot(dc, p, s) + (size_t)r * l : send + (size_t)r * cb + o,
               l);
      }
    } else if (r == root) {
      q_copy(q, recv + o, send + (bc ? 0 : (size_t)r * cb) + o, l);
    } else {
      q_await(q, root, s);
      q_copy(q, recv + o, slot(dc, root, s) + (bc ? 0 : (size_t)r * l), l);
    }
    q_done(q, s);
  }
}

/* reduce-scatter, all-reduce and reduce, per piece: step s publishes what
 * the others reduce (reduce-scatter: the piece of each of the n blocks;
 * otherwise m contiguous elements split into n blocks); in step t each
 * rank reduces its block of the piece into its slot t, starting with its
 * own contribution; then reduce-scatter copies it out, and all-reduce
 * (every rank) and reduce (the root) gather every rank's reduced block. */
static void q_reductions(q_t *q, const coll_call_t *call) {
  devcomm_t *dc = q->dc;
  size_t esize = sharc_dtype_size(call->dtype);
  size_t per = piece(dc, call, esize);
  int rs = call->coll == SCHED_REDUCE_SCATTER;
  int receives = call->coll == SCHED_ALL_REDUCE || dc->rank == call->root;
  const uint8_t *send = call->sendbuf;
  uint8_t *recv = call->recvbuf;
  for (size_t o = 0; o < call->count && !q->err; o += per) {
    size_t m = SHARC_MIN(per, call->count - o);
    uint32_t s = ++dc->step, t = ++dc->step;
    if (rs)
      q_publish_blocks(q, s, send + o * esize, call->count * esize, m * esize);
    else
      q_publish_copy(q, s, send + o * esize, m * esize);
    for (int i = 1; i < dc->n; i++)
      q_await(q, (dc->rank + i) % dc->n, s);
    size_t off, len;
    if (rs) {
      off = (size_t)dc->rank * m;
      len = m;
    } else {
      block(m, dc->n, dc->rank, &off, &len);
    }
    q_claim(q, t);
    q_reduce(q, call, slot(dc, dc->rank, t), s, off, len);
    if (rs) {
      q_copy(q, recv + o * esize, slot(dc, dc->rank, t), m * esize);
    } else {
      q_publish(q, t);
      for (int i = 0; i < dc->n && receives; i++) {
        int p = (dc->rank + i) % dc->n;
        block(m, dc->n, p, &off, &len);
        if (i)
          q_await(q, p, t);
        q_copy(q, recv + (o + off) * esize, slot(dc, p, t), len * esize);
      }
    }
    q_done(q, t);
  }
}

/* barrier: one step, nothing moved. */
static void q_barrier(q_t *q) {
  uint32_t s = ++q->dc->step;
  q_publish(q, s);
  for (int p = 0; p < q->dc->n; p++)
    if (p != q->dc->rank)
      q_await(q, p, s);
  q_done(q, s);
}

/* Queues call on cs (dc->lock held). */
static void q_call(q_t *q, const coll_call_t *call) {
  devcomm_t *dc = q->dc;
  size_t esize = sharc_dtype_size(call->dtype);
  size_t cb = call->count * esize;
  if (dc->have_last && dc->last_cs != q->cs)
    q_fail(q, (int)cudaStreamWaitEvent(q->cs, dc->last, 0),
           "cudaStreamWaitEvent (the previous call, on another stream)");
  uint32_t last = dc->step + call_steps(dc, call, esize);
  q_write(q, (uint32_t *)(uintptr_t)dc->words_dev, last);
  if (dc->n == 1) { /* nobody to wait for */
    if (call->coll != SCHED_BARRIER)
      q_copy(q, call->recvbuf, call->sendbuf, cb);
    dc->step = last;
    q_write(q, (uint32_t *)(uintptr_t)dc->words_dev + 1, last);
  } else {
    switch (call->coll) {
    case SCHED_ALL_GATHER:
    case SCHED_GATHER:
      q_gathers(q, call, cb);
      break;
    case SCHED_BROADCAST:
    case SCHED_SCATTER:
    case SCHED_ALL_TO_ALL:
      q_spreads(q, call, cb);
      break;
    case SCHED_BARRIER:
      q_barrier(q);
      break;
    default:
      q_reductions(q, call);
      break;
    }
  }
  if (!q->err) {
    q_fail(q, (int)cudaEventRecord(dc->last, q->cs), "cudaEventRecord");
    dc->last_cs = q->cs;
    dc->have_last = 1;
  }
}

/* ---- the path ----------------------------------------------------------- */

/* A CUDA stream's state of this path: the device comms its calls used since
 * its last synchronize (each holding a reference), whose failures that
 * synchronize returns. */
typedef struct {
  devcomm_t **used;
  int nused, cap;
} direct_ctx_t;

/* ds->lock held (sharc_stream_synchronize does not take the enqueueing
 * side's lock). */
static sharc_status_t note_use_locked(dev_stream_t *ds, devcomm_t *dc,
                                      const char *fn) {
  direct_ctx_t *ctx = ds->path_state[DIRECT_SLOT];
  if (!ctx && !(ctx = ds->path_state[DIRECT_SLOT] = calloc(1, sizeof *ctx)))
    return err_set(SHARC_ERR_NO_MEM, "%s: out of memory", fn);
  for (int i = 0; i < ctx->nused; i++)
    if (ctx->used[i] == dc)
      return SHARC_OK;
  if (ctx->nused == ctx->cap) {
    int cap = ctx->cap ? 2 * ctx->cap : 4;
    devcomm_t **u = realloc(ctx->used, (size_t)cap * sizeof *u);
    if (!u)
      return err_set(SHARC_ERR_NO_MEM, "%s: out of memory", fn);
    ctx->used = u;
    ctx->cap = cap;
  }
  pthread_mutex_lock(&dc->lock);
  dc->refs++;
  pthread_mutex_unlock(&dc->lock);
  ctx->used[ctx->nused++] = dc;
  return SHARC_OK;
}

static sharc_status_t note_use(dev_stream_t *ds, devcomm_t *dc,
                               const char *fn) {
  pthread_mutex_lock(&ds->lock);
  sharc_status_t st = note_use_locked(ds, dc, fn);
  pthread_mutex_unlock(&ds->lock);
  return st;
}

/* The enqueueing thread: the whole call queued on the CUDA stream; nothing
 * is owed to the stream's worker. */
static sharc_status_t direct_stage(dev_stream_t *ds, coll_call_t *call,
                                   dev_work_t *w, const char *fn,
                                   call_now_fn now) {
  struct sharc_comm *comm = call->comm;
  devcomm_t *dc = comm_dc(comm);
  if (!dc) {
    /* the setup in this call's turn: the calls before it set up or
     * declined already */
    CHECK(now(call, NULL));
    dc = comm_dc(comm);
  }
  if (!dc && comm_gpu(comm) != &declined_mark) {
    int declined = 0;
    sharc_status_t st = dc_setup(ds, call, now, fn, &declined);
    if (st != SHARC_OK && !declined)
      return st;
    dc = comm_dc(comm);
  }
  if (!dc) /* declined (auto): this call and the next take the staged path */
    return gpu_path_staged.stage(ds, call, w, fn, now);
  /* SHARC_CHECK=1: the ranks agree on the call before it is queued (this
   * enqueue then waits for the call's turn and its peers) */
  if (comm->cfg.check)
    CHECK(now(call, call));
  if (atomic_load(&dc->failed))
    return comm_record(comm, dc->fail_st, "%s: communicator unusable: %s", fn,
                       dc->msg);
  if (atomic_load(&comm->unusable)) { /* its hook marks dc at once */
    pthread_mutex_lock(&comm->err_lock);
    char msg[sizeof comm->unusable_msg];
    snprintf(msg, sizeof msg, "%s", comm->unusable_msg);
    sharc_status_t st = comm->unusable_st;
    pthread_mutex_unlock(&comm->err_lock);
    return comm_record(comm, st, "%s: communicator unusable: %s", fn, msg);
  }
  /* From here a call this rank does not queue would put its step numbers
   * out of step with its peers': a refusal fails the communicator. */
  sharc_status_t st = SHARC_OK;
  if (dc->device != ds->device)
    st = comm_error(comm, SHARC_ERR_INVALID_ARG,
                    "%s: the communicator's device collectives run on device "
                    "%d, this CUDA stream is on device %d; use one device per "
                    "rank",
                    fn, dc->device, ds->device);
  else if ((st = note_use(ds, dc, fn)) != SHARC_OK)
    comm_record(comm, st, "%s", err_last());
  if (st != SHARC_OK) {
    comm_fail(comm, comm->rank, st, sharc_comm_last_error(comm));
    return st;
  }
  q_t q = {.dc = dc, .cs = ds->cs};
  pthread_mutex_lock(&dc->lock);
  q_call(&q, call);
  atomic_store(&dc->issued, dc->step);
  pthread_mutex_unlock(&dc->lock);
  pthread_mutex_lock(&wd.lock);
  pthread_cond_signal(&wd.cond);
  pthread_mutex_unlock(&wd.lock);
  if (!q.err)
    return SHARC_OK;
  /* The peers wait for steps this rank did not queue: fail the comm, which
   * releases every rank's waits. */
  st = comm_error(comm, SHARC_ERR_CUDA,
                  "%s on a CUDA stream (direct path): %s failed (error %d)", fn,
                  q.what, q.err);
  (void)cudaGetLastError();
  comm_fail(comm, comm->rank, st, sharc_comm_last_error(comm));
  return st;
}

/* sharc_stream_synchronize: the CUDA stream is idle; a device comm that
 * failed since the last synchronize is this stream's error. */
static sharc_status_t direct_synced(dev_stream_t *ds) {
  pthread_mutex_lock(&ds->lock);
  direct_ctx_t *ctx = ds->path_state[DIRECT_SLOT];
  devcomm_t **used = ctx ? ctx->used : NULL;
  int nused = ctx ? ctx->nused : 0;
  if (ctx) {
    ctx->used = NULL;
    ctx->nused = ctx->cap = 0;
  }
  pthread_mutex_unlock(&ds->lock);
  sharc_status_t st = SHARC_OK;
  for (int i = 0; i < nused; i++) {
    devcomm_t *dc = used[i];
    if (st == SHARC_OK && atomic_load(&dc->failed)) {
      /* the comm's last error too, as a failed host collective records */
      pthread_mutex_lock(&wd.lock);
      if (dc->comm)
        comm_record(dc->comm, dc->fail_st, "%s", dc->msg);
      pthread_mutex_unlock(&wd.lock);
      st = err_set(dc->fail_st,
                   "sharc_stream_synchronize: a device collective on this "
                   "stream failed (direct path): %s",
                   dc->msg);
    }
    dc_put(dc);
  }
  free(used);
  return st;
}

static void direct_close(dev_stream_t *ds) {
  direct_ctx_t *ctx = ds->path_state[DIRECT_SLOT];
  if (!ctx)
    return;
  (void)direct_synced(ds);
  free(ctx->used);
  free(ctx);
  ds->path_state[DIRECT_SLOT] = NULL;
}

const gpu_path_t gpu_path_direct = {
    .call = {.name = "direct"},
    .takes = direct_takes,
    .check_env = direct_check_env,
    .stage = direct_stage,
    .synced = direct_synced,
    .close = direct_close,
};

#else /* !SHARC_HAVE_CUDA */

void gpu_comm_release(struct sharc_comm *comm) { (void)comm; }

/* Takes nothing: dev_have_cuda() is 0. */
const gpu_path_t gpu_path_direct = {.call = {.name = "direct"},
                                    .takes = direct_takes,
                                    .check_env = direct_check_env};

#endif /* SHARC_HAVE_CUDA */

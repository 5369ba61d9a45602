/*
 * direct_comm.c - a communicator's state on the direct GPU path (direct.h
 * has the protocol): its setup (every rank's device buffer allocated,
 * shared through CUDA IPC, mapped, probed and agreed on, or declined alike
 * under SHARC_CUDA_PATH=auto), the watchdog thread that fails it on a dead
 * peer or a stalled call, the failure hook that releases every queued wait,
 * and its release when the communicator is freed.
 */
#include "direct.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devptr.h"
#include "gpu.h" /* gpu_comm_release */

#ifdef SHARC_HAVE_CUDA

/* comm->gpu when the ranks found at setup that the path cannot work here
 * (SHARC_CUDA_PATH=auto): its calls take the staged path. */
static char declined_mark;

static void *comm_gpu(const struct sharc_comm *comm) {
  return __atomic_load_n(&comm->gpu, __ATOMIC_ACQUIRE);
}

devcomm_t *dc_of(const struct sharc_comm *comm) {
  void *g = comm_gpu(comm);
  return g == &declined_mark ? NULL : g;
}

int dc_declined(const struct sharc_comm *comm) {
  return comm_gpu(comm) == &declined_mark;
}

/* One rank's buffer as it shares it in the setup. */
typedef struct {
  cudaIpcMemHandle_t handle;
  uint64_t base; /* its address in the owner */
  uint64_t slot_bytes;
  int64_t inplace_bytes[2]; /* SHARC_CUDA_INPLACE_BYTES, ..._UNREG_BYTES */
  int64_t pid;
  uint64_t nonce;
  int32_t status; /* SHARC_OK, or why the owner cannot take part */
  int32_t pad;
} dc_desc_t;

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

/* mark_failed with comm's failure (comm failed). */
static void mark_failed_as(devcomm_t *dc, struct sharc_comm *comm) {
  char msg[sizeof dc->msg];
  pthread_mutex_lock(&comm->err_lock);
  sharc_status_t st = comm->unusable_st;
  snprintf(msg, sizeof msg, "%s", comm->unusable_msg);
  pthread_mutex_unlock(&comm->err_lock);
  mark_failed(dc, st, msg);
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
    mark_failed_as(dc, comm);
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

void wd_kick(void) {
  pthread_mutex_lock(&wd.lock);
  pthread_cond_signal(&wd.cond);
  pthread_mutex_unlock(&wd.lock);
}

void dc_record(devcomm_t *dc) {
  pthread_mutex_lock(&wd.lock); /* dc->comm stays while it is held */
  if (dc->comm)
    comm_record(dc->comm, dc->fail_st, "%s", dc->msg);
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

void dc_put(devcomm_t *dc) {
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
  devcomm_t *dc = dc_of(comm);
  if (dc) {
    pthread_mutex_lock(&dc->lock);
    dc->refs++;
    pthread_mutex_unlock(&dc->lock);
  }
  pthread_mutex_unlock(&hook_lock);
  if (!dc)
    return;
  mark_failed_as(dc, comm);
  dc_put(dc);
}

void gpu_comm_release(struct sharc_comm *comm) {
  pthread_mutex_lock(&hook_lock);
  devcomm_t *dc = dc_of(comm);
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
    for (int k = 0; k < 2; k++)
      if (all[p].inplace_bytes[k] != all[0].inplace_bytes[k])
        return comm_record(
            comm, SHARC_ERR_INVALID_ARG,
            "%s on a CUDA stream (direct path): rank %d has %s=%lld, rank 0 "
            "%lld; set the same on every rank",
            fn, p,
            k ? "SHARC_CUDA_INPLACE_UNREG_BYTES" : "SHARC_CUDA_INPLACE_BYTES",
            (long long)all[p].inplace_bytes[k],
            (long long)all[0].inplace_bytes[k]);
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
    e = cudaStreamCreateWithFlags(&dc->side, cudaStreamNonBlocking);
  /* The flags are zeroed, and the zeros have landed, before the handle is
   * shared: cudaMemset of device memory returns before it runs, and a zero
   * landing after a peer's first flag write erased it (the probe's "flag
   * writes did not arrive" on the first H100 run, with 3 and 4 ranks). On
   * the side stream: the legacy stream would also wait for the caller's
   * blocking streams. */
  if (e == cudaSuccess)
    e = cudaMemsetAsync(dc->mem, 0, dc->stg_off, dc->side);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(dc->side);
  if (e == cudaSuccess)
    e = cudaIpcGetMemHandle(&mine->handle, dc->mem);
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

/* direct.h */
sharc_status_t dc_gather_now(coll_call_t *call, call_now_fn now,
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

/* An all-gather of one int32 status per rank through now: the first
 * failed rank's status, with a message naming it. */
static sharc_status_t agree(coll_call_t *call, call_now_fn now,
                            sharc_status_t mine, const char *fn,
                            const char *what) {
  struct sharc_comm *comm = call->comm;
  int32_t me = (int32_t)mine, *all = calloc((size_t)comm->nranks, sizeof *all);
  if (!all)
    return comm_record(comm, SHARC_ERR_NO_MEM, "%s: out of memory", fn);
  sharc_status_t st = dc_gather_now(call, now, &me, all, sizeof me);
  for (int p = 0; st == SHARC_OK && p < comm->nranks; p++)
    if (all[p] != SHARC_OK)
      st = comm_record(comm, (sharc_status_t)all[p],
                       "%s on a CUDA stream (direct path): rank %d could not "
                       "%s (its log says why)",
                       fn, p, what);
  free(all);
  return st;
}

/* A local failure of the setup: a warning where the path was asked for,
 * information where it was chosen by default (auto falls back). */
static void say(int autom, const char *msg) {
  if (autom)
    INFO(SUB_CUDA, "direct path: %s", msg);
  else
    WARN(SUB_CUDA, "%s", msg);
}

/* direct.h */
sharc_status_t dc_setup(dev_stream_t *ds, coll_call_t *call, call_now_fn now,
                        const char *fn, int *declined) {
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
  dc->inplace_bytes[0] = mine.inplace_bytes[0] =
      param_int(PARAM_CUDA_INPLACE_BYTES);
  dc->inplace_bytes[1] = mine.inplace_bytes[1] =
      param_int(PARAM_CUDA_INPLACE_UNREG_BYTES);
  mine.pid = (int64_t)getpid();
  mine.nonce = gs_process_nonce();
  int autom = gpu_path_chosen("auto");
  sharc_status_t st = dc_alloc(dc, ds, &mine, fn);
  if (st != SHARC_OK)
    say(autom, err_last());
  mine.status = (int32_t)st;
  st = dc_gather_now(call, now, &mine, all, sizeof mine);
  if (st == SHARC_OK)
    st = check_descs(comm, all, fn);
  if (st == SHARC_OK) {
    sharc_status_t m = dc_map(dc, all, fn);
    if (m != SHARC_OK)
      say(autom, err_last());
    st = agree(call, now, m, fn, "map its peers' device staging");
  }
  if (st == SHARC_OK) {
    sharc_status_t m = dq_probe(dc, fn);
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

#else /* !SHARC_HAVE_CUDA */

void gpu_comm_release(struct sharc_comm *comm) { (void)comm; }

#endif /* SHARC_HAVE_CUDA */

/*
 * nccl.c - NCCL's C API (include/nccl/nccl.h) over sharc's public API:
 * libsharc_nccl.so, also named libnccl.so.2 so that a program built
 * against NVIDIA's library runs on sharc through LD_LIBRARY_PATH.
 *
 * A communicator wraps a sharc communicator and the CUDA device current at
 * its creation. A cudaStream_t maps to one sharc stream bound to it
 * (sharc_stream_create_cuda), made at its first use and kept until the last
 * communicator is destroyed, so calls are queued on the caller's stream as
 * NCCL queues them; sharc's staged path takes host memory on such a stream
 * as well as device memory. Groups map to sharc's groups; a communicator
 * created inside a group (one thread creating the ranks of several
 * devices) is initialised at the group's end, all of them at once on
 * threads of their own, before the group's other calls are issued.
 *
 * NCCL 2.28's calls: all-to-all, gather and scatter are sharc's own
 * collectives; a scalable init joins through its first id; a shrink is a
 * fresh communicator whose id the lowest remaining rank sends to the
 * others point to point; a window is a buffer registration. Revoke and
 * premultiplied sums are refused, and a simulated group end drops the
 * group (sharc.h: a group with a failed call issues nothing) since sharc's
 * cost model is not public.
 */
#include "nccl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sharc.h"

_Static_assert(sizeof(ncclUniqueId) == sizeof(sharc_unique_id_t),
               "NCCL's unique id carries sharc's");

#define NCCL_API __attribute__((visibility("default")))

struct ncclComm {
  sharc_comm_t sc; /* NULL until a grouped init completes */
  int device;
  int rank, nranks;
  /* a grouped init, run at the group's end */
  ncclUniqueId id;
  int pending;
};

/* ---- errors ---- */

static _Thread_local char last_msg[512];

static ncclResult_t result_of(sharc_status_t st) {
  switch (st) {
  case SHARC_OK:
    return ncclSuccess;
  case SHARC_ERR_INVALID_ARG:
    return ncclInvalidArgument;
  case SHARC_ERR_CUDA:
    return ncclUnhandledCudaError;
  case SHARC_ERR_SYSTEM:
  case SHARC_ERR_NO_MEM:
    return ncclSystemError;
  case SHARC_ERR_NET:
  case SHARC_ERR_PEER_LOST:
  case SHARC_ERR_TIMEOUT:
  case SHARC_ERR_ABORTED:
    return ncclRemoteError;
  case SHARC_ERR_MISMATCH:
  case SHARC_ERR_UNSUPPORTED:
    return ncclInvalidUsage;
  default:
    return ncclInternalError;
  }
}

/* An error of the shim itself: the message for ncclGetLastError. */
static ncclResult_t fail(ncclResult_t r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static ncclResult_t fail(ncclResult_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_msg, sizeof last_msg, fmt, ap);
  va_end(ap);
  return r;
}

/* A sharc status: its message (the thread's last) kept for
 * ncclGetLastError(NULL). */
static ncclResult_t from(sharc_status_t st) {
  if (st != SHARC_OK)
    snprintf(last_msg, sizeof last_msg, "%s", sharc_last_error());
  return result_of(st);
}

NCCL_API ncclResult_t ncclGetVersion(int *version) {
  if (!version)
    return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_API const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error (a CUDA call failed)";
  case ncclSystemError:
    return "unhandled system error (a system call or allocation failed)";
  case ncclInternalError:
    return "internal error (a bug in sharc's NCCL layer)";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage (a call not allowed here)";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "operation in progress";
  default:
    return "unknown result code";
  }
}

NCCL_API const char *ncclGetLastError(ncclComm_t comm) {
  if (comm && comm->sc) {
    const char *m = sharc_comm_last_error(comm->sc);
    if (m && *m)
      return m;
  }
  return last_msg;
}

NCCL_API void ncclResetDebugInit(void) {}

/* ---- streams: one sharc stream per cudaStream_t (and device) ---- */

typedef struct {
  cudaStream_t cs;
  int device;
  sharc_stream_t ss;
} stream_map_t;

static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static stream_map_t *map;
static size_t map_n, map_cap;
static int live_comms; /* the map is emptied when this drops to 0 */

static ncclResult_t stream_of(const char *fn, cudaStream_t cs,
                              sharc_stream_t *out) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    dev = 0;
  }
  ncclResult_t r = ncclSuccess;
  pthread_mutex_lock(&map_lock);
  size_t i = 0;
  while (i < map_n && !(map[i].cs == cs && map[i].device == dev))
    i++;
  if (i == map_n) {
    sharc_stream_t ss = NULL;
    sharc_status_t st = sharc_stream_create_cuda(&ss, cs);
    if (st != SHARC_OK) {
      r = fail(result_of(st), "%s: binding the CUDA stream: %s", fn,
               sharc_last_error());
    } else if (map_n == map_cap) {
      size_t cap = map_cap ? 2 * map_cap : 8;
      stream_map_t *m = realloc(map, cap * sizeof *m);
      if (!m) {
        sharc_stream_destroy(ss);
        r = fail(ncclSystemError, "%s: out of memory", fn);
      } else {
        map = m;
        map_cap = cap;
      }
    }
    if (r == ncclSuccess)
      map[map_n++] = (stream_map_t){cs, dev, ss};
  }
  if (r == ncclSuccess)
    *out = map[i].ss;
  pthread_mutex_unlock(&map_lock);
  return r;
}

/* After the last communicator: the streams go (each synchronised first). */
static void comm_gone(void) {
  pthread_mutex_lock(&map_lock);
  if (--live_comms == 0) {
    for (size_t i = 0; i < map_n; i++)
      sharc_stream_destroy(map[i].ss);
    map_n = 0;
  }
  pthread_mutex_unlock(&map_lock);
}

static void comm_born(void) {
  pthread_mutex_lock(&map_lock);
  live_comms++;
  pthread_mutex_unlock(&map_lock);
}

/* ---- communicators ---- */

static _Thread_local int tl_depth;
static _Thread_local ncclComm_t *tl_pending;
static _Thread_local size_t tl_npending, tl_cap_pending;

NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id)
    return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  sharc_unique_id_t u;
  sharc_status_t st = sharc_get_unique_id(&u);
  if (st == SHARC_OK)
    memcpy(id->internal, u.internal, sizeof u.internal);
  return from(st);
}

/* Creates comm's sharc communicator (blocks until its peers join). */
static ncclResult_t init_now(ncclComm_t c) {
  sharc_unique_id_t u;
  memcpy(u.internal, c->id.internal, sizeof u.internal);
  sharc_status_t st = sharc_comm_init_rank(&c->sc, c->nranks, &u, c->rank);
  if (st != SHARC_OK) {
    c->sc = NULL;
    return from(st);
  }
  comm_born();
  return ncclSuccess;
}

static ncclResult_t init_rank(const char *fn, ncclComm_t *out, int nranks,
                              ncclUniqueId id, int rank) {
  if (!out)
    return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument,
                "%s: rank %d of %d ranks: need 0 <= rank < nranks", fn, rank,
                nranks);
  ncclComm_t c = calloc(1, sizeof *c);
  if (!c)
    return fail(ncclSystemError, "%s: out of memory", fn);
  c->rank = rank;
  c->nranks = nranks;
  c->id = id;
  if (cudaGetDevice(&c->device) != cudaSuccess) {
    (void)cudaGetLastError();
    c->device = -1; /* no device: host memory only */
  }
  if (tl_depth > 0) { /* completed at the group's end */
    if (tl_npending == tl_cap_pending) {
      size_t cap = tl_cap_pending ? 2 * tl_cap_pending : 8;
      ncclComm_t *p = realloc(tl_pending, cap * sizeof *p);
      if (!p) {
        free(c);
        return fail(ncclSystemError, "%s: out of memory", fn);
      }
      tl_pending = p;
      tl_cap_pending = cap;
    }
    c->pending = 1;
    tl_pending[tl_npending++] = c;
    *out = c;
    return ncclSuccess;
  }
  ncclResult_t r = init_now(c);
  if (r != ncclSuccess) {
    free(c);
    return r;
  }
  *out = c;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks,
                                       ncclUniqueId commId, int rank) {
  return init_rank("ncclCommInitRank", comm, nranks, commId, rank);
}

static ncclResult_t check_config(const char *fn, const ncclConfig_t *config) {
  if (config && config->magic != 0xcafebeef)
    return fail(ncclInvalidArgument,
                "%s: config was not made from NCCL_CONFIG_INITIALIZER (magic "
                "0x%x)",
                fn, config->magic);
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                             ncclUniqueId commId, int rank,
                                             ncclConfig_t *config) {
  ncclResult_t r = check_config("ncclCommInitRankConfig", config);
  if (r != ncclSuccess)
    return r;
  return init_rank("ncclCommInitRankConfig", comm, nranks, commId, rank);
}

NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks,
                                               int myrank, int nId,
                                               ncclUniqueId *commIds,
                                               ncclConfig_t *config) {
  static const char fn[] = "ncclCommInitRankScalable";
  ncclResult_t r = check_config(fn, config);
  if (r != ncclSuccess)
    return r;
  if (nId < 1 || (nranks >= 1 && nId > nranks))
    return fail(ncclInvalidArgument,
                "%s: nId %d ids for %d ranks; pass 1 <= nId <= nranks", fn, nId,
                nranks);
  if (!commIds)
    return fail(ncclInvalidArgument, "%s: commIds is NULL with nId %d", fn,
                nId);
  /* sharc's rendezvous is one root: the first id's (see nccl.h). */
  return init_rank(fn, newcomm, nranks, commIds[0], myrank);
}

/* A thread initialising one communicator (grouped inits, InitAll). */
typedef struct {
  ncclComm_t c;
  int set_device;
  pthread_t t;
  int started;
  ncclResult_t r;
  char msg[512];
} init_job_t;

static void *init_thread(void *arg) {
  init_job_t *j = arg;
  if (j->set_device && j->c->device >= 0 &&
      cudaSetDevice(j->c->device) != cudaSuccess) {
    (void)cudaGetLastError();
    j->r =
        fail(ncclUnhandledCudaError, "cudaSetDevice(%d) failed", j->c->device);
  } else {
    j->r = init_now(j->c);
  }
  if (j->r != ncclSuccess)
    snprintf(j->msg, sizeof j->msg, "%s", last_msg);
  return NULL;
}

/* Initialises n communicators at once, one thread each; the first error. */
static ncclResult_t init_all(ncclComm_t *cs, size_t n, int set_device) {
  init_job_t *jobs = calloc(n, sizeof *jobs);
  if (!jobs)
    return fail(ncclSystemError, "communicator init: out of memory");
  for (size_t i = 0; i < n; i++) {
    jobs[i].c = cs[i];
    jobs[i].set_device = set_device;
    jobs[i].started =
        pthread_create(&jobs[i].t, NULL, init_thread, &jobs[i]) == 0;
    if (!jobs[i].started) {
      jobs[i].r = fail(ncclSystemError, "communicator init: no thread");
      snprintf(jobs[i].msg, sizeof jobs[i].msg, "%s", last_msg);
    }
  }
  ncclResult_t r = ncclSuccess;
  for (size_t i = 0; i < n; i++) {
    if (jobs[i].started)
      pthread_join(jobs[i].t, NULL);
    if (jobs[i].r != ncclSuccess && r == ncclSuccess) {
      r = jobs[i].r;
      snprintf(last_msg, sizeof last_msg, "%s", jobs[i].msg);
    }
    cs[i]->pending = 0;
  }
  free(jobs);
  return r;
}

NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev,
                                      const int *devlist) {
  if (!comm || ndev < 1)
    return fail(ncclInvalidArgument,
                "ncclCommInitAll: comm is NULL or ndev %d < 1", ndev);
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess)
    return r;
  ncclComm_t *cs = calloc((size_t)ndev, sizeof *cs);
  if (!cs)
    return fail(ncclSystemError, "ncclCommInitAll: out of memory");
  for (int i = 0; i < ndev && r == ncclSuccess; i++) {
    if (!(cs[i] = calloc(1, sizeof *cs[i])))
      r = fail(ncclSystemError, "ncclCommInitAll: out of memory");
    else
      *cs[i] = (struct ncclComm){.device = devlist ? devlist[i] : i,
                                 .rank = i,
                                 .nranks = ndev,
                                 .id = id};
  }
  if (r == ncclSuccess)
    r = init_all(cs, (size_t)ndev, 1);
  for (int i = 0; i < ndev; i++) {
    if (r != ncclSuccess && cs[i]) {
      if (cs[i]->sc) {
        sharc_comm_abort(cs[i]->sc);
        comm_gone();
      }
      free(cs[i]);
      cs[i] = NULL;
    }
    comm[i] = cs[i];
  }
  free(cs);
  return r;
}

/* comm usable for a call of fn: created, not pending. */
static ncclResult_t usable(const char *fn, ncclComm_t comm) {
  if (!comm)
    return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
  if (comm->pending || !comm->sc)
    return fail(ncclInvalidUsage,
                "%s: the communicator's init has not completed (it was "
                "created inside a group that has not ended)",
                fn);
  return ncclSuccess;
}

#define USABLE(fn, comm)                                                       \
  do {                                                                         \
    ncclResult_t r_ = usable(fn, comm);                                        \
    if (r_ != ncclSuccess)                                                     \
      return r_;                                                               \
  } while (0)

NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                                    ncclComm_t *newcomm, ncclConfig_t *config) {
  USABLE("ncclCommSplit", comm);
  ncclResult_t r = check_config("ncclCommSplit", config);
  if (r != ncclSuccess)
    return r;
  if (!newcomm)
    return fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  sharc_comm_t sc = NULL;
  sharc_status_t st =
      sharc_comm_split(comm->sc, color < 0 ? -1 : color, key, &sc);
  if (st != SHARC_OK)
    return from(st);
  *newcomm = NULL;
  if (!sc)
    return ncclSuccess; /* NCCL_SPLIT_NOCOLOR */
  ncclComm_t c = calloc(1, sizeof *c);
  if (!c) {
    sharc_comm_destroy(sc);
    return fail(ncclSystemError, "ncclCommSplit: out of memory");
  }
  c->sc = sc;
  c->device = comm->device;
  sharc_comm_rank(sc, &c->rank);
  sharc_comm_size(sc, &c->nranks);
  comm_born();
  *newcomm = c;
  return ncclSuccess;
}

/* The excluded ranks of a shrink as a mask of comm's nranks (*out, the
 * caller frees it), each checked; *nout their number. */
static ncclResult_t shrink_mask(const char *fn, ncclComm_t comm,
                                const int *list, int count, char **out,
                                int *nout) {
  if (count < 0 || (count > 0 && !list))
    return fail(ncclInvalidArgument,
                "%s: excludeRanksCount %d with excludeRanksList %s; pass a "
                "list of that many ranks",
                fn, count, list ? "set" : "NULL");
  char *m = calloc((size_t)comm->nranks, 1);
  if (!m)
    return fail(ncclSystemError, "%s: out of memory", fn);
  for (int i = 0; i < count; i++) {
    int x = list[i];
    ncclResult_t r = ncclSuccess;
    if (x < 0 || x >= comm->nranks)
      r = fail(ncclInvalidArgument,
               "%s: excludeRanksList[%d] = %d outside the communicator of %d "
               "ranks",
               fn, i, x, comm->nranks);
    else if (m[x])
      r = fail(ncclInvalidArgument,
               "%s: rank %d is listed twice in excludeRanksList", fn, x);
    else if (x == comm->rank)
      r = fail(ncclInvalidArgument,
               "%s: this rank (%d) is in excludeRanksList; excluded ranks do "
               "not call ncclCommShrink",
               fn, x);
    if (r != ncclSuccess) {
      free(m);
      return r;
    }
    m[x] = 1;
  }
  *out = m;
  *nout = count;
  return ncclSuccess;
}

/* The new communicator's id: made by the leader, sent to every remaining
 * rank over comm (point to point, so the excluded ranks take no part). An
 * all-zero id tells the others that the leader could not make one. */
static ncclResult_t shrink_id(const char *fn, ncclComm_t comm, const char *out,
                              int leader, sharc_unique_id_t *u) {
  memset(u, 0, sizeof *u);
  if (comm->rank != leader) {
    sharc_status_t st =
        sharc_recv(u, sizeof *u, SHARC_U8, leader, comm->sc, NULL);
    if (st != SHARC_OK)
      return fail(result_of(st), "%s: receiving the new id from rank %d: %s",
                  fn, leader, sharc_comm_last_error(comm->sc));
    static const sharc_unique_id_t zero;
    if (memcmp(u, &zero, sizeof zero) == 0)
      return fail(ncclSystemError,
                  "%s: rank %d, which makes the new communicator's id, could "
                  "not make it (its ncclGetLastError says why)",
                  fn, leader);
    return ncclSuccess;
  }
  sharc_status_t made = sharc_get_unique_id(u);
  ncclResult_t r = ncclSuccess;
  if (made != SHARC_OK) {
    r = fail(result_of(made), "%s: making the new id: %s", fn,
             sharc_last_error());
    memset(u, 0, sizeof *u);
  }
  /* one batch: every send progresses at once */
  sharc_status_t st = sharc_group_start();
  for (int x = 0; x < comm->nranks && st == SHARC_OK; x++)
    if (!out[x] && x != leader)
      st = sharc_send(u, sizeof *u, SHARC_U8, x, comm->sc, NULL);
  sharc_status_t g = sharc_group_end();
  if (st == SHARC_OK)
    st = g;
  if (st != SHARC_OK && r == ncclSuccess)
    r = fail(result_of(st), "%s: sending the new id: %s", fn,
             sharc_comm_last_error(comm->sc));
  return r;
}

NCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                                     int excludeRanksCount, ncclComm_t *newcomm,
                                     ncclConfig_t *config, int shrinkFlags) {
  static const char fn[] = "ncclCommShrink";
  USABLE(fn, comm);
  ncclResult_t r = check_config(fn, config);
  if (r != ncclSuccess)
    return r;
  if (!newcomm)
    return fail(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return fail(ncclInvalidArgument,
                "%s: shrinkFlags 0x%x; use NCCL_SHRINK_DEFAULT or "
                "NCCL_SHRINK_ABORT",
                fn, (unsigned)shrinkFlags);
  if (tl_depth > 0)
    return fail(ncclInvalidUsage,
                "%s: called inside a group; sharc shrinks outside groups "
                "only (call it after ncclGroupEnd)",
                fn);
  sharc_status_t health = sharc_comm_status(comm->sc);
  if (health != SHARC_OK)
    return fail(ncclInvalidUsage,
                "%s: the communicator failed (%s: %s) and sharc builds the "
                "new one through it; make it with ncclGetUniqueId and "
                "ncclCommInitRank among the remaining ranks instead",
                fn, sharc_status_name(health), sharc_comm_last_error(comm->sc));
  char *out = NULL;
  int nout = 0;
  r = shrink_mask(fn, comm, excludeRanksList, excludeRanksCount, &out, &nout);
  if (r != ncclSuccess)
    return r;
  int leader = 0, below = 0;
  while (out[leader]) /* this rank is not excluded: the loop ends */
    leader++;
  for (int x = 0; x < comm->rank; x++)
    below += out[x];
  sharc_unique_id_t u;
  r = shrink_id(fn, comm, out, leader, &u);
  free(out);
  if (r != ncclSuccess)
    return r;
  ncclComm_t c = calloc(1, sizeof *c);
  if (!c)
    return fail(ncclSystemError, "%s: out of memory", fn);
  c->device = comm->device;
  c->rank = comm->rank - below;
  c->nranks = comm->nranks - nout;
  memcpy(c->id.internal, u.internal, sizeof u.internal);
  r = init_now(c);
  if (r != ncclSuccess) {
    free(c);
    return r;
  }
  *newcomm = c;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  USABLE("ncclCommFinalize", comm);
  /* Work queued on the streams completes in their order; destroy waits
   * for what is outstanding on the communicator. */
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm)
    return ncclSuccess;
  sharc_status_t st = SHARC_OK;
  if (comm->sc) {
    st = sharc_comm_destroy(comm->sc);
    comm_gone();
  }
  free(comm);
  return from(st);
}

NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm)
    return ncclSuccess;
  sharc_status_t st = SHARC_OK;
  if (comm->sc) {
    st = sharc_comm_abort(comm->sc);
    comm_gone();
  }
  free(comm);
  return from(st);
}

NCCL_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  USABLE("ncclCommRevoke", comm);
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return fail(ncclInvalidArgument,
                "ncclCommRevoke: revokeFlags 0x%x; the only value is "
                "NCCL_REVOKE_DEFAULT (0)",
                (unsigned)revokeFlags);
  return fail(ncclInvalidUsage,
              "ncclCommRevoke: not available on sharc, which can stop a "
              "communicator's work only by freeing it; call ncclCommAbort, "
              "then make a new communicator among the remaining ranks "
              "(ncclGetUniqueId, ncclCommInitRank)");
}

NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm,
                                            ncclResult_t *asyncError) {
  USABLE("ncclCommGetAsyncError", comm);
  if (!asyncError)
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is "
                                     "NULL");
  *asyncError = result_of(sharc_comm_status(comm->sc));
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  if (!comm || !count)
    return fail(ncclInvalidArgument, "ncclCommCount: comm or count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  if (!comm || !device)
    return fail(ncclInvalidArgument,
                "ncclCommCuDevice: comm or device is NULL");
  *device = comm->device;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  if (!comm || !rank)
    return fail(ncclInvalidArgument, "ncclCommUserRank: comm or rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

/* ---- memory ---- */

NCCL_API ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  if (!ptr)
    return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  cudaError_t e = cudaMalloc(ptr, size ? size : 1);
  if (e != cudaSuccess)
    return fail(ncclUnhandledCudaError, "ncclMemAlloc: cudaMalloc(%zu): %s",
                size, cudaGetErrorString(e));
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclMemFree(void *ptr) {
  cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess)
    return fail(ncclUnhandledCudaError, "ncclMemFree: cudaFree: %s",
                cudaGetErrorString(e));
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff,
                                       size_t size, void **handle) {
  USABLE("ncclCommRegister", comm);
  if (!handle)
    return fail(ncclInvalidArgument, "ncclCommRegister: handle is NULL");
  sharc_status_t st = sharc_mem_register(buff, size);
  *handle = st == SHARC_OK ? buff : NULL;
  return from(st);
}

NCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  USABLE("ncclCommDeregister", comm);
  return from(sharc_mem_deregister(handle));
}

struct ncclWindow {
  ncclComm_t comm;
  void *buff;
  size_t size; /* bytes */
};

NCCL_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff,
                                             size_t size, ncclWindow_t *win,
                                             int winFlags) {
  static const char fn[] = "ncclCommWindowRegister";
  USABLE(fn, comm);
  if (!win)
    return fail(ncclInvalidArgument, "%s: win is NULL", fn);
  *win = NULL;
  if (winFlags & ~NCCL_WIN_COLL_SYMMETRIC)
    return fail(ncclInvalidArgument,
                "%s: winFlags 0x%x; use NCCL_WIN_DEFAULT or "
                "NCCL_WIN_COLL_SYMMETRIC",
                fn, (unsigned)winFlags);
  if (!buff || size == 0)
    return fail(ncclInvalidArgument,
                "%s: buff %p, size %zu bytes; pass a buffer and its size", fn,
                buff, size);
  ncclWindow_t w = malloc(sizeof *w);
  if (!w)
    return fail(ncclSystemError, "%s: out of memory", fn);
  sharc_status_t st = sharc_mem_register(buff, size);
  if (st != SHARC_OK) {
    free(w);
    return from(st);
  }
  *w = (struct ncclWindow){comm, buff, size};
  *win = w;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm,
                                               ncclWindow_t win) {
  static const char fn[] = "ncclCommWindowDeregister";
  USABLE(fn, comm);
  if (!win || win->comm != comm)
    return fail(ncclInvalidArgument,
                "%s: win is %s; pass the window ncclCommWindowRegister made "
                "on this communicator",
                fn, win ? "another communicator's" : "NULL");
  sharc_status_t st = sharc_mem_deregister(win->buff);
  if (st == SHARC_OK)
    free(win);
  return from(st);
}

/* ---- reductions ---- */

NCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                               ncclDataType_t datatype,
                                               ncclScalarResidence_t residence,
                                               ncclComm_t comm) {
  (void)op, (void)scalar, (void)datatype, (void)residence, (void)comm;
  return fail(ncclInvalidUsage,
              "ncclRedOpCreatePreMulSum: not available on sharc; use ncclSum "
              "and scale the result (or ncclAvg for the mean)");
}

NCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  (void)comm;
  return fail(ncclInvalidArgument,
              "ncclRedOpDestroy: op %d was not made by "
              "ncclRedOpCreatePreMulSum (which sharc does not offer)",
              (int)op);
}

/* ---- calls ---- */

/* The fp8 types travel as bytes: only calls that move data take them. */
static const sharc_dtype_t dtypes[ncclNumTypes] = {
    SHARC_I8,  SHARC_U8,  SHARC_I32, SHARC_U32,  SHARC_I64, SHARC_U64,
    SHARC_F16, SHARC_F32, SHARC_F64, SHARC_BF16, SHARC_U8,  SHARC_U8};
/* The op argument of a call that reduces nothing. */
#define NO_REDUCTION ncclMaxRedOp
static const sharc_op_t ops[ncclNumOps] = {SHARC_SUM, SHARC_PROD, SHARC_MAX,
                                           SHARC_MIN, SHARC_AVG};

/* The sharc arguments of a call: dtype, op (ignored where none) and the
 * stream. */
static ncclResult_t args(const char *fn, ncclComm_t comm, ncclDataType_t dt,
                         ncclRedOp_t op, cudaStream_t cs, sharc_dtype_t *sdt,
                         sharc_op_t *sop, sharc_stream_t *ss) {
  USABLE(fn, comm);
  if ((unsigned)dt >= ncclNumTypes)
    return fail(ncclInvalidArgument,
                "%s: unknown datatype %d; use ncclInt8 .. ncclFloat8e5m2", fn,
                (int)dt);
  if (op == NO_REDUCTION) {
    *sdt = dtypes[dt];
    *sop = SHARC_SUM;
    return stream_of(fn, cs, ss);
  }
  if (dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2)
    return fail(ncclInvalidArgument,
                "%s: datatype %d is fp8, which sharc moves but cannot reduce; "
                "reduce in ncclFloat16, ncclBfloat16 or ncclFloat32",
                fn, (int)dt);
  if ((unsigned)op >= ncclNumOps)
    return fail(ncclInvalidArgument,
                "%s: unknown reduction op %d; use ncclSum, ncclProd, ncclMax, "
                "ncclMin or ncclAvg",
                fn, (int)op);
  *sdt = dtypes[dt];
  *sop = ops[op];
  return stream_of(fn, cs, ss);
}

#define ARGS(fn, dt, op)                                                       \
  sharc_dtype_t sdt = SHARC_U8;                                                \
  sharc_op_t sop = SHARC_SUM;                                                  \
  sharc_stream_t ss = NULL;                                                    \
  do {                                                                         \
    ncclResult_t r_ = args(fn, comm, dt, op, stream, &sdt, &sop, &ss);         \
    if (r_ != ncclSuccess)                                                     \
      return r_;                                                               \
  } while (0)

NCCL_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff,
                                 size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, int root, ncclComm_t comm,
                                 cudaStream_t stream) {
  ARGS("ncclReduce", datatype, op);
  return from(
      sharc_reduce(sendbuff, recvbuff, count, sdt, sop, root, comm->sc, ss));
}

NCCL_API ncclResult_t ncclBcast(void *buff, size_t count,
                                ncclDataType_t datatype, int root,
                                ncclComm_t comm, cudaStream_t stream) {
  ARGS("ncclBcast", datatype, NO_REDUCTION);
  (void)sop;
  return from(sharc_broadcast(buff, buff, count, sdt, root, comm->sc, ss));
}

NCCL_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff,
                                    size_t count, ncclDataType_t datatype,
                                    int root, ncclComm_t comm,
                                    cudaStream_t stream) {
  ARGS("ncclBroadcast", datatype, NO_REDUCTION);
  (void)sop;
  return from(
      sharc_broadcast(sendbuff, recvbuff, count, sdt, root, comm->sc, ss));
}

NCCL_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff,
                                    size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, ncclComm_t comm,
                                    cudaStream_t stream) {
  ARGS("ncclAllReduce", datatype, op);
  return from(
      sharc_all_reduce(sendbuff, recvbuff, count, sdt, sop, comm->sc, ss));
}

NCCL_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                                        size_t recvcount,
                                        ncclDataType_t datatype, ncclRedOp_t op,
                                        ncclComm_t comm, cudaStream_t stream) {
  ARGS("ncclReduceScatter", datatype, op);
  return from(sharc_reduce_scatter(sendbuff, recvbuff, recvcount, sdt, sop,
                                   comm->sc, ss));
}

NCCL_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
                                    size_t sendcount, ncclDataType_t datatype,
                                    ncclComm_t comm, cudaStream_t stream) {
  ARGS("ncclAllGather", datatype, NO_REDUCTION);
  (void)sop;
  return from(
      sharc_all_gather(sendbuff, recvbuff, sendcount, sdt, comm->sc, ss));
}

NCCL_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff,
                                   size_t count, ncclDataType_t datatype,
                                   ncclComm_t comm, cudaStream_t stream) {
  ARGS("ncclAlltoAll", datatype, NO_REDUCTION);
  (void)sop;
  return from(sharc_all_to_all(sendbuff, recvbuff, count, sdt, comm->sc, ss));
}

NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff,
                                 size_t count, ncclDataType_t datatype,
                                 int root, ncclComm_t comm,
                                 cudaStream_t stream) {
  ARGS("ncclGather", datatype, NO_REDUCTION);
  (void)sop;
  /* NCCL leaves recvbuff unused off the root: sharc takes it as NULL. */
  if (comm->rank != root)
    recvbuff = NULL;
  return from(sharc_gather(sendbuff, recvbuff, count, sdt, root, comm->sc, ss));
}

NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff,
                                  size_t count, ncclDataType_t datatype,
                                  int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  ARGS("ncclScatter", datatype, NO_REDUCTION);
  (void)sop;
  if (comm->rank != root)
    sendbuff = NULL; /* unused off the root, as in NCCL */
  return from(
      sharc_scatter(sendbuff, recvbuff, count, sdt, root, comm->sc, ss));
}

NCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count,
                               ncclDataType_t datatype, int peer,
                               ncclComm_t comm, cudaStream_t stream) {
  ARGS("ncclSend", datatype, NO_REDUCTION);
  (void)sop;
  return from(sharc_send(sendbuff, count, sdt, peer, comm->sc, ss));
}

NCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count,
                               ncclDataType_t datatype, int peer,
                               ncclComm_t comm, cudaStream_t stream) {
  ARGS("ncclRecv", datatype, NO_REDUCTION);
  (void)sop;
  return from(sharc_recv(recvbuff, count, sdt, peer, comm->sc, ss));
}

/* ---- groups ---- */

NCCL_API ncclResult_t ncclGroupStart(void) {
  tl_depth++;
  return from(sharc_group_start());
}

NCCL_API ncclResult_t ncclGroupEnd(void) {
  if (tl_depth == 0)
    return fail(ncclInvalidUsage,
                "ncclGroupEnd: no group is open on this thread; call "
                "ncclGroupStart first");
  ncclResult_t r = ncclSuccess;
  if (--tl_depth == 0 && tl_npending) {
    /* the group's communicators first: its calls may use them */
    r = init_all(tl_pending, tl_npending, 1);
    tl_npending = 0;
  }
  ncclResult_t g = from(sharc_group_end());
  return r != ncclSuccess ? r : g;
}

NCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  static const char fn[] = "ncclGroupSimulateEnd";
  if (!simInfo || simInfo->magic != 0x74685283u ||
      simInfo->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float))
    return fail(ncclInvalidArgument,
                "%s: simInfo is %s; start it from NCCL_SIM_INFO_INITIALIZER "
                "(the group stays open)",
                fn, simInfo ? "not made from the initializer" : "NULL");
  if (tl_depth == 0)
    return fail(ncclInvalidUsage,
                "%s: no group is open on this thread; call ncclGroupStart "
                "first",
                fn);
  if (tl_depth > 1) { /* an inner level: only the outermost end issues */
    tl_depth--;
    return from(sharc_group_end());
  }
  tl_depth = 0;
  ncclResult_t r = ncclSuccess;
  if (tl_npending) { /* communicators are made, simulated or not */
    r = init_all(tl_pending, tl_npending, 1);
    tl_npending = 0;
  }
  (void)sharc_group_cancel(); /* open: tl_depth was 1 */
  simInfo->estimatedTime = NCCL_UNDEF_FLOAT;
  if (r != ncclSuccess)
    return r;
  return fail(ncclInvalidUsage,
              "%s: sharc makes no time estimate (its cost model is internal "
              "to libsharc); the group was closed and its calls were not "
              "issued, estimatedTime is NCCL_UNDEF_FLOAT; call ncclGroupEnd "
              "to run them",
              fn);
}

/*
 * path_direct.c - the direct GPU path (SHARC_CUDA_PATH=direct, and auto's
 * choice on one host): collectives on device memory between the GPU ranks
 * of one host, queued on the caller's CUDA stream itself, no host thread
 * taking part in a call. direct.h describes the protocol; direct_comm.c
 * sets a communicator up and handles its failures, direct_queue.c queues a
 * call's steps; this file is the path the binding asks (gpu_impl.h).
 */
#include "direct.h"
#include "gpu_impl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devptr.h"
#include "ipc_map.h"

/* This path's index in dev_stream_t.path_state (gpu_paths). */
#define DIRECT_SLOT 0

/* Every collective, when chosen (SHARC_CUDA_PATH=direct, or auto unless
 * the setup declined it) and all of comm's ranks are on one host. */
static int direct_takes(const coll_call_t *call) {
  /* Its steps are numbered alike on every rank: a send/recv batch, which
   * only two ranks run, takes the staged path. */
  if (call->coll == SCHED_P2P ||
      !(gpu_path_chosen("direct") || gpu_path_chosen("auto")) ||
      !dev_have_cuda() || call->comm->nhosts != 1)
    return 0;
#ifdef SHARC_HAVE_CUDA
  return !dc_declined(call->comm);
#else
  return 0;
#endif
}

static sharc_status_t direct_check_env(const char *fn) {
  return gpu_check_queues(fn, "direct");
}

#ifdef SHARC_HAVE_CUDA

/* ---- the path ----------------------------------------------------------- */

/* Peers' allocations mapped for calls read in place, held until the CUDA
 * stream has passed the event recorded after the last of them (ev NULL:
 * until the next synchronize). */
typedef struct held {
  struct held *next;
  cudaEvent_t ev;
  map_slot_t **maps;
  int nmaps;
} held_t;

/* A CUDA stream's state of this path: the device comms its calls used since
 * its last synchronize (each holding a reference), whose failures that
 * synchronize returns, and the mappings its calls in place hold. */
typedef struct {
  devcomm_t **used;
  int nused, cap;
  held_t *held;
  int mapped; /* since the last synchronize: trim the cache there */
} direct_ctx_t;

static void held_free(held_t *h) {
  for (int i = 0; i < h->nmaps; i++)
    ipc_map_put(h->maps[i]);
  if (h->ev)
    (void)cudaEventDestroy(h->ev);
  free(h->maps);
  free(h);
}

/* Puts back the mappings of the calls the CUDA stream has passed (all:
 * every one, the stream is idle: it is closing). A call another thread
 * queued after a synchronize's event may still run: only its event tells.
 * An event that fails (the context's sticky error) counts as passed: the
 * device runs nothing more. ds->lock held. */
static void held_release_locked(direct_ctx_t *ctx, int all) {
  held_t **pp = &ctx->held;
  while (*pp) {
    held_t *h = *pp;
    int passed = all;
    if (!passed) {
      cudaError_t e = cudaEventQuery(h->ev);
      passed = e != cudaErrorNotReady;
      if (e != cudaSuccess && e != cudaErrorNotReady)
        (void)cudaGetLastError();
    }
    if (passed) {
      *pp = h->next;
      held_free(h);
    } else {
      pp = &h->next;
    }
  }
}

/* The mappings of a call just queued in place on ds->cs, held until the
 * stream passes it (an event recorded after it; without one, this waits
 * for the stream). ip's held ones move here. */
static void held_add(dev_stream_t *ds, dq_inplace_t *ip) {
  held_t *h = calloc(1, sizeof *h);
  if (h) {
    h->maps = ip->held;
    h->nmaps = ip->nheld;
    ip->held = NULL;
    ip->nheld = 0;
    if (cudaEventCreateWithFlags(&h->ev, cudaEventDisableTiming) !=
            cudaSuccess ||
        cudaEventRecord(h->ev, ds->cs) != cudaSuccess) {
      (void)cudaGetLastError();
      if (h->ev)
        (void)cudaEventDestroy(h->ev);
      h->ev = NULL;
    }
  }
  pthread_mutex_lock(&ds->lock);
  direct_ctx_t *ctx = ds->path_state[DIRECT_SLOT]; /* note_use made it */
  if (h && h->ev && ctx) {
    h->next = ctx->held;
    ctx->held = h;
    ctx->mapped = 1;
    pthread_mutex_unlock(&ds->lock);
    return;
  }
  pthread_mutex_unlock(&ds->lock);
  /* no way to tell when the stream passed the call: wait for it */
  (void)cudaStreamSynchronize(ds->cs);
  (void)cudaGetLastError();
  if (h) {
    held_free(h);
  } else {
    for (int i = 0; i < ip->nheld; i++)
      ipc_map_put(ip->held[i]);
    ip->nheld = 0;
  }
}

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
  devcomm_t *dc = dc_of(comm);
  if (!dc) {
    /* the setup in this call's turn: the calls before it set up or
     * declined already */
    CHECK(now(call, NULL));
    dc = dc_of(comm);
  }
  if (!dc && !dc_declined(comm)) {
    int declined = 0;
    sharc_status_t st = dc_setup(ds, call, now, fn, &declined);
    if (st != SHARC_OK && !declined)
      return st;
    dc = dc_of(comm);
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
  /* Large calls: the buffers' handles exchanged in the call's turn; in
   * place where every rank can read its peers' (the same choice on every
   * rank). A refusal here is every rank's: nothing is queued anywhere. */
  dq_inplace_t ip = {0};
  if (di_wants(dc, call)) {
    pthread_mutex_lock(&ds->lock);
    direct_ctx_t *ctx = ds->path_state[DIRECT_SLOT];
    if (ctx) {
      held_release_locked(ctx, 0);
      ctx->mapped = 1; /* the exchange may map, also when it declines */
    }
    pthread_mutex_unlock(&ds->lock);
    if ((st = di_prepare(dc, call, now, fn, &ip)) != SHARC_OK)
      return st;
  }
  const char *what = NULL;
  pthread_mutex_lock(&dc->lock);
  int err = dq_call(dc, ds->cs, call, ip.send ? &ip : NULL, &what);
  atomic_store(&dc->issued, dc->step);
  pthread_mutex_unlock(&dc->lock);
  wd_kick();
  if (ip.send) {
    held_add(ds, &ip);
    di_clear(&ip);
  }
  if (!err)
    return SHARC_OK;
  /* The peers wait for steps this rank did not queue: fail the comm, which
   * releases every rank's waits. */
  st = comm_error(comm, SHARC_ERR_CUDA,
                  "%s on a CUDA stream (direct path): %s failed (error %d)", fn,
                  what, err);
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
  int mapped = ctx && ctx->mapped;
  if (ctx) {
    ctx->used = NULL;
    ctx->nused = ctx->cap = 0;
    held_release_locked(ctx, 0);
    ctx->mapped = 0;
  }
  pthread_mutex_unlock(&ds->lock);
  if (mapped) /* unregistered peers' allocations: mapped again next time */
    ipc_map_trim();
  sharc_status_t st = SHARC_OK;
  for (int i = 0; i < nused; i++) {
    devcomm_t *dc = used[i];
    if (st == SHARC_OK && atomic_load(&dc->failed)) {
      /* the comm's last error too, as a failed host collective records */
      dc_record(dc);
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
  held_release_locked(ctx, 1);
  free(ctx->used);
  free(ctx);
  ds->path_state[DIRECT_SLOT] = NULL;
}

const gpu_path_t gpu_path_direct = {
    .call = {.name = "direct"},
    .no_capture = "its flags carry step numbers fixed as each call is "
                  "enqueued, which a replayed graph would reuse",
    .takes = direct_takes,
    .check_env = direct_check_env,
    .stage = direct_stage,
    .synced = direct_synced,
    .close = direct_close,
};

#else /* !SHARC_HAVE_CUDA */

/* Takes nothing: dev_have_cuda() is 0. */
const gpu_path_t gpu_path_direct = {
    .call = {.name = "direct"},
    .no_capture = "its flags carry step numbers fixed as each call is "
                  "enqueued, which a replayed graph would reuse",
    .takes = direct_takes,
    .check_env = direct_check_env};

#endif /* SHARC_HAVE_CUDA */

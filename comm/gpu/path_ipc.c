/*
 * path_ipc.c - the ipc GPU path (SHARC_CUDA_PATH=ipc): collectives on
 * device memory between the GPU ranks of one host through CUDA IPC
 * (docs/design.md, decision 8): zero copy, the data moved by copy engines
 * (cudaMemcpyAsync on IPC-mapped pointers) and the reductions by
 * kernel_dev_reduce, no kernel waiting for another process.
 *
 * Takes a call when SHARC_CUDA_PATH=ipc, all ranks are on one host and the
 * call is not a barrier: the CUDA stream gets the event E_k and the release
 * wait (gs_mark) but no copies, and the worker, in the call's turn, runs
 * ipc_run:
 *
 *   1. all-gather of one descriptor per rank (IPC handle and offset of its
 *      send and receive buffers, or why they cannot be shared), over the
 *      host transport: after it every rank's stream has reached the call;
 *   2. each rank maps its peers' buffers (cached per allocation) and pulls
 *      what it needs on an internal CUDA stream: all-gather and broadcast
 *      copy, reduce-scatter reduces its own block from every rank's send
 *      buffer, all-reduce does that for its block, agrees, then gathers the
 *      other blocks from their owners' receive buffers;
 *   3. the worker sleeps until the internal stream is done, then the ranks
 *      agree on the outcome (an all-gather of one status each), so a rank
 *      whose copies failed fails the call on every rank alike and nobody
 *      reuses a buffer a peer may still read; then the usual release.
 *
 * A buffer in host memory, or device memory the legacy IPC API cannot share
 * (cudaMallocAsync pools, cuMemCreate), fails the call on every rank with
 * SHARC_ERR_INVALID_ARG naming the rank and the buffer.
 *
 * A send/recv batch (SCHED_P2P) involves only its peers, pair by pair
 * (ipc_run_p2p, below): a header, then the list of transfers (IPC handle
 * and offset of each send buffer), then, after each receiver pulled its
 * data from the sender's buffer on the internal stream and waited for it,
 * one status each way; so a sender's CUDA stream is released only after its
 * buffers were read, and both ranks of a pair fail alike.
 *
 *
 * Ordering and safety, per call k on rank r:
 *  - r's CUDA stream reached k (event E_k, the binding's before) before r sends
 * its descriptor, so when the descriptor all-gather completes every rank's send
 * data is final and nothing of the user's later work runs on their buffers
 * (each CUDA stream waits for its release);
 *  - r reads peers' buffers only in regions their owners do not write in
 *    the same phase (reduce-scatter: r writes its own block, reads block r
 *    of the others; all-gather: r writes the blocks of the others, reads
 *    block p of p; all-reduce in place: the same two phases, with an
 *    agreement between them);
 *  - the last agreement comes after every rank's internal stream finished,
 *    so no rank releases its CUDA stream (and with it lets the user reuse
 *    the buffers) while a peer may still read them.
 * Reductions fold in a fixed order starting with the rank's own block
 * (in place the destination is that block, so it is read before written).
 */
#include "gpu_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devptr.h"
#include "ipc_map.h"
#include "path_ipc_p2p.h"

/* This path's index in dev_stream_t.path_state (gpu_paths). */
#define IPC_SLOT 1

/* SHARC_CUDA_PATH=ipc, all of comm's ranks on one host, one of the four
 * collectives it implements or a send/recv batch (the others take the
 * staged path). */
static int ipc_takes(const coll_call_t *call) {
  return (call->coll == SCHED_ALL_GATHER ||
          call->coll == SCHED_REDUCE_SCATTER ||
          call->coll == SCHED_ALL_REDUCE || call->coll == SCHED_BROADCAST ||
          call->coll == SCHED_P2P) &&
         dev_have_cuda() && call->comm->nhosts == 1 && gpu_path_chosen("ipc");
}

/* The IPC path's copies run on an internal stream while the caller's
 * stream waits. */
static sharc_status_t ipc_check_env(const char *fn) {
  return gpu_check_queues(fn, "ipc");
}

#ifdef SHARC_HAVE_CUDA

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "device.h" /* kernels/ */

/* gpu_path_t.synced: a CUDA stream that took this path is idle, so the
 * mappings no call holds may close (ipc_map_trim). */
static sharc_status_t ipc_trim(dev_stream_t *ds) {
  if (ds->path_state[IPC_SLOT]) /* a call of ds took the path */
    ipc_map_trim();
  return SHARC_OK;
}

/* ---- one call ------------------------------------------------------------
 */

typedef struct {
  coll_call_t *call;
  call_host_fn host; /* the host collectives of the call's turn */
  int rank, n, device;
  size_t esize, cb;     /* element size; bytes of one rank's block */
  ipc_desc_t *all;      /* [n] */
  int32_t *status;      /* [n] agree() */
  const uint8_t **send; /* [n] each rank's send buffer, mapped here */
  uint8_t **recv;       /* [n] */
  map_slot_t **held;    /* [2n] mappings this call holds */
  int nheld;
  cudaStream_t cs;
  cudaEvent_t ev;
  char msg[320]; /* this rank's local failure */
} ipc_call_t;

/* A host collective of comm (in the current turn) on host buffers. A local
 * failure here (the peers go on waiting in it) breaks the communicator, as
 * a failed step of any collective does. */
static sharc_status_t host_coll(ipc_call_t *c, sched_coll_t coll,
                                const void *send, void *recv, size_t count) {
  struct sharc_comm *comm = c->call->comm;
  coll_call_t h = {.coll = coll,
                   .sendbuf = send,
                   .recvbuf = recv,
                   .count = count,
                   .dtype = SHARC_U8,
                   .op = SHARC_SUM,
                   .comm = comm};
  sharc_status_t st = c->host(&h, NULL, NULL);
  if (st != SHARC_OK && !atomic_load(&comm->unusable))
    comm_fail(comm, comm->rank, st, sharc_comm_last_error(comm));
  return st;
}

/* Every rank's status after a phase: the first failed rank's status, with
 * a message naming it, or SHARC_OK. mine: this rank's (message in c->msg),
 * logged here whatever the others did. */
static sharc_status_t agree(ipc_call_t *c, sharc_status_t mine,
                            const char *phase) {
  const char *fn = sched_coll_fn(c->call->coll);
  if (mine != SHARC_OK)
    WARN(SUB_CUDA, "%s (CUDA IPC, %s): rank %d: %s", fn, phase, c->rank,
         c->msg);
  int32_t me = (int32_t)mine;
  sharc_status_t st = host_coll(c, SCHED_ALL_GATHER, &me, c->status, sizeof me);
  for (int r = 0; st == SHARC_OK && r < c->n; r++) {
    if (c->status[r] == SHARC_OK)
      continue;
    st = (sharc_status_t)c->status[r];
    if (r == c->rank)
      comm_error(c->call->comm, st, "%s (CUDA IPC, %s): %s", fn, phase, c->msg);
    else
      comm_error(c->call->comm, st,
                 "%s (CUDA IPC, %s): rank %d failed (its log says why)", fn,
                 phase, r);
  }
  return st;
}

static sharc_status_t local_fail(ipc_call_t *c, cudaError_t e,
                                 const char *what) {
  (void)cudaGetLastError();
  snprintf(c->msg, sizeof c->msg, "%s: %s: %s", what, cudaGetErrorName(e),
           cudaGetErrorString(e));
  return SHARC_ERR_CUDA;
}

/* Why rank r's descriptor cannot take part, or NULL. */
static const char *refusal(const ipc_call_t *c, int r, const char **buf) {
  static const char *const name[NBUF] = {"sendbuf", "recvbuf"};
  for (int b = 0; b < NBUF; b++) {
    *buf = name[b];
    switch (c->all[r].buf[b].state) {
    case BS_HOST:
      return "is host memory";
    case BS_MANAGED:
      return "is managed memory, which CUDA IPC cannot share";
    case BS_NOSHARE:
      return "cannot be shared through CUDA IPC (cudaIpcGetMemHandle or "
             "cuMemGetAddressRange refused it: cudaMallocAsync pools and "
             "cuMemCreate memory cannot be)";
    default:
      break;
    }
  }
  return NULL;
}

/* Descriptors: share, exchange, check. Every rank sees the same
 * descriptors, so every rank takes the same decision. */
static sharc_status_t exchange(ipc_call_t *c) {
  coll_call_t *call = c->call;
  ipc_desc_t mine;
  memset(&mine, 0, sizeof mine);
  /* the epoch first: a deregistration after it shows in the next call */
  mine.epoch = mem_dev_epoch();
  const void *bufs[NBUF] = {call->sendbuf, call->recvbuf};
  size_t all = c->cb * (size_t)c->n;
  size_t len[NBUF] = {call->coll == SCHED_REDUCE_SCATTER ? all : c->cb,
                      call->coll == SCHED_ALL_GATHER ? all : c->cb};
  for (int b = 0; b < NBUF; b++) {
    int used = !(b == BUF_SEND && call->coll == SCHED_BROADCAST &&
                 c->rank != call->root);
    if (used)
      ipc_share(bufs[b], len[b], ipc_peers_read(call, b, c->rank),
                &mine.buf[b]);
  }
  mine.sig = ipc_signature(call);
  mine.pid = (int64_t)getpid();
  mine.nonce = gs_process_nonce();
  CHECK(host_coll(c, SCHED_ALL_GATHER, &mine, c->all, sizeof mine));
  const char *fn = sched_coll_fn(call->coll);
  for (int r = 0; r < c->n; r++) {
    if (memcmp(&c->all[r].sig, &mine.sig, sizeof mine.sig))
      return comm_error(
          call->comm, SHARC_ERR_MISMATCH,
          "%s on a CUDA stream (CUDA IPC): rank %d called %s with count %llu, "
          "dtype %d, op %d, root %d; this rank: %s, count %zu, dtype %d, op "
          "%d, root %d",
          fn, r, sched_coll_fn((uint32_t)c->all[r].sig.coll % SCHED_COLL_COUNT),
          (unsigned long long)c->all[r].sig.count, c->all[r].sig.dtype,
          c->all[r].sig.op, c->all[r].sig.root, fn, call->count,
          (int)call->dtype, mine.sig.op, mine.sig.root);
    const char *buf = NULL, *why = refusal(c, r, &buf);
    if (why)
      return comm_error(call->comm, SHARC_ERR_INVALID_ARG,
                        "%s on a CUDA stream with SHARC_CUDA_PATH=ipc: rank "
                        "%d's %s %s; pass cudaMalloc memory on every rank, "
                        "or use SHARC_CUDA_PATH=staged",
                        fn, r, buf, why);
  }
  return SHARC_OK;
}

/* Maps the peers' shared buffers (local failures reported by the next
 * agree). */
static sharc_status_t map_peers(ipc_call_t *c) {
  coll_call_t *call = c->call;
  pid_t self = getpid();
  for (int r = 0; r < c->n; r++) /* owners that deregistered since */
    if (r != c->rank)
      ipc_map_expire(&c->all[r]);
  for (int r = 0; r < c->n; r++) {
    c->send[r] = r == c->rank ? call->sendbuf : NULL;
    c->recv[r] = r == c->rank ? call->recvbuf : NULL;
    for (int b = 0; b < NBUF && r != c->rank; b++) {
      const ipc_buf_t *d = &c->all[r].buf[b];
      if (d->state != BS_OK)
        continue;
      uint8_t *p;
      const ipc_desc_t *o = &c->all[r];
      if (o->pid == (int64_t)self && o->nonce == gs_process_nonce()) {
        /* a rank of this process */
        p = (uint8_t *)(uintptr_t)(d->base + d->off);
      } else {
        char why[256] = "";
        map_slot_t *m =
            ipc_map_get(&d->handle, c->device, d->reg, o, why, sizeof why);
        if (!m) {
          snprintf(c->msg, sizeof c->msg, "mapping rank %d's %s: %s", r,
                   b == BUF_SEND ? "sendbuf" : "recvbuf", why);
          return SHARC_ERR_CUDA;
        }
        c->held[c->nheld++] = m;
        p = (uint8_t *)m->ptr + d->off;
      }
      if (b == BUF_SEND)
        c->send[r] = p;
      else
        c->recv[r] = p;
    }
  }
  return SHARC_OK;
}

/* Block of rank p in an all-reduce of count elements: [*off, *off + *len). */
static void ar_block(size_t count, int n, int p, size_t *off, size_t *len) {
  size_t q = count / (size_t)n, rem = count % (size_t)n;
  *off = (size_t)p * q + ((size_t)p < rem ? (size_t)p : rem);
  *len = q + ((size_t)p < rem);
}

/* dst = OP over every rank of (send[p] + at), len elements, starting with
 * this rank's own; then the AVG division. */
static cudaError_t reduce_block(ipc_call_t *c, void *dst, size_t at,
                                size_t len) {
  coll_call_t *call = c->call;
  size_t at_b = at * c->esize;
  const uint8_t *own = c->send[c->rank] + at_b;
  int e = 0;
  if (c->n == 1)
    return (cudaError_t)kernel_dev_copy(dst, own, len * c->esize, c->cs);
  /* one kernel reads every rank's buffer (f16/bf16 accumulate in f32) */
  const void *stack[64] = {0};
  const void **srcs = c->n <= 64 ? stack : malloc((size_t)c->n * sizeof *srcs);
  if (!srcs)
    return cudaErrorMemoryAllocation;
  for (int i = 0; i < c->n; i++)
    srcs[i] = c->send[(c->rank + i) % c->n] + at_b;
  e = kernel_dev_reduce_n(call->dtype, call->op, dst, srcs, c->n, len, c->cs);
  if (srcs != stack)
    free(srcs);
  return (cudaError_t)e;
}

/* Waits (sleeping) for everything queued on the internal stream, also
 * after a failed queueing: nothing of this call may run after the ranks
 * agreed. Returns the first error (queueing, then running). */
static sharc_status_t finish(ipc_call_t *c, cudaError_t queued,
                             const char *what) {
  cudaError_t e = cudaEventRecord(c->ev, c->cs);
  if (e == cudaSuccess)
    e = cudaEventSynchronize(c->ev);
  else /* no event: wait for the stream itself */
    e = cudaStreamSynchronize(c->cs);
  if (queued != cudaSuccess)
    e = queued;
  return e == cudaSuccess ? SHARC_OK : local_fail(c, e, what);
}

/* Phase 1 of call: everything but all-reduce's gather. */
static sharc_status_t phase_one(ipc_call_t *c) {
  coll_call_t *call = c->call;
  uint8_t *recv = call->recvbuf;
  cudaError_t e = cudaSuccess;
  switch (call->coll) {
  case SCHED_ALL_GATHER:
    for (int p = 0; p < c->n && e == cudaSuccess; p++)
      e = (cudaError_t)kernel_dev_copy(recv + (size_t)p * c->cb, c->send[p],
                                       c->cb, c->cs);
    break;
  case SCHED_BROADCAST:
    e = (cudaError_t)kernel_dev_copy(recv, c->send[call->root], c->cb, c->cs);
    break;
  case SCHED_REDUCE_SCATTER:
    e = reduce_block(c, recv, (size_t)c->rank * call->count, call->count);
    break;
  case SCHED_ALL_REDUCE: {
    size_t off, len;
    ar_block(call->count, c->n, c->rank, &off, &len);
    e = reduce_block(c, recv + off * c->esize, off, len);
    break;
  }
  default:
    break;
  }
  return finish(c, e, "the copies and reductions");
}

/* All-reduce, phase 2: the other ranks' reduced blocks from their owners. */
static sharc_status_t phase_two(ipc_call_t *c) {
  coll_call_t *call = c->call;
  uint8_t *recv = call->recvbuf;
  cudaError_t e = cudaSuccess;
  for (int p = 0; p < c->n && e == cudaSuccess; p++) {
    size_t off, len;
    ar_block(call->count, c->n, p, &off, &len);
    if (p != c->rank)
      e = (cudaError_t)kernel_dev_copy(recv + off * c->esize,
                                       c->recv[p] + off * c->esize,
                                       len * c->esize, c->cs);
  }
  return finish(c, e, "gathering the reduced blocks");
}

/* The worker, in call's turn (call_path_t.run): the CUDA stream has reached
 * the call (E_k); host runs the descriptor exchange and the agreements
 * without recorder entries of their own, so the flight recorder shows the
 * user's call and the rank its steps wait on. */
static sharc_status_t ipc_run(coll_call_t *call, call_host_fn host) {
  struct sharc_comm *comm = call->comm;
  ipc_call_t c = {.call = call,
                  .host = host,
                  .rank = comm->rank,
                  .n = comm->nranks,
                  .esize = sharc_dtype_size(call->dtype)};
  c.cb = call->count * c.esize;
  const ipc_ctx_t *ctx = call->path_arg;
  c.device = ctx->device;
  c.cs = ctx->cs;
  c.ev = ctx->ev;
  /* The worker's device, whatever a host function on the stream set. */
  if (cudaSetDevice(c.device) != cudaSuccess)
    (void)cudaGetLastError();
  if (call->coll == SCHED_P2P)
    return ipc_run_p2p(call, ctx);
  size_t n = (size_t)c.n;
  c.all = calloc(n, sizeof *c.all);
  c.status = calloc(n, sizeof *c.status);
  c.send = calloc(n, sizeof *c.send);
  c.recv = calloc(n, sizeof *c.recv);
  c.held = calloc(2 * n, sizeof *c.held);
  sharc_status_t st;
  if (!c.all || !c.status || !c.send || !c.recv || !c.held) {
    /* The peers wait for this rank in the exchange: break the
     * communicator, as any local failure inside a collective does. */
    st = comm_error(comm, SHARC_ERR_NO_MEM, "%s: out of memory (CUDA IPC)",
                    sched_coll_fn(call->coll));
    comm_fail(comm, comm->rank, st, sharc_comm_last_error(comm));
    goto out;
  }
  st = exchange(&c);
  if (st == SHARC_OK) {
    sharc_status_t mine = map_peers(&c);
    if (mine == SHARC_OK)
      mine = phase_one(&c);
    st = agree(&c, mine, "copies and reductions");
  }
  if (st == SHARC_OK && call->coll == SCHED_ALL_REDUCE)
    st = agree(&c, phase_two(&c), "gathering the reduced blocks");
  TRACE(SUB_CUDA, "%s: %zu x %s through CUDA IPC: %s",
        sched_coll_fn(call->coll), call->count, sharc_dtype_name(call->dtype),
        sharc_status_name(st));
out:
  for (int i = 0; i < c.nheld; i++)
    ipc_map_put(c.held[i]);
  free(c.all);
  free(c.status);
  free(c.send);
  free(c.recv);
  free(c.held);
  return st;
}

/* The enqueueing thread (gpu_path_t.stage): the call's own buffers, nothing
 * copied; the CUDA stream marks the call and waits for its release. */
static sharc_status_t ipc_stage(dev_stream_t *ds, coll_call_t *call,
                                dev_work_t *w, const char *fn,
                                call_now_fn now) {
  (void)now;
  ipc_ctx_t *ctx = ds->path_state[IPC_SLOT];
  if (!ctx) {
    if (!(ctx = calloc(1, sizeof *ctx)))
      return err_set(SHARC_ERR_NO_MEM, "%s on a CUDA stream: out of memory",
                     fn);
    ctx->device = ds->device;
    cudaError_t e = cudaStreamCreateWithFlags(&ctx->cs, cudaStreamNonBlocking);
    if (e == cudaSuccess)
      e = cudaEventCreateWithFlags(&ctx->ev, cudaEventBlockingSync |
                                                 cudaEventDisableTiming);
    if (e != cudaSuccess) {
      if (ctx->cs)
        (void)cudaStreamDestroy(ctx->cs);
      free(ctx);
      return gs_cuda_fail(e, fn, "the CUDA IPC path's stream");
    }
    ds->path_state[IPC_SLOT] = ctx;
  }
  CHECK(gs_mark(ds, w, fn));
  call->path = &gpu_path_ipc.call;
  call->path_arg = ctx;
  return SHARC_OK;
}

static void ipc_close(dev_stream_t *ds) {
  ipc_ctx_t *ctx = ds->path_state[IPC_SLOT];
  if (!ctx)
    return;
  (void)cudaEventDestroy(ctx->ev);
  (void)cudaStreamDestroy(ctx->cs);
  (void)cudaGetLastError();
  free(ctx);
  ds->path_state[IPC_SLOT] = NULL;
}

const gpu_path_t gpu_path_ipc = {
    .call = {.name = "ipc", .run = ipc_run},
    .no_capture =
        "a host thread exchanges the buffers and orchestrates each call",
    .takes = ipc_takes,
    .check_env = ipc_check_env,
    .stage = ipc_stage,
    .synced = ipc_trim,
    .close = ipc_close,
};

#else /* !SHARC_HAVE_CUDA */

/* Takes nothing: dev_have_cuda() is 0. */
const gpu_path_t gpu_path_ipc = {
    .call = {.name = "ipc"},
    .no_capture =
        "a host thread exchanges the buffers and orchestrates each call",
    .takes = ipc_takes,
    .check_env = ipc_check_env};

#endif /* SHARC_HAVE_CUDA */

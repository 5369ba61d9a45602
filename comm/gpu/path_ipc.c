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

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devptr.h"
#include "exec.h"

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

/* ---- descriptors -------------------------------------------------------- */

enum { BUF_SEND, BUF_RECV, NBUF };

/* One buffer as its owner shares it. */
typedef struct {
  cudaIpcMemHandle_t handle; /* of the allocation holding the buffer */
  uint64_t base;             /* the allocation's address in the owner */
  uint64_t off;              /* the buffer's offset in it */
  int32_t state;             /* BS_* */
  int32_t reg;               /* registered: peers keep the mapping */
} ipc_buf_t;

enum {
  BS_UNUSED = 0, /* the call does not use it (broadcast's sendbuf off root) */
  BS_OK,         /* device memory, shared (peers read it) */
  BS_LOCAL,      /* device memory only this rank touches */
  BS_HOST,       /* host memory */
  BS_MANAGED,    /* managed memory: not shareable through CUDA IPC */
  BS_NOSHARE     /* device memory cudaIpcGetMemHandle refused */
};

/* What every rank must agree on, beside the buffers: a mismatch here would
 * make a rank read past a peer's allocation. */
typedef struct {
  int32_t coll, dtype, op, root;
  uint64_t count;
} ipc_sig_t;

typedef struct {
  ipc_buf_t buf[NBUF];
  ipc_sig_t sig;
  int64_t pid;    /* with nonce, the owner process (a rank of this */
  uint64_t nonce; /* process is reached without CUDA IPC) */
  uint64_t epoch; /* the owner's mem_dev_epoch: its deregistrations */
} ipc_desc_t;

typedef CUresult (*get_range_fn)(CUdeviceptr *base, size_t *size,
                                 CUdeviceptr dptr);
typedef CUresult (*get_attr_fn)(void *data, CUpointer_attribute attribute,
                                CUdeviceptr ptr);

/* cuMemGetAddressRange through the runtime (nothing links libcuda). */
static get_range_fn find_get_range(void) {
  static _Atomic(get_range_fn) fn;
  get_range_fn f = atomic_load(&fn);
  if (!f) {
    char why[128];
    f = (get_range_fn)dev_driver_entry("cuMemGetAddressRange",
                                       cudaEnableDefault, why, sizeof why);
    atomic_store(&fn, f);
  }
  return f;
}

/* The allocation id of device pointer p (CU_POINTER_ATTRIBUTE_BUFFER_ID),
 * or 0 when the driver cannot tell. */
static uint64_t buffer_id(const void *p) {
  static _Atomic(get_attr_fn) fn;
  get_attr_fn f = atomic_load(&fn);
  if (!f) {
    char why[128];
    f = (get_attr_fn)dev_driver_entry("cuPointerGetAttribute",
                                      cudaEnableDefault, why, sizeof why);
    atomic_store(&fn, f);
  }
  unsigned long long id = 0;
  if (!f || f(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)p) !=
                CUDA_SUCCESS)
    return 0;
  return id;
}

/* Fills b for buffer p (len bytes) of this rank; shared: peers read it. */
static void share(const void *p, size_t len, int shared, ipc_buf_t *b) {
  memset(b, 0, sizeof *b);
  mem_dev_t reg;
  /* Registered: CUDA was asked then; one cheap query says the allocation
   * is still the one registered (freed without sharc_mem_deregister, a new
   * one may sit at the same address). */
  if (p && mem_find_device(p, len, &reg)) {
    if (reg.buffer_id && buffer_id(p) == reg.buffer_id) {
      b->state = shared ? BS_OK : BS_LOCAL;
      memcpy(&b->handle, reg.handle, sizeof b->handle);
      b->base = reg.base;
      b->off = (uint64_t)((uintptr_t)p - (uintptr_t)reg.base);
      b->reg = 1;
      return;
    }
    WARN(SUB_CUDA,
         "CUDA IPC: device buffer %p is in a registered region whose "
         "allocation was freed (or cannot be checked); treating it as "
         "unregistered: call sharc_mem_deregister before cudaFree",
         p);
  }
  struct cudaPointerAttributes a;
  if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess ||
      (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)) {
    (void)cudaGetLastError();
    b->state = BS_HOST;
    return;
  }
  if (a.type == cudaMemoryTypeManaged) {
    b->state = BS_MANAGED;
    return;
  }
  if (!shared) {
    b->state = BS_LOCAL;
    return;
  }
  get_range_fn range = find_get_range();
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!range ||
      range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS ||
      cudaIpcGetMemHandle(&b->handle, (void *)(uintptr_t)base) != cudaSuccess) {
    (void)cudaGetLastError();
    b->state = BS_NOSHARE;
    return;
  }
  b->base = (uint64_t)base;
  b->off = (uint64_t)((uintptr_t)p - (uintptr_t)base);
  b->state = BS_OK;
}

sharc_status_t gpu_mem_describe(const void *p, size_t bytes, mem_dev_t *out) {
  static const char fn[] = "sharc_mem_register";
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return err_set(SHARC_ERR_INVALID_ARG, "%s: CUDA does not know %p", fn, p);
  }
  if (a.type == cudaMemoryTypeManaged)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%s: %p is managed memory, which CUDA IPC cannot share; "
                   "register cudaMalloc memory (managed memory works "
                   "unregistered on the staged path)",
                   fn, p);
  get_range_fn range = find_get_range();
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!range || range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
    return err_set(SHARC_ERR_CUDA,
                   "%s: cuMemGetAddressRange cannot find the allocation of "
                   "device pointer %p",
                   fn, p);
  size_t off = (size_t)((uintptr_t)p - (uintptr_t)base);
  if (bytes > size - off)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%s: [%p, +%zu) runs %zu bytes past the end of its "
                   "allocation (%p, %zu bytes); register within one "
                   "cudaMalloc allocation",
                   fn, p, bytes, bytes - (size - off), (void *)(uintptr_t)base,
                   size);
  cudaIpcMemHandle_t h;
  cudaError_t e = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%s: %p cannot be shared through CUDA IPC "
                   "(cudaIpcGetMemHandle: %s; cudaMallocAsync pools and "
                   "cuMemCreate memory cannot be): leave it unregistered",
                   fn, p, cudaGetErrorName(e));
  }
  out->device = a.device;
  out->base = (uint64_t)base;
  out->buffer_id = buffer_id((void *)(uintptr_t)base);
  memcpy(out->handle, &h, sizeof h);
  return SHARC_OK;
}

/* ---- mappings of peers' allocations (process-wide) ----------------------
 * cudaIpcOpenMemHandle maps an allocation once per process; the cache keeps
 * the mapping for the later calls on the same buffers. A call holds the
 * slots it uses (inuse) until its copies finished. Mappings are closed only
 * by ipc_trim, from sharc_stream_synchronize, never inside a call:
 * cudaIpcCloseMemHandle may synchronize the device, and inside a call this
 * rank's CUDA stream waits for the worker doing it. A peer that frees a
 * buffer and allocates another gets a new handle, so a mapping is never
 * reused for different memory; its old mapping keeps the freed memory
 * until the next trim. Buffers their owner registered (sharc_mem_register)
 * are kept (slot.keep) across trims until a descriptor from that
 * owner carries a later deregistration epoch: then they close at the next
 * trim like the others. */

#define MAP_SLOTS 256

typedef struct {
  cudaIpcMemHandle_t handle;
  int device;
  int inuse;
  void *ptr;      /* NULL: empty */
  int keep;       /* registered by its owner: not closed by ipc_trim */
  int64_t owner;  /* the owner (pid, nonce), and its mem_dev_epoch when */
  uint64_t nonce; /* seen registered (a later epoch ends keep) */
  uint64_t epoch;
  uint64_t used; /* the cache clock at the last map_get */
} map_slot_t;

/* Kept mappings at most: past that, the trim closes the least recently
 * used, so registrations never fill the table. */
#define MAP_KEEP_MAX (MAP_SLOTS / 2)

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(((mem_dev_t *)0)->handle),
               "mem_dev_t.handle holds a cudaIpcMemHandle_t");

static struct {
  pthread_mutex_t lock;
  map_slot_t slot[MAP_SLOTS];
  uint64_t clock;
} maps = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The owner o deregistered device memory since its kept mappings were
 * seen: they become ordinary ones (closed by the next trim), as a region
 * deregistered may be freed. */
static void map_expire(const ipc_desc_t *o) {
  pthread_mutex_lock(&maps.lock);
  for (int i = 0; i < MAP_SLOTS; i++) {
    map_slot_t *s = &maps.slot[i];
    if (s->ptr && s->keep && s->owner == o->pid && s->nonce == o->nonce &&
        s->epoch < o->epoch)
      s->keep = 0;
  }
  pthread_mutex_unlock(&maps.lock);
}

/* The local address of a peer's allocation, held until map_put; NULL with
 * the reason in why. keep: the owner (pid, at epoch) registered it. */
static map_slot_t *map_get(const cudaIpcMemHandle_t *h, int device, int keep,
                           const ipc_desc_t *owner, char *why, size_t n) {
  pthread_mutex_lock(&maps.lock);
  map_slot_t *hit = NULL, *empty = NULL;
  for (int i = 0; i < MAP_SLOTS && !hit; i++) {
    map_slot_t *s = &maps.slot[i];
    if (s->ptr && s->device == device && !memcmp(&s->handle, h, sizeof *h))
      hit = s;
    else if (!s->ptr && !empty)
      empty = s;
  }
  if (!hit && !empty)
    snprintf(why, n,
             "%d peer allocations mapped (registered ones until their owner "
             "deregisters, the others until the next "
             "sharc_stream_synchronize); synchronize more often or register "
             "fewer buffers",
             MAP_SLOTS);
  if (!hit && empty) {
    void *ptr = NULL;
    cudaError_t e =
        cudaIpcOpenMemHandle(&ptr, *h, cudaIpcMemLazyEnablePeerAccess);
    if (e == cudaSuccess) {
      empty->handle = *h;
      empty->device = device;
      empty->ptr = ptr;
      hit = empty;
      TRACE(SUB_CUDA, "CUDA IPC: mapped a peer allocation (%s)",
            keep ? "registered: kept until its owner deregisters"
                 : "until the next synchronize");
    } else {
      (void)cudaGetLastError();
      snprintf(why, n,
               "cudaIpcOpenMemHandle: %s: %s (ranks in separate containers "
               "or without peer access cannot share device memory; "
               "SHARC_CUDA_PATH=staged works there)",
               cudaGetErrorName(e), cudaGetErrorString(e));
    }
  }
  if (hit) {
    hit->inuse++;
    hit->used = ++maps.clock;
    if (keep) {
      hit->keep = 1;
      hit->owner = owner->pid;
      hit->nonce = owner->nonce;
      hit->epoch = owner->epoch;
    }
  }
  pthread_mutex_unlock(&maps.lock);
  return hit;
}

static void map_put(map_slot_t *s) {
  pthread_mutex_lock(&maps.lock);
  s->inuse--;
  pthread_mutex_unlock(&maps.lock);
}

/* Closes the mappings of peers' buffers no call is using (process-wide),
 * when a CUDA stream that took this path is idle (gpu_path_t.synced),
 * never inside a call. Mappings of buffers their owners registered
 * (sharc_mem_register) stay until the owner has deregistered device memory
 * since. */
static sharc_status_t ipc_trim(dev_stream_t *ds) {
  if (!ds->path_state[IPC_SLOT]) /* no call of ds took the path */
    return SHARC_OK;
  pthread_mutex_lock(&maps.lock);
  /* Past MAP_KEEP_MAX kept mappings, the least recently used idle ones
   * close too (their owners may be gone for good). */
  for (;;) {
    int kept = 0;
    map_slot_t *oldest = NULL;
    for (int i = 0; i < MAP_SLOTS; i++) {
      map_slot_t *s = &maps.slot[i];
      if (!s->ptr || !s->keep)
        continue;
      kept++;
      if (!s->inuse && (!oldest || s->used < oldest->used))
        oldest = s;
    }
    if (kept <= MAP_KEEP_MAX || !oldest)
      break;
    oldest->keep = 0;
  }
  for (int i = 0; i < MAP_SLOTS; i++) {
    map_slot_t *s = &maps.slot[i];
    if (s->ptr && !s->inuse && !s->keep) {
      TRACE(SUB_CUDA, "CUDA IPC: closed a peer allocation's mapping");
      int prev = -1;
      if (cudaGetDevice(&prev) == cudaSuccess && prev != s->device)
        (void)cudaSetDevice(s->device);
      (void)cudaIpcCloseMemHandle(s->ptr);
      if (prev >= 0 && prev != s->device)
        (void)cudaSetDevice(prev);
      (void)cudaGetLastError();
      memset(s, 0, sizeof *s);
    }
  }
  pthread_mutex_unlock(&maps.lock);
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

/* Whether peers read buffer b of rank: all-reduce both, broadcast the
 * root's send, all-gather and reduce-scatter the send. */
static int peers_read(const coll_call_t *call, int b, int rank) {
  switch (call->coll) {
  case SCHED_ALL_REDUCE:
    return 1;
  case SCHED_BROADCAST:
    return b == BUF_SEND && rank == call->root;
  default:
    return b == BUF_SEND;
  }
}

static ipc_sig_t signature(const coll_call_t *call) {
  ipc_sig_t g = {.coll = (int32_t)call->coll,
                 .dtype = (int32_t)call->dtype,
                 .op = (int32_t)call->op,
                 .root = call->coll == SCHED_BROADCAST ? call->root : 0,
                 .count = call->count};
  if (call->coll == SCHED_ALL_GATHER || call->coll == SCHED_BROADCAST)
    g.op = 0; /* not read */
  return g;
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
      share(bufs[b], len[b], peers_read(call, b, c->rank), &mine.buf[b]);
  }
  mine.sig = signature(call);
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
      map_expire(&c->all[r]);
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
            map_get(&d->handle, c->device, d->reg, o, why, sizeof why);
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

/* A CUDA stream's state of this path (ds->path_state[IPC_SLOT], made by
 * its first call on the path): the internal CUDA stream the copies and
 * reductions run on and the blocking-sync event the worker waits on. */
typedef struct {
  int device;
  cudaStream_t cs;
  cudaEvent_t ev;
} ipc_ctx_t;

/* ---- send/recv batches ---------------------------------------------------
 * The call layer hands a batch the path marked to call_path_t.run, in the
 * batch's turn, as it does a collective (comm/api/coll.c, run_p2p). Only
 * the batch's peers take part, in three exchanges of small host buffers
 * with each of them (a host send/recv round each, channel 0):
 *
 *   A. a header: how many transfers each way, and who owns the buffers;
 *   B. the lists: this rank's sends to the peer (IPC handle and offset of
 *      each buffer), then its receives, in posting order. Both ranks of a
 *      pair now hold the same two lists and judge them alike: the k-th
 *      send from a to b pairs with b's k-th receive from a; counts of
 *      transfers, their sizes and their memory must agree;
 *   then each receiver maps its senders' allocations (the cache above) and
 *   pulls every transfer with a copy on the internal stream, transfers with
 *   itself are copies too, and the worker sleeps until they are done;
 *   C. one status each way: a sender learns that its buffers were read (or
 *      why not) before its CUDA stream is released.
 *
 * Empty transfers are left out, as on the host; a peer with only empty
 * transfers is no peer of the batch. */

#define P2P_MAGIC 0x50327069u /* "P2pi": the peer runs this protocol */

/* What a rank tells each peer of the batch first (exchange A). */
typedef struct {
  uint32_t magic;
  uint32_t nsend, nrecv; /* transfers with this peer, each way */
  uint32_t pad;
  int64_t pid; /* the owner of the send buffers (as ipc_desc_t) */
  uint64_t nonce;
  uint64_t epoch;
} p2p_head_t;

/* One transfer as its rank describes it to its peer (exchange B). */
typedef struct {
  ipc_buf_t buf; /* a send: shared; a receive: BS_LOCAL or why not */
  int32_t dtype;
  int32_t pad;
  uint64_t count; /* elements */
} p2p_xfer_t;

/* This rank's side of one pair of the batch. */
typedef struct {
  int peer;
  p2p_head_t out, in;     /* A: mine, the peer's */
  size_t *op;             /* [out.nsend + out.nrecv]: my transfers, as listed */
  p2p_xfer_t *mine;       /* [out.nsend + out.nrecv] B */
  p2p_xfer_t *theirs;     /* [in.nsend + in.nrecv] B */
  int joined;             /* the peer answered A with this protocol */
  sharc_status_t verdict; /* from both lists, the same on both ranks */
  int32_t st_out, st_in;  /* C: my pulls from the peer, its pulls from me */
} p2p_pair_t;

typedef struct {
  coll_call_t *call;
  const ipc_ctx_t *ctx;
  int rank;
  p2p_pair_t *pair; /* [npair], in order of first appearance in the batch */
  size_t npair;
  map_slot_t **held; /* mappings held until the copies finished */
  size_t nheld;
  size_t pulled; /* bytes copied */
  char msg[400]; /* the batch's first error */
  sharc_status_t st;
} p2p_run_t;

static const char P2P_FN[] = "sharc_send/sharc_recv";

/* The batch's error: the first one wins the message. */
static void p2p_fail(p2p_run_t *r, sharc_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void p2p_fail(p2p_run_t *r, sharc_status_t st, const char *fmt, ...) {
  if (r->st != SHARC_OK)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->msg, sizeof r->msg, fmt, ap);
  va_end(ap);
  r->st = st;
}

/* Bytes of transfer o. */
static size_t op_bytes(const call_p2p_op_t *o) {
  return o->count * sharc_dtype_size(o->dtype);
}

/* One round with the joined pairs: len_out[p] bytes out[p] to pair p's
 * peer, len_in[p] bytes from it into in[p] (0: none that way). A failure
 * here is the executor's: the communicator failed, the peers were told. */
static sharc_status_t p2p_swap(p2p_run_t *r, void *const *out,
                               const size_t *len_out, void *const *in,
                               const size_t *len_in) {
  size_t np = r->npair;
  void **bufs = malloc((SCHED_BUF_P2P + 2 * np) * sizeof *bufs);
  if (!bufs)
    return comm_error(r->call->comm, SHARC_ERR_NO_MEM,
                      "%s (CUDA IPC): out of memory", P2P_FN);
  sched_t s;
  sched_init(&s);
  s.partial = 1;
  sched_round(&s);
  bufs[SCHED_BUF_SEND] = bufs[SCHED_BUF_RECV] = bufs[SCHED_BUF_TMP] = NULL;
  for (size_t p = 0; p < np; p++) {
    bufs[SCHED_BUF_P2P + 2 * p] = out[p];
    bufs[SCHED_BUF_P2P + 2 * p + 1] = in[p];
    if (len_out[p])
      sched_send(&s, r->pair[p].peer, 0, (sched_buf_t)(SCHED_BUF_P2P + 2 * p),
                 0, len_out[p]);
    if (len_in[p])
      sched_recv(&s, r->pair[p].peer, 0,
                 (sched_buf_t)(SCHED_BUF_P2P + 2 * p + 1), 0, len_in[p]);
  }
  sharc_status_t st = sched_finish(&s);
  if (st == SHARC_OK)
    st = exec_run(r->call->comm, &s, bufs, SHARC_U8, SHARC_SUM);
  else
    st = comm_error(r->call->comm, st, "%s (CUDA IPC): out of memory", P2P_FN);
  sched_free(&s);
  free(bufs);
  return st;
}

/* The pairs of the batch and this rank's lists for them (sends first,
 * then receives, each in posting order). */
static sharc_status_t p2p_lists(p2p_run_t *r) {
  const call_p2p_t *b = r->call->p2p;
  r->pair = calloc(b->n ? b->n : 1, sizeof *r->pair);
  if (!r->pair)
    return SHARC_ERR_NO_MEM;
  for (size_t i = 0; i < b->n; i++) {
    const call_p2p_op_t *o = &b->ops[i];
    if (o->peer == r->rank || !op_bytes(o))
      continue;
    size_t p = 0;
    while (p < r->npair && r->pair[p].peer != o->peer)
      p++;
    if (p == r->npair)
      r->pair[r->npair++].peer = o->peer;
    if (o->send)
      r->pair[p].out.nsend++;
    else
      r->pair[p].out.nrecv++;
  }
  uint64_t epoch = mem_dev_epoch(); /* first: see exchange() */
  for (size_t p = 0; p < r->npair; p++) {
    p2p_pair_t *pr = &r->pair[p];
    size_t n = (size_t)pr->out.nsend + pr->out.nrecv, k = 0;
    pr->op = calloc(n, sizeof *pr->op);
    pr->mine = calloc(n, sizeof *pr->mine);
    if (!pr->op || !pr->mine)
      return SHARC_ERR_NO_MEM;
    pr->out.magic = P2P_MAGIC;
    pr->out.pid = (int64_t)getpid();
    pr->out.nonce = gs_process_nonce();
    pr->out.epoch = epoch;
    for (int send = 1; send >= 0; send--)
      for (size_t i = 0; i < b->n; i++) {
        const call_p2p_op_t *o = &b->ops[i];
        if (o->peer != pr->peer || o->send != send || !op_bytes(o))
          continue;
        pr->op[k] = i;
        share(o->buf, op_bytes(o), send, &pr->mine[k].buf);
        pr->mine[k].dtype = (int32_t)o->dtype;
        pr->mine[k].count = (uint64_t)o->count;
        k++;
      }
  }
  return SHARC_OK;
}

/* Why a buffer in state st cannot be used here (a send's must be shared),
 * or NULL. */
static const char *p2p_refusal(int32_t st, int send) {
  switch (st) {
  case BS_HOST:
    return "is host memory";
  case BS_MANAGED:
    return send ? "is managed memory, which CUDA IPC cannot share" : NULL;
  case BS_NOSHARE:
    return "cannot be shared through CUDA IPC (cudaIpcGetMemHandle or "
           "cuMemGetAddressRange refused it: cudaMallocAsync pools and "
           "cuMemCreate memory cannot be)";
  default:
    return NULL;
  }
}

/* The transfers from rank a (sends sa[na]) to rank b (receives rb[nb]):
 * the first disagreement, worded alike on both ranks; SHARC_OK if none. */
static sharc_status_t p2p_judge(p2p_run_t *r, int a, const p2p_xfer_t *sa,
                                size_t na, int b, const p2p_xfer_t *rb,
                                size_t nb) {
  if (na != nb) {
    p2p_fail(r, SHARC_ERR_MISMATCH,
             "%s: send/recv mismatch (CUDA IPC): rank %d posts %zu send(s) "
             "to rank %d but rank %d posts %zu receive(s) from rank %d",
             P2P_FN, a, na, b, b, nb, a);
    return SHARC_ERR_MISMATCH;
  }
  for (size_t k = 0; k < na; k++) {
    const p2p_xfer_t *s = &sa[k], *d = &rb[k];
    size_t sb = s->count * sharc_dtype_size((sharc_dtype_t)s->dtype);
    size_t db = d->count * sharc_dtype_size((sharc_dtype_t)d->dtype);
    if (sb != db) {
      p2p_fail(r, SHARC_ERR_MISMATCH,
               "%s: send/recv mismatch (CUDA IPC): rank %d's send #%zu to "
               "rank %d is %llu x %s but rank %d's receive #%zu from rank %d "
               "is %llu x %s",
               P2P_FN, a, k, b, (unsigned long long)s->count,
               sharc_dtype_name((sharc_dtype_t)s->dtype), b, k, a,
               (unsigned long long)d->count,
               sharc_dtype_name((sharc_dtype_t)d->dtype));
      return SHARC_ERR_MISMATCH;
    }
    const char *why = p2p_refusal(s->buf.state, 1);
    int who = a, send = 1;
    if (!why) {
      why = p2p_refusal(d->buf.state, 0);
      who = b;
      send = 0;
    }
    if (why) {
      p2p_fail(r, SHARC_ERR_INVALID_ARG,
               "%s on a CUDA stream with SHARC_CUDA_PATH=ipc: rank %d's %s "
               "#%zu %s rank %d %s; pass cudaMalloc memory on both ranks, or "
               "use SHARC_CUDA_PATH=staged",
               P2P_FN, who, send ? "send" : "receive", k, send ? "to" : "from",
               send ? b : a, why);
      return SHARC_ERR_INVALID_ARG;
    }
  }
  return SHARC_OK;
}

/* Queues the pull of every transfer this rank receives from pair pr's
 * peer; a failure is this pair's (st_out, logged). */
static void p2p_pull(p2p_run_t *r, p2p_pair_t *pr) {
  const call_p2p_t *b = r->call->p2p;
  const p2p_head_t *o = &pr->in;
  ipc_desc_t owner = {.pid = o->pid, .nonce = o->nonce, .epoch = o->epoch};
  int local = o->pid == (int64_t)getpid() && o->nonce == gs_process_nonce();
  if (!local)
    map_expire(&owner);
  for (size_t k = 0; k < pr->out.nrecv; k++) {
    const call_p2p_op_t *op = &b->ops[pr->op[pr->out.nsend + k]];
    const ipc_buf_t *src = &pr->theirs[k].buf; /* its k-th send to me */
    const uint8_t *from;
    if (local) {
      from = (const uint8_t *)(uintptr_t)(src->base + src->off);
    } else {
      char why[256] = "";
      map_slot_t *m = map_get(&src->handle, r->ctx->device, src->reg, &owner,
                              why, sizeof why);
      if (!m) {
        WARN(SUB_CUDA, "%s (CUDA IPC): mapping rank %d's send buffer #%zu: %s",
             P2P_FN, pr->peer, k, why);
        pr->st_out = SHARC_ERR_CUDA;
        p2p_fail(r, SHARC_ERR_CUDA,
                 "%s (CUDA IPC): mapping rank %d's send buffer #%zu: %s",
                 P2P_FN, pr->peer, k, why);
        return;
      }
      r->held[r->nheld++] = m;
      from = (const uint8_t *)m->ptr + src->off;
    }
    cudaError_t e =
        (cudaError_t)kernel_dev_copy(op->buf, from, op_bytes(op), r->ctx->cs);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      WARN(SUB_CUDA, "%s (CUDA IPC): copying from rank %d's send #%zu: %s",
           P2P_FN, pr->peer, k, cudaGetErrorName(e));
      pr->st_out = SHARC_ERR_CUDA;
      p2p_fail(r, SHARC_ERR_CUDA,
               "%s (CUDA IPC): copying from rank %d's send #%zu: %s: %s",
               P2P_FN, pr->peer, k, cudaGetErrorName(e), cudaGetErrorString(e));
      return;
    }
    r->pulled += op_bytes(op);
  }
}

/* Transfers with rank itself: the k-th send pairs with the k-th receive
 * (sched_p2p_build's rule and wording), a device-to-device copy. */
static cudaError_t p2p_self(p2p_run_t *r) {
  const call_p2p_t *b = r->call->p2p;
  size_t ns = 0, nr = 0;
  for (size_t i = 0; i < b->n; i++)
    if (b->ops[i].peer == r->rank && op_bytes(&b->ops[i])) {
      ns += b->ops[i].send;
      nr += !b->ops[i].send;
    }
  if (ns != nr) {
    p2p_fail(r, SHARC_ERR_INVALID_ARG,
             "%s: rank %d posts %zu send(s) to itself and %zu receive(s) "
             "from itself; each send to self needs a receive from self in "
             "the same group",
             P2P_FN, r->rank, ns, nr);
    return cudaSuccess;
  }
  size_t j = 0, k = 0;
  for (size_t i = 0; i < b->n; i++) {
    const call_p2p_op_t *s = &b->ops[i];
    if (s->peer != r->rank || !s->send || !op_bytes(s))
      continue;
    while (b->ops[j].peer != r->rank || b->ops[j].send || !op_bytes(&b->ops[j]))
      j++;
    const call_p2p_op_t *d = &b->ops[j++];
    if (op_bytes(s) != op_bytes(d)) {
      p2p_fail(r, SHARC_ERR_INVALID_ARG,
               "%s: rank %d: send #%zu to itself has %zu bytes but its "
               "receive #%zu from itself %zu; they must match",
               P2P_FN, r->rank, k, op_bytes(s), k, op_bytes(d));
      return cudaSuccess;
    }
    if (!dev_is_device_ptr(s->buf) || !dev_is_device_ptr(d->buf)) {
      p2p_fail(r, SHARC_ERR_INVALID_ARG,
               "%s on a CUDA stream with SHARC_CUDA_PATH=ipc: rank %d's %s "
               "#%zu with itself is host memory; pass cudaMalloc memory, or "
               "use SHARC_CUDA_PATH=staged",
               P2P_FN, r->rank, dev_is_device_ptr(s->buf) ? "receive" : "send",
               k);
      return cudaSuccess;
    }
    cudaError_t e =
        (cudaError_t)kernel_dev_copy(d->buf, s->buf, op_bytes(s), r->ctx->cs);
    if (e != cudaSuccess)
      return e;
    r->pulled += op_bytes(s);
    k++;
  }
  return cudaSuccess;
}

/* The worker runs a send/recv batch in its turn (ipc_run). */
static sharc_status_t ipc_run_p2p(coll_call_t *call, const ipc_ctx_t *ctx) {
  struct sharc_comm *comm = call->comm;
  p2p_run_t r = {.call = call, .ctx = ctx, .rank = comm->rank};
  size_t np = 0;
  void **out = NULL, **in = NULL;
  size_t *lout = NULL, *lin = NULL;
  sharc_status_t st = p2p_lists(&r);
  np = r.npair;
  if (st == SHARC_OK) {
    out = calloc(np + 1, sizeof *out);
    in = calloc(np + 1, sizeof *in);
    lout = calloc(np + 1, sizeof *lout);
    lin = calloc(np + 1, sizeof *lin);
    r.held = calloc(call->p2p->n + 1, sizeof *r.held);
    if (!out || !in || !lout || !lin || !r.held)
      st = SHARC_ERR_NO_MEM;
  }
  if (st != SHARC_OK) {
    /* The peers wait for this rank in exchange A: break the
     * communicator, as any local failure inside a collective does. */
    st = comm_error(comm, SHARC_ERR_NO_MEM, "%s: out of memory (CUDA IPC)",
                    P2P_FN);
    comm_fail(comm, comm->rank, st, sharc_comm_last_error(comm));
    goto out;
  }
  /* A: headers */
  for (size_t p = 0; p < np; p++) {
    out[p] = &r.pair[p].out;
    in[p] = &r.pair[p].in;
    lout[p] = lin[p] = sizeof(p2p_head_t);
  }
  if (np && (st = p2p_swap(&r, out, lout, in, lin)) != SHARC_OK)
    goto out;
  /* B: lists, with each peer that runs this protocol */
  for (size_t p = 0; p < np; p++) {
    p2p_pair_t *pr = &r.pair[p];
    lout[p] = lin[p] = 0;
    if (pr->in.magic != P2P_MAGIC || pr->in.nsend > SCHED_P2P_MAX ||
        pr->in.nrecv > SCHED_P2P_MAX) {
      pr->verdict = SHARC_ERR_MISMATCH;
      p2p_fail(&r, SHARC_ERR_MISMATCH,
               "%s (CUDA IPC): rank %d did not answer with a send/recv batch "
               "on the CUDA IPC path (another call, or another "
               "SHARC_CUDA_PATH there: set the same on every rank)",
               P2P_FN, pr->peer);
      continue;
    }
    size_t nt = (size_t)pr->in.nsend + pr->in.nrecv;
    if (!(pr->theirs = calloc(nt ? nt : 1, sizeof *pr->theirs))) {
      st = comm_error(comm, SHARC_ERR_NO_MEM, "%s: out of memory (CUDA IPC)",
                      P2P_FN);
      comm_fail(comm, comm->rank, st, sharc_comm_last_error(comm));
      goto out;
    }
    pr->joined = 1;
    out[p] = pr->mine;
    in[p] = pr->theirs;
    lout[p] = ((size_t)pr->out.nsend + pr->out.nrecv) * sizeof *pr->mine;
    lin[p] = nt * sizeof *pr->theirs;
  }
  if (np && (st = p2p_swap(&r, out, lout, in, lin)) != SHARC_OK)
    goto out;
  /* judged alike on both ranks: the lower rank's sends first */
  for (size_t p = 0; p < np; p++) {
    p2p_pair_t *pr = &r.pair[p];
    if (!pr->joined)
      continue;
    int me = r.rank, q = pr->peer;
    const p2p_xfer_t *ms = pr->mine, *mr = pr->mine + pr->out.nsend;
    const p2p_xfer_t *ts = pr->theirs, *tr = pr->theirs + pr->in.nsend;
    if (me < q) {
      pr->verdict = p2p_judge(&r, me, ms, pr->out.nsend, q, tr, pr->in.nrecv);
      if (pr->verdict == SHARC_OK)
        pr->verdict = p2p_judge(&r, q, ts, pr->in.nsend, me, mr, pr->out.nrecv);
    } else {
      pr->verdict = p2p_judge(&r, q, ts, pr->in.nsend, me, mr, pr->out.nrecv);
      if (pr->verdict == SHARC_OK)
        pr->verdict = p2p_judge(&r, me, ms, pr->out.nsend, q, tr, pr->in.nrecv);
    }
  }
  /* the copies: from the peers, then with itself; then wait for them */
  for (size_t p = 0; p < np; p++)
    if (r.pair[p].joined && r.pair[p].verdict == SHARC_OK)
      p2p_pull(&r, &r.pair[p]);
  cudaError_t e = p2p_self(&r);
  cudaError_t w = cudaEventRecord(ctx->ev, ctx->cs);
  w = w == cudaSuccess ? cudaEventSynchronize(ctx->ev)
                       : cudaStreamSynchronize(ctx->cs);
  if (e == cudaSuccess)
    e = w;
  if (e != cudaSuccess) { /* every pull of this batch is in doubt */
    (void)cudaGetLastError();
    WARN(SUB_CUDA, "%s (CUDA IPC): the copies failed: %s: %s", P2P_FN,
         cudaGetErrorName(e), cudaGetErrorString(e));
    p2p_fail(&r, SHARC_ERR_CUDA, "%s (CUDA IPC): the copies failed: %s: %s",
             P2P_FN, cudaGetErrorName(e), cudaGetErrorString(e));
    for (size_t p = 0; p < np; p++)
      if (r.pair[p].out.nrecv && r.pair[p].st_out == SHARC_OK)
        r.pair[p].st_out = SHARC_ERR_CUDA;
  }
  /* C: statuses, with each peer that runs this protocol */
  for (size_t p = 0; p < np; p++) {
    p2p_pair_t *pr = &r.pair[p];
    out[p] = &pr->st_out;
    in[p] = &pr->st_in;
    lout[p] = lin[p] = pr->joined ? sizeof pr->st_out : 0;
  }
  if (np && (st = p2p_swap(&r, out, lout, in, lin)) != SHARC_OK)
    goto out;
  for (size_t p = 0; p < np; p++) {
    p2p_pair_t *pr = &r.pair[p];
    if (pr->joined && pr->verdict == SHARC_OK && pr->st_out == SHARC_OK &&
        pr->st_in != SHARC_OK)
      p2p_fail(&r, (sharc_status_t)pr->st_in,
               "%s (CUDA IPC): rank %d failed to read this rank's send "
               "buffer(s) (%s; its log says why)",
               P2P_FN, pr->peer, sharc_status_name(pr->st_in));
  }
  st = r.st;
  if (st != SHARC_OK)
    comm_error(comm, st, "%s", r.msg);
  TRACE(SUB_CUDA,
        "%s: %zu transfers with %zu peers through CUDA IPC, %zu bytes "
        "pulled: %s",
        P2P_FN, call->p2p->n, np, r.pulled, sharc_status_name(st));
out:
  for (size_t i = 0; i < r.nheld; i++)
    map_put(r.held[i]);
  for (size_t p = 0; r.pair && p < np; p++) {
    free(r.pair[p].op);
    free(r.pair[p].mine);
    free(r.pair[p].theirs);
  }
  free(r.pair);
  free(r.held);
  free(out);
  free(in);
  free(lout);
  free(lin);
  return st;
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
    map_put(c.held[i]);
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

sharc_status_t gpu_mem_describe(const void *p, size_t bytes, mem_dev_t *out) {
  (void)p;
  (void)bytes;
  (void)out;
  return err_set(SHARC_ERR_UNSUPPORTED,
                 "sharc_mem_register: device memory in a build without CUDA");
}

/* Takes nothing: dev_have_cuda() is 0. */
const gpu_path_t gpu_path_ipc = {
    .call = {.name = "ipc"},
    .no_capture =
        "a host thread exchanges the buffers and orchestrates each call",
    .takes = ipc_takes,
    .check_env = ipc_check_env};

#endif /* SHARC_HAVE_CUDA */

/*
 * staged_reduce.c - reduce-scatter and all-reduce on the staged GPU path
 * with the reduction on the GPU (SHARC_CUDA_STAGED_REDUCE: auto takes it
 * where the communicator spans hosts). The host transports only move
 * bytes; the device reduces:
 *
 *   reduce-scatter = all-to-all of the blocks (every rank sends block p of
 *                    its sendbuf to rank p), then one reduction kernel over
 *                    the n blocks received, in rank order from the own one
 *   all-reduce     = the same on the count split into n blocks (the last
 *                    ones shorter), then an all-gather of the reduced blocks
 *
 * Each block is reduced by one rank with one kernel (kernel_dev_reduce_n:
 * f16/bf16 accumulate in f32), so every rank gets the same bits. Every
 * rank sends (n-1)/n of the data, as a ring does; a rank's bytes cross the
 * network once, but to every peer at once.
 *
 * Pipelined in K chunks along the blocks (chunk k: the same stretch of
 * every block; K from SHARC_CUDA_PIPE_BYTES, at most 32). Staging regions
 * A (send), B (received), G (all-reduce: reduced, gathered), each K x n
 * slices of one chunk. On the CUDA stream, queued at enqueue:
 *
 *   D2H chunk 0, E1_0, D2H chunk 1, E1_1, ...            (the send data)
 *   wait a_0, reduce 0 [, E2_0], wait a_1, reduce 1 ...  (from B, pinned)
 *   all-reduce: wait g_0, H2D chunk 0, wait g_1, ...      (from G)
 *
 * and on the stream's worker, in the call's turn: per chunk, wait E1_k,
 * all-to-all A_k -> B_k over the host transport, release a_k; all-reduce
 * then per chunk: wait E2_k, all-gather in place on G_k, release g_k. So
 * the copies to staging, the network and the kernels of different chunks
 * overlap. The kernels read pinned host memory directly (mapped through
 * unified addressing: each byte crosses PCIe once each way, as the copies
 * would), and reduce-scatter's kernel writes a device recvbuf directly.
 *
 * The all-to-all is a pairwise exchange built here (sr_exchange), each
 * slice sent at its own length (no padding on the wire), and the own slice
 * stays in A where the kernel reads it. GPUDirect RDMA: a peer whose
 * transport can send device memory straight (transport_device_send: ib
 * with a dma-buf or nvidia-peermem, for a device sendbuf registered with
 * sharc_mem_register) is sent its slices from the sendbuf itself, and
 * those slices are not copied to A at all; the others go from A as before.
 * Which source a rank uses is its own business: the wire is the same.
 */
#include "gpu_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devptr.h"
#include "staged_reduce.h"

/* staged_reduce.h */
sharc_status_t sr_check_env(const char *fn) {
  const char *v = param_str(PARAM_CUDA_STAGED_REDUCE);
  if (strcmp(v, "auto") && strcmp(v, "gpu") && strcmp(v, "host"))
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%s: SHARC_CUDA_STAGED_REDUCE=%s: use auto, gpu or host", fn,
                   v);
  return SHARC_OK;
}

#ifdef SHARC_HAVE_CUDA

#include <stdatomic.h>

#include "algo.h"     /* send_split, recv_split */
#include "device.h"   /* kernels/ */
#include "registry.h" /* transport_device_send */

#define SR_MAX_CHUNKS 32
/* auto reduces on the GPU from this call size (smaller calls are latency:
 * the host schedule has fewer steps) */
#define SR_AUTO_MIN_BYTES ((size_t)64 << 10)

/* One call's state, from its enqueue to the worker's finish. */
typedef struct {
  dev_stream_t *ds;
  struct sharc_comm *comm;
  int all_reduce;
  size_t k, ck;       /* chunks; bytes of a block's slice of one */
  size_t mb, ce;      /* elements of a block, of its slice per chunk */
  int sdev, rdev;     /* sendbuf, recvbuf on the device; otherwise the
                         worker copies them (a host-to-host
                         cudaMemcpyAsync would block the enqueue) */
  uint8_t *a, *b, *g; /* staging: slice p of chunk j at + (j n + p) ck */
  cudaEvent_t e1[SR_MAX_CHUNKS]; /* [0]: the dev_work_t's (the binding's) */
  cudaEvent_t e2[SR_MAX_CHUNKS];
  uint32_t seq_a, seq_g; /* release seq_a + j: chunk j's all-to-all ran */
  unsigned char *gdr;    /* [n]: peer p is sent straight from the sendbuf */
  int ngdr;
  sharc_status_t err;
  char msg[192];
} sr_t;

static int env_choice(void) {
  const char *v = param_str(PARAM_CUDA_STAGED_REDUCE);
  return !strcmp(v, "gpu") ? 1 : !strcmp(v, "host") ? 0 : -1;
}

int sr_takes(const coll_call_t *call) {
  if ((call->coll != SCHED_REDUCE_SCATTER && call->coll != SCHED_ALL_REDUCE) ||
      call->comm->nranks < 2 || call->count == 0)
    return 0;
  int c = env_choice();
  if (c >= 0)
    return c;
  size_t bytes = call->count * sharc_dtype_size(call->dtype);
  if (call->coll == SCHED_REDUCE_SCATTER)
    bytes *= (size_t)call->comm->nranks;
  return call->comm->nhosts > 1 && bytes >= SR_AUTO_MIN_BYTES;
}

/* Elements of block p (all-reduce: the count in n blocks of mb, the last
 * ones shorter or empty). */
static size_t block_len(const coll_call_t *call, size_t mb, int p) {
  if (call->coll == SCHED_REDUCE_SCATTER)
    return call->count;
  size_t at = (size_t)p * mb;
  return at >= call->count ? 0 : SHARC_MIN(mb, call->count - at);
}

/* Elements of block p in chunk j of ce elements per block. */
static size_t slice_len(const coll_call_t *call, size_t mb, size_t ce, int p,
                        size_t j) {
  size_t len = block_len(call, mb, p), at = j * ce;
  return at >= len ? 0 : SHARC_MIN(ce, len - at);
}

static void sr_free(sr_t *s) {
  if (!s)
    return;
  for (size_t j = 1; j < s->k; j++) /* e1[0] belongs to the dev_work_t */
    if (s->e1[j])
      gs_put_event(s->ds, s->e1[j]);
  for (size_t j = 0; j < s->k; j++)
    if (s->e2[j])
      gs_put_event(s->ds, s->e2[j]);
  free(s->gdr);
  free(s);
}

static sharc_status_t sr_finish(void *state) {
  sr_t *s = state;
  sharc_status_t st = s->err;
  if (st != SHARC_OK)
    err_record(st, "%s", s->msg);
  sr_free(s);
  return st;
}

/* This rank cannot go on with the call its peers are in: they are told
 * (else they would wait for it until SHARC_TIMEOUT). */
static sharc_status_t sr_fail_comm(struct sharc_comm *comm, sharc_status_t st) {
  if (st != SHARC_OK && !atomic_load(&comm->unusable))
    comm_fail(comm, comm->rank, st, sharc_comm_last_error(comm));
  return st;
}

/* Worker: waits for event ev of the CUDA stream; a failure fails the
 * collective on every rank (the peers are in it). */
static sharc_status_t sr_wait(sr_t *s, cudaEvent_t ev, const char *what) {
  cudaError_t e = cudaEventSynchronize(ev);
  if (e == cudaSuccess)
    return SHARC_OK;
  s->err = gs_cuda_fail(e, "staged collective (GPU reduction)", what);
  snprintf(s->msg, sizeof s->msg, "%s", err_last());
  comm_fail(s->comm, s->comm->rank, s->err, s->msg);
  return s->err;
}

/* Worker: block p's slice of chunk j between the user's host buffer
 * (block p at p * mb elements) and its staging slot (to_user: which way). */
static void sr_host_copy(const sr_t *s, const coll_call_t *call,
                         const uint8_t *user, uint8_t *slot, int p, size_t j,
                         int to_user) {
  size_t esize = sharc_dtype_size(call->dtype);
  size_t len = slice_len(call, s->mb, s->ce, p, j) * esize;
  size_t at = ((size_t)p * s->mb + j * s->ce) * esize;
  if (!len)
    return;
  if (to_user)
    memcpy((uint8_t *)(uintptr_t)user + at, slot, len);
  else
    memcpy(slot, user + at, len);
}

/* Slice [off, off + len) of buffer b to or from peer, cut over the
 * channels from 256 KiB as a send/recv batch is (p2p.c; both sides cut
 * alike: they agree on len). */
static void sr_xfer(sched_t *x, int send, int peer, sched_buf_t b, size_t off,
                    size_t len) {
  int nc = len >= ((size_t)256 << 10) ? x->nchan : 1;
  if (send)
    send_split(x, peer, nc, b, off, len);
  else
    recv_split(x, peer, nc, b, off, len);
}

/* Chunk j's all-to-all as a pairwise exchange over the host transports,
 * in bytes: SEND is the user's sendbuf, RECV the staging (A, B). Round k
 * sends to rank r + k and receives from rank r - k; each slice goes at its
 * length. A peer in s->gdr gets its slice from the sendbuf (device memory,
 * GPUDirect RDMA), the others from A. */
static sharc_status_t sr_exchange(const sr_t *s, const coll_call_t *call,
                                  size_t j, sched_t *x) {
  int n = s->comm->nranks, r = s->comm->rank;
  size_t slice = (size_t)n * s->ck, esize = sharc_dtype_size(call->dtype);
  size_t b0 = s->k * slice; /* B's offset in the staging */
  x->nchan = SHARC_MAX(s->comm->nchan, 1);
  size_t in = slice_len(call, s->mb, s->ce, r, j) * esize;
  for (int k = 1; k < n; k++) {
    int to = (r + k) % n, from = (r - k + n) % n;
    size_t out = slice_len(call, s->mb, s->ce, to, j) * esize;
    sched_round(x);
    if (out && s->gdr && s->gdr[to])
      sr_xfer(x, 1, to, SCHED_BUF_SEND,
              ((size_t)to * s->mb + j * s->ce) * esize, out);
    else if (out)
      sr_xfer(x, 1, to, SCHED_BUF_RECV, j * slice + (size_t)to * s->ck, out);
    if (in)
      sr_xfer(x, 0, from, SCHED_BUF_RECV, b0 + j * slice + (size_t)from * s->ck,
              in);
  }
  return sched_finish(x);
}

/* Worker, in the call's turn: the host steps between the device steps. */
static sharc_status_t sr_run(coll_call_t *call, call_host_fn host) {
  sr_t *s = call->path_arg;
  int n = s->comm->nranks, r = s->comm->rank;
  size_t slice = (size_t)n * s->ck, esize = sharc_dtype_size(call->dtype);
  coll_call_t sub = {.dtype = SHARC_U8, .op = SHARC_SUM, .comm = s->comm};
  sharc_status_t st = SHARC_OK;
  /* the GPUDirect peers chosen at enqueue: their bytes must still be
   * reachable (a sendbuf deregistered since would otherwise reach the
   * executor, which cannot read device memory) */
  for (int p = 0; s->gdr && p < n && st == SHARC_OK; p++) {
    char why[400];
    size_t len = block_len(call, s->mb, p) * esize;
    if (s->gdr[p] && !transport_device_send(s->comm, p,
                                            (const uint8_t *)call->sendbuf +
                                                (size_t)p * s->mb * esize,
                                            len, why, sizeof why))
      st = sr_fail_comm(
          s->comm,
          comm_record(s->comm, SHARC_ERR_INVALID_ARG,
                      "%s: the sendbuf's block for rank %d can no longer be "
                      "sent from the GPU (%s); was it deregistered while the "
                      "call was queued? Keep a sharc_mem_register'd buffer "
                      "registered until its stream has passed the call",
                      sched_coll_fn(call->coll), p, why));
  }
  for (size_t j = 0; j < s->k && st == SHARC_OK; j++) {
    if (j > 0 && (st = sr_wait(s, s->e1[j],
                               "waiting for a chunk's copy to "
                               "staging")) != SHARC_OK)
      break;
    for (int p = 0; !s->sdev && p < n; p++) /* a host sendbuf */
      sr_host_copy(s, call, call->sendbuf, s->a + j * slice + (size_t)p * s->ck,
                   p, j, 0);
    sched_t x;
    sched_init(&x);
    st = sr_exchange(s, call, j, &x);
    if (st != SHARC_OK)
      st = comm_record(s->comm, st, "%s: %s", sched_coll_fn(call->coll),
                       err_last());
    sub.coll = SCHED_ALL_TO_ALL;
    sub.sendbuf = call->sendbuf;
    sub.recvbuf = s->a;
    sub.count = s->ck;
    if (st == SHARC_OK)
      st = host(&sub, &x, NULL);
    sched_free(&x);
    if ((st = sr_fail_comm(s->comm, st)) == SHARC_OK)
      gs_release_to(s->ds, s->seq_a + (uint32_t)j);
  }
  for (size_t j = 0; !s->all_reduce && !s->rdev && j < s->k && st == SHARC_OK;
       j++) { /* reduce-scatter into host memory */
    if ((st = sr_wait(s, s->e2[j], "waiting for a chunk's reduction")) !=
        SHARC_OK)
      break;
    size_t len = slice_len(call, s->mb, s->ce, r, j) * esize;
    if (len)
      memcpy((uint8_t *)call->recvbuf + j * s->ce * esize, s->g + j * s->ck,
             len);
  }
  for (size_t j = 0; s->all_reduce && j < s->k && st == SHARC_OK; j++) {
    if ((st = sr_wait(s, s->e2[j], "waiting for a chunk's reduction")) !=
        SHARC_OK)
      break;
    sub.coll = SCHED_ALL_GATHER;
    sub.recvbuf = s->g + j * slice;
    sub.sendbuf = s->g + j * slice + (size_t)r * s->ck;
    sub.count = s->ck;
    if ((st = sr_fail_comm(s->comm, host(&sub, NULL, NULL))) != SHARC_OK)
      break;
    if (s->rdev) {
      gs_release_to(s->ds, s->seq_g + (uint32_t)j);
      continue;
    }
    for (int p = 0; p < n; p++) /* a host recvbuf */
      sr_host_copy(s, call, call->recvbuf, s->g + j * slice + (size_t)p * s->ck,
                   p, j, 1);
  }
  /* the binding's after releases the last number (with a host recvbuf the
   * one after the copies above), and with it every wait of the call, also
   * after an error */
  return st;
}

static const call_path_t sr_path = {.name = "staged", .run = sr_run};

/* Queues "wait for release seq" and makes it the call's last so far: from
 * the first one on, the worker owns *w and releases it whatever happens. */
static sharc_status_t sr_release_wait(dev_stream_t *ds, dev_work_t *w,
                                      uint32_t seq, const char *fn) {
  CHECK(gs_queue_release_wait(ds, seq, fn));
  ds->next_seq = w->seq = seq;
  w->ds = ds;
  return SHARC_OK;
}

/* Queues an event on the stream into *ev. */
static sharc_status_t sr_event(dev_stream_t *ds, cudaEvent_t *ev,
                               const char *fn) {
  CHECK(gs_get_event(ds, fn, ev));
  cudaError_t e = cudaEventRecord(*ev, ds->cs);
  return e == cudaSuccess ? SHARC_OK : gs_cuda_fail(e, fn, "cudaEventRecord");
}

/* Chunk j's reduction kernel: this rank's block slice from the n slices
 * received, into dst. */
static sharc_status_t sr_kernel(sr_t *s, const coll_call_t *call, size_t j,
                                void *dst, const char *fn) {
  int n = s->comm->nranks, r = s->comm->rank;
  size_t slice = (size_t)n * s->ck;
  const void *stack[64];
  const void **src = n <= 64 ? stack : malloc((size_t)n * sizeof *src);
  if (!src)
    return err_set(SHARC_ERR_NO_MEM, "%s on a CUDA stream: out of memory", fn);
  src[0] = s->a + j * slice + (size_t)r * s->ck; /* the own slice stays */
  for (int i = 1; i < n; i++)
    src[i] = s->b + j * slice + (size_t)((r + i) % n) * s->ck;
  cudaError_t e = (cudaError_t)kernel_dev_reduce_n(
      call->dtype, call->op, dst, src, n, slice_len(call, s->mb, s->ce, r, j),
      s->ds->cs);
  if (src != stack)
    free(src);
  return e == cudaSuccess ? SHARC_OK
                          : gs_cuda_fail(e, fn, "the reduction kernel");
}

/* The stream's part after the copies to staging (w owned by the worker
 * from the first release wait on). */
static sharc_status_t sr_queue(sr_t *s, coll_call_t *call, dev_work_t *w,
                               const char *fn) {
  dev_stream_t *ds = s->ds;
  int n = s->comm->nranks, r = s->comm->rank;
  size_t slice = (size_t)n * s->ck, esize = sharc_dtype_size(call->dtype);
  uint8_t *recv = call->recvbuf;
  /* per chunk: its all-to-all, then its reduction (into the device recvbuf
   * for reduce-scatter, else into G, and an event the worker waits for) */
  for (size_t j = 0; j < s->k; j++) {
    CHECK(sr_release_wait(ds, w, s->seq_a + (uint32_t)j, fn));
    uint8_t *dst = s->all_reduce ? s->g + j * slice + (size_t)r * s->ck
                   : s->rdev     ? recv + j * s->ce * esize
                                 : s->g + j * s->ck;
    CHECK(sr_kernel(s, call, j, dst, fn));
    if (s->all_reduce || !s->rdev)
      CHECK(sr_event(ds, &s->e2[j], fn));
  }
  /* all-reduce into device memory: per chunk, its all-gather, then the
   * copies out */
  for (size_t j = 0; s->all_reduce && s->rdev && j < s->k; j++) {
    CHECK(sr_release_wait(ds, w, s->seq_g + (uint32_t)j, fn));
    for (int p = 0; p < n; p++) {
      size_t len = slice_len(call, s->mb, s->ce, p, j);
      cudaError_t e =
          len ? cudaMemcpyAsync(recv + ((size_t)p * s->mb + j * s->ce) * esize,
                                s->g + j * slice + (size_t)p * s->ck,
                                len * esize, cudaMemcpyDefault, ds->cs)
              : cudaSuccess;
      if (e != cudaSuccess)
        return gs_cuda_fail(e, fn, "copying the result from staging");
    }
  }
  /* a host recvbuf: the worker copies it; the stream goes on after that */
  if (!s->rdev)
    CHECK(sr_release_wait(ds, w, ds->next_seq + 1, fn));
  return SHARC_OK;
}

sharc_status_t sr_stage(dev_stream_t *ds, coll_call_t *call, dev_work_t *w,
                        const char *fn) {
  struct sharc_comm *comm = call->comm;
  int n = comm->nranks, ar = call->coll == SCHED_ALL_REDUCE;
  size_t esize = sharc_dtype_size(call->dtype);
  /* block geometry: reduce-scatter's blocks are count long, all-reduce's
   * mb = ceil(count / n) (the last ones shorter or empty) */
  size_t mb = ar ? (call->count + (size_t)n - 1) / (size_t)n : call->count;
  int64_t pipe = param_int(PARAM_CUDA_PIPE_BYTES);
  size_t total = (size_t)n * mb * esize, k = 1;
  if (pipe > 0)
    k = SHARC_MIN((total + (size_t)pipe - 1) / (size_t)pipe,
                  (size_t)SR_MAX_CHUNKS);
  k = SHARC_MAX(k, (size_t)1);
  size_t ce = (mb + k - 1) / k; /* elements of a block per chunk */
  k = (mb + ce - 1) / ce;
  size_t ck = (ce * esize + 63) & ~(size_t)63, slice = (size_t)n * ck;
  int sdev = dev_is_device_ptr(call->sendbuf);
  int rdev = dev_is_device_ptr(call->recvbuf);
  /* A, B and (all-reduce, or a host recvbuf) G */
  size_t need = (ar ? 3 : 2) * k * slice + (!ar && !rdev ? k * ck : 0);
  CHECK(gs_ensure_stage(ds, need, fn));
  sr_t *s = calloc(1, sizeof *s);
  if (!s)
    return err_set(SHARC_ERR_NO_MEM, "%s on a CUDA stream: out of memory", fn);
  *s = (sr_t){.ds = ds,
              .comm = comm,
              .all_reduce = ar,
              .k = k,
              .ck = ck,
              .mb = mb,
              .ce = ce,
              .sdev = sdev,
              .rdev = rdev};
  s->a = ds->stage;
  s->b = s->a + k * slice;
  s->g = s->b + k * slice;
  const uint8_t *send = call->sendbuf;
  sharc_status_t st = SHARC_OK;
  /* GPUDirect RDMA: which peers take their blocks straight from a device
   * sendbuf (asked once per call; the transport caches registrations) */
  char why[400] = "";
  int first_no = -1;
  if (sdev && n > 1 && !(s->gdr = calloc((size_t)n, 1))) {
    sr_free(s);
    return err_set(SHARC_ERR_NO_MEM, "%s on a CUDA stream: out of memory", fn);
  }
  for (int p = 0; sdev && p < n; p++) {
    size_t len = block_len(call, mb, p) * esize;
    if (p == comm->rank || !len)
      continue;
    char w[400];
    s->gdr[p] = (unsigned char)transport_device_send(
        comm, p, send + (size_t)p * mb * esize, len, w, sizeof w);
    s->ngdr += s->gdr[p];
    if (!s->gdr[p] && first_no < 0) {
      first_no = p;
      snprintf(why, sizeof why, "%s", w);
    }
  }
  /* the send data, chunk by chunk (from the device; a host sendbuf the
   * worker copies), each followed by its event */
  for (size_t j = 0; j < k && st == SHARC_OK; j++) {
    cudaError_t e = cudaSuccess;
    for (int p = 0; sdev && p < n && e == cudaSuccess; p++) {
      size_t len = slice_len(call, mb, ce, p, j);
      if (len && !s->gdr[p]) /* a GPUDirect peer reads the sendbuf itself */
        e = cudaMemcpyAsync(s->a + j * slice + (size_t)p * ck,
                            send + ((size_t)p * mb + j * ce) * esize,
                            len * esize, cudaMemcpyDefault, ds->cs);
    }
    st = e == cudaSuccess
             ? sr_event(ds, &s->e1[j], fn)
             : gs_cuda_fail(e, fn, "copying the send buffer to staging");
  }
  if (st != SHARC_OK) { /* nothing waits on the CUDA stream yet */
    if (s->e1[0])
      gs_put_event(ds, s->e1[0]);
    sr_free(s);
    return st;
  }
  w->fn = fn;
  w->event = s->e1[0];
  w->finish = sr_finish;
  w->state = s;
  s->seq_a = ds->next_seq + 1;
  s->seq_g = s->seq_a + (uint32_t)k;
  call->path = &sr_path;
  call->path_arg = s;
  st = sr_queue(s, call, w, fn);
  if (st != SHARC_OK) {
    if (!w->ds) { /* no release wait queued: nothing is owed */
      call->path = NULL;
      call->path_arg = NULL;
      w->finish = NULL;
      w->state = NULL;
      w->event = NULL;
      gs_put_event(ds, s->e1[0]);
      sr_free(s);
      return st;
    }
    /* the worker skips the call and releases; the peers, who run it, are
     * told */
    w->err = st;
    snprintf(w->msg, sizeof w->msg, "%s", err_last());
    sr_fail_comm(comm, st);
  }
  TRACE(SUB_CUDA,
        "%s #%u: reduced on the GPU, %zu chunks of %zu bytes per block, %zu "
        "bytes staged; %d of %d peers sent straight from the device "
        "(GPUDirect RDMA)%s%s",
        fn, w->seq, k, ce * esize, need, s->ngdr, n - 1,
        first_no >= 0 ? "; the others staged: " : "", why);
  return st;
}

#endif /* SHARC_HAVE_CUDA */

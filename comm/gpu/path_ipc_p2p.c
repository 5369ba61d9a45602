/*
 * path_ipc_p2p.c - send/recv batches (SCHED_P2P) on the CUDA IPC path
 * (SHARC_CUDA_PATH=ipc): zero copy between the batch's peers, each receiver
 * pulling from its senders' buffers mapped here (ipc_map.h). path_ipc.c
 * takes the batch and hands it here in its turn (path_ipc_p2p.h).
 */
#include "path_ipc_p2p.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SHARC_HAVE_CUDA

#include "device.h" /* kernels/ */
#include "devptr.h"
#include "exec.h"

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
        ipc_share(o->buf, op_bytes(o), send, &pr->mine[k].buf);
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
    ipc_map_expire(&owner);
  for (size_t k = 0; k < pr->out.nrecv; k++) {
    const call_p2p_op_t *op = &b->ops[pr->op[pr->out.nsend + k]];
    const ipc_buf_t *src = &pr->theirs[k].buf; /* its k-th send to me */
    const uint8_t *from;
    if (local) {
      from = (const uint8_t *)(uintptr_t)(src->base + src->off);
    } else {
      char why[256] = "";
      map_slot_t *m = ipc_map_get(&src->handle, r->ctx->device, src->reg,
                                  &owner, why, sizeof why);
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
sharc_status_t ipc_run_p2p(coll_call_t *call, const ipc_ctx_t *ctx) {
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
    ipc_map_put(r.held[i]);
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

#endif /* SHARC_HAVE_CUDA */

/*
 * path_staged.c - the staged GPU path (SHARC_CUDA_PATH=staged, the default):
 * collectives on device memory through pinned host staging, ordered on the
 * caller's cudaStream_t with NCCL's semantics (the call returns at once;
 * the work happens in stream order). Every collective, every topology.
 *
 * One collective enqueued on a CUDA-bound sharc stream becomes, on the CUDA
 * stream (queued by staged_stage in the caller's thread):
 *
 *   D2H copy  send buffer -> staging          (skipped for host memory)
 *   event     E_k          "the send data is staged"
 *   wait      release word >= k               (cuStreamWaitValue32)
 *   H2D copy  staging -> receive buffer       (skipped for host memory)
 *
 * and, on the sharc stream's worker thread (api/stream.c through the
 * binding, cuda_stream.c): sleep on E_k
 * (cudaEventBlockingSync), run the host collective on the staging buffers,
 * store k into the release word. The release is stored whatever happened
 * (error, skip after an earlier error, a dead peer): the CUDA stream is
 * never left waiting, and the error becomes the stream's sticky error.
 *
 * Nothing spins on the GPU or the CPU (docs/design.md, decisions 7 and 8): the
 *worker sleeps in cudaEventSynchronize; the stream's wait is a semaphore
 *acquire handled by the GPU's front end, not a kernel, so the ranks sharing one
 * GPU keep their time slices. Where the driver has no stream memory
 * operations the wait is a cudaLaunchHostFunc that sleeps on a condition
 * variable until the worker released that call. CUDA may run the host
 * functions of all streams on one thread, so with that fallback two
 * CUDA-bound sharc streams of one process can deadlock (one's host function
 * holds the thread while the other's earlier call waits behind its own):
 * keep to one per process there.
 *
 * Pipelined (devpipe.h; calls of 2 x SHARC_CUDA_PIPE_BYTES and
 * more): the copies go in groups planned on the call's schedule. Each D2H
 * group gets its own event, and the worker waits for it just before the
 * first round that touches its bytes (exec.h's hook); each H2D group gets
 * its own release number, which the worker stores right after the last
 * round that writes its bytes, so the stream copies it back while the
 * later rounds still move data:
 *
 *   D2H g0, E_k0, D2H g1, E_k1, ...   wait >= k0, H2D h0, wait >= k0+1, ...
 *
 * The last H2D group is released when the call ends, as above.
 *
 * Reductions run on the host here, except reduce-scatter and all-reduce
 * where the communicator spans hosts (SHARC_CUDA_STAGED_REDUCE):
 * staged_reduce.c moves only bytes over the host transports and reduces
 * in a device kernel, chunk by chunk.
 *
 * Staging: one pinned buffer per stream, reused by every call. Calls on one
 * CUDA stream use it one after another by construction: call k+1's D2H copy
 * is queued behind call k's H2D copy, which waits for call k's release. A
 * call that needs more replaces it by a larger one; the old buffer may still
 * serve calls in flight, so it is freed only at the next synchronize.
 */
#include "devpipe.h"
#include "exec.h"
#include "gpu_impl.h"
#include "staged_reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SHARC_HAVE_CUDA

/* ---- staging -------------------------------------------------------------
 */

/* Where one call's data goes (devpipe.h's layout) and its user buffers. */
typedef struct {
  devpipe_layout_t l;
  const uint8_t *s; /* the call's sendbuf and recvbuf */
  uint8_t *r;
} plan_t;

static void plan_call(const coll_call_t *c, plan_t *p) {
  memset(p, 0, sizeof *p);
  p->s = c->sendbuf;
  p->r = c->recvbuf;
  if (c->coll == SCHED_BARRIER)
    return;
  int rank = c->comm->rank, root = rank == c->root;
  size_t cb = c->count * sharc_dtype_size(c->dtype);
  int inplace = call_inplace(c, sharc_dtype_size(c->dtype));
  int sdev, rdev;
  if (inplace) {
    int send_outer =
        c->coll == SCHED_REDUCE_SCATTER || c->coll == SCHED_SCATTER;
    sdev = rdev = dev_is_device_ptr(send_outer ? p->s : p->r);
  } else {
    /* buffers a rooted collective reads or writes on the root only */
    sdev =
        (root || !(c->coll == SCHED_BROADCAST || c->coll == SCHED_SCATTER)) &&
        dev_is_device_ptr(p->s);
    rdev = (root || !(c->coll == SCHED_REDUCE || c->coll == SCHED_GATHER)) &&
           dev_is_device_ptr(p->r);
  }
  devpipe_layout(c->coll, rank, c->comm->nranks, c->root, cb, inplace, sdev,
                 rdev, &p->l);
}

/* ---- pipelined copies (devpipe.h) ----------------------------------------
 */

/* Groups per direction at most: each costs an event or a release wait. */
#define PIPE_MAX_GROUPS 32

/* A pipelined call on the worker: waits before the rounds for the D2H
 * groups after the first (the binding's before waits for that one), releases
 * after the rounds the H2D groups before the last (the binding's after releases
 * that one). */
typedef struct dev_pipe {
  exec_hook_t hook; /* first: exec.c calls back with its address */
  dev_stream_t *ds;
  struct sharc_comm *comm;
  sched_t sched; /* planned on, and run (staged_run) */
  size_t nev, ev_next;
  cudaEvent_t *ev;
  size_t *ev_round; /* ev[i] must have fired before this round */
  size_t nrel, rel_next;
  uint32_t seq_first;
  size_t *rel_round;  /* seq_first + i is final after this round */
  sharc_status_t err; /* the first failed event wait */
  char msg[192];
} dev_pipe_t;

static void pipe_wait(dev_pipe_t *pp, size_t i) {
  cudaError_t e = cudaEventSynchronize(pp->ev[i]);
  if (e != cudaSuccess && pp->err == SHARC_OK) {
    /* The send data never reached staging: fail the collective on every
     * rank (the peers are in it), as any failed step does. */
    pp->err = gs_cuda_fail(e, "staged collective",
                           "waiting for a piece of the send buffer's copy to "
                           "staging (cudaEventSynchronize)");
    snprintf(pp->msg, sizeof pp->msg, "%s", err_last());
    comm_fail(pp->comm, pp->comm->rank, pp->err, pp->msg);
  }
  gs_put_event(pp->ds, pp->ev[i]);
  pp->ev[i] = NULL;
}

static void pipe_before(exec_hook_t *h, const sched_t *s, size_t round) {
  (void)s; /* pp->sched itself (staged_run) */
  dev_pipe_t *pp = (dev_pipe_t *)h;
  while (pp->ev_next < pp->nev && pp->ev_round[pp->ev_next] <= round)
    pipe_wait(pp, pp->ev_next++);
}

static void pipe_after(exec_hook_t *h, const sched_t *s, size_t round) {
  (void)s;
  dev_pipe_t *pp = (dev_pipe_t *)h;
  while (pp->rel_next < pp->nrel && pp->rel_round[pp->rel_next] <= round)
    gs_release_to(pp->ds, pp->seq_first + (uint32_t)pp->rel_next++);
}

static dev_pipe_t *pipe_new(dev_stream_t *ds, size_t nev, size_t nrel) {
  dev_pipe_t *pp = calloc(1, sizeof *pp);
  if (!pp)
    return NULL;
  pp->ev = calloc(nev ? nev : 1, sizeof *pp->ev);
  pp->ev_round = calloc(nev ? nev : 1, sizeof *pp->ev_round);
  pp->rel_round = calloc(nrel ? nrel : 1, sizeof *pp->rel_round);
  if (!pp->ev || !pp->ev_round || !pp->rel_round) {
    free(pp->ev);
    free(pp->ev_round);
    free(pp->rel_round);
    free(pp);
    return NULL;
  }
  pp->hook.before = pipe_before;
  pp->hook.after = pipe_after;
  pp->ds = ds;
  return pp;
}

static void pipe_free(dev_pipe_t *pp) {
  if (!pp)
    return;
  for (size_t i = 0; i < pp->nev; i++) /* queued before any wait: they fire */
    if (pp->ev[i])
      gs_put_event(pp->ds, pp->ev[i]);
  free(pp->ev);
  free(pp->ev_round);
  free(pp->rel_round);
  sched_free(&pp->sched);
  free(pp);
}

/* The worker after a pipelined call ran or was skipped (dev_work_t.finish):
 * the error of a failed event wait, and frees pp. */
static sharc_status_t pipe_finish(void *state) {
  dev_pipe_t *pp = state;
  sharc_status_t st = pp->err;
  if (st != SHARC_OK)
    err_record(st, "%s", pp->msg);
  pipe_free(pp);
  return st;
}

/* The worker runs a pipelined call on the schedule its copies were planned
 * on, waiting and releasing around the rounds (exec.h's hook). */
static sharc_status_t staged_run(coll_call_t *call, call_host_fn host) {
  dev_pipe_t *pp = call->path_arg;
  return host(call, &pp->sched, &pp->hook);
}

/* The staged buffers of call as the host collective sees them. */
static void staged_bufs(const plan_t *p, uint8_t *stage, const void **send,
                        void **recv) {
  *send = p->l.send_staged ? stage + p->l.send_off : p->l.no_send ? NULL : p->s;
  *recv = p->l.recv_staged ? stage + p->l.recv_off : p->r;
}

/* Plans call's copies round by round into *pipe on the schedule *s the
 * worker will run (1, *s built: the caller owns it) when that makes more
 * than one group in a direction, else 0 (one copy each way). */
static int plan_pipe(const coll_call_t *call, const plan_t *p, uint8_t *stage,
                     devpipe_t *pipe, sched_t *s) {
  int64_t min = param_int(PARAM_CUDA_PIPE_BYTES);
  if (min <= 0 || call->coll == SCHED_BARRIER ||
      p->l.d2h_bytes + p->l.h2d_bytes < 2 * (uint64_t)min)
    return 0;
  coll_call_t staged = *call; /* the schedule depends on the in-place-ness */
  staged_bufs(p, stage, &staged.sendbuf, &staged.recvbuf);
  if (coll_plan(&staged, s) != SHARC_OK) {
    sched_free(s);
    return 0;
  }
  devpipe_args_t a = {
      .lay = p->l,
      .esize = sharc_dtype_size(call->dtype),
      .min_group = (size_t)min,
      .max_groups = PIPE_MAX_GROUPS,
      /* AVG divides the result after the rounds: nothing of it may be
       * copied back before */
      .h2d_at_end = call->op == SHARC_AVG && sched_coll_reduces(call->coll),
  };
  int ok = devpipe_plan(s, &a, pipe) == SHARC_OK;
  if (ok && pipe->nd2h <= 1 && pipe->nh2d <= 1) {
    devpipe_free(pipe);
    ok = 0;
  }
  if (!ok)
    sched_free(s);
  return ok;
}

/* Queues pipe's copies of call on the CUDA stream: each D2H group then an
 * event (at least one: the host collective runs after the work queued
 * before it), then per H2D group a release wait and its copies (at least
 * one wait: the next call's copies must not overwrite staging in use). */
static sharc_status_t queue_copies(dev_stream_t *ds, coll_call_t *call,
                                   const plan_t *p, const devpipe_t *pipe,
                                   sched_t *sched, dev_work_t *w,
                                   const char *fn) {
  uint8_t *stage = ds->stage;
  size_t nev = pipe->nd2h ? pipe->nd2h : 1;
  size_t nwait = pipe->nh2d ? pipe->nh2d : 1;
  dev_pipe_t *pp = NULL;
  cudaEvent_t ev0 = NULL;
  sharc_status_t st = SHARC_OK;
  cudaError_t e;
  if ((nev > 1 || nwait > 1) && !(pp = pipe_new(ds, nev - 1, nwait - 1)))
    return err_set(SHARC_ERR_NO_MEM, "%s on a CUDA stream: out of memory", fn);
  if (pp) { /* the schedule the copies are planned on: the worker runs it */
    pp->sched = *sched;
    sched_init(sched);
  }
  for (size_t g = 0; g < nev; g++) {
    const devpipe_group_t *gr = g < pipe->nd2h ? &pipe->d2h[g] : NULL;
    for (size_t i = 0; gr && i < gr->npieces; i++) {
      const devpipe_piece_t *pc = &pipe->pieces[gr->first + i];
      e = cudaMemcpyAsync(stage + pc->off, p->s + (pc->off - p->l.d2h_off),
                          pc->len, cudaMemcpyDefault, ds->cs);
      if (e != cudaSuccess) {
        st = gs_cuda_fail(e, fn, "copying the send buffer to staging");
        goto fail;
      }
    }
    cudaEvent_t ev;
    CHECK_GOTO(gs_get_event(ds, fn, &ev), st, fail);
    if (g == 0) {
      ev0 = ev;
    } else {
      pp->ev[g - 1] = ev;
      pp->ev_round[g - 1] = gr->round;
      pp->nev = g;
    }
    e = cudaEventRecord(ev, ds->cs);
    if (e != cudaSuccess) {
      st = gs_cuda_fail(e, fn, "cudaEventRecord");
      goto fail;
    }
  }
  uint32_t seq = ds->next_seq + 1;
  CHECK_GOTO(gs_queue_release_wait(ds, seq, fn), st, fail);
  /* From here the CUDA stream waits for seq: the worker must release it,
   * so every outcome hands *w to the worker. */
  ds->next_seq = seq;
  w->ds = ds;
  w->fn = fn;
  w->event = ev0;
  w->seq = seq;
  staged_bufs(p, stage, &call->sendbuf, &call->recvbuf);
  if (pp) { /* the worker runs it through this path (staged_run) */
    pp->seq_first = seq;
    pp->comm = call->comm;
    w->finish = pipe_finish;
    w->state = pp;
    call->path = &gpu_path_staged.call;
    call->path_arg = pp;
  }
  for (size_t j = 0; j < nwait && st == SHARC_OK; j++) {
    if (j > 0) {
      if ((st = gs_queue_release_wait(ds, seq + (uint32_t)j, fn)) != SHARC_OK)
        break;
      ds->next_seq = w->seq = seq + (uint32_t)j;
      pp->rel_round[j - 1] = pipe->h2d[j - 1].round; /* no longer the last */
      pp->nrel = j;
    }
    const devpipe_group_t *gr = j < pipe->nh2d ? &pipe->h2d[j] : NULL;
    for (size_t i = 0; gr && i < gr->npieces && st == SHARC_OK; i++) {
      const devpipe_piece_t *pc = &pipe->pieces[gr->first + i];
      e = cudaMemcpyAsync(p->r + (pc->off - p->l.h2d_off), stage + pc->off,
                          pc->len, cudaMemcpyDefault, ds->cs);
      if (e != cudaSuccess)
        st = gs_cuda_fail(e, fn, "copying the result from staging");
    }
  }
  if (st != SHARC_OK) { /* the worker skips the call and releases */
    w->err = st;
    snprintf(w->msg, sizeof w->msg, "%s", err_last());
  }
  TRACE(SUB_CUDA, "%s #%u: %zu bytes staged, D2H %zu in %zu, H2D %zu in %zu",
        fn, seq, p->l.stage_bytes, p->l.d2h_bytes, nev, p->l.h2d_bytes, nwait);
  return st;
fail:
  if (ev0)
    gs_put_event(ds, ev0);
  pipe_free(pp);
  return st;
}

/* A batch of sends and receives (SCHED_P2P): each transfer on device
 * memory gets its own stretch of staging; the D2H copies of the sends, the
 * event, the release wait and the H2D copies of the receives are queued as
 * for a collective, and the batch's buffers become the staged ones, so the
 * worker runs the host batch on them. Host buffers stay where they are. */
static sharc_status_t staged_p2p(dev_stream_t *ds, coll_call_t *call,
                                 dev_work_t *w, const char *fn) {
  call_p2p_t *b = call->p2p;
  size_t total = 0;
  size_t *off = malloc(b->n * sizeof *off);
  if (!off)
    return err_set(SHARC_ERR_NO_MEM, "%s on a CUDA stream: out of memory", fn);
  for (size_t i = 0; i < b->n; i++) {
    const call_p2p_op_t *o = &b->ops[i];
    off[i] = SIZE_MAX; /* host memory: not staged */
    if (!dev_is_device_ptr(o->buf))
      continue;
    off[i] = (total + 63) & ~(size_t)63;
    total = off[i] + o->count * sharc_dtype_size(o->dtype);
  }
  sharc_status_t st = gs_ensure_stage(ds, total ? total : 1, fn);
  cudaError_t e;
  for (size_t i = 0; i < b->n && st == SHARC_OK; i++) {
    const call_p2p_op_t *o = &b->ops[i];
    if (off[i] == SIZE_MAX || !o->send)
      continue;
    e = cudaMemcpyAsync((uint8_t *)ds->stage + off[i], o->buf,
                        o->count * sharc_dtype_size(o->dtype),
                        cudaMemcpyDefault, ds->cs);
    if (e != cudaSuccess)
      st = gs_cuda_fail(e, fn, "copying a send buffer to staging");
  }
  /* The event and the release wait; from here the worker must see the
   * call (it releases the CUDA stream). */
  if (st == SHARC_OK)
    st = gs_mark(ds, w, fn);
  if (st != SHARC_OK) {
    free(off);
    return st;
  }
  for (size_t i = 0; i < b->n && st == SHARC_OK; i++) {
    call_p2p_op_t *o = &b->ops[i];
    if (off[i] == SIZE_MAX)
      continue;
    if (!o->send) {
      e = cudaMemcpyAsync(o->buf, (uint8_t *)ds->stage + off[i],
                          o->count * sharc_dtype_size(o->dtype),
                          cudaMemcpyDefault, ds->cs);
      if (e != cudaSuccess)
        st = gs_cuda_fail(e, fn, "copying a received buffer from staging");
    }
    o->buf = (uint8_t *)ds->stage + off[i];
  }
  if (st != SHARC_OK) { /* the worker skips the call and releases */
    w->err = st;
    snprintf(w->msg, sizeof w->msg, "%s", err_last());
  }
  TRACE(SUB_CUDA, "%s #%u: %zu transfers, %zu bytes staged", fn, w->seq, b->n,
        total);
  free(off);
  return st;
}

static sharc_status_t staged_stage(dev_stream_t *ds, coll_call_t *call,
                                   dev_work_t *w, const char *fn,
                                   call_now_fn now) {
  (void)now;
  if (call->coll == SCHED_P2P)
    return staged_p2p(ds, call, w, fn);
  if (sr_takes(call)) /* the reduction on the GPU (staged_reduce.c) */
    return sr_stage(ds, call, w, fn);
  plan_t p;
  plan_call(call, &p);
  CHECK(gs_ensure_stage(ds, p.l.stage_bytes, fn));
  /* One copy each way unless planning per round pays (devpipe.h). */
  devpipe_group_t dg = {0, 0, 1, p.l.d2h_bytes}, hg = {0, 1, 1, p.l.h2d_bytes};
  devpipe_piece_t pcs[2] = {{p.l.d2h_off, p.l.d2h_bytes},
                            {p.l.h2d_off, p.l.h2d_bytes}};
  devpipe_t whole = {.d2h = &dg,
                     .h2d = &hg,
                     .nd2h = p.l.d2h_bytes > 0,
                     .nh2d = p.l.h2d_bytes > 0,
                     .pieces = pcs,
                     .npieces = 2};
  devpipe_t pipe;
  sched_t sched; /* the pipelined call's, moved into its worker state */
  sched_init(&sched);
  int piped = plan_pipe(call, &p, ds->stage, &pipe, &sched);
  sharc_status_t st =
      queue_copies(ds, call, &p, piped ? &pipe : &whole, &sched, w, fn);
  sched_free(&sched); /* empty unless queue_copies did not take it */
  if (piped)
    devpipe_free(&pipe);
  return st;
}

static int staged_takes(const coll_call_t *call) {
  (void)call;
  return 1;
}

const gpu_path_t gpu_path_staged = {
    .call = {.name = "staged", .run = staged_run},
    .no_capture =
        "a host thread runs each call's collective on pinned host memory",
    .takes = staged_takes,
    .check_env = sr_check_env,
    .stage = staged_stage,
};

#else /* !SHARC_HAVE_CUDA */

const gpu_path_t gpu_path_staged = {.call = {.name = "staged"},
                                    .check_env = sr_check_env};

#endif /* SHARC_HAVE_CUDA */

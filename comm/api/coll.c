/*
 * coll.c - the public collectives: check arguments, pick an algorithm, and
 * run the schedule now (stream NULL) or enqueue it on a host stream.
 *
 * Order: every call takes a ticket from its communicator when it is issued;
 * execution serves tickets in order, so collectives enqueued on different
 * streams still run in the same order on every rank.
 */
#include "coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "check.h"
#include "cost.h"
#include "dispatch.h"
#include "exec.h"
#include "gpu.h" /* dev_first_device_ptr */
#include "group_rec.h"
#include "reduce.h"
#include "registry.h"
#include "stream.h"

uint64_t coll_ticket(struct sharc_comm *comm) {
  return atomic_fetch_add(&comm->next_ticket, 1);
}

/* Sleeps until ready(comm, arg). A waiter counts itself in order_waiters
 * before it reads the turn, and the passer reads order_waiters after it
 * advanced the turn (both sequentially consistent): one of them sees the
 * other's write, so either the waiter sees its turn or the passer
 * broadcasts, under the lock the waiter holds until it sleeps. */
static void wait_until(struct sharc_comm *comm,
                       int (*ready)(struct sharc_comm *, uint64_t),
                       uint64_t arg) {
  if (ready(comm, arg))
    return;
  pthread_mutex_lock(&comm->order_lock);
  atomic_fetch_add(&comm->order_waiters, 1);
  while (!ready(comm, arg))
    pthread_cond_wait(&comm->order_cond, &comm->order_lock);
  atomic_fetch_sub(&comm->order_waiters, 1);
  pthread_mutex_unlock(&comm->order_lock);
}

static int is_turn(struct sharc_comm *comm, uint64_t ticket) {
  return atomic_load(&comm->serving) == ticket;
}

static int drained(struct sharc_comm *comm, uint64_t unused) {
  (void)unused;
  return atomic_load(&comm->serving) == atomic_load(&comm->next_ticket);
}

static void wait_turn(struct sharc_comm *comm, uint64_t ticket) {
  wait_until(comm, is_turn, ticket);
}

static void pass_turn(struct sharc_comm *comm) {
  atomic_fetch_add(&comm->serving, 1);
  if (atomic_load(&comm->order_waiters) > 0) {
    pthread_mutex_lock(&comm->order_lock);
    pthread_cond_broadcast(&comm->order_cond);
    pthread_mutex_unlock(&comm->order_lock);
  }
}

/* A collective that did not run here takes its number all the same: it
 * ran on the device (the direct path, whose enqueue left nothing for the
 * stream's worker) or not at all (an earlier error on its stream), and the
 * ranks that ran it counted it. So sequence numbers, SHARC_CHECK's
 * messages, the flight recorder and the laggard reports stay aligned
 * across ranks and paths: before this, device collectives were all #0. */
void coll_skip(coll_call_t *call) {
  struct sharc_comm *comm = call->comm;
  wait_turn(comm, call->ticket);
  if (call->coll != SCHED_P2P) {
    transport_publish_progress(comm, comm->seq + 1, comm->seq + 1);
    atomic_store_explicit(&comm->seq, comm->seq + 1, memory_order_relaxed);
  }
  pass_turn(comm);
  free(call->p2p);
  call->p2p = NULL;
}

void coll_drain(struct sharc_comm *comm) { wait_until(comm, drained, 0); }

static sharc_status_t ensure_tmp(struct sharc_comm *comm, size_t bytes) {
  if (bytes <= comm->tmp_bytes)
    return SHARC_OK;
  void *p = realloc(comm->tmp, bytes);
  if (!p)
    return comm_error(comm, SHARC_ERR_NO_MEM,
                      "scratch buffer of %zu bytes: out of memory", bytes);
  comm->tmp = p;
  comm->tmp_bytes = bytes;
  return SHARC_OK;
}

/* Builds the schedule of call with algo into *built and caches it unless
 * it is large; *out: the schedule to run (in the cache or *built, which
 * the caller frees either way). */
static sharc_status_t build_schedule(coll_call_t *call, const sched_key_t *key,
                                     sched_algo_t algo, sched_t *built,
                                     const sched_t **out) {
  struct sharc_comm *comm = call->comm;
  sched_args_t args = call_args(call, key);
  sharc_status_t st = sched_build(algo, &args, built); /* finishes it */
  if (st != SHARC_OK)
    return comm_error(comm, st, "%s: building the %s schedule failed: %s",
                      sched_coll_fn(call->coll), sched_algo_name(algo),
                      err_last());
  *out = built;
  if (built->nops <= SCHED_CACHE_MAX_OPS)
    *out = &sched_cache_put(&comm->sched_cache, key, algo, built)->sched;
  return SHARC_OK;
}

/* Runs call's schedule: given (planned by a path at enqueue: the same
 * choice, built once), else the cached one (hit) or one built with algo;
 * hook around its rounds (may be NULL); now_ns: a time_ns() just read, or
 * 0; key: the call's, needed only to build. No recorder entry of its own:
 * the caller's entry (comm->rec_cur) shows what it waits on. */
static sharc_status_t run_sched(coll_call_t *call, const sched_key_t *key,
                                size_t esize, const sched_cache_slot_t *hit,
                                sched_algo_t algo, const sched_t *given,
                                exec_hook_t *hook, uint64_t now_ns) {
  struct sharc_comm *comm = call->comm;
  sched_t built; /* a schedule built now; freed below unless cached */
  const sched_t *s = given ? given : hit ? &hit->sched : NULL;
  sharc_status_t st = SHARC_OK;
  if (!s) {
    sched_init(&built);
    st = build_schedule(call, key, algo, &built, &s);
  }
  if (st == SHARC_OK && s->tmp_count)
    st = ensure_tmp(comm, s->tmp_count * esize);
  if (st == SHARC_OK) {
    void *const bufs[3] = {(void *)call->sendbuf, call->recvbuf, comm->tmp};
    TRACE(SUB_COMM, "%s #%llu: %zu x %s, %s, %zu rounds",
          sched_coll_fn(call->coll), (unsigned long long)comm->seq, call->count,
          sharc_dtype_name(call->dtype), sched_algo_name(algo), s->nrounds);
    st = exec_run_at(comm, s, bufs, call->dtype, call->op,
                     now_ns ? now_ns : time_ns(), hook);
  }
  if (!given && !hit)
    sched_free(&built);
  /* AVG: the sum divided where a result lies (reduce: the root only) */
  if (st == SHARC_OK && call->op == SHARC_AVG &&
      sched_coll_reduces(call->coll) &&
      (call->coll != SCHED_REDUCE || comm->rank == call->root))
    kernel_div(call->dtype, call->recvbuf, call->count, comm->nranks);
  return st;
}

/* The host collective of call as a path runs it (call_host_fn): part of
 * the user's call, so it runs under the user's recorder entry. */
static sharc_status_t run_host(coll_call_t *call, const sched_t *sched,
                               exec_hook_t *hook) {
  size_t esize = sharc_dtype_size(call->dtype);
  sched_key_t key = call_key(call, esize);
  const sched_cache_slot_t *hit =
      sched_cache_get(&call->comm->sched_cache, &key);
  sched_algo_t algo =
      hit ? hit->algo
          : call_pick_algo(call->comm, call->coll, call->count * esize);
  return run_sched(call, &key, esize, hit, algo, sched, hook, 0);
}

/* A batch of sends and receives (SCHED_P2P); buffer i of the schedule is
 * transfer i's. A batch of up to SCHED_KEY_P2P transfers (a send/recv
 * loop's) reuses its schedule from the communicator's cache, keyed by the
 * transfers; the arrays of a small batch live on the stack. */
#define P2P_STACK 8
static sharc_status_t run_p2p(coll_call_t *call) {
  struct sharc_comm *comm = call->comm;
  const call_p2p_t *b = call->p2p;
  sched_p2p_t ops_s[P2P_STACK];
  void *bufs_s[SCHED_BUF_P2P + P2P_STACK];
  int small = b->n <= P2P_STACK;
  sched_p2p_t *ops = small ? ops_s : malloc(b->n * sizeof *ops);
  void **bufs = small ? bufs_s : malloc((SCHED_BUF_P2P + b->n) * sizeof *bufs);
  sched_t built;
  sched_init(&built);
  sharc_status_t st = SHARC_OK;
  if (!ops || !bufs) {
    st = comm_error(comm, SHARC_ERR_NO_MEM,
                    "sharc_send/sharc_recv: out of memory for %zu transfers",
                    b->n);
    goto out;
  }
  bufs[SCHED_BUF_SEND] = bufs[SCHED_BUF_RECV] = bufs[SCHED_BUF_TMP] = NULL;
  for (size_t i = 0; i < b->n; i++) {
    const call_p2p_op_t *o = &b->ops[i];
    ops[i] =
        (sched_p2p_t){o->send, o->peer, o->count * sharc_dtype_size(o->dtype)};
    bufs[SCHED_BUF_P2P + i] = o->buf;
  }
  sched_key_t key = {.coll = SCHED_P2P, .count = call->count, .esize = 1};
  int cacheable = b->n <= SCHED_KEY_P2P;
  const sched_cache_slot_t *hit = NULL;
  if (cacheable) {
    key.np2p = (int)b->n;
    memcpy(key.p2p, ops, b->n * sizeof *ops);
    hit = sched_cache_get(&comm->sched_cache, &key);
  }
  const sched_t *s = hit ? &hit->sched : NULL;
  if (!s && !call->path) {
    st = sched_p2p_build(ops, b->n, comm->rank, comm->nchan, 262144, &built);
    if (st != SHARC_OK) {
      st = comm_record(comm, st, "sharc_send/sharc_recv: %s", err_last());
      goto out;
    }
    s = cacheable ? &sched_cache_put(&comm->sched_cache, &key,
                                     SCHED_ALGO_DIRECT, &built)
                         ->sched
                  : &built;
  }
  rec_entry_t *rec = rec_start(&comm->rec, (int)SCHED_P2P, (int)SHARC_U8,
                               (int)SHARC_SUM, (int)SCHED_ALGO_DIRECT,
                               b->a2av ? REC_ROOT_A2AV : -1, call->count, 0);
  atomic_store_explicit(&comm->rec_cur, rec, memory_order_release);
  if (comm->cfg.check) /* SHARC_CHECK=1: each pair agrees before data moves */
    st = check_p2p(call);
  if (st == SHARC_OK && call->path) /* a GPU path moves the data itself */
    st = call->path->run(call, run_host);
  else if (st == SHARC_OK)
    st = exec_run_at(
        comm, s, bufs, SHARC_U8, SHARC_SUM,
        comm->cfg.check
            ? time_ns()
            : atomic_load_explicit(&rec->t_start_ns, memory_order_relaxed),
        NULL);
  atomic_store_explicit(&comm->rec_cur, NULL, memory_order_release);
  rec_end(rec, st);
  check_fail(comm, st); /* after rec_end: the recorder shows it failed */
out:
  sched_free(&built);
  if (!small) {
    free(ops);
    free(bufs);
  }
  return st;
}

static sharc_status_t run_call(coll_call_t *call) {
  struct sharc_comm *comm = call->comm;
  if (call->coll == SCHED_P2P)
    return run_p2p(call);
  size_t esize = dtype_bytes(call->dtype);
  /* A call shape that ran recently brings its algorithm and schedule; the
   * call that ran last, without building its key. */
  sched_call_sig_t sig = {call->coll,  call->dtype,   call->root,
                          call->count, call->sendbuf, call->recvbuf};
  sched_key_t key; /* built on a miss only */
  const sched_cache_slot_t *hit = sched_cache_get_sig(&comm->sched_cache, &sig);
  if (!hit) {
    key = call_key(call, esize);
    hit = sched_cache_get(&comm->sched_cache, &key);
    if (hit)
      sched_cache_memo(&comm->sched_cache, &sig, hit);
  }
  sched_algo_t algo =
      hit ? hit->algo : call_pick_algo(comm, call->coll, call->count * esize);
  rec_entry_t *rec =
      rec_start(&comm->rec, (int)call->coll, (int)call->dtype, (int)call->op,
                (int)algo, call->root, call->count, call->issued_ns);
  atomic_store_explicit(&comm->rec_cur, rec, memory_order_release);
  if (comm->cfg.check) { /* SHARC_CHECK=1: all ranks agree before data moves */
    sharc_status_t cst = check_call(call, sched_coll_fn(call->coll));
    if (cst != SHARC_OK) {
      atomic_store_explicit(&comm->rec_cur, NULL, memory_order_release);
      rec_end(rec, cst);
      check_fail(comm, cst); /* after rec_end: the recorder shows it failed */
      return cst;
    }
  }
  sharc_status_t st;
  if (call->path) { /* a GPU path: it runs the host steps it needs */
    st = call->path->run(call, run_host);
  } else {
    /* With nothing in between, the recorder's start time is the time now
     * (one clock read fewer per call on the small-message path). */
    uint64_t now =
        hit && !comm->cfg.check
            ? atomic_load_explicit(&rec->t_start_ns, memory_order_relaxed)
            : 0;
    st = run_sched(call, &key, esize, hit, algo, NULL, NULL, now);
  }
  atomic_store_explicit(&comm->rec_cur, NULL, memory_order_release);
  rec_end(rec, st);
  return st;
}

/* call fails fast: its communicator failed (comm_fail_as, for a job
 * failure or SHARC_CHECK's agreed mismatch). */
static sharc_status_t unusable(coll_call_t *call) {
  struct sharc_comm *comm = call->comm;
  pthread_mutex_lock(&comm->err_lock);
  char msg[sizeof comm->unusable_msg];
  snprintf(msg, sizeof msg, "%s", comm->unusable_msg);
  sharc_status_t st = comm->unusable_st;
  pthread_mutex_unlock(&comm->err_lock);
  return comm_record(comm, st, "%s: communicator unusable: %s",
                     sched_coll_fn(call->coll), msg);
}

sharc_status_t coll_execute(coll_call_t *call) {
  struct sharc_comm *comm = call->comm;
  wait_turn(comm, call->ticket);
  sharc_status_t st;
  /* Only a batch's ranks take part in it: no collective sequence number. */
  int p2p = call->coll == SCHED_P2P;
  /* unusable: set by comm_fail_as, for a job failure or for SHARC_CHECK's
   * agreed mismatch (check_fail) */
  if (atomic_load(&comm->unusable)) {
    st = unusable(call);
  } else if (p2p) {
    st = run_call(call);
  } else {
    transport_publish_progress(comm, comm->seq + 1, comm->seq);
    st = run_call(call);
    transport_publish_progress(comm, comm->seq + 1, comm->seq + 1);
  }
  if (!p2p)
    atomic_store_explicit(&comm->seq, comm->seq + 1, memory_order_relaxed);
  free(call->p2p);
  call->p2p = NULL;
  pass_turn(comm);
  return st;
}

/* Argument checks shared by every collective; the message names the
 * argument, the value and what to pass instead. */
static sharc_status_t validate(const coll_call_t *c) {
  struct sharc_comm *comm = c->comm;
  if (!comm)
    return err_set(SHARC_ERR_INVALID_ARG, "%s: comm is NULL",
                   sched_coll_fn(c->coll));
  if ((unsigned)c->dtype >= SHARC_DTYPE_COUNT)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: unknown dtype %d; use SHARC_F32 .. SHARC_U64",
                      sched_coll_fn(c->coll), (int)c->dtype);
  if (sched_coll_reduces(c->coll) && (unsigned)c->op >= SHARC_OP_COUNT)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: unknown reduction op %d; use SHARC_SUM, SHARC_PROD, "
                      "SHARC_MIN, SHARC_MAX or SHARC_AVG",
                      sched_coll_fn(c->coll), (int)c->op);
  if (sched_coll_rooted(c->coll) && (c->root < 0 || c->root >= comm->nranks))
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: root %d outside the communicator of %d ranks",
                      sched_coll_fn(c->coll), c->root, comm->nranks);
  if (c->coll == SCHED_BARRIER || c->count == 0)
    return SHARC_OK;
  size_t esize = dtype_bytes(c->dtype);
  size_t per = (c->coll == SCHED_ALL_GATHER ||
                c->coll == SCHED_REDUCE_SCATTER || c->coll == SCHED_GATHER ||
                c->coll == SCHED_SCATTER || c->coll == SCHED_ALL_TO_ALL)
                   ? (size_t)comm->nranks
                   : 1;
  size_t total; /* no division on every call's path */
  if (__builtin_mul_overflow(c->count, esize, &total) ||
      __builtin_mul_overflow(total, per, &total))
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: count %zu x %zu ranks x %zu bytes overflows the "
                      "address space",
                      sched_coll_fn(c->coll), c->count, per, esize);
  int root = comm->rank == c->root;
  int need_send =
      root || !(c->coll == SCHED_BROADCAST || c->coll == SCHED_SCATTER);
  int need_recv = root || !(c->coll == SCHED_REDUCE || c->coll == SCHED_GATHER);
  if (need_send && !c->sendbuf)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: sendbuf is NULL with count %zu%s",
                      sched_coll_fn(c->coll), c->count,
                      sched_coll_rooted(c->coll) ? " on the root" : "");
  if (need_recv && !c->recvbuf)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: recvbuf is NULL with count %zu%s",
                      sched_coll_fn(c->coll), c->count,
                      sched_coll_rooted(c->coll) ? " on the root" : "");
  if (need_send && need_recv && !call_inplace(c, esize)) {
    int a2a = c->coll == SCHED_ALL_TO_ALL;
    int sblocks =
        a2a || c->coll == SCHED_REDUCE_SCATTER || c->coll == SCHED_SCATTER;
    int rblocks = a2a || c->coll == SCHED_ALL_GATHER || c->coll == SCHED_GATHER;
    size_t sbytes = c->count * esize * (sblocks ? per : 1);
    size_t rbytes = c->count * esize * (rblocks ? per : 1);
    uintptr_t s0 = (uintptr_t)c->sendbuf, r0 = (uintptr_t)c->recvbuf;
    if (s0 < r0 + rbytes && r0 < s0 + sbytes)
      return comm_error(comm, SHARC_ERR_INVALID_ARG,
                        "%s: sendbuf and recvbuf overlap but not in the "
                        "in-place layout; see sharc.h for where an in-place "
                        "sendbuf lies",
                        sched_coll_fn(c->coll));
  }
  return SHARC_OK;
}

sharc_status_t coll_check_host_memory(struct sharc_comm *comm, const char *fn,
                                      const void *a, const char *a_name,
                                      const void *b, const char *b_name,
                                      sharc_stream_t stream) {
  if (stream_is_bound(stream))
    return SHARC_OK;
  const char *const name[] = {NULL, a_name, b_name};
  const char *which = name[dev_first_device_ptr(a, b)];
  if (!which)
    return SHARC_OK;
  return comm_error(comm, SHARC_ERR_INVALID_ARG,
                    "%s: %s is device memory, but the call is on %s; pass a "
                    "stream made by sharc_stream_create_cuda for device "
                    "buffers",
                    fn, which,
                    stream ? "a host stream" : "no stream (blocking)");
}

/* call_now_fn: h's host collective in call's turn, on this thread (h
 * NULL: only the wait for the turn; h == call: SHARC_CHECK's agreement on
 * call). */
static sharc_status_t coll_now(coll_call_t *call, coll_call_t *h) {
  struct sharc_comm *comm = call->comm;
  wait_turn(comm, call->ticket);
  if (atomic_load(&comm->unusable))
    return unusable(call);
  if (!h)
    return SHARC_OK;
  if (call->coll != SCHED_P2P) /* entered, for the peers' laggard reports */
    transport_publish_progress(comm, comm->seq + 1, comm->seq);
  rec_entry_t *rec =
      rec_start(&comm->rec, (int)call->coll, (int)call->dtype, (int)call->op,
                (int)SCHED_ALGO_DIRECT, call->root, call->count, 0);
  atomic_store_explicit(&comm->rec_cur, rec, memory_order_release);
  sharc_status_t st = h == call ? check_call(call, sched_coll_fn(call->coll))
                                : run_host(h, NULL, NULL);
  atomic_store_explicit(&comm->rec_cur, NULL, memory_order_release);
  rec_end(rec, st);
  if (h == call)
    check_fail(comm, st); /* after rec_end: the recorder shows it failed */
  return st;
}

/* How a host stream's worker runs the collectives enqueued on it. */
static const stream_ops_t coll_stream_ops = {coll_execute, coll_skip, coll_now};

sharc_status_t coll_issue(coll_call_t *call, sharc_stream_t stream) {
  call->ticket = coll_ticket(call->comm);
  if (stream) {
    call->issued_ns = 0; /* its recorder entry starts when it runs */
    return stream_enqueue(stream, call, &coll_stream_ops);
  }
  return coll_execute(call);
}

static sharc_status_t submit(coll_call_t *call, sharc_stream_t stream) {
  CHECK(validate(call));
  if (call->count == 0 && call->coll != SCHED_BARRIER)
    return SHARC_OK;
  if (call->coll != SCHED_BARRIER && !stream_is_bound(stream)) {
    /* One clock read for the device-pointer check and the recorder entry
     * of a call that runs now (coll_issue). */
    call->issued_ns = time_coarse_ns();
    if (dev_first_device_ptr_at(call->sendbuf, call->recvbuf, call->issued_ns))
      CHECK(coll_check_host_memory(call->comm, sched_coll_fn(call->coll),
                                   call->sendbuf, "sendbuf", call->recvbuf,
                                   "recvbuf", stream));
  }
  if (group_active()) { /* recorded; sharc_group_end issues it */
    call->issued_ns = 0;
    return group_add(call, stream);
  }
  return coll_issue(call, stream);
}

/* One call of the API: the collective, its arguments, then submit. */
static sharc_status_t call(sched_coll_t coll, const void *sendbuf,
                           void *recvbuf, size_t count, sharc_dtype_t dtype,
                           sharc_op_t op, int root, sharc_comm_t comm,
                           sharc_stream_t stream) {
  coll_call_t c = {.coll = coll,
                   .sendbuf = sendbuf,
                   .recvbuf = recvbuf,
                   .count = count,
                   .dtype = dtype,
                   .op = op,
                   .root = root,
                   .comm = comm};
  return submit(&c, stream);
}

sharc_status_t sharc_all_gather(const void *sendbuf, void *recvbuf,
                                size_t sendcount, sharc_dtype_t dtype,
                                sharc_comm_t comm, sharc_stream_t stream) {
  return call(SCHED_ALL_GATHER, sendbuf, recvbuf, sendcount, dtype, SHARC_SUM,
              0, comm, stream);
}

sharc_status_t sharc_reduce_scatter(const void *sendbuf, void *recvbuf,
                                    size_t recvcount, sharc_dtype_t dtype,
                                    sharc_op_t op, sharc_comm_t comm,
                                    sharc_stream_t stream) {
  return call(SCHED_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0,
              comm, stream);
}

sharc_status_t sharc_all_reduce(const void *sendbuf, void *recvbuf,
                                size_t count, sharc_dtype_t dtype,
                                sharc_op_t op, sharc_comm_t comm,
                                sharc_stream_t stream) {
  return call(SCHED_ALL_REDUCE, sendbuf, recvbuf, count, dtype, op, 0, comm,
              stream);
}

sharc_status_t sharc_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                               sharc_dtype_t dtype, int root, sharc_comm_t comm,
                               sharc_stream_t stream) {
  return call(SCHED_BROADCAST, sendbuf, recvbuf, count, dtype, SHARC_SUM, root,
              comm, stream);
}

sharc_status_t sharc_reduce(const void *sendbuf, void *recvbuf, size_t count,
                            sharc_dtype_t dtype, sharc_op_t op, int root,
                            sharc_comm_t comm, sharc_stream_t stream) {
  return call(SCHED_REDUCE, sendbuf, recvbuf, count, dtype, op, root, comm,
              stream);
}

sharc_status_t sharc_gather(const void *sendbuf, void *recvbuf, size_t count,
                            sharc_dtype_t dtype, int root, sharc_comm_t comm,
                            sharc_stream_t stream) {
  return call(SCHED_GATHER, sendbuf, recvbuf, count, dtype, SHARC_SUM, root,
              comm, stream);
}

sharc_status_t sharc_scatter(const void *sendbuf, void *recvbuf, size_t count,
                             sharc_dtype_t dtype, int root, sharc_comm_t comm,
                             sharc_stream_t stream) {
  return call(SCHED_SCATTER, sendbuf, recvbuf, count, dtype, SHARC_SUM, root,
              comm, stream);
}

sharc_status_t sharc_all_to_all(const void *sendbuf, void *recvbuf,
                                size_t count, sharc_dtype_t dtype,
                                sharc_comm_t comm, sharc_stream_t stream) {
  return call(SCHED_ALL_TO_ALL, sendbuf, recvbuf, count, dtype, SHARC_SUM, 0,
              comm, stream);
}

sharc_status_t sharc_barrier(sharc_comm_t comm, sharc_stream_t stream) {
  return call(SCHED_BARRIER, NULL, NULL, 1, SHARC_U8, SHARC_SUM, 0, comm,
              stream);
}

/*
 * group.c - point-to-point calls (sharc_send, sharc_recv) and groups
 * (sharc_group_start / sharc_group_end), see sharc.h.
 *
 * A send or receive outside a group is a batch of one transfer, issued as a
 * call of its own (SCHED_P2P: ticketed in its communicator's order like a
 * collective, but only its two ranks take part). Inside a group every call
 * is checked when it is posted, then recorded on the thread's open group;
 * the outermost sharc_group_end issues them per communicator (a lane): the
 * lane's collectives in posting order, then one batch per stream of all its
 * sends and receives, in which every transfer progresses at once. Lanes
 * with a call that may wait for its peers while it is issued (a blocking
 * call; on a CUDA stream, a device path's setup) run on a thread each, so
 * a group spanning communicators cannot deadlock on the order its ranks
 * posted them in, nor one thread driving several ranks.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "group_rec.h"
#include "stream.h"

/* Issues the batch of n transfers ops (copied) on comm and stream; a2av:
 * it is one sharc_all_to_allv call. */
static sharc_status_t issue_batch(struct sharc_comm *comm,
                                  sharc_stream_t stream,
                                  const call_p2p_op_t *const *ops, size_t n,
                                  int a2av) {
  call_p2p_t *b = malloc(sizeof *b + n * sizeof b->ops[0]);
  if (!b)
    return comm_error(comm, SHARC_ERR_NO_MEM,
                      "sharc_send/sharc_recv: out of memory for %zu "
                      "transfers",
                      n);
  b->n = n;
  b->a2av = a2av;
  size_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    b->ops[i] = *ops[i];
    bytes += ops[i]->count * sharc_dtype_size(ops[i]->dtype);
  }
  coll_call_t c = {.coll = SCHED_P2P,
                   .dtype = SHARC_U8,
                   .op = SHARC_SUM,
                   .root = -1,
                   .count = bytes,
                   .comm = comm,
                   .p2p = b};
  return coll_issue(&c, stream);
}

/* The checks of one send or receive, the message naming the argument. */
static sharc_status_t p2p_validate(const char *fn, const void *buf,
                                   size_t count, sharc_dtype_t dtype, int peer,
                                   struct sharc_comm *comm,
                                   sharc_stream_t stream) {
  if (!comm)
    return err_set(SHARC_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: unknown dtype %d; use SHARC_F32 .. SHARC_U64", fn,
                      (int)dtype);
  if (peer < 0 || peer >= comm->nranks)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: peer %d outside the communicator of %d ranks", fn,
                      peer, comm->nranks);
  if (count > SIZE_MAX / sharc_dtype_size(dtype))
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: count %zu x %zu bytes overflows the address space",
                      fn, count, sharc_dtype_size(dtype));
  if (count == 0)
    return SHARC_OK;
  if (!buf)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: buf is NULL with count %zu", fn, count);
  return coll_check_host_memory(comm, fn, buf, "buf", NULL, NULL, stream);
}

static sharc_status_t p2p_post(int send, const void *buf, size_t count,
                               sharc_dtype_t dtype, int peer,
                               struct sharc_comm *comm, sharc_stream_t stream) {
  const char *fn = send ? "sharc_send" : "sharc_recv";
  sharc_status_t st = p2p_validate(fn, buf, count, dtype, peer, comm, stream);
  if (st != SHARC_OK)
    return group_fail(st);
  if (count == 0)
    return SHARC_OK; /* both sides drop it alike */
  call_p2p_op_t op = {.send = send,
                      .peer = peer,
                      .dtype = dtype,
                      .buf = (void *)buf,
                      .count = count};
  if (peer == comm->rank && !group_active())
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: peer %d is this rank; a transfer with itself "
                      "needs its matching %s from itself in the same group "
                      "(sharc_group_start/end)",
                      fn, peer, send ? "sharc_recv" : "sharc_send");
  if (group_active()) {
    group_item_t it = {.p2p = 1, .op = op, .comm = comm, .stream = stream};
    return group_push(&it);
  }
  const call_p2p_op_t *one = &op;
  return issue_batch(comm, stream, &one, 1, 0);
}

sharc_status_t sharc_send(const void *buf, size_t count, sharc_dtype_t dtype,
                          int peer, sharc_comm_t comm, sharc_stream_t stream) {
  return p2p_post(1, buf, count, dtype, peer, comm, stream);
}

sharc_status_t sharc_recv(void *buf, size_t count, sharc_dtype_t dtype,
                          int peer, sharc_comm_t comm, sharc_stream_t stream) {
  return p2p_post(0, buf, count, dtype, peer, comm, stream);
}

sharc_status_t sharc_all_to_allv(const void *sendbuf, const size_t *sendcounts,
                                 const size_t *sdispls, void *recvbuf,
                                 const size_t *recvcounts,
                                 const size_t *rdispls, sharc_dtype_t dtype,
                                 sharc_comm_t comm, sharc_stream_t stream) {
  static const char fn[] = "sharc_all_to_allv";
  if (!comm)
    return group_fail(err_set(SHARC_ERR_INVALID_ARG, "%s: comm is NULL", fn));
  if (!sendcounts || !sdispls || !recvcounts || !rdispls)
    return group_fail(comm_error(comm, SHARC_ERR_INVALID_ARG,
                                 "%s: a count or displacement array is NULL; "
                                 "pass %d entries each",
                                 fn, comm->nranks));
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT)
    return group_fail(comm_error(comm, SHARC_ERR_INVALID_ARG,
                                 "%s: unknown dtype %d; use SHARC_F32 .. "
                                 "SHARC_U64",
                                 fn, (int)dtype));
  int n = comm->nranks, me = comm->rank;
  size_t es = sharc_dtype_size(dtype);
  /* regions in bytes, for the range and overlap checks */
  uintptr_t s0 = (uintptr_t)sendbuf, r0 = (uintptr_t)recvbuf;
  size_t send_end = 0, recv_end = 0;
  for (int p = 0; p < n; p++) {
    const size_t *c[2] = {&sendcounts[p], &recvcounts[p]};
    const size_t *d[2] = {&sdispls[p], &rdispls[p]};
    for (int k = 0; k < 2; k++) {
      if (*c[k] == 0)
        continue;
      if (*c[k] > SIZE_MAX / es || *d[k] > SIZE_MAX / es - *c[k])
        return group_fail(comm_error(
            comm, SHARC_ERR_INVALID_ARG,
            "%s: %s %zu + count %zu for rank %d overflows the address space",
            fn, k ? "rdispls" : "sdispls", *d[k], *c[k], p));
      size_t end = (*d[k] + *c[k]) * es;
      if (k)
        recv_end = end > recv_end ? end : recv_end;
      else
        send_end = end > send_end ? end : send_end;
    }
  }
  if ((send_end && !sendbuf) || (recv_end && !recvbuf))
    return group_fail(comm_error(comm, SHARC_ERR_INVALID_ARG,
                                 "%s: %s is NULL with nonzero counts", fn,
                                 send_end && !sendbuf ? "sendbuf" : "recvbuf"));
  if (send_end && recv_end && s0 < r0 + recv_end && r0 < s0 + send_end)
    return group_fail(comm_error(comm, SHARC_ERR_INVALID_ARG,
                                 "%s: sendbuf and recvbuf overlap; it does "
                                 "not run in place: pass separate buffers",
                                 fn));
  sharc_status_t st = coll_check_host_memory(comm, fn, sendbuf, "sendbuf",
                                             recvbuf, "recvbuf", stream);
  if (st != SHARC_OK)
    return group_fail(st);
  call_p2p_op_t *ops = malloc(2 * (size_t)n * sizeof *ops);
  const call_p2p_op_t **refs = malloc(2 * (size_t)n * sizeof *refs);
  if (!ops || !refs) {
    free(ops);
    free(refs);
    return group_fail(
        comm_error(comm, SHARC_ERR_NO_MEM, "%s: out of memory", fn));
  }
  /* send to r+k, receive from r-k: every rank starts with different peers;
   * empty transfers are left out on both sides alike */
  size_t m = 0;
  for (int k = 0; k < n; k++) {
    int to = (me + k) % n, from = (me - k + n) % n;
    if (sendcounts[to])
      ops[m++] = (call_p2p_op_t){
          1, to, dtype, (uint8_t *)sendbuf + sdispls[to] * es, sendcounts[to]};
    if (recvcounts[from])
      ops[m++] = (call_p2p_op_t){0, from, dtype,
                                 (uint8_t *)recvbuf + rdispls[from] * es,
                                 recvcounts[from]};
  }
  st = SHARC_OK;
  if (group_active()) {
    for (size_t i = 0; i < m && st == SHARC_OK; i++) {
      group_item_t it = {
          .p2p = 1, .op = ops[i], .comm = comm, .stream = stream};
      st = group_push(&it);
    }
  } else if (m) {
    for (size_t i = 0; i < m; i++)
      refs[i] = &ops[i];
    st = issue_batch(comm, stream, refs, m, 1);
  }
  free(ops);
  free(refs);
  return st;
}

sharc_status_t sharc_group_start(void) {
  group_rec_open();
  return SHARC_OK;
}

sharc_status_t sharc_group_cancel(void) { return group_rec_cancel(); }

/* One communicator's share of a group, issued in order by one thread. */
typedef struct {
  struct sharc_comm *comm;
  const group_item_t *items; /* the group's, in posting order */
  size_t nitems;
  int blocking; /* holds a call that may wait for peers while issued */
  pthread_t thread;
  int threaded;
  sharc_status_t st;
  char msg[512];
} lane_t;

static void lane_note(lane_t *l, sharc_status_t st) {
  if (st != SHARC_OK && l->st == SHARC_OK) {
    l->st = st;
    snprintf(l->msg, sizeof l->msg, "%s", err_last());
  }
}

static void *lane_run(void *arg) {
  lane_t *l = arg;
  const group_item_t *it = l->items;
  for (size_t i = 0; i < l->nitems; i++) /* collectives first, in order */
    if (it[i].comm == l->comm && !it[i].p2p) {
      coll_call_t c = it[i].call;
      lane_note(l, coll_issue(&c, it[i].stream));
    }
  /* a small group's list on the stack (a send/recv loop's) */
  const call_p2p_op_t *ops_s[16];
  const call_p2p_op_t **ops =
      l->nitems <= 16 ? ops_s : malloc(l->nitems * sizeof *ops);
  if (!ops) {
    lane_note(l, comm_error(l->comm, SHARC_ERR_NO_MEM,
                            "sharc_group_end: out of memory"));
    return NULL;
  }
  /* then one batch per stream, streams in order of first appearance */
  for (size_t i = 0; i < l->nitems; i++) {
    if (it[i].comm != l->comm || !it[i].p2p)
      continue;
    int first = 1;
    for (size_t j = 0; j < i && first; j++)
      first =
          !(it[j].comm == l->comm && it[j].p2p && it[j].stream == it[i].stream);
    if (!first)
      continue;
    size_t n = 0;
    for (size_t j = i; j < l->nitems; j++)
      if (it[j].comm == l->comm && it[j].p2p && it[j].stream == it[i].stream)
        ops[n++] = &it[j].op;
    lane_note(l, issue_batch(l->comm, it[i].stream, ops, n, 0));
  }
  if (ops != ops_s)
    free(ops);
  return NULL;
}

sharc_status_t sharc_group_end(void) {
  int outer;
  group_item_t *items;
  size_t n;
  CHECK(group_rec_close(&outer, &items, &n));
  if (!outer || n == 0) {
    group_rec_recycle(items);
    return SHARC_OK;
  }
  /* at most one lane per item; a group of few items keeps them here */
  lane_t lanes_s[4];
  lane_t *lanes = n <= 4 ? lanes_s : calloc(n, sizeof *lanes);
  if (!lanes) {
    group_rec_recycle(items);
    return err_set(SHARC_ERR_NO_MEM, "sharc_group_end: out of memory");
  }
  size_t nl = 0, nblocking = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l = 0;
    while (l < nl && lanes[l].comm != items[i].comm)
      l++;
    if (l == nl) { /* msg is written only with a failure */
      lane_t *nlane = &lanes[nl++];
      nlane->comm = items[i].comm;
      nlane->items = items;
      nlane->nitems = n;
      nlane->blocking = nlane->threaded = 0;
      nlane->st = SHARC_OK;
    }
    /* Blocking: a call with no stream, or one on a CUDA-bound stream,
     * whose enqueue may wait for the peers (a device path's one-time
     * setup, SHARC_CHECK's agreement). */
    if ((!items[i].stream || stream_is_bound(items[i].stream)) &&
        !lanes[l].blocking) {
      lanes[l].blocking = 1;
      nblocking++;
    }
  }
  /* Lanes that only enqueue first, so that no blocking call here waits on
   * a peer that waits on them; then the blocking lanes, all but the last
   * on a thread of their own when there are several (one that cannot get
   * a thread runs here). */
  for (size_t l = 0; l < nl; l++)
    if (!lanes[l].blocking)
      lane_run(&lanes[l]);
  size_t spawned = 0;
  for (size_t l = 0; l < nl && spawned + 1 < nblocking; l++)
    if (lanes[l].blocking) {
      spawned++;
      lanes[l].threaded =
          pthread_create(&lanes[l].thread, NULL, lane_run, &lanes[l]) == 0;
    }
  for (size_t l = 0; l < nl; l++)
    if (lanes[l].blocking && !lanes[l].threaded)
      lane_run(&lanes[l]);
  sharc_status_t st = SHARC_OK;
  char msg[512] = "";
  for (size_t l = 0; l < nl; l++) {
    if (lanes[l].threaded)
      pthread_join(lanes[l].thread, NULL);
    if (lanes[l].st != SHARC_OK && st == SHARC_OK) {
      st = lanes[l].st;
      snprintf(msg, sizeof msg, "%s", lanes[l].msg);
    }
  }
  if (lanes != lanes_s)
    free(lanes);
  group_rec_recycle(items);
  if (st != SHARC_OK)
    return err_record(st, "%s", msg);
  return SHARC_OK;
}

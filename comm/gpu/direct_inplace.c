/*
 * direct_inplace.c - the direct GPU path reading its peers' buffers in
 * place (direct.h has the protocol): which calls exchange their buffers,
 * the exchange in the call's turn, the choice every rank makes alike from
 * what every rank offered, and the mappings of the peers' allocations
 * (ipc_map.c's cache, shared with the IPC path).
 */
#include "direct.h"
#include "ipc_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SHARC_HAVE_CUDA

/* The call's size as nccl-tests counts it: all-gather's recvbuf,
 * reduce-scatter's sendbuf, the one buffer of the others. */
static size_t call_size(const devcomm_t *dc, const coll_call_t *call) {
  size_t cb = call->count * sharc_dtype_size(call->dtype);
  int spread =
      call->coll == SCHED_ALL_GATHER || call->coll == SCHED_REDUCE_SCATTER;
  return spread ? cb * (size_t)dc->n : cb;
}

/* 1 if size reaches threshold t (t < 0: never). */
static int reaches(size_t size, int64_t t) {
  return t >= 0 && size >= (uint64_t)t;
}

int di_wants(const devcomm_t *dc, const coll_call_t *call) {
  switch (call->coll) {
  case SCHED_ALL_GATHER:
  case SCHED_BROADCAST:
  case SCHED_REDUCE_SCATTER:
  case SCHED_ALL_REDUCE:
    break;
  default:
    return 0;
  }
  size_t size = call_size(dc, call);
  /* SHARC_CUDA_INPLACE_BYTES=-1: never, whatever the other says */
  return dc->n > 1 && dc->inplace_bytes[0] >= 0 &&
         (reaches(size, dc->inplace_bytes[0]) ||
          reaches(size, dc->inplace_bytes[1]));
}

void di_clear(dq_inplace_t *ip) {
  free(ip->send);
  free(ip->recv);
  free(ip->held);
  memset(ip, 0, sizeof *ip);
}

/* What a rank offers: its buffers, and whether each is aligned to the
 * element (the reduction kernel reads and writes whole elements). */
typedef struct {
  ipc_desc_t d;
  int32_t misaligned[NBUF];
} di_desc_t;

/* Whether rank p's buffer b is read by the others. */
static int read_by_peers(const coll_call_t *call, int b, int p) {
  return ipc_peers_read(call, b, p);
}

/* Why the call cannot run in place, from every rank's descriptor (the same
 * answer on every rank), or NULL; *reg: every buffer read is registered. */
static const char *refusal(const devcomm_t *dc, const coll_call_t *call,
                           const di_desc_t *all, int *reg) {
  int kernel =
      call->coll == SCHED_REDUCE_SCATTER || call->coll == SCHED_ALL_REDUCE;
  *reg = 1;
  for (int p = 0; p < dc->n; p++)
    for (int b = 0; b < NBUF; b++) {
      const ipc_buf_t *d = &all[p].d.buf[b];
      if (kernel && all[p].misaligned[b])
        return "a buffer the reduction reads or writes is not aligned to "
               "its element type";
      if (read_by_peers(call, b, p)) {
        if (d->state != BS_OK)
          return d->state == BS_HOST      ? "a buffer the peers read is host "
                                            "memory"
                 : d->state == BS_MANAGED ? "a buffer the peers read is "
                                            "managed memory"
                                          : "a buffer the peers read cannot "
                                            "be shared through CUDA IPC";
        *reg &= d->reg;
      }
      if (b == BUF_RECV && kernel && d->state != BS_OK && d->state != BS_LOCAL)
        return "a recvbuf the reduction writes is not device memory";
    }
  return NULL;
}

/* Every rank's status (int32) through the host transport: the first rank
 * that failed, or -1 when none did; an error when the exchange failed. */
static sharc_status_t first_failed(devcomm_t *dc, coll_call_t *call,
                                   call_now_fn now, sharc_status_t mine,
                                   int32_t *all, int *who) {
  int32_t me = (int32_t)mine;
  sharc_status_t st = dc_gather_now(call, now, &me, all, sizeof me);
  *who = -1;
  for (int p = 0; st == SHARC_OK && p < dc->n && *who < 0; p++)
    if (all[p] != SHARC_OK)
      *who = p;
  return st;
}

/* Maps the peers' buffers the call reads into ip; a failure is described
 * in msg. */
static sharc_status_t map_peers(devcomm_t *dc, const coll_call_t *call,
                                const di_desc_t *all, dq_inplace_t *ip,
                                char *msg, size_t msg_n) {
  pid_t self = getpid();
  for (int p = 0; p < dc->n; p++)
    if (p != dc->rank)
      ipc_map_expire(&all[p].d);
  ip->send[dc->rank] = call->sendbuf;
  ip->recv[dc->rank] = call->recvbuf;
  for (int p = 0; p < dc->n; p++) {
    for (int b = 0; b < NBUF && p != dc->rank; b++) {
      if (!read_by_peers(call, b, p))
        continue;
      const ipc_buf_t *d = &all[p].d.buf[b];
      const ipc_desc_t *o = &all[p].d;
      const uint8_t *ptr;
      if (o->pid == (int64_t)self && o->nonce == gs_process_nonce()) {
        ptr = (const uint8_t *)(uintptr_t)(d->base + d->off);
      } else {
        char why[256] = "";
        map_slot_t *m =
            ipc_map_get(&d->handle, dc->device, d->reg, o, why, sizeof why);
        if (!m) {
          snprintf(msg, msg_n, "mapping rank %d's %s: %s", p,
                   b == BUF_SEND ? "sendbuf" : "recvbuf", why);
          return SHARC_ERR_CUDA;
        }
        ip->held[ip->nheld++] = m;
        ptr = (const uint8_t *)m->ptr + d->off;
      }
      if (b == BUF_SEND)
        ip->send[p] = ptr;
      else
        ip->recv[p] = ptr;
    }
  }
  return SHARC_OK;
}

/* Puts ip's mappings back and forgets the in-place choice. */
static void drop(dq_inplace_t *ip) {
  for (int i = 0; i < ip->nheld; i++)
    ipc_map_put(ip->held[i]);
  di_clear(ip);
}

/* An allocation failed before or between the exchanges: this rank cannot
 * take part, and its peers wait in them, so the communicator fails. */
static sharc_status_t no_mem(struct sharc_comm *comm, const char *fn) {
  sharc_status_t st =
      comm_error(comm, SHARC_ERR_NO_MEM,
                 "%s on a CUDA stream (direct path): out of memory", fn);
  comm_fail(comm, comm->rank, st, sharc_comm_last_error(comm));
  return st;
}

sharc_status_t di_prepare(devcomm_t *dc, coll_call_t *call, call_now_fn now,
                          const char *fn, dq_inplace_t *ip) {
  memset(ip, 0, sizeof *ip);
  struct sharc_comm *comm = call->comm;
  int n = dc->n, r = dc->rank;
  size_t esize = sharc_dtype_size(call->dtype), cb = call->count * esize;
  di_desc_t *all = calloc((size_t)n, sizeof *all);
  int32_t *status = calloc((size_t)n, sizeof *status);
  ip->send = calloc((size_t)n, sizeof *ip->send);
  ip->recv = calloc((size_t)n, sizeof *ip->recv);
  ip->held = calloc(2 * (size_t)n, sizeof *ip->held);
  if (!all || !status || !ip->send || !ip->recv || !ip->held) {
    free(all);
    free(status);
    di_clear(ip);
    return no_mem(comm, fn);
  }
  di_desc_t mine;
  memset(&mine, 0, sizeof mine);
  /* the epoch first: a deregistration after it shows in the next call */
  mine.d.epoch = mem_dev_epoch();
  const void *bufs[NBUF] = {call->sendbuf, call->recvbuf};
  size_t len[NBUF] = {call->coll == SCHED_REDUCE_SCATTER ? cb * (size_t)n : cb,
                      call->coll == SCHED_ALL_GATHER ? cb * (size_t)n : cb};
  for (int b = 0; b < NBUF; b++)
    if (!(b == BUF_SEND && call->coll == SCHED_BROADCAST && r != call->root)) {
      ipc_share(bufs[b], len[b], read_by_peers(call, b, r), &mine.d.buf[b]);
      mine.misaligned[b] = (uintptr_t)bufs[b] % esize != 0;
    }
  mine.d.sig = ipc_signature(call);
  mine.d.pid = (int64_t)getpid();
  mine.d.nonce = gs_process_nonce();
  sharc_status_t st = dc_gather_now(call, now, &mine, all, sizeof mine);
  for (int p = 0; st == SHARC_OK && p < n; p++)
    if (memcmp(&all[p].d.sig, &mine.d.sig, sizeof mine.d.sig)) {
      /* every rank sees it and refuses alike: nothing is queued anywhere */
      st = comm_error(
          comm, SHARC_ERR_MISMATCH,
          "%s on a CUDA stream (direct path): rank %d called %s with count "
          "%llu, dtype %d, op %d, root %d; this rank: count %zu, dtype %d, "
          "op %d, root %d; every rank must make the same call",
          fn, p, sched_coll_fn((uint32_t)all[p].d.sig.coll % SCHED_COLL_COUNT),
          (unsigned long long)all[p].d.sig.count, all[p].d.sig.dtype,
          all[p].d.sig.op, all[p].d.sig.root, call->count, (int)call->dtype,
          mine.d.sig.op, mine.d.sig.root);
    }
  int reg = 0;
  size_t size = call_size(dc, call);
  const char *why = st == SHARC_OK ? refusal(dc, call, all, &reg) : NULL;
  if (st == SHARC_OK && !why && !reaches(size, dc->inplace_bytes[1]) &&
      !(reg && reaches(size, dc->inplace_bytes[0])))
    why = reg ? "below SHARC_CUDA_INPLACE_BYTES"
              : "a buffer the peers read is not registered, and the call is "
                "below SHARC_CUDA_INPLACE_UNREG_BYTES";
  if (st != SHARC_OK || why) {
    if (why)
      TRACE(SUB_CUDA, "%s: %zu bytes through the slots: %s", fn, size, why);
    free(all);
    free(status);
    di_clear(ip);
    return st;
  }
  char msg[320] = "";
  sharc_status_t mapped = map_peers(dc, call, all, ip, msg, sizeof msg);
  free(all);
  int who = -1;
  st = first_failed(dc, call, now, mapped, status, &who);
  free(status);
  if (st != SHARC_OK || who >= 0) {
    if (who == r)
      INFO(SUB_CUDA, "%s (direct path): %s; the call goes through the slots",
           fn, msg);
    else if (who >= 0)
      TRACE(SUB_CUDA,
            "%s: %zu bytes through the slots: rank %d could not map its "
            "peers' buffers",
            fn, size, who);
    drop(ip);
    return st;
  }
  TRACE(SUB_CUDA, "%s: %zu bytes in place (%s buffers)", fn, size,
        reg ? "registered" : "unregistered");
  return SHARC_OK;
}

#endif /* SHARC_HAVE_CUDA */

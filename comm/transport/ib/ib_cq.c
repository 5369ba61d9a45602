/*
 * ib_cq.c - the ib transport's completions, handled by its progress thread
 * (ib.c): each pair's CQ drained when the completion channel fires (data
 * writes done, writes with immediate arrived: data, WANT, WAKE) and the
 * device's async events (port down, QP and CQ errors). Split from ib.c;
 * the design is described there.
 */
#ifdef SHARC_HAVE_IBVERBS /* else ib_none.c */

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "ib_verbs.h"

/* ---- completions (progress thread) ----------------------------------------
 */

static const char *wr_what(int kind) {
  return kind == WR_RECV   ? "a receive"
         : kind == WR_DATA ? "an RDMA write"
                           : "a credit message";
}

static void wc_error(ib_pair_t *p, const struct ibv_wc *wc) {
  struct ib_state *st = p->st;
  int ps = ctrl_peer_state(st->ctrl, p->peer);
  /* Flushes follow an error reported already, or our own teardown; a peer
   * that left or died is reported through its control socket. */
  if (wc->status == IBV_WC_WR_FLUSH_ERR || ps == CTRL_PEER_BYE ||
      ps == CTRL_PEER_LOST || atomic_load(&st->stop)) {
    TRACE(SUB_NET, "ib: rank %d: %s completed with %s (ignored)", p->peer,
          wr_what(WR_KIND(wc->wr_id)), ibv_wc_status_str(wc->status));
    if (wc->status != IBV_WC_WR_FLUSH_ERR)
      atomic_store(&p->state, P_FAILED);
    return;
  }
  int retry = wc->status == IBV_WC_RETRY_EXC_ERR;
  char hint[200] = "";
  if (retry)
    snprintf(hint, sizeof hint,
             "; the peer stopped answering: it died, or its port or the path "
             "is down (retried SHARC_IB_RETRY_CNT=%d times, %.2f s each by "
             "SHARC_IB_TIMEOUT=%d)",
             st->retry, 4.096e-6 * (double)(1u << st->timeout), st->timeout);
  else if (wc->status == IBV_WC_REM_ACCESS_ERR ||
           wc->status == IBV_WC_LOC_PROT_ERR)
    snprintf(hint, sizeof hint, "; a memory key was refused (a sharc bug)");
  ib_pair_fail(p, SHARC_ERR_NET, retry ? p->peer : -1,
               "ib: %s port %d: %s to rank %d (host %s, pid %d) on channel %d "
               "failed: %s (status %d, vendor error 0x%x)%s",
               st->dev.name, st->dev.port, wr_what(WR_KIND(wc->wr_id)), p->peer,
               host_of(st, p->peer), st->comm->peers[p->peer].pid, p->chan,
               ibv_wc_status_str(wc->status), (int)wc->status, wc->vendor_err,
               hint);
}

/* Under p->lock. Returns 1 when the executor should look again. */
static int on_recv(ib_pair_t *p, int q, uint32_t imm) {
  struct ib_state *st = p->st;
  int rc = ib_post_recv(p, q);
  if (rc) {
    ib_pair_fail(p, SHARC_ERR_NET, -1,
                 "ib: %s: reposting a receive for rank %d failed: %s",
                 st->dev.name, p->peer, strerror(rc));
    return 1;
  }
  p->got_rtr = 1; /* the peer writes: its QPs are past RTR */
  uint32_t v = imm & M30;
  switch (imm >> 30) {
  case IMM_DATA: {
    uint64_t tail = atomic_load(&p->rx_tail);
    uint64_t pre = ib_order_arrive(&p->rxo, q, unwrap30(p->rxo.prefix, v));
    if (pre == UINT64_MAX || pre - tail > st->fifo) {
      ib_pair_fail(p, SHARC_ERR_NET, p->peer,
                   "ib: rank %d (host %s) overran the receive FIFO of channel "
                   "%d (protocol error)",
                   p->peer, host_of(st, p->peer), p->chan);
      return 1;
    }
    atomic_store_explicit(&p->rx_head, pre, memory_order_release);
    return 1;
  }
  case IMM_WANT:
    /* Dekker with ib_recv_release: announce, then look at the tail. */
    atomic_store(&p->peer_wants, 1);
    if ((((uint32_t)atomic_load(&p->rx_credited) & M30) != v ||
         atomic_load(&p->rx_tail) != atomic_load(&p->rx_credited)) &&
        atomic_exchange(&p->peer_wants, 0))
      p->need_wake = 1;
    ib_ctl_flush(p);
    return 0;
  case IMM_WAKE: {
    uint64_t a = atomic_load(&p->tx_acked), w = unwrap30(a, v);
    if (w - a <= st->fifo)
      atomic_store(&p->tx_acked, w);
    p->want_out = 0;
    ib_tx_pump(p);
    return 1;
  }
  }
  ib_pair_fail(p, SHARC_ERR_NET, p->peer,
               "ib: rank %d sent an unknown immediate 0x%x (protocol error)",
               p->peer, imm);
  return 1;
}

/* Drains p's CQ. Returns 1 when the executor should look again. */
static int poll_pair(ib_pair_t *p) {
  struct ibv_wc wc[16];
  int n, woke = 0;
  while ((n = ibv_poll_cq(p->cq, 16, wc)) > 0) {
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < n; i++) {
      int kind = WR_KIND(wc[i].wr_id), q = WR_QP(wc[i].wr_id);
      if (wc[i].status != IBV_WC_SUCCESS) {
        if (kind != WR_RECV)
          p->sq_used[q]--;
        wc_error(p, &wc[i]);
        woke = 1;
      } else if (kind == WR_RECV) {
        woke |= on_recv(p, q, ntohl(wc[i].imm_data));
      } else if (kind == WR_DATA) {
        p->sq_used[q]--;
        atomic_store(&p->tx_done, ib_order_done(&p->txo, q));
        ib_tx_pump(p);
        woke = 1;
      } else {
        p->sq_used[q]--;
        ib_ctl_flush(p);
      }
    }
    pthread_mutex_unlock(&p->lock);
  }
  if (n < 0) {
    pthread_mutex_lock(&p->lock);
    ib_pair_fail(p, SHARC_ERR_NET, -1,
                 "ib: %s: polling the CQ of rank %d failed", p->st->dev.name,
                 p->peer);
    pthread_mutex_unlock(&p->lock);
    woke = 1;
  }
  return woke;
}

void ib_drain_cq_events(struct ib_state *st) {
  struct ibv_cq *cq;
  void *ctx;
  int woke = 0;
  while (ibv_get_cq_event(st->chan, &cq, &ctx) == 0) {
    ib_pair_t *p = ctx;
    if (++p->cq_unacked >= 64) { /* acks take a mutex: batch them */
      ibv_ack_cq_events(cq, p->cq_unacked);
      p->cq_unacked = 0;
    }
    /* Re-arm first, then poll empty: a completion in between raises a new
     * event instead of being missed. */
    if (ibv_req_notify_cq(cq, 0)) {
      pthread_mutex_lock(&p->lock);
      ib_pair_fail(p, SHARC_ERR_NET, -1,
                   "ib: %s: cannot re-arm the CQ of rank %d", st->dev.name,
                   p->peer);
      pthread_mutex_unlock(&p->lock);
    }
    woke |= poll_pair(p);
  }
  if (woke)
    comm_wake(st->comm);
}

void ib_drain_async(struct ib_state *st) {
  struct ibv_async_event ev;
  char why[400];
  while (ibv_get_async_event(st->dev.ctx, &ev) == 0) {
    enum ibv_event_type t = ev.event_type;
    const char *name = ibv_event_type_str(t);
    if ((t == IBV_EVENT_PORT_ERR && ev.element.port_num == st->dev.port) ||
        t == IBV_EVENT_DEVICE_FATAL) {
      snprintf(why, sizeof why,
               "ib: %s port %d: %s: the link is lost; check the cable and "
               "switch port (ibstat, ibv_devinfo)",
               st->dev.name, st->dev.port, name);
      comm_fail(st->comm, -1, SHARC_ERR_NET, why);
    } else if (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
               t == IBV_EVENT_QP_ACCESS_ERR || t == IBV_EVENT_CQ_ERR) {
      ib_pair_t *p = t == IBV_EVENT_CQ_ERR ? ev.element.cq->cq_context
                                           : ev.element.qp->qp_context;
      pthread_mutex_lock(&p->lock);
      if (ctrl_peer_state(st->ctrl, p->peer) != CTRL_PEER_BYE)
        ib_pair_fail(p, SHARC_ERR_NET, -1,
                     "ib: %s port %d: %s on the %s to rank %d (host %s), "
                     "channel %d",
                     st->dev.name, st->dev.port, name,
                     t == IBV_EVENT_CQ_ERR ? "CQ" : "QP", p->peer,
                     host_of(st, p->peer), p->chan);
      pthread_mutex_unlock(&p->lock);
    } else {
      INFO(SUB_NET, "ib: %s: async event %s", st->dev.name, name);
    }
    ibv_ack_async_event(&ev);
  }
}

#endif /* SHARC_HAVE_IBVERBS */

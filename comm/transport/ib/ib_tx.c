/*
 * ib_tx.c - the sending side of the ib transport: RDMA writes of data and
 * control words (credits, WANT and WAKE), the credit the peer has granted,
 * and a pair's failure. Called by the data path (ib.c) and by the
 * completions (ib_cq.c); calls neither.
 */
#ifdef SHARC_HAVE_IBVERBS /* else ib_none.c */

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "ib_verbs.h"

void ib_kick(struct ib_state *st) {
  uint64_t one = 1;
  ssize_t r = write(st->efd, &one, sizeof one);
  (void)r; /* EAGAIN: a wake-up is pending already */
}

/* Under p->lock. Marks the pair failed and the communicator with it. */
void ib_pair_fail(ib_pair_t *p, sharc_status_t s, int failed_rank,
                  const char *fmt, ...) {
  if (atomic_exchange(&p->state, P_FAILED) == P_FAILED)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err, sizeof p->err, fmt, ap);
  va_end(ap);
  comm_fail(p->st->comm, failed_rank, s, p->err);
}

/* ---- posting (under p->lock) -------------------------------------------- */

/* One signaled RDMA write of len bytes from laddr (len 0: none) to the
 * peer's rx ring at offset roff; with the immediate when kind != WR_CREDIT
 * (then the target is the peer's control block). */
static int post_write(ib_pair_t *p, int q, int kind, const void *laddr,
                      uint32_t lkey, size_t len, uint64_t roff, uint32_t imm) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)laddr, (uint32_t)len, lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = WR_ID(kind, q);
  wr.sg_list = len ? &sge : NULL;
  wr.num_sge = len ? 1 : 0;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (kind == WR_CREDIT) {
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = p->remote.ctl_addr;
    wr.wr.rdma.rkey = p->remote.ctl_rkey;
  } else {
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = p->remote.rx_addr + roff;
    wr.wr.rdma.rkey = p->remote.rx_rkey;
  }
  int rc = ibv_post_send(p->qp[q], &wr, &bad);
  if (rc) {
    struct ib_state *st = p->st;
    ib_pair_fail(p, SHARC_ERR_NET, -1,
                 "ib: %s port %d: posting a write to rank %d (host %s) on QP "
                 "%d failed: %s (%d of %d send entries in use)",
                 st->dev.name, st->dev.port, p->peer, host_of(st, p->peer), q,
                 strerror(rc), p->sq_used[q], p->sq_depth);
    return rc;
  }
  p->sq_used[q]++;
  return 0;
}

/* The consumed count the peer reported, from WAKEs and the credit word. */
uint64_t ib_credit_now(ib_pair_t *p) {
  uint64_t a = atomic_load(&p->tx_acked);
  /* written by the NIC (one aligned 4-byte DMA write): an atomic load */
  uint64_t w = unwrap32(
      a, __atomic_load_n((uint32_t *)&p->ctl->credit, __ATOMIC_RELAXED));
  return w - a <= p->st->fifo ? w : a; /* a word older than a WAKE: ignore */
}

/* Posts the control writes that are due and fit in QP 0's send queue. The
 * peer must be past RTR: its "rtr" or any write from it says so. */
void ib_ctl_flush(ib_pair_t *p) {
  struct ib_state *st = p->st;
  int s = atomic_load(&p->state);
  if (s == P_FAILED || s == P_INIT || !p->got_rtr ||
      ctrl_peer_state(st->ctrl, p->peer) == CTRL_PEER_BYE)
    return; /* nobody to tell after a goodbye */
  if (p->need_want && !p->want_out && p->sq_used[0] < p->sq_depth) {
    uint32_t seen = (uint32_t)atomic_load(&p->tx_acked) & M30;
    if (post_write(p, 0, WR_WANT, NULL, 0, 0, 0, IMM_WANT << 30 | seen))
      return;
    p->want_out = 1;
    p->need_want = 0;
    atomic_fetch_add(&st->n_want, 1);
  }
  if (p->need_wake && p->sq_used[0] < p->sq_depth) {
    uint64_t tail = atomic_load(&p->rx_tail);
    if (post_write(p, 0, WR_WAKE, NULL, 0, 0, 0,
                   IMM_WAKE << 30 | ((uint32_t)tail & M30)))
      return;
    p->need_wake = p->need_credit = 0;
    atomic_store(&p->rx_credited, tail);
    atomic_fetch_add(&st->n_wake, 1);
  }
  /* Leave two slots for a WANT and a WAKE. */
  if (p->need_credit && p->sq_used[0] < p->sq_depth - 2) {
    uint64_t tail = atomic_load(&p->rx_tail);
    /* The source is our own control block (registered): a later credit
     * may overwrite it before the NIC reads it, which only sends a newer
     * count. */
    uint32_t *src = (uint32_t *)(p->ctl->pad + 4);
    __atomic_store_n(src, (uint32_t)tail, __ATOMIC_RELAXED); /* NIC reads */
    if (post_write(p, 0, WR_CREDIT, (const void *)src, p->ctl_mr->lkey, 4, 0,
                   0))
      return;
    p->need_credit = 0;
    atomic_store(&p->rx_credited, tail);
    atomic_fetch_add(&st->n_credit, 1);
  }
}

/* Posts committed bytes as far as credit, the write window and the send
 * queues allow; asks for credit (WANT) when that is what blocks. */
void ib_tx_pump(ib_pair_t *p) {
  struct ib_state *st = p->st;
  if (atomic_load(&p->state) != P_READY)
    return;
  uint64_t acked = ib_credit_now(p);
  atomic_store(&p->tx_acked, acked);
  while (p->k_acked < p->k_posted && ib_order_end(&p->txo, p->k_acked) <= acked)
    p->k_acked++;
  uint64_t head = atomic_load(&p->tx_head);
  uint64_t limit = SHARC_MIN(head, acked + st->fifo);
  int credit_blocked = 0;
  while (p->tx_posted < limit) {
    if (p->k_posted - p->k_acked >= (uint64_t)p->txo.window) {
      credit_blocked = 1;
      break;
    }
    if (p->k_posted - p->txo.next >= (uint64_t)p->txo.window)
      break; /* local completions will come */
    int q = (int)(p->k_posted % (uint64_t)p->nqp);
    /* QP 0 keeps 8 send slots for control writes (credits, WANT, WAKE),
     * whatever was posted while data was scarce */
    if (p->sq_used[q] >= p->sq_depth - (q ? 0 : 8))
      break; /* local completions will come */
    uint64_t pos = p->tx_posted, off = pos & (st->fifo - 1);
    size_t len = SHARC_MIN(SHARC_MIN(limit - pos, st->fifo - off), st->chunk);
    const uint8_t *src = p->txbuf + off;
    uint32_t lkey = p->tx_mr->lkey;
    size_t bytes = len;
    if (p->zc.active && pos < p->zc.start) {
      len = bytes = SHARC_MIN(len, p->zc.start - pos);
    } else if (p->zc.active && pos < p->zc.data_end) {
      len = bytes = SHARC_MIN(len, p->zc.data_end - pos);
      src = p->zc.src + (pos - p->zc.start);
      lkey = p->zc.reg->lkey;
    } else if (p->zc.active) { /* alignment padding: nothing to carry */
      len = SHARC_MIN(limit, p->zc.end) - pos;
      bytes = 0;
    }
    uint64_t end = pos + len;
    ib_order_post(&p->txo, p->k_posted, end);
    if (post_write(p, q, WR_DATA, src, lkey, bytes, off,
                   IMM_DATA << 30 | ((uint32_t)end & M30)))
      return;
    p->k_posted++;
    p->tx_posted = end;
  }
  if (p->tx_posted < head && p->tx_posted >= acked + st->fifo)
    credit_blocked = 1;
  if (credit_blocked && !p->want_out)
    p->need_want = 1;
  ib_ctl_flush(p);
}

#endif /* SHARC_HAVE_IBVERBS */

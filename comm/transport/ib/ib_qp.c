/*
 * ib_qp.c - one pair's verbs resources and its QP state machine.
 *
 * Lifetime (ib_pair_create, reversed by ib_pair_destroy):
 *   rings and control block (page-aligned memory)
 *   -> memory regions: tx (local), rx and control block (remote write)
 *   -> CQ on the comm's completion channel, armed
 *   -> nqp RC QPs: RESET -> INIT (port, pkey 0, remote write allowed),
 *      receive queues filled
 * ib_pair_connect, once the peer's ib_info_t arrived:
 *   INIT -> RTR: path (LID, or GRH with the peer's GID on RoCE), MTU the
 *               smaller of both ports', the peer's QP number and PSN
 *   RTR -> RTS: our PSN, SHARC_IB_TIMEOUT, SHARC_IB_RETRY_CNT, RNR retry
 *               7 (receives are always posted ahead, see ib.c)
 * Destruction: QPs first (they reference the CQ and the MRs), then the CQ
 * once its completion events are acknowledged, then the MRs, then memory.
 * ibv_destroy_qp flushes outstanding work; nothing waits on the peer.
 */
#ifdef SHARC_HAVE_IBVERBS

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib_verbs.h"

/* Registration fails most often on the locked-memory limit: say so. */
static sharc_status_t reg_fail(ib_pair_t *p, const char *what, size_t bytes,
                               int err) {
  struct ib_state *st = p->st;
  return comm_error(
      st->comm, SHARC_ERR_NET,
      "ib: %s: registering the %s to rank %d (%zu bytes) failed: %s%s",
      st->dev.name, what, p->peer, bytes, strerror(err),
      err == ENOMEM || err == EPERM || err == EAGAIN
          ? "; raise the locked-memory limit (ulimit -l unlimited; Slurm: "
            "PropagateResourceLimits, containers: --ulimit memlock=-1) or "
            "lower SHARC_IB_FIFO_BYTES"
          : "");
}

int ib_post_recv(ib_pair_t *p, int q) {
  struct ibv_recv_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = WR_ID(WR_RECV, q);
  wr.sg_list = NULL; /* writes with immediate land in the rx ring */
  wr.num_sge = 0;
  return ibv_post_recv(p->qp[q], &wr, &bad);
}

static sharc_status_t qp_create(ib_pair_t *p, int q) {
  struct ib_state *st = p->st;
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.qp_context = p;
  ia.send_cq = p->cq;
  ia.recv_cq = p->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.sq_sig_all = 0; /* every post asks for its completion itself */
  ia.cap.max_send_wr = (uint32_t)p->sq_depth;
  ia.cap.max_recv_wr = (uint32_t)p->rq_depth;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  p->qp[q] = ibv_create_qp(st->dev.pd, &ia);
  if (!p->qp[q])
    return comm_error(st->comm, SHARC_ERR_NET,
                      "ib: %s: cannot create QP %d of %d to rank %d (%d send "
                      "and %d receive entries): %s; lower "
                      "SHARC_IB_QPS_PER_PEER or SHARC_NCHANNELS",
                      st->dev.name, q, p->nqp, p->peer, p->sq_depth,
                      p->rq_depth, strerror(errno));
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = (uint8_t)st->dev.port;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  int rc = ibv_modify_qp(p->qp[q], &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                             IBV_QP_ACCESS_FLAGS);
  if (rc)
    return comm_error(st->comm, SHARC_ERR_NET,
                      "ib: %s port %d: QP to rank %d: RESET -> INIT failed: "
                      "%s",
                      st->dev.name, st->dev.port, p->peer, strerror(rc));
  for (int i = 0; i < p->rq_depth; i++)
    if ((rc = ib_post_recv(p, q)) != 0)
      return comm_error(st->comm, SHARC_ERR_NET,
                        "ib: %s: posting receive %d of %d to rank %d failed: "
                        "%s",
                        st->dev.name, i, p->rq_depth, p->peer, strerror(rc));
  uint32_t rnd;
  random_bytes(&rnd, sizeof rnd);
  p->psn[q] = rnd & 0xffffff;
  return SHARC_OK;
}

sharc_status_t ib_pair_create(struct ib_state *st, int peer, int chan,
                              ib_pair_t **out) {
  sharc_status_t s = SHARC_OK;
  ib_pair_t *p = NULL;
  if (posix_memalign((void **)&p, 64, sizeof *p))
    return comm_error(st->comm, SHARC_ERR_NO_MEM, "ib: out of memory");
  memset(p, 0, sizeof *p);
  p->st = st;
  p->peer = peer;
  p->chan = chan;
  p->nqp = st->nqp;
  p->tx =
      (ib_conn_t){{.tp = st->vt, .peer = peer, .chan = chan, .is_send = 1}, p};
  p->rx =
      (ib_conn_t){{.tp = st->vt, .peer = peer, .chan = chan, .is_send = 0}, p};
  pthread_mutex_init(&p->lock, NULL);
  /* Per QP: IB_QP_WRITES data writes each way; on QP 0 also the control
   * writes (credit, want, wake), kept within the slack by ib.c. */
  p->sq_depth = IB_QP_WRITES + 8;
  p->rq_depth = IB_QP_WRITES + 4;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (posix_memalign((void **)&p->txbuf, page, st->fifo) ||
      posix_memalign((void **)&p->rxbuf, page, st->fifo) ||
      posix_memalign((void **)&p->ctl, page, sizeof *p->ctl) ||
      ib_order_init(&p->txo, p->nqp) != SHARC_OK ||
      ib_order_init(&p->rxo, p->nqp) != SHARC_OK) {
    s = comm_error(st->comm, SHARC_ERR_NO_MEM,
                   "ib: out of memory for the FIFOs to rank %d (2 x %zu "
                   "bytes)",
                   peer, st->fifo);
    goto fail;
  }
  memset(p->ctl, 0, sizeof *p->ctl);
  int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (!(p->tx_mr = ibv_reg_mr(st->dev.pd, p->txbuf, st->fifo,
                              IBV_ACCESS_LOCAL_WRITE))) {
    s = reg_fail(p, "send FIFO", st->fifo, errno);
    goto fail;
  }
  if (!(p->rx_mr = ibv_reg_mr(st->dev.pd, p->rxbuf, st->fifo, acc))) {
    s = reg_fail(p, "receive FIFO", st->fifo, errno);
    goto fail;
  }
  if (!(p->ctl_mr = ibv_reg_mr(st->dev.pd, p->ctl, sizeof *p->ctl, acc))) {
    s = reg_fail(p, "credit word", sizeof *p->ctl, errno);
    goto fail;
  }
  int cqe = p->nqp * (p->sq_depth + p->rq_depth);
  p->cq = ibv_create_cq(st->dev.ctx, cqe, p, st->chan, 0);
  if (!p->cq) {
    s = comm_error(st->comm, SHARC_ERR_NET,
                   "ib: %s: cannot create a CQ of %d entries for rank %d: %s",
                   st->dev.name, cqe, peer, strerror(errno));
    goto fail;
  }
  if (ibv_req_notify_cq(p->cq, 0)) {
    s = comm_error(st->comm, SHARC_ERR_NET,
                   "ib: %s: cannot arm the CQ for rank %d", st->dev.name, peer);
    goto fail;
  }
  for (int q = 0; q < p->nqp; q++)
    CHECK_GOTO(qp_create(p, q), s, fail);
  *out = p;
  return SHARC_OK;
fail:
  ib_pair_destroy(p);
  return s;
}

void ib_pair_info(const ib_pair_t *p, ib_info_t *out) {
  const struct ib_state *st = p->st;
  memset(out, 0, sizeof *out);
  out->chan = (uint32_t)p->chan;
  out->nqp = (uint32_t)p->nqp;
  for (int q = 0; q < p->nqp; q++) {
    out->qpn[q] = p->qp[q]->qp_num;
    out->psn[q] = p->psn[q];
  }
  memcpy(out->gid, st->dev.gid, 16);
  out->lid = st->dev.lid;
  out->global = (uint8_t)st->dev.global;
  out->mtu = (uint8_t)st->dev.mtu;
  out->ethernet = (uint32_t)st->dev.ethernet;
  out->rx_addr = (uint64_t)(uintptr_t)p->rxbuf;
  out->rx_rkey = p->rx_mr->rkey;
  out->ctl_addr = (uint64_t)(uintptr_t)p->ctl;
  out->ctl_rkey = p->ctl_mr->rkey;
  out->fifo = st->fifo;
  out->window = (uint32_t)p->txo.window;
}

static int mtu_bytes(int m) { return m >= 1 && m <= 5 ? 128 << m : 0; }

sharc_status_t ib_pair_connect(ib_pair_t *p, const ib_info_t *r, char *why,
                               size_t why_len) {
  struct ib_state *st = p->st;
  if (r->nqp != (uint32_t)p->nqp || r->fifo != st->fifo ||
      r->window != (uint32_t)p->txo.window) {
    snprintf(why, why_len,
             "settings differ: rank %d uses %u QPs per peer and FIFOs of %llu "
             "bytes, this rank %d and %zu; set SHARC_IB_QPS_PER_PEER and "
             "SHARC_IB_FIFO_BYTES alike on every rank",
             p->peer, r->nqp, (unsigned long long)r->fifo, p->nqp, st->fifo);
    return SHARC_ERR_INVALID_ARG;
  }
  if (r->ethernet != (uint32_t)st->dev.ethernet) {
    snprintf(why, why_len,
             "rank %d's port is %s, this rank's %s: RoCE and InfiniBand "
             "ports cannot talk; pick matching ports with SHARC_IB_HCA",
             p->peer, r->ethernet ? "Ethernet (RoCE)" : "InfiniBand",
             st->dev.ethernet ? "Ethernet (RoCE)" : "InfiniBand");
    return SHARC_ERR_INVALID_ARG;
  }
  enum ibv_mtu mtu = (enum ibv_mtu)SHARC_MIN((int)st->dev.mtu, (int)r->mtu);
  for (int q = 0; q < p->nqp; q++) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = r->qpn[q];
    a.rq_psn = r->psn[q];
    a.max_dest_rd_atomic = 1; /* no reads or atomics are issued */
    a.min_rnr_timer = 12;     /* 0.64 ms */
    a.ah_attr.port_num = (uint8_t)st->dev.port;
    a.ah_attr.sl = (uint8_t)st->sl;
    if (st->dev.global || r->global) {
      a.ah_attr.is_global = 1;
      memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
      a.ah_attr.grh.sgid_index = (uint8_t)st->dev.gid_index;
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = (uint8_t)st->tc;
    }
    a.ah_attr.dlid = r->lid; /* 0 on RoCE */
    int rc = ibv_modify_qp(
        p->qp[q], &a,
        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc) {
      char g[64];
      snprintf(why, why_len,
               "QP %d: INIT -> RTR failed (%s) toward QP 0x%x, %s %s, MTU "
               "%d; check SHARC_IB_GID_INDEX (GID %d here) and that both "
               "ports are on one fabric",
               q, strerror(rc), r->qpn[q], r->global ? "GID" : "LID",
               r->global ? ib_gid_str(r->gid, g, sizeof g) : "", mtu_bytes(mtu),
               st->dev.gid_index);
      if (!r->global)
        snprintf(why + strlen(why), why_len - strlen(why), " (LID %u)", r->lid);
      return SHARC_ERR_NET;
    }
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = p->psn[q];
    a.timeout = (uint8_t)st->timeout;
    a.retry_cnt = (uint8_t)st->retry;
    /* 6 retries, not 7 (infinite): receives stay posted, so an RNR NAK
     * is a bookkeeping bug that must surface as RNR_RETRY_EXC naming the
     * peer, not a silent stall */
    a.rnr_retry = 6;
    a.max_rd_atomic = 1;
    rc = ibv_modify_qp(p->qp[q], &a,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                           IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc) {
      snprintf(why, why_len,
               "QP %d: RTR -> RTS failed (%s; SHARC_IB_TIMEOUT=%d, "
               "SHARC_IB_RETRY_CNT=%d)",
               q, strerror(rc), st->timeout, st->retry);
      return SHARC_ERR_NET;
    }
  }
  p->remote = *r;
  return SHARC_OK;
}

void ib_pair_destroy(ib_pair_t *p) {
  if (!p)
    return;
  for (int q = p->nqp - 1; q >= 0; q--)
    if (p->qp[q] && ibv_destroy_qp(p->qp[q]))
      WARN(SUB_NET, "ib: destroying a QP to rank %d failed: %s", p->peer,
           strerror(errno));
  if (p->cq) {
    if (p->cq_unacked)
      ibv_ack_cq_events(p->cq, p->cq_unacked);
    if (ibv_destroy_cq(p->cq))
      WARN(SUB_NET, "ib: destroying the CQ of rank %d failed: %s", p->peer,
           strerror(errno));
  }
  if (p->ctl_mr)
    ibv_dereg_mr(p->ctl_mr);
  if (p->rx_mr)
    ibv_dereg_mr(p->rx_mr);
  if (p->tx_mr)
    ibv_dereg_mr(p->tx_mr);
  ib_order_free(&p->rxo);
  ib_order_free(&p->txo);
  free(p->ctl);
  free(p->rxbuf);
  free(p->txbuf);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

#endif /* SHARC_HAVE_IBVERBS */

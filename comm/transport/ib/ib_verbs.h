/*
 * ib_verbs.h - the verbs side of the ib transport (only with libibverbs):
 * the opened device (ib_dev.c), the pair of FIFOs between two ranks on one
 * channel with its QPs (ib_qp.c), the per-communicator state (ib.c), and
 * what the data path (ib.c) and the completions (ib_cq.c) share.
 *
 * A pair (peer, chan) owns, in order of creation: two staging rings of
 * `fifo` bytes (tx: this rank -> peer, rx: peer -> this rank) and a small
 * control block, each registered (rx and the control block for remote
 * writes); one CQ on the communicator's completion channel; nqp RC QPs in
 * INIT with their receive queues filled. Both directions share the QPs.
 * Destruction runs in the reverse order.
 */
#ifndef SHARC_TRANSPORT_IB_VERBS_H
#define SHARC_TRANSPORT_IB_VERBS_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>

#include "ctrl.h"
#include "ib_dev.h"
#include "ib_track.h"
#include "state.h"
#include "transport.h"

/* What one side tells the other about a pair, through the control socket
 * (native byte order: both ends run the same build). */
typedef struct {
  uint32_t chan, nqp;
  uint32_t qpn[IB_MAX_QPS];
  uint32_t psn[IB_MAX_QPS];
  uint8_t gid[16];
  uint16_t lid;
  uint8_t global, mtu; /* mtu: enum ibv_mtu */
  uint32_t rx_rkey, ctl_rkey;
  uint64_t rx_addr, ctl_addr;
  uint64_t fifo;
  uint32_t window, ethernet;
} ib_info_t;

/* Registered; the peer writes `credit` (bytes of our stream it consumed,
 * modulo 2^32) with plain RDMA writes. 32 bits so the write is one aligned
 * word and never read torn. */
typedef struct {
  _Alignas(64) volatile uint32_t credit;
  uint8_t pad[60];
} ib_ctl_t;

typedef enum {
  P_INIT = 0, /* QPs in INIT, receives posted, our info sent */
  P_RTS,      /* peer's info applied: QPs in RTR then RTS, "rtr" sent */
  P_READY,    /* the peer's QPs are past RTR too: we may write */
  P_FAILED
} pair_state_t;

struct ib_pair;
typedef struct {
  transport_conn_t base; /* first: what the executor holds */
  struct ib_pair *pair;
} ib_conn_t;

typedef struct ib_pair {
  ib_conn_t tx, rx;
  struct ib_state *st;
  int peer, chan;
  pthread_mutex_t lock; /* posting and the bookkeeping marked (L) */
  _Atomic int state;    /* pair_state_t */
  int got_rtr;          /* (L) */
  uint64_t deadline;    /* (L) check() gives up waiting for the peer */
  uint64_t bye_seen_ns; /* (L) when check() first saw the peer's goodbye */
  char err[320];        /* (L) why the pair failed */

  /* verbs resources (ib_qp.c) */
  uint8_t *txbuf, *rxbuf; /* fifo bytes each, page aligned */
  ib_ctl_t *ctl;
  struct ibv_mr *tx_mr, *rx_mr, *ctl_mr;
  struct ibv_cq *cq;
  unsigned cq_unacked; /* completion events not acknowledged yet */
  int nqp;
  struct ibv_qp *qp[IB_MAX_QPS];
  uint32_t psn[IB_MAX_QPS];
  int sq_used[IB_MAX_QPS]; /* (L) send WRs not completed */
  int sq_depth, rq_depth;
  ib_info_t remote; /* (L) */

  /* tx: this rank -> peer. Stream offsets count bytes since the start. */
  _Alignas(64) _Atomic uint64_t tx_head; /* executor: committed */
  _Alignas(64) _Atomic uint64_t tx_done; /* local completions, prefix */
  _Atomic uint64_t tx_acked;             /* the peer consumed this much */
  uint64_t tx_posted;                    /* (L) handed to the QPs */
  uint64_t k_posted, k_acked;            /* (L) data writes posted, acked */
  ib_order_t txo;                        /* (L) */
  int want_out;                          /* (L) a WANT is in flight */
  int need_want;                         /* (L) a WANT is due */
  struct {
    int active;
    uint64_t start, data_end, end; /* stream offsets of the send */
    const uint8_t *src;
    ib_reg_entry_t *reg;
    int dev; /* reg is in ib_state.dreg: device memory (GPUDirect RDMA) */
  } zc;      /* (L) a send straight from the user's registered buffer */

  /* rx: peer -> this rank */
  _Alignas(64) _Atomic uint64_t rx_head; /* progress thread: arrived */
  _Alignas(64) _Atomic uint64_t rx_tail; /* executor: consumed */
  _Atomic uint64_t rx_credited;          /* last credit sent */
  _Atomic int peer_wants;                /* the peer is blocked on credit */
  int need_credit, need_wake;            /* (L) control writes due */
  ib_order_t rxo;                        /* (L) */
} ib_pair_t;

struct ib_state {
  struct sharc_comm *comm;
  const transport_t *vt; /* &transport_ib: the vtable of its connections */
  ib_dev_t dev;
  ctrl_t *ctrl;
  struct ibv_comp_channel *chan;
  int nchan, nqp;
  int timeout, retry, sl, tc; /* SHARC_IB_TIMEOUT, _RETRY_CNT, _SL, _TC */
  size_t fifo;                /* bytes per ring, power of two */
  size_t chunk;               /* largest RDMA write */
  size_t zcopy_min;           /* SHARC_IB_ZCOPY_BYTES, 0: off */
  int efd;
  pthread_t thread;
  int thread_started;
  _Atomic int stop;
  pthread_mutex_t lock; /* pairs[] */
  ib_pair_t **pairs;    /* [nranks * nchan] */
  pthread_mutex_t reg_lock;
  ib_regcache_t reg;   /* host regions */
  ib_regcache_t dreg;  /* device regions (GPUDirect RDMA), under reg_lock */
  uint64_t dreg_epoch; /* mem_dev_epoch at dreg's last sweep (reg_lock) */
  char gdr_mode[16];   /* SHARC_IB_GDR */
  int gdr_peermem;     /* nvidia-peermem is loaded */
  _Atomic uint64_t n_zcopy, n_want, n_wake, n_credit;
  _Atomic uint64_t n_gdr_sends, n_gdr_dmabuf, n_gdr_peermem;
};

/* wr_id of every work request: what it was, on which QP. */
enum { WR_RECV = 1, WR_DATA, WR_CREDIT, WR_WANT, WR_WAKE };
#define WR_ID(kind, q) (((uint64_t)(kind) << 8) | (uint64_t)(q))
#define WR_KIND(id) ((int)((id) >> 8))
#define WR_QP(id) ((int)((id)&0xff))

/* ib_qp.c. Creates the pair's resources and moves its QPs to INIT with the
 * receive queues full. On failure everything made so far is released and
 * the message names the device, the peer and what to do. */
sharc_status_t ib_pair_create(struct ib_state *st, int peer, int chan,
                              ib_pair_t **out);
/* This side's information for the peer. */
void ib_pair_info(const ib_pair_t *p, ib_info_t *out);
/* Checks the peer's information against ours and moves every QP to RTR
 * (path from it) and RTS (SHARC_IB_TIMEOUT, SHARC_IB_RETRY_CNT). Under
 * p->lock. SHARC_ERR_NET/INVALID_ARG with why. */
sharc_status_t ib_pair_connect(ib_pair_t *p, const ib_info_t *r, char *why,
                               size_t why_len);
/* Posts one receive (no buffer: RDMA writes with immediate carry their
 * data to the rx ring) on QP q. 0 or an errno value. */
int ib_post_recv(ib_pair_t *p, int q);
/* QPs, CQ (after acknowledging its events), MRs, memory. */
void ib_pair_destroy(ib_pair_t *p);

/* ---- shared by the data path (ib.c, ib_tx.c) and the completions (ib_cq.c) */

/* The immediate of a write: its kind (IMM_*) in the top 2 bits, an end
 * offset or a consumed count modulo 2^30 below. */
#define IMM_DATA 0u
#define IMM_WANT 1u
#define IMM_WAKE 2u
#define M30 ((1u << 30) - 1)

/* The 64-bit value near base (at most 2^30 above it) whose low 30 bits
 * are v. */
static inline uint64_t unwrap30(uint64_t base, uint32_t v) {
  return base + ((v - (uint32_t)base) & M30);
}
static inline uint64_t unwrap32(uint64_t base, uint32_t v) {
  return base + (uint32_t)(v - (uint32_t)base);
}

static inline const char *host_of(struct ib_state *st, int peer) {
  return st->comm->peers[peer].host;
}

/* ib_tx.c. Under p->lock: marks the pair failed (the first reason wins) and
 * the communicator with it. */
void ib_pair_fail(ib_pair_t *p, sharc_status_t s, int failed_rank,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* ib_tx.c. Under p->lock: posts the due control writes (WANT, WAKE, credit)
 * that fit in QP 0's send queue. */
void ib_ctl_flush(ib_pair_t *p);
/* ib_tx.c. Under p->lock: posts committed bytes as far as credit and the
 * send queues allow; asks for credit when that is what blocks. */
void ib_tx_pump(ib_pair_t *p);
/* ib_tx.c. Wakes the progress thread (its eventfd). */
void ib_kick(struct ib_state *st);
/* ib_tx.c. Bytes of this pair's tx ring the peer has released. */
uint64_t ib_credit_now(ib_pair_t *p);
/* ib_cq.c. Progress thread: takes the completion channel's events, re-arms
 * and drains each CQ; rings the comm's doorbell if the executor should
 * look again. */
void ib_drain_cq_events(struct ib_state *st);
/* ib_cq.c. Progress thread: handles the device's async events (a port
 * down or a fatal device fails the communicator, QP and CQ errors their
 * pair). */
void ib_drain_async(struct ib_state *st);

#endif /* SHARC_TRANSPORT_IB_VERBS_H */

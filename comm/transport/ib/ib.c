/*
 * ib.c - the InfiniBand / RoCE transport (docs/design.md, decision 4): byte
 * FIFOs between ranks carried by RDMA writes with immediate over RC queue
 * pairs.
 *
 * Per (peer, channel) a pair (ib_verbs.h) has a tx ring and an rx ring of
 * the same size F, both registered, and nqp QPs (SHARC_IB_QPS_PER_PEER)
 * shared by both directions. A byte at stream offset s sits at s mod F in
 * the sender's tx ring and lands at s mod F in the receiver's rx ring. The
 * executor writes into tx and commits; the committing thread posts RDMA
 * writes of what is committed (never across the ring's end, at most
 * `chunk` bytes each, round-robin over the QPs) under the pair's lock. The
 * immediate of a data write carries its end offset (mod 2^30); the
 * receiver's progress thread turns per-QP arrivals into the complete prefix
 * (ib_order_t) and publishes it as rx_head.
 *
 * Flow control. The sender may have at most F bytes beyond what the
 * receiver consumed (acked), and may reuse tx bytes only once their write
 * completed locally (done): space = F - (head - min(done, acked)). Credits
 * travel back three ways:
 *   - plain RDMA writes of the consumed count into the sender's control
 *     block, every F/4 bytes consumed: no receive is used and nobody is
 *     woken, the sender reads the word when it needs space;
 *   - WANT: a sender blocked on credit (no space, or IB_QP_WRITES writes
 *     per QP not yet credited) sends one zero-length write with immediate
 *     carrying the credit it saw, and sends no other until answered;
 *   - WAKE: the answer, a zero-length write with immediate carrying the
 *     consumed count, sent at once if the receiver has consumed more than
 *     the sender saw, else at its next release.
 * Receives are posted ahead and reposted as each completion is polled,
 * before the data can be consumed; so data writes not yet credited (at
 * most IB_QP_WRITES per QP) plus one WANT and one WAKE never exceed the
 * receive queue (IB_QP_WRITES + 4), and RNR never happens. Every send is
 * signaled; send queues hold IB_QP_WRITES data writes plus 8 control
 * writes on QP 0, and control writes wait for a free slot.
 *
 * Waiting. One progress thread per communicator blocks in poll() on the
 * completion channel (nonblocking: get the event, re-arm, then poll the
 * CQ empty, so no completion is missed), the device's async events (port
 * down, QP errors), an eventfd and the control sockets (../ctrl.c). It
 * rings the comm's doorbell when data arrives or space frees. No core
 * spins.
 *
 * Connection. The first connect() of a pair (or the peer's information
 * arriving first) creates it (ib_qp.c: QPs in INIT, receives posted) and
 * sends ib_info_t over the control socket. On the peer's info the QPs go
 * INIT -> RTR -> RTS and "rtr" is sent; writes start once the peer's "rtr"
 * (or any write from it) shows its QPs can receive. connect() never waits
 * for the peer: check() reports a pair still unconnected at its deadline.
 *
 * Zero copy. A send of at least SHARC_IB_ZCOPY_BYTES from a buffer of
 * sharc_mem_alloc / sharc_mem_register is written straight from that
 * buffer (send_begin returns 1): the buffer is registered once and kept in
 * the registration cache (ib_track.c); the op completes when its last
 * write completed locally. Other buffers are copied into the tx ring.
 * GPUDirect RDMA. Device memory registered with sharc_mem_register is a
 * write source too (reg_dev below): the GPU layer asks device_send whether
 * a peer can be sent device memory straight, and if so names it in its
 * schedule; send_begin then takes such a send whole, whatever its size.
 * Otherwise the GPU layer stages the bytes in pinned host memory.
 *
 * Built only with libibverbs; ib_none.c stands in without it.
 */
#ifdef SHARC_HAVE_IBVERBS /* else ib_none.c */

#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ib.h"
#include "ib_verbs.h"
#include "mem.h"

#define MSG_INFO (CTRL_USER + 0)
#define MSG_RTR (CTRL_USER + 1)
#define IB_REG_CACHE 64 /* registered user regions kept */

/* ---- vtable: FIFOs (executor) ---------------------------------------------
 */

static ib_pair_t *pair_of(transport_conn_t *c) {
  return ((ib_conn_t *)c)->pair;
}

static size_t ib_send_space(transport_conn_t *c, void **ptr) {
  ib_pair_t *p = pair_of(c);
  size_t f = p->st->fifo;
  if (atomic_load(&p->state) == P_FAILED)
    return 0;
  uint64_t head = atomic_load_explicit(&p->tx_head, memory_order_relaxed);
  uint64_t done = atomic_load(&p->tx_done), acked = ib_credit_now(p);
  uint64_t low = SHARC_MIN(done, acked);
  size_t off = (size_t)head & (f - 1);
  size_t used = (size_t)(head - low); /* > f while a large zero-copy send
                                       * is active */
  size_t n = used >= f ? 0 : SHARC_MIN(f - used, f - off);
  *ptr = p->txbuf + off;
  if (n == 0 && acked <= done) { /* blocked on credit: ask once */
    pthread_mutex_lock(&p->lock);
    ib_tx_pump(p);
    if (!p->want_out && atomic_load(&p->state) == P_READY) {
      p->need_want = 1;
      ib_ctl_flush(p);
    }
    pthread_mutex_unlock(&p->lock);
  }
  return n;
}

static void ib_send_commit(transport_conn_t *c, size_t bytes) {
  ib_pair_t *p = pair_of(c);
  atomic_fetch_add(&p->tx_head, bytes);
  pthread_mutex_lock(&p->lock);
  ib_tx_pump(p);
  pthread_mutex_unlock(&p->lock);
}

static size_t ib_recv_avail(transport_conn_t *c, const void **ptr) {
  ib_pair_t *p = pair_of(c);
  size_t f = p->st->fifo;
  uint64_t tail = atomic_load_explicit(&p->rx_tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&p->rx_head, memory_order_acquire);
  size_t off = (size_t)tail & (f - 1);
  *ptr = p->rxbuf + off;
  return SHARC_MIN((size_t)(head - tail), f - off);
}

static void ib_recv_release(transport_conn_t *c, size_t bytes) {
  ib_pair_t *p = pair_of(c);
  uint64_t tail = atomic_load(&p->rx_tail) + bytes;
  atomic_store(&p->rx_tail, tail); /* then read peer_wants (see on WANT) */
  int wake = atomic_exchange(&p->peer_wants, 0);
  if (!wake && tail - atomic_load(&p->rx_credited) < p->st->fifo / 4)
    return;
  pthread_mutex_lock(&p->lock);
  if (wake)
    p->need_wake = 1;
  else
    p->need_credit = 1;
  ib_ctl_flush(p);
  pthread_mutex_unlock(&p->lock);
}

static ib_reg_entry_t *gdr_get(struct ib_state *st, const mem_dev_t *dev,
                               char *why, size_t why_len);

static int ib_send_begin(transport_conn_t *c, const void *src, size_t bytes) {
  ib_pair_t *p = pair_of(c);
  struct ib_state *st = p->st;
  mem_ref_t ref;
  mem_dev_t dev;
  ib_reg_entry_t *e = NULL;
  int on_dev = 0;
  if (bytes == 0 || atomic_load(&p->state) == P_FAILED)
    return 0;
  if (mem_have_device() && mem_find_device(src, bytes, &dev)) {
    /* Device memory reaches a send only after device_send said yes: it
     * goes from the GPU whatever its size, and is never copied by the CPU.
     * Should its registration fail now (evicted and refused since), the
     * pair fails: send_space then offers nothing to copy into. */
    char why[300];
    if (c->framed_only)
      snprintf(why, sizeof why, "a layer that must see every byte wraps it");
    if (c->framed_only || !(e = gdr_get(st, &dev, why, sizeof why))) {
      pthread_mutex_lock(&p->lock);
      ib_pair_fail(p, SHARC_ERR_NET, -1,
                   "ib: %s: a send of %zu bytes of device memory to rank %d "
                   "(host %s) cannot go by GPUDirect RDMA: %s",
                   st->dev.name, bytes, p->peer, host_of(st, p->peer), why);
      pthread_mutex_unlock(&p->lock);
      return 0;
    }
    on_dev = 1;
  } else {
    if (!st->zcopy_min || bytes < st->zcopy_min || c->framed_only ||
        !mem_find(src, bytes, &ref))
      return 0;
    int err = 0;
    pthread_mutex_lock(&st->reg_lock);
    e = ib_regcache_get(&st->reg, ref.id, (uint8_t *)src - ref.offset, ref.size,
                        &err);
    pthread_mutex_unlock(&st->reg_lock);
    if (!e) {
      INFO(SUB_NET,
           "ib: %s: registering a %zu-byte region for a direct send failed "
           "(%s); copying through the FIFO instead",
           st->dev.name, ref.size, strerror(err));
      return 0;
    }
  }
  pthread_mutex_lock(&p->lock);
  if (p->zc.active) { /* cannot happen: ops on one FIFO run one at a time */
    if (on_dev)       /* never handed to the CPU to copy */
      ib_pair_fail(p, SHARC_ERR_INTERNAL, -1,
                   "ib: a device-memory send to rank %d began while another "
                   "send was in flight on its FIFO",
                   p->peer);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_lock(&st->reg_lock);
    ib_regcache_put(on_dev ? &st->dreg : &st->reg, e);
    pthread_mutex_unlock(&st->reg_lock);
    return 0;
  }
  uint64_t start = atomic_load(&p->tx_head);
  p->zc.active = 1;
  p->zc.start = start;
  p->zc.data_end = start + bytes;
  p->zc.end = start + transport_wire_bytes(bytes);
  p->zc.src = src;
  p->zc.reg = e;
  p->zc.dev = on_dev;
  atomic_store(&p->tx_head, p->zc.end);
  ib_tx_pump(p);
  pthread_mutex_unlock(&p->lock);
  atomic_fetch_add(on_dev ? &st->n_gdr_sends : &st->n_zcopy, 1);
  return 1;
}

static int ib_send_done(transport_conn_t *c) {
  ib_pair_t *p = pair_of(c);
  struct ib_state *st = p->st;
  int done = 0;
  pthread_mutex_lock(&p->lock);
  if (p->zc.active && atomic_load(&p->tx_done) >= p->zc.end) {
    pthread_mutex_lock(&st->reg_lock);
    ib_regcache_put(p->zc.dev ? &st->dreg : &st->reg, p->zc.reg);
    pthread_mutex_unlock(&st->reg_lock);
    p->zc.active = 0;
    done = 1;
  }
  pthread_mutex_unlock(&p->lock);
  return done;
}

/* The receiver always reads inline: zero-copy sends land in its ring. */
static int ib_recv_begin(transport_conn_t *c, size_t bytes,
                         const void **direct) {
  (void)c;
  (void)bytes;
  *direct = NULL;
  return 0;
}

static void ib_recv_done(transport_conn_t *c) { (void)c; }

static sharc_status_t ib_recv_copy(transport_conn_t *c, void *dst, size_t off,
                                   size_t n) {
  return err_set(SHARC_ERR_INTERNAL, "ib: recv_copy is never used");
}

/* ---- pairs and the control plane ------------------------------------------
 */

/* The pair for (peer, chan), created (and our info sent) if absent and
 * `create`. NULL with the error recorded. */
static ib_pair_t *pair_get(struct ib_state *st, int peer, int chan, int create,
                           sharc_status_t *s) {
  size_t idx = (size_t)peer * (size_t)st->nchan + (size_t)chan;
  *s = SHARC_OK;
  pthread_mutex_lock(&st->lock);
  ib_pair_t *p = st->pairs[idx];
  if (!p && create && (*s = ib_pair_create(st, peer, chan, &p)) == SHARC_OK) {
    st->pairs[idx] = p;
    /* Our info leaves before anything the progress thread may send on this
     * pair: it takes the pair's lock first. */
    pthread_mutex_lock(&p->lock);
    pthread_mutex_unlock(&st->lock);
    ib_info_t info;
    ib_pair_info(p, &info);
    *s = ctrl_send(st->ctrl, peer, MSG_INFO, &info, sizeof info);
    pthread_mutex_unlock(&p->lock);
    return *s == SHARC_OK ? p : NULL;
  }
  pthread_mutex_unlock(&st->lock);
  return p;
}

static void on_msg(void *arg, int peer, int type, const void *body,
                   size_t len) {
  struct ib_state *st = arg;
  struct sharc_comm *comm = st->comm;
  uint32_t chan;
  memcpy(&chan, body, sizeof chan);
  if ((type != MSG_INFO && type != MSG_RTR) ||
      len != (type == MSG_INFO ? sizeof(ib_info_t) : sizeof chan) ||
      chan >= (uint32_t)st->nchan) {
    WARN(SUB_NET,
         "ib: rank %d (host %s) sent a control message of type %d, %zu "
         "bytes, channel %u; ignored",
         peer, host_of(st, peer), type, len, chan);
    return;
  }
  sharc_status_t s;
  ib_pair_t *p = pair_get(st, peer, (int)chan, type == MSG_INFO, &s);
  if (!p) {
    char why[400];
    snprintf(why, sizeof why, "%s", err_last());
    if (type == MSG_INFO)
      comm_fail(comm, -1, s, why);
    return;
  }
  pthread_mutex_lock(&p->lock);
  if (type == MSG_RTR) {
    p->got_rtr = 1;
  } else if (atomic_load(&p->state) == P_INIT) {
    ib_info_t info;
    char why[300];
    memcpy(&info, body, sizeof info);
    s = ib_pair_connect(p, &info, why, sizeof why);
    if (s != SHARC_OK)
      ib_pair_fail(
          p, s, -1,
          "ib: %s port %d: connecting channel %d to rank %d (host %s): "
          "%s",
          st->dev.name, st->dev.port, (int)chan, peer, host_of(st, peer), why);
    else {
      atomic_store(&p->state, P_RTS);
      ctrl_send(st->ctrl, peer, MSG_RTR, &chan, sizeof chan);
    }
  }
  int expect = P_RTS;
  if (p->got_rtr && atomic_compare_exchange_strong(&p->state, &expect, P_READY))
    TRACE(SUB_NET, "ib: channel %u to rank %d ready", chan, peer);
  ib_tx_pump(p);
  ib_ctl_flush(p);
  pthread_mutex_unlock(&p->lock);
  comm_wake(comm);
}

static void on_kick(void *arg) { ib_kick(arg); }

static void *progress_main(void *arg) {
  struct ib_state *st = arg;
  while (!atomic_load(&st->stop)) {
    size_t n;
    int timeout_ms;
    struct pollfd *pfd = ctrl_pollset(st->ctrl, 3, &n, &timeout_ms);
    if (!pfd) {
      comm_fail(st->comm, -1, SHARC_ERR_NO_MEM,
                "ib: out of memory in the progress thread");
      break;
    }
    pfd[0] = (struct pollfd){st->efd, POLLIN, 0};
    pfd[1] = (struct pollfd){st->chan->fd, POLLIN, 0};
    pfd[2] = (struct pollfd){st->dev.ctx->async_fd, POLLIN, 0};
    if (poll(pfd, n, timeout_ms) < 0 && errno != EINTR) {
      comm_fail(st->comm, -1, SHARC_ERR_SYSTEM, "ib: poll failed");
      break;
    }
    if (pfd[0].revents) {
      uint64_t v;
      ssize_t r = read(st->efd, &v, sizeof v);
      (void)r;
    }
    if (pfd[1].revents)
      ib_drain_cq_events(st);
    if (pfd[2].revents)
      ib_drain_async(st);
    ctrl_handle(st->ctrl, 3, n);
  }
  return NULL;
}

/* ---- vtable: setup, connect, check, teardown ------------------------------
 */

static int reg_user(void *arg, void *base, size_t len, void **handle,
                    uint32_t *lkey) {
  /* Only ever a write source, but registered with LOCAL_WRITE: a
   * read-only pin of private memory may pin the shared zero page or a
   * copy-on-write original (kernels before 6.2), so later CPU writes would
   * not reach what the NIC sends. Read-only mappings fall back to 0. */
  struct ibv_mr *mr = ibv_reg_mr(arg, base, len, IBV_ACCESS_LOCAL_WRITE);
  if (!mr && (errno == EFAULT || errno == EACCES))
    mr = ibv_reg_mr(arg, base, len, 0);
  if (!mr)
    return errno ? errno : EINVAL;
  *handle = mr;
  *lkey = mr->lkey;
  return 0;
}
static void dereg_user(void *arg, void *handle) { ibv_dereg_mr(handle); }
static int alive_user(void *arg, uint64_t id, uintptr_t base, size_t len) {
  mem_ref_t r;
  return mem_find((void *)base, len, &r) && r.id == id && r.offset == 0;
}

/* ---- GPUDirect RDMA: device memory as a write source ----------------------
 * A registered device region (mem.h: sharc_mem_register on device memory)
 * is registered with the NIC whole, once, and kept in dreg like host
 * regions in reg: through the dma-buf CUDA exported for it at
 * sharc_mem_register (ibv_reg_dmabuf_mr: offset into the dma-buf, iova the
 * device address, so work requests name device addresses as they are), or
 * with ibv_reg_mr on the device pointer, which nvidia-peermem resolves. The
 * methods are tried in ib_gdr_plan's order; the first that works stays. */

/* Called by ib_regcache_get under reg_lock: arg is the ib_state. */
static int reg_dev(void *arg, void *base, size_t len, void **handle,
                   uint32_t *lkey) {
  struct ib_state *st = arg;
  mem_dev_t dev;
  if (!mem_find_device(base, len, &dev))
    return ENOENT;
  int plan[2], err = EOPNOTSUPP;
  char why[200];
  int n = ib_gdr_plan(st->gdr_mode, dev.has_dmabuf, dev.dmabuf_why,
                      st->gdr_peermem, plan, why, sizeof why);
  for (int i = 0; i < n; i++) {
    struct ibv_mr *mr = NULL;
    errno = 0;
    if (plan[i] == IB_GDR_DMABUF) {
      /* a copy of the registry's fd: a concurrent deregistration closes
       * the original, never this one */
      int fd = mem_dmabuf_dup(base, len);
      if (fd >= 0) {
        mr = ibv_reg_dmabuf_mr(
            st->dev.pd, (uint64_t)((uintptr_t)base - dev.dmabuf_addr), len,
            (uint64_t)(uintptr_t)base, fd, IBV_ACCESS_LOCAL_WRITE);
        int saved = errno;
        close(fd); /* the MR holds the dma-buf itself */
        errno = saved;
      } else {
        errno = ENOENT;
      }
    } else {
      mr = ibv_reg_mr(st->dev.pd, base, len, IBV_ACCESS_LOCAL_WRITE);
    }
    if (mr) {
      *handle = mr;
      *lkey = mr->lkey;
      atomic_fetch_add(
          plan[i] == IB_GDR_DMABUF ? &st->n_gdr_dmabuf : &st->n_gdr_peermem, 1);
      INFO(SUB_NET,
           "ib: %s: device memory [%p, +%zu) registered through %s "
           "(GPUDirect RDMA)",
           st->dev.name, base, len, ib_gdr_name(plan[i]));
      return 0;
    }
    err = errno ? errno : EINVAL;
    INFO(SUB_NET,
         "ib: %s: registering device memory [%p, +%zu) through %s "
         "failed: %s%s",
         st->dev.name, base, len, ib_gdr_name(plan[i]), strerror(err),
         i + 1 < n ? "; trying the next way" : "");
  }
  return err;
}
static int alive_dev(void *arg, uint64_t id, uintptr_t base, size_t len) {
  mem_dev_t d;
  return mem_find_device((void *)base, len, &d) && d.region_id == id &&
         (uintptr_t)d.region == base;
}

/* The dreg entry for the region of dev (raised: ib_regcache_put it), or
 * NULL with why. */
static ib_reg_entry_t *gdr_get(struct ib_state *st, const mem_dev_t *dev,
                               char *why, size_t why_len) {
  int plan[2];
  int n = ib_gdr_plan(st->gdr_mode, dev->has_dmabuf, dev->dmabuf_why,
                      st->gdr_peermem, plan, why, why_len);
  if (n <= 0)
    return NULL;
  int err = 0;
  pthread_mutex_lock(&st->reg_lock);
  uint64_t epoch = mem_dev_epoch();
  if (epoch != st->dreg_epoch) { /* regions deregistered: unpin theirs */
    ib_regcache_sweep(&st->dreg);
    st->dreg_epoch = epoch;
  }
  ib_reg_entry_t *e = ib_regcache_get(&st->dreg, dev->region_id, dev->region,
                                      dev->region_bytes, &err);
  pthread_mutex_unlock(&st->reg_lock);
  if (!e)
    snprintf(why, why_len,
             "%s could not register the device region [%p, +%zu) through "
             "%s%s%s (%s): the NIC driver or kernel cannot reach GPU memory "
             "that way (dma-buf import needs a 5.12+ kernel and the open GPU "
             "modules; ibv_reg_mr of GPU memory needs nvidia-peermem)",
             st->dev.name, dev->region, dev->region_bytes, ib_gdr_name(plan[0]),
             n > 1 ? " or " : "", n > 1 ? ib_gdr_name(plan[1]) : "",
             strerror(err));
  return e;
}

static int ib_device_send(struct sharc_comm *comm, int peer, const void *p,
                          size_t len, char *why, size_t why_len) {
  struct ib_state *st = comm->tp_state[TRANSPORT_IB];
  mem_dev_t dev;
  if (!st) {
    snprintf(why, why_len, "the ib transport is not set up");
    return 0;
  }
  if (!mem_find_device(p, len, &dev)) {
    snprintf(why, why_len,
             "[%p, +%zu) is not inside one device region registered with "
             "sharc_mem_register",
             p, len);
    return 0;
  }
  ib_reg_entry_t *e = gdr_get(st, &dev, why, why_len);
  if (!e)
    return 0;
  pthread_mutex_lock(&st->reg_lock);
  ib_regcache_put(&st->dreg, e); /* stays cached for the sends */
  pthread_mutex_unlock(&st->reg_lock);
  (void)peer; /* one NIC serves every peer of this rank */
  return 1;
}

static void state_free(struct ib_state *st) {
  struct sharc_comm *comm = st->comm;
  if (st->pairs)
    for (size_t i = 0; i < (size_t)comm->nranks * (size_t)st->nchan; i++)
      ib_pair_destroy(st->pairs[i]);
  if (st->reg.e)
    ib_regcache_free(&st->reg);
  if (st->dreg.e)
    ib_regcache_free(&st->dreg);
  if (st->efd >= 0)
    close(st->efd);
  if (st->chan)
    ibv_destroy_comp_channel(st->chan);
  ib_dev_close(&st->dev);
  ctrl_destroy(st->ctrl);
  pthread_mutex_destroy(&st->lock);
  pthread_mutex_destroy(&st->reg_lock);
  free(st->pairs);
  free(st);
}

/* Reads an integer tunable in [lo, hi]; names it when out of range. */
static sharc_status_t tunable(struct sharc_comm *comm, param_id_t id,
                              int64_t lo, int64_t hi, int64_t *out) {
  *out = param_int(id);
  if (*out < lo || *out > hi)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "ib: %s=%lld: use %lld..%lld", param_env_name(id),
                      (long long)*out, (long long)lo, (long long)hi);
  return SHARC_OK;
}

static void gpu_note(struct ib_state *st) {
  static _Atomic int said;
  if (atomic_exchange(&said, 1))
    return;
  INFO(SUB_NET,
       "ib: GPU buffers: SHARC_IB_GDR=%s; nvidia-peermem %s. Sends from "
       "device memory registered with sharc_mem_register go straight from "
       "the GPU where its dma-buf or nvidia-peermem lets the NIC reach it, "
       "and are staged through pinned host memory otherwise",
       st->gdr_mode, st->gdr_peermem ? "is loaded" : "is not loaded");
}

static sharc_status_t ib_setup(struct sharc_comm *comm) {
  if (comm->tp_state[TRANSPORT_IB])
    return SHARC_OK;
  if (comm->listen_fd < 0)
    return comm_error(comm, SHARC_ERR_INTERNAL,
                      "ib: setup without a listener (listen_fd -1)");
  int64_t nqp, tmo, retry, sl, tc, fifo, zc;
  CHECK(tunable(comm, PARAM_IB_QPS_PER_PEER, 1, IB_MAX_QPS, &nqp));
  CHECK(tunable(comm, PARAM_IB_TIMEOUT, 1, 31, &tmo));
  CHECK(tunable(comm, PARAM_IB_RETRY_CNT, 0, 7, &retry));
  CHECK(tunable(comm, PARAM_IB_SL, 0, 15, &sl));
  CHECK(tunable(comm, PARAM_IB_TC, 0, 255, &tc));
  CHECK(tunable(comm, PARAM_IB_FIFO_BYTES, 65536, (int64_t)1 << 28, &fifo));
  CHECK(tunable(comm, PARAM_IB_ZCOPY_BYTES, 0, INT64_MAX, &zc));
  const char *gdr = param_str(PARAM_IB_GDR);
  int plan[2];
  char gwhy[200];
  if (ib_gdr_plan(gdr, 0, NULL, 0, plan, gwhy, sizeof gwhy) < 0)
    return comm_error(comm, SHARC_ERR_INVALID_ARG, "ib: %s", gwhy);
  struct ib_state *st = calloc(1, sizeof *st);
  if (!st)
    return comm_error(comm, SHARC_ERR_NO_MEM, "ib: out of memory");
  st->comm = comm;
  st->vt = &transport_ib;
  st->nchan = SHARC_MAX(comm->nchan, 1);
  st->nqp = (int)nqp;
  st->timeout = (int)tmo;
  st->retry = (int)retry;
  st->sl = (int)sl;
  st->tc = (int)tc;
  st->fifo = 65536;
  while ((int64_t)st->fifo < fifo)
    st->fifo <<= 1;
  st->chunk = SHARC_MIN(st->fifo / 4, (size_t)1 << 20);
  st->zcopy_min = (size_t)zc;
  snprintf(st->gdr_mode, sizeof st->gdr_mode, "%s", gdr);
  st->gdr_peermem = ib_peermem_loaded("");
  st->efd = -1;
  pthread_mutex_init(&st->lock, NULL);
  pthread_mutex_init(&st->reg_lock, NULL);
  sharc_status_t s = SHARC_OK;
  /* a lost peer and abort notices fail the communicator as on every
   * network transport (ctrl.c's defaults) */
  ctrl_ops_t ops = {.name = "ib", .on_msg = on_msg, .kick = on_kick, .arg = st};
  CHECK_GOTO(ctrl_create(comm, &ops, &st->ctrl), s, fail);
  CHECK_GOTO(ib_dev_open(comm, &st->dev), s, fail);
  st->chan = ibv_create_comp_channel(st->dev.ctx);
  st->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (!st->chan || st->efd < 0) {
    s = comm_error(comm, SHARC_ERR_SYSTEM,
                   "ib: %s: cannot create a completion channel or eventfd: %s",
                   st->dev.name, strerror(errno));
    goto fail;
  }
  /* The progress thread polls these; reads must not block. */
  fcntl(st->chan->fd, F_SETFL, fcntl(st->chan->fd, F_GETFL) | O_NONBLOCK);
  fcntl(st->dev.ctx->async_fd, F_SETFL,
        fcntl(st->dev.ctx->async_fd, F_GETFL) | O_NONBLOCK);
  ib_reg_ops_t rops = {reg_user, dereg_user, alive_user, st->dev.pd};
  st->pairs =
      calloc((size_t)comm->nranks * (size_t)st->nchan, sizeof *st->pairs);
  ib_reg_ops_t dops = {reg_dev, dereg_user, alive_dev, st};
  if (!st->pairs || ib_regcache_init(&st->reg, IB_REG_CACHE, &rops) ||
      ib_regcache_init(&st->dreg, IB_REG_CACHE, &dops)) {
    s = comm_error(comm, SHARC_ERR_NO_MEM, "ib: out of memory for %d peers",
                   comm->nranks);
    goto fail;
  }
  /* Published before the thread starts: its comm_fail reads
   * comm->tp_state[TRANSPORT_IB]. */
  comm->tp_state[TRANSPORT_IB] = st;
  int e = pthread_create(&st->thread, NULL, progress_main, st);
  if (e) {
    comm->tp_state[TRANSPORT_IB] = NULL;
    s = comm_error(comm, SHARC_ERR_SYSTEM,
                   "ib: cannot start the progress thread: %s", strerror(e));
    goto fail;
  }
  st->thread_started = 1;
  gpu_note(st);
  char g[64];
  INFO(SUB_NET,
       "ib: %s port %d (%s, %s %s, MTU %d, %.0f Gb/s; %d usable port(s)), "
       "%d QP(s) per peer, FIFOs of %zu bytes, %d channel(s)",
       st->dev.name, st->dev.port, st->dev.ethernet ? "RoCE" : "InfiniBand",
       st->dev.global ? "GID" : "LID",
       st->dev.global ? ib_gid_str(st->dev.gid, g, sizeof g) : "",
       128 << st->dev.mtu, st->dev.gbps, st->dev.ncand, st->nqp, st->fifo,
       st->nchan);
  return SHARC_OK;
fail:
  state_free(st);
  return s;
}

static sharc_status_t ib_connect(struct sharc_comm *comm, int peer, int chan,
                                 int is_send, uint64_t deadline_ns,
                                 transport_conn_t **conn) {
  struct ib_state *st = comm->tp_state[TRANSPORT_IB];
  CHECK(comm_check_connect(comm, "ib", st, peer, chan, st ? st->nchan : 0));
  CHECK(ctrl_connect(st->ctrl, peer, deadline_ns));
  sharc_status_t s;
  ib_pair_t *p = pair_get(st, peer, chan, 1, &s);
  if (!p)
    return s;
  pthread_mutex_lock(&p->lock);
  if (p->deadline == 0)
    p->deadline = deadline_ns;
  pthread_mutex_unlock(&p->lock);
  *conn = is_send ? &p->tx.base : &p->rx.base;
  return SHARC_OK;
}

static sharc_status_t ib_check(transport_conn_t *c) {
  ib_pair_t *p = pair_of(c);
  struct ib_state *st = p->st;
  struct sharc_comm *comm = st->comm;
  const char *host = host_of(st, c->peer);
  int ps = ctrl_peer_state(st->ctrl, c->peer);
  int s = atomic_load(&p->state);
  if (ps == CTRL_PEER_LOST)
    return comm_record(comm, SHARC_ERR_PEER_LOST,
                       "rank %d (host %s, pid %d) closed its connection: "
                       "process died or left the communicator",
                       c->peer, host, comm->peers[c->peer].pid);
  /* A goodbye travels over TCP and may overtake the completion of the
   * peer's last write: a rank still waiting 200 ms after it has really
   * lost the peer. */
  int bye_lost = 0;
  if (ps == CTRL_PEER_BYE &&
      (c->is_send || atomic_load(&p->rx_head) == atomic_load(&p->rx_tail))) {
    uint64_t now = time_ns();
    pthread_mutex_lock(&p->lock);
    if (!p->bye_seen_ns)
      p->bye_seen_ns = now;
    bye_lost = now - p->bye_seen_ns > 200000000ull;
    pthread_mutex_unlock(&p->lock);
  }
  if (bye_lost)
    return comm_record(comm, SHARC_ERR_PEER_LOST,
                       "ib: rank %d (host %s) left the communicator while "
                       "this rank still %s it on channel %d",
                       c->peer, host,
                       c->is_send ? "had data for" : "expected data from",
                       c->chan);
  pthread_mutex_lock(&p->lock);
  char err[sizeof p->err];
  snprintf(err, sizeof err, "%s", p->err);
  uint64_t deadline = p->deadline;
  pthread_mutex_unlock(&p->lock);
  if (s == P_FAILED)
    return comm_record(comm, SHARC_ERR_NET, "%s",
                       err[0] ? err : "ib: the connection failed");
  if (s != P_READY && deadline && time_ns() > deadline)
    return comm_record(
        comm, SHARC_ERR_TIMEOUT,
        "ib: channel %d to rank %d (host %s) not connected within "
        "SHARC_TIMEOUT=%s: %s",
        c->chan, c->peer, host, param_str(PARAM_TIMEOUT),
        ps == CTRL_PEER_NONE ? "its control connection never arrived (it has "
                               "not reached this point, or cannot reach this "
                               "host)"
        : s == P_INIT        ? "its QP information never arrived"
                             : "its QPs never reported ready");
  return SHARC_OK;
}

static void ib_notify_abort(struct sharc_comm *comm, int failed_rank,
                            sharc_status_t s) {
  struct ib_state *st = comm->tp_state[TRANSPORT_IB];
  if (st)
    ctrl_abort_all(st->ctrl, failed_rank, s);
}

/* Every committed byte written and completed (or its peer gone). */
static int tx_flushed(struct ib_state *st) {
  int done = 1;
  pthread_mutex_lock(&st->lock);
  for (size_t i = 0; i < (size_t)st->comm->nranks * (size_t)st->nchan; i++) {
    ib_pair_t *p = st->pairs[i];
    int ps = p ? ctrl_peer_state(st->ctrl, p->peer) : CTRL_PEER_NONE;
    if (p && atomic_load(&p->state) != P_FAILED && ps != CTRL_PEER_LOST &&
        ps != CTRL_PEER_BYE &&
        atomic_load(&p->tx_done) != atomic_load(&p->tx_head))
      done = 0;
  }
  pthread_mutex_unlock(&st->lock);
  return done;
}

static void ib_teardown(struct sharc_comm *comm, uint64_t deadline_ns) {
  struct ib_state *st = comm->tp_state[TRANSPORT_IB];
  if (!st)
    return;
  for (;;) { /* after a failure nobody waits for our bytes */
    uint32_t seen = atomic_load(&comm->wake->doorbell);
    if (atomic_load(&comm->fail.failed) || tx_flushed(st))
      break;
    uint64_t now = time_ns();
    if (now >= deadline_ns) {
      WARN(SUB_NET, "ib: teardown: unsent bytes dropped at the deadline");
      break;
    }
    comm_wait(comm, seen, SHARC_MIN(deadline_ns - now, 100000000ull));
  }
  ctrl_bye_all(st->ctrl);
  atomic_store(&st->stop, 1);
  ib_kick(st);
  pthread_join(st->thread, NULL);
  comm->tp_state[TRANSPORT_IB] = NULL;
  state_free(st);
}

sharc_status_t ib_stats(struct sharc_comm *comm, ib_stats_t *out) {
  struct ib_state *st = comm->tp_state[TRANSPORT_IB];
  if (!st)
    return SHARC_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  topo_copy(out->dev, sizeof out->dev, st->dev.name);
  out->port = st->dev.port;
  out->gid_index = st->dev.gid_index;
  out->nqp = st->nqp;
  pthread_mutex_lock(&st->reg_lock);
  out->reg_hits = st->reg.hits;
  out->reg_misses = st->reg.misses;
  out->reg_evictions = st->reg.evictions;
  pthread_mutex_unlock(&st->reg_lock);
  out->zcopy_sends = atomic_load(&st->n_zcopy);
  out->want_msgs = atomic_load(&st->n_want);
  out->wake_msgs = atomic_load(&st->n_wake);
  out->credit_writes = atomic_load(&st->n_credit);
  out->gdr_sends = atomic_load(&st->n_gdr_sends);
  out->gdr_dmabuf_regs = atomic_load(&st->n_gdr_dmabuf);
  out->gdr_peermem_regs = atomic_load(&st->n_gdr_peermem);
  return SHARC_OK;
}

const transport_t transport_ib = {
    .name = "ib",
    .id = TRANSPORT_IB,
    .scope = TRANSPORT_NET,
    .setup = ib_setup,
    .connect = ib_connect,
    .send_space = ib_send_space,
    .send_commit = ib_send_commit,
    .recv_avail = ib_recv_avail,
    .recv_release = ib_recv_release,
    .send_begin = ib_send_begin,
    .send_done = ib_send_done,
    .recv_begin = ib_recv_begin,
    .recv_done = ib_recv_done,
    .recv_copy = ib_recv_copy,
    .check = ib_check,
    .notify_abort = ib_notify_abort,
    .teardown = ib_teardown,
    .device_send = ib_device_send,
};

#endif /* SHARC_HAVE_IBVERBS */

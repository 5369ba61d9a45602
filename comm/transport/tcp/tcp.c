/*
 * tcp.c - the tcp transport (docs/design.md, decisions 4 and 7): byte FIFOs
 * between ranks on different hosts, carried by TCP sockets.
 *
 * Per (peer, channel) there is one full-duplex socket and two staging rings
 * in process memory: tx (this rank -> peer) and rx (peer -> this rank). The
 * executor writes into tx and reads from rx without system calls; one
 * progress thread per communicator moves bytes between the rings and the
 * sockets, blocking in poll() over the listener, every data and control
 * socket, and an eventfd. Each ring is single-producer single-consumer with
 * head/tail byte counters (acquire/release).
 *
 * Wake-ups, both ways, without lost signals and without a syscall per
 * commit: each ring has an `armed` flag meaning "the progress thread watches
 * this ring" (polls POLLOUT for tx bytes, POLLIN for rx space). The thread
 * clears it only after finding the ring empty (tx) or full (rx) and then
 * re-reads the counter; the executor publishes its counter first and writes
 * the eventfd only if it finds the flag clear (Dekker, seq_cst). The thread
 * rings the comm's doorbell (comm_wake) whenever it receives bytes, frees
 * space, or learns of a failure.
 *
 * Connections (tcp_conn.c; shared state in tcp_impl.h): the lower rank
 * dials the higher rank's listener (comm->peers[peer].addr) and sends a hello
 * {magic, version, uid, token, rank, chan}; the higher rank's progress thread
 * accepts, checks it (token in constant time) and binds the socket to the pair,
 * or drops it with a WARN. The first dial to a peer also opens its control
 * socket (chan 0xFF), which the control channel of the network transports
 * takes over (ctrl.c): abort notices and a goodbye sent at clean teardown.
 * A control socket that ends without a goodbye means the peer died:
 * comm_fail at once. A data socket that ends only makes that FIFO report
 * PEER_LOST (lazily, from check()) once its received bytes are consumed.
 *
 * Direct messages (at least SHARC_TCP_DIRECT_BYTES, not under SHARC_FAULT):
 * staging costs a memcpy per byte on each side on top of the kernel's two
 * copies (bench/results/tcp_throughput.md), so large messages skip the
 * rings. The wire is the same either way (payload, then padding to
 * transport_wire_bytes), so each end picks its mode alone.
 *
 * - Send: send_begin hands the user buffer to the progress thread, which
 *   send()s from it once the tx ring has drained (order), then the padding,
 *   and clears tx_direct when the kernel has every byte (send_done).
 * - Receive: recv_begin takes the socket's input from the progress thread
 *   (rx_direct, set under rx_lock: no burst into the rx ring is in flight
 *   after it); recv_copy, in the executor, takes first what the ring
 *   already holds, then recv()s the socket straight into the destination.
 *   A call copies all of its slice or nothing (the executor gives every
 *   reduction of a round one bounce buffer); while ring + socket hold less,
 *   SO_RCVLOWAT is set to the missing bytes, rx_want asks the progress
 *   thread to poll POLLIN, and it rings the doorbell once they are there.
 *   recv_done hands the socket back.
 *
 * The rx ring's counters count stream bytes, also those the executor reads
 * past the ring: it moves head and tail together over them. So every
 * message starts 64-byte aligned in the ring as in the stream, which the
 * executor relies on (it reduces whole elements from the contiguous bytes
 * recv_avail returns; transport_wire_bytes). Counting only the bytes that
 * passed through the ring was the bug that withdrew the first version of direct
 * receives: after a direct message that began in the ring, a later staged
 * message could start mid-element at the ring's wrap and a reduction wait
 * forever for a whole element (tcp_throughput.md, section 7).
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net.h"
#include "state.h"
#include "tcp_impl.h"
#include "transport.h"

/* ---- rings (executor side) -------------------------------------------- */

static size_t tcp_send_space(transport_conn_t *c, void **ptr) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  ring_t *r = &p->txr;
  if (atomic_load_explicit(&p->tx_dead, memory_order_relaxed))
    return 0;
  uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
  size_t off = (size_t)head & (r->size - 1);
  size_t n = SHARC_MIN(r->size - (size_t)(head - tail), r->size - off);
  *ptr = r->buf + off;
  return n;
}

static void tcp_send_commit(transport_conn_t *c, size_t bytes) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  ring_t *r = &p->txr;
  uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
  atomic_store(&r->head, head + bytes);
  if (!atomic_load(&r->armed) && !atomic_exchange(&r->armed, 1))
    tcp_kick(p->st);
}

static size_t tcp_recv_avail(transport_conn_t *c, const void **ptr) {
  ring_t *r = &((tcp_conn_t *)c)->pair->rxr;
  uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
  size_t off = (size_t)tail & (r->size - 1);
  *ptr = r->buf + off;
  return SHARC_MIN((size_t)(head - tail), r->size - off);
}

static void tcp_recv_release(transport_conn_t *c, size_t bytes) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  ring_t *r = &p->rxr;
  uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
  atomic_store(&r->tail, tail + bytes);
  if (!atomic_load(&r->armed) && !atomic_exchange(&r->armed, 1))
    tcp_kick(p->st);
}

/* ---- direct messages (executor side) ------------------------------------ */

static int tcp_send_begin(transport_conn_t *c, const void *src, size_t bytes) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  ring_t *r = &p->txr;
  if (bytes < p->st->direct_bytes || c->framed_only)
    return 0; /* inline: small, or a wrapping layer sees each byte */
  if (atomic_load(&r->head) != atomic_load(&r->tail))
    return -1; /* staged bytes of earlier messages go first */
  p->tx_src = src;
  p->tx_bytes = bytes;
  p->tx_wire = transport_wire_bytes(bytes);
  p->tx_off = 0;
  atomic_store(&p->tx_direct, 1); /* publishes the fields above */
  if (!atomic_load(&r->armed) && !atomic_exchange(&r->armed, 1))
    tcp_kick(p->st);
  return 1;
}

static int tcp_send_done(transport_conn_t *c) {
  return !atomic_load(&((tcp_conn_t *)c)->pair->tx_direct);
}

static int tcp_recv_begin(transport_conn_t *c, size_t bytes,
                          const void **direct) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  *direct = NULL;
  if (bytes < p->st->direct_recv || c->framed_only)
    return 0; /* inline: small, or a wrapping layer sees each byte */
  pthread_mutex_lock(&p->rx_lock); /* waits out a burst into the ring */
  atomic_store(&p->rx_direct, 1);
  pthread_mutex_unlock(&p->rx_lock);
  p->rx_bytes = bytes;
  p->rx_wire = transport_wire_bytes(bytes);
  p->rx_off = 0;
  return 2;
}

/* Bytes in the rx ring. */
static size_t ring_used(ring_t *r) {
  return (size_t)(atomic_load_explicit(&r->head, memory_order_acquire) -
                  atomic_load_explicit(&r->tail, memory_order_relaxed));
}

/* The receive side of the socket ended (k == 0) or failed (k < 0, errno
 * set): check() reports it, naming the peer. */
static sharc_status_t rx_ended(tcp_pair_t *p, ssize_t k) {
  if (k < 0)
    atomic_store(&p->err, errno);
  atomic_store(&p->rx_eof, 1);
  TRACE(SUB_NET, "tcp: rank %d channel %d: receive side ended (%s)", p->peer,
        p->chan, k < 0 ? strerror(errno) : "EOF");
  comm_wake(p->st->comm); /* this executor's next check() reports it */
  return SHARC_ERR_PEER_LOST;
}

/* Whether ring + socket hold `need` bytes; if not, arranges a wake-up for
 * when they do (SO_RCVLOWAT, rx_want) and returns 0. The executor read its
 * doorbell before this call, so the progress thread's wake-up is not lost.
 * Sets *st on a failure. */
static int rx_ready(tcp_pair_t *p, size_t need, sharc_status_t *st) {
  ring_t *r = &p->rxr;
  *st = SHARC_OK;
  for (;;) {
    size_t ring = ring_used(r);
    if (ring >= need)
      return 1;
    int queued = 0;
    if (ioctl(p->rx_fd, FIONREAD, &queued) < 0)
      queued = 0;
    if (ring + (size_t)queued >= need)
      return 1;
    if (atomic_load(&p->rx_eof)) {
      *st = SHARC_ERR_PEER_LOST;
      return 0;
    }
    if (p->rx_waiting && !atomic_load(&p->rx_want)) {
      /* POLLIN came with fewer bytes than asked: end of stream, or a low
       * mark the kernel did not honour (memory pressure). Move what is
       * there into the (frozen, executor-owned) ring, so the next wait is
       * for new bytes; tcp_setup made sure the ring can hold `need`. */
      p->rx_waiting = 0;
      uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
      size_t o = (size_t)head & (r->size - 1);
      size_t room = SHARC_MIN(r->size - ring, r->size - o);
      ssize_t k = recv(p->rx_fd, r->buf + o, SHARC_MIN(room, need - ring),
                       MSG_DONTWAIT);
      if (k > 0) {
        atomic_store_explicit(&r->head, head + (uint64_t)k,
                              memory_order_release);
        continue;
      }
      if (k < 0 && errno == EINTR)
        continue;
      if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        *st = rx_ended(p, k);
        return 0;
      }
    }
    int lowat = (int)SHARC_MIN(need - ring, (size_t)1 << 30);
    if (lowat != p->rx_lowat && setsockopt(p->rx_fd, SOL_SOCKET, SO_RCVLOWAT,
                                           &lowat, sizeof lowat) == 0)
      p->rx_lowat = lowat;
    p->rx_waiting = 1;
    if (!atomic_exchange(&p->rx_want, 1))
      tcp_kick(p->st);
    return 0;
  }
}

/* Reads message bytes [off, off + n) into dst: first what the rx ring got
 * before the executor took the socket, then the socket; the call that
 * reaches the payload's end also consumes the padding. All or nothing (see
 * the top). Not SHARC_OK: not there yet (retry with the same off), or the
 * connection failed (check() says so). */
static sharc_status_t tcp_recv_copy(transport_conn_t *c, void *dst, size_t off,
                                    size_t n) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  struct tcp_state *st = p->st;
  ring_t *r = &p->rxr;
  uint8_t *d = dst, pad[64];
  if (!atomic_load_explicit(&p->rx_direct, memory_order_relaxed) ||
      p->rx_off != off || n > p->rx_bytes - off) {
    char why[200];
    snprintf(why, sizeof why,
             "tcp: direct receive from rank %d channel %d asked for bytes "
             "%zu..%zu of %zu while at %zu (internal error)",
             c->peer, c->chan, off, off + n, p->rx_bytes, p->rx_off);
    comm_fail(st->comm, -1, SHARC_ERR_INTERNAL, why);
    return SHARC_ERR_INTERNAL;
  }
  size_t goal = off + n >= p->rx_bytes ? p->rx_wire : off + n;
  if (p->rx_fd < 0) { /* the acceptor's socket may not be here yet */
    pthread_mutex_lock(&st->lock);
    p->rx_fd = p->fd;
    pthread_mutex_unlock(&st->lock);
    if (p->rx_fd < 0)
      return SHARC_ERR_NET; /* binding it rings the doorbell */
  }
  sharc_status_t s;
  if (!rx_ready(p, goal - off, &s))
    return s != SHARC_OK ? s : SHARC_ERR_NET;
  p->rx_waiting = 0;
  while (p->rx_off < goal) {
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    if (head != tail) { /* frozen: the progress thread no longer fills it */
      size_t o = (size_t)tail & (r->size - 1);
      size_t k = SHARC_MIN((size_t)(head - tail), r->size - o);
      k = SHARC_MIN(k, goal - p->rx_off);
      if (p->rx_off < p->rx_bytes) /* payload to dst, padding nowhere */
        memcpy(d + (p->rx_off - off), r->buf + o,
               SHARC_MIN(k, p->rx_bytes - p->rx_off));
      p->rx_off += k;
      atomic_store_explicit(&r->tail, tail + k, memory_order_release);
      continue;
    }
    int data = p->rx_off < p->rx_bytes;
    uint8_t *to = data ? d + (p->rx_off - off) : pad;
    size_t want = (data ? SHARC_MIN(goal, p->rx_bytes) : goal) - p->rx_off;
    ssize_t k = recv(p->rx_fd, to, want, MSG_DONTWAIT);
    if (k > 0) {
      p->rx_off += (size_t)k;
      /* The ring is empty: it skips these stream bytes (see the top). */
      atomic_store_explicit(&r->head, head + (uint64_t)k, memory_order_release);
      atomic_store_explicit(&r->tail, tail + (uint64_t)k, memory_order_release);
      continue;
    }
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      /* FIONREAD counted these bytes, so they are queued; never seen, but
       * this call must finish what it started: wait in place. */
      struct pollfd pf = {p->rx_fd, POLLIN, 0};
      poll(&pf, 1, 100);
      if (atomic_load(&st->comm->fail.failed))
        return SHARC_ERR_NET;
      continue;
    }
    return rx_ended(p, k);
  }
  return SHARC_OK;
}

static void tcp_recv_done(transport_conn_t *c) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  int one = 1;
  if (p->rx_lowat != 1 && p->rx_fd >= 0 &&
      setsockopt(p->rx_fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one) == 0)
    p->rx_lowat = 1;
  p->rx_waiting = 0;
  atomic_store(&p->rx_want, 0);
  atomic_store(&p->rx_direct, 0); /* hand the socket back to the thread */
  tcp_kick(p->st);
}

/* ---- pairs ------------------------------------------------------------- */

static void pair_free(tcp_pair_t *p) {
  if (!p)
    return;
  pthread_mutex_destroy(&p->rx_lock);
  free(p->txr.buf);
  free(p->rxr.buf);
  free(p);
}

/* ---- failures ------------------------------------------------------------ */

/* A data socket ended while no control socket can tell a goodbye from a
 * death (it never opened): the peer is lost. */
static void peer_lost(struct tcp_state *st, int peer, int err) {
  tcp_peer_t *pp = &st->peers[peer];
  if (atomic_exchange(&pp->lost, 1))
    return;
  struct sharc_comm *comm = st->comm;
  if (err && err != ECONNRESET && err != EPIPE) {
    char why[400];
    snprintf(why, sizeof why,
             "tcp: connection to rank %d (host %s, pid %d) failed: %s", peer,
             comm->peers[peer].host, comm->peers[peer].pid, strerror(err));
    comm_fail(comm, peer, SHARC_ERR_PEER_LOST, why);
  } else {
    ctrl_fail_lost(st->ctrl, peer, 0);
  }
}

/* A data socket ended. Only the control socket decides that the peer died
 * (a goodbye may still be in flight on it), unless there is none. */
static void pair_ended(struct tcp_state *st, tcp_pair_t *p, int err) {
  tcp_peer_t *pp = &st->peers[p->peer];
  if (err)
    atomic_store(&p->err, err);
  comm_wake(st->comm);
  (void)pp;
  if (ctrl_peer_state(st->ctrl, p->peer) == CTRL_PEER_NONE)
    peer_lost(st, p->peer, err);
}

static void tcp_notify_abort(struct sharc_comm *comm, int failed_rank,
                             sharc_status_t s) {
  struct tcp_state *st = comm->tp_state[TRANSPORT_TCP];
  if (!st)
    return;
  ctrl_abort_all(st->ctrl, failed_rank, s);
}

/* ---- progress thread: data ------------------------------------------------
 */

static void do_recv(struct tcp_state *st, tcp_pair_t *p) {
  ring_t *r = &p->rxr;
  int got = 0, ended = 0, err = 0;
  pthread_mutex_lock(&p->rx_lock);
  if (atomic_load(&p->rx_direct)) { /* the executor reads it: tell it */
    pthread_mutex_unlock(&p->rx_lock);
    if (atomic_exchange(&p->rx_want, 0))
      comm_wake(st->comm);
    return;
  }
  for (int i = 0; i < TCP_BURST; i++) {
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    size_t off = (size_t)head & (r->size - 1);
    size_t want = SHARC_MIN(r->size - (size_t)(head - tail), r->size - off);
    if (want == 0)
      break;
    ssize_t n = recv(p->fd, r->buf + off, want, MSG_DONTWAIT);
    if (n > 0) {
      atomic_store_explicit(&r->head, head + (uint64_t)n, memory_order_release);
      got = 1;
      if ((size_t)n < want)
        break;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    err = n < 0 ? errno : 0;
    ended = 1;
    break;
  }
  pthread_mutex_unlock(&p->rx_lock);
  if (got)
    comm_wake(st->comm);
  if (ended) {
    atomic_store(&p->rx_eof, 1);
    TRACE(SUB_NET, "tcp: rank %d channel %d: receive side ended (%s)", p->peer,
          p->chan, err ? strerror(err) : "EOF");
    pair_ended(st, p, err);
  }
}

static const uint8_t zero_pad[64];

/* A direct send is in progress and may go on: after a failure the executor
 * has left and the buffer may be gone, so it is not touched again. */
static int direct_live(struct tcp_state *st, tcp_pair_t *p) {
  return atomic_load_explicit(&p->tx_direct, memory_order_acquire) &&
         !atomic_load_explicit(&st->comm->fail.failed, memory_order_relaxed);
}

static void do_send(struct tcp_state *st, tcp_pair_t *p) {
  ring_t *r = &p->txr;
  int freed = 0, err = 0;
  for (int i = 0; i < TCP_BURST; i++) {
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    size_t off = (size_t)tail & (r->size - 1);
    size_t want = SHARC_MIN((size_t)(head - tail), r->size - off);
    const uint8_t *src = r->buf + off;
    int direct = want == 0 && direct_live(st, p);
    if (direct) { /* the payload from the user's buffer, then the padding */
      src = p->tx_off < p->tx_bytes ? p->tx_src + p->tx_off : zero_pad;
      want = p->tx_off < p->tx_bytes ? p->tx_bytes - p->tx_off
                                     : p->tx_wire - p->tx_off;
    }
    if (want == 0)
      break;
    ssize_t n = send(p->fd, src, want, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0 && direct) {
      p->tx_off += (size_t)n;
      if (p->tx_off == p->tx_wire) {
        atomic_store(&p->tx_direct, 0);
        freed = 1; /* the executor waits for this one only */
      }
      if ((size_t)n < want)
        break;
      continue;
    }
    if (n > 0) {
      atomic_store_explicit(&r->tail, tail + (uint64_t)n, memory_order_release);
      freed = 1;
      if ((size_t)n < want)
        break;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    err = n < 0 ? errno : EPIPE;
    break;
  }
  if (freed)
    comm_wake(st->comm);
  if (err) {
    atomic_store(&p->tx_dead, 1);
    pair_ended(st, p, err);
  }
}

/* Whether the thread has work on ring r: bytes to send (tx) or space to
 * receive into (rx). Runs the armed protocol (see the top): the flag is
 * cleared only when idle, then the counters are read again. */
static int ring_ready(ring_t *r, int tx, const tcp_pair_t *p) {
  for (int pass = 0; pass < 2; pass++) {
    uint64_t used = atomic_load(&r->head) - atomic_load(&r->tail);
    /* tx: a direct send counts as bytes to send (the executor publishes
     * tx_direct before it reads `armed`, as with head) */
    int direct = tx && atomic_load(&p->tx_direct) &&
                 !atomic_load(&p->st->comm->fail.failed);
    if (tx ? used > 0 || direct : used < r->size) {
      if (pass)
        atomic_store(&r->armed, 1);
      return 1;
    }
    if (!pass)
      atomic_store(&r->armed, 0);
  }
  return 0;
}

static short pair_events(tcp_pair_t *p) {
  short ev = 0;
  if (atomic_load(&p->rx_eof))
    ;
  else if (atomic_load(&p->rx_direct)) /* only while the executor waits */
    ev |= atomic_load(&p->rx_want) ? POLLIN : 0;
  else if (ring_ready(&p->rxr, 0, p))
    ev |= POLLIN;
  if (!atomic_load(&p->tx_dead) && ring_ready(&p->txr, 1, p))
    ev |= POLLOUT;
  return ev;
}

/* ---- progress thread: loop ---------------------------------------------- */

static void ctrl_kick(void *arg) { tcp_kick(arg); }

static int poll_add(struct tcp_state *st, size_t *n, int fd, short ev, int kind,
                    void *obj) {
  if (*n == st->pcap) {
    size_t cap = st->pcap ? 2 * st->pcap : 64;
    struct pollfd *pfd = realloc(st->pfd, cap * sizeof *pfd);
    if (pfd)
      st->pfd = pfd;
    void *pwho = realloc(st->pwho, cap * sizeof *st->pwho);
    if (pwho)
      st->pwho = pwho;
    if (!pfd || !pwho)
      return -1;
    st->pcap = cap;
  }
  st->pfd[*n] = (struct pollfd){fd, ev, 0};
  st->pwho[*n].kind = kind;
  st->pwho[*n].obj = obj;
  (*n)++;
  return 0;
}

/* ctrl_poll_add's add: a control channel entry (who) of the poll set. */
static int ctrl_add(void *owner, int fd, short ev, int32_t who) {
  struct tcp_state *st = owner;
  size_t n = st->pn;
  int rc = poll_add(st, &n, fd, ev, K_CTRL, (void *)(intptr_t)who);
  st->pn = n;
  return rc;
}

/* Under st->lock. */
static int build_pollset(struct tcp_state *st, size_t *n, int *timeout_ms) {
  struct sharc_comm *comm = st->comm;
  uint64_t now = time_ns(), next = UINT64_MAX;
  *n = 0;
  int rc = poll_add(st, n, st->efd, POLLIN, K_EFD, NULL);
  if (comm->listen_fd >= 0 && st->npend < TCP_MAX_PENDING) {
    if (now >= st->accept_pause)
      rc |= poll_add(st, n, comm->listen_fd, POLLIN, K_LISTEN, NULL);
    else
      next = st->accept_pause;
  }
  for (int i = 0; i < st->npend; i++) {
    rc |= poll_add(st, n, st->pend[i].p.fd, POLLIN, K_PEND, &st->pend[i]);
    next = SHARC_MIN(next, st->pend[i].p.deadline);
  }
  st->pn = *n;
  rc |= ctrl_poll_add(st->ctrl, ctrl_add, st, &next);
  *n = st->pn;
  for (int r = 0; r < comm->nranks; r++) {
    tcp_peer_t *pp = &st->peers[r];
    for (int c = 0; c < st->nchan; c++) {
      tcp_pair_t *p = pp->chan[c];
      short ev = p && p->fd >= 0 ? pair_events(p) : 0;
      if (ev)
        rc |= poll_add(st, n, p->fd, ev, K_DATA, p);
    }
  }
  *timeout_ms = next == UINT64_MAX ? -1
                : next <= now      ? 0
                                   : (int)SHARC_MIN((next - now) / 1000000 + 1,
                                                    (uint64_t)60000);
  return rc;
}

static void *progress_main(void *arg) {
  struct tcp_state *st = arg;
  while (!atomic_load(&st->stop)) {
    size_t n;
    int timeout_ms;
    pthread_mutex_lock(&st->lock);
    int rc = build_pollset(st, &n, &timeout_ms);
    pthread_mutex_unlock(&st->lock);
    if (rc) {
      comm_fail(st->comm, -1, SHARC_ERR_NO_MEM,
                "tcp: out of memory in the progress thread");
      break;
    }
    if (poll(st->pfd, n, timeout_ms) < 0 && errno != EINTR) {
      WARN(SUB_NET, "tcp: poll: %s", strerror(errno));
      comm_fail(st->comm, -1, SHARC_ERR_SYSTEM, "tcp: poll failed");
      break;
    }
    for (size_t i = 0; i < n; i++) {
      short re = st->pfd[i].revents, ev = st->pfd[i].events;
      if (!re)
        continue;
      void *obj = st->pwho[i].obj;
      switch (st->pwho[i].kind) {
      case K_EFD: {
        uint64_t v;
        ssize_t r = read(st->efd, &v, sizeof v);
        (void)r;
        break;
      }
      case K_LISTEN:
        tcp_accept(st);
        break;
      case K_PEND:
        tcp_pend_read(st, obj);
        break;
      case K_CTRL:
        ctrl_event(st->ctrl, (int32_t)(intptr_t)obj, re);
        break;
      case K_DATA:
        /* not on POLLOUT alone: that would tell a waiting direct receive
         * that its bytes are there */
        if ((ev & POLLIN) && (re & (POLLIN | POLLERR | POLLHUP)))
          do_recv(st, obj);
        if (ev & POLLOUT)
          do_send(st, obj);
        break;
      }
    }
    tcp_pend_expire(st, time_ns());
  }
  return NULL;
}

/* ---- vtable: setup / connect / check ----------------------------------- */

static void state_free(struct tcp_state *st);

static sharc_status_t tcp_setup(struct sharc_comm *comm) {
  if (comm->tp_state[TRANSPORT_TCP])
    return SHARC_OK;
  if (comm->listen_fd < 0)
    return comm_error(comm, SHARC_ERR_INTERNAL,
                      "tcp: setup without a data listener (listen_fd -1)");
  int nchan = SHARC_MAX(comm->nchan, 1);
  if (nchan > 255)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "tcp: %d channels; at most 255", nchan);
  int64_t want = param_int(PARAM_TCP_FIFO_BYTES);
  size_t fifo = 4096;
  while ((int64_t)fifo < want && fifo < ((size_t)1 << 30))
    fifo <<= 1;
  struct tcp_state *st = calloc(1, sizeof *st);
  if (!st)
    return comm_error(comm, SHARC_ERR_NO_MEM, "tcp: out of memory");
  int64_t direct = param_int(PARAM_TCP_DIRECT_BYTES);
  /* at least 64: a direct message is never empty */
  st->direct_bytes = direct <= 0 ? SIZE_MAX : SHARC_MAX((size_t)direct, 64);
  /* A direct receive waits for one executor slice (plus padding) at a time
   * and, should the kernel not keep that much queued, collects it in the
   * ring: only where the ring can hold it. */
  st->direct_recv = comm->cfg.slice + 64 <= fifo ? st->direct_bytes : SIZE_MAX;
  st->comm = comm;
  st->vt = &transport_tcp;
  st->nchan = nchan;
  st->fifo_bytes = fifo;
  st->efd = -1;
  pthread_mutex_init(&st->lock, NULL);
  pthread_mutex_init(&st->dial_lock, NULL);
  st->peers = calloc((size_t)comm->nranks, sizeof *st->peers);
  st->pairs = calloc((size_t)comm->nranks * (size_t)nchan, sizeof *st->pairs);
  if (!st->peers || !st->pairs) {
    state_free(st);
    return comm_error(comm, SHARC_ERR_NO_MEM, "tcp: out of memory for %d peers",
                      comm->nranks);
  }
  for (int r = 0; r < comm->nranks; r++)
    st->peers[r].chan = st->pairs + (size_t)r * (size_t)nchan;
  st->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (st->efd < 0) {
    int e = errno;
    state_free(st);
    return comm_error(comm, SHARC_ERR_SYSTEM, "tcp: eventfd: %s", strerror(e));
  }
  /* The control sockets open through tcp's own hello (tcp_dial_ctrl) and
   * arrive on tcp's listener (bind_hello); a lost peer and abort notices
   * fail the communicator as on every network transport. */
  ctrl_ops_t ops = {
      .name = "tcp", .kick = ctrl_kick, .dial = tcp_dial_ctrl, .arg = st};
  sharc_status_t cs = ctrl_create(comm, &ops, &st->ctrl);
  if (cs != SHARC_OK) {
    state_free(st);
    return cs;
  }
  /* Published before the thread starts: its comm_fail reads
   * comm->tp_state[TRANSPORT_TCP]. */
  comm->tp_state[TRANSPORT_TCP] = st;
  int e = pthread_create(&st->thread, NULL, progress_main, st);
  if (e) {
    comm->tp_state[TRANSPORT_TCP] = NULL;
    state_free(st);
    return comm_error(comm, SHARC_ERR_SYSTEM,
                      "tcp: cannot start the progress thread: %s", strerror(e));
  }
  st->thread_started = 1;
  INFO(SUB_NET,
       "tcp: ready, %d channel(s), FIFOs of %zu bytes, direct sends from %zu "
       "bytes, direct receives from %zu bytes",
       nchan, fifo, st->direct_bytes, st->direct_recv);
  return SHARC_OK;
}

static sharc_status_t tcp_check(transport_conn_t *c) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  struct tcp_state *st = p->st;
  struct sharc_comm *comm = st->comm;
  tcp_peer_t *pp = &st->peers[c->peer];
  const char *host = comm->peers[c->peer].host;
  char as[96];
  pthread_mutex_lock(&st->lock);
  int bound = p->fd >= 0;
  uint64_t deadline = p->deadline;
  pthread_mutex_unlock(&st->lock);
  if (!bound) {
    if (deadline && time_ns() > deadline)
      return comm_record(comm, SHARC_ERR_TIMEOUT,
                         "tcp: rank %d (host %s, listening at %s) never "
                         "connected channel %d to this rank (SHARC_TIMEOUT=%s)",
                         c->peer, host,
                         tcp_addr_of(comm, c->peer, as, sizeof as), c->chan,
                         param_str(PARAM_TIMEOUT));
    return SHARC_OK;
  }
  int ended;
  if (c->is_send) {
    ended = atomic_load(&p->tx_dead);
  } else { /* received bytes stay readable after the end; a direct
            * receive that waits has already taken what it can */
    ended = atomic_load(&p->rx_eof) &&
            (atomic_load(&p->rxr.head) == atomic_load(&p->rxr.tail) ||
             atomic_load(&p->rx_direct));
  }
  int cs = ctrl_peer_state(st->ctrl, c->peer);
  if (atomic_load(&pp->lost) || cs == CTRL_PEER_LOST || ended) {
    int err = atomic_load(&p->err);
    if (err && err != ECONNRESET && err != EPIPE)
      return comm_record(
          comm, SHARC_ERR_NET, "tcp: channel %d to rank %d (host %s, %s): %s",
          c->chan, c->peer, host, tcp_addr_of(comm, c->peer, as, sizeof as),
          strerror(err));
    if (cs == CTRL_PEER_BYE)
      return comm_record(comm, SHARC_ERR_PEER_LOST,
                         "tcp: rank %d (host %s) left the communicator while "
                         "this rank still %s it on channel %d",
                         c->peer, host,
                         c->is_send ? "had data for" : "expected data from",
                         c->chan);
    return comm_record(comm, SHARC_ERR_PEER_LOST,
                       "rank %d (host %s, pid %d) closed its connection: "
                       "process died or left the communicator",
                       c->peer, host, comm->peers[c->peer].pid);
  }
  return SHARC_OK;
}

/* SHARC_FAULT drop: shuts the pair's socket down as a broken link would,
 * so both ends see it end; this rank's sends fail at once, with an error
 * (not a clean end) to tell it from a peer that left. */
static void tcp_fault_drop(transport_conn_t *c) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  struct tcp_state *st = p->st;
  pthread_mutex_lock(&st->lock);
  if (p->fd >= 0)
    shutdown(p->fd, SHUT_RDWR);
  pthread_mutex_unlock(&st->lock);
  atomic_store(&p->err, ECONNABORTED);
  atomic_store(&p->tx_dead, 1);
  tcp_kick(st);
}

/* ---- teardown ------------------------------------------------------------ */

static int tx_flushed(struct tcp_state *st) {
  int done = 1;
  pthread_mutex_lock(&st->lock);
  for (size_t i = 0; i < (size_t)st->comm->nranks * (size_t)st->nchan; i++) {
    tcp_pair_t *p = st->pairs[i]; /* unbound ones too: a dial may be due */
    if (p && !atomic_load(&p->tx_dead) &&
        !atomic_load(&st->peers[p->peer].lost) &&
        ctrl_peer_state(st->ctrl, p->peer) != CTRL_PEER_LOST &&
        atomic_load(&p->txr.head) != atomic_load(&p->txr.tail))
      done = 0;
  }
  pthread_mutex_unlock(&st->lock);
  return done;
}

/* Discards unread input so close() sends FIN after queued data, not RST. */
static void close_socket(int fd) {
  char junk[4096];
  while (recv(fd, junk, sizeof junk, MSG_DONTWAIT) > 0) {
  }
  close(fd);
}

static void state_free(struct tcp_state *st) {
  struct sharc_comm *comm = st->comm;
  for (int i = 0; i < st->npend; i++)
    close(st->pend[i].p.fd);
  ctrl_destroy(st->ctrl);
  if (st->pairs)
    for (size_t i = 0; i < (size_t)comm->nranks * (size_t)st->nchan; i++) {
      tcp_pair_t *p = st->pairs[i];
      if (p && p->fd >= 0)
        close_socket(p->fd);
      pair_free(p);
    }
  if (st->efd >= 0)
    close(st->efd);
  pthread_mutex_destroy(&st->lock);
  pthread_mutex_destroy(&st->dial_lock);
  free(st->pfd);
  free(st->pwho);
  free(st->peers);
  free(st->pairs);
  free(st);
}

static void tcp_teardown(struct sharc_comm *comm, uint64_t deadline_ns) {
  struct tcp_state *st = comm->tp_state[TRANSPORT_TCP];
  if (!st)
    return;
  if (st->thread_started) {
    /* The progress thread drains the tx rings; it rings our doorbell each
     * time it frees space. */
    for (;;) { /* after a failure nobody waits for our bytes */
      uint32_t seen = atomic_load(&comm->wake->doorbell);
      if (atomic_load(&comm->fail.failed) || tx_flushed(st))
        break;
      uint64_t now = time_ns();
      if (now >= deadline_ns) {
        WARN(SUB_NET, "tcp: teardown: unsent bytes dropped at the deadline");
        break;
      }
      comm_wait(comm, seen, SHARC_MIN(deadline_ns - now, 100000000ull));
    }
    ctrl_bye_all(st->ctrl);
    atomic_store(&st->stop, 1);
    tcp_kick(st);
    pthread_join(st->thread, NULL);
  }
  comm->tp_state[TRANSPORT_TCP] = NULL;
  state_free(st);
}

const transport_t transport_tcp = {
    .name = "tcp",
    .id = TRANSPORT_TCP,
    .scope = TRANSPORT_NET,
    .setup = tcp_setup,
    .connect = tcp_connect,
    .send_space = tcp_send_space,
    .send_commit = tcp_send_commit,
    .recv_avail = tcp_recv_avail,
    .recv_release = tcp_recv_release,
    .send_begin = tcp_send_begin,
    .send_done = tcp_send_done,
    .recv_begin = tcp_recv_begin,
    .recv_done = tcp_recv_done,
    .recv_copy = tcp_recv_copy,
    .check = tcp_check,
    .notify_abort = tcp_notify_abort,
    .teardown = tcp_teardown,
    .fault_drop = tcp_fault_drop,
};

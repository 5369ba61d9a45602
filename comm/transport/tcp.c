/*
 * tcp.c - the tcp transport (DESIGN.md items 4 and 7): byte FIFOs between
 * ranks on different hosts, carried by TCP sockets.
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
 * Connections: the lower rank dials the higher rank's listener
 * (comm->peers[peer].addr) and sends a hello {magic, version, uid, token,
 * rank, chan}; the higher rank's progress thread accepts, checks it (token in
 * constant time) and binds the socket to the pair, or drops it with a WARN.
 * The first dial to a peer also opens its control socket (chan 0xFF), which
 * carries abort notices and a goodbye sent at clean teardown. A control
 * socket that ends without a goodbye means the peer died: comm_fail at once.
 * A data socket that ends only makes that FIFO report PEER_LOST (lazily, from
 * check()) once its received bytes are consumed.
 *
 * Direct sends (at least SHARC_TCP_DIRECT_BYTES, not under SHARC_FAULT):
 * staging costs a memcpy per byte on each side on top of the kernel's two
 * copies (bench/results/tcp_throughput.md), so a large send skips the tx
 * ring: send_begin hands the user buffer to the progress thread, which
 * send()s from it once the ring has drained (order), then the zero padding
 * the staged path would have sent, and clears tx_direct when the kernel has
 * every byte (send_done). The wire is unchanged, so the receiver does not
 * know or care. Receives still go through the rx ring (recv_begin says
 * "inline"): a version that let the executor recv() into its buffers
 * desynchronised streams under tests/mp/coll_check with 3-4 ranks and was
 * taken out; see tcp_throughput.md.
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
#include <sys/socket.h>
#include <unistd.h>

#include "comm.h"
#include "exec.h"
#include "fault.h"
#include "net.h"

#define TCP_MAGIC 0x53484354u /* "SHCT" */
#define TCP_CTRL_MAGIC 0x53484341u
#define TCP_VERSION 1u
#define TCP_CTRL 0xFFu              /* hello chan of the control socket */
#define TCP_MAX_PENDING 64          /* accepted sockets awaiting their hello */
#define TCP_HELLO_NS 10000000000ull /* a dialer must say hello within 10 s */
#define TCP_BURST 16                /* send/recv calls per socket per wake-up */

typedef struct {
  uint32_t magic, version;
  uint64_t uid;
  uint8_t token[SHARC_TOKEN_BYTES];
  int32_t rank;  /* the dialer */
  uint32_t chan; /* 0..nchan-1, or TCP_CTRL */
} hello_t;       /* 40 bytes, no padding */

typedef struct {
  uint32_t magic;
  int32_t failed_rank; /* -1 unknown */
  int32_t status;      /* SHARC_OK: goodbye (clean teardown) */
} ctrl_msg_t;

typedef struct {
  uint8_t *buf;
  size_t size;                        /* bytes, power of two, multiple of 64 */
  _Alignas(64) _Atomic uint64_t head; /* bytes ever produced */
  _Alignas(64) _Atomic uint64_t tail; /* bytes ever consumed */
  _Alignas(64) _Atomic int armed;     /* the progress thread watches it */
} ring_t;

struct tcp_pair;
typedef struct {
  transport_conn_t base; /* first: what the executor holds */
  struct tcp_pair *pair;
} tcp_conn_t;

typedef struct tcp_pair {
  ring_t txr, rxr;
  tcp_conn_t tx, rx;
  struct tcp_state *st;
  int peer, chan;
  int fd;             /* -1 until dialed or accepted; under st->lock */
  uint64_t deadline;  /* acceptor: when check() gives up waiting for the dial */
  _Atomic int rx_eof; /* no more bytes will arrive */
  _Atomic int tx_dead; /* bytes can no longer be sent */
  _Atomic int err;     /* errno that ended the socket, 0 for EOF */
  /* Direct sends: the progress thread sends tx_src, then zero padding up to
   * tx_wire; fields written by the executor before it sets tx_direct. */
  _Atomic int tx_direct;
  const uint8_t *tx_src;
  size_t tx_bytes, tx_wire;
  size_t tx_off; /* progress thread only */
} tcp_pair_t;

typedef struct {
  tcp_pair_t **chan;         /* [nchan] */
  _Atomic int ctrl_fd;       /* -1 until connected */
  pthread_mutex_t ctrl_lock; /* one writer of control messages at a time */
  uint8_t cbuf[sizeof(ctrl_msg_t)];
  size_t cfill;        /* progress thread only */
  int ctrl_done;       /* progress thread stopped reading it */
  _Atomic int goodbye; /* peer tore down cleanly */
  _Atomic int lost;    /* peer's control socket ended without goodbye */
} tcp_peer_t;

typedef struct {
  int fd;
  size_t fill;
  uint64_t deadline;
  hello_t h;
  net_addr_t from;
} pending_t;

typedef struct {
  int kind; /* K_* */
  void *obj;
} poll_who_t;

struct tcp_state {
  struct sharc_comm *comm;
  size_t fifo_bytes;
  size_t direct_bytes; /* SHARC_TCP_DIRECT_BYTES; SIZE_MAX: never */
  int nchan;           /* comm->nchan, at least 1 */
  int efd;
  pthread_t thread;
  int thread_started;
  _Atomic int stop;
  pthread_mutex_t lock;            /* pair creation, fd binding, ctrl_fd */
  pthread_mutex_t dial_lock;       /* serialises dialing threads */
  tcp_peer_t *peers;               /* [nranks] */
  tcp_pair_t **pairs;              /* [nranks * nchan] */
  pending_t pend[TCP_MAX_PENDING]; /* progress thread only */
  int npend;
  uint64_t accept_pause; /* out of fds: leave the listener until then */
  struct pollfd *pfd;    /* progress thread scratch: [pcap] */
  poll_who_t *pwho;
  size_t pcap;
};

enum { K_EFD, K_LISTEN, K_PEND, K_CTRL, K_DATA };

static void kick(struct tcp_state *st) {
  uint64_t one = 1;
  ssize_t r = write(st->efd, &one, sizeof one);
  (void)r; /* EAGAIN means a wake-up is already pending */
}

static const char *addr_of(struct sharc_comm *comm, int peer, char *buf,
                           size_t len) {
  return net_addr_str(&comm->peers[peer].addr, buf, len);
}

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
    kick(p->st);
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
    kick(p->st);
}

/* ---- direct messages (executor side) ------------------------------------ */

static int tcp_send_begin(transport_conn_t *c, const void *src, size_t bytes) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  ring_t *r = &p->txr;
  if (bytes < p->st->direct_bytes || fault_enabled())
    return 0; /* inline: SHARC_FAULT hooks see every staged byte */
  if (atomic_load(&r->head) != atomic_load(&r->tail))
    return -1; /* staged bytes of earlier messages go first */
  p->tx_src = src;
  p->tx_bytes = bytes;
  p->tx_wire = exec_wire_bytes(bytes);
  p->tx_off = 0;
  atomic_store(&p->tx_direct, 1); /* publishes the fields above */
  if (!atomic_load(&r->armed) && !atomic_exchange(&r->armed, 1))
    kick(p->st);
  return 1;
}

static int tcp_send_done(transport_conn_t *c) {
  return !atomic_load(&((tcp_conn_t *)c)->pair->tx_direct);
}

/* Receives always go through the rx ring (see the top). */
static int tcp_recv_begin(transport_conn_t *c, size_t bytes,
                          const void **direct) {
  (void)c;
  (void)bytes;
  *direct = NULL;
  return 0;
}

/* ---- pairs ------------------------------------------------------------- */

static void pair_free(tcp_pair_t *p) {
  if (!p)
    return;
  free(p->txr.buf);
  free(p->rxr.buf);
  free(p);
}

/* Under st->lock. NULL when out of memory. */
static tcp_pair_t *pair_get(struct tcp_state *st, int peer, int chan) {
  tcp_pair_t **slot = &st->peers[peer].chan[chan];
  if (*slot)
    return *slot;
  void *mem = NULL, *tb = NULL, *rb = NULL;
  if (posix_memalign(&mem, 64, sizeof(tcp_pair_t)) ||
      posix_memalign(&tb, 64, st->fifo_bytes) ||
      posix_memalign(&rb, 64, st->fifo_bytes)) {
    free(mem);
    free(tb);
    return NULL;
  }
  tcp_pair_t *p = mem;
  memset(p, 0, sizeof *p);
  p->txr.buf = tb;
  p->rxr.buf = rb;
  p->txr.size = p->rxr.size = st->fifo_bytes;
  atomic_init(&p->rxr.armed, 1); /* polled for POLLIN as soon as bound */
  p->tx = (tcp_conn_t){{&transport_tcp, peer, chan, 1}, p};
  p->rx = (tcp_conn_t){{&transport_tcp, peer, chan, 0}, p};
  p->st = st;
  p->peer = peer;
  p->chan = chan;
  p->fd = -1;
  *slot = p;
  return p;
}

/* ---- failures ------------------------------------------------------------ */

static void peer_lost(struct tcp_state *st, int peer, int err) {
  tcp_peer_t *pp = &st->peers[peer];
  if (atomic_load(&pp->goodbye) || atomic_exchange(&pp->lost, 1))
    return;
  struct sharc_comm *comm = st->comm;
  char why[400];
  if (err && err != ECONNRESET && err != EPIPE)
    snprintf(why, sizeof why,
             "tcp: connection to rank %d (host %s, pid %d) failed: %s", peer,
             comm->peers[peer].host, comm->peers[peer].pid, strerror(err));
  else
    snprintf(why, sizeof why,
             "rank %d (host %s, pid %d) closed its connection: process died "
             "or left the communicator",
             peer, comm->peers[peer].host, comm->peers[peer].pid);
  comm_fail(comm, peer, SHARC_ERR_PEER_LOST, why);
}

/* A data socket ended. Only the control socket decides that the peer died
 * (a goodbye may still be in flight on it), unless there is none. */
static void pair_ended(struct tcp_state *st, tcp_pair_t *p, int err) {
  tcp_peer_t *pp = &st->peers[p->peer];
  if (err)
    atomic_store(&p->err, err);
  comm_wake(st->comm);
  if (atomic_load(&pp->ctrl_fd) < 0 || pp->ctrl_done)
    peer_lost(st, p->peer, err);
}

static void handle_ctrl(struct tcp_state *st, int peer, const ctrl_msg_t *m) {
  struct sharc_comm *comm = st->comm;
  if (m->magic != TCP_CTRL_MAGIC) {
    WARN(SUB_NET,
         "tcp: rank %d (host %s) sent a malformed control message "
         "(magic 0x%x); ignored",
         peer, comm->peers[peer].host, m->magic);
    return;
  }
  if (m->status == SHARC_OK) {
    atomic_store(&st->peers[peer].goodbye, 1);
    return;
  }
  sharc_status_t s = (sharc_status_t)m->status;
  int f = m->failed_rank;
  char why[400];
  if (f >= 0 && f < comm->nranks)
    snprintf(why, sizeof why,
             "rank %d (host %s) %s (reported by rank %d, "
             "host %s)",
             f, comm->peers[f].host,
             s == SHARC_ERR_PEER_LOST ? "was lost"
             : s == SHARC_ERR_TIMEOUT ? "timed out"
                                      : sharc_status_string(s),
             peer, comm->peers[peer].host);
  else
    snprintf(why, sizeof why, "rank %d (host %s) aborted the communicator: %s",
             peer, comm->peers[peer].host, sharc_status_string(s));
  comm_fail(comm, f >= 0 && f < comm->nranks ? f : -1, s, why);
}

static void ctrl_read(struct tcp_state *st, int peer) {
  tcp_peer_t *pp = &st->peers[peer];
  int fd = atomic_load(&pp->ctrl_fd);
  for (;;) {
    ssize_t n = recv(fd, pp->cbuf + pp->cfill, sizeof pp->cbuf - pp->cfill,
                     MSG_DONTWAIT);
    if (n > 0) {
      pp->cfill += (size_t)n;
      if (pp->cfill == sizeof pp->cbuf) {
        ctrl_msg_t m;
        memcpy(&m, pp->cbuf, sizeof m);
        pp->cfill = 0;
        handle_ctrl(st, peer, &m);
      }
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    pp->ctrl_done = 1;
    peer_lost(st, peer, n < 0 ? errno : 0);
    return;
  }
}

/* Best effort, never blocks: a full socket drops the message. */
static void ctrl_send(struct tcp_state *st, int peer, int failed_rank,
                      sharc_status_t s) {
  tcp_peer_t *pp = &st->peers[peer];
  int fd = atomic_load(&pp->ctrl_fd);
  if (fd < 0 || atomic_load(&pp->lost))
    return;
  ctrl_msg_t m = {TCP_CTRL_MAGIC, failed_rank, (int32_t)s};
  pthread_mutex_lock(&pp->ctrl_lock);
  ssize_t n;
  do {
    n = send(fd, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  pthread_mutex_unlock(&pp->ctrl_lock);
  if (n != (ssize_t)sizeof m)
    TRACE(SUB_NET, "tcp: control message to rank %d not sent (%s)", peer,
          n < 0 ? strerror(errno) : "partial");
}

static void tcp_notify_abort(struct sharc_comm *comm, int failed_rank,
                             sharc_status_t s) {
  struct tcp_state *st = comm->tcp;
  if (!st)
    return;
  for (int r = 0; r < comm->nranks; r++)
    if (r != comm->rank)
      ctrl_send(st, r, failed_rank, s);
}

/* ---- progress thread: data ------------------------------------------------
 */

static void do_recv(struct tcp_state *st, tcp_pair_t *p) {
  ring_t *r = &p->rxr;
  int got = 0, ended = 0, err = 0;
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
  if (!atomic_load(&p->rx_eof) && ring_ready(&p->rxr, 0, p))
    ev |= POLLIN;
  if (!atomic_load(&p->tx_dead) && ring_ready(&p->txr, 1, p))
    ev |= POLLOUT;
  return ev;
}

/* ---- progress thread: accepting -------------------------------------------
 */

static void do_accept(struct tcp_state *st) {
  while (st->npend < TCP_MAX_PENDING) {
    pending_t *pe = &st->pend[st->npend];
    memset(pe, 0, sizeof *pe);
    int fd =
        net_accept_nb(st->comm->listen_fd, &pe->from, "tcp", &st->accept_pause);
    if (fd < 0)
      return;
    pe->fd = fd;
    pe->deadline = time_ns() + TCP_HELLO_NS;
    st->npend++;
  }
}

/* Checks a complete hello and binds its socket. Returns 1 when the socket
 * now belongs to a pair or control slot, 0 when the caller must close it. */
static int bind_hello(struct tcp_state *st, pending_t *pe) {
  struct sharc_comm *comm = st->comm;
  const hello_t *h = &pe->h;
  const char *bad = NULL;
  if (h->magic != TCP_MAGIC)
    bad = "not a sharc hello";
  else if (h->version != TCP_VERSION)
    bad = "protocol version differs";
  else if (h->uid != comm->uid)
    bad = "another communicator";
  else if (!net_secret_equal(h->token, comm->token, SHARC_TOKEN_BYTES))
    bad = "wrong job token";
  else if (h->rank < 0 || h->rank >= comm->rank)
    bad = "rank out of range";
  else if (h->chan != TCP_CTRL && h->chan >= (uint32_t)st->nchan)
    bad = "channel out of range";
  int r = h->rank, ok = 0;
  if (!bad) {
    pthread_mutex_lock(&st->lock);
    if (h->chan == TCP_CTRL) {
      if (atomic_load(&st->peers[r].ctrl_fd) < 0) {
        atomic_store(&st->peers[r].ctrl_fd, pe->fd);
        ok = 1;
      }
    } else {
      tcp_pair_t *p = pair_get(st, r, (int)h->chan);
      if (!p)
        bad = "out of memory for its FIFOs";
      else if (p->fd < 0) {
        p->fd = pe->fd;
        ok = 1;
      }
    }
    pthread_mutex_unlock(&st->lock);
    if (!ok && !bad)
      bad = "duplicate connection";
  }
  char as[96];
  if (bad) {
    WARN(SUB_NET,
         "tcp: dropped connection from %s: %s (this is rank %d of "
         "communicator %llx; the job is not disturbed)",
         net_addr_str(&pe->from, as, sizeof as), bad, comm->rank,
         (unsigned long long)comm->uid);
    return 0;
  }
  int one = 1;
  setsockopt(pe->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  TRACE(SUB_NET, "tcp: accepted rank %d channel %d from %s", r,
        h->chan == TCP_CTRL ? -1 : (int)h->chan,
        net_addr_str(&pe->from, as, sizeof as));
  comm_wake(comm);
  return 1;
}

static void pend_read(struct tcp_state *st, pending_t *pe) {
  char as[96];
  for (;;) {
    ssize_t n = recv(pe->fd, (uint8_t *)&pe->h + pe->fill,
                     sizeof pe->h - pe->fill, MSG_DONTWAIT);
    if (n > 0) {
      pe->fill += (size_t)n;
      if (pe->fill < sizeof pe->h)
        continue;
      if (!bind_hello(st, pe))
        close(pe->fd);
      pe->fd = -1;
      return;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    WARN(SUB_NET, "tcp: dropped connection from %s: closed before its hello",
         net_addr_str(&pe->from, as, sizeof as));
    close(pe->fd);
    pe->fd = -1;
    return;
  }
}

static void pend_expire(struct tcp_state *st, uint64_t now) {
  char as[96];
  int j = 0;
  for (int i = 0; i < st->npend; i++) {
    pending_t *pe = &st->pend[i];
    if (pe->fd >= 0 && now >= pe->deadline) {
      WARN(SUB_NET, "tcp: dropped connection from %s: no hello within %llu s",
           net_addr_str(&pe->from, as, sizeof as),
           (unsigned long long)(TCP_HELLO_NS / 1000000000ull));
      close(pe->fd);
      pe->fd = -1;
    }
    if (pe->fd >= 0)
      st->pend[j++] = *pe;
  }
  st->npend = j;
}

/* ---- progress thread: loop ---------------------------------------------- */

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
    rc |= poll_add(st, n, st->pend[i].fd, POLLIN, K_PEND, &st->pend[i]);
    next = SHARC_MIN(next, st->pend[i].deadline);
  }
  for (int r = 0; r < comm->nranks; r++) {
    tcp_peer_t *pp = &st->peers[r];
    int cfd = atomic_load(&pp->ctrl_fd);
    if (cfd >= 0 && !pp->ctrl_done)
      rc |= poll_add(st, n, cfd, POLLIN, K_CTRL, (void *)(intptr_t)r);
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
        do_accept(st);
        break;
      case K_PEND:
        pend_read(st, obj);
        break;
      case K_CTRL:
        ctrl_read(st, (int)(intptr_t)obj);
        break;
      case K_DATA:
        if (ev & POLLIN)
          do_recv(st, obj);
        if (ev & POLLOUT)
          do_send(st, obj);
        break;
      }
    }
    pend_expire(st, time_ns());
  }
  return NULL;
}

/* ---- vtable: setup / connect / check ----------------------------------- */

static void state_free(struct tcp_state *st);

static sharc_status_t tcp_setup(struct sharc_comm *comm) {
  if (comm->tcp)
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
  st->comm = comm;
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
  for (int r = 0; r < comm->nranks; r++) {
    st->peers[r].chan = st->pairs + (size_t)r * (size_t)nchan;
    atomic_init(&st->peers[r].ctrl_fd, -1);
    pthread_mutex_init(&st->peers[r].ctrl_lock, NULL);
  }
  st->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (st->efd < 0) {
    int e = errno;
    state_free(st);
    return comm_error(comm, SHARC_ERR_SYSTEM, "tcp: eventfd: %s", strerror(e));
  }
  /* Published before the thread starts: its comm_fail reads comm->tcp. */
  comm->tcp = st;
  int e = pthread_create(&st->thread, NULL, progress_main, st);
  if (e) {
    comm->tcp = NULL;
    state_free(st);
    return comm_error(comm, SHARC_ERR_SYSTEM,
                      "tcp: cannot start the progress thread: %s", strerror(e));
  }
  st->thread_started = 1;
  INFO(SUB_NET,
       "tcp: ready, %d channel(s), FIFOs of %zu bytes, direct sends from %zu "
       "bytes",
       nchan, fifo, st->direct_bytes);
  return SHARC_OK;
}

/* Dials peer's listener and says hello; returns a non-blocking socket. */
static sharc_status_t dial(struct tcp_state *st, int peer, uint32_t chan,
                           uint64_t deadline, int *out) {
  struct sharc_comm *comm = st->comm;
  char as[96];
  int fd = -1;
  sharc_status_t s = net_connect(&comm->peers[peer].addr, deadline, &fd);
  if (s == SHARC_OK) {
    hello_t h = {TCP_MAGIC, TCP_VERSION, comm->uid, {0}, comm->rank, chan};
    memcpy(h.token, comm->token, sizeof h.token);
    if (fault_enabled()) /* SHARC_FAULT corrupt:R:header */
      fault_header(peer, &h, sizeof h,
                   chan == TCP_CTRL ? "control connection's hello" : "hello");
    s = net_send_all(fd, &h, sizeof h, deadline);
    if (s != SHARC_OK)
      close(fd);
  }
  if (s != SHARC_OK)
    return comm_error(comm, s == SHARC_ERR_TIMEOUT ? s : SHARC_ERR_NET,
                      "tcp: cannot connect to rank %d (host %s) at %s: %s",
                      peer, comm->peers[peer].host,
                      addr_of(comm, peer, as, sizeof as), err_last());
  net_set_nonblocking(fd);
  *out = fd;
  return SHARC_OK;
}

static sharc_status_t tcp_connect(struct sharc_comm *comm, int peer, int chan,
                                  int is_send, uint64_t deadline_ns,
                                  transport_conn_t **conn) {
  struct tcp_state *st = comm->tcp;
  CHECK(comm_check_connect(comm, "tcp", st, peer, chan, st ? st->nchan : 0));
  tcp_peer_t *pp = &st->peers[peer];
  pthread_mutex_lock(&st->lock);
  tcp_pair_t *p = pair_get(st, peer, chan);
  int bound = p && p->fd >= 0;
  if (p && peer < comm->rank && p->deadline == 0)
    p->deadline = deadline_ns;
  pthread_mutex_unlock(&st->lock);
  if (!p)
    return comm_error(comm, SHARC_ERR_NO_MEM,
                      "tcp: out of memory for the FIFOs to rank %d (2 x %zu "
                      "bytes)",
                      peer, st->fifo_bytes);
  /* The higher rank never dials: the pair binds when the peer's socket
   * arrives (the rings work before that), so connect does not wait on the
   * peer's schedule; check() reports a dial that never came. */
  if (!bound && peer > comm->rank) {
    sharc_status_t s = SHARC_OK;
    pthread_mutex_lock(&st->dial_lock);
    if (atomic_load(&pp->ctrl_fd) < 0) {
      int fd;
      s = dial(st, peer, TCP_CTRL, deadline_ns, &fd);
      if (s == SHARC_OK)
        atomic_store(&pp->ctrl_fd, fd);
    }
    pthread_mutex_lock(&st->lock);
    bound = p->fd >= 0;
    pthread_mutex_unlock(&st->lock);
    if (s == SHARC_OK && !bound) {
      int fd;
      s = dial(st, peer, (uint32_t)chan, deadline_ns, &fd);
      if (s == SHARC_OK) {
        pthread_mutex_lock(&st->lock);
        p->fd = fd;
        pthread_mutex_unlock(&st->lock);
      }
    }
    pthread_mutex_unlock(&st->dial_lock);
    kick(st);
    if (s != SHARC_OK)
      return s;
  }
  *conn = is_send ? &p->tx.base : &p->rx.base;
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
                         c->peer, host, addr_of(comm, c->peer, as, sizeof as),
                         c->chan, param_str(PARAM_TIMEOUT));
    return SHARC_OK;
  }
  int ended;
  if (c->is_send) {
    ended = atomic_load(&p->tx_dead);
  } else { /* received bytes stay readable after the end */
    ended = atomic_load(&p->rx_eof) &&
            atomic_load(&p->rxr.head) == atomic_load(&p->rxr.tail);
  }
  if (fault_enabled() && fault_conn_dropped(c))
    ended = 1; /* SHARC_FAULT drop: what is left will not be read */
  if (atomic_load(&pp->lost) || ended) {
    int err = atomic_load(&p->err);
    if (err && err != ECONNRESET && err != EPIPE)
      return comm_record(comm, SHARC_ERR_NET,
                         "tcp: channel %d to rank %d (host %s, %s): %s",
                         c->chan, c->peer, host,
                         addr_of(comm, c->peer, as, sizeof as), strerror(err));
    if (atomic_load(&pp->goodbye))
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
void tcp_fault_drop(transport_conn_t *c) {
  tcp_pair_t *p = ((tcp_conn_t *)c)->pair;
  struct tcp_state *st = p->st;
  pthread_mutex_lock(&st->lock);
  if (p->fd >= 0)
    shutdown(p->fd, SHUT_RDWR);
  pthread_mutex_unlock(&st->lock);
  atomic_store(&p->err, ECONNABORTED);
  atomic_store(&p->tx_dead, 1);
  kick(st);
}

/* ---- teardown ------------------------------------------------------------ */

static int tx_flushed(struct tcp_state *st) {
  int done = 1;
  pthread_mutex_lock(&st->lock);
  for (size_t i = 0; i < (size_t)st->comm->nranks * (size_t)st->nchan; i++) {
    tcp_pair_t *p = st->pairs[i]; /* unbound ones too: a dial may be due */
    if (p && !atomic_load(&p->tx_dead) &&
        !atomic_load(&st->peers[p->peer].lost) &&
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
    close(st->pend[i].fd);
  if (st->peers)
    for (int r = 0; r < comm->nranks; r++) {
      int fd = atomic_load(&st->peers[r].ctrl_fd);
      if (fd >= 0)
        close_socket(fd);
      pthread_mutex_destroy(&st->peers[r].ctrl_lock);
    }
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
  struct tcp_state *st = comm->tcp;
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
    for (int r = 0; r < comm->nranks; r++)
      if (r != comm->rank)
        ctrl_send(st, r, comm->rank, SHARC_OK);
    atomic_store(&st->stop, 1);
    kick(st);
    pthread_join(st->thread, NULL);
  }
  comm->tcp = NULL;
  state_free(st);
}

const transport_t transport_tcp = {
    .name = "tcp",
    .setup = tcp_setup,
    .connect = tcp_connect,
    .send_space = tcp_send_space,
    .send_commit = tcp_send_commit,
    .recv_avail = tcp_recv_avail,
    .recv_release = tcp_recv_release,
    .send_begin = tcp_send_begin,
    .send_done = tcp_send_done,
    .recv_begin = tcp_recv_begin,
    .check = tcp_check,
    .notify_abort = tcp_notify_abort,
    .teardown = tcp_teardown,
};

/*
 * tcp_conn.c - connection setup of the tcp transport (tcp.c): the lower
 * rank dials the higher rank's listener and says hello {magic, version,
 * uid, token, rank, chan}; the higher rank's progress thread accepts,
 * checks the hello (token in constant time) and binds the socket to its
 * pair, or drops it with a WARN. The first dial to a peer also opens its
 * control socket (chan TCP_CTRL), which the control channel (ctrl.c) takes
 * over on both ends.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_impl.h"

tcp_pair_t *tcp_pair_get(struct tcp_state *st, int peer, int chan) {
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
  p->tx =
      (tcp_conn_t){{.tp = st->vt, .peer = peer, .chan = chan, .is_send = 1}, p};
  p->rx =
      (tcp_conn_t){{.tp = st->vt, .peer = peer, .chan = chan, .is_send = 0}, p};
  p->st = st;
  p->peer = peer;
  p->chan = chan;
  p->fd = -1;
  p->rx_fd = -1;
  p->rx_lowat = 1;
  pthread_mutex_init(&p->rx_lock, NULL);
  *slot = p;
  return p;
}

/* ---- progress thread: accepting -------------------------------------------
 */

void tcp_accept(struct tcp_state *st) {
  net_pend_accept(st->comm->listen_fd, st->pend, sizeof *st->pend, &st->npend,
                  TCP_MAX_PENDING, TCP_HELLO_NS, "tcp", &st->accept_pause);
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
  if (!bad && h->chan == TCP_CTRL) {
    ok = ctrl_adopt(st->ctrl, r, pe->p.fd) == 0;
  } else if (!bad) {
    pthread_mutex_lock(&st->lock);
    tcp_pair_t *p = tcp_pair_get(st, r, (int)h->chan);
    if (!p)
      bad = "out of memory for its FIFOs";
    else if (p->fd < 0) {
      p->fd = pe->p.fd;
      ok = 1;
    }
    pthread_mutex_unlock(&st->lock);
  }
  if (!ok && !bad)
    bad = "duplicate connection";
  char as[96];
  if (bad) {
    WARN(SUB_NET,
         "tcp: dropped connection from %s: %s (this is rank %d of "
         "communicator %llx; the job is not disturbed)",
         net_addr_str(&pe->p.from, as, sizeof as), bad, comm->rank,
         (unsigned long long)comm->uid);
    return 0;
  }
  int one = 1;
  setsockopt(pe->p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  TRACE(SUB_NET, "tcp: accepted rank %d channel %d from %s", r,
        h->chan == TCP_CTRL ? -1 : (int)h->chan,
        net_addr_str(&pe->p.from, as, sizeof as));
  comm_wake(comm);
  return 1;
}

void tcp_pend_read(struct tcp_state *st, pending_t *pe) {
  if (net_pend_read(&pe->p, &pe->h, sizeof pe->h, "tcp") <= 0)
    return; /* more to come, or closed (logged) */
  if (!bind_hello(st, pe))
    close(pe->p.fd);
  pe->p.fd = -1;
}

void tcp_pend_expire(struct tcp_state *st, uint64_t now) {
  st->npend = net_pend_expire(st->pend, sizeof *st->pend, st->npend, now,
                              TCP_HELLO_NS, "tcp");
}

/* ---- dialing ------------------------------------------------------------ */

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
    transport_header_sent(peer, &h, sizeof h,
                          chan == TCP_CTRL ? "control connection's hello"
                                           : "hello");
    s = net_send_all(fd, &h, sizeof h, deadline);
    if (s != SHARC_OK)
      close(fd);
  }
  if (s != SHARC_OK)
    return comm_error(comm, s == SHARC_ERR_TIMEOUT ? s : SHARC_ERR_NET,
                      "tcp: cannot connect to rank %d (host %s) at %s: %s",
                      peer, comm->peers[peer].host,
                      tcp_addr_of(comm, peer, as, sizeof as), err_last());
  net_set_nonblocking(fd);
  *out = fd;
  return SHARC_OK;
}

sharc_status_t tcp_dial_ctrl(void *arg, int peer, uint64_t deadline_ns,
                             int *fd) {
  return dial(arg, peer, TCP_CTRL, deadline_ns, fd);
}

sharc_status_t tcp_connect(struct sharc_comm *comm, int peer, int chan,
                           int is_send, uint64_t deadline_ns,
                           transport_conn_t **conn) {
  struct tcp_state *st = comm->tp_state[TRANSPORT_TCP];
  CHECK(comm_check_connect(comm, "tcp", st, peer, chan, st ? st->nchan : 0));
  pthread_mutex_lock(&st->lock);
  tcp_pair_t *p = tcp_pair_get(st, peer, chan);
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
    s = ctrl_connect(st->ctrl, peer, deadline_ns); /* the first dial */
    pthread_mutex_lock(&st->lock);
    bound = p->fd >= 0;
    pthread_mutex_unlock(&st->lock);
    if (s == SHARC_OK && !bound) {
      int fd = -1;
      s = dial(st, peer, (uint32_t)chan, deadline_ns, &fd);
      if (s == SHARC_OK) {
        pthread_mutex_lock(&st->lock);
        p->fd = fd;
        pthread_mutex_unlock(&st->lock);
      }
    }
    pthread_mutex_unlock(&st->dial_lock);
    tcp_kick(st);
    if (s != SHARC_OK)
      return s;
  }
  *conn = is_send ? &p->tx.base : &p->rx.base;
  return SHARC_OK;
}

/*
 * ib_ctrl.c - the ib transport's control sockets: one TCP connection per
 * pair of ranks, next to the RDMA queue pairs, for what verbs cannot carry
 * before a connection exists or after it failed.
 *
 * Over it the transport exchanges each pair's QP numbers, PSNs, LID/GID and
 * ring keys (ib_info_t), announces a clean exit (BYE) and tells peers that
 * the job is failing (ABORT). A socket that ends without a BYE means the
 * peer process died: the kernel closes it at once, whereas an RC QP to a
 * dead peer only fails on the next write after the retry timeouts, and an
 * idle one never does.
 *
 * Addresses come from the bootstrap's rank table (comm->peers[].addr, the
 * data listener every rank opens before the rendezvous). The lower rank
 * dials and opens with a hello {magic, version, uid, token, rank, nranks};
 * the higher rank's progress thread accepts and checks it (token in
 * constant time), or drops the socket with a WARN without disturbing the
 * job. Frames have one fixed size. Senders queue frames under the peer's
 * lock and write what the socket takes without blocking; the progress
 * thread writes the rest when the socket is writable.
 */
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib_ctrl.h"
#include "net.h"
#include "state.h"
#include "transport.h"

#define IBC_MAGIC 0x43494853u /* "SHIC" in memory on little-endian */
#define IBC_VERSION 1u
#define IBC_MAX_PENDING 64
#define IBC_HELLO_NS 10000000000ull /* a dialer says hello within 10 s */

enum { T_HELLO = 1, T_BYE = 2, T_ABORT = 3 };

typedef struct {
  uint32_t magic;
  uint16_t type, len; /* len: body bytes used */
  int32_t a, b;       /* ABORT: failed rank, status */
  uint8_t body[IBC_BODY];
} frame_t;
_Static_assert(sizeof(frame_t) == 248, "frames have one fixed size");

typedef struct {
  uint32_t version, pad;
  uint64_t uid;
  uint8_t token[SHARC_TOKEN_BYTES];
  int32_t rank, nranks;
} hello_t;

typedef struct {
  pthread_mutex_t lock; /* fd and the out queue */
  int fd;               /* -1 until dialed or accepted */
  uint8_t *out;         /* queued frames */
  size_t out_off, out_len, out_cap;
  uint8_t in[sizeof(frame_t)]; /* progress thread only */
  size_t in_fill;
  _Atomic int state; /* IBC_PEER_* */
  int done;          /* progress thread: stopped reading */
} peer_t;

typedef struct {
  net_pend_t p; /* first: net.h's helpers walk the array */
  frame_t f;
} pend_t;

struct ibc {
  struct sharc_comm *comm;
  ibc_ops_t ops;
  peer_t *peers;             /* [nranks] */
  pthread_mutex_t dial_lock; /* one dialing thread at a time */
  pend_t pend[IBC_MAX_PENDING];
  int npend;
  uint64_t accept_pause;
  struct pollfd *pfd; /* progress thread scratch */
  int32_t *who;       /* per entry: -1 listener, -2 - i pending i, peer */
  size_t cap;
};

sharc_status_t ibc_create(struct sharc_comm *comm, const ibc_ops_t *ops,
                          ibc_t **out) {
  ibc_t *c = calloc(1, sizeof *c);
  if (c)
    c->peers = calloc((size_t)comm->nranks, sizeof *c->peers);
  if (!c || !c->peers) {
    free(c);
    return comm_error(comm, SHARC_ERR_NO_MEM,
                      "ib: out of memory for the control sockets of %d ranks",
                      comm->nranks);
  }
  c->comm = comm;
  c->ops = *ops;
  pthread_mutex_init(&c->dial_lock, NULL);
  for (int r = 0; r < comm->nranks; r++) {
    pthread_mutex_init(&c->peers[r].lock, NULL);
    c->peers[r].fd = -1;
    atomic_init(&c->peers[r].state, IBC_PEER_NONE);
  }
  *out = c;
  return SHARC_OK;
}

int ibc_peer_state(ibc_t *c, int peer) {
  return atomic_load(&c->peers[peer].state);
}

/* ---- sending --------------------------------------------------------------
 */

/* Under pp->lock. Writes queued bytes without blocking; a failed socket
 * drops them (the reading side reports the end). */
static void flush(peer_t *pp) {
  if (pp->fd < 0) /* kept until the socket exists */
    return;
  while (pp->out_off < pp->out_len) {
    ssize_t n = send(pp->fd, pp->out + pp->out_off, pp->out_len - pp->out_off,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      pp->out_off += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    pp->out_off = pp->out_len; /* socket failed: nothing will leave */
  }
  pp->out_off = pp->out_len = 0;
}

static int queue_frame(peer_t *pp, const frame_t *f) {
  if (pp->out_off > 0 && pp->out_off == pp->out_len)
    pp->out_off = pp->out_len = 0;
  if (pp->out_len + sizeof *f > pp->out_cap) {
    if (pp->out_off > 0) { /* reclaim what left */
      memmove(pp->out, pp->out + pp->out_off, pp->out_len - pp->out_off);
      pp->out_len -= pp->out_off;
      pp->out_off = 0;
    }
    if (pp->out_len + sizeof *f > pp->out_cap) {
      size_t cap = pp->out_cap ? 2 * pp->out_cap : 8 * sizeof *f;
      uint8_t *o = realloc(pp->out, cap);
      if (!o)
        return -1;
      pp->out = o;
      pp->out_cap = cap;
    }
  }
  memcpy(pp->out + pp->out_len, f, sizeof *f);
  pp->out_len += sizeof *f;
  return 0;
}

static sharc_status_t send_frame(ibc_t *c, int peer, const frame_t *f,
                                 int best_effort) {
  peer_t *pp = &c->peers[peer];
  int st = atomic_load(&pp->state);
  if (st == IBC_PEER_LOST || st == IBC_PEER_BYE)
    return SHARC_ERR_PEER_LOST;
  pthread_mutex_lock(&pp->lock);
  if (best_effort && pp->fd < 0) {
    pthread_mutex_unlock(&pp->lock);
    return SHARC_OK;
  }
  int rc = queue_frame(pp, f);
  flush(pp);
  int waiting = pp->fd >= 0 && pp->out_off < pp->out_len;
  pthread_mutex_unlock(&pp->lock);
  if (rc)
    return SHARC_ERR_NO_MEM;
  if (waiting) /* the progress thread finishes it when writable */
    c->ops.kick(c->ops.arg);
  return SHARC_OK;
}

sharc_status_t ibc_send(ibc_t *c, int peer, int type, const void *body,
                        size_t len) {
  struct sharc_comm *comm = c->comm;
  if (len > IBC_BODY || type < IBC_USER || type > 0xffff)
    return comm_error(comm, SHARC_ERR_INTERNAL,
                      "ib: control frame type %d of %zu bytes (at most %d)",
                      type, len, IBC_BODY);
  frame_t f;
  memset(&f, 0, sizeof f);
  f.magic = IBC_MAGIC;
  f.type = (uint16_t)type;
  f.len = (uint16_t)len;
  memcpy(f.body, body, len);
  sharc_status_t s = send_frame(c, peer, &f, 0);
  if (s == SHARC_ERR_PEER_LOST)
    return comm_record(comm, s,
                       "ib: rank %d (host %s) is gone: its control "
                       "connection ended",
                       peer, comm->peers[peer].host);
  if (s == SHARC_ERR_NO_MEM)
    return comm_error(comm, s, "ib: out of memory queueing a control frame");
  return s;
}

void ibc_abort_all(ibc_t *c, int failed_rank, sharc_status_t st) {
  frame_t f;
  memset(&f, 0, sizeof f);
  f.magic = IBC_MAGIC;
  f.type = T_ABORT;
  f.a = failed_rank;
  f.b = (int32_t)st;
  for (int r = 0; r < c->comm->nranks; r++)
    if (r != c->comm->rank)
      send_frame(c, r, &f, 1);
}

void ibc_bye_all(ibc_t *c) {
  frame_t f;
  memset(&f, 0, sizeof f);
  f.magic = IBC_MAGIC;
  f.type = T_BYE;
  for (int r = 0; r < c->comm->nranks; r++)
    if (r != c->comm->rank)
      send_frame(c, r, &f, 1);
}

/* ---- dialing --------------------------------------------------------------
 */

/* An idle RC queue pair never fails, so a host that dies or drops off the
 * network is noticed through its control socket: keepalive probes after 5
 * s idle, every 2 s, 3 unanswered -> the socket errors (about 11 s). */
static void keepalive(int fd) {
  int one = 1, idle = 5, intvl = 2, cnt = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

static void bind_fd(ibc_t *c, int peer, int fd) {
  keepalive(fd);
  peer_t *pp = &c->peers[peer];
  pthread_mutex_lock(&pp->lock);
  pp->fd = fd;
  int expect = IBC_PEER_NONE;
  atomic_compare_exchange_strong(&pp->state, &expect, IBC_PEER_UP);
  flush(pp);
  pthread_mutex_unlock(&pp->lock);
  c->ops.kick(c->ops.arg);
}

sharc_status_t ibc_connect(ibc_t *c, int peer, uint64_t deadline_ns) {
  struct sharc_comm *comm = c->comm;
  if (peer < 0 || peer >= comm->nranks || peer == comm->rank)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "ib: control connection to rank %d: out of range (%d "
                      "ranks, self %d)",
                      peer, comm->nranks, comm->rank);
  peer_t *pp = &c->peers[peer];
  if (peer < comm->rank) /* the lower rank dials; wait for it */
    return SHARC_OK;
  pthread_mutex_lock(&c->dial_lock);
  pthread_mutex_lock(&pp->lock);
  int have = pp->fd >= 0;
  pthread_mutex_unlock(&pp->lock);
  sharc_status_t s = SHARC_OK;
  if (!have) {
    char as[96];
    int fd = -1;
    frame_t f;
    memset(&f, 0, sizeof f);
    f.magic = IBC_MAGIC;
    f.type = T_HELLO;
    f.len = sizeof(hello_t);
    hello_t h = {IBC_VERSION, 0, comm->uid, {0}, comm->rank, comm->nranks};
    memcpy(h.token, comm->token, sizeof h.token);
    memcpy(f.body, &h, sizeof h);
    s = net_connect(&comm->peers[peer].addr, deadline_ns, &fd);
    if (s == SHARC_OK) {
      s = net_send_all(fd, &f, sizeof f, deadline_ns);
      if (s != SHARC_OK)
        close(fd);
    }
    if (s != SHARC_OK)
      s = comm_error(comm, s == SHARC_ERR_TIMEOUT ? s : SHARC_ERR_NET,
                     "ib: cannot open the control connection to rank %d "
                     "(host %s) at %s: %s",
                     peer, comm->peers[peer].host,
                     net_addr_str(&comm->peers[peer].addr, as, sizeof as),
                     err_last());
    else {
      net_set_nonblocking(fd);
      bind_fd(c, peer, fd);
    }
  }
  pthread_mutex_unlock(&c->dial_lock);
  return s;
}

/* ---- progress thread: accepting -------------------------------------------
 */

static void do_accept(ibc_t *c) {
  net_pend_accept(c->comm->listen_fd, c->pend, sizeof *c->pend, &c->npend,
                  IBC_MAX_PENDING, IBC_HELLO_NS, "ib", &c->accept_pause);
}

/* Checks a complete hello; returns the dialer's rank, or -1 with *bad. */
static int check_hello(ibc_t *c, const frame_t *f, const char **bad) {
  struct sharc_comm *comm = c->comm;
  hello_t h;
  memcpy(&h, f->body, sizeof h);
  *bad = f->magic != IBC_MAGIC                      ? "not a sharc ib hello"
         : f->type != T_HELLO || f->len != sizeof h ? "not a hello frame"
         : h.version != IBC_VERSION                 ? "protocol version differs"
         : h.uid != comm->uid                       ? "another communicator"
         : !net_secret_equal(h.token, comm->token, SHARC_TOKEN_BYTES)
             ? "wrong job token"
         : h.nranks != comm->nranks           ? "another job size"
         : h.rank < 0 || h.rank >= comm->rank ? "rank out of range"
                                              : NULL;
  return *bad ? -1 : h.rank;
}

static void pend_read(ibc_t *c, pend_t *pe) {
  struct sharc_comm *comm = c->comm;
  char as[96];
  if (net_pend_read(&pe->p, &pe->f, sizeof pe->f, "ib") <= 0)
    return; /* more to come, or closed (logged) */
  const char *bad;
  int r = check_hello(c, &pe->f, &bad);
  if (r >= 0) {
    peer_t *pp = &c->peers[r];
    pthread_mutex_lock(&pp->lock);
    if (pp->fd >= 0)
      bad = "duplicate connection";
    pthread_mutex_unlock(&pp->lock);
  }
  if (bad) {
    WARN(SUB_NET,
         "ib: dropped control connection from %s: %s (this is rank %d "
         "of communicator %llx; the job is not disturbed)",
         net_addr_str(&pe->p.from, as, sizeof as), bad, comm->rank,
         (unsigned long long)comm->uid);
    close(pe->p.fd);
  } else {
    int one = 1;
    setsockopt(pe->p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    TRACE(SUB_NET, "ib: control connection from rank %d (%s)", r,
          net_addr_str(&pe->p.from, as, sizeof as));
    bind_fd(c, r, pe->p.fd);
  }
  pe->p.fd = -1;
}

static void pend_expire(ibc_t *c, uint64_t now) {
  c->npend = net_pend_expire(c->pend, sizeof *c->pend, c->npend, now,
                             IBC_HELLO_NS, "ib");
}

/* ---- progress thread: reading ---------------------------------------------
 */

static void dispatch(ibc_t *c, int peer, const frame_t *f) {
  struct sharc_comm *comm = c->comm;
  if (f->magic != IBC_MAGIC || f->len > IBC_BODY) {
    WARN(SUB_NET,
         "ib: rank %d (host %s) sent a malformed control frame (magic 0x%x, "
         "%u bytes); ignored",
         peer, comm->peers[peer].host, f->magic, f->len);
    return;
  }
  if (f->type == T_BYE) {
    atomic_store(&c->peers[peer].state, IBC_PEER_BYE);
  } else if (f->type == T_ABORT) {
    c->ops.on_abort(c->ops.arg, peer, f->a, (sharc_status_t)f->b);
  } else if (f->type >= IBC_USER) {
    c->ops.on_msg(c->ops.arg, peer, f->type, f->body, f->len);
  } else {
    WARN(SUB_NET, "ib: rank %d (host %s) sent control frame type %u; ignored",
         peer, comm->peers[peer].host, f->type);
  }
}

static void peer_read(ibc_t *c, int peer) {
  peer_t *pp = &c->peers[peer];
  for (;;) {
    ssize_t n = recv(pp->fd, pp->in + pp->in_fill, sizeof pp->in - pp->in_fill,
                     MSG_DONTWAIT);
    if (n > 0) {
      pp->in_fill += (size_t)n;
      if (pp->in_fill == sizeof pp->in) {
        frame_t f;
        memcpy(&f, pp->in, sizeof f);
        pp->in_fill = 0;
        dispatch(c, peer, &f);
      }
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    pp->done = 1;
    int expect = IBC_PEER_UP;
    if (atomic_compare_exchange_strong(&pp->state, &expect, IBC_PEER_LOST))
      c->ops.on_lost(c->ops.arg, peer, n < 0 ? errno : 0);
    return;
  }
}

/* ---- poll set -------------------------------------------------------------
 */

static int add(ibc_t *c, size_t *n, int fd, short ev, int32_t who) {
  if (*n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 64;
    struct pollfd *pfd = realloc(c->pfd, cap * sizeof *pfd);
    if (pfd)
      c->pfd = pfd;
    int32_t *w = realloc(c->who, cap * sizeof *w);
    if (w)
      c->who = w;
    if (!pfd || !w)
      return -1;
    c->cap = cap;
  }
  c->pfd[*n] = (struct pollfd){fd, ev, 0};
  c->who[*n] = who;
  (*n)++;
  return 0;
}

struct pollfd *ibc_pollset(ibc_t *c, size_t reserve, size_t *n,
                           int *timeout_ms) {
  struct sharc_comm *comm = c->comm;
  uint64_t now = time_ns(), next = UINT64_MAX;
  pend_expire(c, now);
  size_t k = 0;
  int rc = 0;
  for (size_t i = 0; i < reserve; i++)
    rc |= add(c, &k, -1, 0, INT32_MIN);
  if (comm->listen_fd >= 0 && c->npend < IBC_MAX_PENDING) {
    if (now >= c->accept_pause)
      rc |= add(c, &k, comm->listen_fd, POLLIN, -1);
    else
      next = c->accept_pause;
  }
  for (int i = 0; i < c->npend; i++) {
    rc |= add(c, &k, c->pend[i].p.fd, POLLIN, -2 - i);
    next = SHARC_MIN(next, c->pend[i].p.deadline);
  }
  for (int r = 0; r < comm->nranks; r++) {
    peer_t *pp = &c->peers[r];
    pthread_mutex_lock(&pp->lock);
    int fd = pp->done ? -1 : pp->fd;
    short ev = POLLIN | (pp->out_off < pp->out_len ? POLLOUT : 0);
    pthread_mutex_unlock(&pp->lock);
    if (fd >= 0)
      rc |= add(c, &k, fd, ev, r);
  }
  if (rc)
    return NULL;
  *n = k;
  *timeout_ms = next == UINT64_MAX ? -1
                : next <= now      ? 0
                                   : (int)SHARC_MIN((next - now) / 1000000 + 1,
                                                    (uint64_t)60000);
  return c->pfd;
}

void ibc_handle(ibc_t *c, size_t reserve, size_t n) {
  for (size_t i = reserve; i < n; i++) {
    short re = c->pfd[i].revents;
    int32_t who = c->who[i];
    if (!re)
      continue;
    if (who == -1) {
      do_accept(c);
    } else if (who <= -2) {
      pend_read(c, &c->pend[-2 - who]);
    } else {
      peer_t *pp = &c->peers[who];
      if (re & POLLOUT) {
        pthread_mutex_lock(&pp->lock);
        flush(pp);
        pthread_mutex_unlock(&pp->lock);
      }
      if (re & (POLLIN | POLLHUP | POLLERR))
        peer_read(c, who);
    }
  }
}

/* ---- teardown -------------------------------------------------------------
 */

/* Sends what is still queued (briefly), then discards unread input so
 * close() sends FIN after queued data, not RST. */
static void close_peer(peer_t *pp) {
  if (pp->out_off < pp->out_len)
    net_send_all(pp->fd, pp->out + pp->out_off, pp->out_len - pp->out_off,
                 time_ns() + 200000000ull);
  char junk[4096];
  while (recv(pp->fd, junk, sizeof junk, MSG_DONTWAIT) > 0) {
  }
  close(pp->fd);
}

void ibc_destroy(ibc_t *c) {
  if (!c)
    return;
  for (int i = 0; i < c->npend; i++)
    if (c->pend[i].p.fd >= 0)
      close(c->pend[i].p.fd);
  for (int r = 0; r < c->comm->nranks; r++) {
    peer_t *pp = &c->peers[r];
    if (pp->fd >= 0)
      close_peer(pp);
    free(pp->out);
    pthread_mutex_destroy(&pp->lock);
  }
  pthread_mutex_destroy(&c->dial_lock);
  free(c->pfd);
  free(c->who);
  free(c->peers);
  free(c);
}

/*
 * ctrl.c - the control channel of the network transports (ctrl.h has the
 * protocol): control sockets, their frames, goodbyes and abort notices,
 * and the one message a communicator fails with when a peer is lost or
 * reports a failure, whichever transport carried it.
 */
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrl.h"
#include "net.h"
#include "state.h"
#include "transport.h"

#define CTRL_MAGIC 0x43494853u /* "SHIC" in memory on little-endian */
#define CTRL_VERSION 1u
#define CTRL_MAX_PENDING 64
#define CTRL_HELLO_NS 10000000000ull /* a dialer says hello within 10 s */

enum { T_HELLO = 1, T_BYE = 2, T_ABORT = 3 };

typedef struct {
  uint32_t magic;
  uint16_t type, len; /* len: body bytes used */
  int32_t a, b;       /* ABORT: failed rank, status */
  uint8_t body[CTRL_BODY];
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
  _Atomic int state; /* CTRL_PEER_* */
  int done;          /* progress thread: stopped reading */
} peer_t;

typedef struct {
  net_pend_t p; /* first: net.h's helpers walk the array */
  frame_t f;
} pend_t;

struct ctrl {
  struct sharc_comm *comm;
  ctrl_ops_t ops;
  peer_t *peers;             /* [nranks] */
  pthread_mutex_t dial_lock; /* one dialing thread at a time */
  pend_t pend[CTRL_MAX_PENDING];
  int npend;
  uint64_t accept_pause;
  struct pollfd *pfd; /* progress thread scratch */
  int32_t *who;       /* per entry: -1 listener, -2 - i pending i, peer */
  size_t cap;
  size_t fill; /* entries in pfd (ctrl_pollset's add) */
};

sharc_status_t ctrl_create(struct sharc_comm *comm, const ctrl_ops_t *ops,
                           ctrl_t **out) {
  ctrl_t *c = calloc(1, sizeof *c);
  if (c)
    c->peers = calloc((size_t)comm->nranks, sizeof *c->peers);
  if (!c || !c->peers) {
    free(c);
    return comm_error(comm, SHARC_ERR_NO_MEM,
                      "%s: out of memory for the control sockets of %d ranks",
                      ops->name, comm->nranks);
  }
  c->comm = comm;
  c->ops = *ops;
  pthread_mutex_init(&c->dial_lock, NULL);
  for (int r = 0; r < comm->nranks; r++) {
    pthread_mutex_init(&c->peers[r].lock, NULL);
    c->peers[r].fd = -1;
    atomic_init(&c->peers[r].state, CTRL_PEER_NONE);
  }
  *out = c;
  return SHARC_OK;
}

int ctrl_peer_state(ctrl_t *c, int peer) {
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

static sharc_status_t send_frame(ctrl_t *c, int peer, const frame_t *f,
                                 int best_effort) {
  peer_t *pp = &c->peers[peer];
  /* A peer that said goodbye still gets ours (best effort): it may be
   * tearing down too, and a socket that ends without a goodbye means a
   * death to it, which it would report to everyone still at work. */
  int st = atomic_load(&pp->state);
  if (st == CTRL_PEER_LOST || (!best_effort && st == CTRL_PEER_BYE))
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

sharc_status_t ctrl_send(ctrl_t *c, int peer, int type, const void *body,
                         size_t len) {
  struct sharc_comm *comm = c->comm;
  if (len > CTRL_BODY || type < CTRL_USER || type > 0xffff)
    return comm_error(comm, SHARC_ERR_INTERNAL,
                      "%s: control frame type %d of %zu bytes (at most %d)",
                      c->ops.name, type, len, CTRL_BODY);
  frame_t f;
  memset(&f, 0, sizeof f);
  f.magic = CTRL_MAGIC;
  f.type = (uint16_t)type;
  f.len = (uint16_t)len;
  memcpy(f.body, body, len);
  sharc_status_t s = send_frame(c, peer, &f, 0);
  if (s == SHARC_ERR_PEER_LOST)
    return comm_record(comm, s,
                       "%s: rank %d (host %s) is gone: its control "
                       "connection ended",
                       c->ops.name, peer, comm->peers[peer].host);
  if (s == SHARC_ERR_NO_MEM)
    return comm_error(comm, s, "%s: out of memory queueing a control frame",
                      c->ops.name);
  return s;
}

void ctrl_abort_all(ctrl_t *c, int failed_rank, sharc_status_t st) {
  frame_t f;
  memset(&f, 0, sizeof f);
  f.magic = CTRL_MAGIC;
  f.type = T_ABORT;
  f.a = failed_rank;
  f.b = (int32_t)st;
  for (int r = 0; r < c->comm->nranks; r++)
    if (r != c->comm->rank)
      send_frame(c, r, &f, 1);
}

void ctrl_bye_all(ctrl_t *c) {
  frame_t f;
  memset(&f, 0, sizeof f);
  f.magic = CTRL_MAGIC;
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

static void bind_fd(ctrl_t *c, int peer, int fd) {
  keepalive(fd);
  peer_t *pp = &c->peers[peer];
  pthread_mutex_lock(&pp->lock);
  pp->fd = fd;
  int expect = CTRL_PEER_NONE;
  atomic_compare_exchange_strong(&pp->state, &expect, CTRL_PEER_UP);
  flush(pp);
  pthread_mutex_unlock(&pp->lock);
  c->ops.kick(c->ops.arg);
}

sharc_status_t ctrl_connect(ctrl_t *c, int peer, uint64_t deadline_ns) {
  struct sharc_comm *comm = c->comm;
  if (peer < 0 || peer >= comm->nranks || peer == comm->rank)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: control connection to rank %d: out of range (%d "
                      "ranks, self %d)",
                      c->ops.name, peer, comm->nranks, comm->rank);
  peer_t *pp = &c->peers[peer];
  if (peer < comm->rank) /* the lower rank dials; wait for it */
    return SHARC_OK;
  pthread_mutex_lock(&c->dial_lock);
  pthread_mutex_lock(&pp->lock);
  int have = pp->fd >= 0;
  pthread_mutex_unlock(&pp->lock);
  sharc_status_t s = SHARC_OK;
  if (!have && c->ops.dial) { /* the transport's own hello */
    int fd = -1;
    s = c->ops.dial(c->ops.arg, peer, deadline_ns, &fd);
    if (s == SHARC_OK) {
      net_set_nonblocking(fd);
      bind_fd(c, peer, fd);
    }
  } else if (!have) {
    char as[96];
    int fd = -1;
    frame_t f;
    memset(&f, 0, sizeof f);
    f.magic = CTRL_MAGIC;
    f.type = T_HELLO;
    f.len = sizeof(hello_t);
    hello_t h = {CTRL_VERSION, 0, comm->uid, {0}, comm->rank, comm->nranks};
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
                     "%s: cannot open the control connection to rank %d "
                     "(host %s) at %s: %s",
                     c->ops.name, peer, comm->peers[peer].host,
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

int ctrl_adopt(ctrl_t *c, int peer, int fd) {
  peer_t *pp = &c->peers[peer];
  pthread_mutex_lock(&pp->lock);
  int dup = pp->fd >= 0;
  pthread_mutex_unlock(&pp->lock);
  if (dup)
    return -1;
  net_set_nonblocking(fd);
  bind_fd(c, peer, fd);
  return 0;
}

/* ---- progress thread: accepting -------------------------------------------
 */

static void do_accept(ctrl_t *c) {
  net_pend_accept(c->comm->listen_fd, c->pend, sizeof *c->pend, &c->npend,
                  CTRL_MAX_PENDING, CTRL_HELLO_NS, c->ops.name,
                  &c->accept_pause);
}

/* Checks a complete hello; returns the dialer's rank, or -1 with *bad. */
static int check_hello(ctrl_t *c, const frame_t *f, const char **bad) {
  struct sharc_comm *comm = c->comm;
  hello_t h;
  memcpy(&h, f->body, sizeof h);
  *bad = f->magic != CTRL_MAGIC                     ? "not a sharc ib hello"
         : f->type != T_HELLO || f->len != sizeof h ? "not a hello frame"
         : h.version != CTRL_VERSION                ? "protocol version differs"
         : h.uid != comm->uid                       ? "another communicator"
         : !net_secret_equal(h.token, comm->token, SHARC_TOKEN_BYTES)
             ? "wrong job token"
         : h.nranks != comm->nranks           ? "another job size"
         : h.rank < 0 || h.rank >= comm->rank ? "rank out of range"
                                              : NULL;
  return *bad ? -1 : h.rank;
}

static void pend_read(ctrl_t *c, pend_t *pe) {
  struct sharc_comm *comm = c->comm;
  char as[96];
  if (net_pend_read(&pe->p, &pe->f, sizeof pe->f, c->ops.name) <= 0)
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
         "%s: dropped control connection from %s: %s (this is rank %d "
         "of communicator %llx; the job is not disturbed)",
         c->ops.name, net_addr_str(&pe->p.from, as, sizeof as), bad, comm->rank,
         (unsigned long long)comm->uid);
    close(pe->p.fd);
  } else {
    int one = 1;
    setsockopt(pe->p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    TRACE(SUB_NET, "%s: control connection from rank %d (%s)", c->ops.name, r,
          net_addr_str(&pe->p.from, as, sizeof as));
    bind_fd(c, r, pe->p.fd);
  }
  pe->p.fd = -1;
}

static void pend_expire(ctrl_t *c, uint64_t now) {
  c->npend = net_pend_expire(c->pend, sizeof *c->pend, c->npend, now,
                             CTRL_HELLO_NS, c->ops.name);
}

/* ---- progress thread: reading ---------------------------------------------
 */

static void dispatch(ctrl_t *c, int peer, const frame_t *f) {
  struct sharc_comm *comm = c->comm;
  if (f->magic != CTRL_MAGIC || f->len > CTRL_BODY) {
    WARN(SUB_NET,
         "%s: rank %d (host %s) sent a malformed control frame (magic 0x%x, "
         "%u bytes); ignored",
         c->ops.name, peer, comm->peers[peer].host, f->magic, f->len);
    return;
  }
  if (f->type == T_BYE) {
    atomic_store(&c->peers[peer].state, CTRL_PEER_BYE);
  } else if (f->type == T_ABORT) {
    if (c->ops.on_abort)
      c->ops.on_abort(c->ops.arg, peer, f->a, (sharc_status_t)f->b);
    else
      ctrl_fail_abort(c, peer, f->a, (sharc_status_t)f->b);
  } else if (f->type >= CTRL_USER && c->ops.on_msg) {
    c->ops.on_msg(c->ops.arg, peer, f->type, f->body, f->len);
  } else {
    WARN(SUB_NET, "%s: rank %d (host %s) sent control frame type %u; ignored",
         c->ops.name, peer, comm->peers[peer].host, f->type);
  }
}

static void peer_read(ctrl_t *c, int peer) {
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
    int expect = CTRL_PEER_UP;
    int err = n < 0 ? errno : 0;
    if (!atomic_compare_exchange_strong(&pp->state, &expect, CTRL_PEER_LOST))
      return; /* said goodbye first */
    if (c->ops.on_lost)
      c->ops.on_lost(c->ops.arg, peer, err);
    else
      ctrl_fail_lost(c, peer, err);
    return;
  }
}

/* ---- what a communicator fails with ---------------------------------------
 */

void ctrl_fail_lost(ctrl_t *c, int peer, int err) {
  struct sharc_comm *comm = c->comm;
  char why[400];
  snprintf(why, sizeof why,
           "rank %d (host %s, pid %d) closed its connection: process died "
           "or left the communicator%s%s%s",
           peer, comm->peers[peer].host, comm->peers[peer].pid, err ? " (" : "",
           err ? strerror(err) : "", err ? ")" : "");
  comm_fail(comm, peer, SHARC_ERR_PEER_LOST, why);
}

void ctrl_fail_abort(ctrl_t *c, int peer, int failed_rank, sharc_status_t st) {
  struct sharc_comm *comm = c->comm;
  char why[400];
  int known = failed_rank >= 0 && failed_rank < comm->nranks;
  if (known)
    snprintf(why, sizeof why,
             "rank %d (host %s) %s (reported by rank %d, "
             "host %s)",
             failed_rank, comm->peers[failed_rank].host,
             st == SHARC_ERR_PEER_LOST ? "was lost"
             : st == SHARC_ERR_TIMEOUT ? "timed out"
                                       : sharc_status_string(st),
             peer, comm->peers[peer].host);
  else
    snprintf(why, sizeof why, "rank %d (host %s) aborted the communicator: %s",
             peer, comm->peers[peer].host, sharc_status_string(st));
  comm_fail(comm, known ? failed_rank : -1, st, why);
}

/* ---- poll set -------------------------------------------------------------
 */

int ctrl_poll_add(ctrl_t *c,
                  int (*add)(void *owner, int fd, short events, int32_t who),
                  void *owner, uint64_t *next_ns) {
  struct sharc_comm *comm = c->comm;
  uint64_t now = time_ns();
  int rc = 0;
  if (!c->ops.dial) { /* ctrl accepts on the listener */
    pend_expire(c, now);
    if (comm->listen_fd >= 0 && c->npend < CTRL_MAX_PENDING) {
      if (now >= c->accept_pause)
        rc |= add(owner, comm->listen_fd, POLLIN, -1);
      else
        *next_ns = SHARC_MIN(*next_ns, c->accept_pause);
    }
    for (int i = 0; i < c->npend; i++) {
      rc |= add(owner, c->pend[i].p.fd, POLLIN, -2 - i);
      *next_ns = SHARC_MIN(*next_ns, c->pend[i].p.deadline);
    }
  }
  for (int r = 0; r < comm->nranks; r++) {
    peer_t *pp = &c->peers[r];
    pthread_mutex_lock(&pp->lock);
    int fd = pp->done ? -1 : pp->fd;
    short ev = POLLIN | (pp->out_off < pp->out_len ? POLLOUT : 0);
    pthread_mutex_unlock(&pp->lock);
    if (fd >= 0)
      rc |= add(owner, fd, ev, r);
  }
  return rc;
}

void ctrl_event(ctrl_t *c, int32_t who, short re) {
  if (!re)
    return;
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

/* ctrl_pollset's add: an entry of c's own set. */
static int own_add(void *owner, int fd, short ev, int32_t who) {
  ctrl_t *c = owner;
  if (c->fill == c->cap) {
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
  c->pfd[c->fill] = (struct pollfd){fd, ev, 0};
  c->who[c->fill] = who;
  c->fill++;
  return 0;
}

struct pollfd *ctrl_pollset(ctrl_t *c, size_t reserve, size_t *n,
                            int *timeout_ms) {
  uint64_t now = time_ns(), next = UINT64_MAX;
  c->fill = 0;
  int rc = 0;
  for (size_t i = 0; i < reserve; i++)
    rc |= own_add(c, -1, 0, INT32_MIN);
  rc |= ctrl_poll_add(c, own_add, c, &next);
  if (rc)
    return NULL;
  *n = c->fill;
  *timeout_ms = next == UINT64_MAX ? -1
                : next <= now      ? 0
                                   : (int)SHARC_MIN((next - now) / 1000000 + 1,
                                                    (uint64_t)60000);
  return c->pfd;
}

void ctrl_handle(ctrl_t *c, size_t reserve, size_t n) {
  for (size_t i = reserve; i < n; i++)
    ctrl_event(c, c->who[i], c->pfd[i].revents);
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

void ctrl_destroy(ctrl_t *c) {
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

/*
 * bootstrap.c - unique ids, the rendezvous root thread and its client (the
 * launcher environment is read in bootstrap_env.c).
 *
 * Rendezvous protocol (bootstrap_wire.h): a rank sends HELLO {token, nranks,
 * peer_info_t}; the root answers TABLE (nranks peer_info_t ordered by rank)
 * once all ranks registered, or ERROR {status, text} (missing ranks after
 * SHARC_TIMEOUT, or a rejected hello that carried the right token).
 * Everything received passes the pure parsers at the top of this file
 * first. Connections with a bad magic/version/type/length/token, or silent
 * for HELLO_WAIT_NS, are logged and dropped; the rendezvous goes on.
 *
 * Listeners: the root listens on the addresses of this host that the
 * rendezvous host resolves to, plus SHARC_SOCKET_IFNAME's interface (see
 * root_addrs); a unique-id root on SHARC_SOCKET_IFNAME's interface or the
 * first non-loopback one. Never on the wildcard address.
 */
#include "bootstrap.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap_wire.h"

#define MAX_PENDING 256              /* unregistered connections at once */
#define HELLO_WAIT_NS 5000000000ull  /* a connection must say hello in 5 s */
#define REPLY_GRACE_NS 2000000000ull /* let the root's timeout list win */
#define ROOT_MAX_LISTEN 5            /* addresses one root listens on */

/* ---- parsers (pure: bootstrap_wire.h) ---- */

static void say(char *why, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t n, const char *fmt, ...) {
  if (!why || n == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, n, fmt, ap);
  va_end(ap);
}

/* An IPv4 or IPv6 socket address of exactly its size. */
static int addr_ok(const net_addr_t *a) {
  return (a->sa.ss_family == AF_INET && a->len == sizeof(struct sockaddr_in)) ||
         (a->sa.ss_family == AF_INET6 && a->len == sizeof(struct sockaddr_in6));
}

wire_verdict_t bootstrap_parse_hello(const uint8_t *buf, size_t len,
                                     const uint8_t *token, int job_nranks,
                                     size_t *need, wire_hello_t *out,
                                     sharc_status_t *st, char *why,
                                     size_t why_len) {
  wire_hdr_t h;
  memset(&h, 0, sizeof h);
  memcpy(&h, buf, SHARC_MIN(len, sizeof h));
  *st = SHARC_OK;
  /* Each header field as soon as its bytes are in. */
  if (len >= offsetof(wire_hdr_t, version) && h.magic != WIRE_MAGIC) {
    say(why, why_len, "not a sharc hello (bad magic 0x%08x)",
        (unsigned)h.magic);
    return WIRE_DROP;
  }
  if (len >= offsetof(wire_hdr_t, type) && h.version != WIRE_VERSION) {
    say(why, why_len,
        "protocol version %u, expected %u (mixed sharc versions?)",
        (unsigned)h.version, WIRE_VERSION);
    return WIRE_DROP;
  }
  if ((len >= offsetof(wire_hdr_t, len) && h.type != MSG_HELLO) ||
      (len >= sizeof h && h.len != sizeof(wire_hello_t))) {
    say(why, why_len,
        "message type %u length %u, expected a hello of %zu bytes",
        (unsigned)h.type, len >= sizeof h ? (unsigned)h.len : 0u,
        sizeof(wire_hello_t));
    return WIRE_DROP;
  }
  if (len < WIRE_HELLO_BYTES) {
    *need = len < sizeof h ? sizeof h : WIRE_HELLO_BYTES;
    return WIRE_MORE;
  }
  wire_hello_t hl;
  memcpy(&hl, buf + sizeof h, sizeof hl);
  if (!net_secret_equal(hl.token, token, SHARC_TOKEN_BYTES)) {
    say(why, why_len, "wrong job token (another job, or a stray client)");
    return WIRE_DROP;
  }
  /* The sender proved it is one of ours: from here on it is told why. */
  int n = (int)hl.nranks, rank = (int)hl.info.rank;
  *st = SHARC_ERR_INVALID_ARG;
  if (n < 1 || n > MAX_RANKS) {
    say(why, why_len, "nranks %d is not in 1..%d", n, MAX_RANKS);
    return WIRE_REJECT;
  }
  if (job_nranks > 0 && n != job_nranks) {
    *st = SHARC_ERR_MISMATCH;
    say(why, why_len,
        "rank %d says nranks %d but the job has %d; give every rank the same "
        "world size",
        rank, n, job_nranks);
    return WIRE_REJECT;
  }
  if (rank < 0 || rank >= n) {
    say(why, why_len, "rank %d is not in 0..%d", rank, n - 1);
    return WIRE_REJECT;
  }
  if (!addr_ok(&hl.info.addr)) {
    say(why, why_len,
        "rank %d sent a bad address (family %d, length %u); is it another "
        "sharc version?",
        rank, (int)hl.info.addr.sa.ss_family, (unsigned)hl.info.addr.len);
    return WIRE_REJECT;
  }
  if (!memchr(hl.info.host, '\0', sizeof hl.info.host)) {
    say(why, why_len, "rank %d sent a host name without its end", rank);
    return WIRE_REJECT;
  }
  *st = SHARC_OK;
  *out = hl;
  return WIRE_OK;
}

sharc_status_t bootstrap_parse_reply_hdr(const uint8_t *buf, size_t len,
                                         int nranks, int *type, uint32_t *plen,
                                         char *why, size_t why_len) {
  wire_hdr_t h;
  if (nranks < 1 || nranks > MAX_RANKS) {
    say(why, why_len, "nranks %d is not in 1..%d", nranks, MAX_RANKS);
    return SHARC_ERR_INVALID_ARG;
  }
  if (len < sizeof h) {
    say(why, why_len, "a header of %zu bytes, expected %zu", len, sizeof h);
    return SHARC_ERR_NET;
  }
  memcpy(&h, buf, sizeof h);
  size_t tbytes = (size_t)nranks * sizeof(peer_info_t);
  if (h.magic != WIRE_MAGIC || h.version != WIRE_VERSION ||
      !((h.type == MSG_TABLE && h.len == tbytes) ||
        (h.type == MSG_ERROR && h.len > sizeof(int32_t) &&
         h.len <= WIRE_MAX_ERROR_BYTES))) {
    say(why, why_len,
        "a bad header (magic 0x%08x version %u type %u length %u; a table "
        "of %d ranks is %zu bytes)",
        (unsigned)h.magic, (unsigned)h.version, (unsigned)h.type,
        (unsigned)h.len, nranks, tbytes);
    return SHARC_ERR_NET;
  }
  *type = h.type;
  *plen = h.len;
  return SHARC_OK;
}

sharc_status_t bootstrap_parse_error(const uint8_t *buf, size_t len,
                                     sharc_status_t *code, char *msg,
                                     size_t msg_len) {
  int32_t c;
  if (len <= sizeof c || len > WIRE_MAX_ERROR_BYTES) {
    say(msg, msg_len, "an error message of %zu bytes (expected 5..%d)", len,
        WIRE_MAX_ERROR_BYTES);
    return SHARC_ERR_NET;
  }
  memcpy(&c, buf, sizeof c);
  *code = (c >= 0 || c < SHARC_ERR_INTERNAL) ? SHARC_ERR_INTERNAL
                                             : (sharc_status_t)c;
  const uint8_t *text = buf + sizeof c;
  size_t n = len - sizeof c;
  const uint8_t *nul = memchr(text, '\0', n);
  if (nul)
    n = (size_t)(nul - text);
  if (msg_len > 0) {
    n = SHARC_MIN(n, msg_len - 1);
    memcpy(msg, text, n);
    msg[n] = '\0';
  }
  return SHARC_OK;
}

sharc_status_t bootstrap_check_table(const peer_info_t *table, int nranks,
                                     char *why, size_t why_len) {
  for (int i = 0; i < nranks; i++) {
    const peer_info_t *p = &table[i];
    if (p->rank != i) {
      say(why, why_len, "rank table entry %d holds rank %d", i, (int)p->rank);
      return SHARC_ERR_NET;
    }
    if (!memchr(p->host, '\0', sizeof p->host)) {
      say(why, why_len, "rank table entry %d has an unterminated host name", i);
      return SHARC_ERR_NET;
    }
    if (!addr_ok(&p->addr)) {
      say(why, why_len,
          "rank table entry %d has a bad address (family %d, length %u)", i,
          (int)p->addr.sa.ss_family, (unsigned)p->addr.len);
      return SHARC_ERR_NET;
    }
  }
  return SHARC_OK;
}

/* ---- root thread ---- */

typedef struct {
  int fd;
  int rank;          /* -1 until its hello registered */
  uint64_t deadline; /* hello must be complete by then */
  size_t got, need;  /* bytes in buf; bytes to wait for */
  uint8_t buf[WIRE_HELLO_BYTES];
  char who[96];
} conn_t;

typedef struct {
  int lfd[ROOT_MAX_LISTEN];
  int nlfd;
  int nranks; /* 0 until the first hello (unique id) */
  uint8_t token[SHARC_TOKEN_BYTES];
  char where[300];   /* the rendezvous address, for messages */
  char tmo_env[32];  /* SHARC_TIMEOUT as given */
  uint64_t timeout;  /* ns */
  uint64_t deadline; /* 0: not started (unique id before the first hello) */
  conn_t *conns;
  int nconns, cap, npending, warned_full;
  peer_info_t *table;
  uint8_t *have;
  int nhave;
} root_t;

static sharc_status_t send_msg(int fd, int type, const void *p, uint32_t len,
                               uint64_t deadline) {
  wire_hdr_t h = {WIRE_MAGIC, WIRE_VERSION, (uint16_t)type, len};
  CHECK(net_send_all(fd, &h, sizeof h, deadline));
  return len ? net_send_all(fd, p, len, deadline) : SHARC_OK;
}

static void send_error(int fd, sharc_status_t st, const char *msg) {
  char buf[WIRE_MAX_ERROR_BYTES];
  int32_t s = st;
  size_t n = strlen(msg) + 1;
  if (n > sizeof buf - sizeof s)
    n = sizeof buf - sizeof s;
  memcpy(buf, &s, sizeof s);
  memcpy(buf + sizeof s, msg, n);
  buf[sizeof s + n - 1] = '\0';
  send_msg(fd, MSG_ERROR, buf, (uint32_t)(sizeof s + n),
           time_ns() + 1000000000ull);
}

static void conn_close(root_t *r, conn_t *c) {
  if (c->rank >= 0) {
    r->have[c->rank] = 0;
    r->nhave--;
  } else {
    r->npending--;
  }
  close(c->fd);
  c->fd = -1;
}

/* Logs why c is dropped; with st != OK also tells the peer (it proved it is
 * one of ours with the token, so it deserves to know). */
static void conn_drop(root_t *r, conn_t *c, sharc_status_t st, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));
static void conn_drop(root_t *r, conn_t *c, sharc_status_t st, const char *fmt,
                      ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  WARN(SUB_INIT, "bootstrap root at %s: dropping connection from %s: %s",
       r->where, c->who, msg);
  if (st != SHARC_OK) {
    char full[1024];
    snprintf(full, sizeof full,
             "bootstrap: the rendezvous at %s rejected this "
             "rank: %s",
             r->where, msg);
    send_error(c->fd, st, full);
  }
  conn_close(r, c);
}

/* A valid hello (bootstrap_parse_hello): registers its rank unless the rank
 * is taken; the first hello of a unique-id job sizes the job. */
static void hello_register(root_t *r, conn_t *c, const wire_hello_t *h) {
  int rank = h->info.rank;
  if (r->nranks == 0) {
    r->table = calloc((size_t)h->nranks, sizeof *r->table);
    r->have = calloc((size_t)h->nranks, 1);
    if (!r->table || !r->have) {
      free(r->table);
      free(r->have);
      r->table = NULL;
      r->have = NULL;
      conn_drop(r, c, SHARC_ERR_NO_MEM, "no memory for %d ranks",
                (int)h->nranks);
      return;
    }
    r->nranks = h->nranks;
    r->deadline = time_ns() + r->timeout;
  }
  if (r->have[rank]) {
    conn_drop(r, c, SHARC_ERR_INVALID_ARG,
              "rank %d registered twice (first from %s, pid %d); give each "
              "process a distinct rank",
              rank, r->table[rank].host, (int)r->table[rank].pid);
    return;
  }
  r->table[rank] = h->info;
  r->have[rank] = 1;
  r->nhave++;
  r->npending--;
  c->rank = rank;
  TRACE(SUB_INIT, "bootstrap root: rank %d from %s (%d/%d)", rank, c->who,
        r->nhave, r->nranks);
}

/* Reads what c has sent so far (never more than a hello) and checks it as
 * it comes in. */
static void conn_read(root_t *r, conn_t *c) {
  if (c->rank >= 0) { /* registered ranks only wait: data or EOF ends them */
    char b;
    ssize_t k = recv(c->fd, &b, 1, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
      WARN(SUB_INIT,
           "bootstrap root at %s: rank %d (%s) left before the "
           "rendezvous completed",
           r->where, c->rank, c->who);
      conn_close(r, c);
    } else if (k > 0) {
      conn_drop(r, c, SHARC_OK, "rank %d sent data after its hello", c->rank);
    }
    return;
  }
  ssize_t k = recv(c->fd, c->buf + c->got, c->need - c->got, MSG_DONTWAIT);
  if (k == 0) {
    conn_drop(r, c, SHARC_OK, "closed after %zu bytes, before a complete hello",
              c->got);
    return;
  }
  if (k < 0) {
    if (errno != EAGAIN && errno != EINTR)
      conn_drop(r, c, SHARC_OK, "%s", strerror(errno));
    return;
  }
  c->got += (size_t)k;
  wire_hello_t h;
  sharc_status_t st;
  char why[400];
  switch (bootstrap_parse_hello(c->buf, c->got, r->token, r->nranks, &c->need,
                                &h, &st, why, sizeof why)) {
  case WIRE_MORE:
    break;
  case WIRE_OK:
    hello_register(r, c, &h);
    break;
  case WIRE_DROP:
    conn_drop(r, c, SHARC_OK, "%s", why);
    break;
  case WIRE_REJECT:
    conn_drop(r, c, st, "%s", why);
    break;
  }
}

static void root_accept(root_t *r, int lfd, uint64_t now) {
  for (;;) {
    net_addr_t a;
    memset(&a, 0, sizeof a);
    a.len = sizeof a.sa;
    int fd = accept4(lfd, (struct sockaddr *)&a.sa, &a.len,
                     SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        WARN(SUB_INIT, "bootstrap root at %s: accept: %s", r->where,
             strerror(errno));
      return;
    }
    char who[96];
    net_addr_str(&a, who, sizeof who);
    if (r->npending >= MAX_PENDING) {
      if (!r->warned_full++)
        WARN(SUB_INIT,
             "bootstrap root at %s: %d connections without a hello; "
             "refusing more (from %s)",
             r->where, MAX_PENDING, who);
      close(fd);
      continue;
    }
    if (r->nconns == r->cap) {
      int cap = r->cap ? 2 * r->cap : 16;
      conn_t *n = realloc(r->conns, (size_t)cap * sizeof *n);
      if (!n) {
        close(fd);
        continue;
      }
      r->conns = n;
      r->cap = cap;
    }
    conn_t *c = &r->conns[r->nconns++];
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->rank = -1;
    c->need = sizeof(wire_hdr_t);
    c->deadline = now + SHARC_MIN(HELLO_WAIT_NS, r->timeout);
    snprintf(c->who, sizeof c->who, "%s", who);
    r->npending++;
  }
}

/* "ranks 2,5-9" of the ranks not registered. */
static void missing_list(const root_t *r, char *out, size_t len) {
  size_t o = (size_t)snprintf(out, len, "rank%s ",
                              r->nranks - r->nhave > 1 ? "s" : "");
  for (int i = 0; i < r->nranks && o + 24 < len; i++) {
    if (r->have[i])
      continue;
    int j = i;
    while (j + 1 < r->nranks && !r->have[j + 1])
      j++;
    o += (size_t)(j > i ? snprintf(out + o, len - o, "%s%d-%d",
                                   out[o - 1] == ' ' ? "" : ",", i, j)
                        : snprintf(out + o, len - o, "%s%d",
                                   out[o - 1] == ' ' ? "" : ",", i));
    i = j;
  }
}

/* Answers every registered rank. Ranks of this very process go last: one of
 * them may exit as soon as it has its answer, which would end this thread
 * before the others were served (data already sent still gets delivered). */
static void root_finish(root_t *r, int complete) {
  char msg[1400];
  if (!complete) {
    char miss[400];
    missing_list(r, miss, sizeof miss);
    snprintf(msg, sizeof msg,
             "bootstrap: %s not seen after %.0f s at %s (SHARC_TIMEOUT=%s); "
             "%d of %d ranks arrived: check that every process started and "
             "uses the same address and world size",
             miss, (double)r->timeout / 1e9, r->where, r->tmo_env, r->nhave,
             r->nranks);
    WARN(SUB_INIT, "%s", msg);
  }
  size_t bytes = (size_t)r->nranks * sizeof(peer_info_t);
  uint64_t dl = time_ns() + SHARC_MIN(r->timeout, 10000000000ull);
  int32_t me = (int32_t)getpid();
  uint64_t host = host_identity();
  for (int own = 0; own < 2; own++)
    for (int i = 0; i < r->nconns; i++) {
      conn_t *c = &r->conns[i];
      if (c->rank < 0 || (r->table[c->rank].pid == me &&
                          r->table[c->rank].host_hash == host) != own)
        continue;
      if (!complete)
        send_error(c->fd, SHARC_ERR_TIMEOUT, msg);
      else if (send_msg(c->fd, MSG_TABLE, r->table, (uint32_t)bytes, dl))
        WARN(SUB_INIT,
             "bootstrap root at %s: could not send the rank table "
             "to rank %d (%s)",
             r->where, c->rank, c->who);
    }
  if (complete)
    INFO(SUB_INIT, "bootstrap root at %s: %d ranks registered", r->where,
         r->nranks);
}

static void *root_main(void *arg) {
  root_t *r = arg;
  struct pollfd *pf = NULL;
  int pcap = 0, complete = 0;
  for (;;) {
    uint64_t now = time_ns();
    if (r->nranks > 0 && r->nhave == r->nranks) {
      complete = 1;
      break;
    }
    if (r->deadline && now >= r->deadline)
      break;
    uint64_t wake = r->deadline ? r->deadline : UINT64_MAX;
    int n = 0;
    for (int i = 0; i < r->nconns; i++) { /* compact, expire silent ones */
      conn_t *c = &r->conns[i];
      if (c->fd >= 0 && c->rank < 0 && now >= c->deadline)
        conn_drop(r, c, SHARC_OK, "no complete hello within %.0f s (%zu bytes)",
                  (double)SHARC_MIN(HELLO_WAIT_NS, r->timeout) / 1e9, c->got);
      if (c->fd < 0)
        continue;
      if (c->rank < 0)
        wake = SHARC_MIN(wake, c->deadline);
      r->conns[n++] = *c;
    }
    r->nconns = n;
    int nl = r->nlfd; /* pf: the listeners, then the connections */
    if (pcap < nl + n) {
      struct pollfd *np = realloc(pf, (size_t)(nl + n + 16) * sizeof *np);
      if (!np)
        break;
      pf = np;
      pcap = nl + n + 16;
    }
    for (int i = 0; i < nl; i++)
      pf[i] = (struct pollfd){.fd = r->lfd[i], .events = POLLIN};
    for (int i = 0; i < n; i++)
      pf[nl + i] = (struct pollfd){.fd = r->conns[i].fd, .events = POLLIN};
    int ms = -1;
    if (wake != UINT64_MAX)
      ms = wake <= now
               ? 0
               : (int)SHARC_MIN((wake - now + 999999) / 1000000, 60000u);
    int rc = poll(pf, (nfds_t)(nl + n), ms);
    if (rc < 0 && errno != EINTR) {
      WARN(SUB_INIT, "bootstrap root at %s: poll: %s", r->where,
           strerror(errno));
      break;
    }
    if (rc <= 0)
      continue;
    for (int i = 0; i < n; i++)
      if (pf[nl + i].revents)
        conn_read(r, &r->conns[i]);
    for (int i = 0; i < nl; i++)
      if (pf[i].revents)
        root_accept(r, r->lfd[i], time_ns());
  }
  root_finish(r, complete);
  for (int i = 0; i < r->nconns; i++)
    if (r->conns[i].fd >= 0)
      close(r->conns[i].fd);
  for (int i = 0; i < r->nlfd; i++)
    close(r->lfd[i]);
  free(pf);
  free(r->conns);
  free(r->table);
  free(r->have);
  free(r);
  return NULL;
}

static void close_all(const int *fds, int n) {
  for (int i = 0; i < n; i++)
    close(fds[i]);
}

/* Takes ownership of lfd[0..nlfd); nranks 0 means "learn from the first
 * hello". */
static sharc_status_t root_spawn(const int *lfd, int nlfd, int nranks,
                                 const uint8_t *token, const char *where) {
  root_t *r = calloc(1, sizeof *r);
  if (!r) {
    close_all(lfd, nlfd);
    return err_set(SHARC_ERR_NO_MEM, "bootstrap: no memory for the root");
  }
  memcpy(r->lfd, lfd, (size_t)nlfd * sizeof *lfd);
  r->nlfd = nlfd;
  r->nranks = nranks;
  memcpy(r->token, token, SHARC_TOKEN_BYTES);
  snprintf(r->where, sizeof r->where, "%s", where);
  snprintf(r->tmo_env, sizeof r->tmo_env, "%s", param_str(PARAM_TIMEOUT));
  r->timeout = timeout_ns();
  if (nranks > 0) {
    r->table = calloc((size_t)nranks, sizeof *r->table);
    r->have = calloc((size_t)nranks, 1);
    r->deadline = time_ns() + r->timeout;
  }
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int rc = (nranks > 0 && (!r->table || !r->have))
               ? ENOMEM
               : pthread_create(&t, &at, root_main, r);
  pthread_attr_destroy(&at);
  if (rc != 0) {
    free(r->table);
    free(r->have);
    free(r);
    close_all(lfd, nlfd);
    return err_set(SHARC_ERR_SYSTEM,
                   "bootstrap: cannot start the root thread: %s", strerror(rc));
  }
  return SHARC_OK;
}

static const char *port_hint(const char *source) {
  if (source && !strcmp(source, "torchrun"))
    return "MASTER_PORT";
  if (source && !strcmp(source, "Slurm"))
    return "SHARC_PORT";
  if (source &&
      (!strcmp(source, "Open MPI") || !strcmp(source, "Hydra (MPICH)")))
    return "SHARC_ADDR or SHARC_PORT";
  return "SHARC_ADDR";
}

/* A rendezvous host given by a name (not "localhost") that resolved to a
 * loopback address: on its own host, Debian's /etc/hosts maps the host name
 * to 127.0.1.1, while other hosts resolve it to a real address. */
static int own_name_on_loopback(const char *host, const net_addr_t *a) {
  return net_addr_is_loopback(a) && !net_host_is_numeric(host) &&
         !strcasestr(host, "localhost");
}

static void addr_add(net_addr_t *list, int *n, const net_addr_t *a) {
  for (int i = 0; i < *n; i++)
    if (net_addr_equal(&list[i], a))
      return;
  if (*n < ROOT_MAX_LISTEN)
    list[(*n)++] = *a;
}

/* Where the root listens, on env->root_port (never the wildcard address):
 *   - every address of this host that root_host resolves to here: where
 *     the ranks of this host connect;
 *   - SHARC_SOCKET_IFNAME's interface when it is set, where the ranks of
 *     other hosts connect; without it, when root_host is this host's own
 *     name resolving to loopback here (own_name_on_loopback), the first up
 *     non-loopback interface, where other hosts reach the name;
 *   - when root_host resolves to no address of this host (rank 0 was put
 *     elsewhere, or a NAT), the source address of the route to it, with a
 *     warning: ranks may not reach it. */
static sharc_status_t root_addrs(const bootstrap_env_t *env, net_addr_t *out,
                                 int *n) {
  net_addr_t res[ROOT_MAX_LISTEN - 1], a;
  int nres = 0, nlocal = 0, loop = 1;
  const char *spec = param_str(PARAM_SOCKET_IFNAME);
  *n = 0;
  CHECK(net_resolve_all(env->root_host, env->root_port, res,
                        ROOT_MAX_LISTEN - 1, &nres));
  for (int i = 0; i < nres; i++)
    if (net_addr_is_local(&res[i])) {
      addr_add(out, n, &res[i]);
      nlocal++;
      loop &= own_name_on_loopback(env->root_host, &res[i]);
    }
  if (*spec) {
    CHECK(net_if_addr(spec, &a));
    net_addr_set_port(&a, env->root_port);
    addr_add(out, n, &a);
  } else if (nlocal > 0 && loop && net_if_find(NULL, &a) == 0) {
    net_addr_set_port(&a, env->root_port);
    addr_add(out, n, &a);
  } else if (nlocal == 0) {
    char rs[64], as[64];
    CHECK(net_route_source(&res[0], &a));
    net_addr_set_port(&a, env->root_port);
    addr_add(out, n, &a);
    WARN(SUB_INIT,
         "bootstrap: the rendezvous host %s resolves to %s, not an address of "
         "this host, which serves the rendezvous (rank 0); listening at %s "
         "instead: check %s, or set SHARC_SOCKET_IFNAME",
         env->root_host, net_addr_str(&res[0], rs, sizeof rs),
         net_addr_str(&a, as, sizeof as), port_hint(env->source));
  }
  return SHARC_OK;
}

sharc_status_t bootstrap_root_start(const bootstrap_env_t *env) {
  if (env->nranks < 1 || env->nranks > MAX_RANKS)
    return err_set(SHARC_ERR_INVALID_ARG, "bootstrap: nranks %d not in 1..%d",
                   env->nranks, MAX_RANKS);
  net_addr_t addrs[ROOT_MAX_LISTEN];
  int naddr = 0, lfd[ROOT_MAX_LISTEN];
  CHECK(root_addrs(env, addrs, &naddr));
  char list[ROOT_MAX_LISTEN * 64] = "";
  size_t o = 0;
  /* sharcrun binds the port it chose and hands the socket to rank 0
   * (SHARC_ROOT_FD), so no other process can take it in between */
  const char *inh_s = getenv("SHARC_ROOT_FD");
  int inh = inh_s && *inh_s ? atoi(inh_s) : -1;
  for (int i = 0; i < naddr; i++) {
    if (inh >= 0 && net_adopt_listen(&addrs[i], inh)) {
      lfd[i] = inh;
      inh = -2; /* adopted */
    } else if (net_listen(&addrs[i], 512, &lfd[i], NULL) != SHARC_OK) {
      char why[300];
      snprintf(why, sizeof why, "%s", err_last());
      close_all(lfd, i);
      return err_set(SHARC_ERR_NET,
                     "bootstrap: cannot serve the rendezvous %s:%d: %s; if "
                     "another job uses the port, choose another with %s",
                     env->root_host, env->root_port, why,
                     port_hint(env->source));
    }
    char as[64];
    if (o < sizeof list)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "",
                            net_addr_str(&addrs[i], as, sizeof as));
  }
  char where[300];
  snprintf(where, sizeof where, "%s:%d", env->root_host, env->root_port);
  INFO(SUB_INIT, "bootstrap: root for %d ranks at %s listening on %s%s",
       env->nranks, where, list,
       inh == -2 ? " (the socket sharcrun bound, SHARC_ROOT_FD)" : "");
  return root_spawn(lfd, naddr, env->nranks, env->token, where);
}

/* ---- unique id ----
 * Layout of sharc_unique_id_t.internal (128 bytes, host byte order):
 *   0 u32 magic "SHUI" | 4 u16 version | 6 u16 address length
 *   8 token[16] | 24 sockaddr (in or in6, up to 96 bytes)
 *   124 u32 FNV-1a checksum of bytes 0..123                               */
#define UID_MAGIC 0x49554853u
#define UID_VERSION 1
#define UID_ADDR_OFF 24
#define UID_SUM_OFF 124

static uint32_t uid_sum(const char *p) {
  return (uint32_t)hash_bytes(HASH_BASIS, p, UID_SUM_OFF);
}

sharc_status_t bootstrap_unique_id_create(sharc_unique_id_t *id) {
  net_addr_t a;
  const char *spec = param_str(PARAM_SOCKET_IFNAME);
  if (*spec)
    CHECK(net_if_addr(spec, &a));
  else if (net_if_find(NULL, &a) != 0)
    CHECK(net_resolve("127.0.0.1", 0, &a));
  uint8_t token[SHARC_TOKEN_BYTES];
  CHECK(random_bytes(token, sizeof token));
  int lfd;
  net_addr_t bound;
  CHECK(net_listen(&a, 512, &lfd, &bound));
  char where[96];
  net_addr_str(&bound, where, sizeof where);
  sharc_status_t st = root_spawn(&lfd, 1, 0, token, where);
  if (st != SHARC_OK)
    return st;
  memset(id, 0, sizeof *id);
  uint32_t magic = UID_MAGIC;
  uint16_t ver = UID_VERSION, alen = (uint16_t)bound.len;
  memcpy(id->internal, &magic, 4);
  memcpy(id->internal + 4, &ver, 2);
  memcpy(id->internal + 6, &alen, 2);
  memcpy(id->internal + 8, token, SHARC_TOKEN_BYTES);
  memcpy(id->internal + UID_ADDR_OFF, &bound.sa, bound.len);
  uint32_t sum = uid_sum(id->internal);
  memcpy(id->internal + UID_SUM_OFF, &sum, 4);
  INFO(SUB_INIT, "bootstrap: unique id root listening at %s", where);
  return SHARC_OK;
}

sharc_status_t bootstrap_unique_id_parse(const sharc_unique_id_t *id,
                                         bootstrap_env_t *env) {
  uint32_t magic, sum;
  uint16_t ver, alen;
  memcpy(&magic, id->internal, 4);
  memcpy(&ver, id->internal + 4, 2);
  memcpy(&alen, id->internal + 6, 2);
  memcpy(&sum, id->internal + UID_SUM_OFF, 4);
  net_addr_t a;
  memset(&a, 0, sizeof a);
  if (alen <= UID_SUM_OFF - UID_ADDR_OFF && alen <= sizeof a.sa)
    memcpy(&a.sa, id->internal + UID_ADDR_OFF, alen);
  a.len = alen;
  int fam_ok =
      (a.sa.ss_family == AF_INET && alen == sizeof(struct sockaddr_in)) ||
      (a.sa.ss_family == AF_INET6 && alen == sizeof(struct sockaddr_in6));
  if (magic != UID_MAGIC || ver != UID_VERSION ||
      sum != uid_sum(id->internal) || !fam_ok)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "bootstrap: not a valid sharc unique id (magic 0x%08x "
                   "version %u); pass every rank the bytes from "
                   "sharc_get_unique_id unchanged",
                   (unsigned)magic, (unsigned)ver);
  int rc = getnameinfo((struct sockaddr *)&a.sa, a.len, env->root_host,
                       sizeof env->root_host, NULL, 0, NI_NUMERICHOST);
  if (rc != 0)
    return err_set(SHARC_ERR_INVALID_ARG, "bootstrap: unique id address: %s",
                   gai_strerror(rc));
  env->root_port = net_addr_port(&a);
  memcpy(env->token, id->internal + 8, SHARC_TOKEN_BYTES);
  if (!env->source)
    env->source = "unique id";
  return SHARC_OK;
}

/* ---- client ---- */

sharc_status_t bootstrap_rendezvous(const bootstrap_env_t *env,
                                    const peer_info_t *mine,
                                    peer_info_t *table) {
  if (env->nranks < 1 || env->nranks > MAX_RANKS || env->rank < 0 ||
      env->rank >= env->nranks)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "bootstrap: rank %d of %d ranks is not valid (need 0 <= "
                   "rank < nranks <= %d)",
                   env->rank, env->nranks, MAX_RANKS);
  char where[300], why[1100];
  snprintf(where, sizeof where, "%s:%d", env->root_host, env->root_port);
  net_addr_t ra;
  CHECK(net_resolve(env->root_host, env->root_port, &ra));
  uint64_t t = timeout_ns(), deadline = time_ns() + t;
  const char *tmo = param_str(PARAM_TIMEOUT);
  int fd = -1;
  sharc_status_t st = net_connect(&ra, deadline, &fd);
  if (st != SHARC_OK) {
    snprintf(why, sizeof why, "%s", err_last());
    return err_set(st,
                   "bootstrap: rank %d cannot reach the rendezvous at %s "
                   "within %.0f s (SHARC_TIMEOUT=%s; %s): check that rank 0 "
                   "runs and that %s is its address (from %s)",
                   env->rank, where, (double)t / 1e9, tmo, why, where,
                   env->source ? env->source : "the caller");
  }
  wire_hello_t h;
  memset(&h, 0, sizeof h);
  memcpy(h.token, env->token, SHARC_TOKEN_BYTES);
  h.nranks = env->nranks;
  h.info = *mine;
  h.info.rank = env->rank;
  uint8_t rh[sizeof(wire_hdr_t)];
  int type = 0;
  uint32_t plen = 0;
  CHECK_GOTO(send_msg(fd, MSG_HELLO, &h, sizeof h, deadline), st, done);
  /* The root's deadline ran from its own start; a grace lets its list of
   * missing ranks arrive before this rank gives up on its own. */
  deadline += REPLY_GRACE_NS;
  st = net_recv_all(fd, rh, sizeof rh, deadline);
  if (st == SHARC_ERR_TIMEOUT) {
    st = err_set(st,
                 "bootstrap: rank %d got no answer from the rendezvous at "
                 "%s within %.0f s (SHARC_TIMEOUT=%s); the root process may "
                 "be stuck",
                 env->rank, where, (double)t / 1e9, tmo);
    goto done;
  }
  if (st != SHARC_OK) {
    st = err_set(SHARC_ERR_NET,
                 "bootstrap: the rendezvous at %s closed the connection of "
                 "rank %d without answering: the job token differs (another "
                 "job on this port, or a different SHARC_TOKEN) or the root "
                 "process ended; see its log",
                 where, env->rank);
    goto done;
  }
  /* Lengths are checked against the job's size and fixed limits before
   * anything is read by them. */
  if (bootstrap_parse_reply_hdr(rh, sizeof rh, env->nranks, &type, &plen, why,
                                sizeof why) != SHARC_OK) {
    st = err_set(SHARC_ERR_NET,
                 "bootstrap: the rendezvous at %s answered with %s; is it "
                 "another program or sharc version?",
                 where, why);
    goto done;
  }
  if (type == MSG_ERROR) {
    uint8_t buf[WIRE_MAX_ERROR_BYTES];
    sharc_status_t code = SHARC_ERR_INTERNAL;
    CHECK_GOTO(net_recv_all(fd, buf, plen, deadline), st, done);
    if (bootstrap_parse_error(buf, plen, &code, why, sizeof why) != SHARC_OK)
      code = SHARC_ERR_NET;
    st = err_set(code, "%s", why);
    goto done;
  }
  CHECK_GOTO(net_recv_all(fd, table, plen, deadline), st, done);
  if (bootstrap_check_table(table, env->nranks, why, sizeof why) != SHARC_OK) {
    st = err_set(SHARC_ERR_NET,
                 "bootstrap: the rendezvous at %s sent a bad rank table: %s",
                 where, why);
    goto done;
  }
  TRACE(SUB_INIT, "bootstrap: rank %d has the table of %d ranks", env->rank,
        env->nranks);
done:
  close(fd);
  return st;
}

/* The source address of the route to the rendezvous host, except where
 * that host is this one, named by a name that resolves to loopback here
 * (own_name_on_loopback): other hosts reach this one at a real address,
 * so the first up non-loopback interface is advertised instead, when there
 * is one. */
sharc_status_t bootstrap_local_addr(const bootstrap_env_t *env,
                                    net_addr_t *out) {
  const char *spec = param_str(PARAM_SOCKET_IFNAME);
  if (*spec)
    return net_if_addr(spec, out);
  net_addr_t ra, a;
  CHECK(net_resolve(env->root_host, env->root_port ? env->root_port : 9, &ra));
  if (own_name_on_loopback(env->root_host, &ra) && net_if_find(NULL, &a) == 0) {
    *out = a;
    return SHARC_OK;
  }
  if (net_route_source(&ra, out) != SHARC_OK) {
    char why[300];
    snprintf(why, sizeof why, "%s", err_last());
    return err_set(SHARC_ERR_NET,
                   "bootstrap: no route from this host to the rendezvous "
                   "%s:%d (%s); set SHARC_SOCKET_IFNAME",
                   env->root_host, env->root_port, why);
  }
  return SHARC_OK;
}

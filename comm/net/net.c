/*
 * net.c - TCP socket helpers for the bootstrap and the tcp transport: name
 * resolution, listen/accept/connect, whole-buffer send/receive and
 * interface selection (SHARC_SOCKET_IFNAME). IPv4 and IPv6.
 *
 * Listeners are always bound to one address (an interface's, or the
 * rendezvous address): net_listen refuses the wildcard address, so nothing
 * sharc opens is reachable from every network the host is on.
 *
 * Every blocking call waits in poll() against an absolute deadline on the
 * time_ns() clock, so nothing here blocks forever. Sends use MSG_NOSIGNAL:
 * a peer that went away gives SHARC_ERR_NET, never SIGPIPE.
 */
#include "net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- addresses ---- */

/* getaddrinfo for host:port as a stream socket, with sharc's message. */
static sharc_status_t resolve(const char *host, int port,
                              struct addrinfo **res) {
  if (!host || !*host || port < 0 || port > 65535)
    return err_set(SHARC_ERR_INVALID_ARG, "net: cannot resolve '%s' port %d",
                   host ? host : "(null)", port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  char serv[16];
  snprintf(serv, sizeof serv, "%d", port);
  hints.ai_flags = AI_NUMERICSERV;
  *res = NULL;
  int rc = getaddrinfo(host, serv, &hints, res);
  if (rc != 0 || !*res) {
    if (rc == 0)
      freeaddrinfo(*res);
    return err_set(SHARC_ERR_NET,
                   "net: cannot resolve host '%s': %s; use an IP address or a "
                   "name every host can resolve",
                   host, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
  }
  return SHARC_OK;
}

static int ai_usable(const struct addrinfo *ai) {
  return (ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
         ai->ai_addrlen <= sizeof(struct sockaddr_storage);
}

static void ai_copy(const struct addrinfo *ai, net_addr_t *out) {
  memset(out, 0, sizeof *out);
  memcpy(&out->sa, ai->ai_addr, ai->ai_addrlen);
  out->len = ai->ai_addrlen;
}

sharc_status_t net_resolve(const char *host, int port, net_addr_t *out) {
  struct addrinfo *res;
  CHECK(resolve(host, port, &res));
  /* Prefer IPv4: it is what launchers hand out and what every host routes. */
  struct addrinfo *pick = NULL;
  for (int pass = 0; pass < 2 && !pick; pass++)
    for (struct addrinfo *ai = res; ai && !pick; ai = ai->ai_next)
      if (ai_usable(ai) && (pass == 1 || ai->ai_family == AF_INET))
        pick = ai;
  if (pick)
    ai_copy(pick, out);
  freeaddrinfo(res);
  if (!pick)
    return err_set(SHARC_ERR_NET,
                   "net: host '%s' has no IPv4 or IPv6 address; use an IP "
                   "address or a name every host can resolve",
                   host);
  return SHARC_OK;
}

sharc_status_t net_resolve_all(const char *host, int port, net_addr_t *out,
                               int max, int *n) {
  struct addrinfo *res;
  *n = 0;
  CHECK(resolve(host, port, &res));
  for (int pass = 0; pass < 2; pass++) /* IPv4 first, as net_resolve */
    for (struct addrinfo *ai = res; ai && *n < max; ai = ai->ai_next) {
      if (!ai_usable(ai) || (ai->ai_family == AF_INET) != (pass == 0))
        continue;
      net_addr_t a;
      ai_copy(ai, &a);
      int dup = 0;
      for (int i = 0; i < *n && !dup; i++)
        dup = net_addr_equal(&out[i], &a);
      if (!dup)
        out[(*n)++] = a;
    }
  freeaddrinfo(res);
  if (*n == 0)
    return err_set(SHARC_ERR_NET,
                   "net: host '%s' has no IPv4 or IPv6 address; use an IP "
                   "address or a name every host can resolve",
                   host);
  return SHARC_OK;
}

int net_host_is_numeric(const char *host) {
  struct in6_addr a6;
  struct in_addr a4;
  return host && (inet_pton(AF_INET, host, &a4) == 1 ||
                  inet_pton(AF_INET6, host, &a6) == 1);
}

sharc_status_t net_split_hostport(const char *s, const char *what, char *host,
                                  size_t hlen, int *port) {
  const char *h = s ? s : "", *colon;
  size_t n;
  if (h[0] == '[') {
    const char *close = strchr(h, ']');
    colon = close && close[1] == ':' ? close + 1 : NULL;
    n = close ? (size_t)(close - h - 1) : 0;
    h++;
  } else {
    colon = strrchr(h, ':');
    n = colon ? (size_t)(colon - h) : 0;
    if (colon && memchr(h, ':', n))
      colon = NULL; /* bare IPv6 */
  }
  if (!colon || n == 0 || n >= hlen)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%s=%s is not host:port; write it as 10.0.0.1:29500 (IPv6 "
                   "as [fd00::1]:29500)",
                   what, s ? s : "");
  memcpy(host, h, n);
  host[n] = '\0';
  char *end = NULL;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || end == colon + 1 || *end || p < 1 || p > 65535)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%s=%s: port '%s' is not a number in 1..65535; use a free "
                   "port of that host",
                   what, s, colon + 1);
  *port = (int)p;
  return SHARC_OK;
}

sharc_status_t net_parse_hostport(const char *s, const char *what,
                                  net_addr_t *out) {
  char host[256];
  int port = 0;
  CHECK(net_split_hostport(s, what, host, sizeof host, &port));
  return net_resolve(host, port, out);
}

const char *net_addr_str(const net_addr_t *a, char *buf, size_t len) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = net_addr_port(a);
  if (a->sa.ss_family == AF_INET) {
    inet_ntop(AF_INET, &((const struct sockaddr_in *)&a->sa)->sin_addr, ip,
              sizeof ip);
    snprintf(buf, len, "%s:%d", ip, port);
  } else if (a->sa.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&a->sa)->sin6_addr, ip,
              sizeof ip);
    snprintf(buf, len, "[%s]:%d", ip, port);
  } else {
    snprintf(buf, len, "(family %d)", (int)a->sa.ss_family);
  }
  return buf;
}

int net_addr_port(const net_addr_t *a) {
  if (a->sa.ss_family == AF_INET)
    return ntohs(((const struct sockaddr_in *)&a->sa)->sin_port);
  if (a->sa.ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6 *)&a->sa)->sin6_port);
  return -1;
}

void net_addr_set_port(net_addr_t *a, int port) {
  if (a->sa.ss_family == AF_INET)
    ((struct sockaddr_in *)&a->sa)->sin_port = htons((uint16_t)port);
  else if (a->sa.ss_family == AF_INET6)
    ((struct sockaddr_in6 *)&a->sa)->sin6_port = htons((uint16_t)port);
}

int net_addr_equal(const net_addr_t *a, const net_addr_t *b) {
  if (a->sa.ss_family != b->sa.ss_family ||
      net_addr_port(a) != net_addr_port(b))
    return 0;
  if (a->sa.ss_family == AF_INET)
    return ((const struct sockaddr_in *)&a->sa)->sin_addr.s_addr ==
           ((const struct sockaddr_in *)&b->sa)->sin_addr.s_addr;
  if (a->sa.ss_family == AF_INET6) {
    const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)&a->sa,
                              *y = (const struct sockaddr_in6 *)&b->sa;
    return !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) &&
           x->sin6_scope_id == y->sin6_scope_id;
  }
  return 0;
}

int net_addr_is_loopback(const net_addr_t *a) {
  if (a->sa.ss_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)&a->sa)->sin_addr.s_addr) >>
            24) == 127;
  if (a->sa.ss_family == AF_INET6) {
    const struct in6_addr *x =
        &((const struct sockaddr_in6 *)&a->sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(x))
      return x->s6_addr[12] == 127;
    return IN6_IS_ADDR_LOOPBACK(x);
  }
  return 0;
}

int net_addr_is_wildcard(const net_addr_t *a) {
  if (a->sa.ss_family == AF_INET)
    return ((const struct sockaddr_in *)&a->sa)->sin_addr.s_addr ==
           htonl(INADDR_ANY);
  if (a->sa.ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(
        &((const struct sockaddr_in6 *)&a->sa)->sin6_addr);
  return 0;
}

int net_addr_is_local(const net_addr_t *a) {
  if ((a->sa.ss_family != AF_INET && a->sa.ss_family != AF_INET6) ||
      net_addr_is_wildcard(a))
    return 0;
  int s = socket(a->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return 0;
  net_addr_t any = *a; /* port 0: only the address is in question */
  net_addr_set_port(&any, 0);
  int ok = bind(s, (const struct sockaddr *)&any.sa, any.len) == 0;
  close(s);
  return ok;
}

sharc_status_t net_route_source(const net_addr_t *dst, net_addr_t *out) {
  char as[96];
  net_addr_t d = *dst;
  if (net_addr_port(&d) == 0)
    net_addr_set_port(&d, 9); /* connect() wants a port; nothing is sent */
  /* A UDP connect() only picks the route and source address: no packet. */
  int s = socket(d.sa.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return err_set(SHARC_ERR_SYSTEM, "net: socket: %s", strerror(errno));
  sharc_status_t st;
  if (connect(s, (const struct sockaddr *)&d.sa, d.len) != 0)
    st = err_set(SHARC_ERR_NET,
                 "net: no route from this host to %s: %s; set "
                 "SHARC_SOCKET_IFNAME",
                 net_addr_str(dst, as, sizeof as), strerror(errno));
  else
    st = net_local_addr(s, out);
  close(s);
  return st;
}

/* ---- socket set-up ---- */

void net_set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl != -1)
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int net_secret_equal(const void *a, const void *b, size_t n) {
  const uint8_t *x = a, *y = b;
  volatile uint8_t d = 0;
  for (size_t i = 0; i < n; i++)
    d |= (uint8_t)(x[i] ^ y[i]);
  return d == 0;
}

int net_accept_nb(int lfd, net_addr_t *from, const char *what,
                  uint64_t *pause_until) {
  for (;;) {
    from->len = sizeof from->sa;
    int fd = accept4(lfd, (struct sockaddr *)&from->sa, &from->len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0)
      return fd;
    if (errno == EINTR || errno == ECONNABORTED)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      WARN(SUB_NET, "%s: accept on the listener: %s; retrying in 1 s", what,
           strerror(errno));
      *pause_until = time_ns() + 1000000000ull;
    }
    return -1;
  }
}

static void set_blocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl != -1)
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Milliseconds until deadline for poll(), rounded up, 0 when past. */
static int ms_left(uint64_t deadline_ns) {
  uint64_t now = time_ns();
  if (now >= deadline_ns)
    return 0;
  uint64_t ms = (deadline_ns - now + 999999) / 1000000;
  return ms > 60000 ? 60000 : (int)ms; /* re-check the clock at least 1/min */
}

/* Waits for events on fd until the deadline. 1: ready, 0: timed out,
 * -1: poll failed (errno set). */
static int wait_fd(int fd, short events, uint64_t deadline_ns) {
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events, .revents = 0};
    int ms = ms_left(deadline_ns);
    int rc = poll(&p, 1, ms);
    if (rc > 0)
      return 1;
    if (rc < 0 && errno != EINTR)
      return -1;
    if (rc == 0 && time_ns() >= deadline_ns)
      return 0;
  }
}

static double secs(uint64_t ns) { return (double)ns / 1e9; }

sharc_status_t net_listen(const net_addr_t *addr, int backlog, int *fd,
                          net_addr_t *bound) {
  char as[96];
  if (net_addr_is_wildcard(addr))
    return err_set(SHARC_ERR_INVALID_ARG,
                   "net: refusing to listen on %s (every interface); pass "
                   "the address of one interface (SHARC_SOCKET_IFNAME)",
                   net_addr_str(addr, as, sizeof as));
  int s =
      socket(addr->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0)
    return err_set(SHARC_ERR_SYSTEM, "net: socket() for %s: %s",
                   net_addr_str(addr, as, sizeof as), strerror(errno));
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s, (const struct sockaddr *)&addr->sa, addr->len) != 0) {
    int e = errno;
    close(s);
    return err_set(SHARC_ERR_NET, "net: cannot listen on %s: %s%s",
                   net_addr_str(addr, as, sizeof as), strerror(e),
                   e == EADDRINUSE      ? " (another process holds the port)"
                   : e == EADDRNOTAVAIL ? " (the address is not on this host)"
                                        : "");
  }
  if (listen(s, backlog > 0 ? backlog : 128) != 0) {
    int e = errno;
    close(s);
    return err_set(SHARC_ERR_NET, "net: listen on %s: %s",
                   net_addr_str(addr, as, sizeof as), strerror(e));
  }
  if (bound) {
    memset(bound, 0, sizeof *bound);
    bound->len = sizeof bound->sa;
    if (getsockname(s, (struct sockaddr *)&bound->sa, &bound->len) != 0) {
      int e = errno;
      close(s);
      return err_set(SHARC_ERR_SYSTEM, "net: getsockname: %s", strerror(e));
    }
  }
  *fd = s;
  return SHARC_OK;
}

int net_adopt_listen(const net_addr_t *addr, int fd) {
  int listening = 0;
  socklen_t ol = sizeof listening;
  net_addr_t got;
  memset(&got, 0, sizeof got);
  got.len = sizeof got.sa;
  if (fd < 0 ||
      getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) != 0 ||
      !listening ||
      getsockname(fd, (struct sockaddr *)&got.sa, &got.len) != 0 ||
      got.len != addr->len || got.sa.ss_family != addr->sa.ss_family)
    return 0;
  if (addr->sa.ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&addr->sa,
                             *b = (const struct sockaddr_in *)&got.sa;
    if (a->sin_port != b->sin_port || a->sin_addr.s_addr != b->sin_addr.s_addr)
      return 0;
  } else if (addr->sa.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&addr->sa,
                              *b = (const struct sockaddr_in6 *)&got.sa;
    if (a->sin6_port != b->sin6_port ||
        memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr))
      return 0;
  } else {
    return 0;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
      fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
    return 0;
  return 1;
}

sharc_status_t net_accept(int lfd, uint64_t deadline_ns, int *fd,
                          net_addr_t *peer) {
  for (;;) {
    net_addr_t a;
    memset(&a, 0, sizeof a);
    a.len = sizeof a.sa;
    int s = accept4(lfd, (struct sockaddr *)&a.sa, &a.len, SOCK_CLOEXEC);
    if (s >= 0) {
      set_blocking(s); /* accept4 without SOCK_NONBLOCK: already blocking */
      set_nodelay(s);
      if (peer)
        *peer = a;
      *fd = s;
      return SHARC_OK;
    }
    if (errno == EINTR || errno == ECONNABORTED)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return err_set(SHARC_ERR_NET, "net: accept: %s", strerror(errno));
    int w = wait_fd(lfd, POLLIN, deadline_ns);
    if (w == 0)
      return err_set(SHARC_ERR_TIMEOUT,
                     "net: no incoming connection before the deadline "
                     "(SHARC_TIMEOUT=%s)",
                     param_str(PARAM_TIMEOUT));
    if (w < 0)
      return err_set(SHARC_ERR_NET, "net: poll: %s", strerror(errno));
  }
}

/* Errors after which the listener may still come up: retry. */
static int retryable(int e) {
  return e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH ||
         e == ETIMEDOUT || e == ECONNRESET || e == EAGAIN || e == ECONNABORTED;
}

static void sleep_until_min(uint64_t ns, uint64_t deadline_ns) {
  uint64_t now = time_ns();
  if (now >= deadline_ns)
    return;
  if (now + ns > deadline_ns)
    ns = deadline_ns - now;
  struct timespec ts = {(time_t)(ns / 1000000000ull),
                        (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

sharc_status_t net_connect(const net_addr_t *a, uint64_t deadline_ns, int *fd) {
  char as[96];
  uint64_t start = time_ns(), backoff = 10000000ull; /* 10 ms, up to 200 ms */
  int last = 0, tries = 0;
  for (;;) {
    tries++;
    int s =
        socket(a->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
      return err_set(SHARC_ERR_SYSTEM, "net: socket() to %s: %s",
                     net_addr_str(a, as, sizeof as), strerror(errno));
    int e = 0;
    if (connect(s, (const struct sockaddr *)&a->sa, a->len) != 0) {
      e = errno;
      if (e == EINPROGRESS || e == EINTR) {
        int w = wait_fd(s, POLLOUT, deadline_ns);
        if (w > 0) {
          socklen_t el = sizeof e;
          if (getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el) != 0)
            e = errno;
        } else {
          e = w == 0 ? ETIMEDOUT : errno;
        }
      }
    }
    if (e == 0) {
      set_blocking(s);
      set_nodelay(s);
      *fd = s;
      TRACE(SUB_NET, "net: connected to %s after %d tries",
            net_addr_str(a, as, sizeof as), tries);
      return SHARC_OK;
    }
    close(s);
    last = e;
    if (!retryable(e))
      return err_set(SHARC_ERR_NET, "net: connect to %s: %s",
                     net_addr_str(a, as, sizeof as), strerror(e));
    if (time_ns() >= deadline_ns)
      break;
    sleep_until_min(backoff, deadline_ns);
    backoff = SHARC_MIN(backoff * 2, 200000000ull);
    if (time_ns() >= deadline_ns)
      break;
  }
  return err_set(SHARC_ERR_TIMEOUT,
                 "net: cannot connect to %s after %.0f s, %d tries (last "
                 "error: %s)",
                 net_addr_str(a, as, sizeof as), secs(time_ns() - start), tries,
                 strerror(last));
}

/* ---- data ---- */

sharc_status_t net_send_all(int fd, const void *buf, size_t n,
                            uint64_t deadline_ns) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return err_set(SHARC_ERR_NET, "net: send on fd %d: %s%s", fd,
                     strerror(errno),
                     (errno == EPIPE || errno == ECONNRESET)
                         ? " (connection closed by the peer)"
                         : "");
    int w = wait_fd(fd, POLLOUT, deadline_ns);
    if (w == 0)
      return err_set(SHARC_ERR_TIMEOUT,
                     "net: send on fd %d: peer took no data before the "
                     "deadline (%zu bytes left)",
                     fd, n);
    if (w < 0)
      return err_set(SHARC_ERR_NET, "net: poll: %s", strerror(errno));
  }
  return SHARC_OK;
}

sharc_status_t net_recv_all(int fd, void *buf, size_t n, uint64_t deadline_ns) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
      continue;
    }
    if (k == 0)
      return err_set(SHARC_ERR_NET,
                     "net: recv on fd %d: connection closed by the peer "
                     "(%zu bytes missing)",
                     fd, n);
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return err_set(SHARC_ERR_NET, "net: recv on fd %d: %s", fd,
                     strerror(errno));
    int w = wait_fd(fd, POLLIN, deadline_ns);
    if (w == 0)
      return err_set(SHARC_ERR_TIMEOUT,
                     "net: recv on fd %d: no data before the deadline (%zu "
                     "bytes missing)",
                     fd, n);
    if (w < 0)
      return err_set(SHARC_ERR_NET, "net: poll: %s", strerror(errno));
  }
  return SHARC_OK;
}

sharc_status_t net_local_addr(int fd, net_addr_t *out) {
  memset(out, 0, sizeof *out);
  out->len = sizeof out->sa;
  if (getsockname(fd, (struct sockaddr *)&out->sa, &out->len) != 0)
    return err_set(SHARC_ERR_SYSTEM, "net: getsockname: %s", strerror(errno));
  net_addr_set_port(out, 0);
  return SHARC_OK;
}

/* ---- interfaces ---- */

/* Does interface `name` pass the NCCL-style spec? An empty spec takes all. */
static int if_matches(const char *spec, const char *name) {
  int exclude = 0, exact = 0;
  if (*spec == '^')
    exclude = 1, spec++;
  if (*spec == '=')
    exact = 1, spec++;
  int hit = 0;
  const char *p = spec;
  while (*p && !hit) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n > 0) {
      if (exact)
        hit = strlen(name) == n && !strncmp(name, p, n);
      else
        hit = !strncmp(name, p, n);
    }
    p = e ? e + 1 : p + n;
  }
  return exclude ? !hit : hit;
}

static int v6_link_local(const struct sockaddr *sa) {
  const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
  return IN6_IS_ADDR_LINKLOCAL(a);
}

/* Picks the interface address for spec (NULL: any up, non-loopback one). */
static const struct ifaddrs *if_pick(const struct ifaddrs *ifs,
                                     const char *spec) {
  /* Pass 0: IPv4; pass 1: global IPv6; pass 2: link-local IPv6 (only
   * useful on one link, but better than nothing when it is all there is). */
  for (int pass = 0; pass < 3; pass++)
    for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || !(i->ifa_flags & IFF_UP))
        continue;
      int fam = i->ifa_addr->sa_family;
      if (pass == 0 ? fam != AF_INET : fam != AF_INET6)
        continue;
      if (pass > 0 && v6_link_local(i->ifa_addr) != (pass == 2))
        continue;
      if (spec ? if_matches(spec, i->ifa_name) : !(i->ifa_flags & IFF_LOOPBACK))
        return i;
    }
  return NULL;
}

static void if_copy(const struct ifaddrs *i, net_addr_t *out) {
  memset(out, 0, sizeof *out);
  out->len = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                               : sizeof(struct sockaddr_in6);
  memcpy(&out->sa, i->ifa_addr, out->len);
  net_addr_set_port(out, 0);
}

int net_if_find(const char *spec, net_addr_t *out) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0)
    return -1;
  const struct ifaddrs *i = if_pick(ifs, spec);
  if (i)
    if_copy(i, out);
  freeifaddrs(ifs);
  return i ? 0 : -1;
}

sharc_status_t net_if_addr(const char *spec, net_addr_t *out) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0)
    return err_set(SHARC_ERR_SYSTEM, "net: getifaddrs: %s", strerror(errno));
  if (!spec)
    spec = "";
  const struct ifaddrs *pick = if_pick(ifs, spec);
  if (!pick) {
    char have[256] = "";
    size_t o = 0;
    for (const struct ifaddrs *i = ifs; i && o + 20 < sizeof have;
         i = i->ifa_next)
      if (i->ifa_addr &&
          (i->ifa_addr->sa_family == AF_INET ||
           i->ifa_addr->sa_family == AF_INET6) &&
          !strstr(have, i->ifa_name))
        o += (size_t)snprintf(have + o, sizeof have - o, "%s%s", o ? "," : "",
                              i->ifa_name);
    freeifaddrs(ifs);
    return err_set(
        SHARC_ERR_NET,
        "net: SHARC_SOCKET_IFNAME=%s matches no interface that is up "
        "with an IP address (interfaces: %s); use a prefix "
        "(eth), an exact name (=eth0) or an exclusion (^lo,docker)",
        spec, have[0] ? have : "none");
  }
  if_copy(pick, out);
  char as[96];
  TRACE(SUB_NET, "net: SHARC_SOCKET_IFNAME=%s -> %s %s", spec, pick->ifa_name,
        net_addr_str(out, as, sizeof as));
  freeifaddrs(ifs);
  return SHARC_OK;
}

/* ---- connections waiting for their hello ------------------------------- */

void net_pend_accept(int lfd, void *pend, size_t stride, int *n, int max,
                     uint64_t hello_ns, const char *what,
                     uint64_t *pause_until) {
  while (*n < max) {
    net_pend_t *pe = (net_pend_t *)((char *)pend + (size_t)*n * stride);
    memset(pe, 0, stride);
    int fd = net_accept_nb(lfd, &pe->from, what, pause_until);
    if (fd < 0)
      return;
    pe->fd = fd;
    pe->deadline = time_ns() + hello_ns;
    (*n)++;
  }
}

int net_pend_read(net_pend_t *pe, void *buf, size_t len, const char *what) {
  char as[96];
  for (;;) {
    ssize_t r =
        recv(pe->fd, (uint8_t *)buf + pe->fill, len - pe->fill, MSG_DONTWAIT);
    if (r > 0) {
      pe->fill += (size_t)r;
      if (pe->fill < len)
        continue;
      return 1;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    WARN(SUB_NET, "%s: dropped connection from %s: closed before its hello",
         what, net_addr_str(&pe->from, as, sizeof as));
    close(pe->fd);
    pe->fd = -1;
    return -1;
  }
}

int net_pend_expire(void *pend, size_t stride, int n, uint64_t now,
                    uint64_t hello_ns, const char *what) {
  char as[96];
  int j = 0;
  for (int i = 0; i < n; i++) {
    net_pend_t *pe = (net_pend_t *)((char *)pend + (size_t)i * stride);
    if (pe->fd >= 0 && now >= pe->deadline) {
      WARN(SUB_NET, "%s: dropped connection from %s: no hello within %llu s",
           what, net_addr_str(&pe->from, as, sizeof as),
           (unsigned long long)(hello_ns / 1000000000ull));
      close(pe->fd);
      pe->fd = -1;
    }
    if (pe->fd >= 0) {
      if (j != i)
        memmove((char *)pend + (size_t)j * stride, pe, stride);
      j++;
    }
  }
  return j;
}

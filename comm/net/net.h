/*
 * net.h - TCP socket helpers shared by the bootstrap and the tcp transport.
 * Every blocking helper takes an absolute deadline (time_ns() clock) and
 * returns SHARC_ERR_TIMEOUT when it passes; nothing blocks forever.
 */
#ifndef SHARC_NET_H
#define SHARC_NET_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core.h"

typedef struct {
  struct sockaddr_storage sa;
  socklen_t len;
} net_addr_t;

/* host is a name, IPv4 or IPv6 literal; port 0..65535. The first IPv4
 * address, else the first IPv6 one. */
sharc_status_t net_resolve(const char *host, int port, net_addr_t *out);
/* Every address of host (IPv4 first, duplicates removed), at most max, into
 * out[0..*n). SHARC_ERR_NET when there is none. */
sharc_status_t net_resolve_all(const char *host, int port, net_addr_t *out,
                               int max, int *n);
/* 1 when host is an IPv4 or IPv6 literal (no name lookup needed). */
int net_host_is_numeric(const char *host);
/* Parses "host:port" or "[v6]:port". `what` names the source (for example
 * "SHARC_ADDR") in the error message. */
sharc_status_t net_parse_hostport(const char *s, const char *what,
                                  net_addr_t *out);
/* The same split without a name lookup: host (brackets removed, at most
 * hlen-1 chars) and port 1..65535. */
sharc_status_t net_split_hostport(const char *s, const char *what, char *host,
                                  size_t hlen, int *port);
/* "10.0.0.1:29500" / "[::1]:29500" into buf. Returns buf. */
const char *net_addr_str(const net_addr_t *a, char *buf, size_t len);
int net_addr_port(const net_addr_t *a);
void net_addr_set_port(net_addr_t *a, int port);
/* Same family, address, port (and IPv6 scope). */
int net_addr_equal(const net_addr_t *a, const net_addr_t *b);
/* 127.0.0.0/8, ::1 or ::ffff:127.x.y.z. */
int net_addr_is_loopback(const net_addr_t *a);
/* 0.0.0.0 or :: (every interface). */
int net_addr_is_wildcard(const net_addr_t *a);
/* 1 when this host can bind the address (it is one of its own; the whole
 * 127.0.0.0/8 counts); the port is ignored. Never 1 for the wildcard. */
int net_addr_is_local(const net_addr_t *a);
/* The source address this host uses to reach dst (port 0): the interface
 * of the route to it. No packet is sent. */
sharc_status_t net_route_source(const net_addr_t *dst, net_addr_t *out);

/* Listening socket bound to addr (port 0: any free port), non-blocking,
 * SO_REUSEADDR, close-on-exec; *bound receives the actual address. The
 * wildcard address (0.0.0.0, ::) is refused with SHARC_ERR_INVALID_ARG:
 * sharc listens on one interface, never on all of them. */
sharc_status_t net_listen(const net_addr_t *addr, int backlog, int *fd,
                          net_addr_t *bound);

/* 1 if fd is a listening TCP socket bound to exactly addr (a launcher
 * bound and handed it down, so that no other process can take the port
 * between its choice and the listen): made non-blocking and close-on-exec
 * for use as net_listen's; 0 otherwise (fd untouched). */
int net_adopt_listen(const net_addr_t *addr, int fd);
/* Accepts one connection or times out; returned fd is blocking,
 * close-on-exec, TCP_NODELAY. */
sharc_status_t net_accept(int lfd, uint64_t deadline_ns, int *fd,
                          net_addr_t *peer);
/* Connects, retrying refused/unreachable until the deadline (the listener
 * may not be up yet). Returned fd is blocking, close-on-exec, TCP_NODELAY. */
sharc_status_t net_connect(const net_addr_t *a, uint64_t deadline_ns, int *fd);
/* Whole-buffer send/receive on a blocking or non-blocking fd, polling
 * until the deadline. A closed peer gives SHARC_ERR_NET ("connection
 * closed"). */
sharc_status_t net_send_all(int fd, const void *buf, size_t n,
                            uint64_t deadline_ns);
sharc_status_t net_recv_all(int fd, void *buf, size_t n, uint64_t deadline_ns);
/* The local address of a connected socket (the interface that routes to
 * the peer), port cleared. */
sharc_status_t net_local_addr(int fd, net_addr_t *out);
/* Address of the first interface matching SHARC_SOCKET_IFNAME syntax
 * ("eth0", prefix "eth", "^lo" exclude, "=eth0" exact); SHARC_ERR_NET when
 * none matches, naming the spec. */
sharc_status_t net_if_addr(const char *spec, net_addr_t *out);
/* Like net_if_addr but records no error: 0 when found, -1 when none.
 * spec NULL: the first interface that is up and not loopback. */
int net_if_find(const char *spec, net_addr_t *out);
void net_set_nonblocking(int fd);
/* 1 when the n bytes at a and b are equal, in a time that does not depend
 * on where they differ (job tokens). */
int net_secret_equal(const void *a, const void *b, size_t n);
/* One step of a non-blocking listener's accept loop: a new connection's fd
 * (non-blocking, close-on-exec; *from its address), or -1 when none is
 * waiting. Any error but "none waiting" is logged under what and sets
 * *pause_until a second ahead (out of fds: leave the listener until then). */
int net_accept_nb(int lfd, net_addr_t *from, const char *what,
                  uint64_t *pause_until);

/* ---- connections waiting for their hello (a progress thread's) ----------
 * The tcp and ib transports keep an array of accepted connections whose
 * first message (the hello) has not fully arrived; each element starts
 * with a net_pend_t, then the transport's hello buffer. */
typedef struct {
  int fd;
  size_t fill;       /* hello bytes received */
  uint64_t deadline; /* the whole hello by then, or the socket is dropped */
  net_addr_t from;
} net_pend_t;

/* Accepts from lfd into pend (elements of stride bytes, *n in use, max at
 * most; hello_ns to say hello) until none is waiting or the array is full;
 * what and pause_until as net_accept_nb. */
void net_pend_accept(int lfd, void *pend, size_t stride, int *n, int max,
                     uint64_t hello_ns, const char *what,
                     uint64_t *pause_until);

/* Reads more of pe's hello into buf (len bytes) without blocking: 1 when
 * complete, 0 when more is to come, -1 when the peer closed first (logged
 * under what; the socket is closed and pe->fd is -1). */
int net_pend_read(net_pend_t *pe, void *buf, size_t len, const char *what);

/* Drops (logged under what, closed) the connections of pend whose hello is
 * overdue or whose fd is -1, keeping the others in order; returns how many
 * remain. hello_ns: the time they had, for the message. */
int net_pend_expire(void *pend, size_t stride, int n, uint64_t now,
                    uint64_t hello_ns, const char *what);

#endif /* SHARC_NET_H */

/*
 * tcp_impl.h - what tcp.c (rings, progress thread, direct messages,
 * failures, teardown) and tcp_conn.c (dialing, accepting, hellos) share:
 * the transport's state and the few functions one calls in the other.
 * Private to comm/transport/tcp*.c.
 */
#ifndef SHARC_TCP_IMPL_H
#define SHARC_TCP_IMPL_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "ctrl.h"
#include "net.h"
#include "state.h"
#include "transport.h"

#define TCP_MAGIC 0x53484354u /* "SHCT" */
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
  /* Direct receives: the executor reads the socket itself. */
  pthread_mutex_t rx_lock; /* held by the progress thread's receive burst */
  _Atomic int rx_direct;   /* the executor owns the socket's input */
  _Atomic int rx_want;     /* ... and waits for it to become readable */
  size_t rx_bytes, rx_wire, rx_off; /* executor only: the current message */
  int rx_fd;                        /* executor's copy of fd, -1 until bound */
  int rx_lowat;   /* the socket's SO_RCVLOWAT as last set (executor only) */
  int rx_waiting; /* the executor set rx_want and has not seen POLLIN */
} tcp_pair_t;

typedef struct {
  tcp_pair_t **chan; /* [nchan] */
  _Atomic int lost;  /* a data socket ended while there was no control
                        socket to tell (peer_lost) */
} tcp_peer_t;

typedef struct {
  net_pend_t p; /* first: net.h's helpers walk the array */
  hello_t h;
} pending_t;

typedef struct {
  int kind; /* K_* */
  void *obj;
} poll_who_t;

struct tcp_state {
  struct sharc_comm *comm;
  const transport_t *vt; /* &transport_tcp: the vtable of its connections */
  size_t fifo_bytes;
  size_t direct_bytes; /* SHARC_TCP_DIRECT_BYTES; SIZE_MAX: never */
  size_t direct_recv;  /* receives: the same, or SIZE_MAX (see tcp_setup) */
  int nchan;           /* comm->nchan, at least 1 */
  int efd;
  pthread_t thread;
  int thread_started;
  _Atomic int stop;
  ctrl_t *ctrl;                    /* the control channel (ctrl.h) */
  pthread_mutex_t lock;            /* pair creation, fd binding */
  pthread_mutex_t dial_lock;       /* serialises dialing threads */
  tcp_peer_t *peers;               /* [nranks] */
  tcp_pair_t **pairs;              /* [nranks * nchan] */
  pending_t pend[TCP_MAX_PENDING]; /* progress thread only */
  int npend;
  uint64_t accept_pause; /* out of fds: leave the listener until then */
  struct pollfd *pfd;    /* progress thread scratch: [pcap] */
  poll_who_t *pwho;
  size_t pcap;
  size_t pn; /* entries filled (ctrl_add) */
};

enum { K_EFD, K_LISTEN, K_PEND, K_CTRL, K_DATA };

static inline void tcp_kick(struct tcp_state *st) {
  uint64_t one = 1;
  ssize_t r = write(st->efd, &one, sizeof one);
  (void)r; /* EAGAIN means a wake-up is already pending */
}

static inline const char *tcp_addr_of(struct sharc_comm *comm, int peer,
                                      char *buf, size_t len) {
  return net_addr_str(&comm->peers[peer].addr, buf, len);
}

/* Under st->lock: the pair for (peer, chan), made on first use (its rings
 * work before a socket is bound). NULL when out of memory. (tcp.c) */
/* The pair of (peer, chan), made on first use (tcp_conn.c). Under st->lock.
 * NULL when out of memory. */
tcp_pair_t *tcp_pair_get(struct tcp_state *st, int peer, int chan);

/* Progress thread (tcp_conn.c): accept what the listener has, read the
 * hellos of accepted sockets and bind them, drop those past their
 * deadline. */
void tcp_accept(struct tcp_state *st);
void tcp_pend_read(struct tcp_state *st, pending_t *pe);
void tcp_pend_expire(struct tcp_state *st, uint64_t now);

/* ctrl_ops_t.dial (tcp_conn.c): a control socket to peer, opened with the
 * tcp hello of chan TCP_CTRL; arg: the tcp_state. */
sharc_status_t tcp_dial_ctrl(void *arg, int peer, uint64_t deadline_ns,
                             int *fd);

/* transport_t.connect (tcp_conn.c): the lower rank dials, the higher one
 * waits for the dial (see tcp.c). */
sharc_status_t tcp_connect(struct sharc_comm *comm, int peer, int chan,
                           int is_send, uint64_t deadline_ns,
                           transport_conn_t **conn);

#endif /* SHARC_TCP_IMPL_H */

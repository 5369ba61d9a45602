/*
 * ib_ctrl.h - the ib transport's out-of-band control sockets (ib_ctrl.c).
 */
#ifndef SHARC_TRANSPORT_IB_CTRL_H
#define SHARC_TRANSPORT_IB_CTRL_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"

struct sharc_comm;

/* ---- control sockets (ib_ctrl.c) ------------------------------------------
 * One TCP socket per pair of ranks, from the lower rank to the higher
 * rank's data listener (comm->listen_fd, whose address the bootstrap put in
 * the rank table), opened with a hello that carries the job token; frames
 * of fixed size. The ib transport sends its QP information over it, and it
 * tells ranks apart that left cleanly (goodbye) from ranks that died (the
 * socket ends without one). The owner's progress thread polls the fds
 * ibc_pollset returns and hands the events to ibc_handle. */
#define IBC_BODY 232 /* payload bytes of one frame */

enum {
  IBC_PEER_NONE = 0, /* no socket yet */
  IBC_PEER_UP,       /* connected */
  IBC_PEER_BYE,      /* said goodbye: left cleanly */
  IBC_PEER_LOST      /* the socket ended without a goodbye */
};

typedef struct ibc ibc_t;

typedef struct {
  /* A frame of type >= IBC_USER from peer (progress thread). */
  void (*on_msg)(void *arg, int peer, int type, const void *body, size_t len);
  /* peer's socket ended without a goodbye (err: errno, 0 for EOF). */
  void (*on_lost)(void *arg, int peer, int err);
  /* peer reports the job failing because of failed_rank (-1 unknown). */
  void (*on_abort)(void *arg, int peer, int failed_rank, sharc_status_t st);
  /* The set of fds to poll changed: wake the progress thread. */
  void (*kick)(void *arg);
  void *arg;
} ibc_ops_t;

#define IBC_USER 16 /* first type handed to on_msg */

/* Uses comm->listen_fd, rank, nranks, peers, uid and token. */
sharc_status_t ibc_create(struct sharc_comm *comm, const ibc_ops_t *ops,
                          ibc_t **out);
/* Makes sure a socket to peer exists or will: a lower rank dials (blocking
 * at most until deadline_ns), a higher rank waits for the dial. */
sharc_status_t ibc_connect(ibc_t *c, int peer, uint64_t deadline_ns);
/* Queues one frame (len <= IBC_BODY) and sends what it can without
 * blocking; frames queued before the socket exists leave when it does.
 * Thread safe. SHARC_ERR_PEER_LOST when the peer is gone. */
sharc_status_t ibc_send(ibc_t *c, int peer, int type, const void *body,
                        size_t len);
/* Best-effort abort notice to every connected peer. Never blocks. */
void ibc_abort_all(ibc_t *c, int failed_rank, sharc_status_t st);
/* Goodbye to every connected peer (clean teardown). */
void ibc_bye_all(ibc_t *c);
int ibc_peer_state(ibc_t *c, int peer);
/* Fills the poll set: the first `reserve` entries are the caller's, the rest
 * ibc's; returns the total and sets *timeout_ms (-1: none). NULL when out
 * of memory. Progress thread only. */
struct pollfd *ibc_pollset(ibc_t *c, size_t reserve, size_t *n,
                           int *timeout_ms);
/* Handles the events of ibc's entries (pfd[reserve..n)). */
void ibc_handle(ibc_t *c, size_t reserve, size_t n);
/* Closes every socket; call after the progress thread stopped. */
void ibc_destroy(ibc_t *c);

#endif /* SHARC_TRANSPORT_IB_CTRL_H */

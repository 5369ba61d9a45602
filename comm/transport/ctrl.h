/*
 * ctrl.h - the control channel of the network transports (ctrl.c): one
 * out-of-band TCP socket per pair of ranks, shared by tcp and ib, for what
 * the data path cannot carry: a transport's own setup messages (ib: QP
 * information), a goodbye at clean teardown, and abort notices when the job
 * fails. A socket that ends without a goodbye means the peer process died
 * (the kernel closes it at once; an idle RC queue pair or a quiet data
 * socket would never tell).
 *
 * The lower rank dials the higher rank's data listener (comm->listen_fd,
 * whose address the bootstrap put in the rank table). Who accepts there:
 *   - ctrl itself (ops.dial NULL; ib): its dial opens with its own hello
 *     {magic, version, uid, token, rank, nranks}, checked on accept (token
 *     in constant time); a stray connection is dropped with a WARN without
 *     disturbing the job;
 *   - the transport (ops.dial set; tcp): its own hello marks a control
 *     socket among its data sockets, ops.dial opens one and ctrl_adopt
 *     hands an accepted one over.
 * Frames have one fixed size. Senders queue frames under the peer's lock
 * and write what the socket takes without blocking; the owner's progress
 * thread writes the rest when the socket is writable, and hands the
 * events of the fds it polls for ctrl (ctrl_poll_add, or ctrl_pollset) to
 * ctrl_event (or ctrl_handle).
 */
#ifndef SHARC_TRANSPORT_CTRL_H
#define SHARC_TRANSPORT_CTRL_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"

struct sharc_comm;

#define CTRL_BODY 232 /* payload bytes of one frame */

enum {
  CTRL_PEER_NONE = 0, /* no socket yet */
  CTRL_PEER_UP,       /* connected */
  CTRL_PEER_BYE,      /* said goodbye: left cleanly */
  CTRL_PEER_LOST      /* the socket ended without a goodbye */
};

typedef struct ctrl ctrl_t;

typedef struct {
  const char *name; /* the transport, in messages ("tcp", "ib") */
  /* A frame of type >= CTRL_USER from peer (progress thread). May be NULL
   * when the transport sends none. */
  void (*on_msg)(void *arg, int peer, int type, const void *body, size_t len);
  /* peer's socket ended without a goodbye (err: errno, 0 for EOF). NULL:
   * ctrl_fail_lost. */
  void (*on_lost)(void *arg, int peer, int err);
  /* peer reports the job failing because of failed_rank (-1 unknown).
   * NULL: ctrl_fail_abort. */
  void (*on_abort)(void *arg, int peer, int failed_rank, sharc_status_t st);
  /* The set of fds to poll changed: wake the progress thread. */
  void (*kick)(void *arg);
  /* NULL: ctrl dials and accepts itself. Else the transport owns the
   * listener: dial opens a connected, blocking socket to peer that the
   * peer's transport will recognise as a control socket, by deadline_ns
   * (SHARC_ERR_* with the reason recorded). */
  sharc_status_t (*dial)(void *arg, int peer, uint64_t deadline_ns, int *fd);
  void *arg;
} ctrl_ops_t;

#define CTRL_USER 16 /* first type handed to on_msg */

/* Uses comm->listen_fd, rank, nranks, peers, uid and token. */
sharc_status_t ctrl_create(struct sharc_comm *comm, const ctrl_ops_t *ops,
                           ctrl_t **out);
/* Makes sure a socket to peer exists or will: a lower rank dials (blocking
 * at most until deadline_ns), a higher rank waits for the dial. */
sharc_status_t ctrl_connect(ctrl_t *c, int peer, uint64_t deadline_ns);
/* With ops.dial: the transport accepted fd from peer (its hello checked)
 * as a control socket; ctrl owns it now. -1 (fd not taken: the caller
 * closes it) when peer already has one. */
int ctrl_adopt(ctrl_t *c, int peer, int fd);
/* Queues one frame (len <= CTRL_BODY) and sends what it can without
 * blocking; frames queued before the socket exists leave when it does.
 * Thread safe. SHARC_ERR_PEER_LOST when the peer is gone. */
sharc_status_t ctrl_send(ctrl_t *c, int peer, int type, const void *body,
                         size_t len);
/* Best-effort abort notice to every connected peer. Never blocks. */
void ctrl_abort_all(ctrl_t *c, int failed_rank, sharc_status_t st);
/* Goodbye to every connected peer (clean teardown). */
void ctrl_bye_all(ctrl_t *c);
int ctrl_peer_state(ctrl_t *c, int peer);

/* What on_lost and on_abort do when NULL, and what a transport's own
 * handlers may end with: fail the communicator (comm_fail) with the one
 * message for it, naming the rank, its host and who reported it. */
void ctrl_fail_lost(ctrl_t *c, int peer, int err);
void ctrl_fail_abort(ctrl_t *c, int peer, int failed_rank, sharc_status_t st);

/* ---- the progress thread's poll set --------------------------------------
 * Either add ctrl's fds to the owner's set, one add(owner, fd, events, who)
 * each (returns nonzero when out of memory), and hand each polled entry's
 * revents to ctrl_event with its who; ctrl_poll_add returns nonzero when an
 * add failed and lowers *next_ns to the next deadline ctrl has. */
int ctrl_poll_add(ctrl_t *c,
                  int (*add)(void *owner, int fd, short events, int32_t who),
                  void *owner, uint64_t *next_ns);
void ctrl_event(ctrl_t *c, int32_t who, short revents);
/* Or let ctrl hold the set: the first `reserve` entries are the caller's,
 * the rest ctrl's; returns the total and sets *timeout_ms (-1: none). NULL
 * when out of memory. ctrl_handle handles ctrl's entries (pfd[reserve..n)).
 * Progress thread only. */
struct pollfd *ctrl_pollset(ctrl_t *c, size_t reserve, size_t *n,
                            int *timeout_ms);
void ctrl_handle(ctrl_t *c, size_t reserve, size_t n);
/* Closes every socket; call after the progress thread stopped. */
void ctrl_destroy(ctrl_t *c);

#endif /* SHARC_TRANSPORT_CTRL_H */

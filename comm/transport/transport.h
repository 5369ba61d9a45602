/*
 * transport.h - the one interface every transport implements: shm (same
 * host), tcp and ib (between hosts), and the registry that the rest of
 * comm/ reaches them through. No file outside comm/transport/ names a
 * transport: selection, setup, teardown, abort notices, the peer boards
 * and fault injection loop over the registry (registry.h) or go through
 * the vtable of the connection at hand (tests/layers checks this).
 *
 * Data moves through FIFOs: one per (sender, receiver, channel). The sender
 * asks for contiguous space, writes into it, and commits; the receiver asks
 * for contiguous available bytes, reads (copies or reduces) them, and
 * releases. Bytes arrive in order; message boundaries are implied by the
 * schedule, so the FIFO carries raw bytes. Whenever a transport makes
 * something available to this rank (data arrived, space freed, a peer
 * failed) it calls comm_wake(comm) so a blocked executor re-polls.
 */
#ifndef SHARC_TRANSPORT_H
#define SHARC_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"

struct sharc_comm;
struct transport;

/* The registry, in selection order; also each transport's slot in
 * comm->tp_state. */
typedef enum {
  TRANSPORT_SHM,
  TRANSPORT_TCP,
  TRANSPORT_IB,
  TRANSPORT_COUNT
} transport_id_t;

/* Where a transport carries data. */
typedef enum { TRANSPORT_LOCAL, TRANSPORT_NET } transport_scope_t;

/* Common head of every transport's connection struct. */
typedef struct transport_conn {
  /* The vtable the executor calls for this connection: the transport's,
   * or a layer wrapped around it (comm/fault/: SHARC_FAULT), which reaches
   * the transport through tp->inner. */
  const struct transport *tp;
  int peer;    /* comm rank */
  int chan;    /* channel */
  int is_send; /* 1: this rank writes, peer reads */
  /* 1: every byte goes through send_space/recv_avail: send_begin takes no
   * small-message or in-place shortcut and recv_begin no direct receive
   * (set by a wrapping layer that must see each byte; 0 otherwise). */
  int framed_only;
  /* Set by the executor before each send_begin: 1 when the bytes were
   * just written by this rank (sched_t.fresh_sends, from RECV or TMP). */
  int fresh;
  /* Set by the executor before each send_begin: share > 1 when this send
   * is one of `share` sends of the same bytes over this transport in one
   * round (a broadcast's root), all with the same share_key, which no other
   * group ever has: the transport may copy the bytes once for all of them
   * (shm's outbox). 0: a send of its own. */
  int share;
  uint64_t share_key;
  struct sharc_comm *comm; /* set by a wrapping layer; NULL otherwise */
} transport_conn_t;

typedef struct transport {
  const char *name;
  transport_id_t id;
  transport_scope_t scope;
  /* A wrapping layer's vtable (a copy of the transport's with some entries
   * replaced) points at the transport it wraps; NULL in a transport's own. */
  const struct transport *inner;
  /* Per-communicator setup once the rank table is known, collective over
   * the ranks for which comm->tp[peer] is this transport (shm: create and
   * map segments; tcp: start the progress thread on comm->listen_fd). */
  sharc_status_t (*setup)(struct sharc_comm *comm);
  /* Returns the (cached) connection to peer on chan, establishing it on
   * first use; may block until the deadline. */
  sharc_status_t (*connect)(struct sharc_comm *comm, int peer, int chan,
                            int is_send, uint64_t deadline_ns,
                            transport_conn_t **conn);
  /* Contiguous free bytes to write at *ptr (0: full). Never blocks. */
  size_t (*send_space)(transport_conn_t *c, void **ptr);
  void (*send_commit)(transport_conn_t *c, size_t bytes);
  /* Contiguous readable bytes at *ptr (0: none yet). Never blocks. */
  size_t (*recv_avail)(transport_conn_t *c, const void **ptr);
  void (*recv_release)(transport_conn_t *c, size_t bytes);
  /* Optional message framing with in-place reads (shm; NULL elsewhere).
   * send_begin starts a SEND of `bytes` from src: returns 1 if the peer will
   * read src in place (the op completes when send_done says so), 0 if the
   * bytes follow inline through send_space/commit, -1 if there is no room
   * for the header yet (call again). recv_begin starts a RECV of `bytes`:
   * 1 with *direct pointing at the sender's memory (call recv_done after
   * reading it), 2 if the bytes must be fetched with recv_copy (then
   * recv_done), 0 if inline, -1 if the header has not arrived yet. */
  int (*send_begin)(transport_conn_t *c, const void *src, size_t bytes);
  int (*send_done)(transport_conn_t *c);
  int (*recv_begin)(transport_conn_t *c, size_t bytes, const void **direct);
  void (*recv_done)(transport_conn_t *c);
  /* Copies n bytes at offset off of the current message into dst. */
  sharc_status_t (*recv_copy)(transport_conn_t *c, void *dst, size_t off,
                              size_t n);
  /* SHARC_OK while the peer is alive and the connection healthy; else
   * SHARC_ERR_PEER_LOST / SHARC_ERR_NET with the message recorded by
   * err_set (naming the peer rank and host). Called when waiting; may make
   * a system call. */
  sharc_status_t (*check)(transport_conn_t *c);
  /* Tells every peer reachable through this transport that the job is
   * failing because of `failed_rank` (-1: unknown) with status st, so they
   * fail too instead of waiting for the timeout. Best effort, non-blocking. */
  void (*notify_abort)(struct sharc_comm *comm, int failed_rank,
                       sharc_status_t st);
  /* Flushes what is still in flight (bounded by the deadline) and frees
   * everything of this comm. Safe after a failed setup, and on a comm this
   * transport never set up. */
  void (*teardown)(struct sharc_comm *comm, uint64_t deadline_ns);

  /* Optional (NULL: not provided). The peer board: what a transport whose
   * peers share memory with this rank can tell about them without a
   * message, for timeout diagnostics (which collective a peer is in, whom
   * it waits on) and failure notices left before a peer died. Each returns
   * at once and does nothing on a comm it has no state for. */
  /* How many collectives this rank has entered / completed: published
   * through comm->progress, which a transport with a board points at it
   * at setup (state.h). */
  /* Publishes the rank this rank's executor sleeps on (-1: none). */
  void (*publish_wait)(struct sharc_comm *comm, int peer);
  /* Publishes the CPU this rank's executor yields on; peer_cpu reads a
   * peer's (-1: not known). Where a peer shares this rank's CPU it runs
   * only when this rank yields (exec.c). */
  void (*publish_cpu)(struct sharc_comm *comm, int cpu);
  int (*peer_cpu)(struct sharc_comm *comm, int rank);
  /* Collectives peer `rank` has entered; UINT64_MAX if not known. */
  uint64_t (*peer_entered)(struct sharc_comm *comm, int rank);
  /* The rank peer `rank` sleeps on inside the collective comm->seq (or
   * slept on when it failed in it): -1 none (inside but not waiting), -2
   * not known, -3 it is not inside that collective. */
  int (*peer_waiting)(struct sharc_comm *comm, int rank);
  /* Imports a failure notice that a peer left for this rank. */
  void (*poll_notice)(struct sharc_comm *comm);
  /* Optional: end c as a broken link would, so that the peer sees it too
   * (tcp shuts the socket down; NULL: only this end stops using it). For
   * fault injection (SHARC_FAULT drop). */
  void (*fault_drop)(transport_conn_t *c);
  /* Optional (NULL: never). GPUDirect RDMA: 1 when sends to `peer` from
   * the device memory [p, p + len) go straight from the GPU: send_begin
   * then takes each such send whole (1), whatever its size, and never asks
   * the executor to copy it through send_space, so a schedule may name
   * device memory as the source of its sends to peer. 0 with the reason in
   * why when the bytes must be staged in host memory first. May register
   * the memory with the NIC (kept in the transport's cache). */
  int (*device_send)(struct sharc_comm *comm, int peer, const void *p,
                     size_t len, char *why, size_t why_len);
} transport_t;

/* The one point where fault injection (tests only) reaches inside a
 * transport: a transport passes each control header it is about to send
 * (shm's message header, tcp's connection hello) to this hook, which may
 * corrupt it. comm/fault/ installs it when SHARC_FAULT corrupts headers on
 * this rank; NULL otherwise (one predictable branch). */
typedef void (*transport_header_hook_t)(int peer, void *hdr, size_t len,
                                        const char *what);
SHARC_INTERNAL extern _Atomic(transport_header_hook_t) transport_header_hook;
static inline void transport_header_sent(int peer, void *hdr, size_t len,
                                         const char *what) {
  transport_header_hook_t h =
      atomic_load_explicit(&transport_header_hook, memory_order_acquire);
  if (__builtin_expect(h != NULL, 0))
    h(peer, hdr, len, what);
}

/* The transports themselves: for the registry (registry.h) and the
 * transports' own unit tests; the library reaches them through the
 * registry. */
SHARC_INTERNAL extern const transport_t transport_shm;
SHARC_INTERNAL extern const transport_t transport_tcp;
/* InfiniBand / RoCE over libibverbs (transport/ib/ib.c); in a build without
 * libibverbs its setup and connect fail with SHARC_ERR_UNSUPPORTED. */
SHARC_INTERNAL extern const transport_t transport_ib;

/* Bytes an op of `bytes` occupies in a FIFO: every op starts 64-byte
 * aligned in the stream so elements never straddle the FIFO wrap. The
 * executor and every transport's framing count with this one rule. */
static inline size_t transport_wire_bytes(size_t bytes) {
  return (bytes + 63) & ~(size_t)63;
}

#endif /* SHARC_TRANSPORT_H */

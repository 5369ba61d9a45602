/*
 * transport.h - the one interface every transport implements (DESIGN.md
 * item 4): shm (same host), tcp and ib (between hosts), later cudaipc.
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

#include <stddef.h>
#include <stdint.h>

#include "core.h"

struct sharc_comm;
struct transport;

/* Common head of every transport's connection struct. */
typedef struct transport_conn {
  const struct transport *tp;
  int peer;    /* comm rank */
  int chan;    /* channel */
  int is_send; /* 1: this rank writes, peer reads */
} transport_conn_t;

typedef struct transport {
  const char *name;
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
   * everything of this comm. Safe after a failed setup. */
  void (*teardown)(struct sharc_comm *comm, uint64_t deadline_ns);
} transport_t;

SHARC_INTERNAL extern const transport_t transport_shm;
/* Imports a failure notice that a same-host peer left for this rank. */
void shm_poll_notice(struct sharc_comm *comm);
/* Publishes how many collectives this rank has entered / completed on
 * comm, for same-host peers' timeout diagnostics. */
void shm_publish_progress(struct sharc_comm *comm, uint64_t entered,
                          uint64_t completed);
/* Collectives a same-host peer has entered; UINT64_MAX if not known. */
uint64_t shm_peer_entered(struct sharc_comm *comm, int rank);
/* Publishes the rank this rank's executor sleeps on (-1: none), for
 * same-host peers' timeout diagnosis. */
void shm_publish_wait(struct sharc_comm *comm, int peer);
/* The rank a same-host peer sleeps on inside the collective comm->seq (or
 * slept on when it failed in it): -1 none (it is inside but not waiting),
 * -2 not known (not on this host), -3 it is not inside that collective. */
int shm_peer_waiting(struct sharc_comm *comm, int rank);
SHARC_INTERNAL extern const transport_t transport_tcp;
/* InfiniBand / RoCE over libibverbs (transport/ib.c); in a build without
 * libibverbs its setup and connect fail with SHARC_ERR_UNSUPPORTED. */
SHARC_INTERNAL extern const transport_t transport_ib;

#endif /* SHARC_TRANSPORT_H */

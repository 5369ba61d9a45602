/*
 * fault.h - fault injection for tests (SHARC_FAULT; never for production):
 * kill this process, drop a connection, delay a send or corrupt a message
 * at a named point, so the failure paths (bounded waits, peer-loss
 * propagation, message checks, checkpoint atomicity) can be tested
 * deterministically.
 *
 *   SHARC_FAULT=FAULT[,FAULT...]
 *     kill:R:send[:B]        rank R raises SIGKILL before its next chunk of
 *                            executor sends once it has sent >= B bytes
 *     kill:R:recv[:B]        ... before consuming received bytes once it has
 *                            received >= B bytes
 *     kill:R:save            rank R raises SIGKILL half-way through writing
 *                            its checkpoint file (validated here, carried
 *                            out by the engine itself: shard/ckpt.c)
 *     save_kill:R            the same as kill:R:save
 *     drop:R:send[:B]        rank R drops the connection of its next send
 *     drop:R:recv[:B]        (receive) once it has sent (received) >= B
 *                            bytes: tcp shuts the socket down, and both ends
 *                            see it end; shm has no connection, so this rank
 *                            sees the peer as gone
 *     delay:R:MS[:B]         rank R sleeps MS milliseconds before its next
 *                            send once it has sent >= B bytes
 *     corrupt:R:payload[:B]  rank R flips every bit of the first payload byte
 *                            of its next send once it has sent >= B bytes
 *     corrupt:R:header[:B]   ... of the first byte of its next message header
 *                            (shm: the 64-byte message header; tcp: the
 *                            hello that opens a connection)
 *   R is the rank given by the launcher (or to sharc_comm_init_rank); B is
 *   a byte count, with an optional K, M or G suffix (powers of 1024),
 *   default 0; bytes are counted over every communicator of the process.
 *   Each fault fires once. The FIFO path is covered: sends that peers read
 *   in place (sharc_mem_alloc buffers on one host) are not counted.
 *
 * The spec is parsed once, at the first communicator's creation; a
 * malformed one fails that creation with SHARC_ERR_INVALID_ARG saying what
 * is wrong. Unset, every hook costs one predictable branch on a cached flag
 * (fault_enabled()).
 */
#ifndef SHARC_FAULT_H
#define SHARC_FAULT_H

#include <stdatomic.h>
#include <stddef.h>

#include "core.h"
#include "transport.h"

/* Nonzero when some fault targets this process (set once by fault_init). */
SHARC_INTERNAL extern _Atomic int fault_on;

static inline int fault_enabled(void) {
  return __builtin_expect(atomic_load_explicit(&fault_on, memory_order_relaxed),
                          0);
}

/* Parses SHARC_FAULT (first call only) and keeps the faults aimed at
 * `rank`; later calls return the first call's result. Thread-safe. */
sharc_status_t fault_init(int rank);

/* Executor hooks, called only when fault_enabled(). fault_send: `data`
 * payload bytes of a `n`-byte chunk were written at p for connection c and
 * are about to be committed; fault_recv: n received bytes are about to be
 * consumed. Either may kill the process, sleep or flip a byte at p; a
 * nonzero return means "do not move this chunk" (the connection was
 * dropped): the op stalls and the transport's check() reports the loss. */
int fault_send(transport_conn_t *c, void *p, size_t data, size_t n);
int fault_recv(transport_conn_t *c, size_t n);

/* A transport is about to send the message header at hdr (len bytes) to
 * `peer` (what: "message header", "hello"); may flip its first byte. */
void fault_header(int peer, void *hdr, size_t len, const char *what);

/* Whether fault injection dropped connection c (shm's check() then reports
 * the peer as gone). */
int fault_conn_dropped(const transport_conn_t *c);

#endif /* SHARC_FAULT_H */

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
 *     kill:R:step[:N]        rank R raises SIGKILL in the backward of the
 *                            FSDP engine's optimizer step N (1-based; the
 *                            first step without N), its gradient reductions
 *                            queued (the engine reads this entry)
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
 *   Each fault fires once. Every byte is covered: on a rank that a fault
 *   targets, no transport takes a shortcut past the FIFO path (in-place
 *   reads, direct sends), whatever the transport (shm, tcp, ib).
 *
 * The spec is parsed once, at the first communicator's creation; a
 * malformed one fails that creation with SHARC_ERR_INVALID_ARG saying what
 * is wrong. Where no fault targets the process nothing is wrapped, and the
 * transports' one header hook costs a predictable branch.
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

/* The layer fault injection puts around a transport: tp itself when no
 * fault targets this process, else a vtable that hands every call on to tp
 * (tp->inner) after counting the bytes and firing the faults: kill, drop
 * and delay before a chunk is sent or received, corrupt on the chunk
 * written, and a dropped connection reads as its peer lost (check). Its
 * connections are framed_only, so no byte bypasses it. Header faults reach
 * the transports through transport_header_hook (transport.h). The
 * communicator's setup wraps each peer's transport with it. Thread safe. */
const transport_t *fault_wrap(const transport_t *tp);

#endif /* SHARC_FAULT_H */

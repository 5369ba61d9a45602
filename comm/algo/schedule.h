/*
 * schedule.h - algorithms as schedules (docs/design.md, decision 2).
 *
 * An algorithm is a pure function (collective, rank, nranks, count, ...) ->
 * a list of rounds, each a list of operations. The executor (exec.c) runs one
 * round at a time: all operations of a round progress concurrently, and the
 * round ends when all are done. Point-to-point data between two ranks flows
 * through one FIFO per (sender, receiver, channel): the k-th SEND from A to B
 * on channel c carries the bytes of the k-th RECV/RECV_REDUCE on B from A on
 * channel c, so both sides must list them in the same order. Within a round,
 * operations on the same (peer, channel, direction) run in list order.
 *
 * Offsets and counts are in elements of the collective's type. Buffers are
 * symbolic: SEND (the user's sendbuf), RECV (the user's recvbuf), TMP
 * (scratch of tmp_count elements the executor allocates).
 *
 * This header: the types and the builder the algorithm files fill a
 * schedule with. dispatch.h builds the schedule of an algorithm, cost.h
 * picks the algorithm, cache.h keeps built schedules, schedule_sim.h runs
 * them all in one process (the simulator that proves an algorithm correct
 * and deadlock-free; the unit tests sweep rank counts 1..33).
 */
#ifndef SHARC_SCHEDULE_H
#define SHARC_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "sharc.h"

typedef enum {
  SCHED_BUF_SEND = 0,
  SCHED_BUF_RECV,
  SCHED_BUF_TMP,
  SCHED_BUF_P2P /* send/recv batches: buffer of transfer i is P2P + i */
} sched_buf_t;

typedef enum {
  SCHED_SEND = 0,    /* send src[src_off, +count) to peer */
  SCHED_RECV,        /* receive count elements from peer into dst */
  SCHED_RECV_REDUCE, /* dst[i] = in[i] OP src[i]; src may equal dst */
  SCHED_COPY         /* local: dst = src (regions do not overlap) */
} sched_kind_t;

typedef struct {
  uint8_t kind;     /* sched_kind_t */
  uint8_t chan;     /* channel, < sched_t.nchan */
  uint16_t src_buf; /* sched_buf_t; SEND, RECV_REDUCE, COPY */
  uint16_t dst_buf; /* sched_buf_t; RECV, RECV_REDUCE, COPY */
  int32_t peer;     /* rank in the communicator; -1 for COPY */
  size_t src_off;   /* elements */
  size_t dst_off;   /* elements */
  size_t count;     /* elements */
} sched_op_t;

typedef struct {
  sched_op_t *ops;
  size_t nops, ops_cap;
  size_t *round_start; /* round r is ops[round_start[r], round_start[r+1]) */
  size_t nrounds, rounds_cap;
  size_t tmp_count; /* elements of scratch needed */
  int nchan;        /* channels used (>= 1) */
  int oom;          /* an append failed; sched_finish reports it */
  int partial;      /* not every rank runs it (send/recv): a timeout names only
                       the peers awaited, not ranks behind in collectives */
  int fresh_sends;  /* what it sends from RECV or TMP was just written by this
                       rank (all-reduce: its own reduction, or in place the
                       caller's input), so a peer reading it in place reads
                       another core's cache: a transport may copy mid-size
                       messages instead (shm, SHARC_SHM_DIRECT_FRESH_BYTES) */
  int shared_sends; /* some round sends the same bytes to several peers in
                       a row (a broadcast's root), which a transport may copy
                       once for all (transport_conn_t.share); sched_finish */
} sched_t;

typedef enum {
  SCHED_ALL_GATHER = 0,
  SCHED_REDUCE_SCATTER,
  SCHED_ALL_REDUCE,
  SCHED_BROADCAST,
  SCHED_BARRIER,
  SCHED_REDUCE,  /* to a root */
  SCHED_GATHER,  /* to a root */
  SCHED_SCATTER, /* from a root */
  SCHED_ALL_TO_ALL,
  SCHED_P2P, /* a batch of sends and receives (sched_p2p_build) */
  SCHED_COLL_COUNT
} sched_coll_t;

/* Collectives that reduce (an op). */
static inline int sched_coll_reduces(sched_coll_t c) {
  return c == SCHED_ALL_REDUCE || c == SCHED_REDUCE_SCATTER ||
         c == SCHED_REDUCE;
}

/* Collectives with a root (sched_args_t.root). */
static inline int sched_coll_rooted(sched_coll_t c) {
  return c == SCHED_BROADCAST || c == SCHED_REDUCE || c == SCHED_GATHER ||
         c == SCHED_SCATTER;
}

typedef enum {
  SCHED_ALGO_RING = 0,
  SCHED_ALGO_TREE, /* recursive doubling/halving (folded for non-powers of
                      two); binomial tree for broadcast; dissemination for
                      barrier */
  SCHED_ALGO_RABENSEIFNER, /* all-reduce: recursive halving RS + doubling AG */
  SCHED_ALGO_DBTREE,       /* all-reduce: double binary tree, pipelined */
  SCHED_ALGO_HIER,   /* two levels across hosts (all-gather, reduce-scatter,
                        all-reduce): within each host, one exchange per host
                        pair, within each host again */
  SCHED_ALGO_DIRECT, /* gather, scatter, broadcast: every block straight
                        between its rank and the root, in one round;
                        all-to-all: pairwise exchange */
  SCHED_ALGO_BRUCK,  /* all-to-all: Bruck's, ceil(log2 n) rounds of about
                        n/2 blocks each (small blocks) */
  SCHED_ALGO_COUNT
} sched_algo_t;

typedef struct {
  sched_coll_t coll;
  int rank, nranks;
  /* NCCL semantics: all-gather sendcount per rank; reduce-scatter recvcount
   * per rank; all-reduce, broadcast and reduce the whole count; gather,
   * scatter and all-to-all one block (all-to-all: one rank's block for one
   * peer). Barrier: ignored. */
  size_t count;
  int root;     /* broadcast, reduce, gather, scatter */
  int inplace;  /* see sharc.h for where the in-place sendbuf lies */
  int nchan;    /* channels the algorithm may use (>= 1) */
  size_t chunk; /* pipelining unit in elements for tree algorithms (>= 1) */
  /* Host of each rank [nranks], hosts numbered 0.. in order of first
   * appearance; NULL: all on one host. Used by SCHED_ALGO_HIER. */
  const int *host_of;
  /* Topology ring order [nranks] (order[i] = rank at ring position i, a
   * permutation); NULL: rank order. Ring algorithms (and every all-reduce,
   * broadcast and barrier algorithm) run their neighbours in this order, so
   * a ring crosses each host boundary once even when ranks are interleaved
   * across hosts. */
  const int *order;
} sched_args_t;

/* ---- building (used by the algorithm files) ---- */
void sched_init(sched_t *s);
void sched_free(sched_t *s);
void sched_round(sched_t *s); /* starts a new round */
void sched_send(sched_t *s, int peer, int chan, sched_buf_t src, size_t off,
                size_t count);
void sched_recv(sched_t *s, int peer, int chan, sched_buf_t dst, size_t off,
                size_t count);
void sched_recv_reduce(sched_t *s, int peer, int chan, sched_buf_t src,
                       size_t src_off, sched_buf_t dst, size_t dst_off,
                       size_t count);
void sched_copy(sched_t *s, sched_buf_t src, size_t src_off, sched_buf_t dst,
                size_t dst_off, size_t count);
/* Drops empty rounds; SHARC_ERR_NO_MEM if an append failed. */
sharc_status_t sched_finish(sched_t *s);

/* ---- send/recv batches ---- */
/* One transfer of a batch: send (1) or receive (0) `bytes` with peer. */
typedef struct {
  int send;
  int peer;
  size_t bytes;
} sched_p2p_t;
#define SCHED_P2P_MAX (UINT16_MAX - SCHED_BUF_P2P) /* transfers per batch */

/* Builds into s (initialised, empty) the schedule of rank's batch of n
 * transfers, in bytes (dtype U8): one round in which every transfer
 * progresses at once, transfer i on buffer SCHED_BUF_P2P + i; transfers
 * with the same peer and direction keep their order (the k-th send to a
 * peer carries its k-th receive from this rank). A transfer of at least
 * split_bytes is cut across nchan channels. Transfers with rank itself pair
 * up in order (k-th send with k-th receive) as local copies:
 * SHARC_ERR_INVALID_ARG when one lacks its partner or their sizes differ.
 * Empty transfers are dropped. Marks s partial. */
sharc_status_t sched_p2p_build(const sched_p2p_t *ops, size_t n, int rank,
                               int nchan, size_t split_bytes, sched_t *s);

/* ---- names ---- */
const char *sched_algo_name(sched_algo_t algo);
const char *sched_coll_name(sched_coll_t coll);
/* The public function that runs coll ("sharc_all_gather"), for messages. */
const char *sched_coll_fn(sched_coll_t coll);

#endif /* SHARC_SCHEDULE_H */

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
 * The simulator (schedule_sim.c) runs every rank's schedule in one process to
 * prove an algorithm correct and deadlock-free; the unit tests sweep rank
 * counts 1..33.
 */
#ifndef SHARC_SCHEDULE_H
#define SHARC_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "sharc.h"

typedef enum { SCHED_BUF_SEND = 0, SCHED_BUF_RECV, SCHED_BUF_TMP } sched_buf_t;

typedef enum {
  SCHED_SEND = 0,    /* send src[src_off, +count) to peer */
  SCHED_RECV,        /* receive count elements from peer into dst */
  SCHED_RECV_REDUCE, /* dst[i] = in[i] OP src[i]; src may equal dst */
  SCHED_COPY         /* local: dst = src (regions do not overlap) */
} sched_kind_t;

typedef struct {
  uint8_t kind;    /* sched_kind_t */
  uint8_t chan;    /* channel, < sched_t.nchan */
  uint8_t src_buf; /* sched_buf_t; SEND, RECV_REDUCE, COPY */
  uint8_t dst_buf; /* sched_buf_t; RECV, RECV_REDUCE, COPY */
  int32_t peer;    /* rank in the communicator; -1 for COPY */
  size_t src_off;  /* elements */
  size_t dst_off;  /* elements */
  size_t count;    /* elements */
} sched_op_t;

typedef struct {
  sched_op_t *ops;
  size_t nops, ops_cap;
  size_t *round_start; /* round r is ops[round_start[r], round_start[r+1]) */
  size_t nrounds, rounds_cap;
  size_t tmp_count; /* elements of scratch needed */
  int nchan;        /* channels used (>= 1) */
  int oom;          /* an append failed; sched_finish reports it */
} sched_t;

typedef enum {
  SCHED_ALL_GATHER = 0,
  SCHED_REDUCE_SCATTER,
  SCHED_ALL_REDUCE,
  SCHED_BROADCAST,
  SCHED_BARRIER,
  SCHED_COLL_COUNT
} sched_coll_t;

typedef enum {
  SCHED_ALGO_RING = 0,
  SCHED_ALGO_TREE, /* recursive doubling/halving (folded for non-powers of
                      two); binomial tree for broadcast; dissemination for
                      barrier */
  SCHED_ALGO_RABENSEIFNER, /* all-reduce: recursive halving RS + doubling AG */
  SCHED_ALGO_DBTREE,       /* all-reduce: double binary tree, pipelined */
  SCHED_ALGO_HIER, /* two levels across hosts (all-gather, reduce-scatter,
                      all-reduce): within each host, one exchange per host
                      pair, within each host again */
  SCHED_ALGO_COUNT
} sched_algo_t;

typedef struct {
  sched_coll_t coll;
  int rank, nranks;
  /* NCCL semantics: all-gather sendcount per rank; reduce-scatter recvcount
   * per rank; all-reduce and broadcast the whole count. Barrier: ignored. */
  size_t count;
  int root;     /* broadcast */
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

/* ---- algorithms: fill s (initialised by the caller) ---- */
/* Builds the schedule of algo for args; SHARC_ERR_UNSUPPORTED if algo does
 * not implement args->coll. */
sharc_status_t sched_build(sched_algo_t algo, const sched_args_t *args,
                           sched_t *s);
const char *sched_algo_name(sched_algo_t algo);
const char *sched_coll_name(sched_coll_t coll);
/* The public function that runs coll ("sharc_all_gather"), for messages. */
const char *sched_coll_fn(sched_coll_t coll);
/* Whether algo implements coll. */
int sched_algo_supports(sched_algo_t algo, sched_coll_t coll);

/* Cost model (alpha-beta): predicted microseconds for coll of `bytes`
 * (count * element size, with all-gather/reduce-scatter counted per rank as
 * in args->count) on nranks with algo. alpha_us per message, beta_gbs link
 * bandwidth. All ranks on one host. */
double sched_cost_us(sched_algo_t algo, sched_coll_t coll, int nranks,
                     size_t bytes, double alpha_us, double beta_gbs);
/* The algorithm with the lowest predicted cost among those supporting coll. */
sched_algo_t sched_pick(sched_coll_t coll, int nranks, size_t bytes,
                        double alpha_us, double beta_gbs);

/* Links of a communicator spanning hosts: within a host alpha_us/beta_gbs,
 * between hosts net_alpha_us/net_beta_gbs (one network link per host). */
typedef struct {
  int nhosts;    /* 1: one host, the plain model */
  int local_max; /* most ranks on one host */
  double alpha_us, beta_gbs, net_alpha_us, net_beta_gbs;
} sched_links_t;
double sched_cost_links_us(sched_algo_t algo, sched_coll_t coll, int nranks,
                           size_t bytes, const sched_links_t *links);
sched_algo_t sched_pick_links(sched_coll_t coll, int nranks, size_t bytes,
                              const sched_links_t *links);

/* ---- cache of built schedules (one per communicator) ----
 * A schedule is a function of the call's shape and of the communicator's
 * constants (rank, nranks, channels, host map, ring order, tunables). It
 * never holds buffer addresses (buffers are symbolic, above), and the
 * reduction op and dtype reach it only through the element size (bytes
 * pick the algorithm and the channels, the element size the chunk), so a
 * small-message loop that repeats one call reuses one schedule instead of
 * choosing an algorithm and building it every time. The executor only
 * reads a schedule (exec_run takes it const), so a cached one is reused
 * unchanged. Not thread safe: the owner serialises access (coll.c: only
 * the thread whose turn it is uses its communicator's cache). */
#define SCHED_CACHE_SLOTS 16
/* Schedules of more ops are rebuilt per call: their build is cheap next to
 * moving their bytes, and caching them would pin memory. */
#define SCHED_CACHE_MAX_OPS 4096

typedef struct {
  sched_coll_t coll;
  int root;    /* broadcast root; 0 otherwise */
  int inplace; /* sched_args_t.inplace */
  size_t count;
  size_t esize; /* bytes per element */
} sched_key_t;

typedef struct {
  sched_key_t key;
  sched_algo_t algo; /* the algorithm the schedule runs */
  sched_t sched;
  uint64_t used; /* last use (cache clock); 0: empty slot */
} sched_cache_slot_t;

typedef struct {
  sched_cache_slot_t slot[SCHED_CACHE_SLOTS];
  uint64_t clock;
  int last;              /* slot of the last hit or insert */
  uint64_t hits, misses; /* for tests and tracing */
} sched_cache_t;

/* A zeroed sched_cache_t is empty and valid; so is one after
 * sched_cache_free. */
void sched_cache_free(sched_cache_t *c);
/* The slot holding key (marked most recently used), or NULL. */
const sched_cache_slot_t *sched_cache_get(sched_cache_t *c,
                                          const sched_key_t *key);
/* Stores *s under key (which must be absent), evicting the least recently
 * used slot; the cache takes ownership of s's memory and leaves *s empty
 * (sched_init). Returns the slot. */
const sched_cache_slot_t *sched_cache_put(sched_cache_t *c,
                                          const sched_key_t *key,
                                          sched_algo_t algo, sched_t *s);

/* ---- simulator ---- */
/* Runs coll on nranks with algo entirely in memory, with data of dtype/op
 * from a deterministic pattern, and compares every rank's result to a
 * reference computed in higher precision (exact for integers). Also detects
 * deadlock (no rank can progress) and FIFO mismatches (a receive whose
 * sender sends a different size). Returns SHARC_OK or an error with the
 * reason in err_last(). */
sharc_status_t sched_simulate(sched_algo_t algo, const sched_args_t *proto,
                              sharc_dtype_t dtype, sharc_op_t op);

#endif /* SHARC_SCHEDULE_H */

/*
 * state.h - the communicator's state (struct sharc_comm) and what every
 * layer above does with it: wait on its doorbell, fail it, record its
 * errors. Below the transports, which keep their own state in its
 * tp_state slots and reach each other only through transport.h.
 */
#ifndef SHARC_STATE_H
#define SHARC_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bootstrap.h"
#include "cache.h"
#include "core.h"
#include "recorder.h"
#include "schedule.h"

/* Slots for the transports' state (transport.h's TRANSPORT_COUNT fits). */
#define COMM_TP_SLOTS 4

/* Per-rank wake-up word: a blocked executor sleeps on `doorbell` with a
 * futex; anyone who makes progress possible bumps it and, if `sleeping`,
 * wakes it. Lives in the rank's shared-memory segment when it has one (so
 * same-host peers can ring it) or in private memory. */
typedef struct {
  _Atomic uint32_t doorbell;
  _Atomic uint32_t sleeping;
} wake_word_t;

/* Job-wide failure notice, set by whoever detects a failure first. */
typedef struct {
  _Atomic int32_t failed;      /* 0: healthy */
  _Atomic int32_t failed_rank; /* rank that died or timed out, -1 unknown */
  _Atomic int32_t status;      /* sharc_status_t */
  _Atomic int32_t reporter;    /* rank that raised the notice */
} fail_word_t;

/* Tunables read once when the communicator is made (the hot path never
 * calls getenv). */
#define COMM_ALGO_AUTO (-1)
#define COMM_ALGO_TREE_FAMILY (-2)

typedef struct {
  uint64_t timeout_ns;
  size_t slice;              /* SHARC_SLICE_BYTES, multiple of 64 */
  int64_t spin;              /* SHARC_SPIN */
  int algo;                  /* a sched_algo_t, COMM_ALGO_AUTO (cost model) or
                                COMM_ALGO_TREE_FAMILY */
  double alpha_us, beta_gbs; /* within a host */
  double net_alpha_us, net_beta_gbs; /* between hosts */
  int64_t tree_max;                  /* SHARC_TREE_MAX_BYTES */
  int check; /* SHARC_CHECK: compare call signatures first (check.h) */
} comm_cfg_t;

struct sharc_comm {
  comm_cfg_t cfg;
  int rank, nranks;
  int local_rank, local_size, nhosts;
  uint64_t uid; /* communicator id: shm names, tcp hellos */
  uint8_t token[SHARC_TOKEN_BYTES];
  peer_info_t *peers; /* [nranks] */
  int *local_ranks;   /* [local_size] comm ranks on this host, ascending */
  int *host_of;       /* [nranks] host index (0..nhosts-1) */
  int *ring_order;    /* [nranks] topology ring (hosts consecutive);
                         NULL when it is the rank order */
  int local_max;      /* most ranks on one host */
  /* some host has more of this communicator's ranks than the fewest CPUs
   * any of them reports (peer_info_t.cpus): the same on every rank */
  int oversubscribed;
  const struct transport **tp; /* [nranks] transport that reaches each rank */
  int nchan;                   /* channels per peer */
  /* [nranks * nchan * 2] the executor's connections by (peer, channel,
   * is_send), each asked of its transport once (NULL: not yet; the array
   * NULL: ask every time) */
  struct transport_conn **conns;

  /* tcp: this comm's data listener (created before the rendezvous); ib
   * accepts its control sockets on it (the two are never set up together). */
  int listen_fd;
  net_addr_t listen_addr;

  /* transport private state: each transport's own, by its registry id */
  void *tp_state[COMM_TP_SLOTS];
  /* tells every peer of a failure through the transports (set at setup:
   * the registry's transport_notify_abort_all; NULL before) */
  void (*notify_abort)(struct sharc_comm *comm, int failed_rank,
                       sharc_status_t st);

  /* waiting */
  wake_word_t *wake; /* points into the shm segment or wake_private */
  wake_word_t wake_private;
  /* How many collectives this rank has entered ([0]) and completed ([1]),
   * where its same-host peers read them (its shm segment: the peer board,
   * transport.h) or progress_private: a store of each per call, no call
   * through the transports. */
  _Atomic uint64_t *progress;
  _Atomic uint64_t progress_private[2];
  fail_word_t fail;       /* this rank's view of the job failure; `failed`
                             is set last, once the rest is filled in */
  _Atomic int fail_claim; /* first comm_fail caller wins */

  /* The GPU layer's state of this comm (comm/gpu/path_direct.c), and what
   * comm_fail_as calls when the comm fails, so that work queued on a device
   * waiting for peers is released (NULL: none). */
  void *gpu;
  void (*gpu_abort)(struct sharc_comm *comm);

  /* errors */
  _Atomic int unusable; /* failed (comm_fail_as): later calls fail fast */
  sharc_status_t unusable_st;
  char unusable_msg[512];
  pthread_mutex_t err_lock;
  char last_error[512];

  /* ordering of collectives enqueued from several streams: tickets and
   * the ticket being served are atomics (a lone caller takes its turn and
   * passes it without a lock); a thread that must wait for its turn counts
   * itself in order_waiters and sleeps on order_cond under order_lock */
  pthread_mutex_t order_lock;
  pthread_cond_t order_cond;
  _Atomic uint64_t next_ticket, serving;
  _Atomic int order_waiters;
  /* collectives executed: written by the thread whose turn it is, read by
   * the recorder's printers (other threads) */
  _Atomic uint64_t seq;
  uint64_t nsplit; /* splits done, for child uids */
  /* groups of sends of the same bytes started (transport_conn_t.share):
   * written by the thread whose turn it is */
  uint64_t share_groups;

  /* flight recorder; rec_cur is the running collective's entry */
  recorder_t rec;
  rec_entry_t *_Atomic rec_cur;

  /* scratch for algorithms (TMP buffer) */
  void *tmp;
  size_t tmp_bytes;

  /* schedules of recent call shapes (coll.c); used only by the thread
   * whose turn it is, so the turn's handoff (serving, sequentially
   * consistent) orders its accesses */
  sched_cache_t sched_cache;
  /* SHARC_DEBUG=INFO: the call sizes (bit: floor(log2 bytes)) whose
   * algorithm choice was logged, per collective (call.c; a GPU path
   * plans at enqueue, on the caller's thread: atomic) */
  _Atomic uint64_t algo_logged[SCHED_COLL_COUNT];
};

typedef struct sharc_comm sharc_comm_s;

/* Rings this rank's doorbell (from a transport's progress thread). */
void comm_wake(struct sharc_comm *comm);
/* Rings another rank's doorbell given its wake word (shm peers). */
void comm_wake_word(wake_word_t *w);
/* The one failure routine. The first caller wins; it marks the comm
 * unusable (later calls fail fast with its message), warns once with the
 * flight recorder and wakes the local executor. How far it reaches:
 *   FAIL_JOB    the job is failing: it also raises the failure word (what
 *               the executor and the peers' notices watch) and tells every
 *               peer through the transports. Transports call it when they
 *               learn of a failure, locally or from a peer's notice.
 *   FAIL_LOCAL  every rank found the same failure by itself (SHARC_CHECK's
 *               agreed mismatch): the peers are not told, since a notice
 *               could overtake a peer's last record (tcp control and data
 *               sockets are not ordered) and replace its precise message by
 *               a second-hand one, and the failure word stays down, since
 *               teardown flushes a tcp send ring only while the comm has
 *               not failed and no executor waits that it would stop. */
typedef enum { FAIL_JOB, FAIL_LOCAL } fail_scope_t;
void comm_fail_as(struct sharc_comm *comm, fail_scope_t scope, int failed_rank,
                  sharc_status_t st, const char *why);
/* comm_fail_as(comm, FAIL_JOB, ...). */
void comm_fail(struct sharc_comm *comm, int failed_rank, sharc_status_t st,
               const char *why);
/* Records msg as comm's last error and returns st. */
sharc_status_t comm_error(struct sharc_comm *comm, sharc_status_t st,
                          const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A transport's connect arguments: SHARC_OK, or the error recorded on comm
 * (setup not done: state NULL; peer or channel out of range). */
sharc_status_t comm_check_connect(struct sharc_comm *comm, const char *tp,
                                  const void *state, int peer, int chan,
                                  int nchan);

/* As comm_error, without logging (the error was reported where it began). */
sharc_status_t comm_record(struct sharc_comm *comm, sharc_status_t st,
                           const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Blocking wait on this rank's doorbell: returns when it changed since
 * `seen` (a value read before the last poll) or after timeout_ns. */
void comm_wait(struct sharc_comm *comm, uint32_t seen, uint64_t timeout_ns);

#endif /* SHARC_STATE_H */

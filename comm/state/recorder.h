/*
 * recorder.h - the flight recorder: each communicator remembers its last
 * REC_SIZE collectives (sequence, call, algorithm, state, the peer being
 * waited on, times), printed on a timeout or a peer failure and on demand
 * with SIGUSR1, so one look at the logs says which rank is behind and where.
 */
#ifndef SHARC_RECORDER_H
#define SHARC_RECORDER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap_wire.h"

#define REC_SIZE 32 /* entries kept */
#define REC_DUMP 8  /* entries printed (the newest) */

enum { REC_RUNNING = 1, REC_DONE = 2, REC_FAILED = 3 };

/* Written by the thread running the collective, read at any time by the
 * thread that prints the recorder (SIGUSR1, or a transport's progress
 * thread reporting a failure): every field is atomic (relaxed: no cost on
 * the hot path), and `state` is cleared before the others change and set
 * after, so a reader skips an entry being rewritten. */
typedef struct {
  _Atomic uint64_t seq;
  _Atomic int coll, dtype, op, algo, root;
  _Atomic size_t count;
  _Atomic uint64_t t_start_ns, t_end_ns;
  _Atomic int state;      /* 0 (empty) or REC_* */
  _Atomic int waiting_on; /* peer this rank is blocked on, -1: none; a
                             failed call keeps the last one */
  _Atomic int status;     /* sharc_status_t once done/failed */
} rec_entry_t;

typedef struct {
  rec_entry_t e[REC_SIZE];
  /* whose recorder (rec_init): for the dump's header and peer names */
  uint64_t uid;
  int rank, nranks;
  const peer_info_t *peers;    /* [nranks] */
  const _Atomic uint64_t *seq; /* collectives the communicator ran */
} recorder_t;

/* Says whose recorder r is; the pointers must outlive it. */
void rec_init(recorder_t *r, uint64_t uid, int rank, int nranks,
              const peer_info_t *peers, const _Atomic uint64_t *seq);
/* A send/recv batch's (SCHED_P2P) root when sharc_all_to_allv made it:
 * the dump names it all_to_allv, not send_recv. */
#define REC_ROOT_A2AV (-2)

/* Starts the entry of collective *r->seq at t_ns on the coarse clock (0:
 * now) and returns it. */
rec_entry_t *rec_start(recorder_t *r, int coll, int dtype, int op, int algo,
                       int root, size_t count, uint64_t t_ns);
void rec_end(rec_entry_t *e, int status);
/* Prints the newest REC_DUMP entries of r at WARN level, oldest first,
 * with a reason. */
void rec_dump(const recorder_t *r, const char *why);
/* Registers r for SIGUSR1 dumps (installs the handler once, unless the
 * program has its own) / unregisters it before it is freed. */
void rec_register(const recorder_t *r);
void rec_unregister(const recorder_t *r);

#endif /* SHARC_RECORDER_H */

/*
 * cache.h - built schedules kept per communicator, keyed by the call's shape.
 */
#ifndef SHARC_CACHE_H
#define SHARC_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

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

/* A send/recv batch (SCHED_P2P) of at most this many transfers is cached
 * too, keyed by its transfers (direction, peer, bytes: a batch's schedule
 * depends on nothing else); larger ones are built per call. */
#define SCHED_KEY_P2P 4

typedef struct {
  sched_coll_t coll;
  int root;    /* broadcast root; 0 otherwise */
  int inplace; /* sched_args_t.inplace */
  size_t count;
  size_t esize; /* bytes per element */
  int np2p;     /* SCHED_P2P: the batch's transfers, in posting order */
  sched_p2p_t p2p[SCHED_KEY_P2P];
} sched_key_t;

typedef struct {
  sched_key_t key;
  sched_algo_t algo; /* the algorithm the schedule runs */
  sched_t sched;
  uint64_t used; /* last use (cache clock); 0: empty slot */
} sched_cache_slot_t;

/* A collective call's arguments as given: calls with equal ones have the
 * same key, so a loop of one call finds its slot without building it. */
typedef struct {
  int coll, dtype, root;
  size_t count;
  const void *sendbuf, *recvbuf;
} sched_call_sig_t;

typedef struct {
  sched_cache_slot_t slot[SCHED_CACHE_SLOTS];
  uint64_t clock;
  int last;              /* slot of the last hit or insert */
  uint64_t hits, misses; /* for tests and tracing */
  uint64_t puts;         /* slots filled so far */
  /* sched_cache_memo: the call that last found slot memo_slot, valid while
   * memo_puts is puts + 1 (no slot refilled since; 0: none) */
  sched_call_sig_t memo;
  int memo_slot;
  uint64_t memo_puts;
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
/* The slot the call with arguments sig found last (a hit, counted as
 * sched_cache_get counts it), if no slot was refilled since; else NULL. */
const sched_cache_slot_t *sched_cache_get_sig(sched_cache_t *c,
                                              const sched_call_sig_t *sig);
/* Remembers that the call with arguments sig has its schedule in slot e. */
void sched_cache_memo(sched_cache_t *c, const sched_call_sig_t *sig,
                      const sched_cache_slot_t *e);
const sched_cache_slot_t *sched_cache_put(sched_cache_t *c,
                                          const sched_key_t *key,
                                          sched_algo_t algo, sched_t *s);

#endif /* SHARC_CACHE_H */

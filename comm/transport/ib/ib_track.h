/*
 * ib_track.h - the order of completions across a pair's QPs and the
 * registration cache for user buffers (ib_track.c, pure).
 */
#ifndef SHARC_TRANSPORT_IB_TRACK_H
#define SHARC_TRANSPORT_IB_TRACK_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "ib_dev.h"

/* ---- order of completions across QPs (ib_track.c, pure) -------------------
 * A pair stripes its RDMA writes round-robin over nqp QPs: write k goes to
 * QP k % nqp. Each QP completes in order, QPs not with each other, so a
 * stream offset is complete only when every earlier write is. The tracker
 * turns per-QP completions into the complete prefix of the stream. The
 * sender uses one for its local completions, the receiver one for arrivals
 * (where `end` comes with the immediate). */
typedef struct {
  int nqp, window; /* window: writes tracked at once, multiple of nqp */
  uint64_t *end;   /* [window]: end offset of write k at k % window */
  uint64_t *count; /* [nqp]: writes completed per QP */
  uint64_t next;   /* first write not in the prefix */
  uint64_t prefix; /* stream bytes complete (end of write next - 1) */
} ib_order_t;

/* window = IB_QP_WRITES * nqp. SHARC_ERR_NO_MEM or OK. */
sharc_status_t ib_order_init(ib_order_t *o, int nqp);
void ib_order_free(ib_order_t *o);
/* Sender: records the end offset of write k before posting it. */
void ib_order_post(ib_order_t *o, uint64_t k, uint64_t end);
/* Sender: the next write posted on QP q completed. Returns the prefix. */
uint64_t ib_order_done(ib_order_t *o, int q);
/* Receiver: the next write on QP q arrived, ending at `end`. Returns the
 * prefix, or UINT64_MAX when the peer overran the window (protocol error). */
uint64_t ib_order_arrive(ib_order_t *o, int q, uint64_t end);
/* End offset recorded for write k (valid for k in [next, posted)). */
uint64_t ib_order_end(const ib_order_t *o, uint64_t k);

/* ---- registration cache (ib_track.c, pure) --------------------------------
 * Maps sharc_mem_alloc / sharc_mem_register regions (mem.h ids, never
 * reused) to memory registrations. A region freed by the user has a dead
 * id: its entry is dropped at the next miss (registering is the slow path
 * anyway), so freed memory stays pinned at most until then. Entries in use
 * by a send in flight are never evicted. Not thread safe: the caller locks.
 * The callbacks do the verbs work (tests pass fakes). */
typedef struct {
  uint64_t id;
  uintptr_t base;
  size_t len;
  void *handle; /* struct ibv_mr * */
  uint32_t lkey;
  int inuse;
  uint64_t last_use;
} ib_reg_entry_t;

typedef struct {
  /* 0 or an errno value. */
  int (*reg)(void *arg, void *base, size_t len, void **handle, uint32_t *lkey);
  void (*dereg)(void *arg, void *handle);
  /* 1 while region id still covers [base, base+len). */
  int (*alive)(void *arg, uint64_t id, uintptr_t base, size_t len);
  void *arg;
} ib_reg_ops_t;

typedef struct {
  ib_reg_ops_t ops;
  int cap, n;
  ib_reg_entry_t *e;
  uint64_t clock;
  uint64_t hits, misses, evictions;
} ib_regcache_t;

sharc_status_t ib_regcache_init(ib_regcache_t *c, int cap,
                                const ib_reg_ops_t *ops);
/* The entry covering region id (base, len: the whole region), registered on
 * a miss; its inuse count is raised (ib_regcache_put lowers it). NULL with
 * *err (an errno value; ENOSPC: every entry in use) when it cannot. */
ib_reg_entry_t *ib_regcache_get(ib_regcache_t *c, uint64_t id, void *base,
                                size_t len, int *err);
void ib_regcache_put(ib_regcache_t *c, ib_reg_entry_t *e);
/* Deregisters the idle entries whose region is gone (ops.alive says so);
 * a miss does it too. */
void ib_regcache_sweep(ib_regcache_t *c);
/* Deregisters everything (also entries in use: only at teardown). */
void ib_regcache_free(ib_regcache_t *c);

#endif /* SHARC_TRANSPORT_IB_TRACK_H */

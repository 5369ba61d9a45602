/*
 * call.h - one collective call as the executor and the GPU paths see it:
 * the call descriptor the API layer fills, the algorithm that runs it
 * (SHARC_ALGO, SHARC_TREE_MAX_BYTES or the cost model), its schedule's
 * cache key and arguments, and its schedule planned ahead.
 */
#ifndef SHARC_CALL_H
#define SHARC_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "schedule.h"
#include "state.h"

/* One collective call, as enqueued. */
typedef struct {
  sched_coll_t coll;
  const void *sendbuf;
  void *recvbuf;
  size_t count; /* NCCL meaning, see sched_args_t */
  sharc_dtype_t dtype;
  sharc_op_t op;
  int root;
  struct sharc_comm *comm;
  uint64_t ticket; /* position in comm's issue order */
  void *ipc;       /* devipc_ctx_t of a call on the CUDA IPC path (devipc.h,
                      set by dev_stage), else NULL */
  struct exec_hook *hook; /* around the rounds (exec.h): a pipelined staged
                             call (devstream.c), else NULL */
  const sched_t *sched;   /* the schedule to run, built at enqueue by
                             coll_plan (a pipelined staged call, whose copies
                             were planned on it), else NULL: chosen here */
} coll_call_t;

/* The algorithm for coll of `bytes` on comm: SHARC_ALGO, or
 * SHARC_TREE_MAX_BYTES, or the cost model (comm->cfg). */
sched_algo_t call_pick_algo(struct sharc_comm *comm, sched_coll_t coll,
                            size_t bytes);
/* 1 if call runs in place (NCCL's rule: sendbuf at this rank's block of
 * recvbuf, or the reverse for reduce-scatter; the same buffer otherwise). */
int call_inplace(const coll_call_t *call, size_t esize);
/* The cache key of call: everything its schedule depends on besides
 * comm's constants (cache.h). */
sched_key_t call_key(const coll_call_t *call, size_t esize);
/* The arguments sched_build takes for call with key. */
sched_args_t call_args(const coll_call_t *call, const sched_key_t *key);

/* Builds into *out (sched_free it) the schedule the executor would choose
 * for call: the staged device path plans its copies on it at enqueue and
 * hands it to the worker (coll_call_t.sched), so it is built once. Thread
 * safe: reads only comm's constants. */
sharc_status_t coll_plan(const coll_call_t *call, sched_t *out);

#endif /* SHARC_CALL_H */

/*
 * call.h - one collective call as the executor, the streams and the GPU
 * paths see it: the call descriptor the API layer fills, the interfaces of
 * a path that runs a call (call_path_t) and of a device queue a stream is
 * bound to (stream_binding_t), the algorithm that runs it (SHARC_ALGO,
 * SHARC_TREE_MAX_BYTES or the cost model), its schedule's cache key and
 * arguments, and its schedule planned ahead.
 */
#ifndef SHARC_CALL_H
#define SHARC_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "schedule.h"
#include "state.h"

struct exec_hook;
struct call_path;

/* One transfer of a send/recv batch (SCHED_P2P), as posted. */
typedef struct {
  int send; /* 1: sharc_send, 0: sharc_recv */
  int peer;
  sharc_dtype_t dtype;
  void *buf;
  size_t count; /* elements */
} call_p2p_op_t;

/* A batch of sends and receives on one communicator and stream: one call
 * alone, or those of a group; owned by its call (freed after it ran or was
 * skipped). */
typedef struct call_p2p {
  size_t n;
  int a2av; /* made by sharc_all_to_allv outside a group (the recorder's
               name for it; REC_ROOT_A2AV) */
  call_p2p_op_t ops[];
} call_p2p_t;

/* One collective call, as enqueued (fields ordered so that a stream item
 * stays small). */
typedef struct {
  sched_coll_t coll;
  sharc_dtype_t dtype;
  sharc_op_t op;
  int root;
  const void *sendbuf;
  void *recvbuf;
  size_t count; /* NCCL meaning, see sched_args_t; SCHED_P2P: bytes */
  struct sharc_comm *comm;
  call_p2p_t *p2p; /* SCHED_P2P: the batch; else NULL */
  uint64_t ticket; /* position in comm's issue order */
  /* The coarse clock when a blocking call was issued, which its recorder
   * entry starts at when it runs at once; 0: read the clock then. */
  uint64_t issued_ns;
  /* The path that runs the call in its turn instead of the host collective
   * on its buffers (a GPU path, comm/gpu/gpu.h), with its state; NULL: the
   * host collective. */
  const struct call_path *path;
  void *path_arg;
} coll_call_t;

/* The host collective of call, as the API layer runs it: on schedule sched
 * (NULL: the one the executor chooses for call) with hook around its rounds
 * (NULL: none), under the recorder entry of the call being run. A path
 * gets it to run its host steps. */
typedef sharc_status_t (*call_host_fn)(coll_call_t *call, const sched_t *sched,
                                       struct exec_hook *hook);

/* A path a call may take (coll_call_t.path): run in the call's turn, on
 * the thread that runs the call, in place of the host collective. */
typedef struct call_path {
  const char *name; /* as users name it (SHARC_CUDA_PATH=staged|ipc) */
  sharc_status_t (*run)(coll_call_t *call, call_host_fn host);
} call_path_t;

/* Runs, on the calling thread and in call's turn (waiting for it; the turn
 * is not passed), the host collective h on call's communicator, under a
 * recorder entry for call: for a path that must agree with its peers while
 * the call is enqueued (one-time setup). h NULL: only waits for the turn
 * (then every earlier call of the communicator has run or been passed);
 * h == call: SHARC_CHECK's agreement on call (check.h), the communicator
 * failed on a mismatch, for a path that moves data without the host. An
 * error fails the call (the communicator failed already); a failure of the
 * host collective breaks the communicator as in any collective. */
typedef sharc_status_t (*call_now_fn)(coll_call_t *call, coll_call_t *h);

/* A device queue a stream may be bound to (a CUDA stream, comm/gpu/gpu.h):
 * what the generic stream (api/stream.c) does with it around each call.
 * `dev` is the bound queue's state, `work` a call's state of work_size
 * bytes (pointer aligned) that the stream keeps with the call. */
typedef struct stream_binding {
  const char *name;
  size_t work_size;
  /* Enqueueing thread: prepares call (may rewrite its buffers and set its
   * path) and its work; the stream serialises these per dev, so the worker
   * sees calls in this order. *owed: 1 when the worker must still see the
   * call (before and after), also on an error; 0: the caller passes it.
   * now: host collectives in call's turn, from this thread. */
  sharc_status_t (*enqueue)(void *dev, coll_call_t *call, void *work, int *owed,
                            call_now_fn now);
  /* Worker, before running the call: waits until its input is ready; an
   * error means the call must be skipped. */
  sharc_status_t (*before)(void *work);
  /* Worker, after running or skipping the call, exactly once per owed
   * call, in order: lets the device queue go on. Returns an error met
   * during the call, else SHARC_OK. */
  sharc_status_t (*after)(void *work);
  /* Waits until the device queue has done everything queued so far. */
  sharc_status_t (*sync)(void *dev);
  /* Frees dev (after sync); NULL is accepted. */
  void (*close)(void *dev);
} stream_binding_t;

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
 * for call: a path that plans work on it at enqueue (the staged device
 * path's copies) hands it to call_host_fn, so it is built once. Thread
 * safe: reads only comm's constants. */
sharc_status_t coll_plan(const coll_call_t *call, sched_t *out);

#endif /* SHARC_CALL_H */

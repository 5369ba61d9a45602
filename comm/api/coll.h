/*
 * coll.h - collective entry points: argument checks, algorithm choice,
 * ordering across streams, execution.
 */
#ifndef SHARC_COLL_H
#define SHARC_COLL_H

#include "comm.h"
#include "schedule.h"

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
  void *ipc;       /* dev_stream_t of a call on the CUDA IPC path (devipc.h,
                      set by dev_stage), else NULL */
  struct exec_hook *hook; /* around the rounds (exec.h): a pipelined staged
                             call (devstream.c), else NULL */
  const sched_t *sched;   /* the schedule to run, built at enqueue by
                             coll_plan (a pipelined staged call, whose copies
                             were planned on it), else NULL: chosen here */
} coll_call_t;

/* Runs call now in the calling thread, after every earlier ticket of its
 * comm was served. */
sharc_status_t coll_execute(coll_call_t *call);
/* Takes the next ticket of comm (issue order = execution order). */
uint64_t coll_ticket(struct sharc_comm *comm);
/* Passes a ticket without running it (a stream skipping work after an
 * error). */
void coll_skip(coll_call_t *call);
/* Waits until every ticket issued on comm has been served. */
void coll_drain(struct sharc_comm *comm);

/* Builds into *out (sched_free it) the schedule the executor would choose
 * for call: the staged device path plans its copies on it at enqueue and
 * hands it to the worker (coll_call_t.sched), so it is built once. Thread
 * safe: reads only comm's constants. */
sharc_status_t coll_plan(const coll_call_t *call, sched_t *out);

/* Enqueues call on stream (stream.c); call->ticket already taken. */
sharc_status_t stream_enqueue(sharc_stream_t stream, const coll_call_t *call);

#endif /* SHARC_COLL_H */

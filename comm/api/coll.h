/*
 * coll.h - collective entry points: argument checks, algorithm choice,
 * ordering across streams, execution.
 */
#ifndef SHARC_COLL_H
#define SHARC_COLL_H

#include "call.h"

/* Runs call now in the calling thread, after every earlier ticket of its
 * comm was served. */
sharc_status_t coll_execute(coll_call_t *call);
/* Device memory reaches the executor only through a CUDA-bound stream
 * (gpu.h); on the host paths it would read it with memcpy. Unless stream
 * is bound: SHARC_ERR_INVALID_ARG naming the first of a (a_name), b
 * (b_name) that is device memory, from fn. */
sharc_status_t coll_check_host_memory(struct sharc_comm *comm, const char *fn,
                                      const void *a, const char *a_name,
                                      const void *b, const char *b_name,
                                      sharc_stream_t stream);
/* Issues a checked call: takes its ticket, then runs it now (stream NULL)
 * or enqueues it. A SCHED_P2P call's batch passes to the call. */
sharc_status_t coll_issue(coll_call_t *call, sharc_stream_t stream);
/* Takes the next ticket of comm (issue order = execution order). */
uint64_t coll_ticket(struct sharc_comm *comm);
/* Passes a ticket without running it (a stream skipping work after an
 * error). */
void coll_skip(coll_call_t *call);
/* Waits until every ticket issued on comm has been served. */
void coll_drain(struct sharc_comm *comm);

#endif /* SHARC_COLL_H */

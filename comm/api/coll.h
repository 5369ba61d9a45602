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

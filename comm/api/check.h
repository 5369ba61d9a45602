/*
 * check.h - SHARC_CHECK=1: before a collective moves any data, every rank
 * all-gathers a fixed-size signature of its call (sequence, collective,
 * count, type, root, reduction) and compares them, so ranks that called
 * different collectives or passed different arguments fail with
 * SHARC_ERR_MISMATCH naming the ranks and both calls, instead of hanging or
 * corrupting data. Off (the default) it costs one branch on comm->cfg.check.
 */
#ifndef SHARC_CHECK_H
#define SHARC_CHECK_H

#include "call.h"

/* Exchanges and compares the signature of call (fn: the public name, for
 * messages) on call->comm, through the executor, so waits stay bounded by
 * SHARC_TIMEOUT and a lost peer is reported as for any collective (the comm
 * is then already failed). On SHARC_ERR_MISMATCH the message (comm's last
 * error) groups the ranks by signature; the comm is not yet marked failed:
 * the caller ends its recorder entry first, then calls check_fail. Blocks;
 * called in ticket order like the collective itself. */
sharc_status_t check_call(const coll_call_t *call, const char *fn);

/* SHARC_CHECK for a batch of sends and receives (SCHED_P2P): with each of
 * its peers this rank exchanges the list of its transfers with that peer,
 * and the pair compares sends with receives in order (count and type).
 * SHARC_ERR_MISMATCH names both ranks and the first disagreement, worded
 * alike on both; a peer that runs a collective instead is named with it.
 * Blocks, bounded by SHARC_TIMEOUT; as check_call otherwise. */
sharc_status_t check_p2p(const coll_call_t *call);

/* After check_call returned st: on SHARC_ERR_MISMATCH fails the comm with
 * comm_fail_as(FAIL_LOCAL) (unusable, later calls fail fast with the same
 * status and message, its flight recorder printed, peers not told: each
 * reaches the same verdict); any other st needs nothing more. */
void check_fail(struct sharc_comm *comm, sharc_status_t st);

#endif /* SHARC_CHECK_H */

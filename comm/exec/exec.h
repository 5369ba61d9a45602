/*
 * exec.h - runs one rank's schedule over the transports (host memory).
 */
#ifndef SHARC_EXEC_H
#define SHARC_EXEC_H

#include "schedule.h"
#include "state.h"
#include "transport.h"

/* Executes s on comm with bufs[SCHED_BUF_SEND/RECV/TMP] (TMP must hold
 * s->tmp_count elements). op SHARC_AVG reduces as a sum (the caller divides).
 * Returns the first error; on a transport failure the comm is marked failed
 * and every peer is told. Blocks after a bounded number of polls: a few
 * with a CPU pause where every rank of the host has a core, then SHARC_SPIN
 * with sched_yield. s is only read: a cached schedule can be run by
 * several calls one after another. */
sharc_status_t exec_run(struct sharc_comm *comm, const sched_t *s,
                        void *const bufs[3], sharc_dtype_t dtype,
                        sharc_op_t op);
/* Calls around each round of one run: the staged device path
 * (comm/gpu/path_staged.c) waits there for the copies from the device that a
 * round needs, and lets the copies back start for what a finished round wrote
 * last. after runs only for rounds that succeeded. */
typedef struct exec_hook {
  void (*before)(struct exec_hook *h, const sched_t *s, size_t round);
  void (*after)(struct exec_hook *h, const sched_t *s, size_t round);
} exec_hook_t;

/* As exec_run, with now_ns a time_ns() the caller has just read (one
 * clock read fewer per call) and hook (may be NULL) around the rounds. */
sharc_status_t exec_run_at(struct sharc_comm *comm, const sched_t *s,
                           void *const bufs[3], sharc_dtype_t dtype,
                           sharc_op_t op, uint64_t now_ns, exec_hook_t *hook);

/* Cores the ranks of this host can share (read once): the CPUs this
 * process may run on, or the host's online CPUs where a launcher bound it
 * to one. */
int exec_host_cpus(void);

#endif /* SHARC_EXEC_H */

/*
 * schedule_sim.h - the simulator: every rank's schedule run in one process.
 */
#ifndef SHARC_SCHEDULE_SIM_H
#define SHARC_SCHEDULE_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* Runs coll on nranks with algo entirely in memory, with data of dtype/op
 * from a deterministic pattern, and compares every rank's result to a
 * reference computed in higher precision (exact for integers). Also detects
 * deadlock (no rank can progress) and FIFO mismatches (a receive whose
 * sender sends a different size). Returns SHARC_OK or an error with the
 * reason in err_last(). */
sharc_status_t sched_simulate(sched_algo_t algo, const sched_args_t *proto,
                              sharc_dtype_t dtype, sharc_op_t op);

/* Runs the nranks schedules scheds[0..nranks) (built for proto with rank
 * set per rank) exactly as sched_simulate does after building them: buffer
 * bounds, hazards, FIFO matching, deadlock, and the result check. name
 * labels error messages. */
sharc_status_t sched_simulate_given(const char *name, const sched_args_t *proto,
                                    sched_t *scheds, sharc_dtype_t dtype,
                                    sharc_op_t op, int check_bitwise_equal);

#endif /* SHARC_SCHEDULE_SIM_H */

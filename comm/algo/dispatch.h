/*
 * dispatch.h - the dispatcher: builds the schedule of an algorithm for a call,
 * through the algorithm files (algo.h), in a topology ring order if asked.
 */
#ifndef SHARC_DISPATCH_H
#define SHARC_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* Builds the schedule of algo for args into s (initialised by the caller:
 * sched_init); SHARC_ERR_UNSUPPORTED if algo does not implement
 * args->coll. */
sharc_status_t sched_build(sched_algo_t algo, const sched_args_t *args,
                           sched_t *s);
/* Whether algo implements coll. */
int sched_algo_supports(sched_algo_t algo, sched_coll_t coll);

#endif /* SHARC_DISPATCH_H */

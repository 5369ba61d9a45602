/*
 * coll_check.h - what the files of the coll_check program share (coll_data.h
 * holds its inputs and references).
 */
#ifndef SHARC_TESTS_COLL_CHECK_H
#define SHARC_TESTS_COLL_CHECK_H

#include "sharc.h"

/* coll_check.c: counts one check as passed or failed; failures print
 * (the first few per rank) with the expected and found values, or with the
 * status and sharc_comm_last_error(comm). */
void cc_check(int cond, const char *what, long expected, long got);
void cc_check_st(sharc_status_t st, sharc_comm_t comm, const char *what);

/* coll_split.c: the sharc_comm_split checks on comm (this rank of nranks).
 * Collective over comm. Returns 0, or -1 when a split failed and comm can
 * no longer be trusted. */
int split_check(sharc_comm_t comm, int rank, int nranks);

#endif /* SHARC_TESTS_COLL_CHECK_H */

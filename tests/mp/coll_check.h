/*
 * coll_check.h - what the files of the coll_check program share (coll_data.h
 * holds its inputs and references).
 */
#ifndef SHARC_TESTS_COLL_CHECK_H
#define SHARC_TESTS_COLL_CHECK_H

#include <stdint.h>

#include "coll_data.h"
#include "sharc.h"

/* coll_check.c: counts one check as passed or failed; failures print
 * (the first few per rank) with the expected and found values, or with the
 * status and sharc_comm_last_error(comm). */
void cc_check(int cond, const char *what, long expected, long got);
void cc_check_st(sharc_status_t st, sharc_comm_t comm, const char *what);

/* ---- what coll_check.c shares with coll_check_cuda.c ------------------- */

/* The checks --colls names (coll_name and coll_short in coll_check.c). */
enum {
  C_AG,
  C_RS,
  C_AR,
  C_BC,
  C_BAR,
  C_STREAM,
  C_MEM,
  C_SPLIT,
  C_CUDAQ,
  C_RED,
  C_GA,
  C_SC,
  C_A2A,
  C_N
};

/* Around every buffer. */
#define GUARD 64     /* bytes of 0xA5 on each side of every buffer */
#define MAX_PRINT 10 /* failures printed per rank */

typedef struct {
  sharc_comm_t comm;
  int rank, n;
  int quick, full, small, iters;
  uint64_t seed, jobno;
  unsigned types, colls; /* bit masks */
  long pass, fail;
  int printed, dead;      /* dead: a collective failed, the comm is unusable */
  int cuda;               /* --mem cuda */
  void *cuda_stream;      /* cudaStream_t of this rank (--mem cuda) */
  sharc_stream_t dstream; /* sharc stream bound to it */
} cc_state_t;

typedef struct {
  int coll, dt, op, root, inplace, mem;
  int dev;       /* --mem cuda: 1 device mirrors of rb and sb (drb, dsb) */
  size_t count;  /* elements, NCCL meaning (per rank for AG/RS) */
  data_spec_t d; /* dt, op, nranks and a fresh seed (job_prepare) */
  unsigned char *rb, *sb; /* payloads (guards around), sb NULL if in place */
  size_t rbytes, sbytes;
  void *send, *recv;
  int ok;
  unsigned char *drb, *dsb; /* device copies of rb/sb, guards included */
} job_t;

/* coll_check.c: the rank's state. */
extern cc_state_t X;

/* coll_check.c: one sweep case (job_t) from input to verdict. job_prepare
 * fills its buffers (0: failed, counted); job_launch issues it on s (NULL:
 * blocking); job_verify checks the results and guards; fail_job counts and
 * prints one mismatch; job_status_fail a failed call's status. */
int job_prepare(job_t *j);
sharc_status_t job_launch(job_t *j, sharc_stream_t s);
void job_verify(job_t *j);
void fail_job(job_t *j, const char *what, size_t idx, const char *es,
              const char *gs);
void job_status_fail(job_t *j, sharc_status_t st);

/* coll_check_cuda.c (--mem cuda; without CUDA: no device, run_cuda only
 * verifies): the number of devices (0 with why), the rank's device and
 * streams (0 on failure, counted), one case on device memory, and the
 * queue of many calls in flight on the CUDA stream. */
int cuda_probe(char *why, size_t n);
int cuda_setup(int ndev, int local_rank);
void cuda_teardown(void);
void run_cuda(job_t *j);
void run_cuda_queue(void);

/* coll_split.c: the sharc_comm_split checks on comm (this rank of nranks).
 * Collective over comm. Returns 0, or -1 when a split failed and comm can
 * no longer be trusted. */
int split_check(sharc_comm_t comm, int rank, int nranks);

#endif /* SHARC_TESTS_COLL_CHECK_H */

/*
 * bench.h - internal interfaces of sharc-bench, shared by its files:
 *   bench_main.c    options, tables (nccl-tests layout), JSON, main
 *   bench_run.c     the timing and validation loop (one for every backend)
 *   bench_data.c    input values and reference results per dtype and op
 *   bench_sharc.c   the sharc backend;  bench_mpi.c the MPI backend (Open
 *                   MPI or MPICH, whichever CMake found);
 *   bench_nccl.c    the NCCL backend (device memory only, dlopen)
 *   bench_ccl.cpp   the oneCCL backend (host memory, C++; built with
 *                   -DSHARC_BENCH_CCL_ROOT, else bench_ccl_none.c)
 *   bench_cuda.c    device buffers, the bench's cudaStream_t, the GPU's
 *                   device-to-device copy rate (--mem cuda)
 *   bench_limits.c  memcpy and loopback TCP throughput of this host
 */
#ifndef SHARC_BENCH_H
#define SHARC_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sharc.h"

/* nccl-tests' collectives (its names, all_to_all for its alltoall,
 * send_recv for its sendrecv); the order is the tables' order in
 * `sharc-bench all`. send_recv: every rank sends count elements to rank
 * (r+1)%n and receives count from rank (r-1+n)%n, both in one group. */
typedef enum {
  C_AG,
  C_RS,
  C_AR,
  C_BC,
  C_RD,
  C_GA,
  C_SC,
  C_AA,
  C_SR,
  C_N
} coll_t;
extern const char *const bench_coll_names[C_N];
/* Collectives that take a reduction op (-o), and a root (-r). */
static inline int bench_coll_reduces(coll_t c) {
  return c == C_RS || c == C_AR || c == C_RD;
}
static inline int bench_coll_rooted(coll_t c) {
  return c == C_BC || c == C_RD || c == C_GA || c == C_SC;
}
/* Results only the root receives (checked there alone). */
static inline int bench_coll_root_only(coll_t c) {
  return c == C_RD || c == C_GA;
}
/* 0 for collectives with no in-place form on any backend (send_recv: a
 * rank's send and receive buffers are distinct): their in-place column
 * prints N/A, and no in-place limit is printed for them. */
static inline int bench_coll_has_inplace(coll_t c) { return c != C_SR; }

/* send_recv's peers (--exchange): ring (nccl-tests' sendrecv; the default)
 * sends to rank + 1 and receives from rank - 1; pair exchanges with rank ^ 1
 * (OSU's osu_bibw between pairs: with an odd count the last rank sends to
 * itself). Every backend and the check read them here. */
extern int bench_sr_pair;
static inline int bench_sr_to(int rank, int n) {
  return bench_sr_pair ? ((rank ^ 1) < n ? rank ^ 1 : rank) : (rank + 1) % n;
}
static inline int bench_sr_from(int rank, int n) {
  return bench_sr_pair ? bench_sr_to(rank, n) : (rank - 1 + n) % n;
}

/* --timing: how one size is timed (bench_run.c says how each works). */
enum { BENCH_CALL = 0, BENCH_STREAM = 1 };
/* Most --passes a row keeps (each pass's time, per placement). */
#define BENCH_MAX_PASSES 16

/* Options, with nccl-tests' meanings and defaults. */
typedef struct {
  size_t minb, maxb, step_bytes, step_factor; /* -b -e -i -f */
  int iters, warmup, check;                   /* -n -w -c */
  int op;                                     /* -o: sharc_op_t, -1 all */
  int dtype;                                  /* -d: sharc_dtype_t, -1 all */
  int root;                                   /* -r: -1 every root */
  int average;                   /* -a: 0 rank0 1 avg 2 min 3 max */
  int blocking;                  /* -z */
  int reg;                       /* -R: 0 malloc 1 alloc 2 reg */
  int timeout;                   /* -T: seconds, 0 none */
  int limits;                    /* --limits 0|1 */
  int cuda;                      /* --mem cuda */
  int reg_asked;                 /* -R as given (--mem cuda runs -R 0) */
  int timing;                    /* --timing: BENCH_CALL or BENCH_STREAM */
  int cold;                      /* --cold 1: move the buffers every call */
  int passes;                    /* --passes: sweeps of every size */
  const char *json;              /* -J */
  const char *backend, *compare; /* --backend, --compare */
} opts_t;

/* One backend: the collectives, a way to wait for enqueued ones, a barrier.
 * coll() with blocking = 1 returns when the operation is complete. */
typedef struct backend {
  const char *name;
  int rank, nranks, nhosts, local_rank;
  void *ctx;
  int (*supports)(struct backend *b, coll_t c, sharc_dtype_t dt, int op);
  /* 0 when the backend has no in-place form of c (the in-place column
   * prints N/A); NULL: every collective has one. */
  int (*inplace)(struct backend *b, coll_t c);
  int (*coll)(struct backend *b, coll_t c, const void *s, void *r, size_t count,
              sharc_dtype_t dt, sharc_op_t op, int root, int blocking);
  /* Waits for every enqueued operation (no-op for blocking backends). */
  int (*sync)(struct backend *b);
  int (*barrier)(struct backend *b);
  /* Blocking collective on host memory whatever memory the data buffers
   * are in: the bench's own values (times, #wrong, preamble lines). */
  int (*host_coll)(struct backend *b, coll_t c, const void *s, void *r,
                   size_t count, sharc_dtype_t dt, sharc_op_t op, int root);
  const char *(*last_error)(struct backend *b);
  void (*finalize)(struct backend *b);
} backend_t;

/* One result row: a size of one collective, type, op and root, with both
 * placements (0 out-of-place, 1 in-place). wrong < 0: not checked (the
 * largest count of any pass otherwise); time_us < 0: the backend does not
 * run this placement (N/A). time_us, algbw and busbw are the best pass's
 * (its shortest time); busbw_med the median of the passes' busbw, spread
 * the slowest pass's time over the fastest's. Per pass: pass_us its time
 * (--timing call: the median call; stream: the average of -a), pass_min_us
 * the fastest call (call; < 0 with stream), pass_cpu_us the CPU time per
 * call of this process (user + sys, every thread), maximum over ranks;
 * min_us: the least pass_min_us; cpu_us: the best pass's pass_cpu_us (so
 * that it goes with time_us). */
typedef struct {
  coll_t coll;
  size_t size, count;
  sharc_dtype_t dtype;
  int op, root; /* op -1: "none" */
  double time_us[2], algbw[2], busbw[2];
  int64_t wrong[2];
  double busbw_med[2], spread[2], min_us[2], cpu_us[2];
  double alg_bytes; /* bytes algbw counts per call */
  int passes;       /* filled pass_* entries */
  double pass_us[2][BENCH_MAX_PASSES], pass_min_us[2][BENCH_MAX_PASSES],
      pass_cpu_us[2][BENCH_MAX_PASSES];
} row_t;

/* Host throughput (GB/s, 1e9 B/s); 0 when not measured. */
typedef struct {
  double copy1;    /* memcpy, one core, this rank alone */
  double copy_all; /* memcpy, every rank at once, sum over ranks */
  double tcp;      /* loopback TCP, one stream */
  double tcp2;     /* loopback TCP, one of two streams at once */
  /* --mem cuda: cudaMemcpyAsync device to device on one rank's GPU while
   * the other ranks wait (the GPU's copy rate, 1e9 B/s counted once per
   * byte copied); one_gpu: every rank on the same GPU of one host. */
  double d2d;
  int one_gpu;
  int cuda; /* measured for --mem cuda: the bounds are the GPU's */
} limits_t;

/* bench_sharc.c, bench_mpi.c, bench_nccl.c: 0 on success. */
int bench_sharc_init(backend_t *b, const opts_t *o);
int bench_mpi_available(void);
int bench_mpi_init(backend_t *b, int *argc, char ***argv);
/* First line of MPI_Get_library_version ("Open MPI v4.1.4, ...", "MPICH
 * Version: 4.0.2"), without quotes or tabs; "" before bench_mpi_init or
 * without MPI. */
const char *bench_mpi_library(void);
/* NCCL through dlopen: 0 when libnccl.so.2 and its symbols load, else -1
 * with the reason in why. */
int bench_nccl_load(char *why, size_t n);
/* A communicator over host's ranks (the unique id travels through
 * host->host_coll); host also serves as b's barrier and host_coll.
 * Exits 2 itself, on every rank, when NCCL refuses this rank layout. */
int bench_nccl_init(backend_t *b, const opts_t *o, backend_t *host);
/* "2.28.9" (empty before bench_nccl_load). */
const char *bench_nccl_version(void);
/* The optional collectives the loaded NCCL lacks ("ncclGather,
 * ncclScatter"); empty when it has them all or none is loaded. */
const char *bench_nccl_missing(void);
int bench_nccl_version_code(void);

/* bench_ccl.cpp (bench_ccl_none.c without oneCCL): 1 when built with
 * oneCCL. bench_ccl_init makes a oneCCL communicator over host's ranks
 * (its key-value store's address travels through host->host_coll; host
 * also carries the bench's own values); -1 with the reason on stderr. */
int bench_ccl_available(void);
int bench_ccl_init(backend_t *b, const opts_t *o, backend_t *host);
/* "2022.2.0" and the ATL transport ("mpi", "ofi"); empty before
 * bench_ccl_init or without oneCCL. */
const char *bench_ccl_version(void);
const char *bench_ccl_transport(void);

/* bench_cuda.c: the CUDA runtime for --mem cuda. Without CUDA in the build
 * the probe finds nothing and says so; the rest fails. One device and one
 * cudaStream_t per process. */
int bench_cuda_probe(char *why, size_t n); /* devices; 0: why says why */
/* Selects device local_rank % devices, creates the bench's stream. */
int bench_cuda_setup(int local_rank);
void *bench_cuda_stream(void); /* cudaStream_t; NULL before setup */
int bench_cuda_device(void);   /* the device selected, -1 before setup */
int bench_cuda_ndev(void);     /* devices the probe found */
/* "[0000:18:00] NVIDIA H100 80GB HBM3" of the selected device. */
void bench_cuda_describe(char *buf, size_t n);
int bench_cuda_alloc(void **p, size_t bytes);
void bench_cuda_free(void *p);
/* A copy (any direction) or a memset on the bench's stream, then waits
 * for the stream: ordered after every collective queued before it. */
int bench_cuda_copy(void *dst, const void *src, size_t bytes);
int bench_cuda_memset(void *p, int v, size_t bytes);
int bench_cuda_sync(void);          /* cudaStreamSynchronize */
double bench_cuda_d2d_rate(void);   /* GB/s, best of 5; 0 on failure */
const char *bench_cuda_error(void); /* the last failure, one line */
void bench_cuda_teardown(void);

/* bench_run.c */
typedef struct {
  void *sbuf, *rbuf; /* each o->maxb bytes; device memory with --mem cuda */
  void *hs, *hr;     /* --mem cuda: host mirrors (fill and check), else NULL */
  size_t bytes;
  int cuda;
} buffers_t;
int bench_buffers_alloc(buffers_t *bu, const opts_t *o);
void bench_buffers_free(buffers_t *bu, const opts_t *o);
/* Warm-up at the largest and smallest size, as nccl-tests before each
 * (type, op, root) sweep. */
int bench_warmup(backend_t *b, const opts_t *o, buffers_t *bu, coll_t c,
                 sharc_dtype_t dt, int op, int root);
/* Times and checks one size, both placements: pass number pass of row
 * (pass 0 also fills its shape and resets #wrong). */
int bench_one(backend_t *b, const opts_t *o, buffers_t *bu, row_t *row,
              int pass);
/* After the last pass: the best pass's time, algbw, busbw and CPU time per
 * call, the median busbw, the spread and the fastest call. */
void bench_passes_finish(backend_t *b, row_t *row);
/* What one read of the process CPU clock adds to a measured interval
 * (seconds, the median of empty intervals; subtracted from cpu_us). */
double bench_cpu_clock_cost(void);
double bench_bus_factor(coll_t c, int nranks);
/* Collective helpers built on the backend's own all-reduce. */
int bench_allreduce_f64(backend_t *b, double *v, int mode);
int bench_allgather_bytes(backend_t *b, const void *mine, void *all,
                          size_t bytes);
void bench_timeout_arm(int seconds);

/* bench_data.c: value of element i of rank r's input; the expected result;
 * typed access. Values are small integers chosen so that every reduction
 * is exact in the type for this rank count. */
void data_fill(void *buf, size_t n, size_t base, sharc_dtype_t dt, int op,
               coll_t c, int r, int nranks);
/* Wrong elements of rank's result (n elements, global index base + i);
 * per_rank: elements per rank's block (the param count). */
int64_t data_check(const void *buf, size_t n, size_t base, sharc_dtype_t dt,
                   int op, coll_t c, int root, int rank, int nranks,
                   size_t per_rank);
void data_corrupt(void *buf, sharc_dtype_t dt);
const char *data_type_name(sharc_dtype_t dt); /* nccl-tests names */
int data_parse_type(const char *s);           /* -1 all, -2 bad */
const char *data_op_name(int op);             /* "none" for -1 */
int data_parse_op(const char *s);             /* -1 all, -2 bad */
extern const sharc_dtype_t data_type_order[SHARC_DTYPE_COUNT];
extern const sharc_op_t data_op_order[SHARC_OP_COUNT];

/* bench_limits.c: measures this host's limits (collective over b); with
 * cuda also the GPU's device-to-device copy rate. */
void limits_measure(backend_t *b, limits_t *l, int cuda);
/* Upper bound for busbw of c (GB/s) from the limits, out-of-place
 * (inplace 0) or in-place; 0 when unknown. *what names the limit. */
double limits_busbw(const limits_t *l, coll_t c, int nranks, int nhosts,
                    int inplace, const char **what);

double bench_now(void);
double bench_cpu_now(void); /* CLOCK_PROCESS_CPUTIME_ID, seconds */

/* bench_opts.c: the command line into o and the collectives to run (a bit
 * per coll_t) into which; a bad flag prints why and exits 2 (--help: the
 * usage, exit 0). */
void bench_parse(int argc, char **argv, opts_t *o, unsigned *which);
/* 1 on the rank that prints (rank 0 by the launcher's variables). */
int bench_env_rank0(void);

#endif /* SHARC_BENCH_H */

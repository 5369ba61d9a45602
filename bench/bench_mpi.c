/*
 * bench_mpi.c - the MPI backend of sharc-bench (built when CMake finds MPI,
 * SHARC_BENCH_HAVE_MPI: Open MPI by default, MPICH with
 * -DMPI_C_COMPILER=mpicc.mpich). MPI has no streams: every call is
 * blocking, so "enqueue back to back, then synchronize" times the same
 * back-to-back calls and the synchronize is empty. Start under mpirun or
 * mpiexec; sharc's bootstrap reads Open MPI's OMPI_COMM_WORLD_* or Hydra's
 * PMI_RANK/PMI_SIZE, so --compare mpi runs both in the same processes.
 * sharc's in-place layouts map onto MPI_IN_PLACE for every collective
 * (reduce-scatter with a move after it; reduce, gather and scatter on the
 * root, where MPI allows it), so both columns compare like with like.
 * send_recv is MPI_Sendrecv to the next rank and from the previous one
 * (out of place only, as sharc's).
 */
#include "bench.h"

#ifndef SHARC_BENCH_HAVE_MPI

int bench_mpi_available(void) { return 0; }
const char *bench_mpi_library(void) { return ""; }
int bench_mpi_init(backend_t *b, int *argc, char ***argv) {
  (void)b, (void)argc, (void)argv;
  fprintf(stderr, "sharc-bench: built without MPI (CMake did not find it; "
                  "install libopenmpi-dev and rebuild)\n");
  return -1;
}

#else

#include <mpi.h>
#include <string.h>

static char mpi_err[MPI_MAX_ERROR_STRING + 64];
static char mpi_lib[MPI_MAX_LIBRARY_VERSION_STRING];

const char *bench_mpi_library(void) { return mpi_lib; }

/* The library's own name for itself, one line, safe inside JSON quotes. */
static void read_library(void) {
  int len = 0;
  MPI_Get_library_version(mpi_lib, &len);
  mpi_lib[strcspn(mpi_lib, "\n")] = '\0';
  for (char *p = mpi_lib; *p; p++)
    if (*p == '\t' || *p == '"' || *p == '\\' || (unsigned char)*p < 32)
      *p = ' ';
}

static MPI_Datatype mpi_type(sharc_dtype_t dt) {
  switch (dt) {
  case SHARC_F32:
    return MPI_FLOAT;
  case SHARC_F64:
    return MPI_DOUBLE;
  case SHARC_I8:
    return MPI_INT8_T;
  case SHARC_U8:
    return MPI_UINT8_T;
  case SHARC_I32:
    return MPI_INT32_T;
  case SHARC_U32:
    return MPI_UINT32_T;
  case SHARC_I64:
    return MPI_INT64_T;
  case SHARC_U64:
    return MPI_UINT64_T;
  default: /* half, bfloat16: moved as bytes, not reducible */
    return MPI_UINT16_T;
  }
}

static MPI_Op mpi_op(sharc_op_t op) {
  return op == SHARC_PROD  ? MPI_PROD
         : op == SHARC_MIN ? MPI_MIN
         : op == SHARC_MAX ? MPI_MAX
                           : MPI_SUM;
}

/* MPI has no avg and no 16-bit float reductions. */
static int mpi_supports(backend_t *b, coll_t c, sharc_dtype_t dt, int op) {
  (void)b;
  if (!bench_coll_reduces(c))
    return 1;
  return op != SHARC_AVG && dt != SHARC_F16 && dt != SHARC_BF16;
}

static int mpi_inplace(backend_t *b, coll_t c) {
  (void)b;
  return bench_coll_has_inplace(c);
}

static int mpi_coll(backend_t *b, coll_t c, const void *s, void *r,
                    size_t count, sharc_dtype_t dt, sharc_op_t op, int root,
                    int blocking) {
  (void)blocking;
  MPI_Datatype t = mpi_type(dt);
  int n = (int)count, rc;
  size_t ts = sharc_dtype_size(dt);
  if (count == 0)
    return 0;
  switch (c) {
  case C_AG: /* in place when s == r + rank * count */
    if ((const char *)s == (char *)r + (size_t)b->rank * count * ts)
      s = MPI_IN_PLACE;
    rc = MPI_Allgather(s, n, t, r, n, t, MPI_COMM_WORLD);
    break;
  case C_RS: /* sharc's in-place layout (r == s + rank * count) is not
                MPI's (result at the start of the buffer): move it after */
    if ((char *)r == (const char *)s + (size_t)b->rank * count * ts) {
      rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, (void *)s, n, t, mpi_op(op),
                                    MPI_COMM_WORLD);
      if (b->rank)
        memmove(r, s, count * ts);
    } else {
      rc = MPI_Reduce_scatter_block(s, r, n, t, mpi_op(op), MPI_COMM_WORLD);
    }
    break;
  case C_AR:
    rc = MPI_Allreduce(s == r ? MPI_IN_PLACE : s, r, n, t, mpi_op(op),
                       MPI_COMM_WORLD);
    break;
  case C_BC:
    if (b->rank == root && s != r)
      memcpy(r, s, count * ts);
    rc = MPI_Bcast(r, n, t, root, MPI_COMM_WORLD);
    break;
  case C_RD: /* MPI_IN_PLACE on the root only; elsewhere r is not read */
    rc = MPI_Reduce(s == r && b->rank == root ? MPI_IN_PLACE : s, r, n, t,
                    mpi_op(op), root, MPI_COMM_WORLD);
    break;
  case C_GA: /* in place on the root: its block is at r + root * count */
    if (b->rank == root &&
        (const char *)s == (char *)r + (size_t)root * count * ts)
      s = MPI_IN_PLACE;
    rc = MPI_Gather(s, n, t, r, n, t, root, MPI_COMM_WORLD);
    break;
  case C_SC: /* in place on the root: its block stays at s + root * count */
    if (b->rank == root &&
        (char *)r == (const char *)s + (size_t)root * count * ts)
      r = MPI_IN_PLACE;
    rc = MPI_Scatter(s, n, t, r, n, t, root, MPI_COMM_WORLD);
    break;
  case C_SR: /* --exchange's peers (bench_sr_to/from) */
    rc = MPI_Sendrecv(s, n, t, bench_sr_to(b->rank, b->nranks), 0, r, n, t,
                      bench_sr_from(b->rank, b->nranks), 0, MPI_COMM_WORLD,
                      MPI_STATUS_IGNORE);
    break;
  default: /* C_AA; in place when s == r (MPI 2.2) */
    rc = MPI_Alltoall(s == r ? MPI_IN_PLACE : s, n, t, r, n, t, MPI_COMM_WORLD);
    break;
  }
  if (rc != MPI_SUCCESS) {
    int len = 0;
    MPI_Error_string(rc, mpi_err, &len);
  }
  return rc == MPI_SUCCESS ? 0 : -1;
}

static int mpi_host_coll(backend_t *b, coll_t c, const void *s, void *r,
                         size_t count, sharc_dtype_t dt, sharc_op_t op,
                         int root) {
  return mpi_coll(b, c, s, r, count, dt, op, root, 1);
}

static int mpi_sync(backend_t *b) {
  (void)b;
  return 0;
}

static int mpi_barrier(backend_t *b) {
  (void)b;
  return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}

static const char *mpi_last_error(backend_t *b) {
  (void)b;
  return mpi_err;
}

static void mpi_finalize(backend_t *b) {
  (void)b;
  MPI_Finalize();
}

int bench_mpi_available(void) { return 1; }

int bench_mpi_init(backend_t *b, int *argc, char ***argv) {
  if (MPI_Init(argc, argv) != MPI_SUCCESS)
    return -1;
  read_library();
  MPI_Comm_rank(MPI_COMM_WORLD, &b->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b->nranks);
  /* hosts: distinct shared-memory domains */
  MPI_Comm node;
  int lrank, nh = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                      &node);
  MPI_Comm_rank(node, &lrank);
  int first = lrank == 0;
  MPI_Allreduce(&first, &nh, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Comm_free(&node);
  b->nhosts = nh;
  b->local_rank = lrank;
  b->name = "mpi";
  b->ctx = NULL;
  b->supports = mpi_supports;
  b->inplace = mpi_inplace;
  b->coll = mpi_coll;
  b->sync = mpi_sync;
  b->barrier = mpi_barrier;
  b->host_coll = mpi_host_coll;
  b->last_error = mpi_last_error;
  b->finalize = mpi_finalize;
  return 0;
}

#endif

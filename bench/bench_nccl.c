/*
 * bench_nccl.c - the NCCL backend of sharc-bench (--backend nccl, --compare
 * nccl; device memory only). libnccl.so.2 is loaded at run time (dlopen),
 * so the bench builds and links without NCCL; the types and enum values
 * below are NCCL's ABI (checked against nccl.h at compile time where the
 * header is there). The unique id travels over sharc (a host broadcast on
 * the sharc communicator of the same processes); barriers and the bench's
 * own values go through sharc too, so NCCL is timed on its collectives only.
 *
 * NCCL refuses several ranks on one GPU before 2.30 ("Duplicate GPU
 * detected"); from 2.30 NCCL_MULTI_RANK_GPU_ENABLE=1 allows it. Here: with
 * an older NCCL and ranks sharing a GPU every rank exits 2 with that said.
 *
 * ncclReduce is in every NCCL 2; ncclGather, ncclScatter and ncclAlltoAll
 * only in recent ones, so they are looked up alone: where the loaded
 * library lacks one, that collective is "not supported" (its table skips
 * nccl) and the preamble says which are missing. NCCL documents in-place
 * all-to-all as not supported: that column is N/A.
 *
 * send_recv is nccl-tests' sendrecv: ncclSend to the next rank and
 * ncclRecv from the previous one between ncclGroupStart and ncclGroupEnd.
 * The four are looked up alone too (NCCL 2.7 added send and receive):
 * without any of them send_recv is "not supported". Out of place only, as
 * on the other backends.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* NCCL's ABI: ncclResult_t, ncclDataType_t and ncclRedOp_t are C enums
 * (int); ncclUniqueId is a 128-byte struct passed by value. */
#define NCCL_ID_BYTES 128
typedef struct {
  char internal[NCCL_ID_BYTES];
} nccl_id_t;
typedef struct nccl_comm *nccl_comm_t;
enum { NC_INT8 = 0, NC_UINT8, NC_INT32, NC_UINT32, NC_INT64, NC_UINT64 };
enum { NC_FLOAT16 = 6, NC_FLOAT32, NC_FLOAT64, NC_BFLOAT16 };
enum { NC_SUM = 0, NC_PROD, NC_MAX, NC_MIN, NC_AVG };

#if defined(SHARC_HAVE_CUDA) && defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
_Static_assert(sizeof(ncclUniqueId) == sizeof(nccl_id_t), "ncclUniqueId");
#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(ncclInt8, NC_INT8) && SAME(ncclUint8, NC_UINT8) &&
                   SAME(ncclInt32, NC_INT32) && SAME(ncclUint32, NC_UINT32) &&
                   SAME(ncclInt64, NC_INT64) && SAME(ncclUint64, NC_UINT64) &&
                   SAME(ncclFloat16, NC_FLOAT16) &&
                   SAME(ncclFloat32, NC_FLOAT32) &&
                   SAME(ncclFloat64, NC_FLOAT64) &&
                   SAME(ncclBfloat16, NC_BFLOAT16),
               "ncclDataType_t values");
_Static_assert(SAME(ncclSum, NC_SUM) && SAME(ncclProd, NC_PROD) &&
                   SAME(ncclMax, NC_MAX) && SAME(ncclMin, NC_MIN) &&
                   SAME(ncclAvg, NC_AVG),
               "ncclRedOp_t values");
#undef SAME
_Static_assert(sizeof(ncclDataType_t) == sizeof(int) &&
                   sizeof(ncclRedOp_t) == sizeof(int) &&
                   sizeof(ncclResult_t) == sizeof(int),
               "NCCL enums are int-sized");
#endif
#endif

static struct {
  void *lib;
  int (*get_version)(int *);
  int (*get_unique_id)(nccl_id_t *);
  int (*comm_init_rank)(nccl_comm_t *, int, nccl_id_t, int);
  int (*all_gather)(const void *, void *, size_t, int, nccl_comm_t, void *);
  int (*reduce_scatter)(const void *, void *, size_t, int, int, nccl_comm_t,
                        void *);
  int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t,
                    void *);
  int (*broadcast)(const void *, void *, size_t, int, int, nccl_comm_t, void *);
  int (*reduce)(const void *, void *, size_t, int, int, int, nccl_comm_t,
                void *);
  /* optional (NULL when the library has none): gather and scatter take a
   * root, all-to-all none; counts per rank, as sharc's */
  int (*gather)(const void *, void *, size_t, int, int, nccl_comm_t, void *);
  int (*scatter)(const void *, void *, size_t, int, int, nccl_comm_t, void *);
  int (*all_to_all)(const void *, void *, size_t, int, nccl_comm_t, void *);
  /* optional: point to point (count, type, peer) and groups */
  int (*send)(const void *, size_t, int, int, nccl_comm_t, void *);
  int (*recv)(void *, size_t, int, int, nccl_comm_t, void *);
  int (*group_start)(void);
  int (*group_end)(void);
  int (*comm_destroy)(nccl_comm_t);
  const char *(*get_error_string)(int);
  int version;
  char vstr[32];
  char missing[128]; /* the optional ones it lacks: "ncclGather, ..." */
} N;

typedef struct {
  nccl_comm_t comm;
  backend_t *host; /* sharc over the same processes */
  char err[256];
} nccl_ctx_t;

const char *bench_nccl_version(void) { return N.vstr; }
const char *bench_nccl_missing(void) { return N.missing; }
int bench_nccl_version_code(void) { return N.version; }

int bench_nccl_load(char *why, size_t n) {
  if (N.lib)
    return 0;
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, n, "cannot load libnccl.so.2: %s", dlerror());
    return -1;
  }
  static const char *const names[] = {"ncclGetVersion",     "ncclGetUniqueId",
                                      "ncclCommInitRank",   "ncclAllGather",
                                      "ncclReduceScatter",  "ncclAllReduce",
                                      "ncclBroadcast",      "ncclCommDestroy",
                                      "ncclGetErrorString", "ncclReduce"};
  void *f[sizeof names / sizeof names[0]];
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    if (!(f[k] = dlsym(h, names[k]))) {
      snprintf(why, n, "libnccl.so.2 has no %s", names[k]);
      dlclose(h);
      return -1;
    }
  /* POSIX: a void * from dlsym converts to a function pointer */
  *(void **)&N.get_version = f[0];
  *(void **)&N.get_unique_id = f[1];
  *(void **)&N.comm_init_rank = f[2];
  *(void **)&N.all_gather = f[3];
  *(void **)&N.reduce_scatter = f[4];
  *(void **)&N.all_reduce = f[5];
  *(void **)&N.broadcast = f[6];
  *(void **)&N.comm_destroy = f[7];
  *(void **)&N.get_error_string = f[8];
  *(void **)&N.reduce = f[9];
  static const char *const optional[] = {
      "ncclGather", "ncclScatter",    "ncclAlltoAll", "ncclSend",
      "ncclRecv",   "ncclGroupStart", "ncclGroupEnd"};
  enum { NOPT = sizeof optional / sizeof optional[0] };
  void *g[NOPT];
  N.missing[0] = '\0';
  for (size_t k = 0; k < NOPT; k++)
    if (!(g[k] = dlsym(h, optional[k])))
      snprintf(N.missing + strlen(N.missing),
               sizeof N.missing - strlen(N.missing), "%s%s",
               *N.missing ? ", " : "", optional[k]);
  *(void **)&N.gather = g[0];
  *(void **)&N.scatter = g[1];
  *(void **)&N.all_to_all = g[2];
  *(void **)&N.send = g[3];
  *(void **)&N.recv = g[4];
  *(void **)&N.group_start = g[5];
  *(void **)&N.group_end = g[6];
  int v = 0;
  if (N.get_version(&v) != 0 || v <= 0) {
    snprintf(why, n, "ncclGetVersion failed");
    dlclose(h);
    return -1;
  }
  N.lib = h;
  N.version = v;
  /* NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after */
  int big = v >= 10000;
  snprintf(N.vstr, sizeof N.vstr, "%d.%d.%d", big ? v / 10000 : v / 1000,
           big ? v % 10000 / 100 : v % 1000 / 100, v % 100);
  return 0;
}

static int nc_type(sharc_dtype_t dt) {
  static const int t[SHARC_DTYPE_COUNT] = {
      [SHARC_F32] = NC_FLOAT32, [SHARC_F64] = NC_FLOAT64,
      [SHARC_F16] = NC_FLOAT16, [SHARC_BF16] = NC_BFLOAT16,
      [SHARC_I8] = NC_INT8,     [SHARC_U8] = NC_UINT8,
      [SHARC_I32] = NC_INT32,   [SHARC_U32] = NC_UINT32,
      [SHARC_I64] = NC_INT64,   [SHARC_U64] = NC_UINT64};
  return t[dt];
}

static int nc_op(sharc_op_t op) {
  return op == SHARC_PROD  ? NC_PROD
         : op == SHARC_MIN ? NC_MIN
         : op == SHARC_MAX ? NC_MAX
         : op == SHARC_AVG ? NC_AVG
                           : NC_SUM;
}

static int nc_supports(backend_t *b, coll_t c, sharc_dtype_t dt, int op) {
  (void)b, (void)dt, (void)op;
  return c == C_GA   ? N.gather != NULL
         : c == C_SC ? N.scatter != NULL
         : c == C_AA ? N.all_to_all != NULL
         : c == C_SR ? N.send && N.recv && N.group_start && N.group_end
                     : 1;
}

static int nc_inplace(backend_t *b, coll_t c) {
  (void)b;
  return c != C_AA && bench_coll_has_inplace(c);
}

static int nc_result(nccl_ctx_t *x, const char *fn, int rc) {
  if (rc != 0)
    snprintf(x->err, sizeof x->err, "%s: %s (ncclResult_t %d)", fn,
             N.get_error_string(rc), rc);
  return rc;
}

static int nc_sync(backend_t *b) {
  nccl_ctx_t *x = b->ctx;
  if (bench_cuda_sync()) {
    snprintf(x->err, sizeof x->err, "%s", bench_cuda_error());
    return -1;
  }
  return 0;
}

/* nccl-tests' sendrecv: to the next rank, from the previous, one group
 * (ncclGroupEnd is called whatever the calls inside returned). */
static int nc_send_recv(backend_t *b, const void *s, void *r, size_t count,
                        int t, void *cs) {
  nccl_ctx_t *x = b->ctx;
  int next = bench_sr_to(b->rank, b->nranks);
  int prev = bench_sr_from(b->rank, b->nranks);
  int rc = nc_result(x, "ncclGroupStart", N.group_start());
  if (rc)
    return rc;
  int sr = nc_result(x, "ncclSend", N.send(s, count, t, next, x->comm, cs));
  int rr =
      sr ? sr
         : nc_result(x, "ncclRecv", N.recv(r, count, t, prev, x->comm, cs));
  int er = N.group_end();
  if (sr || rr)
    return sr ? sr : rr;
  return nc_result(x, "ncclGroupEnd", er);
}

/* sharc's in-place layouts are NCCL's, so pointers pass through as they
 * are. -z 1: the call, then a wait for the stream (nccl-tests' blocking). */
static int nc_coll(backend_t *b, coll_t c, const void *s, void *r, size_t count,
                   sharc_dtype_t dt, sharc_op_t op, int root, int blocking) {
  nccl_ctx_t *x = b->ctx;
  void *cs = bench_cuda_stream();
  int t = nc_type(dt), rc;
  switch (c) {
  case C_AG:
    rc = nc_result(x, "ncclAllGather",
                   N.all_gather(s, r, count, t, x->comm, cs));
    break;
  case C_RS:
    rc = nc_result(x, "ncclReduceScatter",
                   N.reduce_scatter(s, r, count, t, nc_op(op), x->comm, cs));
    break;
  case C_AR:
    rc = nc_result(x, "ncclAllReduce",
                   N.all_reduce(s, r, count, t, nc_op(op), x->comm, cs));
    break;
  case C_BC:
    rc = nc_result(x, "ncclBroadcast",
                   N.broadcast(s, r, count, t, root, x->comm, cs));
    break;
  case C_RD:
    rc = nc_result(x, "ncclReduce",
                   N.reduce(s, r, count, t, nc_op(op), root, x->comm, cs));
    break;
  case C_GA:
    rc =
        nc_result(x, "ncclGather", N.gather(s, r, count, t, root, x->comm, cs));
    break;
  case C_SC:
    rc = nc_result(x, "ncclScatter",
                   N.scatter(s, r, count, t, root, x->comm, cs));
    break;
  case C_SR:
    rc = nc_send_recv(b, s, r, count, t, cs);
    break;
  default:
    rc =
        nc_result(x, "ncclAlltoAll", N.all_to_all(s, r, count, t, x->comm, cs));
    break;
  }
  return rc || !blocking ? rc : nc_sync(b);
}

static int nc_barrier(backend_t *b) {
  backend_t *h = ((nccl_ctx_t *)b->ctx)->host;
  return h->barrier(h);
}

static int nc_host_coll(backend_t *b, coll_t c, const void *s, void *r,
                        size_t count, sharc_dtype_t dt, sharc_op_t op,
                        int root) {
  backend_t *h = ((nccl_ctx_t *)b->ctx)->host;
  return h->host_coll(h, c, s, r, count, dt, op, root);
}

static const char *nc_last_error(backend_t *b) {
  return ((nccl_ctx_t *)b->ctx)->err;
}

static void nc_finalize(backend_t *b) {
  nccl_ctx_t *x = b->ctx;
  if (x->comm)
    N.comm_destroy(x->comm);
  free(x);
  b->ctx = NULL;
}

int bench_nccl_init(backend_t *b, const opts_t *o, backend_t *host) {
  char why[256];
  if (!o->cuda) {
    fprintf(stderr, "sharc-bench: --backend/--compare nccl measures device "
                    "memory: pass --mem cuda (needs a GPU)\n");
    return -1;
  }
  if (bench_nccl_load(why, sizeof why)) {
    fprintf(stderr, "sharc-bench: %s\n", why);
    return -1;
  }
  /* Ranks sharing a GPU, decided alike on every rank: the most ranks of a
   * host over its devices in use (ranks go to local rank % devices). */
  int local = 0, ndev = bench_cuda_ndev();
  double lr = host->local_rank + 1;
  if (bench_allreduce_f64(host, &lr, 3)) /* max: the most ranks per host */
    return -1;
  local = (int)lr;
  int per_gpu = ndev > 0 ? (local + ndev - 1) / ndev : local;
  if (per_gpu > 1 && N.version < 23000) {
    if (host->rank == 0)
      fprintf(stderr,
              "sharc-bench: NCCL %s refuses several ranks on one GPU (%d "
              "ranks share a GPU here: %d local ranks, %d device(s)); NCCL "
              "allows it from 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1. Run "
              "--backend nccl with one rank per GPU (sharcrun -n %d), or "
              "install NCCL >= 2.30\n",
              N.vstr, per_gpu, local, ndev, ndev);
    exit(2);
  }
  if (per_gpu > 1)
    setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  nccl_ctx_t *x = calloc(1, sizeof *x);
  if (!x)
    return -1;
  x->host = host;
  nccl_id_t id;
  memset(&id, 0, sizeof id);
  int rc = 0;
  if (host->rank == 0)
    rc = nc_result(x, "ncclGetUniqueId", N.get_unique_id(&id));
  /* rank 0's status first, so that no rank waits in ncclCommInitRank for a
   * rank 0 that failed */
  double ok = rc == 0;
  if (bench_allreduce_f64(host, &ok, 0) || ok == 0 ||
      host->host_coll(host, C_BC, &id, &id, sizeof id, SHARC_U8, SHARC_SUM,
                      0)) {
    fprintf(stderr, "sharc-bench: rank %d: NCCL unique id: %s\n", host->rank,
            rc        ? x->err
            : ok == 0 ? "ncclGetUniqueId failed on rank 0"
                      : "the sharc broadcast failed");
    free(x);
    return -1;
  }
  rc = nc_result(x, "ncclCommInitRank",
                 N.comm_init_rank(&x->comm, host->nranks, id, host->rank));
  if (rc) {
    fprintf(stderr, "sharc-bench: rank %d: %s\n", host->rank, x->err);
    free(x);
    return -1;
  }
  b->name = "nccl";
  b->rank = host->rank;
  b->nranks = host->nranks;
  b->nhosts = host->nhosts;
  b->local_rank = host->local_rank;
  b->ctx = x;
  b->supports = nc_supports;
  b->inplace = nc_inplace;
  b->coll = nc_coll;
  b->sync = nc_sync;
  b->barrier = nc_barrier;
  b->host_coll = nc_host_coll;
  b->last_error = nc_last_error;
  b->finalize = nc_finalize;
  return 0;
}

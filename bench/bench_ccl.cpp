/*
 * bench_ccl.cpp - the oneCCL backend of sharc-bench (--backend ccl,
 * --compare ccl; host memory). Built only when CMake is given oneCCL
 * (-DSHARC_BENCH_CCL_ROOT=<prefix with include/oneapi/ccl.hpp and
 * lib/libccl.so>, e.g. the venv of bench/peers/install_peers.sh);
 * bench_ccl_none.c stands in otherwise. C++ because oneCCL's API is: the
 * rest of the bench stays C and calls the extern "C" functions of bench.h.
 *
 * Bootstrap: rank 0 opens oneCCL's key-value store (ccl::create_main_kvs)
 * and its address (256 bytes) travels over sharc, a broadcast on the sharc
 * communicator of the same processes, as NCCL's unique id does in
 * bench_nccl.c; every rank then joins with ccl::create_kvs and
 * ccl::create_communicator. oneCCL moves the data over its ATL transport:
 * ofi (libfabric) by default, mpi where libfabric is missing, as in the
 * PyPI wheels whose libfabric>=2.6 is not on the index. Unless
 * CCL_ATL_TRANSPORT is set, this file sets it to mpi, which needs Intel
 * MPI's libmpi.so.12 in the library path and a launch under its mpirun
 * (oneCCL initialises MPI itself; sharc's bootstrap reads Hydra's
 * PMI_RANK/PMI_SIZE); the preamble says which transport ran. Hence a
 * build with oneCCL links Intel MPI or no MPI (bench/peers/build_peers.sh
 * adds it to the Intel MPI build): another MPI's libmpi beside the
 * libmpi.so.12 oneCCL loads would clash.
 *
 * Collectives: all_gather (ccl::allgather), reduce_scatter, all_reduce and
 * broadcast (the send/receive form), each waited for before the call
 * returns (oneCCL on host memory has no stream the bench could synchronize
 * later: -z 0 and -z 1 time the same). The others are "not supported by
 * this backend" (their tables show sharc alone). Types: every integer and
 * float type of sharc, but half and bfloat16 only where nothing is reduced
 * (oneCCL's CPU reductions of them depend on the CPU's instruction set:
 * not tried here); ops sum, prod, min, max (avg is not run). In place: sharc's
 * layouts (all-gather: the rank's block already at recv + rank * count;
 * reduce-scatter: the result at send + rank * count; all-reduce and broadcast:
 * send == recv) are passed to oneCCL as they are, and checked like every other
 * backend's.
 *
 * Barriers are oneCCL's own (ccl::barrier), as the MPI backend's are
 * MPI_Barrier; the bench's own values (times, #wrong, preamble lines) go
 * over sharc.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include <oneapi/ccl.hpp>

extern "C" {
#include "bench.h"
}

namespace {

struct ccl_ctx {
  backend_t *host; /* sharc over the same processes */
  ccl::shared_ptr_class<ccl::kvs> kvs;
  ccl::communicator *comm;
  char err[512];
};

char ccl_version[64];
char ccl_transport[64];

ccl_ctx *ctx(backend_t *b) { return static_cast<ccl_ctx *>(b->ctx); }

/* sharc's type -> oneCCL's; 0 when oneCCL has none. */
int ccl_type(sharc_dtype_t dt, ccl::datatype *t) {
  switch (dt) {
  case SHARC_I8:
    *t = ccl::datatype::int8;
    return 1;
  case SHARC_U8:
    *t = ccl::datatype::uint8;
    return 1;
  case SHARC_I32:
    *t = ccl::datatype::int32;
    return 1;
  case SHARC_U32:
    *t = ccl::datatype::uint32;
    return 1;
  case SHARC_I64:
    *t = ccl::datatype::int64;
    return 1;
  case SHARC_U64:
    *t = ccl::datatype::uint64;
    return 1;
  case SHARC_F16:
    *t = ccl::datatype::float16;
    return 1;
  case SHARC_BF16:
    *t = ccl::datatype::bfloat16;
    return 1;
  case SHARC_F32:
    *t = ccl::datatype::float32;
    return 1;
  case SHARC_F64:
    *t = ccl::datatype::float64;
    return 1;
  default:
    return 0;
  }
}

ccl::reduction ccl_op(sharc_op_t op) {
  return op == SHARC_PROD  ? ccl::reduction::prod
         : op == SHARC_MIN ? ccl::reduction::min
         : op == SHARC_MAX ? ccl::reduction::max
                           : ccl::reduction::sum;
}

int cc_supports(backend_t *b, coll_t c, sharc_dtype_t dt, int op) {
  (void)b;
  ccl::datatype t;
  if (c != C_AG && c != C_RS && c != C_AR && c != C_BC)
    return 0;
  if (!ccl_type(dt, &t))
    return 0;
  if (!bench_coll_reduces(c))
    return 1;
  return op != SHARC_AVG && dt != SHARC_F16 && dt != SHARC_BF16;
}

int cc_inplace(backend_t *b, coll_t c) {
  (void)b;
  return bench_coll_has_inplace(c);
}

/* Runs f (which returns a ccl::event) and waits for it; a oneCCL exception
 * becomes -1 with its text in the context. */
template <typename F> int run(backend_t *b, const char *what, F f) {
  try {
    ccl::event ev = f();
    ev.wait();
    return 0;
  } catch (const std::exception &e) {
    snprintf(ctx(b)->err, sizeof ctx(b)->err, "%s: %s", what, e.what());
  } catch (...) {
    snprintf(ctx(b)->err, sizeof ctx(b)->err, "%s: unknown exception", what);
  }
  return -1;
}

int cc_coll(backend_t *b, coll_t c, const void *s, void *r, size_t count,
            sharc_dtype_t dt, sharc_op_t op, int root, int blocking) {
  (void)blocking; /* every call is waited for (see the top) */
  ccl_ctx *x = ctx(b);
  ccl::communicator &comm = *x->comm;
  ccl::datatype t;
  if (count == 0)
    return 0;
  if (!ccl_type(dt, &t)) {
    snprintf(x->err, sizeof x->err, "type %s not supported by oneCCL",
             data_type_name(dt));
    return -1;
  }
  switch (c) {
  case C_AG:
    return run(b, "ccl::allgather",
               [&] { return ccl::allgather(s, r, count, t, comm); });
  case C_RS:
    return run(b, "ccl::reduce_scatter", [&] {
      return ccl::reduce_scatter(s, r, count, t, ccl_op(op), comm);
    });
  case C_AR:
    return run(b, "ccl::allreduce", [&] {
      return ccl::allreduce(s, r, count, t, ccl_op(op), comm);
    });
  case C_BC:
    return run(b, "ccl::broadcast", [&] {
      return ccl::broadcast(const_cast<void *>(s), r, count, t, root, comm);
    });
  default:
    snprintf(x->err, sizeof x->err, "%s: not supported by this backend",
             bench_coll_names[c]);
    return -1;
  }
}

int cc_sync(backend_t *b) {
  (void)b;
  return 0;
}

int cc_barrier(backend_t *b) {
  return run(b, "ccl::barrier", [&] { return ccl::barrier(*ctx(b)->comm); });
}

int cc_host_coll(backend_t *b, coll_t c, const void *s, void *r, size_t count,
                 sharc_dtype_t dt, sharc_op_t op, int root) {
  backend_t *h = ctx(b)->host;
  return h->host_coll(h, c, s, r, count, dt, op, root);
}

const char *cc_last_error(backend_t *b) { return ctx(b)->err; }

void cc_finalize(backend_t *b) {
  ccl_ctx *x = ctx(b);
  if (!x)
    return;
  delete x->comm;
  x->kvs.reset();
  delete x;
  b->ctx = nullptr;
}

/* The rank 0's address broadcast over sharc; 0 on success. */
int share_address(ccl_ctx *x, ccl::kvs::address_type *addr) {
  backend_t *h = x->host;
  double ok = 1;
  if (h->rank == 0) {
    try {
      x->kvs = ccl::create_main_kvs();
      *addr = x->kvs->get_address();
    } catch (const std::exception &e) {
      snprintf(x->err, sizeof x->err, "ccl::create_main_kvs: %s", e.what());
      ok = 0;
    }
  }
  /* rank 0's status first, so that no rank waits for a store that rank 0
   * failed to open */
  if (bench_allreduce_f64(h, &ok, 0) || ok == 0 ||
      h->host_coll(h, C_BC, addr->data(), addr->data(), addr->size(), SHARC_U8,
                   SHARC_SUM, 0)) {
    if (!x->err[0])
      snprintf(x->err, sizeof x->err, "%s",
               ok == 0 ? "ccl::create_main_kvs failed on rank 0"
                       : "the sharc broadcast of its address failed");
    return -1;
  }
  if (h->rank == 0)
    return 0;
  try {
    x->kvs = ccl::create_kvs(*addr);
  } catch (const std::exception &e) {
    snprintf(x->err, sizeof x->err, "ccl::create_kvs: %s", e.what());
    return -1;
  }
  return 0;
}

} // namespace

extern "C" int bench_ccl_available(void) { return 1; }

extern "C" const char *bench_ccl_version(void) { return ccl_version; }

extern "C" const char *bench_ccl_transport(void) { return ccl_transport; }

extern "C" int bench_ccl_init(backend_t *b, const opts_t *o, backend_t *host) {
  if (o->cuda) {
    fprintf(stderr, "sharc-bench: --backend/--compare ccl measures host "
                    "memory (oneCCL on the CPU): leave --mem at host\n");
    return -1;
  }
  setenv("CCL_ATL_TRANSPORT", "mpi", 0); /* see the top of this file */
  snprintf(ccl_transport, sizeof ccl_transport, "%s",
           getenv("CCL_ATL_TRANSPORT"));
  ccl_ctx *x = new ccl_ctx();
  x->host = host;
  int rc = 0;
  try {
    ccl::init();
    ccl::library_version v = ccl::get_library_version();
    snprintf(ccl_version, sizeof ccl_version, "%u.%u.%u", v.major, v.minor,
             v.update);
  } catch (const std::exception &e) {
    snprintf(x->err, sizeof x->err, "ccl::init: %s", e.what());
    rc = -1;
  }
  ccl::kvs::address_type addr{};
  if (rc == 0)
    rc = share_address(x, &addr);
  if (rc == 0) {
    try {
      x->comm = new ccl::communicator(
          ccl::create_communicator(host->nranks, host->rank, x->kvs));
    } catch (const std::exception &e) {
      snprintf(x->err, sizeof x->err, "ccl::create_communicator: %s", e.what());
      rc = -1;
    }
  }
  if (rc) {
    fprintf(stderr,
            "sharc-bench: rank %d: oneCCL: %s (CCL_ATL_TRANSPORT=%s: mpi "
            "needs Intel MPI's libmpi.so.12 in LD_LIBRARY_PATH and its "
            "mpirun; ofi needs libfabric)\n",
            host->rank, x->err, ccl_transport);
    delete x->comm;
    delete x;
    return -1;
  }
  b->name = "ccl";
  b->rank = host->rank;
  b->nranks = host->nranks;
  b->nhosts = host->nhosts;
  b->local_rank = host->local_rank;
  b->ctx = x;
  b->supports = cc_supports;
  b->inplace = cc_inplace;
  b->coll = cc_coll;
  b->sync = cc_sync;
  b->barrier = cc_barrier;
  b->host_coll = cc_host_coll;
  b->last_error = cc_last_error;
  b->finalize = cc_finalize;
  return 0;
}

/*
 * ib_none.c - the ib transport in a build without libibverbs (rdma-core):
 * a vtable whose setup and connect refuse with SHARC_ERR_UNSUPPORTED and
 * say what to install, so SHARC_TRANSPORT=ib fails at init with a reason
 * instead of a link error. ib.c is the real transport.
 */
#ifndef SHARC_HAVE_IBVERBS

#include "ib.h"
#include "state.h"
#include "transport.h"

static sharc_status_t ib_missing(struct sharc_comm *comm) {
  return comm_error(comm, SHARC_ERR_UNSUPPORTED,
                    "ib: this sharc was built without libibverbs (rdma-core), "
                    "so SHARC_TRANSPORT=ib / SHARC_NET=ib cannot work; "
                    "install libibverbs-dev and rebuild (cmake "
                    "-DSHARC_WITH_IB=ON)");
}

static sharc_status_t ib_setup(struct sharc_comm *comm) {
  return ib_missing(comm);
}

static sharc_status_t ib_connect(struct sharc_comm *comm, int peer, int chan,
                                 int is_send, uint64_t deadline_ns,
                                 transport_conn_t **conn) {
  return ib_missing(comm);
}

static size_t ib_no_space(transport_conn_t *c, void **ptr) { return 0; }
static void ib_no_commit(transport_conn_t *c, size_t bytes) {}
static size_t ib_no_avail(transport_conn_t *c, const void **ptr) { return 0; }
static sharc_status_t ib_no_check(transport_conn_t *c) {
  return SHARC_ERR_UNSUPPORTED;
}
static void ib_no_abort(struct sharc_comm *comm, int failed_rank,
                        sharc_status_t st) {}
static void ib_no_teardown(struct sharc_comm *comm, uint64_t deadline_ns) {}

sharc_status_t ib_stats(struct sharc_comm *comm, ib_stats_t *out) {
  return SHARC_ERR_UNSUPPORTED;
}

const transport_t transport_ib = {
    .name = "ib",
    .id = TRANSPORT_IB,
    .scope = TRANSPORT_NET,
    .setup = ib_setup,
    .connect = ib_connect,
    .send_space = ib_no_space,
    .send_commit = ib_no_commit,
    .recv_avail = ib_no_avail,
    .recv_release = ib_no_commit,
    .check = ib_no_check,
    .notify_abort = ib_no_abort,
    .teardown = ib_no_teardown,
};

#endif /* !SHARC_HAVE_IBVERBS */

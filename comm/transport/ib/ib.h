/*
 * ib.h - internals of the InfiniBand / RoCE transport, split along its seams
 * so that everything without verbs runs in unit tests on any machine:
 *
 *   ib_dev.c    which device, port and GID a rank uses: SHARC_IB_HCA lists
 *               (NCCL's syntax), nearness from topo, the GID table (pure),
 *               then opening the device (verbs)
 *   ib_track.c  the order of completions across several QPs and the
 *               registration cache for user buffers (pure)
 *   ib_qp.c     a pair's verbs resources and QP state machine (verbs)
 *   ib_tx.c     the sending side: RDMA writes, credits, control words, a
 *               pair's failure (verbs)
 *   ib_cq.c     completions and async events, for the progress thread (verbs)
 *   ib.c        the data path, the progress thread and the vtable (verbs)
 *   ib_none.c   without libibverbs: a vtable that refuses with a reason
 *
 * QP information, goodbyes, abort notices and peer loss travel on the
 * control channel the network transports share (comm/transport/ctrl.c).
 *
 * Each file has its own header (ib_dev.h, ib_track.h; ib_verbs.h
 * for the verbs files, ib.h for ib.c's test entry points), and each calls
 * only files listed above it, so the transport's files form no cycle.
 * Everything here is internal to libsharc.
 */
#ifndef SHARC_TRANSPORT_IB_H
#define SHARC_TRANSPORT_IB_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "ib_dev.h"

struct sharc_comm;

/* ---- for tests (ib.c) -----------------------------------------------------
 */

/* Number of RDMA devices with an active port; 0 with the reason in why
 * (no device, none active, or a build without libibverbs). */
int ib_probe(char *why, size_t why_len);

typedef struct {
  char dev[IB_NAME_MAX];
  int port, gid_index, nqp;
  uint64_t reg_hits, reg_misses, reg_evictions; /* registration cache */
  uint64_t zcopy_sends, want_msgs, wake_msgs, credit_writes;
  /* GPUDirect RDMA: sends straight from device memory, and the device
   * regions registered through each method */
  uint64_t gdr_sends, gdr_dmabuf_regs, gdr_peermem_regs;
} ib_stats_t;

/* SHARC_ERR_INVALID_ARG when comm has no ib state. */
sharc_status_t ib_stats(struct sharc_comm *comm, ib_stats_t *out);

#endif /* SHARC_TRANSPORT_IB_H */

/*
 * mock_verbs.h - a software RC "HCA" for machines without RDMA: the
 * libibverbs calls the ib transport makes, defined in the test program so
 * they take the place of libibverbs' (the inline data-path calls go through
 * the context's ops, which the mock fills). One device "mock0", one RoCE
 * port with a RoCE v1/v2 GID table, reliable connections between QPs of
 * this process.
 *
 * A wire thread carries posted work requests, one QP's in order but QPs in
 * random order against each other (so striping over several QPs is tested
 * against reordering), checks every RDMA write against the registered
 * memory and its access rights, consumes a posted receive for each
 * immediate and raises completion-channel events for armed CQs.
 *
 * It also checks what a verbs reviewer would: the attribute mask of every
 * QP transition, that PSNs and QP numbers were exchanged both ways, that
 * no immediate ever arrives to an empty receive queue (RNR), that send
 * queues and CQs never overflow, and that resources are destroyed in a
 * valid order (QPs before their CQ, events acknowledged before a CQ goes,
 * MRs and QPs before their PD, CQs before their channel). Each violation
 * is counted and its first description kept.
 */
#ifndef SHARC_TEST_MOCK_VERBS_H
#define SHARC_TEST_MOCK_VERBS_H

#include <stdint.h>

typedef struct {
  int rnr;     /* immediates that found no posted receive */
  int sq_full; /* posts beyond max_send_wr */
  int cq_over; /* completions beyond a CQ's size */
  int mask;    /* wrong attribute masks or transitions */
  int order;   /* destruction in an invalid order */
  int access;  /* writes outside registered memory or keys */
  int psn;     /* PSN / QP number exchange inconsistent */
  char first[400];
  /* live objects (0 after every teardown) */
  int contexts, pds, mrs, cqs, qps, channels;
  uint64_t writes, imms; /* carried */
  int dmabuf_mrs;        /* dma-buf MRs made (ever) */
} mock_report_t;

void mock_report(mock_report_t *out);
/* The next RDMA write carrying data completes with IBV_WC_RETRY_EXC_ERR
 * (the path to the peer broke) instead of being delivered. */
void mock_fail_next_data_write(void);
/* Every open device context gets IBV_EVENT_PORT_ERR for port 1. */
void mock_port_down(void);
/* GPUDirect RDMA as far as the stack allows it (default: not at all).
 * dmabuf: ibv_reg_dmabuf_mr imports a dma-buf that softcuda exported
 * (softcuda_dmabuf_info; else EOPNOTSUPP, as a kernel without dma-buf
 * import), maps its pages itself and carries writes from that mapping.
 * peermem: ibv_reg_mr accepts device memory (is_device tells it from host
 * memory); without it such a registration fails with EFAULT, as pinning
 * GPU memory does without nvidia-peermem. */
void mock_set_gdr(int dmabuf, int peermem, int (*is_device)(const void *p));

#endif /* SHARC_TEST_MOCK_VERBS_H */

/*
 * ib_test.h - what the ib transport's tests share (unit/test_ib.c, built
 * again as test_ib_mock, and gpu/test_ib_gdr.c): a connected pair of fake
 * communicators, the receiving end of a send padded to 64 bytes in the
 * stream, and, on the software HCA (SHARC_TEST_MOCK_VERBS), the mock's
 * protocol checks. Include after unit/expect.h and unit/transport_contract.h
 * (tp, make_comms), with tp set to the ib transport.
 */
#ifndef SHARC_TEST_IB_TEST_H
#define SHARC_TEST_IB_TEST_H

#ifdef SHARC_TEST_MOCK_VERBS
#include "unit/mock_verbs.h"

/* The mock's protocol checks are clean and no verbs object is left. */
static void mock_check(const char *after) {
  mock_report_t r;
  mock_report(&r);
  EXPECT(!r.rnr && !r.sq_full && !r.cq_over && !r.mask && !r.order &&
             !r.access && !r.psn,
         "after %s: RNR %d, queue overflows %d, CQ overflows %d, bad masks "
         "%d, bad order %d, bad accesses %d, PSN mismatches %d; first: %s",
         after, r.rnr, r.sq_full, r.cq_over, r.mask, r.order, r.access, r.psn,
         r.first);
  EXPECT(!r.contexts && !r.pds && !r.mrs && !r.cqs && !r.qps && !r.channels,
         "after %s: left %d contexts, %d PDs, %d MRs, %d CQs, %d QPs, %d "
         "channels",
         after, r.contexts, r.pds, r.mrs, r.cqs, r.qps, r.channels);
}
#else
static void mock_check(const char *after) { (void)after; }
#endif

/* Two fake communicators (uid, token byte tok) set up, and channel 0 from
 * rank 0 (tx) to rank 1 (rx) connected. */
static void ib_setup_pair(struct sharc_comm **cs, uint64_t uid, uint8_t tok,
                          transport_conn_t **tx, transport_conn_t **rx) {
  make_comms(cs, 2, uid, tok);
  for (int r = 0; r < 2; r++)
    EXPECT(tp->setup(cs[r]) == SHARC_OK, "%s", err_last());
  uint64_t dl = time_ns() + 10000000000ull;
  EXPECT(tp->connect(cs[0], 1, 0, 1, dl, tx) == SHARC_OK, "%s", err_last());
  EXPECT(tp->connect(cs[1], 0, 0, 0, dl, rx) == SHARC_OK, "%s", err_last());
}

/* Receives one send of `bytes` (padded to 64 in the stream) and compares
 * its payload with want; 1 if it all arrived within 10 s and matched. */
static int ib_recv_padded(struct sharc_comm *comm, transport_conn_t *c,
                          const uint8_t *want, size_t bytes) {
  size_t wire = (bytes + 63) & ~(size_t)63, done = 0;
  uint64_t end = time_ns() + 10000000000ull;
  while (done < wire && time_ns() < end) {
    uint32_t seen = atomic_load(&comm->wake->doorbell);
    const void *p;
    size_t k = SHARC_MIN(tp->recv_avail(c, &p), wire - done);
    if (k) {
      size_t data = done < bytes ? SHARC_MIN(k, bytes - done) : 0;
      if (data && memcmp(p, want + done, data))
        return 0;
      tp->recv_release(c, k);
      done += k;
      continue;
    }
    comm_wait(comm, seen, 100000000ull);
  }
  return done == wire;
}

#endif /* SHARC_TEST_IB_TEST_H */

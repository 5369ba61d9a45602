/*
 * test_ib.c - the ib transport on a real RDMA device (InfiniBand, RoCE or
 * Soft-RoCE): the transport contract that tcp passes too
 * (transport_contract.h), then what is particular to verbs:
 *   - credits under a slow receiver: a 64 KiB FIFO, a reader that sleeps;
 *     every byte arrives intact, the sender asks for credit (WANT) and is
 *     woken (WAKE), and while blocked nobody burns CPU
 *   - many one-byte writes: the per-QP write window blocks before the
 *     bytes do, and credit still flows
 *   - zero-copy sends from sharc_mem_alloc memory and the registration
 *     cache: one registration for repeated sends, a new one after the
 *     region was freed and allocated again, plain copies for malloc memory
 *   - several QPs per peer (SHARC_IB_QPS_PER_PEER=3): writes striped over
 *     QPs still arrive in order
 *   - ranks that disagree on SHARC_IB_QPS_PER_PEER fail with a message
 *     naming the setting
 * Without a device with an active port the test exits 77 and says why.
 *
 * Built a second time as test_ib_mock (SHARC_TEST_MOCK_VERBS) against the
 * software HCA of mock_verbs.c, where it runs on any machine: then after
 * every test the mock's protocol checks must be clean (no RNR, no queue or
 * CQ overflow, valid QP transitions and destruction order, PSNs exchanged
 * both ways) and no verbs object may be left, and two failures are
 * injected: a write whose retries run out, and a port going down.
 */
#include "ctrl.h"
#include "ib.h"
#include "ib_dev.h"
#include "ib_track.h"
#include "unit/expect.h"
#include "unit/transport_contract.h"

#ifdef SHARC_TEST_MOCK_VERBS
#define TEST_NAME "test_ib_mock"
#else
#define TEST_NAME "test_ib"
#endif
#include "unit/ib_test.h"

static void setup_pair(struct sharc_comm **cs, uint64_t uid,
                       transport_conn_t **tx, transport_conn_t **rx) {
  ib_setup_pair(cs, uid, 0x21, tx, rx);
}

static double cpu_now(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

typedef struct {
  struct sharc_comm *comm;
  transport_conn_t *c;
  size_t bytes, piece;
  int ok;
} sender_t;

static void *sender(void *arg) {
  sender_t *s = arg;
  stream_t st = {s->c, 77, 0, s->bytes};
  uint64_t end = time_ns() + 60000000000ull;
  while (st.done < s->bytes && time_ns() < end) {
    uint32_t seen = atomic_load(&s->comm->wake->doorbell);
    void *p;
    size_t k = tp->send_space(s->c, &p);
    k = SHARC_MIN(SHARC_MIN(k, s->bytes - st.done), s->piece);
    if (k) {
      pattern(&st, p, k, 0);
      tp->send_commit(s->c, k);
      st.done += k;
      continue;
    }
    comm_wait(s->comm, seen, 100000000ull);
  }
  s->ok = st.done == s->bytes;
  return NULL;
}

/* Reads bytes in pieces of at most `piece`, sleeping `nap_us` after each;
 * at `pause_at` it stops reading for 0.5 s and returns the CPU seconds the
 * process used meanwhile in *pause_cpu. */
static int slow_reader(struct sharc_comm *comm, transport_conn_t *c,
                       size_t bytes, size_t piece, int nap_us, size_t pause_at,
                       double *pause_cpu) {
  stream_t s = {c, 77, 0, bytes};
  uint64_t end = time_ns() + 60000000000ull;
  int paused = 0;
  while (s.done < bytes && time_ns() < end) {
    if (!paused && s.done >= pause_at) {
      double c0 = cpu_now();
      usleep(500000);
      *pause_cpu = cpu_now() - c0;
      paused = 1;
    }
    uint32_t seen = atomic_load(&comm->wake->doorbell);
    const void *p;
    size_t k =
        SHARC_MIN(SHARC_MIN(tp->recv_avail(c, &p), bytes - s.done), piece);
    if (k) {
      if (pattern(&s, (uint8_t *)p, k, 1))
        return 0;
      tp->recv_release(c, k);
      s.done += k;
      if (nap_us)
        usleep((useconds_t)nap_us);
      continue;
    }
    comm_wait(comm, seen, 100000000ull);
  }
  return s.done == bytes;
}

static void test_slow_receiver(void) {
  setenv("SHARC_IB_FIFO_BYTES", "65536", 1);
  struct sharc_comm *cs[2];
  transport_conn_t *tx, *rx;
  setup_pair(cs, 0x6006, &tx, &rx);
  size_t bytes = (size_t)4 << 20;
  sender_t s = {cs[0], tx, bytes, 50000, 0};
  pthread_t th;
  pthread_create(&th, NULL, sender, &s);
  double pause_cpu = -1;
  int ok = slow_reader(cs[1], rx, bytes, 16384, 500, bytes / 2, &pause_cpu);
  pthread_join(th, NULL);
  EXPECT(ok && s.ok, "slow receiver: reader %d, sender %d (%s)", ok, s.ok,
         err_last());
  EXPECT(pause_cpu >= 0 && pause_cpu < 0.1,
         "a sender blocked on credit used %.3f s of CPU in 0.5 s", pause_cpu);
  ib_stats_t a, b;
  ib_stats(cs[0], &a);
  ib_stats(cs[1], &b);
  EXPECT(a.want_msgs > 0 && b.wake_msgs > 0,
         "credit handshake unused: %llu WANT, %llu WAKE",
         (unsigned long long)a.want_msgs, (unsigned long long)b.wake_msgs);
  printf(TEST_NAME
         ": slow receiver: %llu WANT, %llu WAKE, %llu credit writes\n",
         (unsigned long long)a.want_msgs, (unsigned long long)b.wake_msgs,
         (unsigned long long)b.credit_writes);
  for (int r = 0; r < 2; r++)
    EXPECT(!atomic_load(&cs[r]->fail.failed), "rank %d: %s", r, BROKEN(cs[r]));
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
  unsetenv("SHARC_IB_FIFO_BYTES");
}

static void test_tiny_writes(void) {
  struct sharc_comm *cs[2];
  transport_conn_t *tx, *rx;
  setup_pair(cs, 0x7007, &tx, &rx);
  /* Connected first: bytes committed before that leave as one write. */
  EXPECT(send_n(cs[0], tx, 5, 1) && recv_n(cs[1], rx, 5, 1), "warm-up");
  size_t bytes = 20000;
  sender_t s = {cs[0], tx, bytes, 1, 0}; /* one byte per commit */
  pthread_t th;
  pthread_create(&th, NULL, sender, &s);
  usleep(200000); /* the sender fills its write window meanwhile */
  double unused;
  int ok = slow_reader(cs[1], rx, bytes, 1 << 20, 0, bytes + 1, &unused);
  pthread_join(th, NULL);
  EXPECT(ok && s.ok, "one-byte writes: reader %d, sender %d", ok, s.ok);
  ib_stats_t a;
  ib_stats(cs[0], &a);
  EXPECT(a.want_msgs > 0, "a full write window did not ask for credit");
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
}

/* Receives a zero-copy send of `bytes` and checks the payload. */
static int recv_direct(struct sharc_comm *comm, transport_conn_t *c,
                       const uint8_t *buf, size_t bytes) {
  return ib_recv_padded(comm, c, buf, bytes);
}

static int send_direct(struct sharc_comm *comm, transport_conn_t *c,
                       const void *buf, size_t bytes) {
  if (tp->send_begin(c, buf, bytes) != 1)
    return 0;
  uint64_t end = time_ns() + 10000000000ull;
  while (!tp->send_done(c) && time_ns() < end) {
    uint32_t seen = atomic_load(&comm->wake->doorbell);
    if (tp->send_done(c))
      return 1;
    comm_wait(comm, seen, 100000000ull);
  }
  return time_ns() < end;
}

typedef struct {
  struct sharc_comm *comm;
  transport_conn_t *c;
  const uint8_t *buf;
  size_t bytes;
  int ok;
} direct_t;

static void *direct_sender(void *arg) {
  direct_t *d = arg;
  d->ok = send_direct(d->comm, d->c, d->buf, d->bytes);
  return NULL;
}

static void test_zero_copy(void) {
  setenv("SHARC_IB_ZCOPY_BYTES", "4096", 1);
  setenv("SHARC_IB_FIFO_BYTES", "262144", 1); /* smaller than the sends */
  struct sharc_comm *cs[2];
  transport_conn_t *tx, *rx;
  setup_pair(cs, 0x8008, &tx, &rx);
  size_t bytes = 1000003; /* not a multiple of 64: padding in the stream */
  uint8_t *buf = NULL, *plain = malloc(bytes);
  EXPECT(sharc_mem_alloc((void **)&buf, bytes) == SHARC_OK, "%s", err_last());
  for (size_t i = 0; i < bytes; i++)
    buf[i] = plain[i] = (uint8_t)(i * 2654435761u >> 11);
  EXPECT(send_n(cs[0], tx, 3, 777), "inline bytes before");
  EXPECT(recv_n(cs[1], rx, 3, 777), "inline bytes before, received");
  for (int round = 0; round < 2; round++) {
    direct_t d = {cs[0], tx, buf, bytes, 0};
    pthread_t th;
    pthread_create(&th, NULL, direct_sender, &d);
    EXPECT(recv_direct(cs[1], rx, plain, bytes), "round %d: payload", round);
    pthread_join(th, NULL);
    EXPECT(d.ok, "round %d: the direct send did not complete", round);
  }
  EXPECT(send_n(cs[0], tx, 4, 5000), "inline bytes after");
  EXPECT(recv_n(cs[1], rx, 4, 5000), "inline bytes after, received");
  ib_stats_t a;
  ib_stats(cs[0], &a);
  EXPECT(a.zcopy_sends == 2 && a.reg_misses == 1 && a.reg_hits == 1,
         "2 sends, 1 registration: %llu sends, %llu misses, %llu hits",
         (unsigned long long)a.zcopy_sends, (unsigned long long)a.reg_misses,
         (unsigned long long)a.reg_hits);
  EXPECT(tp->send_begin(tx, plain, bytes) == 0, "malloc memory sent in place");
  EXPECT(tp->send_begin(tx, buf, 100) == 0, "a small send went in place");
  /* Freed and allocated again (perhaps at the same address): a new id. */
  EXPECT(sharc_mem_free(buf) == SHARC_OK, "%s", err_last());
  EXPECT(sharc_mem_alloc((void **)&buf, bytes) == SHARC_OK, "%s", err_last());
  memcpy(buf, plain, bytes);
  direct_t d = {cs[0], tx, buf, bytes, 0};
  pthread_t th;
  pthread_create(&th, NULL, direct_sender, &d);
  EXPECT(recv_direct(cs[1], rx, plain, bytes), "after realloc: payload");
  pthread_join(th, NULL);
  ib_stats(cs[0], &a);
  EXPECT(d.ok && a.reg_misses == 2 && a.reg_evictions >= 1,
         "a new region: %llu misses, %llu evictions (the freed one dropped)",
         (unsigned long long)a.reg_misses, (unsigned long long)a.reg_evictions);
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
  sharc_mem_free(buf);
  free(plain);
  unsetenv("SHARC_IB_ZCOPY_BYTES");
  unsetenv("SHARC_IB_FIFO_BYTES");
}

static void test_qps(void) {
  setenv("SHARC_IB_QPS_PER_PEER", "3", 1);
  struct sharc_comm *cs[2];
  make_comms(cs, 2, 0x9009, 0x31);
  for (int r = 0; r < 2; r++)
    EXPECT(tp->setup(cs[r]) == SHARC_OK, "%s", err_last());
  worker_t w[2];
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    w[r] = (worker_t){cs[r], (size_t)16 << 20, 200000, 0, {0}};
    pthread_create(&th[r], NULL, worker, &w[r]);
  }
  for (int r = 0; r < 2; r++) {
    pthread_join(th[r], NULL);
    EXPECT(w[r].ok, "3 QPs, rank %d: %s", r, w[r].why);
  }
  ib_stats_t a;
  ib_stats(cs[0], &a);
  EXPECT(a.nqp == 3, "%d QPs", a.nqp);
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
  unsetenv("SHARC_IB_QPS_PER_PEER");
}

static void test_mismatch(void) {
  struct sharc_comm *cs[2];
  make_comms(cs, 2, 0xa00a, 0x19);
  setenv("SHARC_IB_QPS_PER_PEER", "1", 1);
  EXPECT(tp->setup(cs[0]) == SHARC_OK, "%s", err_last());
  setenv("SHARC_IB_QPS_PER_PEER", "2", 1);
  EXPECT(tp->setup(cs[1]) == SHARC_OK, "%s", err_last());
  unsetenv("SHARC_IB_QPS_PER_PEER");
  transport_conn_t *tx, *rx;
  uint64_t dl = time_ns() + 5000000000ull;
  EXPECT(tp->connect(cs[0], 1, 0, 1, dl, &tx) == SHARC_OK, "%s", err_last());
  EXPECT(tp->connect(cs[1], 0, 0, 0, dl, &rx) == SHARC_OK, "%s", err_last());
  EXPECT(wait_failed(cs[0], 5000000000ull) && wait_failed(cs[1], 5000000000ull),
         "ranks with different QP counts connected");
  EXPECT(strstr(BROKEN(cs[0]), "SHARC_IB_QPS_PER_PEER") ||
             strstr(BROKEN(cs[1]), "SHARC_IB_QPS_PER_PEER"),
         "messages: '%s' / '%s'", BROKEN(cs[0]), BROKEN(cs[1]));
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
}

#ifdef SHARC_TEST_MOCK_VERBS
/* A write whose retries run out: both ranks fail, the message names the
 * device, port and peer. */
static void test_failed_write(void) {
  struct sharc_comm *cs[2];
  transport_conn_t *tx, *rx;
  setup_pair(cs, 0xb00b, &tx, &rx);
  EXPECT(send_n(cs[0], tx, 1, 1000) && recv_n(cs[1], rx, 1, 1000), "warm-up");
  mock_fail_next_data_write();
  EXPECT(send_n(cs[0], tx, 2, 1000), "the doomed bytes were not taken");
  EXPECT(wait_failed(cs[0], 3000000000ull) && wait_failed(cs[1], 3000000000ull),
         "a failed write did not fail both ranks");
  EXPECT(atomic_load(&cs[0]->fail.status) == SHARC_ERR_NET &&
             atomic_load(&cs[1]->fail.status) == SHARC_ERR_NET,
         "status %d / %d", atomic_load(&cs[0]->fail.status),
         atomic_load(&cs[1]->fail.status));
  const char *m = BROKEN(cs[0]);
  EXPECT(strstr(m, "mock0 port 1") && strstr(m, "rank 1 (host host1") &&
             strstr(m, "retry counter exceeded") &&
             strstr(m, "SHARC_IB_RETRY_CNT=7"),
         "message: %s", m);
  EXPECT(tp->check(tx) == SHARC_ERR_NET, "check after the failure");
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
}

/* The port goes down: the rank fails at once, naming device and port, and
 * tells its peer. */
static void test_port_down(void) {
  struct sharc_comm *cs[2];
  transport_conn_t *tx, *rx;
  setup_pair(cs, 0xc00c, &tx, &rx);
  EXPECT(send_n(cs[0], tx, 1, 1000) && recv_n(cs[1], rx, 1, 1000), "warm-up");
  mock_port_down();
  for (int r = 0; r < 2; r++) {
    EXPECT(wait_failed(cs[r], 3000000000ull), "rank %d missed the port", r);
    EXPECT(atomic_load(&cs[r]->fail.status) == SHARC_ERR_NET, "status %d",
           atomic_load(&cs[r]->fail.status));
  }
  /* Whichever rank saw it first tells the other (which may then report
   * that notice instead of its own event). */
  int named = 0;
  for (int r = 0; r < 2; r++)
    named |= strstr(BROKEN(cs[r]), "mock0 port 1") &&
             strstr(BROKEN(cs[r]), "link is lost");
  EXPECT(named, "messages: %s / %s", BROKEN(cs[0]), BROKEN(cs[1]));
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
}
#endif

int main(void) {
  char why[400];
  int ports = ib_probe(why, sizeof why);
  if (ports == 0) {
    printf("SKIP test_ib: %s; the ib contract and verbs tests need an "
           "active RDMA port (Soft-RoCE where the kernel has it: rdma link "
           "add rxe0 type rxe netdev eth0)\n",
           why);
    return 77;
  }
  pattern_init();
  tp = &transport_ib;
  setenv("SHARC_DEBUG", "NONE", 0);
  printf(TEST_NAME ": %d active RDMA port(s)\n", ports);
  uint64_t t0 = time_ns();
  contract_stream(NULL);
  mock_check("the stream contract");
  contract_goodbye();
  mock_check("the goodbye contract");
  contract_peer_lost(1); /* one control socket; QPs die with the process */
  mock_check("the peer-lost contract");
  test_slow_receiver();
  mock_check("the slow receiver");
  test_tiny_writes();
  mock_check("one-byte writes");
  test_zero_copy();
  mock_check("zero copy");
  test_qps();
  mock_check("3 QPs per peer");
  test_mismatch();
  mock_check("the mismatch");
#ifdef SHARC_TEST_MOCK_VERBS
  test_failed_write();
  test_port_down();
  contract_fault(); /* last: SHARC_FAULT is read once */
  mock_check("the fault layer");
  mock_report_t r;
  mock_report(&r);
  EXPECT(r.writes > 0 && r.imms > 0, "nothing went over the mock wire");
  printf(TEST_NAME ": the mock carried %llu writes, %llu with immediate\n",
         (unsigned long long)r.writes, (unsigned long long)r.imms);
#endif
  printf(TEST_NAME ": %d passed, %d failed (%.1f s)\n", passed, failed,
         (double)(time_ns() - t0) / 1e9);
  return failed ? 1 : 0;
}

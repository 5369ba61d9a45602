/*
 * transport_contract.h - what every network transport must do, as tests
 * that take the transport (comm/transport/transport.h) as a parameter.
 * test_tcp.c runs them on tcp, test_ib.c on ib; each adds its own specific
 * tests.
 *
 * The ranks are fake communicators in one process, each with a data
 * listener on 127.0.0.1 and host name "host<rank>":
 *   contract_stream    3 ranks stream patterned bytes to each other on 2
 *                      channels in odd-sized pieces (64 MiB per ordered
 *                      pair); then an abort notice from one rank reaches
 *                      the others with the failed rank and status
 *   contract_goodbye   idle progress threads burn no CPU; a clean teardown
 *                      delivers what was sent before it and reads as
 *                      PEER_LOST naming the rank, without failing the job
 *   contract_peer_lost a channel whose peer never connects times out at its
 *                      deadline; connect caches and refuses self; a peer
 *                      whose sockets die is reported lost, by name
 *   contract_fault     the fault-injection layer (comm/fault/) around the
 *                      transport: corrupt, delay and drop fire where
 *                      SHARC_FAULT says (call it last: the spec is read
 *                      once per process)
 * Include once, after expect.h; set `tp` before calling.
 */
#ifndef SHARC_TEST_TRANSPORT_CONTRACT_H
#define SHARC_TEST_TRANSPORT_CONTRACT_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm.h"
#include "fault.h"
#include "net.h"
#include "registry.h"

#define MAXR 4
#define NCHAN 2
#define PRIME 65521u /* pattern period, bytes */
static uint8_t pat[2 * PRIME];

static const transport_t *tp; /* the transport under test */

/* Not every includer uses every helper. */
#define CONTRACT static __attribute__((unused))

CONTRACT void pattern_init(void) {
  for (size_t i = 0; i < sizeof pat; i++)
    pat[i] = (uint8_t)((i % PRIME) * 2654435761u >> 13);
}

/* ---- fake communicators ------------------------------------------------- */

CONTRACT void make_comms(struct sharc_comm **cs, int n, uint64_t uid,
                         uint8_t tokbyte) {
  peer_info_t *table = calloc((size_t)n, sizeof *table);
  int fds[MAXR];
  for (int r = 0; r < n; r++) {
    net_addr_t lo;
    if (net_resolve("127.0.0.1", 0, &lo) != SHARC_OK ||
        net_listen(&lo, 64, &fds[r], &table[r].addr) != SHARC_OK) {
      printf("cannot listen on 127.0.0.1: %s\n", err_last());
      exit(1);
    }
    snprintf(table[r].host, sizeof table[r].host, "host%d", r);
    table[r].pid = getpid();
    table[r].rank = r;
  }
  for (int r = 0; r < n; r++) {
    struct sharc_comm *c = calloc(1, sizeof *c);
    c->rank = r;
    c->nranks = n;
    c->uid = uid;
    memset(c->token, tokbyte, sizeof c->token);
    c->nchan = NCHAN;
    c->peers = calloc((size_t)n, sizeof *c->peers);
    memcpy(c->peers, table, (size_t)n * sizeof *table);
    c->listen_fd = fds[r];
    c->listen_addr = table[r].addr;
    c->wake = &c->wake_private;
    c->notify_abort = transport_notify_abort_all;
    pthread_mutex_init(&c->err_lock, NULL);
    pthread_mutex_init(&c->order_lock, NULL);
    pthread_cond_init(&c->order_cond, NULL);
    cs[r] = c;
  }
  free(table);
}

CONTRACT void free_comm(struct sharc_comm *c) {
  tp->teardown(c, time_ns() + 5000000000ull);
  close(c->listen_fd);
  free(c->peers);
  pthread_mutex_destroy(&c->err_lock);
  pthread_mutex_destroy(&c->order_lock);
  pthread_cond_destroy(&c->order_cond);
  free(c);
}

/* ---- patterned streams --------------------------------------------------- */

CONTRACT uint32_t seed_of(int src, int dst, int chan) {
  return (uint32_t)(src * 7919 + dst * 104729 + chan * 15485863) % PRIME;
}

typedef struct {
  transport_conn_t *c;
  uint32_t seed;
  size_t done, total;
} stream_t;

/* Writes (tx) or checks (rx) n stream bytes starting at stream offset off. */
CONTRACT int pattern(stream_t *s, uint8_t *p, size_t n, int check) {
  size_t off = s->done;
  while (n) {
    size_t k = (off + s->seed) % PRIME, m = SHARC_MIN(n, (size_t)PRIME);
    if (check) {
      if (memcmp(p, pat + k, m))
        return -1;
    } else {
      memcpy(p, pat + k, m);
    }
    p += m;
    off += m;
    n -= m;
  }
  return 0;
}

typedef struct {
  struct sharc_comm *comm;
  size_t bytes; /* per ordered pair, split over the channels */
  size_t maxchunk;
  int ok;
  char why[600];
} worker_t;

CONTRACT void *worker(void *arg) {
  worker_t *w = arg;
  struct sharc_comm *comm = w->comm;
  int n = comm->nranks, me = comm->rank, ns = 0;
  stream_t tx[MAXR * NCHAN], rx[MAXR * NCHAN];
  uint64_t deadline = time_ns() + 30000000000ull;
  w->ok = 0;
  for (int p = 0; p < n; p++) {
    if (p == me)
      continue;
    for (int ch = 0; ch < NCHAN; ch++) {
      stream_t *t = &tx[ns], *r = &rx[ns];
      if (tp->connect(comm, p, ch, 1, deadline, &t->c) != SHARC_OK ||
          tp->connect(comm, p, ch, 0, deadline, &r->c) != SHARC_OK) {
        snprintf(w->why, sizeof w->why, "connect: %s", err_last());
        return NULL;
      }
      t->seed = seed_of(me, p, ch);
      r->seed = seed_of(p, me, ch);
      t->done = r->done = 0;
      t->total = r->total = w->bytes / NCHAN;
      ns++;
    }
  }
  unsigned rnd = 12345u + (unsigned)me;
  for (;;) {
    uint32_t seen = atomic_load(&comm->wake->doorbell);
    size_t moved = 0;
    int pending = 0;
    for (int i = 0; i < ns; i++) {
      stream_t *t = &tx[i], *r = &rx[i];
      if (t->done < t->total) {
        pending = 1;
        void *p;
        size_t k = tp->send_space(t->c, &p);
        rnd = rnd * 1103515245u + 12345u;
        size_t lim = 1 + (rnd >> 8) % w->maxchunk; /* odd sizes too */
        k = SHARC_MIN(SHARC_MIN(k, t->total - t->done), lim);
        if (k) {
          pattern(t, p, k, 0);
          tp->send_commit(t->c, k);
          t->done += k;
          moved += k;
        }
      }
      if (r->done < r->total) {
        pending = 1;
        const void *p;
        size_t k = tp->recv_avail(r->c, &p);
        k = SHARC_MIN(k, r->total - r->done);
        if (k) {
          if (pattern(r, (uint8_t *)p, k, 1)) {
            snprintf(w->why, sizeof w->why,
                     "rank %d: bad bytes from rank %d channel %d near %zu", me,
                     r->c->peer, r->c->chan, r->done);
            return NULL;
          }
          tp->recv_release(r->c, k);
          r->done += k;
          moved += k;
        }
      }
    }
    if (!pending)
      break;
    if (moved)
      continue;
    for (int i = 0; i < ns; i++) {
      if (tp->check(tx[i].c) != SHARC_OK || tp->check(rx[i].c) != SHARC_OK) {
        snprintf(w->why, sizeof w->why, "check: %s", err_last());
        return NULL;
      }
    }
    if (time_ns() > deadline) {
      snprintf(w->why, sizeof w->why, "rank %d: no progress (timeout)", me);
      return NULL;
    }
    comm_wait(comm, seen, 100000000ull);
  }
  w->ok = 1;
  return NULL;
}

/* Sends n pattern bytes on c (blocking with comm_wait). */
CONTRACT int send_n(struct sharc_comm *comm, transport_conn_t *c, uint32_t seed,
                    size_t n) {
  stream_t s = {c, seed, 0, n};
  uint64_t end = time_ns() + 10000000000ull;
  while (s.done < n && time_ns() < end) {
    uint32_t seen = atomic_load(&comm->wake->doorbell);
    void *p;
    size_t k = SHARC_MIN(tp->send_space(c, &p), n - s.done);
    if (k) {
      pattern(&s, p, k, 0);
      tp->send_commit(c, k);
      s.done += k;
      continue;
    }
    comm_wait(comm, seen, 100000000ull);
  }
  return s.done == n;
}

CONTRACT int recv_n(struct sharc_comm *comm, transport_conn_t *c, uint32_t seed,
                    size_t n) {
  stream_t s = {c, seed, 0, n};
  uint64_t end = time_ns() + 10000000000ull;
  while (s.done < n && time_ns() < end) {
    uint32_t seen = atomic_load(&comm->wake->doorbell);
    const void *p;
    size_t k = SHARC_MIN(tp->recv_avail(c, &p), n - s.done);
    if (k) {
      if (pattern(&s, (uint8_t *)p, k, 1))
        return 0;
      tp->recv_release(c, k);
      s.done += k;
      continue;
    }
    comm_wait(comm, seen, 100000000ull);
  }
  return s.done == n;
}

/* ---- failures ------------------------------------------------------------ */

/* comm_fail raises `unusable` after filling the fail word and the message. */
CONTRACT int wait_failed(struct sharc_comm *c, uint64_t ns) {
  uint64_t end = time_ns() + ns;
  while (!atomic_load(&c->unusable) && time_ns() < end)
    usleep(2000);
  return atomic_load(&c->unusable);
}

CONTRACT const char *msg_of(struct sharc_comm *c, int last, char *buf,
                            size_t len) {
  pthread_mutex_lock(&c->err_lock);
  snprintf(buf, len, "%s", last ? c->last_error : c->unusable_msg);
  pthread_mutex_unlock(&c->err_lock);
  return buf;
}
#define BROKEN(c) msg_of(c, 0, (char[512]){0}, 512)
#define LAST(c) msg_of(c, 1, (char[512]){0}, 512)

/* Shuts down every connected socket this process holds whose local port is
 * the given one: what the kernel does when that rank's process dies. */
CONTRACT int kill_sockets_on_port(int port) {
  int n = 0;
  for (int fd = 3; fd < 1024; fd++) {
    net_addr_t a, b;
    a.len = b.len = sizeof a.sa;
    if (getsockname(fd, (struct sockaddr *)&a.sa, &a.len) != 0)
      continue;
    if (getpeername(fd, (struct sockaddr *)&b.sa, &b.len) != 0)
      continue;
    if (net_addr_port(&a) != port)
      continue;
    shutdown(fd, SHUT_RDWR);
    n++;
  }
  return n;
}

/* ---- the contract -------------------------------------------------------- */

/* during(cs, n), if not NULL, runs in a thread while the streams flow and
 * returns 1 when its own checks passed. */
CONTRACT void contract_stream(int (*during)(struct sharc_comm **cs, int n)) {
  enum { N = 3 };
  struct sharc_comm *cs[N];
  make_comms(cs, N, 0x1001, 0x5a);
  for (int r = 0; r < N; r++)
    EXPECT(tp->setup(cs[r]) == SHARC_OK, "%s", err_last());
  worker_t w[N];
  pthread_t th[N];
  size_t bytes = (size_t)64 << 20;
  uint64_t t0 = time_ns();
  for (int r = 0; r < N; r++) {
    w[r] = (worker_t){cs[r], bytes, 300000, 0, {0}};
    pthread_create(&th[r], NULL, worker, &w[r]);
  }
  int during_ok = during ? during(cs, N) : 1;
  for (int r = 0; r < N; r++)
    pthread_join(th[r], NULL);
  double secs = (double)(time_ns() - t0) / 1e9;
  for (int r = 0; r < N; r++)
    EXPECT(w[r].ok, "rank %d: %s", r, w[r].why);
  EXPECT(during_ok, "the checks run during the streams failed");
  for (int r = 0; r < N; r++)
    EXPECT(!atomic_load(&cs[r]->fail.failed), "rank %d failed: %s", r,
           BROKEN(cs[r]));
  double total = (double)bytes * N * (N - 1);
  printf("%s: %d ranks moved %.0f MiB in %.2f s: %.2f GB/s aggregate "
         "loopback (not asserted)\n",
         tp->name, N, total / (1 << 20), secs, total / secs / 1e9);

  /* An abort notice from rank 0 reaches both others. */
  comm_fail(cs[0], 2, SHARC_ERR_TIMEOUT, "test: rank 2 timed out");
  for (int r = 1; r < N; r++) {
    EXPECT(wait_failed(cs[r], 3000000000ull), "rank %d never heard the abort",
           r);
    EXPECT(atomic_load(&cs[r]->fail.failed_rank) == 2,
           "rank %d: failed_rank %d", r, atomic_load(&cs[r]->fail.failed_rank));
    EXPECT(atomic_load(&cs[r]->fail.status) == SHARC_ERR_TIMEOUT,
           "rank %d: status %d", r, atomic_load(&cs[r]->fail.status));
  }
  EXPECT(strstr(BROKEN(cs[1]), "rank 2 (host host2) timed out"), "message: %s",
         BROKEN(cs[1]));
  for (int r = 0; r < N; r++)
    free_comm(cs[r]);
}

CONTRACT void contract_goodbye(void) {
  struct sharc_comm *cs[2];
  make_comms(cs, 2, 0x2002, 0x77);
  for (int r = 0; r < 2; r++)
    EXPECT(tp->setup(cs[r]) == SHARC_OK, "%s", err_last());
  uint64_t dl = time_ns() + 5000000000ull;
  transport_conn_t *tx1, *rx0;
  EXPECT(tp->connect(cs[0], 1, 1, 0, dl, &rx0) == SHARC_OK, "%s", err_last());
  EXPECT(tp->connect(cs[1], 0, 1, 1, dl, &tx1) == SHARC_OK, "%s", err_last());
  EXPECT(send_n(cs[1], tx1, 99, 100000), "rank 1 could not send");
  /* Two idle progress threads block in poll: no CPU burnt while waiting. */
  struct rusage u0, u1;
  getrusage(RUSAGE_SELF, &u0);
  usleep(300000);
  getrusage(RUSAGE_SELF, &u1);
  double cpu = (double)(u1.ru_utime.tv_sec - u0.ru_utime.tv_sec +
                        u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) +
               (double)(u1.ru_utime.tv_usec - u0.ru_utime.tv_usec +
                        u1.ru_stime.tv_usec - u0.ru_stime.tv_usec) /
                   1e6;
  EXPECT(cpu < 0.1, "idle comms used %.3f s of CPU in 0.3 s", cpu);
  tp->teardown(cs[1], time_ns() + 5000000000ull); /* clean: goodbye */
  /* What arrived before the goodbye stays readable. */
  EXPECT(recv_n(cs[0], rx0, 99, 100000),
         "rank 0 lost data sent before teardown");
  uint64_t end = time_ns() + 3000000000ull;
  sharc_status_t st;
  while ((st = tp->check(rx0)) == SHARC_OK && time_ns() < end)
    usleep(2000);
  EXPECT(st == SHARC_ERR_PEER_LOST, "check after goodbye: %d", st);
  EXPECT(strstr(LAST(cs[0]), "rank 1 (host host1)"), "message: %s",
         LAST(cs[0]));
  EXPECT(!atomic_load(&cs[0]->fail.failed),
         "a clean teardown failed the job: %s", BROKEN(cs[0]));
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
}

/* sockets: how many sockets of rank 1 carry its traffic with rank 0 (what
 * the "death" below must close). */
CONTRACT void contract_peer_lost(int sockets) {
  struct sharc_comm *cs[2];
  make_comms(cs, 2, 0x3003, 0x42);
  /* Teardown of a comm whose transport was never set up is a no-op. */
  tp->teardown(cs[0], time_ns());
  for (int r = 0; r < 2; r++)
    EXPECT(tp->setup(cs[r]) == SHARC_OK, "%s", err_last());
  transport_conn_t *c0[NCHAN], *c1[NCHAN], *late;
  /* The higher rank does not wait for the peer; check() times it out. */
  EXPECT(tp->connect(cs[1], 0, 1, 0, time_ns() + 200000000ull, &late) ==
             SHARC_OK,
         "%s", err_last());
  EXPECT(tp->check(late) == SHARC_OK, "%s", err_last());
  usleep(300000);
  EXPECT(tp->check(late) == SHARC_ERR_TIMEOUT, "no timeout for a missing peer");
  EXPECT(strstr(LAST(cs[1]), "rank 0 (host host0"), "message: %s", LAST(cs[1]));
  uint64_t dl = time_ns() + 5000000000ull;
  for (int ch = 0; ch < NCHAN; ch++) {
    EXPECT(tp->connect(cs[0], 1, ch, 1, dl, &c0[ch]) == SHARC_OK, "%s",
           err_last());
    EXPECT(tp->connect(cs[1], 0, ch, 0, dl, &c1[ch]) == SHARC_OK, "%s",
           err_last());
    EXPECT(send_n(cs[0], c0[ch], 5, 1000), "send");
    EXPECT(recv_n(cs[1], c1[ch], 5, 1000), "recv");
  }
  EXPECT(tp->check(late) == SHARC_OK, "late channel still failing: %s",
         err_last());
  transport_conn_t *again;
  EXPECT(tp->connect(cs[0], 1, 0, 1, dl, &again) == SHARC_OK && again == c0[0],
         "connect does not return the cached conn");
  EXPECT(tp->connect(cs[0], 0, 0, 1, dl, &again) == SHARC_ERR_INVALID_ARG,
         "connect to self accepted");

  /* Rank 1 dies: its sockets close without a goodbye. */
  int killed = kill_sockets_on_port(net_addr_port(&cs[1]->listen_addr));
  EXPECT(killed == sockets, "%d sockets of rank 1, expected %d", killed,
         sockets);
  EXPECT(wait_failed(cs[0], 3000000000ull), "rank 0 did not notice the loss");
  EXPECT(atomic_load(&cs[0]->fail.failed_rank) == 1, "failed_rank %d",
         atomic_load(&cs[0]->fail.failed_rank));
  EXPECT(atomic_load(&cs[0]->fail.status) == SHARC_ERR_PEER_LOST, "status %d",
         atomic_load(&cs[0]->fail.status));
  EXPECT(strstr(BROKEN(cs[0]), "rank 1 (host host1"), "message: %s",
         BROKEN(cs[0]));
  EXPECT(tp->check(c0[0]) == SHARC_ERR_PEER_LOST, "check: %s", err_last());
  EXPECT(strstr(LAST(cs[0]), "rank 1 (host host1"), "message: %s", LAST(cs[0]));
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
}

/* ---- the fault-injection layer --------------------------------------------
 * Rank 0 streams 4 MiB to rank 1 in 64 KiB chunks through fault_wrap(tp)
 * under SHARC_FAULT=corrupt:0:payload:1M,delay:0:300:2M,drop:0:send:3M;
 * rank 1 reads with the bare transport: one flipped byte, the first of the
 * chunk sent at 1 MiB; the sender held 300 ms when asking for space at
 * 2 MiB; the sends stopping at 3 MiB, and check reporting the drop. */

typedef struct {
  struct sharc_comm *comm;
  const transport_t *w;
  transport_conn_t *c;
  size_t done;       /* bytes committed */
  sharc_status_t st; /* what check said once the chunks stopped */
  char why[300];
  uint64_t gap;  /* the longest wait for send space, ns */
  size_t gap_at; /* bytes committed before it */
} fault_sender_t;

#define FAULT_BYTES ((size_t)4 << 20)
#define FAULT_PIECE ((size_t)64 << 10)

CONTRACT void *fault_sender(void *arg) {
  fault_sender_t *s = arg;
  stream_t st = {s->c, 91, 0, FAULT_BYTES};
  uint64_t end = time_ns() + 30000000000ull;
  s->st = SHARC_OK;
  while (st.done < FAULT_BYTES && time_ns() < end) {
    uint32_t seen = atomic_load(&s->comm->wake->doorbell);
    void *p;
    uint64_t t0 = time_ns();
    size_t k = s->w->send_space(s->c, &p);
    if (time_ns() - t0 > s->gap)
      s->gap = time_ns() - t0, s->gap_at = st.done;
    k = SHARC_MIN(SHARC_MIN(k, FAULT_BYTES - st.done), FAULT_PIECE);
    if (k) {
      pattern(&st, p, k, 0);
      s->w->send_commit(s->c, k);
      st.done += k;
      continue;
    }
    if ((s->st = s->w->check(s->c)) != SHARC_OK) {
      snprintf(s->why, sizeof s->why, "%s", err_last());
      break;
    }
    comm_wait(s->comm, seen, 100000000ull);
  }
  s->done = st.done;
  return NULL;
}

CONTRACT void contract_fault(void) {
  setenv("SHARC_FAULT", "corrupt:0:payload:1M,delay:0:300:2M,drop:0:send:3M",
         1);
  EXPECT(fault_init(0) == SHARC_OK, "fault_init: %s", err_last());
  const transport_t *w = fault_wrap(tp);
  EXPECT(w != tp && w->inner == tp, "%s: not wrapped", tp->name);
  struct sharc_comm *cs[2];
  make_comms(cs, 2, 0xfa17, 0x5a);
  for (int r = 0; r < 2; r++)
    EXPECT(tp->setup(cs[r]) == SHARC_OK, "%s", err_last());
  uint64_t dl = time_ns() + 10000000000ull;
  transport_conn_t *tx = NULL, *rx = NULL;
  EXPECT(w->connect(cs[0], 1, 0, 1, dl, &tx) == SHARC_OK, "%s", err_last());
  EXPECT(tp->connect(cs[1], 0, 0, 0, dl, &rx) == SHARC_OK, "%s", err_last());
  if (!tx || !rx)
    return;
  EXPECT(tx->tp == w && tx->framed_only, "the connection is not wrapped");
  fault_sender_t s = {cs[0], w, tx, 0, SHARC_OK, "", 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, fault_sender, &s);
  /* rank 1: reads what comes, until 1 s passes with nothing new */
  size_t got = 0, flips = 0, flip_at = 0;
  uint64_t last = time_ns();
  int bad_flip = 0;
  while (time_ns() - last < 1000000000ull && got < FAULT_BYTES) {
    uint32_t seen = atomic_load(&cs[1]->wake->doorbell);
    const void *p;
    size_t k = SHARC_MIN(tp->recv_avail(rx, &p), FAULT_BYTES - got);
    if (k) {
      last = time_ns();
      const uint8_t *b = p;
      for (size_t i = 0; i < k; i++) {
        uint8_t want = pat[(got + i + 91) % PRIME];
        if (b[i] != want) {
          if (flips++ == 0)
            flip_at = got + i;
          bad_flip |= ((unsigned)b[i] ^ (unsigned)want) != 0xffu;
        }
      }
      tp->recv_release(rx, k);
      got += k;
      continue;
    }
    comm_wait(cs[1], seen, 100000000ull);
  }
  pthread_join(th, NULL);
  const size_t mib = (size_t)1 << 20;
  EXPECT(flips == 1 && !bad_flip && flip_at >= mib &&
             flip_at < mib + FAULT_PIECE && flip_at % FAULT_PIECE == 0,
         "%s: corrupt: %zu wrong bytes, the first at %zu (flipped: %d); want "
         "one, all bits flipped, the first byte of the chunk sent at 1 MiB",
         tp->name, flips, flip_at, !bad_flip);
  /* measured where the fault acts (a receiver starved of CPU may still be
   * reading the backlog while the sender sleeps, and see no pause) */
  EXPECT(s.gap >= 290000000ull && s.gap_at >= 2 * mib &&
             s.gap_at < 2 * mib + FAULT_PIECE,
         "%s: delay: the sender's longest wait for space, %.3f s after %zu "
         "bytes; want >= 0.29 s at 2 MiB",
         tp->name, (double)s.gap / 1e9, s.gap_at);
  EXPECT(s.done >= 3 * mib && s.done < 3 * mib + FAULT_PIECE && got <= s.done,
         "%s: drop: %zu bytes sent, %zu received; want the sends to stop at "
         "3 MiB",
         tp->name, s.done, got);
  EXPECT(s.st == SHARC_ERR_PEER_LOST && strstr(s.why, "rank 1") &&
             strstr(s.why, "dropped by SHARC_FAULT"),
         "%s: drop: check said %s: %s", tp->name, sharc_status_name(s.st),
         s.why);
  printf("%s: fault layer: 1 byte flipped at %zu, %.3f s pause at %zu, "
         "dropped after %zu bytes (%zu received): %s\n",
         tp->name, flip_at, (double)s.gap / 1e9, s.gap_at, s.done, got, s.why);
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
  unsetenv("SHARC_FAULT");
}

#endif /* SHARC_TEST_TRANSPORT_CONTRACT_H */

/*
 * test_tcp.c - the tcp transport in one process: the transport contract
 * (transport_contract.h: streams, abort notices, clean goodbye, peer loss)
 * plus tcp's own hello checks, with stray connections on a listener while
 * the streams flow, and direct messages (sent from the caller's buffer,
 * received straight into it) mixed with staged ones.
 */
#include "unit/expect.h"
#include "unit/transport_contract.h"

#include "exec.h"

/* ---- stray connections ------------------------------------------------- */

/* Sends `len` bytes to addr and expects the server to close the socket. */
static int stray_dropped(const net_addr_t *addr, const void *msg, size_t len) {
  int fd;
  if (net_connect(addr, time_ns() + 2000000000ull, &fd) != SHARC_OK)
    return 0;
  if (len &&
      net_send_all(fd, msg, len, time_ns() + 2000000000ull) != SHARC_OK) {
    close(fd);
    return 1; /* already dropped */
  }
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char b[16];
  ssize_t n = recv(fd, b, sizeof b, 0);
  close(fd);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

typedef struct {
  uint32_t magic, version;
  uint64_t uid;
  uint8_t token[SHARC_TOKEN_BYTES];
  int32_t rank;
  uint32_t chan;
} fake_hello_t; /* the transport's hello layout */

/* Rank 2 accepts from 0 and 1; its channels are up once traffic flows. */
static int strays(struct sharc_comm **cs, int n) {
  usleep(100000);
  struct sharc_comm *c = cs[2];
  fake_hello_t h = {0x53484354u, 1, c->uid, {0}, 0, 0};
  memset(h.token, 0x11, sizeof h.token); /* wrong token */
  int ok = stray_dropped(&c->listen_addr, &h, sizeof h);
  char junk[40];
  memset(junk, 'x', sizeof junk);
  ok &= stray_dropped(&c->listen_addr, junk, sizeof junk);
  memcpy(h.token, c->token, sizeof h.token);
  h.uid = c->uid + 1; /* another communicator */
  ok &= stray_dropped(&c->listen_addr, &h, sizeof h);
  h.uid = c->uid;
  h.rank = c->rank; /* a rank that must not dial this one */
  ok &= stray_dropped(&c->listen_addr, &h, sizeof h);
  h.rank = 0;
  h.chan = 0; /* duplicate of an established channel */
  ok &= stray_dropped(&c->listen_addr, &h, sizeof h);
  EXPECT(ok, "stray connections were not all dropped");
  return ok;
}

/* ---- direct messages ---------------------------------------------------- */

/* Message sizes around SHARC_TCP_DIRECT_BYTES (default 256 KiB), larger
 * than the 4 MiB staging ring, and not multiples of the 64-byte padding. */
static const size_t dsizes[] = {1,        262144, 300001,          64,
                                5u << 20, 100,    (8u << 20) + 3,  262143,
                                1u << 20, 7,      (3u << 20) + 65, 262208};
#define NDSIZE (sizeof dsizes / sizeof dsizes[0])
#define NDMSG (3 * NDSIZE) /* every size in every mode combination */
#define DSLICE ((size_t)262144)

typedef struct {
  struct sharc_comm *comm;
  transport_conn_t *c;
  int ok;
  char why[300];
} dworker_t;

/* Waits on the doorbell seen before the last attempt, up to the deadline. */
static int dwait(struct sharc_comm *comm, uint32_t seen, uint64_t deadline) {
  if (time_ns() > deadline)
    return 0;
  comm_wait(comm, seen, 100000000ull);
  return 1;
}

/* Message i: the sender goes direct unless i % 3 == 2 (it then stages it,
 * as under SHARC_FAULT); the receiver calls recv_begin unless i % 2 == 1
 * and takes what it offers (tcp: inline; 2 would mean recv_copy). The wire
 * is the same either way. */
static void *dsender(void *arg) {
  dworker_t *w = arg;
  uint64_t dl = time_ns() + 60000000000ull;
  uint8_t *buf = malloc((9u << 20) + 64);
  for (size_t i = 0; i < NDMSG && buf; i++) {
    size_t bytes = dsizes[i % NDSIZE], wire = transport_wire_bytes(bytes);
    stream_t s = {w->c, (uint32_t)(i * 7919 % PRIME), 0, bytes};
    pattern(&s, buf, bytes, 0);
    int r = 0;
    if (i % 3 != 2) {
      for (;;) {
        uint32_t seen = atomic_load(&w->comm->wake->doorbell);
        if ((r = tp->send_begin(w->c, buf, bytes)) >= 0)
          break;
        if (!dwait(w->comm, seen, dl))
          goto timeout;
      }
    }
    if (r == 1) { /* the buffer stays ours until send_done */
      for (;;) {
        uint32_t seen = atomic_load(&w->comm->wake->doorbell);
        if (tp->send_done(w->c))
          break;
        if (!dwait(w->comm, seen, dl))
          goto timeout;
      }
      memset(buf, 0xee, bytes); /* reusing it cannot change what was sent */
      continue;
    }
    for (size_t done = 0; done < wire;) {
      uint32_t seen = atomic_load(&w->comm->wake->doorbell);
      void *p;
      size_t k = SHARC_MIN(tp->send_space(w->c, &p), wire - done);
      if (k) {
        if (done < bytes)
          memcpy(p, buf + done, SHARC_MIN(k, bytes - done));
        tp->send_commit(w->c, k);
        done += k;
      } else if (!dwait(w->comm, seen, dl)) {
        goto timeout;
      }
    }
  }
  w->ok = buf != NULL;
  free(buf);
  return NULL;
timeout:
  snprintf(w->why, sizeof w->why, "sender: no progress for 60 s");
  free(buf);
  return NULL;
}

static void *dreceiver(void *arg) {
  dworker_t *w = arg;
  uint64_t dl = time_ns() + 60000000000ull;
  uint8_t *buf = malloc((9u << 20) + 64), *bounce = malloc(DSLICE);
  for (size_t i = 0; i < NDMSG && buf && bounce; i++) {
    size_t bytes = dsizes[i % NDSIZE], wire = transport_wire_bytes(bytes);
    stream_t s = {w->c, (uint32_t)(i * 7919 % PRIME), 0, bytes};
    const void *direct = NULL;
    if (i % 4 == 0)
      usleep(20000); /* let the ring fill with the message's start */
    int r = i % 2 == 1 ? 0 : tp->recv_begin(w->c, bytes, &direct);
    if (r < 0 || r == 1) {
      snprintf(w->why, sizeof w->why, "recv_begin returned %d", r);
      goto out;
    }
    if (r == 2) {
      /* In slices, as the executor does: into place, or (as for a
       * reduction) into the same bounce buffer each time. */
      int use_bounce = i % 3 == 0;
      for (size_t off = 0; off < bytes;) {
        size_t n = SHARC_MIN(DSLICE, bytes - off);
        uint8_t *dst = use_bounce ? bounce : buf + off;
        uint32_t seen = atomic_load(&w->comm->wake->doorbell);
        if (tp->recv_copy(w->c, dst, off, n) != SHARC_OK) {
          if (tp->check(w->c) != SHARC_OK) {
            snprintf(w->why, sizeof w->why, "check: %s", err_last());
            goto out;
          }
          if (!dwait(w->comm, seen, dl))
            goto timeout;
          continue;
        }
        s.done = off;
        if (pattern(&s, dst, n, 1)) {
          snprintf(w->why, sizeof w->why,
                   "message %zu (%zu bytes, direct): bad bytes in %zu..%zu", i,
                   bytes, off, off + n);
          goto out;
        }
        off += n;
      }
      tp->recv_done(w->c);
      continue;
    }
    for (size_t done = 0; done < wire;) {
      uint32_t seen = atomic_load(&w->comm->wake->doorbell);
      const void *p;
      size_t k = SHARC_MIN(tp->recv_avail(w->c, &p), wire - done);
      if (k && done == 0 && ((uintptr_t)p & 63)) { /* see direct_partial */
        snprintf(w->why, sizeof w->why,
                 "message %zu (%zu bytes, staged) starts at ring offset "
                 "%zu mod 64",
                 i, bytes, (size_t)((uintptr_t)p & 63));
        goto out;
      }
      if (k) {
        if (done < bytes) {
          s.done = done;
          if (pattern(&s, (uint8_t *)p, SHARC_MIN(k, bytes - done), 1)) {
            snprintf(w->why, sizeof w->why,
                     "message %zu (%zu bytes, staged): bad bytes near %zu", i,
                     bytes, done);
            goto out;
          }
        }
        tp->recv_release(w->c, k);
        done += k;
      } else if (!dwait(w->comm, seen, dl)) {
        goto timeout;
      }
    }
  }
  w->ok = buf && bounce;
  goto out;
timeout:
  snprintf(w->why, sizeof w->why, "receiver: no progress for 60 s");
out:
  free(buf);
  free(bounce);
  return NULL;
}

/* Both directions at once on both channels: rank 0 -> 1 and 1 -> 0. */
static void direct_messages(void) {
  struct sharc_comm *cs[2];
  make_comms(cs, 2, 0x3003, 0x33);
  for (int r = 0; r < 2; r++)
    EXPECT(tp->setup(cs[r]) == SHARC_OK, "%s", err_last());
  EXPECT(tp->send_begin && tp->send_done && tp->recv_begin,
         "tcp has no direct-send hooks");
  uint64_t dl = time_ns() + 5000000000ull;
  dworker_t w[2 * 2 * NCHAN];
  pthread_t th[2 * 2 * NCHAN];
  int nw = 0;
  uint64_t t0 = time_ns();
  for (int r = 0; r < 2; r++)
    for (int ch = 0; ch < NCHAN; ch++) {
      dworker_t *tx = &w[nw], *rx = &w[nw + 1];
      *tx = (dworker_t){cs[r], NULL, 0, {0}};
      *rx = (dworker_t){cs[1 - r], NULL, 0, {0}};
      EXPECT(tp->connect(cs[r], 1 - r, ch, 1, dl, &tx->c) == SHARC_OK, "%s",
             err_last());
      EXPECT(tp->connect(cs[1 - r], r, ch, 0, dl, &rx->c) == SHARC_OK, "%s",
             err_last());
      if (!tx->c || !rx->c)
        return;
      pthread_create(&th[nw], NULL, dsender, tx);
      pthread_create(&th[nw + 1], NULL, dreceiver, rx);
      nw += 2;
    }
  for (int i = 0; i < nw; i++) {
    pthread_join(th[i], NULL);
    EXPECT(w[i].ok, "%s %d: %s", i % 2 ? "receiver" : "sender", i / 2,
           w[i].why);
  }
  for (int r = 0; r < 2; r++)
    EXPECT(!atomic_load(&cs[r]->fail.failed), "rank %d failed: %s", r,
           BROKEN(cs[r]));
  printf("tcp: %zu direct and staged messages each way on %d channels in "
         "%.2f s\n",
         (size_t)NDMSG, NCHAN, (double)(time_ns() - t0) / 1e9);
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
}

/* ---- a direct receive that begins in the ring ---------------------------- */

/* The bug that withdrew the first direct receives (tcp_throughput.md,
 * section 7): the progress thread had read the start of a message into the
 * rx ring when the executor took the socket; the rest came straight from
 * the socket, the ring's counters did not move over those bytes, and every
 * later staged message started off its 64-byte alignment in the ring. The
 * executor reduces whole elements from the contiguous bytes recv_avail
 * gives, so an element split at the ring's wrap stopped it for good. Here
 * the first PART bytes of a direct message reach the ring before
 * recv_begin; then staged messages of 8-byte elements, more than the ring
 * holds, are read whole elements at a time as a reduction reads them. */
#define PART 100
#define NSTAGED 12
#define BIG 300001 /* bytes of the direct message */

typedef struct {
  dworker_t tx, rx;
  _Atomic int begun; /* the receiver called recv_begin */
  _Atomic int quit;  /* the receiver stopped: so does the sender */
} partial_t;

static size_t staged_bytes(size_t i) { return 1000008 - 8 * i; }

/* Commits bytes [from, to) of message s (payload, then padding). */
static int put(partial_t *x, stream_t *s, size_t from, size_t to, uint64_t dl) {
  while (from < to) {
    uint32_t seen = atomic_load(&x->tx.comm->wake->doorbell);
    void *p;
    size_t k = SHARC_MIN(tp->send_space(x->tx.c, &p), to - from);
    if (k) {
      if (from < s->total) {
        s->done = from;
        pattern(s, p, SHARC_MIN(k, s->total - from), 0);
      }
      tp->send_commit(x->tx.c, k);
      from += k;
    } else if (atomic_load(&x->quit) || !dwait(x->tx.comm, seen, dl)) {
      return 0;
    }
  }
  return 1;
}

static void *psender(void *arg) {
  partial_t *x = arg;
  uint64_t dl = time_ns() + 30000000000ull;
  stream_t s = {x->tx.c, 4242, 0, BIG};
  /* staged on this side, so that the receiver can see the start alone */
  if (!put(x, &s, 0, PART, dl))
    goto fail;
  while (!atomic_load(&x->begun)) {
    if (atomic_load(&x->quit) || time_ns() > dl)
      goto fail;
    usleep(1000);
  }
  if (!put(x, &s, PART, transport_wire_bytes(BIG), dl))
    goto fail;
  for (size_t i = 0; i < NSTAGED; i++) {
    stream_t t = {x->tx.c, (uint32_t)(i * 7919 % PRIME), 0, staged_bytes(i)};
    if (!put(x, &t, 0, transport_wire_bytes(t.total), dl))
      goto fail;
  }
  x->tx.ok = 1;
  return NULL;
fail:
  snprintf(x->tx.why, sizeof x->tx.why, "stopped");
  return NULL;
}

/* Reads staged message i as a reduction does: whole 8-byte elements from
 * the contiguous bytes recv_avail gives, waiting while less than one is
 * there. An element split at the ring's wrap never becomes whole. */
static int read_elements(dworker_t *w, size_t i, uint64_t dl) {
  size_t bytes = staged_bytes(i), wire = transport_wire_bytes(bytes);
  stream_t t = {w->c, (uint32_t)(i * 7919 % PRIME), 0, bytes};
  uint64_t stuck = time_ns() + 5000000000ull;
  for (size_t done = 0; done < wire;) {
    uint32_t seen = atomic_load(&w->comm->wake->doorbell);
    const void *p;
    size_t k = SHARC_MIN(tp->recv_avail(w->c, &p), wire - done);
    if (k && done == 0 && ((uintptr_t)p & 63)) {
      snprintf(w->why, sizeof w->why,
               "staged message %zu after the direct one starts at ring "
               "offset %zu mod 64",
               i, (size_t)((uintptr_t)p & 63));
      return 0;
    }
    size_t data = done < bytes ? SHARC_MIN(k, bytes - done) : k;
    if (done < bytes)
      data -= data % 8;
    if (data == 0) {
      if (k && time_ns() > stuck) {
        snprintf(w->why, sizeof w->why,
                 "staged message %zu: an element is split at the ring's "
                 "wrap (%zu contiguous bytes at payload offset %zu for 5 s)",
                 i, k, done);
        return 0;
      }
      if (!dwait(w->comm, seen, dl)) {
        snprintf(w->why, sizeof w->why, "no progress for 30 s");
        return 0;
      }
      continue;
    }
    if (done < bytes) {
      t.done = done;
      if (pattern(&t, (uint8_t *)p, data, 1)) {
        snprintf(w->why, sizeof w->why, "staged message %zu: bad bytes", i);
        return 0;
      }
      if (done + data < bytes)
        k = data; /* the padding goes with the payload's end */
    }
    tp->recv_release(w->c, k);
    done += k;
    stuck = time_ns() + 5000000000ull;
  }
  return 1;
}

static void *preceiver(void *arg) {
  partial_t *x = arg;
  dworker_t *w = &x->rx;
  uint64_t dl = time_ns() + 30000000000ull;
  uint8_t *buf = malloc(BIG);
  const void *p, *direct;
  for (;;) { /* the start, alone in the ring */
    uint32_t seen = atomic_load(&w->comm->wake->doorbell);
    if (tp->recv_avail(w->c, &p) >= PART)
      break;
    if (!dwait(w->comm, seen, dl)) {
      snprintf(w->why, sizeof w->why, "the first bytes did not arrive");
      goto out;
    }
  }
  int r = buf ? tp->recv_begin(w->c, BIG, &direct) : -1;
  atomic_store(&x->begun, 1);
  if (r != 2) { /* SHARC_TCP_DIRECT_BYTES is 0 or above BIG */
    snprintf(w->why, sizeof w->why, "recv_begin returned %d, not 2", r);
    goto out;
  }
  for (size_t off = 0; off < BIG;) {
    size_t n = SHARC_MIN(DSLICE, BIG - off);
    uint32_t seen = atomic_load(&w->comm->wake->doorbell);
    if (tp->recv_copy(w->c, buf + off, off, n) == SHARC_OK)
      off += n;
    else if (!dwait(w->comm, seen, dl)) {
      snprintf(w->why, sizeof w->why, "direct message: no progress");
      goto out;
    }
  }
  tp->recv_done(w->c);
  stream_t s = {w->c, 4242, 0, BIG};
  if (pattern(&s, buf, BIG, 1)) {
    snprintf(w->why, sizeof w->why, "direct message: bad bytes");
    goto out;
  }
  for (size_t i = 0; i < NSTAGED; i++)
    if (!read_elements(w, i, dl))
      goto out;
  w->ok = 1;
out:
  if (!w->ok)
    atomic_store(&x->quit, 1);
  atomic_store(&x->begun, 1);
  free(buf);
  return NULL;
}

static void direct_partial(void) {
  struct sharc_comm *cs[2];
  make_comms(cs, 2, 0x3004, 0x44);
  for (int r = 0; r < 2; r++)
    EXPECT(tp->setup(cs[r]) == SHARC_OK, "%s", err_last());
  uint64_t dl = time_ns() + 5000000000ull;
  partial_t x = {{cs[0], NULL, 0, {0}}, {cs[1], NULL, 0, {0}}, 0, 0};
  EXPECT(tp->connect(cs[0], 1, 0, 1, dl, &x.tx.c) == SHARC_OK, "%s",
         err_last());
  EXPECT(tp->connect(cs[1], 0, 0, 0, dl, &x.rx.c) == SHARC_OK, "%s",
         err_last());
  if (!x.tx.c || !x.rx.c)
    return;
  pthread_t th[2];
  pthread_create(&th[0], NULL, psender, &x);
  pthread_create(&th[1], NULL, preceiver, &x);
  pthread_join(th[0], NULL);
  pthread_join(th[1], NULL);
  EXPECT(x.rx.ok, "receiver: %s", x.rx.why);
  EXPECT(x.tx.ok || !x.rx.ok, "sender: %s", x.tx.why);
  for (int r = 0; r < 2; r++)
    free_comm(cs[r]);
}

int main(void) {
  pattern_init();
  tp = &transport_tcp;
  setenv("SHARC_DEBUG", "NONE", 0); /* the drops below WARN by design */
  uint64_t t0 = time_ns();
  contract_stream(strays);
  direct_messages();
  direct_partial();
  contract_goodbye();
  contract_peer_lost(NCHAN + 1); /* a data socket per channel, one control */
  contract_fault();              /* last: SHARC_FAULT is read once */
  printf("test_tcp: %d passed, %d failed (%.1f s)\n", passed, failed,
         (double)(time_ns() - t0) / 1e9);
  return failed ? 1 : 0;
}

/*
 * p2p_check.c - sharc_send / sharc_recv and groups on real ranks (run by
 * sharcrun, every rank the same program):
 *
 *   p2p_check [--quick]     the sweep: every dtype x count {0, 1, 7, 1000,
 *                           1048579} as a ring exchange in a group (each
 *                           rank posting send and receive in its own
 *                           order; blocking and on a host stream) and
 *                           without a group; messages of one pair matched
 *                           in order; a burst of 100 messages of rank 0's
 *                           before the last rank receives, one call at a
 *                           time and in a group; 100 broadcasts of rank
 *                           0's (48 B-32 KiB) before the last rank takes
 *                           part, likewise; all-to-all's blocks by
 *                           grouped sends
 *                           and receives to every peer (itself included),
 *                           posted in a different order on every rank;
 *                           sharc_all_to_allv with uneven and empty blocks;
 *                           a group spanning two communicators posted in
 *                           opposite orders by neighbouring ranks; empty,
 *                           nested, failed and cancelled groups; bad
 *                           arguments.
 *                           --quick: the large count for two dtypes only.
 *   p2p_check --mem cuda    the rings and all pairs on device buffers through
 *                           a CUDA-bound stream (exit 77 without a device);
 *                           with SHARC_CUDA_PATH=ipc also a size mismatch
 *                           and a host buffer, refused on both ranks.
 *   p2p_check --unmatched   (3+ ranks, SHARC_TIMEOUT small) rank 0 sends 64
 *                           MiB to rank 1, which receives from rank 2
 *                           instead, which posts nothing: ranks 0 and 1
 *                           fail with SHARC_ERR_TIMEOUT naming the peer
 *                           they wait on, within the timeout.
 *   p2p_check --mismatch    (2+ ranks, SHARC_CHECK=1) rank 0 sends 100 f32
 *                           to rank 1, which receives 99: both fail with
 *                           SHARC_ERR_MISMATCH naming both sides alike;
 *                           then rank 0 sends while rank 1 calls
 *                           sharc_all_reduce: both name the other's call;
 *                           then sharc_all_to_allv where rank 1 expects 2
 *                           elements from rank 0, which sends 1: named.
 *
 * Payloads are bytes of a hash of (sender, receiver, message tag, byte
 * index), so every rank knows what it must receive. Exit 0 when every check
 * passed, 1 otherwise (each failure printed with the rank).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sharc.h"

static int me, nr, failures;
static sharc_comm_t world;

#define BIG 1048579
static const size_t counts[] = {0, 1, 7, 1000, BIG};
#define NCOUNTS (sizeof counts / sizeof counts[0])

static void fail(const char *fmt, const char *what, long a, long b) {
  if (failures++ < 10) {
    printf("rank %d: FAIL %s: ", me, what);
    printf(fmt, a, b);
    printf("\n");
  }
}

static void check_st(sharc_status_t st, sharc_comm_t comm, const char *what) {
  if (st != SHARC_OK && failures++ < 10)
    printf("rank %d: FAIL %s: %s: %s\n", me, what, sharc_status_name(st),
           comm ? sharc_comm_last_error(comm) : sharc_last_error());
}

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Byte i of the message from src to dst with tag t. */
static uint8_t pat(int src, int dst, int t, size_t i) {
  uint64_t w = mix(((uint64_t)src << 48) ^ ((uint64_t)dst << 32) ^
                   ((uint64_t)t << 20) ^ (i >> 3));
  return (uint8_t)(w >> (8 * (i & 7)));
}

static void fill(uint8_t *p, size_t n, int src, int dst, int t) {
  for (size_t i = 0; i < n; i++)
    p[i] = pat(src, dst, t, i);
}

/* 1 if p holds the message; reports the first wrong byte. */
static int verify(const uint8_t *p, size_t n, int src, int dst, int t,
                  const char *what) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != pat(src, dst, t, i)) {
      char w[160];
      snprintf(w, sizeof w, "%s (from rank %d, tag %d) byte %zu", what, src, t,
               i);
      fail("expected %ld, got %ld", w, pat(src, dst, t, i), p[i]);
      return 0;
    }
  return 1;
}

static size_t dsize(int dt) { return sharc_dtype_size((sharc_dtype_t)dt); }

/* A buffer the transfers use: host memory, or (--mem cuda) device memory
 * with a host twin that fills and checks it. The twins are copied on the
 * CUDA stream the calls run on (dev_cs), so the device buffers are filled
 * before the calls read or write them: a cudaMemcpy from pageable memory
 * to the device returns before the copy landed, on the legacy stream, which
 * a cudaStreamNonBlocking stream does not wait for (on a GPU the receive
 * buffer's fill then overwrote what was received). */
static int on_device;
typedef struct {
  uint8_t *h;
  void *d;
  size_t n;
} mbuf_t;

#ifdef SHARC_HAVE_CUDA
#include <cuda_runtime.h>
static cudaStream_t dev_cs; /* --mem cuda: the calls' CUDA stream */
static void cuda_check(cudaError_t e, const char *what) {
  if (e != cudaSuccess && failures++ < 10)
    printf("rank %d: FAIL %s: %s\n", me, what, cudaGetErrorString(e));
}
#endif

static mbuf_t mb_new(size_t n) {
  mbuf_t b = {malloc(n ? n : 1), NULL, n};
#ifdef SHARC_HAVE_CUDA
  if (on_device)
    cuda_check(cudaMalloc(&b.d, n ? n : 1), "cudaMalloc");
#endif
  return b;
}
static void *mb_ptr(const mbuf_t *b) { return on_device ? b->d : b->h; }
/* host twin -> device buffer, queued on dev_cs before the calls (the twin
 * stays unchanged until the calls were synchronised) */
static void mb_push(const mbuf_t *b) {
#ifdef SHARC_HAVE_CUDA
  if (on_device)
    cuda_check(
        cudaMemcpyAsync(b->d, b->h, b->n, cudaMemcpyHostToDevice, dev_cs),
        "cudaMemcpyAsync to the device");
#else
  (void)b;
#endif
}
/* device buffer -> host twin, after the calls on dev_cs */
static void mb_pull(const mbuf_t *b) {
#ifdef SHARC_HAVE_CUDA
  if (on_device) {
    cuda_check(
        cudaMemcpyAsync(b->h, b->d, b->n, cudaMemcpyDeviceToHost, dev_cs),
        "cudaMemcpyAsync from the device");
    cuda_check(cudaStreamSynchronize(dev_cs), "cudaStreamSynchronize");
  }
#else
  (void)b;
#endif
}
static void mb_free(mbuf_t *b) {
  free(b->h);
#ifdef SHARC_HAVE_CUDA
  if (b->d)
    cudaFree(b->d);
#endif
}

/* Ring exchange of count elements of dt, tag t: send to r+1, receive from
 * r-1; in a group (even ranks post the receive first) or without one (even
 * ranks send first, odd ranks receive first: no cycle of waits). */
static void ring(int dt, size_t count, int t, int grouped,
                 sharc_stream_t stream) {
  size_t bytes = count * dsize(dt);
  int to = (me + 1) % nr, from = (me + nr - 1) % nr;
  if (nr == 1 && !grouped)
    return; /* one rank: only a group pairs a send to itself */
  mbuf_t sb = mb_new(bytes + 1), rb = mb_new(bytes + 1);
  uint8_t *r = rb.h;
  fill(sb.h, bytes, me, to, t);
  memset(r, 0xEE, bytes + 1);
  mb_push(&sb);
  mb_push(&rb);
  void *s = mb_ptr(&sb), *rd = mb_ptr(&rb);
  sharc_dtype_t d = (sharc_dtype_t)dt;
  char what[96];
  snprintf(what, sizeof what, "ring %s%s%s %s x %zu",
           grouped ? "group" : "no-group", stream ? " stream" : "",
           on_device ? " device" : "", sharc_dtype_name(d), count);
  sharc_status_t st = SHARC_OK, st2;
  if (grouped) {
    sharc_group_start();
    if (me % 2 == 0) {
      st = sharc_recv(rd, count, d, from, world, stream);
      st2 = sharc_send(s, count, d, to, world, stream);
    } else {
      st = sharc_send(s, count, d, to, world, stream);
      st2 = sharc_recv(rd, count, d, from, world, stream);
    }
    st = st != SHARC_OK ? st : st2;
    st2 = sharc_group_end();
    st = st != SHARC_OK ? st : st2;
  } else if (me % 2 == 0) {
    st = sharc_send(s, count, d, to, world, stream);
    if (st == SHARC_OK)
      st = sharc_recv(rd, count, d, from, world, stream);
  } else {
    st = sharc_recv(rd, count, d, from, world, stream);
    if (st == SHARC_OK)
      st = sharc_send(s, count, d, to, world, stream);
  }
  if (st == SHARC_OK && stream)
    st = sharc_stream_synchronize(stream);
  check_st(st, world, what);
  mb_pull(&rb);
  if (st == SHARC_OK)
    verify(r, bytes, from, me, t, what);
  if (r[bytes] != 0xEE)
    fail("byte past the end changed: %ld -> %ld", what, 0xEE, r[bytes]);
  mb_free(&sb);
  mb_free(&rb);
}

/* Three messages of different sizes and types from rank 0 to the last
 * rank, no group: received in posting order. */
static void ordering(void) {
  int last = nr - 1;
  if (nr < 2 || (me != 0 && me != last))
    return;
  static const size_t n[3] = {7, 300000, 1};
  static const int dt[3] = {SHARC_U8, SHARC_F64, SHARC_I32};
  for (int k = 0; k < 3; k++) {
    size_t bytes = n[k] * dsize(dt[k]);
    uint8_t *b = malloc(bytes);
    sharc_status_t st;
    if (me == 0) {
      fill(b, bytes, 0, last, 100 + k);
      st = sharc_send(b, n[k], (sharc_dtype_t)dt[k], last, world, NULL);
    } else {
      st = sharc_recv(b, n[k], (sharc_dtype_t)dt[k], 0, world, NULL);
      if (st == SHARC_OK)
        verify(b, bytes, 0, last, 100 + k, "ordering");
    }
    check_st(st, world, "ordering");
    free(b);
  }
}

/* Rank 0 runs ahead of the last rank, which starts receiving only after
 * 50 ms: BURST messages of sizes around the shm framing's bounds (48 bytes
 * in the header, 8 KiB whole in the FIFO, FIFO-sized) posted one call at a
 * time, then once more in one group, more than the FIFO's 32 header slots
 * hold, so the sender must wait for slots and the receiver wake it. Each
 * message is checked. */
#define BURST 100
static void burst(void) {
  static const size_t sz[] = {8, 48, 49, 1000, 4096, 5000, 8192, 8193, 0};
  const size_t nsz = sizeof sz / sizeof sz[0];
  int last = nr - 1;
  if (nr < 2 || (me != 0 && me != last))
    return;
  uint8_t *b[BURST];
  for (int i = 0; i < BURST; i++)
    b[i] = malloc(sz[i % nsz] + 1);
  for (int grouped = 0; grouped < 2; grouped++) {
    int t0 = 200 + grouped * BURST;
    if (me == last)
      usleep(50000);
    if (grouped)
      check_st(sharc_group_start(), world, "burst group start");
    for (int i = 0; i < BURST; i++) {
      size_t n = sz[i % nsz];
      sharc_status_t st;
      if (me == 0) {
        fill(b[i], n, 0, last, t0 + i);
        st = sharc_send(b[i], n, SHARC_U8, last, world, NULL);
      } else {
        memset(b[i], 0, n);
        st = sharc_recv(b[i], n, SHARC_U8, 0, world, NULL);
      }
      check_st(st, world, "burst");
    }
    if (grouped)
      check_st(sharc_group_end(), world, "burst group end");
    if (me == last)
      for (int i = 0; i < BURST; i++)
        if (!verify(b[i], sz[i % nsz], 0, last, t0 + i, "burst"))
          break;
  }
  for (int i = 0; i < BURST; i++)
    free(b[i]);
}

/* Broadcasts from rank 0 ahead of a late receiver. The root is done with
 * a broadcast of up to 8 KiB once its bytes are out, so it issues all of
 * them while the last rank sleeps: sizes in the header (48 B), in a slot of
 * the root's shared-memory outbox (49 B-8 KiB, one copy read by every
 * receiver) and past it (the FIFOs), more of them than the outbox has
 * slots (16; a late reader can hold 32 headers), so the root finds slots the
 * late rank still holds and sends through the FIFOs instead. One call at a
 * time, then in a group; every rank checks every message. */
#define BCAST_AHEAD 100
static void bcast_ahead(void) {
  static const size_t sz[] = {48, 49, 1000, 4096, 8192, 8193, 32768};
  const size_t nsz = sizeof sz / sizeof sz[0];
  if (nr < 2)
    return;
  uint8_t *b[BCAST_AHEAD];
  for (int i = 0; i < BCAST_AHEAD; i++)
    b[i] = malloc(sz[i % nsz]);
  for (int grouped = 0; grouped < 2; grouped++) {
    int t0 = 500 + grouped * BCAST_AHEAD;
    if (me == nr - 1)
      usleep(50000);
    if (grouped)
      check_st(sharc_group_start(), world, "broadcast ahead group start");
    for (int i = 0; i < BCAST_AHEAD; i++) {
      size_t n = sz[i % nsz];
      if (me == 0)
        fill(b[i], n, 0, 0, t0 + i);
      else
        memset(b[i], 0, n);
      check_st(sharc_broadcast(b[i], b[i], n, SHARC_U8, 0, world, NULL), world,
               "broadcast ahead");
    }
    if (grouped)
      check_st(sharc_group_end(), world, "broadcast ahead group end");
    for (int i = 0; i < BCAST_AHEAD; i++)
      if (!verify(b[i], sz[i % nsz], 0, 0, t0 + i, "broadcast ahead"))
        break;
  }
  for (int i = 0; i < BCAST_AHEAD; i++)
    free(b[i]);
}

/* All-to-all's blocks by one group of sends and receives with every rank,
 * itself included, posted in an order of this rank's own; compared with
 * sharc_all_to_all of the same input. */
static void all_pairs(size_t count, sharc_stream_t stream) {
  size_t bytes = count * 4, all = bytes * (size_t)nr;
  mbuf_t sb = mb_new(all), rb = mb_new(all), refb = mb_new(all);
  for (int p = 0; p < nr; p++)
    fill(sb.h + (size_t)p * bytes, bytes, me, p, 7);
  memset(rb.h, 0, all);
  mb_push(&sb);
  mb_push(&rb);
  uint8_t *s = mb_ptr(&sb), *r = mb_ptr(&rb);
  int *order = malloc(2 * (size_t)nr * sizeof *order);
  for (int i = 0; i < 2 * nr; i++)
    order[i] = i;
  uint64_t h = mix((uint64_t)me + 1);
  for (int i = 2 * nr - 1; i > 0; i--) { /* shuffle per rank */
    h = mix(h);
    int j = (int)(h % (uint64_t)(i + 1)), x = order[i];
    order[i] = order[j];
    order[j] = x;
  }
  sharc_group_start();
  for (int i = 0; i < 2 * nr; i++) {
    int p = order[i] / 2;
    if (order[i] % 2)
      sharc_send(s + (size_t)p * bytes, count, SHARC_F32, p, world, stream);
    else
      sharc_recv(r + (size_t)p * bytes, count, SHARC_F32, p, world, stream);
  }
  sharc_status_t st = sharc_group_end();
  if (st == SHARC_OK && stream)
    st = sharc_stream_synchronize(stream);
  char what[64];
  snprintf(what, sizeof what, "all pairs f32 x %zu%s%s", count,
           stream ? " stream" : "", on_device ? " device" : "");
  check_st(st, world, what);
  mb_pull(&rb);
  for (int p = 0; p < nr && st == SHARC_OK; p++)
    if (!verify(rb.h + (size_t)p * bytes, bytes, p, me, 7, what))
      break;
  st = sharc_all_to_all(s, mb_ptr(&refb), count, SHARC_F32, world, stream);
  if (st == SHARC_OK && stream)
    st = sharc_stream_synchronize(stream);
  check_st(st, world, "all_to_all reference");
  mb_pull(&refb);
  if (st == SHARC_OK && memcmp(refb.h, rb.h, all))
    fail("differs from sharc_all_to_all (%ld, %ld)", what, 0, 0);
  free(order);
  mb_free(&sb);
  mb_free(&rb);
  mb_free(&refb);
}

/* sharc_all_to_allv: rank r sends c(r, p) doubles to rank p (zero for
 * some pairs), blocks packed with a gap of 3 elements in peer order on the
 * send side and in reverse peer order on the receive side; the gaps stay
 * untouched. */
static size_t a2av_count(int r, int p) {
  return (size_t)((r + 2 * p) % 4) * 333 + (r == p ? 5 : 0);
}

static void all_to_allv(sharc_stream_t stream) {
  size_t *sc = malloc(4 * (size_t)nr * sizeof *sc);
  size_t *sd = sc + nr, *rc = sc + 2 * nr, *rd = sc + 3 * nr;
  size_t so = 0, ro = 0;
  for (int p = 0; p < nr; p++) {
    sc[p] = a2av_count(me, p);
    sd[p] = so;
    so += sc[p] + 3;
  }
  for (int p = nr - 1; p >= 0; p--) {
    rc[p] = a2av_count(p, me);
    rd[p] = ro;
    ro += rc[p] + 3;
  }
  mbuf_t sb = mb_new(so * 8), rb = mb_new(ro * 8);
  for (int p = 0; p < nr; p++)
    fill(sb.h + sd[p] * 8, sc[p] * 8, me, p, 13);
  memset(rb.h, 0xEE, ro * 8);
  mb_push(&sb);
  mb_push(&rb);
  sharc_status_t st = sharc_all_to_allv(mb_ptr(&sb), sc, sd, mb_ptr(&rb), rc,
                                        rd, SHARC_F64, world, stream);
  if (st == SHARC_OK && stream)
    st = sharc_stream_synchronize(stream);
  char what[64];
  snprintf(what, sizeof what, "all_to_allv%s%s", stream ? " stream" : "",
           on_device ? " device" : "");
  check_st(st, world, what);
  mb_pull(&rb);
  for (int p = 0; p < nr && st == SHARC_OK; p++) {
    if (!verify(rb.h + rd[p] * 8, rc[p] * 8, p, me, 13, what))
      break;
    for (size_t g = 0; g < 24; g++)
      if (rb.h[(rd[p] + rc[p]) * 8 + g] != 0xEE) {
        fail("gap byte after block %ld changed (%ld)", what, p, g);
        break;
      }
  }
  mb_free(&sb);
  mb_free(&rb);
  free(sc);
}

/* A group spanning two communicators (the same ranks, two orders): even
 * ranks post all_reduce on a, then b, then a ring on b; odd ranks the
 * reverse. Blocking calls on both: each runs on its own thread. */
static void two_comms(sharc_comm_t a, sharc_comm_t b) {
  size_t n = 100000;
  float *x = malloc(n * sizeof *x), *ya = malloc(n * sizeof *ya),
        *yb = malloc(n * sizeof *yb);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(me + 1);
  int rb = 0, nb = 1;
  sharc_comm_rank(b, &rb);
  sharc_comm_size(b, &nb);
  size_t bytes = 4096;
  uint8_t *s = malloc(bytes), *r = malloc(bytes);
  fill(s, bytes, rb, (rb + 1) % nb, 9);
  sharc_status_t st[5] = {SHARC_OK, SHARC_OK, SHARC_OK, SHARC_OK, SHARC_OK};
  sharc_group_start();
  if (me % 2 == 0) {
    st[0] = sharc_all_reduce(x, ya, n, SHARC_F32, SHARC_SUM, a, NULL);
    st[1] = sharc_all_reduce(x, yb, n, SHARC_F32, SHARC_SUM, b, NULL);
    st[2] = sharc_send(s, bytes, SHARC_U8, (rb + 1) % nb, b, NULL);
    st[3] = sharc_recv(r, bytes, SHARC_U8, (rb + nb - 1) % nb, b, NULL);
  } else {
    st[3] = sharc_recv(r, bytes, SHARC_U8, (rb + nb - 1) % nb, b, NULL);
    st[2] = sharc_send(s, bytes, SHARC_U8, (rb + 1) % nb, b, NULL);
    st[1] = sharc_all_reduce(x, yb, n, SHARC_F32, SHARC_SUM, b, NULL);
    st[0] = sharc_all_reduce(x, ya, n, SHARC_F32, SHARC_SUM, a, NULL);
  }
  st[4] = sharc_group_end();
  for (int i = 0; i < 5; i++)
    check_st(st[i], NULL, "two communicators in one group");
  float want = (float)nr * (float)(nr + 1) / 2;
  if (st[4] == SHARC_OK) {
    if (ya[0] != want || ya[n - 1] != want || yb[0] != want ||
        yb[n - 1] != want)
      fail("all_reduce result %ld (want %ld)", "two communicators", (long)ya[0],
           (long)want);
    verify(r, bytes, (rb + nb - 1) % nb, rb, 9, "two communicators ring");
  }
  free(x);
  free(ya);
  free(yb);
  free(s);
  free(r);
}

/* Groups with nothing, nested groups, a failed group, bad arguments. */
static void groups_and_args(void) {
  check_st(sharc_group_start(), NULL, "empty group start");
  check_st(sharc_group_end(), NULL, "empty group end");
  sharc_status_t st = sharc_group_end();
  if (st != SHARC_ERR_INVALID_ARG || !strstr(sharc_last_error(), "no group"))
    fail("group_end without start: status %ld%ld", "groups", st, 0);
  /* nested: only the outer end issues */
  uint8_t s[64], r[64];
  int to = (me + 1) % nr, from = (me + nr - 1) % nr;
  fill(s, sizeof s, me, to, 11);
  sharc_group_start();
  sharc_group_start();
  sharc_send(s, sizeof s, SHARC_U8, to, world, NULL);
  check_st(sharc_group_end(), NULL, "inner group end");
  sharc_recv(r, sizeof r, SHARC_U8, from, world, NULL);
  check_st(sharc_group_end(), NULL, "nested group");
  verify(r, sizeof r, from, me, 11, "nested group");
  /* a bad call fails the group: nothing of it is issued */
  sharc_group_start();
  sharc_send(s, sizeof s, SHARC_U8, to, world, NULL);
  st = sharc_recv(r, sizeof r, SHARC_U8, nr, world, NULL);
  if (st != SHARC_ERR_INVALID_ARG)
    fail("recv from peer nranks: status %ld%ld", "bad peer", st, 0);
  st = sharc_group_end();
  if (st != SHARC_ERR_INVALID_ARG ||
      !strstr(sharc_last_error(), "nothing of the group was issued"))
    fail("group_end after a failed call: status %ld%ld", "failed group", st, 0);
  /* the communicator still works: nothing was issued, on any rank */
  check_st(sharc_barrier(world, NULL), world, "barrier after failed group");
  /* a cancelled group (two levels open) issues nothing either, and the
   * exchange after it gets the later message, not the dropped one */
  sharc_group_start();
  sharc_group_start();
  sharc_send(s, sizeof s, SHARC_U8, to, world, NULL);
  check_st(sharc_group_cancel(), NULL, "cancel");
  st = sharc_group_cancel();
  if (st != SHARC_ERR_INVALID_ARG || !strstr(sharc_last_error(), "no group"))
    fail("cancel without a group: status %ld%ld", "cancel", st, 0);
  fill(s, sizeof s, me, to, 12);
  sharc_group_start();
  sharc_send(s, sizeof s, SHARC_U8, to, world, NULL);
  sharc_recv(r, sizeof r, SHARC_U8, from, world, NULL);
  check_st(sharc_group_end(), NULL, "group after cancel");
  verify(r, sizeof r, from, me, 12, "group after cancel");
  if (sharc_send(s, 1, (sharc_dtype_t)99, to, world, NULL) !=
      SHARC_ERR_INVALID_ARG)
    fail("bad dtype accepted%ld%ld", "args", 0, 0);
  if (sharc_send(NULL, 1, SHARC_U8, to, world, NULL) != SHARC_ERR_INVALID_ARG)
    fail("NULL buf accepted%ld%ld", "args", 0, 0);
  if (sharc_recv(r, 1, SHARC_U8, -1, world, NULL) != SHARC_ERR_INVALID_ARG)
    fail("peer -1 accepted%ld%ld", "args", 0, 0);
  if (sharc_send(s, 1, SHARC_U8, 0, NULL, NULL) != SHARC_ERR_INVALID_ARG)
    fail("NULL comm accepted%ld%ld", "args", 0, 0);
  check_st(sharc_send(NULL, 0, SHARC_U8, to, world, NULL), world,
           "count 0 send");
  /* to itself outside a group: no receive can pair with it */
  st = sharc_send(s, 8, SHARC_U8, me, world, NULL);
  if (st != SHARC_ERR_INVALID_ARG || !strstr(sharc_last_error(), "itself"))
    fail("send to self alone: status %ld%ld", "self", st, 0);
  check_st(sharc_barrier(world, NULL), world, "barrier after args");
}

static int run_sweep(int quick) {
  sharc_stream_t stream;
  check_st(sharc_stream_create(&stream), NULL, "stream");
  int t = 0;
  for (int dt = 0; dt < SHARC_DTYPE_COUNT; dt++)
    for (size_t c = 0; c < NCOUNTS; c++) {
      if (quick && counts[c] == BIG && dt != SHARC_F32 && dt != SHARC_BF16)
        continue;
      ring(dt, counts[c], t++, 1, dt % 2 ? stream : NULL);
      ring(dt, counts[c], t++, 0, dt % 2 ? NULL : stream);
    }
  ordering();
  burst();
  bcast_ahead();
  all_pairs(1000, NULL);
  all_pairs(70000, stream);
  all_to_allv(NULL);
  all_to_allv(stream);
  sharc_comm_t a = NULL, b = NULL;
  check_st(sharc_comm_split(world, 0, me, &a), world, "split a");
  check_st(sharc_comm_split(world, 0, nr - me, &b), world, "split b");
  if (a && b)
    two_comms(a, b);
  groups_and_args();
  sharc_comm_destroy(a);
  sharc_comm_destroy(b);
  check_st(sharc_stream_destroy(stream), NULL, "stream destroy");
  return failures;
}

#ifndef SHARC_HAVE_CUDA
static int run_device_sweep(int quick) {
  (void)quick;
  return 77;
}
#else
/* One failing send/recv between ranks 0 and 1 on a communicator and a
 * CUDA-bound stream of its own (both end failed): the status and a piece
 * of the message each rank must see. */
static void ipc_refusal(const char *what, sharc_status_t want, void *sbuf,
                        size_t scount, void *rbuf, size_t rcount,
                        const char *msg) {
  sharc_comm_t c = NULL;
  check_st(sharc_comm_split(world, me <= 1 ? 0 : 1, me, &c), world, "split");
  if (me <= 1 && c) {
    cudaStream_t cs = NULL;
    sharc_stream_t s = NULL;
    cuda_check(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking),
               "cudaStreamCreate");
    check_st(sharc_stream_create_cuda(&s, cs), world, "cuda stream");
    sharc_status_t st = me == 0 ? sharc_send(sbuf, scount, SHARC_F32, 1, c, s)
                                : sharc_recv(rbuf, rcount, SHARC_F32, 0, c, s);
    if (st == SHARC_OK)
      st = sharc_stream_synchronize(s);
    const char *m = sharc_comm_last_error(c);
    printf("rank %d: %s: %s: %s\n", me, what, sharc_status_name(st), m);
    if (st != want || !strstr(m, msg))
      fail("status %ld, want %ld", what, st, want);
    sharc_stream_destroy(s);
    cudaStreamDestroy(cs);
  }
  sharc_comm_destroy(c);
}

/* SHARC_CUDA_PATH=ipc: what the CUDA IPC path refuses in a send/recv
 * batch, on both ranks alike: sizes that differ, host memory. */
static void ipc_refusals(void) {
  const char *path = getenv("SHARC_CUDA_PATH");
  if (!path || strcmp(path, "ipc") || nr < 2)
    return;
  void *d = NULL;
  float h[100] = {0};
  cuda_check(cudaMalloc(&d, 100 * sizeof(float)), "cudaMalloc");
  ipc_refusal("ipc size mismatch", SHARC_ERR_MISMATCH, d, 100, d, 99,
              "rank 0's send #0 to rank 1 is 100 x float but rank 1's "
              "receive #0 from rank 0 is 99 x float");
  ipc_refusal("ipc host memory", SHARC_ERR_INVALID_ARG, h, 100, d, 100,
              "rank 0's send #0 to rank 1 is host memory");
  cudaFree(d);
}

/* --mem cuda: the rings and all pairs on device buffers, through a
 * CUDA-bound stream (the staged path, or the ipc path when chosen; the
 * all_to_all reference takes the chosen path on one host); device memory
 * on a host stream refused; with SHARC_CUDA_PATH=ipc what that path
 * refuses. */
static int run_device_sweep(int quick) {
  int local = 0, ndev = 0;
  sharc_comm_local_rank(world, &local);
  cudaGetDeviceCount(&ndev);
  cudaStream_t cs = NULL;
  cuda_check(cudaSetDevice(local % ndev), "cudaSetDevice");
  cuda_check(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking),
             "cudaStreamCreate");
  dev_cs = cs;
  sharc_stream_t ds = NULL, hs = NULL;
  check_st(sharc_stream_create_cuda(&ds, cs), world, "cuda stream");
  check_st(sharc_stream_create(&hs), world, "host stream");
  if (failures)
    return failures;
  int t = 0;
  for (int dt = 0; dt < SHARC_DTYPE_COUNT; dt++)
    for (size_t c = 0; c < NCOUNTS; c++) {
      if (quick && counts[c] == BIG && dt != SHARC_F32 && dt != SHARC_BF16)
        continue;
      ring(dt, counts[c], t++, 1, ds);
      ring(dt, counts[c], t++, 0, ds);
    }
  all_pairs(1000, ds);
  all_pairs(70000, ds);
  all_to_allv(ds);
  mbuf_t b = mb_new(64);
  sharc_status_t st = sharc_send(b.d, 64, SHARC_U8, (me + 1) % nr, world, hs);
  if (st != SHARC_ERR_INVALID_ARG || !strstr(sharc_last_error(), "device"))
    fail("device memory on a host stream: status %ld%ld", "device args", st, 0);
  mb_free(&b);
  check_st(sharc_barrier(world, NULL), world, "barrier");
  ipc_refusals();
  check_st(sharc_stream_destroy(ds), world, "cuda stream destroy");
  check_st(sharc_stream_destroy(hs), world, "host stream destroy");
  cudaStreamDestroy(cs);
  return failures;
}
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 0 sends to rank 1, which receives from rank 2, which sends
 * nothing: both time out naming the peer. */
static int run_unmatched(void) {
  if (nr < 3) {
    if (me == 0)
      printf("SKIP: --unmatched needs 3 ranks\n");
    return 77;
  }
  const char *tv = getenv("SHARC_TIMEOUT");
  double limit = (tv ? atof(tv) : 300) + 5;
  /* more than tcp buffers in the kernel and the transport (a send that
   * fits completes before its receive is posted, as MPI_Send may) */
  size_t n = 64u << 20;
  uint8_t *b = calloc(n, 1);
  /* one communicator per wait: a failure of one does not end the other */
  sharc_comm_t c1 = NULL, c2 = NULL;
  check_st(sharc_comm_split(world, 0, me, &c1), world, "split");
  check_st(sharc_comm_split(world, 0, me, &c2), world, "split");
  double t0 = now_s();
  sharc_status_t st = SHARC_OK;
  const char *want = NULL;
  sharc_comm_t c = NULL;
  if (me == 0) {
    st = sharc_send(b, n, SHARC_U8, 1, c = c1, NULL);
    want = "sending to rank 1";
  } else if (me == 1) {
    st = sharc_recv(b, n, SHARC_U8, 2, c = c2, NULL);
    want = "receiving from rank 2";
  }
  double took = now_s() - t0;
  if (want) {
    const char *msg = sharc_comm_last_error(c);
    printf("rank %d: %s after %.1f s: %s\n", me, sharc_status_name(st), took,
           msg);
    if (st != SHARC_ERR_TIMEOUT || !strstr(msg, want))
      fail("want SHARC_ERR_TIMEOUT, got status %ld (%ld)", want, st, 0);
    if (took > limit)
      fail("reported after %ld s, limit %ld", "unmatched", (long)took,
           (long)limit);
  }
  /* Rank 2 posts nothing; no rank leaves before both waits ended (a rank
   * that left would be reported lost instead). */
  while (now_s() - t0 < limit)
    usleep(100000);
  sharc_comm_destroy(c1);
  sharc_comm_destroy(c2);
  free(b);
  return failures;
}

/* SHARC_CHECK=1: a count mismatch, then a send met by a collective. */
static int run_mismatch(void) {
  if (nr < 2) {
    printf("SKIP: --mismatch needs 2 ranks\n");
    return 77;
  }
  sharc_comm_t c1 = NULL, c2 = NULL, c3 = NULL;
  check_st(sharc_comm_split(world, 0, me, &c1), world, "split");
  check_st(sharc_comm_split(world, 0, me, &c2), world, "split");
  check_st(sharc_comm_split(world, 0, me, &c3), world, "split");
  float x[100] = {0}, y[100];
  sharc_status_t st = SHARC_OK;
  if (me == 0)
    st = sharc_send(x, 100, SHARC_F32, 1, c1, NULL);
  else if (me == 1)
    st = sharc_recv(y, 99, SHARC_F32, 0, c1, NULL);
  const char *want =
      "rank 0's send #0 to rank 1 is 100 x float but rank 1's receive #0 "
      "from rank 0 is 99 x float";
  if (me <= 1) {
    const char *msg = sharc_comm_last_error(c1);
    printf("rank %d: %s: %s\n", me, sharc_status_name(st), msg);
    if (st != SHARC_ERR_MISMATCH || !strstr(msg, want))
      fail("count mismatch: status %ld%ld", "mismatch", st, 0);
  }
  /* rank 0 sends, rank 1 calls a collective (2 ranks: the others too) */
  if (nr == 2) {
    if (me == 0)
      st = sharc_send(x, 100, SHARC_F32, 1, c2, NULL);
    else
      st = sharc_all_reduce(x, y, 100, SHARC_F32, SHARC_SUM, c2, NULL);
    const char *msg = sharc_comm_last_error(c2);
    printf("rank %d: %s: %s\n", me, sharc_status_name(st), msg);
    const char *w =
        me == 0 ? "rank 1 called all_reduce" : "sharc_send/sharc_recv";
    if (st != SHARC_ERR_MISMATCH || !strstr(msg, w))
      fail("send met by all_reduce: status %ld%ld", "mismatch", st, 0);
  }
  /* all_to_allv: one element to and from every rank, but rank 1 expects
   * two from rank 0; the other pairs agree */
  size_t *a = calloc(4 * (size_t)nr, sizeof *a);
  float *ab = calloc(2 * (size_t)nr + 2, sizeof *ab);
  for (int p = 0; p < nr; p++) {
    a[p] = a[2 * nr + p] = 1;              /* sendcounts, recvcounts */
    a[nr + p] = a[3 * nr + p] = (size_t)p; /* displacements */
  }
  if (me == 1)
    a[2 * nr] = 2, a[3 * nr] = (size_t)nr; /* from rank 0: 2 at the end */
  st = sharc_all_to_allv(ab, a, a + nr, ab + nr, a + 2 * nr, a + 3 * nr,
                         SHARC_F32, c3, NULL);
  if (me <= 1) {
    const char *msg = sharc_comm_last_error(c3);
    printf("rank %d: %s: %s\n", me, sharc_status_name(st), msg);
    if (st != SHARC_ERR_MISMATCH ||
        !strstr(msg, "rank 0's send #0 to rank 1 is 1 x float but rank 1's "
                     "receive #0 from rank 0 is 2 x float"))
      fail("all_to_allv count mismatch: status %ld%ld", "mismatch", st, 0);
  }
  free(a);
  free(ab);
  sharc_comm_destroy(c1);
  sharc_comm_destroy(c2);
  sharc_comm_destroy(c3);
  return failures;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int mode = 0, quick = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--unmatched"))
      mode = 1;
    else if (!strcmp(argv[i], "--mismatch"))
      mode = 2;
    else if (!strcmp(argv[i], "--mem") && i + 1 < argc &&
             !strcmp(argv[i + 1], "cuda"))
      on_device = 1, i++;
    else {
      fprintf(stderr, "usage: p2p_check [--quick] [--mem cuda] | "
                      "--unmatched | --mismatch\n");
      return 2;
    }
  }
  if (on_device) { /* every rank decides alone, before any rendezvous */
    int ndev = 0;
#ifdef SHARC_HAVE_CUDA
    if (cudaGetDeviceCount(&ndev) != cudaSuccess)
      ndev = 0;
#endif
    if (ndev <= 0) {
      const char *r = getenv("SHARC_RANK");
      if (!r || !strcmp(r, "0"))
        printf("SKIP: no CUDA device (or built without CUDA)\n");
      return 77;
    }
  }
  sharc_status_t st = sharc_comm_init_env(&world);
  if (st != SHARC_OK) {
    printf("init failed: %s\n", sharc_last_error());
    return 1;
  }
  sharc_comm_rank(world, &me);
  sharc_comm_size(world, &nr);
  int rc = mode == 1   ? run_unmatched()
           : mode == 2 ? run_mismatch()
           : on_device ? run_device_sweep(quick)
                       : run_sweep(quick);
  sharc_comm_destroy(world);
  if (rc == 77)
    return 77;
  if (me == 0 || rc)
    printf("rank %d: p2p_check %s: %s\n", me,
           mode == 1   ? "--unmatched"
           : mode == 2 ? "--mismatch"
                       : "sweep",
           rc ? "FAILED" : "passed");
  return rc ? 1 : 0;
}

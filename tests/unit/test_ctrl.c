/*
 * test_ctrl.c - the network transports' control channel (ctrl.c), in the
 * mode where it accepts and dials itself (ib's): fake communicators on
 * 127.0.0.1, each with a progress thread polling its ctrl_t, exchange frames in
 * both directions (also frames queued before the socket exists), drop stray
 * connections, pass abort notices, tell a goodbye from a death, and refuse to
 * send to a dead peer.
 */
#include <sys/eventfd.h>

#include "ctrl.h"
#include "ib.h"
#include "ib_dev.h"
#include "ib_track.h"
#include "unit/expect.h"
#include "unit/transport_contract.h"

#define NMSG 300
#define T_DATA (CTRL_USER + 3)

typedef struct {
  struct sharc_comm *comm;
  ctrl_t *ibc;
  int efd;
  pthread_t th;
  _Atomic int stop;
  pthread_mutex_t lock; /* the logs below */
  int next[MAXR];       /* next sequence number expected from each rank */
  int bad[MAXR];        /* frames out of order or malformed */
  int lost[MAXR], lost_calls;
  int abort_from, abort_rank, abort_st;
} node_t;

typedef struct {
  int32_t src, dst, seq;
  uint8_t fill[100];
} data_t;

static void on_msg(void *arg, int peer, int type, const void *body,
                   size_t len) {
  node_t *n = arg;
  data_t d;
  memcpy(&d, body, sizeof d);
  pthread_mutex_lock(&n->lock);
  int ok = type == T_DATA && len == sizeof d && d.src == peer &&
           d.dst == n->comm->rank && d.seq == n->next[peer] &&
           d.fill[99] == (uint8_t)d.seq;
  if (ok)
    n->next[peer]++;
  else
    n->bad[peer]++;
  pthread_mutex_unlock(&n->lock);
}

static void on_lost(void *arg, int peer, int err) {
  node_t *n = arg;
  pthread_mutex_lock(&n->lock);
  n->lost[peer]++;
  n->lost_calls++;
  pthread_mutex_unlock(&n->lock);
}

static void on_abort(void *arg, int peer, int failed_rank, sharc_status_t st) {
  node_t *n = arg;
  pthread_mutex_lock(&n->lock);
  n->abort_from = peer;
  n->abort_rank = failed_rank;
  n->abort_st = st;
  pthread_mutex_unlock(&n->lock);
}

static void on_kick(void *arg) {
  uint64_t one = 1;
  ssize_t r = write(((node_t *)arg)->efd, &one, sizeof one);
  (void)r;
}

static void *progress(void *arg) {
  node_t *n = arg;
  while (!atomic_load(&n->stop)) {
    size_t k;
    int tmo;
    struct pollfd *pfd = ctrl_pollset(n->ibc, 1, &k, &tmo);
    if (!pfd)
      break;
    pfd[0] = (struct pollfd){n->efd, POLLIN, 0};
    poll(pfd, k, tmo);
    if (pfd[0].revents) {
      uint64_t v;
      ssize_t r = read(n->efd, &v, sizeof v);
      (void)r;
    }
    ctrl_handle(n->ibc, 1, k);
  }
  return NULL;
}

static void start(node_t *n, struct sharc_comm *c) {
  memset(n, 0, sizeof *n);
  n->comm = c;
  n->abort_from = -1;
  pthread_mutex_init(&n->lock, NULL);
  n->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ctrl_ops_t ops = {.name = "test",
                    .on_msg = on_msg,
                    .on_lost = on_lost,
                    .on_abort = on_abort,
                    .kick = on_kick,
                    .arg = n};
  EXPECT(ctrl_create(c, &ops, &n->ibc) == SHARC_OK, "%s", err_last());
  pthread_create(&n->th, NULL, progress, n);
}

static void stop(node_t *n) {
  atomic_store(&n->stop, 1);
  on_kick(n);
  pthread_join(n->th, NULL);
  ctrl_destroy(n->ibc);
  close(n->efd);
  pthread_mutex_destroy(&n->lock);
}

static int got(node_t *n, int from) {
  pthread_mutex_lock(&n->lock);
  int v = n->next[from];
  pthread_mutex_unlock(&n->lock);
  return v;
}

static int wait_until(int (*cond)(node_t *, int), node_t *n, int arg,
                      int want) {
  uint64_t end = time_ns() + 5000000000ull;
  while (cond(n, arg) != want && time_ns() < end)
    usleep(2000);
  return cond(n, arg) == want;
}

static int lost_of(node_t *n, int peer) {
  pthread_mutex_lock(&n->lock);
  int v = n->lost[peer];
  pthread_mutex_unlock(&n->lock);
  return v;
}

static int state_of(node_t *n, int peer) {
  return ctrl_peer_state(n->ibc, peer);
}

/* ---- stray connections: the hello layout of ctrl.c -------------------- */

typedef struct {
  uint32_t magic;
  uint16_t type, len;
  int32_t a, b;
  uint32_t version, pad;
  uint64_t uid;
  uint8_t token[SHARC_TOKEN_BYTES];
  int32_t rank, nranks;
  uint8_t rest[232 - 40];
} fake_frame_t;

static int dropped(const net_addr_t *addr, const void *msg, size_t len) {
  int fd;
  if (net_connect(addr, time_ns() + 2000000000ull, &fd) != SHARC_OK)
    return 0;
  if (net_send_all(fd, msg, len, time_ns() + 2000000000ull) != SHARC_OK) {
    close(fd);
    return 1;
  }
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char b[16];
  ssize_t n = recv(fd, b, sizeof b, 0);
  close(fd);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

static void strays(struct sharc_comm *c) {
  fake_frame_t f;
  memset(&f, 0, sizeof f);
  f.magic = 0x43494853u;
  f.type = 1;
  f.len = 40;
  f.version = 1;
  f.uid = c->uid;
  memcpy(f.token, c->token, sizeof f.token);
  f.rank = 0;
  f.nranks = c->nranks;
  _Static_assert(sizeof f == 248, "one frame");
  fake_frame_t g = f;
  memset(g.token, 0x11, sizeof g.token);
  EXPECT(dropped(&c->listen_addr, &g, sizeof g), "wrong token accepted");
  g = f;
  g.uid++;
  EXPECT(dropped(&c->listen_addr, &g, sizeof g), "other comm accepted");
  g = f;
  g.rank = c->rank;
  EXPECT(dropped(&c->listen_addr, &g, sizeof g), "a non-lower rank accepted");
  g = f;
  g.nranks++;
  EXPECT(dropped(&c->listen_addr, &g, sizeof g), "another job size accepted");
  g = f;
  g.version = 2;
  EXPECT(dropped(&c->listen_addr, &g, sizeof g), "version 2 accepted");
  g = f;
  g.magic ^= 1;
  EXPECT(dropped(&c->listen_addr, &g, sizeof g), "bad magic accepted");
  char junk[248];
  memset(junk, 'x', sizeof junk);
  EXPECT(dropped(&c->listen_addr, junk, sizeof junk), "junk accepted");
  EXPECT(dropped(&c->listen_addr, &f, sizeof f),
         "a duplicate of rank 0's connection accepted");
}

/* ---- tests ----------------------------------------------------------------
 */

/* Frees the fake communicators of make_comms. */
static void free_comms(struct sharc_comm **cs, int n) {
  for (int r = 0; r < n; r++) {
    if (cs[r]->listen_fd >= 0)
      close(cs[r]->listen_fd);
    free(cs[r]->peers);
    pthread_mutex_destroy(&cs[r]->err_lock);
    pthread_mutex_destroy(&cs[r]->order_lock);
    pthread_cond_destroy(&cs[r]->order_cond);
    free(cs[r]);
  }
}

static void send_all(node_t *nodes, int n) {
  for (int seq = 0; seq < NMSG; seq++)
    for (int s = 0; s < n; s++)
      for (int d = 0; d < n; d++) {
        if (s == d)
          continue;
        data_t m = {s, d, seq, {0}};
        m.fill[99] = (uint8_t)seq;
        sharc_status_t st = ctrl_send(nodes[s].ibc, d, T_DATA, &m, sizeof m);
        if (st != SHARC_OK)
          EXPECT(0, "send %d -> %d #%d: %s", s, d, seq, err_last());
      }
}

static void test_ctrl(void) {
  enum { N = 3 };
  struct sharc_comm *cs[N];
  node_t nodes[N];
  make_comms(cs, N, 0x4004, 0x33);
  for (int r = 0; r < N; r++)
    start(&nodes[r], cs[r]);
  /* Rank 2 queues its frames before anybody dialed it. */
  for (int seq = 0; seq < 5; seq++)
    for (int d = 0; d < 2; d++) {
      data_t m = {2, d, seq, {0}};
      m.fill[99] = (uint8_t)seq;
      EXPECT(ctrl_send(nodes[2].ibc, d, T_DATA, &m, sizeof m) == SHARC_OK,
             "queue before the dial: %s", err_last());
    }
  EXPECT(state_of(&nodes[2], 0) == CTRL_PEER_NONE, "no socket yet");
  uint64_t dl = time_ns() + 5000000000ull;
  for (int s = 0; s < N; s++)
    for (int d = 0; d < N; d++)
      if (s != d)
        EXPECT(ctrl_connect(nodes[s].ibc, d, dl) == SHARC_OK, "%d -> %d: %s", s,
               d, err_last());
  EXPECT(ctrl_connect(nodes[0].ibc, 0, dl) == SHARC_ERR_INVALID_ARG,
         "connect to self accepted");
  for (int d = 0; d < 2; d++)
    EXPECT(wait_until(got, &nodes[d], 2, 5),
           "rank %d got %d of rank 2's "
           "early frames",
           d, got(&nodes[d], 2));
  /* Both directions at once, in order, on every pair. */
  for (int s = 0; s < N; s++)
    for (int d = 0; d < N; d++)
      if (s != d)
        nodes[d].next[s] = 0;
  send_all(nodes, N);
  for (int s = 0; s < N; s++)
    for (int d = 0; d < N; d++)
      if (s != d) {
        EXPECT(wait_until(got, &nodes[d], s, NMSG),
               "rank %d got %d of %d "
               "frames from rank %d",
               d, got(&nodes[d], s), NMSG, s);
        EXPECT(nodes[d].bad[s] == 0, "rank %d: %d bad frames from %d", d,
               nodes[d].bad[s], s);
      }
  strays(cs[2]);
  EXPECT(state_of(&nodes[2], 0) == CTRL_PEER_UP, "strays disturbed rank 0");

  /* An abort notice. */
  ctrl_abort_all(nodes[0].ibc, 2, SHARC_ERR_TIMEOUT);
  for (int r = 1; r < N; r++) {
    uint64_t end = time_ns() + 3000000000ull;
    int from = -1;
    while (time_ns() < end) {
      pthread_mutex_lock(&nodes[r].lock);
      from = nodes[r].abort_from;
      pthread_mutex_unlock(&nodes[r].lock);
      if (from >= 0)
        break;
      usleep(2000);
    }
    EXPECT(from == 0 && nodes[r].abort_rank == 2 &&
               nodes[r].abort_st == SHARC_ERR_TIMEOUT,
           "rank %d: abort from %d, rank %d, status %d", r, from,
           nodes[r].abort_rank, nodes[r].abort_st);
  }

  /* Rank 1 leaves cleanly: a goodbye, then its sockets close. */
  ctrl_bye_all(nodes[1].ibc);
  stop(&nodes[1]);
  for (int r = 0; r < N; r += 2) {
    EXPECT(wait_until(state_of, &nodes[r], 1, CTRL_PEER_BYE),
           "rank %d sees rank 1 as %d", r, state_of(&nodes[r], 1));
    usleep(50000);
    EXPECT(lost_of(&nodes[r], 1) == 0, "rank %d: a goodbye read as a death", r);
  }
  EXPECT(ctrl_send(nodes[0].ibc, 1, T_DATA, "x", 1) == SHARC_ERR_PEER_LOST,
         "sending to a departed rank accepted");

  /* Rank 2 dies: its sockets close without a goodbye. */
  int k = kill_sockets_on_port(net_addr_port(&cs[2]->listen_addr));
  EXPECT(k >= 1, "no socket accepted by rank 2");
  EXPECT(wait_until(lost_of, &nodes[0], 2, 1), "rank 0 missed rank 2's death");
  EXPECT(state_of(&nodes[0], 2) == CTRL_PEER_LOST, "state %d",
         state_of(&nodes[0], 2));
  EXPECT(ctrl_send(nodes[0].ibc, 2, T_DATA, "x", 1) == SHARC_ERR_PEER_LOST,
         "sending to a dead rank accepted");
  EXPECT(strstr(LAST(cs[0]), "rank 2 (host host2)"), "message: %s",
         LAST(cs[0]));
  stop(&nodes[0]);
  stop(&nodes[2]);
  free_comms(cs, N);
}

/* Two ranks leave one after the other: the second still says goodbye to
 * the first, whose socket would otherwise end without one, a death to the
 * first rank, which it would report to every rank still at work. */
static void test_both_leave(void) {
  struct sharc_comm *cs[2];
  node_t nodes[2];
  make_comms(cs, 2, 0x6006, 0x55);
  for (int r = 0; r < 2; r++)
    start(&nodes[r], cs[r]);
  uint64_t dl = time_ns() + 5000000000ull;
  for (int r = 0; r < 2; r++)
    EXPECT(ctrl_connect(nodes[r].ibc, 1 - r, dl) == SHARC_OK, "%d: %s", r,
           err_last());
  EXPECT(wait_until(state_of, &nodes[1], 0, CTRL_PEER_UP), "rank 1 sees %d",
         state_of(&nodes[1], 0));
  ctrl_bye_all(nodes[0].ibc); /* rank 0 leaves first ... */
  EXPECT(wait_until(state_of, &nodes[1], 0, CTRL_PEER_BYE), "rank 1 sees %d",
         state_of(&nodes[1], 0));
  ctrl_bye_all(nodes[1].ibc); /* ... rank 1 follows and closes */
  stop(&nodes[1]);
  EXPECT(wait_until(state_of, &nodes[0], 1, CTRL_PEER_BYE),
         "rank 0 sees rank 1 as %d, not as gone cleanly",
         state_of(&nodes[0], 1));
  usleep(50000);
  EXPECT(lost_of(&nodes[0], 1) == 0, "rank 1's goodbye read as a death");
  stop(&nodes[0]);
  free_comms(cs, 2);
}

/* A lower rank that cannot reach its peer reports it, by name. */
static void test_unreachable(void) {
  struct sharc_comm *cs[2];
  node_t n0;
  make_comms(cs, 2, 0x5005, 0x44);
  close(cs[1]->listen_fd); /* nobody listens there now */
  cs[1]->listen_fd = -1;
  start(&n0, cs[0]);
  sharc_status_t st = ctrl_connect(n0.ibc, 1, time_ns() + 300000000ull);
  EXPECT(st == SHARC_ERR_TIMEOUT || st == SHARC_ERR_NET, "status %d", st);
  EXPECT(strstr(LAST(cs[0]), "rank 1 (host host1)"), "message: %s",
         LAST(cs[0]));
  stop(&n0);
  free_comms(cs, 2);
}

int main(void) {
  setenv("SHARC_DEBUG", "NONE", 0); /* the strays WARN by design */
  uint64_t t0 = time_ns();
  test_ctrl();
  test_both_leave();
  test_unreachable();
  printf("test_ctrl: %d passed, %d failed (%.1f s)\n", passed, failed,
         (double)(time_ns() - t0) / 1e9);
  return failed ? 1 : 0;
}

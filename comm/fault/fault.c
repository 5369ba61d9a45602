/*
 * fault.c - SHARC_FAULT, fault injection for tests (syntax in fault.h).
 *
 * The spec is parsed once into a small table; fault_on is set only when a
 * fault targets this process, and only then does fault_wrap put its layer
 * around the transports (below), so every other rank runs them bare.
 * Byte counters and the fired flags are atomics: collectives of different
 * communicators may run on different threads at once.
 */
#include "fault.h"
#include "registry.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAULT_MAX 8    /* faults in one spec */
#define FAULT_DROPS 16 /* connections one process can drop */
#define FAULT_MAX_MS 600000

typedef enum { F_KILL, F_DROP, F_DELAY, F_CORRUPT } fault_kind_t;
typedef enum {
  P_SEND,
  P_RECV,
  P_SAVE,
  P_STEP,
  P_PAYLOAD,
  P_HEADER
} fault_point_t;

typedef struct {
  fault_kind_t kind;
  fault_point_t point;
  int rank;
  long ms;        /* delay */
  uint64_t after; /* bytes sent (received) before it fires */
  _Atomic int fired;
  char text[48]; /* the fault as written, for messages */
} fault_t;

_Atomic int fault_on;

static fault_t faults[FAULT_MAX];
static int nfaults;
static int my_rank = -1;
static sharc_status_t init_status;
static char init_msg[256];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Atomic int init_rank = -1; /* the first fault_init caller's */

static _Atomic uint64_t bytes_sent, bytes_recv;
static const transport_conn_t *_Atomic dropped[FAULT_DROPS];

/* ---- parsing ---- */

/* A decimal integer, all of s. */
static int parse_int(const char *s, long max, long *out) {
  char *end;
  if (*s < '0' || *s > '9')
    return -1;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v > max)
    return -1;
  *out = v;
  return 0;
}

/* Bytes with an optional K, M or G suffix. */
static int parse_bytes(const char *s, uint64_t *out) {
  char *end;
  if (*s < '0' || *s > '9')
    return -1;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  int shift = 0;
  if (*end == 'K' || *end == 'k')
    shift = 10;
  else if (*end == 'M' || *end == 'm')
    shift = 20;
  else if (*end == 'G' || *end == 'g')
    shift = 30;
  if (shift)
    end++;
  if (errno || *end || v > (UINT64_MAX >> shift))
    return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

/* One fault "kind:R:..." (already split at ','): fills f or records why
 * not in why. */
static int parse_one(char *text, fault_t *f, char *why, size_t len) {
  char *field[5] = {0};
  int nf = 0;
  for (char *save = NULL, *t = strtok_r(text, ":", &save); t;
       t = strtok_r(NULL, ":", &save)) {
    if (nf == 5) {
      snprintf(why, len, "too many ':' fields");
      return -1;
    }
    field[nf++] = t;
  }
  long rank;
  if (nf < 2 || parse_int(field[1], 1 << 24, &rank)) {
    snprintf(why, len, "the second field must be a rank (0, 1, ...)");
    return -1;
  }
  f->rank = (int)rank;
  f->after = 0;
  const char *k = field[0], *p = nf > 2 ? field[2] : "";
  const char *b = nf > 3 ? field[3] : NULL;
  if (!strcmp(k, "save_kill")) {
    if (nf != 2) {
      snprintf(why, len, "save_kill takes only a rank: save_kill:R");
      return -1;
    }
    f->kind = F_KILL;
    f->point = P_SAVE;
    return 0;
  }
  if (!strcmp(k, "kill") || !strcmp(k, "drop")) {
    f->kind = k[0] == 'k' ? F_KILL : F_DROP;
    if (!strcmp(p, "send"))
      f->point = P_SEND;
    else if (!strcmp(p, "recv"))
      f->point = P_RECV;
    else if (!strcmp(p, "save") && f->kind == F_KILL)
      f->point = P_SAVE;
    else if (!strcmp(p, "step") && f->kind == F_KILL)
      f->point = P_STEP; /* the engine's own: kill:R:step[:N] */
    else {
      snprintf(why, len, "%s needs a point: %s", k,
               f->kind == F_KILL ? "send, recv, save or step" : "send or recv");
      return -1;
    }
    if (f->point == P_SAVE && nf > 3) {
      snprintf(why, len, "kill:R:save takes no byte count");
      return -1;
    }
  } else if (!strcmp(k, "delay")) {
    f->kind = F_DELAY;
    f->point = P_SEND;
    if (nf < 3 || parse_int(p, FAULT_MAX_MS, &f->ms)) {
      snprintf(why, len, "delay needs milliseconds 0..%d: delay:R:MS[:B]",
               FAULT_MAX_MS);
      return -1;
    }
  } else if (!strcmp(k, "corrupt")) {
    f->kind = F_CORRUPT;
    if (!strcmp(p, "payload"))
      f->point = P_PAYLOAD;
    else if (!strcmp(p, "header"))
      f->point = P_HEADER;
    else {
      snprintf(why, len, "corrupt needs what: payload or header");
      return -1;
    }
  } else {
    snprintf(why, len, "unknown kind '%s'", k);
    return -1;
  }
  if (nf > 4 || (b && parse_bytes(b, &f->after))) {
    snprintf(why, len, "the last field must be a byte count (K, M, G ok)");
    return -1;
  }
  return 0;
}

/* Parses spec into out[] (up to FAULT_MAX); -1 with why filled. */
static int parse_spec(const char *spec, fault_t *out, int *n, char *why,
                      size_t len) {
  char buf[512];
  if (strlen(spec) >= sizeof buf) {
    snprintf(why, len, "longer than %zu characters", sizeof buf - 1);
    return -1;
  }
  snprintf(buf, sizeof buf, "%s", spec);
  *n = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t;
       t = strtok_r(NULL, ",", &save)) {
    if (*n == FAULT_MAX) {
      snprintf(why, len, "more than %d faults", FAULT_MAX);
      return -1;
    }
    fault_t *f = &out[*n];
    memset(f, 0, sizeof *f);
    snprintf(f->text, sizeof f->text, "%s", t);
    char one[sizeof buf]; /* parse_one cuts it up; text stays for messages */
    snprintf(one, sizeof one, "%s", t);
    char reason[160];
    if (parse_one(one, f, reason, sizeof reason)) {
      snprintf(why, len, "'%s': %s", f->text, reason);
      return -1;
    }
    (*n)++;
  }
  if (*n == 0) {
    snprintf(why, len, "no fault given");
    return -1;
  }
  return 0;
}

static void fault_header(int peer, void *hdr, size_t len, const char *what);

static const char *help =
    "use kill:R:send|recv[:B], kill:R:save, kill:R:step[:N], save_kill:R, "
    "drop:R:send|recv[:B], delay:R:MS[:B], corrupt:R:payload|header[:B] "
    "(comma-separated; see comm/fault/fault.h)";

static void init_fn(void) {
  const char *spec = param_str(PARAM_FAULT);
  my_rank = atomic_load(&init_rank);
  if (!*spec)
    return;
  char why[256];
  if (parse_spec(spec, faults, &nfaults, why, sizeof why)) {
    nfaults = 0;
    init_status = SHARC_ERR_INVALID_ARG;
    snprintf(init_msg, sizeof init_msg, "%s", why);
    return;
  }
  int mine = 0;
  for (int i = 0; i < nfaults; i++)
    mine |= faults[i].rank == my_rank;
  if (mine)
    WARN(SUB_ALL,
         "SHARC_FAULT=%s: fault injection is on for rank %d "
         "(tests only)",
         spec, my_rank);
  for (int i = 0; i < nfaults; i++)
    if (faults[i].rank == my_rank && faults[i].kind == F_CORRUPT &&
        faults[i].point == P_HEADER)
      atomic_store_explicit(&transport_header_hook, fault_header,
                            memory_order_release);
  atomic_store(&fault_on, mine);
}

sharc_status_t fault_init(int rank) {
  /* The first caller's rank counts. A caller whose exchange fails has
   * read the winner's rank, so init_fn sees it on whichever thread runs
   * it; the once hands the table to every later caller. */
  int none = -1;
  atomic_compare_exchange_strong(&init_rank, &none, rank);
  pthread_once(&init_once, init_fn);
  if (init_status != SHARC_OK)
    return err_set(init_status,
                   "SHARC_FAULT=%s: %s; %s (fault injection is for tests "
                   "only; unset SHARC_FAULT otherwise)",
                   param_str(PARAM_FAULT), init_msg, help);
  return SHARC_OK;
}

/* ---- firing ---- */

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The first unfired fault of kind/point for this rank whose byte count is
 * reached; claims it (fires once). */
static fault_t *due(fault_kind_t kind, fault_point_t point, uint64_t moved) {
  for (int i = 0; i < nfaults; i++) {
    fault_t *f = &faults[i];
    if (f->kind == kind && f->point == point && f->rank == my_rank &&
        moved >= f->after && !atomic_load(&f->fired) &&
        !atomic_exchange(&f->fired, 1))
      return f;
  }
  return NULL;
}

static void die(const fault_t *f, const char *what, uint64_t moved) {
  WARN(SUB_ALL,
       "SHARC_FAULT %s: rank %d raising SIGKILL after %llu bytes "
       "%s at %.3f",
       f->text, my_rank, (unsigned long long)moved, what, wall_s());
  raise(SIGKILL);
}

static void drop(const fault_t *f, transport_conn_t *c, uint64_t moved) {
  const transport_t *in = c->tp->inner;
  WARN(SUB_ALL,
       "SHARC_FAULT %s: rank %d drops its %s connection to rank %d "
       "(channel %d, %s) after %llu bytes %s at %.3f",
       f->text, my_rank, in->name, c->peer, c->chan,
       c->is_send ? "sending" : "receiving", (unsigned long long)moved,
       c->is_send ? "sent" : "received", wall_s());
  for (int i = 0; i < FAULT_DROPS; i++) {
    const transport_conn_t *none = NULL;
    if (atomic_compare_exchange_strong(&dropped[i], &none, c))
      break;
  }
  if (in->fault_drop)
    in->fault_drop(c);
}

static int conn_dropped(const transport_conn_t *c) {
  for (int i = 0; i < FAULT_DROPS; i++)
    if (atomic_load(&dropped[i]) == c)
      return 1;
  return 0;
}

/* ---- the wrapping layer ----------------------------------------------------
 * A copy of each transport's vtable whose data-path entries count the bytes
 * and fire the faults before handing on to the transport (tp->inner);
 * connect marks the connection framed_only, so every byte passes here. */

/* The chunk send_space last handed out on this thread: the executor writes
 * it and commits it before it asks for another. */
static _Thread_local void *last_space;

static size_t w_send_space(transport_conn_t *c, void **ptr) {
  if (conn_dropped(c))
    return 0;
  uint64_t sent = atomic_load(&bytes_sent);
  fault_t *f;
  if ((f = due(F_KILL, P_SEND, sent)))
    die(f, "sent", sent);
  if ((f = due(F_DROP, P_SEND, sent))) {
    drop(f, c, sent);
    return 0;
  }
  if ((f = due(F_DELAY, P_SEND, sent))) {
    /* stalled here, this rank waits on nobody: peers that time out follow
     * their waits to it */
    transport_publish_wait(c->comm, -1);
    WARN(SUB_ALL,
         "SHARC_FAULT %s: rank %d sleeps %ld ms before sending to rank %d "
         "after %llu bytes sent at %.3f",
         f->text, my_rank, f->ms, c->peer, (unsigned long long)sent, wall_s());
    struct timespec ts = {f->ms / 1000, (f->ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  size_t n = c->tp->inner->send_space(c, ptr);
  last_space = n ? *ptr : NULL;
  return n;
}

static void w_send_commit(transport_conn_t *c, size_t bytes) {
  uint64_t sent = atomic_load(&bytes_sent);
  fault_t *f;
  if (bytes && last_space && (f = due(F_CORRUPT, P_PAYLOAD, sent))) {
    uint8_t *b = last_space;
    WARN(SUB_ALL,
         "SHARC_FAULT %s: rank %d flips payload byte 0x%02x -> 0x%02x of "
         "its send to rank %d after %llu bytes sent",
         f->text, my_rank, b[0], (uint8_t)~b[0], c->peer,
         (unsigned long long)sent);
    b[0] = (uint8_t)~b[0];
  }
  last_space = NULL;
  atomic_fetch_add_explicit(&bytes_sent, bytes, memory_order_relaxed);
  c->tp->inner->send_commit(c, bytes);
}

static size_t w_recv_avail(transport_conn_t *c, const void **ptr) {
  if (conn_dropped(c))
    return 0;
  size_t n = c->tp->inner->recv_avail(c, ptr);
  if (n == 0)
    return 0;
  uint64_t got = atomic_load(&bytes_recv);
  fault_t *f;
  if ((f = due(F_KILL, P_RECV, got)))
    die(f, "received", got);
  if ((f = due(F_DROP, P_RECV, got))) {
    drop(f, c, got);
    return 0;
  }
  return n;
}

static void w_recv_release(transport_conn_t *c, size_t bytes) {
  atomic_fetch_add_explicit(&bytes_recv, bytes, memory_order_relaxed);
  c->tp->inner->recv_release(c, bytes);
}

/* A dropped connection reads as its peer lost, from this end: the executor
 * then fails the communicator naming that peer and tells the others. */
static sharc_status_t w_check(transport_conn_t *c) {
  if (conn_dropped(c))
    return err_set(SHARC_ERR_PEER_LOST,
                   "rank %d: the %s connection (channel %d, %s) was dropped "
                   "by SHARC_FAULT",
                   c->peer, c->tp->inner->name, c->chan,
                   c->is_send ? "sending" : "receiving");
  return c->tp->inner->check(c);
}

static transport_t wrapped[TRANSPORT_COUNT];
static pthread_once_t wrap_once = PTHREAD_ONCE_INIT;

/* connect through wrapper w: the transport's connect, then the connection
 * answers to w and shows this layer every byte */
static sharc_status_t w_connect(const transport_t *w, struct sharc_comm *comm,
                                int peer, int chan, int is_send,
                                uint64_t deadline_ns, transport_conn_t **conn) {
  sharc_status_t st =
      w->inner->connect(comm, peer, chan, is_send, deadline_ns, conn);
  if (st == SHARC_OK) {
    (*conn)->tp = w;
    (*conn)->framed_only = 1;
    (*conn)->comm = comm;
  }
  return st;
}

/* One connect per registry slot: connect is given no vtable to tell which
 * wrapper it was called through. */
#define W_CONNECT(ID)                                                          \
  static sharc_status_t w_connect_##ID(                                        \
      struct sharc_comm *comm, int peer, int chan, int is_send,                \
      uint64_t deadline_ns, transport_conn_t **conn) {                         \
    return w_connect(&wrapped[ID], comm, peer, chan, is_send, deadline_ns,     \
                     conn);                                                    \
  }
W_CONNECT(TRANSPORT_SHM)
W_CONNECT(TRANSPORT_TCP)
W_CONNECT(TRANSPORT_IB)
_Static_assert(TRANSPORT_COUNT == 3, "a W_CONNECT line per transport");
static sharc_status_t (*const w_connects[TRANSPORT_COUNT])(
    struct sharc_comm *, int, int, int, uint64_t, transport_conn_t **) = {
    [TRANSPORT_SHM] = w_connect_TRANSPORT_SHM,
    [TRANSPORT_TCP] = w_connect_TRANSPORT_TCP,
    [TRANSPORT_IB] = w_connect_TRANSPORT_IB,
};

static void wrap_fn(void) {
  for (int i = 0; i < TRANSPORT_COUNT; i++) {
    const transport_t *in = transport_get((transport_id_t)i);
    transport_t *w = &wrapped[i];
    *w = *in;
    w->inner = in;
    w->connect = w_connects[i];
    w->send_space = w_send_space;
    w->send_commit = w_send_commit;
    w->recv_avail = w_recv_avail;
    w->recv_release = w_recv_release;
    w->check = w_check;
    w->device_send = NULL; /* every byte passes here, through the CPU */
  }
}

const transport_t *fault_wrap(const transport_t *tp) {
  if (!fault_enabled() || !tp || tp->inner)
    return tp;
  pthread_once(&wrap_once, wrap_fn);
  return &wrapped[tp->id];
}

static void fault_header(int peer, void *hdr, size_t len, const char *what) {
  uint64_t sent = atomic_load(&bytes_sent);
  fault_t *f = len ? due(F_CORRUPT, P_HEADER, sent) : NULL;
  if (!f)
    return;
  uint8_t *b = hdr;
  WARN(SUB_ALL,
       "SHARC_FAULT %s: rank %d flips byte 0 (0x%02x -> 0x%02x) of its %s "
       "to rank %d after %llu bytes sent",
       f->text, my_rank, b[0], (uint8_t)~b[0], what, peer,
       (unsigned long long)sent);
  b[0] = (uint8_t)~b[0];
}

/*
 * fault.c - SHARC_FAULT, fault injection for tests (syntax in fault.h).
 *
 * The spec is parsed once into a small table; fault_on is set only when a
 * fault targets this process, so on every other rank (and without the
 * variable) the hooks in the executor and the transports cost one branch.
 * Byte counters and the fired flags are atomics: collectives of different
 * communicators may run on different threads at once.
 */
#include "fault.h"

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
typedef enum { P_SEND, P_RECV, P_SAVE, P_PAYLOAD, P_HEADER } fault_point_t;

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
    else {
      snprintf(why, len, "%s needs a point: %s", k,
               f->kind == F_KILL ? "send, recv or save" : "send or recv");
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

static const char *help =
    "use kill:R:send|recv[:B], kill:R:save, save_kill:R, "
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
  WARN(SUB_ALL,
       "SHARC_FAULT %s: rank %d drops its %s connection to rank %d "
       "(channel %d, %s) after %llu bytes %s at %.3f",
       f->text, my_rank, c->tp->name, c->peer, c->chan,
       c->is_send ? "sending" : "receiving", (unsigned long long)moved,
       c->is_send ? "sent" : "received", wall_s());
  for (int i = 0; i < FAULT_DROPS; i++) {
    const transport_conn_t *none = NULL;
    if (atomic_compare_exchange_strong(&dropped[i], &none, c))
      break;
  }
  if (c->tp->fault_drop)
    c->tp->fault_drop(c);
}

int fault_conn_dropped(const transport_conn_t *c) {
  for (int i = 0; i < FAULT_DROPS; i++)
    if (atomic_load(&dropped[i]) == c)
      return 1;
  return 0;
}

int fault_send(transport_conn_t *c, void *p, size_t data, size_t n) {
  if (fault_conn_dropped(c))
    return 1;
  uint64_t sent = atomic_load(&bytes_sent);
  fault_t *f;
  if ((f = due(F_KILL, P_SEND, sent)))
    die(f, "sent", sent);
  if ((f = due(F_DROP, P_SEND, sent))) {
    drop(f, c, sent);
    return 1;
  }
  if ((f = due(F_DELAY, P_SEND, sent))) {
    WARN(SUB_ALL,
         "SHARC_FAULT %s: rank %d sleeps %ld ms before sending to rank %d "
         "after %llu bytes sent at %.3f",
         f->text, my_rank, f->ms, c->peer, (unsigned long long)sent, wall_s());
    struct timespec ts = {f->ms / 1000, (f->ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  if (data > 0 && (f = due(F_CORRUPT, P_PAYLOAD, sent))) {
    uint8_t *b = p;
    WARN(SUB_ALL,
         "SHARC_FAULT %s: rank %d flips payload byte 0x%02x -> 0x%02x of "
         "its send to rank %d after %llu bytes sent",
         f->text, my_rank, b[0], (uint8_t)~b[0], c->peer,
         (unsigned long long)sent);
    b[0] = (uint8_t)~b[0];
  }
  atomic_fetch_add_explicit(&bytes_sent, n, memory_order_relaxed);
  return 0;
}

int fault_recv(transport_conn_t *c, size_t n) {
  if (fault_conn_dropped(c))
    return 1;
  uint64_t got = atomic_load(&bytes_recv);
  fault_t *f;
  if ((f = due(F_KILL, P_RECV, got)))
    die(f, "received", got);
  if ((f = due(F_DROP, P_RECV, got))) {
    drop(f, c, got);
    return 1;
  }
  atomic_fetch_add_explicit(&bytes_recv, n, memory_order_relaxed);
  return 0;
}

void fault_header(int peer, void *hdr, size_t len, const char *what) {
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

/*
 * core.c - logging, thread-local last error, the tunables registry, clocks
 * and status names: the small services every other file uses.
 */
#include "core.h"

#include <ctype.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ---- status and type names ---- */

const char *sharc_status_name(sharc_status_t st) {
  switch (st) {
#define X_(name, value, msg)                                                   \
  case name:                                                                   \
    return #name;
    SHARC_STATUS_LIST(X_)
#undef X_
  }
  return "SHARC_ERR_UNKNOWN";
}

const char *sharc_status_string(sharc_status_t st) {
  switch (st) {
#define X_(name, value, msg)                                                   \
  case name:                                                                   \
    return msg;
    SHARC_STATUS_LIST(X_)
#undef X_
  }
  return "unknown status";
}

const size_t dtype_sizes[SHARC_DTYPE_COUNT] = {4, 8, 2, 2, 1, 1, 4, 4, 8, 8};
static const char *const dtype_names[SHARC_DTYPE_COUNT] = {
    "float", "double", "half",   "bfloat16", "int8",
    "uint8", "int32",  "uint32", "int64",    "uint64"};
static const char *const op_names[SHARC_OP_COUNT] = {"sum", "prod", "min",
                                                     "max", "avg"};

size_t sharc_dtype_size(sharc_dtype_t dtype) {
  return ((unsigned)dtype < SHARC_DTYPE_COUNT) ? dtype_sizes[dtype] : 0;
}
const char *sharc_dtype_name(sharc_dtype_t dtype) {
  return ((unsigned)dtype < SHARC_DTYPE_COUNT) ? dtype_names[dtype] : "?";
}
const char *sharc_op_name(sharc_op_t op) {
  return ((unsigned)op < SHARC_OP_COUNT) ? op_names[op] : "?";
}
const char *sharc_version(void) { return "0.1.0"; }

/* ---- tunables ---- */

typedef struct {
  const char *env, *def, *help;
} param_desc_t;

static const param_desc_t params[PARAM_COUNT] = {
#define X_(name, env, def, help) {env, def, help},
    SHARC_PARAM_LIST(X_)
#undef X_
};

const char *param_env_name(param_id_t id) { return params[id].env; }
const char *param_default(param_id_t id) { return params[id].def; }
const char *param_help(param_id_t id) { return params[id].help; }

const char *param_str(param_id_t id) {
  const char *v = getenv(params[id].env);
  return (v && *v) ? v : params[id].def;
}

int64_t param_int(param_id_t id) {
  static _Atomic int warned[PARAM_COUNT];
  const char *v = param_str(id);
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 0);
  if (errno || end == v || *end != '\0') {
    if (!warned[id]++)
      WARN(SUB_INIT, "%s=%s is not an integer; using the default %s",
           params[id].env, v, params[id].def);
    x = strtoll(params[id].def, NULL, 0);
  }
  return x;
}

/* ---- time ---- */

uint64_t time_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#ifdef CLOCK_MONOTONIC_COARSE
#define COARSE_CLOCK CLOCK_MONOTONIC_COARSE
#else
#define COARSE_CLOCK CLOCK_MONOTONIC
#endif

uint64_t time_coarse_ns(void) {
  struct timespec ts;
  if (clock_gettime(COARSE_CLOCK, &ts) != 0)
    return time_ns();
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t time_coarse_res_ns(void) {
  struct timespec ts;
  if (clock_getres(COARSE_CLOCK, &ts) != 0)
    return 1;
  uint64_t r = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  return r ? r : 1;
}

uint64_t timeout_ns(void) {
  int64_t s = param_int(PARAM_TIMEOUT);
  if (s <= 0)
    s = 120;
  return (uint64_t)s * 1000000000ull;
}

/* ---- misc ---- */

uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

sharc_status_t random_bytes(void *buf, size_t len) {
  uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        return err_set(SHARC_ERR_SYSTEM, "no source of randomness");
      n = read(fd, p, len);
      close(fd);
      if (n <= 0)
        return err_set(SHARC_ERR_SYSTEM, "reading /dev/urandom failed");
    }
    p += n;
    len -= (size_t)n;
  }
  return SHARC_OK;
}

static char host_name_buf[256];
static pthread_once_t host_name_once = PTHREAD_ONCE_INIT;

static void host_name_init(void) {
  if (gethostname(host_name_buf, sizeof host_name_buf - 1) != 0)
    strcpy(host_name_buf, "unknown");
  host_name_buf[sizeof host_name_buf - 1] = '\0';
}

const char *host_name(void) {
  pthread_once(&host_name_once, host_name_init);
  return host_name_buf;
}

/* ---- logging ---- */

static int log_level = -1;
_Atomic int log_trace_maybe = 1; /* core.h: 1 until log_init knows */
static int log_subsys = SUB_ALL;
static FILE *log_file;
static _Atomic int log_rank = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct {
  const char *name;
  int bit;
} subsys_names[] = {{"INIT", SUB_INIT},   {"COMM", SUB_COMM},
                    {"NET", SUB_NET},     {"SHM", SUB_SHM},
                    {"CUDA", SUB_CUDA},   {"TOPO", SUB_TOPO},
                    {"SHARD", SUB_SHARD}, {"ALL", SUB_ALL}};

static const char *subsys_name(log_subsys_t sub) {
  if (sub == SUB_ALL)
    return "SHARC"; /* errors not tied to one subsystem */
  for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
    if (subsys_names[i].bit == (int)sub)
      return subsys_names[i].name;
  return "SHARC";
}

/* Expands %h (host) and %p (pid) in SHARC_DEBUG_FILE. */
static void log_open_file(const char *pattern) {
  char path[1024];
  size_t o = 0;
  for (const char *c = pattern; *c && o + 64 < sizeof path; c++) {
    if (c[0] == '%' && c[1] == 'h') {
      o += (size_t)snprintf(path + o, sizeof path - o, "%s", host_name());
      c++;
    } else if (c[0] == '%' && c[1] == 'p') {
      o += (size_t)snprintf(path + o, sizeof path - o, "%d", (int)getpid());
      c++;
    } else {
      path[o++] = *c;
    }
  }
  path[o] = '\0';
  log_file = fopen(path, "a");
  if (!log_file)
    fprintf(stderr,
            "sharc: cannot open SHARC_DEBUG_FILE %s: %s; logging to stderr\n",
            path, strerror(errno));
}

static void log_init(void) {
  const char *lv = param_str(PARAM_DEBUG);
  if (!strcasecmp(lv, "NONE"))
    log_level = LOG_NONE;
  else if (!strcasecmp(lv, "INFO"))
    log_level = LOG_INFO;
  else if (!strcasecmp(lv, "TRACE"))
    log_level = LOG_TRACE;
  else {
    log_level = LOG_WARN;
    if (strcasecmp(lv, "WARN"))
      fprintf(stderr,
              "sharc: SHARC_DEBUG=%s unknown; use NONE, WARN, INFO or TRACE\n",
              lv);
  }
  char buf[256];
  snprintf(buf, sizeof buf, "%s", param_str(PARAM_DEBUG_SUBSYS));
  int mask = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t;
       t = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
      if (!strcasecmp(t, subsys_names[i].name)) {
        mask |= subsys_names[i].bit;
        found = 1;
      }
    if (!found)
      fprintf(stderr,
              "sharc: SHARC_DEBUG_SUBSYS entry '%s' unknown; use "
              "INIT,COMM,NET,SHM,CUDA,TOPO,SHARD or ALL\n",
              t);
  }
  log_subsys = mask ? mask : SUB_ALL;
  atomic_store_explicit(&log_trace_maybe, log_level >= LOG_TRACE,
                        memory_order_relaxed);
  const char *f = param_str(PARAM_DEBUG_FILE);
  if (*f)
    log_open_file(f);
}

int log_enabled(log_level_t lvl, log_subsys_t sub) {
  pthread_once(&log_once, log_init);
  return (int)lvl <= log_level && ((int)sub & log_subsys);
}

void log_set_rank(int rank) { log_rank = rank; }

void log_msg(log_level_t lvl, log_subsys_t sub, const char *fmt, ...) {
  if (!log_enabled(lvl, sub))
    return;
  char line[2048];
  int r = log_rank;
  int n;
  if (r >= 0)
    n = snprintf(line, sizeof line, "%s:%d [%d] %s ", host_name(),
                 (int)getpid(), r, subsys_name(sub));
  else
    n = snprintf(line, sizeof line, "%s:%d [?] %s ", host_name(), (int)getpid(),
                 subsys_name(sub));
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line)
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&log_lock);
  FILE *out = log_file ? log_file : stderr;
  fprintf(out, "%s\n", line);
  fflush(out);
  pthread_mutex_unlock(&log_lock);
}

/* ---- errors ---- */

static _Thread_local char err_buf[1024];

sharc_status_t err_set(sharc_status_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_buf, sizeof err_buf, fmt, ap);
  va_end(ap);
  WARN(SUB_ALL, "%s (%s)", err_buf, sharc_status_name(st));
  return st;
}

sharc_status_t err_record(sharc_status_t st, const char *fmt, ...) {
  char tmp[sizeof err_buf];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap); /* fmt may print err_buf itself */
  va_end(ap);
  memcpy(err_buf, tmp, sizeof err_buf);
  return st;
}

const char *err_last(void) { return err_buf; }

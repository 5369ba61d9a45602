/*
 * sharcrun.c - the one-host launcher: starts N ranks of a program with the
 * SHARC_* environment that sharc_comm_init_env() reads, prefixes every
 * output line with its rank, forwards signals, and tears the job down when
 * a rank fails.
 *
 * Standalone: libc only (sharc.h is included for the version macros). One
 * thread, one poll loop: signal handlers only write the signal number into
 * a self-pipe, so reaping, forwarding and output all happen in the loop.
 * Once every rank has exited it removes the shared-memory segments that
 * ranks of this job which died during setup left in /dev/shm. --bind pins
 * the ranks to CPUs (cpubind.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2, execvpe, asprintf, sigabbrev_np */
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpubind.h"
#include "sharc.h"

#define MAX_RANKS 1024
#define LINE_BUF 8192    /* bytes held per stream while waiting for '\n' */
#define KILL_AFTER_S 3.0 /* SIGTERM -> SIGKILL */
#define DRAIN_S                                                                \
  2.0 /* after the last rank exits, wait this long for                         \
       * pipes held open by its descendants */

typedef struct {
  int fd;       /* read end, -1 once closed */
  int out;      /* 1 or 2 */
  size_t len;   /* bytes buffered in buf */
  bool midline; /* the prefix of the current line was already written */
  char buf[LINE_BUF];
} stream_t;

typedef struct {
  pid_t pid;      /* 0: not started */
  bool running;   /* started and not yet reaped */
  bool reported;  /* its failure was already named */
  stream_t io[2]; /* stdout, stderr */
} rank_t;

enum phase { RUNNING, GRACE, TERMINATING, KILLING };

static int sig_pipe[2] = {-1, -1};
static const int fwd_signals[] = {SIGINT,  SIGTERM, SIGHUP,
                                  SIGQUIT, SIGUSR1, SIGUSR2};

static struct {
  int n;
  bool prefix;
  double grace, timeout; /* seconds; timeout 0: none */
  char addr[300];
  char **argv; /* program and its arguments */
  cpubind_mode_t bind;
} opt = {0, true, 10.0, 0.0, "", NULL, CPUBIND_SHARED};
static cpubind_t binding; /* the ranks' CPU sets; binding.n 0: unbound */

static rank_t *ranks;
static int nrunning;
static pid_t pgid;
static sigset_t sent; /* job-ending signals sharcrun sent or forwarded */
static struct {
  enum phase phase;
  int status;      /* sharcrun's exit status once decided, else -1 */
  double t0;       /* start, for --timeout */
  double deadline; /* of the current phase; -1: none */
} job = {RUNNING, -1, 0.0, -1.0};
static bool out_dead[3]; /* our stdout/stderr hit EPIPE: drop output */

static const char usage_line[] =
    "usage: sharcrun -n N [--port P | --addr HOST:PORT] [--grace S] "
    "[--timeout S] [--bind shared|auto|core|none] [--no-prefix] [--] "
    "program "
    "[args...]\n";

static void usage_full(FILE *f) {
  fputs(usage_line, f);
  fputs(
      "\nStarts N ranks of program on this host with SHARC_RANK, "
      "SHARC_WORLD_SIZE,\n"
      "SHARC_LOCAL_RANK, SHARC_LOCAL_SIZE, SHARC_ADDR and SHARC_TOKEN set.\n\n"
      "  -n, -np N         number of ranks (1..1024)\n"
      "  --port P          rendezvous port on 127.0.0.1 (default: a free "
      "port)\n"
      "  --addr HOST:PORT  rendezvous address (default 127.0.0.1:<free port>)\n"
      "  --grace S         after a rank fails, seconds the others get to exit "
      "on\n"
      "                    their own before SIGTERM (default 10; SIGKILL 3 s "
      "later)\n"
      "  --timeout S       terminate the job after S seconds (exit 124)\n"
      "  --bind MODE       CPUs per rank, from those sharcrun may use (C):\n"
      "                    shared (default; SHARC_BIND sets it too) pins rank\n"
      "                    r to CPU r mod C when ranks share CPUs two to one\n"
      "                    at most (C < N <= 2C), else leaves them unbound;\n"
      "                    auto pins each rank to CPUs of its own when there\n"
      "                    are no more ranks than CPUs, else leaves them\n"
      "                    unbound; core pins always (rank r to CPU r mod C\n"
      "                    when oversubscribed); none never pins.\n"
      "                    SHARC_DEBUG=INFO prints the sets.\n"
      "  --no-prefix       pass output through without the \"[rank] \" prefix\n"
      "  -h, --help / --version\n\n"
      "Exit status: 0 if every rank exited 0, else the first failing rank's "
      "exit\n"
      "code (128+signal if killed); 127 if program cannot run; 2: bad usage.\n",
      f);
}

static _Noreturn void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("sharcrun: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fputs(usage_line, stderr);
  exit(2);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- options ---------------------------------------------------------- */

static bool parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    return false;
  *out = v;
  return true;
}

static bool parse_seconds(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0.0) || v > 1e8)
    return false;
  *out = v;
  return true;
}

/* "--name VALUE" or "--name=VALUE"; returns the value or NULL if arg is not
 * this option. */
static const char *opt_value(char **argv, int argc, int *i, const char *name) {
  size_t len = strlen(name);
  const char *a = argv[*i];
  if (strncmp(a, name, len) != 0)
    return NULL;
  if (a[len] == '=')
    return a + len + 1;
  if (a[len] != '\0')
    return NULL;
  if (*i + 1 >= argc)
    usage_error("option %s needs a value", name);
  return argv[++*i];
}

static void parse_args(int argc, char **argv) {
  int port = -1;
  const char *v = getenv("SHARC_BIND");
  if (v && *v && cpubind_parse(v, &opt.bind) != 0)
    usage_error("SHARC_BIND wants shared, auto, core or none, got '%s'", v);
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    long l;
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-' || a[1] == '\0')
      break;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage_full(stdout);
      exit(0);
    } else if (strcmp(a, "--version") == 0) {
      printf("sharcrun (sharc) %d.%d.%d\n", SHARC_VERSION_MAJOR,
             SHARC_VERSION_MINOR, SHARC_VERSION_PATCH);
      exit(0);
    } else if (strcmp(a, "--no-prefix") == 0) {
      opt.prefix = false;
    } else if ((v = opt_value(argv, argc, &i, "-np")) ||
               (v = opt_value(argv, argc, &i, "-n"))) {
      if (!parse_long(v, 1, MAX_RANKS, &l))
        usage_error("-n wants a number of ranks from 1 to 1024, got '%s'", v);
      opt.n = (int)l;
    } else if ((v = opt_value(argv, argc, &i, "--port"))) {
      if (!parse_long(v, 1, 65535, &l))
        usage_error("--port wants a TCP port from 1 to 65535, got '%s'", v);
      port = (int)l;
    } else if ((v = opt_value(argv, argc, &i, "--addr"))) {
      const char *colon = strrchr(v, ':');
      if (!colon || colon == v || !parse_long(colon + 1, 1, 65535, &l) ||
          strlen(v) >= sizeof opt.addr)
        usage_error("--addr wants HOST:PORT (port 1..65535), got '%s'", v);
      strcpy(opt.addr, v);
    } else if ((v = opt_value(argv, argc, &i, "--grace"))) {
      if (!parse_seconds(v, &opt.grace))
        usage_error("--grace wants seconds >= 0, got '%s'", v);
    } else if ((v = opt_value(argv, argc, &i, "--bind"))) {
      if (cpubind_parse(v, &opt.bind) != 0)
        usage_error("--bind wants shared, auto, core or none, got '%s'", v);
    } else if ((v = opt_value(argv, argc, &i, "--timeout"))) {
      if (!parse_seconds(v, &opt.timeout) || opt.timeout <= 0.0)
        usage_error("--timeout wants seconds > 0, got '%s'", v);
    } else {
      usage_error("unknown option '%s'", a);
    }
  }
  if (opt.n == 0)
    usage_error("the number of ranks is missing (-n N)");
  if (i >= argc)
    usage_error("no program to run");
  if (port > 0 && opt.addr[0])
    usage_error("--port and --addr are exclusive");
  if (port > 0)
    snprintf(opt.addr, sizeof opt.addr, "127.0.0.1:%d", port);
  opt.argv = argv + i;
}

/* The rendezvous socket sharcrun chose the port of: listening on
 * 127.0.0.1, handed to rank 0 (SHARC_ROOT_FD; the other ranks close it),
 * so that no other process can take the port before rank 0 serves it. */
static int root_fd = -1;
static char *root_var; /* its SHARC_ROOT_FD=, last in the ranks' env */

/* A free port on 127.0.0.1, bound and listening in root_fd; -1 on error. */
static int listen_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s >= 0 && s < 3) { /* stdio of the ranks: dup2 would replace it */
    int t = fcntl(s, F_DUPFD, 3);
    close(s);
    s = t;
  }
  if (s < 0)
    return -1;
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  int port = -1;
  if (bind(s, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(s, 512) == 0 &&
      getsockname(s, (struct sockaddr *)&sa, &len) == 0)
    port = ntohs(sa.sin_port);
  if (port < 0) {
    int e = errno;
    close(s);
    errno = e;
    return -1;
  }
  root_fd = s;
  return port;
}

static bool make_token(char *hex /* 33 bytes */) {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t r = getrandom(b + got, sizeof b - got, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    got += (size_t)r;
  }
  for (size_t k = 0; k < sizeof b; k++)
    sprintf(hex + 2 * k, "%02x", b[k]);
  return true;
}

/* ---- output ----------------------------------------------------------- */

static void write_all(int fd, struct iovec *iov, int cnt) {
  if (out_dead[fd])
    return;
  while (cnt > 0) {
    ssize_t w = writev(fd, iov, cnt);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      out_dead[fd] = true; /* EPIPE or similar: nobody is reading */
      return;
    }
    while (cnt > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++, cnt--;
    }
    if (cnt > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
}

/* Writes len bytes of one line (or line piece) of rank r; the prefix goes
 * in front unless this piece continues a line, a newline after if nl. */
static void emit(int r, stream_t *s, const char *p, size_t len, bool nl) {
  char pre[16];
  struct iovec iov[3];
  int cnt = 0;
  if (opt.prefix && !s->midline) {
    int pl = snprintf(pre, sizeof pre, "[%d] ", r);
    iov[cnt++] = (struct iovec){pre, (size_t)pl};
  }
  if (len)
    iov[cnt++] = (struct iovec){(void *)p, len};
  if (nl)
    iov[cnt++] = (struct iovec){"\n", 1};
  write_all(s->out, iov, cnt);
}

/* Emits every complete line in s->buf; keeps the tail. A full buffer with
 * no newline is written as a line piece so long lines pass through. */
static void flush_lines(int r, stream_t *s) {
  size_t start = 0;
  for (;;) {
    char *nl = memchr(s->buf + start, '\n', s->len - start);
    if (!nl)
      break;
    size_t end = (size_t)(nl - s->buf) + 1;
    emit(r, s, s->buf + start, end - start, false);
    s->midline = false;
    start = end;
  }
  if (start == 0 && s->len == LINE_BUF) {
    emit(r, s, s->buf, s->len, false);
    s->midline = true;
    start = s->len;
  }
  memmove(s->buf, s->buf + start, s->len - start);
  s->len -= start;
}

static void stream_close(int r, stream_t *s) {
  if (s->fd < 0)
    return;
  if (opt.prefix && (s->len || s->midline))
    emit(r, s, s->buf, s->len, true);
  s->len = 0;
  s->midline = false;
  close(s->fd);
  s->fd = -1;
}

/* Reads once: 1 when data came, 0 when none was waiting, -1 once closed. */
static int stream_read(int r, stream_t *s) {
  if (s->fd < 0)
    return -1;
  for (;;) {
    char *dst = opt.prefix ? s->buf + s->len : s->buf;
    ssize_t n = read(s->fd, dst, opt.prefix ? LINE_BUF - s->len : LINE_BUF);
    if (n > 0) {
      if (opt.prefix) {
        s->len += (size_t)n;
        flush_lines(r, s);
      } else {
        struct iovec iov = {s->buf, (size_t)n};
        write_all(s->out, &iov, 1);
      }
      return 1;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return 0;
    stream_close(r, s); /* EOF or a read error */
    return -1;
  }
}

/* Before naming a dead rank, pass on what it wrote so the line comes last.
 * Bounded: a descendant may still be writing into the pipe. */
static void drain_rank(int r) {
  for (int k = 0; k < 2; k++)
    for (int it = 0; it < 64 && stream_read(r, &ranks[r].io[k]) == 1; it++) {
    }
}

/* ---- processes -------------------------------------------------------- */

static void on_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  ssize_t w = write(sig_pipe[1], &b, 1); /* full pipe: the loop wakes anyway */
  (void)w;
  errno = saved;
}

static void signal_all(int sig, bool group) {
  /* The group reaches descendants of a rank too (as a terminal would);
   * it exists while any rank is unreaped, so its id cannot be reused. */
  if (group)
    sigaddset(&sent, sig);
  if (group && nrunning > 0 && pgid > 0)
    killpg(pgid, sig);
  for (int r = 0; r < opt.n; r++)
    if (ranks[r].running)
      kill(ranks[r].pid, sig);
}

static char *env_var(const char *name, const char *val, long num) {
  char *e;
  if ((val ? asprintf(&e, "%s=%s", name, val)
           : asprintf(&e, "%s=%ld", name, num)) < 0) {
    perror("sharcrun: asprintf");
    exit(1);
  }
  return e;
}

static const char *const own_vars[] = {
    "SHARC_RANK", "SHARC_WORLD_SIZE", "SHARC_LOCAL_RANK", "SHARC_LOCAL_SIZE",
    "SHARC_ADDR", "SHARC_TOKEN",      "SHARC_ROOT_FD"};
#define NOWN (sizeof own_vars / sizeof *own_vars)

/* The caller's environment without the variables we set, plus room for
 * ours: slots [0] SHARC_RANK and [1] SHARC_LOCAL_RANK change per rank;
 * SHARC_ROOT_FD last, where sharcrun bound the rendezvous port. */
static char **build_env(const char *token) {
  extern char **environ;
  size_t n = 0;
  while (environ[n])
    n++;
  char **env = calloc(n + 8, sizeof *env);
  if (!env) {
    perror("sharcrun: calloc");
    exit(1);
  }
  size_t k = 6;
  for (size_t i = 0; i < n; i++) {
    bool ours = false;
    for (size_t j = 0; j < NOWN; j++) {
      size_t l = strlen(own_vars[j]);
      if (strncmp(environ[i], own_vars[j], l) == 0 && environ[i][l] == '=')
        ours = true;
    }
    if (!ours)
      env[k++] = environ[i];
  }
  env[2] = env_var("SHARC_WORLD_SIZE", NULL, opt.n);
  env[3] = env_var("SHARC_LOCAL_SIZE", NULL, opt.n);
  env[4] = env_var("SHARC_ADDR", opt.addr, 0);
  env[5] = env_var("SHARC_TOKEN", token, 0);
  if (root_fd >= 0)
    env[k] = root_var = env_var("SHARC_ROOT_FD", NULL, root_fd);
  return env;
}

/* SHARC_DEBUG=INFO or TRACE: one line per rank with its CPUs, or one
 * saying the ranks run unbound. */
static void report_binding(void) {
  const char *lv = getenv("SHARC_DEBUG");
  if (!lv || (strcasecmp(lv, "INFO") && strcasecmp(lv, "TRACE")))
    return;
  if (!binding.n) {
    fprintf(stderr, "sharcrun: %d rank%s unbound (--bind %s)\n", opt.n,
            opt.n == 1 ? "" : "s",
            opt.bind == CPUBIND_NONE ? "none"
            : opt.bind == CPUBIND_SHARED
                ? "shared: at most one rank or more than two per CPU, or one "
                  "CPU"
                : "auto: more ranks than CPUs, or one");
    return;
  }
  for (int r = 0; r < opt.n; r++) {
    char cpus[256];
    cpubind_list(&binding.sets[r], cpus, sizeof cpus);
    fprintf(stderr, "sharcrun: rank %d bound to CPU%s %s\n", r,
            strpbrk(cpus, ",-") ? "s" : "", cpus);
  }
}

/* Starts rank r. Returns 0; the errno of a failed exec (the child then
 * exits 127 and is reaped by the loop as usual); or -1 when no process was
 * started (reported here). */
static int spawn(int r, char **env, int devnull, const struct rlimit *nofile) {
  int outp[2] = {-1, -1}, errp[2] = {-1, -1}, execp[2] = {-1, -1};
  if (pipe2(outp, O_CLOEXEC) || pipe2(errp, O_CLOEXEC) ||
      pipe2(execp, O_CLOEXEC)) {
    fprintf(stderr, "sharcrun: cannot create pipes for rank %d of %d: %s%s\n",
            r, opt.n, strerror(errno),
            errno == EMFILE ? " (raise 'ulimit -n' or use fewer ranks)" : "");
    goto fail;
  }
  free(env[0]);
  free(env[1]);
  env[0] = env_var("SHARC_RANK", NULL, r);
  env[1] = env_var("SHARC_LOCAL_RANK", NULL, r);

  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "sharcrun: cannot fork rank %d of %d: %s\n", r, opt.n,
            strerror(errno));
    goto fail;
  }
  if (pid == 0) {
    /* Only async-signal-safe calls from here to exec. */
    setpgid(0, pgid);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (size_t k = 0; k < sizeof fwd_signals / sizeof *fwd_signals; k++)
      sigaction(fwd_signals[k], &dfl, NULL);
    sigaction(SIGCHLD, &dfl, NULL);
    sigaction(SIGPIPE, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setrlimit(RLIMIT_NOFILE, nofile);
    if (root_fd >= 0 && r != 0) /* rank 0 serves the rendezvous */
      close(root_fd);
    if (binding.n) /* a failure leaves the rank unbound, as with none */
      sched_setaffinity(0, sizeof binding.sets[r], &binding.sets[r]);
    if (dup2(devnull, 0) >= 0 && dup2(outp[1], 1) >= 0 && dup2(errp[1], 2) >= 0)
      execvpe(opt.argv[0], opt.argv, env);
    int e = errno;
    ssize_t w = write(execp[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  if (pgid == 0)
    pgid = pid;
  setpgid(pid, pgid); /* also here, so no signal can miss an early child */
  close(outp[1]);
  close(errp[1]);
  close(execp[1]);
  ranks[r].pid = pid;
  ranks[r].running = true;
  nrunning++;
  stream_t *s = ranks[r].io;
  s[0].fd = outp[0], s[0].out = 1;
  s[1].fd = errp[0], s[1].out = 2;
  fcntl(outp[0], F_SETFL, O_NONBLOCK);
  fcntl(errp[0], F_SETFL, O_NONBLOCK);

  int e = 0;
  ssize_t got;
  do
    got = read(execp[0], &e, sizeof e);
  while (got < 0 && errno == EINTR);
  close(execp[0]);
  return got == (ssize_t)sizeof e ? e : 0;

fail:
  for (int k = 0; k < 2; k++) {
    if (outp[k] >= 0)
      close(outp[k]);
    if (errp[k] >= 0)
      close(errp[k]);
    if (execp[k] >= 0)
      close(execp[k]);
  }
  return -1;
}

/* Moves the job to phase p: the ranks get sig (0: none) and the phase its
 * deadline. */
static void enter(enum phase p, int sig, double secs) {
  if (sig)
    signal_all(sig, true);
  job.phase = p;
  job.deadline = secs >= 0 ? now_s() + secs : -1.0;
}

static void handle_signals(void) {
  unsigned char sigs[64];
  ssize_t ns;
  while ((ns = read(sig_pipe[0], sigs, sizeof sigs)) > 0)
    for (ssize_t k = 0; k < ns; k++) {
      int sig = sigs[k];
      if (sig == SIGCHLD)
        continue; /* the loop reaps after every wake */
      if (sig == SIGUSR1 || sig == SIGUSR2) {
        signal_all(sig, false);
        continue;
      }
      fprintf(stderr, "sharcrun: got SIG%s; forwarding it to %d rank%s\n",
              sigabbrev_np(sig), nrunning, nrunning == 1 ? "" : "s");
      signal_all(sig, true);
      /* The job is ending; if the ranks ignore the signal, still end it. */
      if (job.phase == RUNNING)
        enter(GRACE, 0, opt.grace);
    }
}

static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    int r = 0;
    while (r < opt.n && ranks[r].pid != pid)
      r++;
    if (r == opt.n)
      continue;
    ranks[r].running = false;
    nrunning--;
    drain_rank(r);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
      continue;
    /* Ended by a signal we sent: announced once for all ranks already. */
    if (WIFSIGNALED(status) && sigismember(&sent, WTERMSIG(status)))
      ranks[r].reported = true;
    int code;
    if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
      if (!ranks[r].reported)
        fprintf(stderr, "sharcrun: rank %d (pid %d) exited with status %d\n", r,
                (int)pid, code);
    } else {
      int sig = WTERMSIG(status);
      code = 128 + sig;
      if (!ranks[r].reported)
        fprintf(stderr,
                "sharcrun: rank %d (pid %d) killed by signal %d (%s)%s\n", r,
                (int)pid, sig, strsignal(sig),
                WCOREDUMP(status) ? ", core dumped" : "");
    }
    ranks[r].reported = true;
    if (job.status < 0)
      job.status = code;
    if (job.phase == RUNNING)
      enter(GRACE, 0, opt.grace);
  }
}

static bool timeout_pending(void) {
  return opt.timeout > 0 && (job.phase == RUNNING || job.phase == GRACE);
}

/* The next time the loop must wake for (absolute s), or -1: never. */
static double next_wake(double drain_until) {
  double wake = -1.0;
  if (nrunning > 0 && job.deadline >= 0)
    wake = job.deadline;
  if (nrunning > 0 && timeout_pending() &&
      (wake < 0 || job.t0 + opt.timeout < wake))
    wake = job.t0 + opt.timeout;
  if (drain_until >= 0 && (wake < 0 || drain_until < wake))
    wake = drain_until;
  return wake;
}

static void check_deadlines(void) {
  double t = now_s();
  const char *s = nrunning == 1 ? "" : "s";
  if (nrunning == 0)
    return;
  if (timeout_pending() && t >= job.t0 + opt.timeout) {
    fprintf(stderr,
            "sharcrun: job timed out after %g s (--timeout); sending "
            "SIGTERM to %d rank%s\n",
            opt.timeout, nrunning, s);
    if (job.status < 0)
      job.status = 124;
    enter(TERMINATING, SIGTERM, KILL_AFTER_S);
  } else if (job.deadline >= 0 && t >= job.deadline) {
    if (job.phase == GRACE) {
      fprintf(stderr,
              "sharcrun: %d rank%s still running after the %g s grace "
              "period (--grace); sending SIGTERM\n",
              nrunning, s, opt.grace);
      enter(TERMINATING, SIGTERM, KILL_AFTER_S);
    } else if (job.phase == TERMINATING) {
      fprintf(stderr,
              "sharcrun: %d rank%s still running %g s after SIGTERM; "
              "sending SIGKILL\n",
              nrunning, s, KILL_AFTER_S);
      enter(KILLING, SIGKILL, -1);
    }
  }
}

static void close_all_streams(void) {
  for (int r = 0; r < opt.n; r++)
    for (int k = 0; k < 2; k++)
      stream_close(r, &ranks[r].io[k]);
}

/* ---- shared memory left behind -------------------------------------- */

/* The ranks name their segments /dev/shm/sharc-<tag>-<uid>-<rank>, where
 * tag is the low 32 bits of the 64-bit FNV-1a hash of the 16 token bytes
 * (comm/transport/shm/shm_seg.c, seg_path: keep the two in step). A rank
 * removes its own name at the end of setup and survivors remove a dead peer's,
 * so what is left once every rank has exited belongs to ranks that died in
 * setup with no survivor left to remove it (killed together, say). A
 * segment goes only when it is ours and no process holds its liveness lock
 * (a rank's descendant may still run). Returns how many were removed. */
static int sweep_segments(const char *token_hex) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int k = 0; k < 16; k++) {
    unsigned b;
    if (sscanf(token_hex + 2 * k, "%2x", &b) != 1)
      return 0;
    h = (h ^ b) * 0x100000001b3ull;
  }
  char prefix[32];
  int plen = snprintf(prefix, sizeof prefix, "sharc-%08x-", (unsigned)h);
  DIR *d = opendir("/dev/shm");
  if (!d)
    return 0;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
      continue;
    int fd = openat(dirfd(d), e->d_name,
                    O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
      continue;
    struct stat st;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK &&
        unlinkat(dirfd(d), e->d_name, 0) == 0)
      removed++;
    close(fd);
  }
  closedir(d);
  if (removed)
    fprintf(stderr,
            "sharcrun: removed %d shared-memory segment%s (/dev/shm/%s*) "
            "left by ranks that died\n",
            removed, removed == 1 ? "" : "s", prefix);
  return removed;
}

int main(int argc, char **argv) {
  parse_args(argc, argv);
  ranks = calloc((size_t)opt.n, sizeof *ranks);
  struct pollfd *pfd = calloc((size_t)opt.n * 2 + 1, sizeof *pfd);
  int *pidx = calloc((size_t)opt.n * 2 + 1, sizeof *pidx);
  if (!ranks || !pfd || !pidx) {
    perror("sharcrun: calloc");
    return 1;
  }
  for (int r = 0; r < opt.n; r++)
    ranks[r].io[0].fd = ranks[r].io[1].fd = -1;

  if (!opt.addr[0]) {
    int port = listen_port();
    if (port < 0) {
      fprintf(stderr,
              "sharcrun: no free TCP port on 127.0.0.1: %s; "
              "pass --port P\n",
              strerror(errno));
      return 1;
    }
    snprintf(opt.addr, sizeof opt.addr, "127.0.0.1:%d", port);
  }
  char token[33];
  if (!make_token(token)) {
    fprintf(stderr, "sharcrun: getrandom: %s\n", strerror(errno));
    return 1;
  }
  char **env = build_env(token);
  if (cpubind_plan(opt.bind, opt.n, &binding) != 0) {
    perror("sharcrun: calloc");
    return 1;
  }
  report_binding();

  /* Two pipes per rank: lift the soft fd limit (children get it back). */
  struct rlimit nofile, raised;
  getrlimit(RLIMIT_NOFILE, &nofile);
  raised = nofile;
  raised.rlim_cur = raised.rlim_max;
  setrlimit(RLIMIT_NOFILE, &raised);

  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0 || pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK)) {
    fprintf(stderr, "sharcrun: setup: %s\n", strerror(errno));
    return 1;
  }
  sigset_t block, old;
  sigemptyset(&block);
  struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
  sigemptyset(&sa.sa_mask);
  for (size_t k = 0; k < sizeof fwd_signals / sizeof *fwd_signals; k++) {
    sigaction(fwd_signals[k], &sa, NULL);
    sigaddset(&block, fwd_signals[k]);
  }
  sa.sa_flags |= SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  sigaddset(&block, SIGCHLD);
  signal(SIGPIPE, SIG_IGN);
  sigemptyset(&sent);

  /* Signals wait until every rank is started and in the group. */
  sigprocmask(SIG_BLOCK, &block, &old);
  job.t0 = now_s();
  for (int r = 0; r < opt.n && job.status < 0; r++) {
    int e = spawn(r, env, devnull, &nofile);
    if (e > 0) {
      fprintf(stderr, "sharcrun: cannot run '%s': %s\n", opt.argv[0],
              strerror(e));
      ranks[r].reported = true;
    }
    if (e)
      job.status = e > 0 ? 127 : 1;
  }
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (root_fd >= 0) { /* rank 0 has it now */
    close(root_fd);
    root_fd = -1;
  }
  /* An incomplete job cannot rendezvous: stop what started. */
  int others = 0;
  for (int r = 0; r < opt.n; r++)
    others += ranks[r].running && !ranks[r].reported;
  if (job.status >= 0 && others > 0)
    fprintf(stderr,
            "sharcrun: job incomplete; sending SIGTERM to the %d other "
            "rank%s started\n",
            others, others == 1 ? "" : "s");
  if (job.status >= 0)
    enter(TERMINATING, SIGTERM, KILL_AFTER_S);

  double drain_until = -1.0;
  for (;;) {
    int np = 0;
    pfd[np++] = (struct pollfd){sig_pipe[0], POLLIN, 0};
    for (int r = 0; r < opt.n; r++)
      for (int k = 0; k < 2; k++)
        if (ranks[r].io[k].fd >= 0) {
          pidx[np] = 2 * r + k;
          pfd[np++] = (struct pollfd){ranks[r].io[k].fd, POLLIN, 0};
        }
    if (nrunning == 0 && np == 1)
      break;

    double t = now_s(), wake = next_wake(drain_until);
    double ms_left = wake < 0 ? -1.0 : (wake - t) * 1000.0;
    int ms = ms_left < 0       ? (wake < 0 ? -1 : 0)
             : ms_left > 3.6e6 ? 3600000
                               : (int)ms_left + 1;
    int nready = poll(pfd, (nfds_t)np, ms);
    if (nready < 0 && errno != EINTR) {
      perror("sharcrun: poll");
      signal_all(SIGKILL, true);
      return 1;
    }
    for (int i = 1; nready > 0 && i < np; i++)
      if (pfd[i].revents) {
        int r = pidx[i] / 2;
        stream_read(r, &ranks[r].io[pidx[i] % 2]);
      }
    handle_signals();
    reap();
    check_deadlines();
    if (nrunning == 0 && drain_until < 0)
      drain_until = now_s() + DRAIN_S;
    /* Descendants of the ranks still hold the pipes: stop waiting. */
    if (nrunning == 0 && now_s() >= drain_until)
      close_all_streams();
  }

  close_all_streams();
  sweep_segments(token);
  for (int k = 0; k < 6; k++)
    free(env[k]);
  free(root_var);
  free(env);
  free(pfd);
  free(pidx);
  free(ranks);
  close(devnull);
  return job.status < 0 ? 0 : job.status;
}

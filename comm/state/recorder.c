/*
 * recorder.c - the flight recorder (see recorder.h) and its SIGUSR1 path:
 * the signal handler only writes a byte to a pipe; a thread started with
 * the first communicator reads it and prints every live communicator's
 * recorder, so nothing unsafe runs in signal context.
 */
#include "recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "schedule.h"

#define SET(f, v) atomic_store_explicit(&e->f, v, memory_order_relaxed)
#define GET(f) atomic_load_explicit(&e->f, memory_order_relaxed)

void rec_init(recorder_t *r, uint64_t uid, int rank, int nranks,
              const peer_info_t *peers, const _Atomic uint64_t *seq) {
  r->uid = uid;
  r->rank = rank;
  r->nranks = nranks;
  r->peers = peers;
  r->seq = seq;
}

rec_entry_t *rec_start(recorder_t *r, int coll, int dtype, int op, int algo,
                       int root, size_t count, uint64_t t_ns) {
  uint64_t seq = atomic_load_explicit(r->seq, memory_order_relaxed);
  rec_entry_t *e = &r->e[seq % REC_SIZE];
  /* Release, not sequentially consistent: the dump (another thread, on
   * SIGUSR1) only needs each entry's fields before its state, and a
   * locked store here cost a few nanoseconds a call, three times
   * (bench/results/call_fences/). */
  atomic_store_explicit(&e->state, 0, memory_order_relaxed);
  atomic_thread_fence(memory_order_release); /* emptied, then refilled */
  SET(seq, seq);
  SET(coll, coll);
  SET(dtype, dtype);
  SET(op, op);
  SET(algo, algo);
  SET(root, root);
  SET(count, count);
  SET(t_start_ns, t_ns ? t_ns : time_coarse_ns());
  SET(t_end_ns, 0);
  SET(status, 0);
  SET(waiting_on, -1);
  atomic_store_explicit(&e->state, REC_RUNNING,
                        memory_order_release); /* published last */
  return e;
}

void rec_end(rec_entry_t *e, int status) {
  SET(t_end_ns, time_coarse_ns());
  SET(status, status);
  if (status == SHARC_OK) /* a failed call keeps whom it last waited on */
    SET(waiting_on, -1);
  atomic_store_explicit(&e->state, status == SHARC_OK ? REC_DONE : REC_FAILED,
                        memory_order_release);
}

void rec_dump(const recorder_t *r, const char *why) {
  if (!r->seq)
    return; /* not rec_init'ed yet: nothing ran */
  uint64_t now = time_ns(),
           last = atomic_load_explicit(r->seq, memory_order_relaxed) + 1;
  uint64_t first = last > REC_DUMP ? last - REC_DUMP : 0;
  WARN(SUB_COMM,
       "flight recorder of comm %016llx (rank %d of %d), %s; last %d "
       "collectives:",
       (unsigned long long)r->uid, r->rank, r->nranks, why,
       (int)(last - first));
  for (uint64_t s = first; s < last; s++) {
    const rec_entry_t *e = &r->e[s % REC_SIZE];
    int state = atomic_load(&e->state);
    if (!state || GET(seq) != s)
      continue;
    int coll = GET(coll), reduces = sched_coll_reduces((sched_coll_t)coll);
    uint64_t t0 = GET(t_start_ns);
    char what[256], root[24] = "";
    if (sched_coll_rooted((sched_coll_t)coll))
      snprintf(root, sizeof root, " root %d", GET(root));
    snprintf(
        what, sizeof what, "#%llu %s %s x %zu%s%s%s, %s", (unsigned long long)s,
        coll == SCHED_P2P && GET(root) == REC_ROOT_A2AV
            ? "all_to_allv"
            : sched_coll_name((sched_coll_t)coll),
        sharc_dtype_name((sharc_dtype_t)GET(dtype)), GET(count),
        reduces ? " " : "", reduces ? sharc_op_name((sharc_op_t)GET(op)) : "",
        root, sched_algo_name((sched_algo_t)GET(algo)));
    if (state == REC_RUNNING) {
      int w = GET(waiting_on);
      char on[128] = "";
      if (w >= 0 && w < r->nranks && r->peers)
        snprintf(on, sizeof on, ", waiting on rank %d (host %s)", w,
                 r->peers[w].host);
      WARN(SUB_COMM, "recorder: %s: running for %.3f s%s", what,
           (double)(now - SHARC_MIN(t0, now)) / 1e9, on);
    } else {
      /* a failure dumped after the call ended (a peer's notice may come
       * in just after this rank's own timeout) still says whom it waited
       * on */
      int w = state == REC_DONE ? -1 : GET(waiting_on);
      char on[128] = "";
      if (w >= 0 && w < r->nranks && r->peers)
        snprintf(on, sizeof on, ", waiting on rank %d (host %s)", w,
                 r->peers[w].host);
      /* the times are the coarse clock's (one read costs a fifth of the
       * fine one's): a call shorter than its tick reads as such */
      uint64_t took = GET(t_end_ns) - t0, res = time_coarse_res_ns();
      char after[48];
      if (took < res)
        snprintf(after, sizeof after, "within %.0f ms", (double)res / 1e6);
      else
        snprintf(after, sizeof after, "after %.0f ms", (double)took / 1e6);
      WARN(SUB_COMM, "recorder: %s: %s %s%s%s%s", what,
           state == REC_DONE ? "done" : "failed", after,
           state == REC_DONE ? "" : " with ",
           state == REC_DONE ? "" : sharc_status_name(GET(status)), on);
    }
  }
}

/* ---- SIGUSR1 ---- */

typedef struct reg_node {
  struct reg_node *next;
  const recorder_t *rec;
} reg_node_t;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static reg_node_t *reg_head;
static int sig_pipe[2] = {-1, -1};
static pthread_once_t sig_once = PTHREAD_ONCE_INIT;

static void on_usr1(int sig) {
  (void)sig;
  int saved = errno;
  char b = 1;
  if (write(sig_pipe[1], &b, 1) < 0) {
    /* pipe full: a dump is already pending */
  }
  errno = saved;
}

static void *dumper(void *arg) {
  (void)arg;
  char b;
  for (;;) {
    ssize_t n = read(sig_pipe[0], &b, 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return NULL;
    pthread_mutex_lock(&reg_lock);
    for (reg_node_t *r = reg_head; r; r = r->next)
      rec_dump(r->rec, "on SIGUSR1");
    pthread_mutex_unlock(&reg_lock);
  }
}

static void sig_init(void) {
  struct sigaction old;
  if (sigaction(SIGUSR1, NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
      (old.sa_flags & SA_SIGINFO))
    return; /* the program handles SIGUSR1 itself */
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    return;
  fcntl(sig_pipe[0], F_SETFL, 0); /* the reader blocks */
  sigset_t all, prev;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &prev); /* the thread takes no signals */
  pthread_t t;
  int rc = pthread_create(&t, NULL, dumper, NULL);
  pthread_sigmask(SIG_SETMASK, &prev, NULL);
  if (rc != 0)
    return;
  pthread_detach(t);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
}

void rec_register(const recorder_t *rec) {
  pthread_once(&sig_once, sig_init);
  reg_node_t *r = malloc(sizeof *r);
  if (!r)
    return;
  r->rec = rec;
  pthread_mutex_lock(&reg_lock);
  r->next = reg_head;
  reg_head = r;
  pthread_mutex_unlock(&reg_lock);
}

void rec_unregister(const recorder_t *rec) {
  pthread_mutex_lock(&reg_lock);
  for (reg_node_t **pp = &reg_head; *pp; pp = &(*pp)->next)
    if ((*pp)->rec == rec) {
      reg_node_t *r = *pp;
      *pp = r->next;
      free(r);
      break;
    }
  pthread_mutex_unlock(&reg_lock);
}

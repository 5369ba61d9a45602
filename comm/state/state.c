/*
 * state.c - blocking without burning cores (docs/design.md, decision 7), and
 * the failure notice every transport raises.
 *
 * A waiting executor reads its doorbell, polls its FIFOs, and if nothing
 * moved it announces `sleeping` and futex-waits on the doorbell. Whoever
 * makes progress possible bumps the doorbell and issues FUTEX_WAKE only
 * when the waiter announced sleep, so the fast path makes no system call.
 * All accesses are sequentially consistent: either the waker sees
 * `sleeping`, or the waiter's re-poll sees the waker's data.
 */
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "state.h"

static long futex(_Atomic uint32_t *addr, int op, uint32_t val,
                  const struct timespec *ts) {
  return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

void comm_wake_word(wake_word_t *w) {
  atomic_fetch_add(&w->doorbell, 1);
  if (atomic_load(&w->sleeping))
    futex(&w->doorbell, FUTEX_WAKE, INT_MAX, NULL);
}

void comm_wake(struct sharc_comm *comm) { comm_wake_word(comm->wake); }

void comm_wait(struct sharc_comm *comm, uint32_t seen, uint64_t timeout_ns) {
  wake_word_t *w = comm->wake;
  atomic_store(&w->sleeping, 1);
  if (atomic_load(&w->doorbell) == seen) {
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ull),
                          (long)(timeout_ns % 1000000000ull)};
    /* Shared (not PRIVATE) futex: peers in other processes wake us. */
    futex(&w->doorbell, FUTEX_WAIT, seen, &ts);
  }
  atomic_store(&w->sleeping, 0);
}

static sharc_status_t comm_verror(struct sharc_comm *comm, sharc_status_t st,
                                  int log, const char *fmt, va_list ap) {
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (comm) {
    pthread_mutex_lock(&comm->err_lock);
    snprintf(comm->last_error, sizeof comm->last_error, "%s", msg);
    pthread_mutex_unlock(&comm->err_lock);
  }
  return log ? err_set(st, "%s", msg) : err_record(st, "%s", msg);
}

sharc_status_t comm_error(struct sharc_comm *comm, sharc_status_t st,
                          const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  st = comm_verror(comm, st, 1, fmt, ap);
  va_end(ap);
  return st;
}

sharc_status_t comm_check_connect(struct sharc_comm *comm, const char *tp,
                                  const void *state, int peer, int chan,
                                  int nchan) {
  if (!state)
    return comm_error(comm, SHARC_ERR_INTERNAL,
                      "%s: connect to rank %d before setup", tp, peer);
  if (peer < 0 || peer >= comm->nranks || peer == comm->rank || chan < 0 ||
      chan >= nchan)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: connect to rank %d channel %d: out of range (%d "
                      "ranks, %d channels, self %d)",
                      tp, peer, chan, comm->nranks, nchan, comm->rank);
  return SHARC_OK;
}

sharc_status_t comm_record(struct sharc_comm *comm, sharc_status_t st,
                           const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  st = comm_verror(comm, st, 0, fmt, ap);
  va_end(ap);
  return st;
}

void comm_fail_as(struct sharc_comm *comm, fail_scope_t scope, int failed_rank,
                  sharc_status_t st, const char *why) {
  int expect = 0;
  if (!atomic_compare_exchange_strong(&comm->fail_claim, &expect, 1)) {
    comm_wake(comm);
    return; /* someone already reported; tell peers only once */
  }
  if (scope == FAIL_JOB) {
    atomic_store(&comm->fail.failed_rank, failed_rank);
    atomic_store(&comm->fail.status, (int32_t)st);
  }
  pthread_mutex_lock(&comm->err_lock);
  snprintf(comm->unusable_msg, sizeof comm->unusable_msg, "%s", why);
  comm->unusable_st = st;
  pthread_mutex_unlock(&comm->err_lock);
  atomic_store(&comm->unusable, 1); /* later calls fail fast */
  if (scope == FAIL_JOB)
    atomic_store(&comm->fail.failed, 1); /* published last */
  /* The one warning of this failure on this rank, with the recorder
   * (not when the program itself aborted the communicator). */
  WARN(SUB_COMM, "%s (%s)", why, sharc_status_name(st));
  if (st != SHARC_ERR_ABORTED || failed_rank != comm->rank)
    rec_dump(&comm->rec, "after this failure");
  if (scope == FAIL_JOB && comm->notify_abort)
    comm->notify_abort(comm, failed_rank, st);
  if (comm->gpu_abort)
    comm->gpu_abort(comm);
  comm_wake(comm);
}

void comm_fail(struct sharc_comm *comm, int failed_rank, sharc_status_t st,
               const char *why) {
  comm_fail_as(comm, FAIL_JOB, failed_rank, st, why);
}

sharc_status_t sharc_comm_status(sharc_comm_t comm) {
  if (!comm)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_comm_status: comm is NULL");
  if (!atomic_load(&comm->unusable))
    return SHARC_OK;
  pthread_mutex_lock(&comm->err_lock);
  sharc_status_t st = comm->unusable_st;
  pthread_mutex_unlock(&comm->err_lock);
  return st;
}

const char *sharc_comm_last_error(sharc_comm_t comm) {
  if (!comm)
    return err_last();
  return comm->last_error;
}

/*
 * trace.c - where a step's time goes. Collectives run on the engine's
 * stream thread, so their spans are stamped there by host functions
 * enqueued just before and after each one; compute, optimizer and wait
 * spans are stamped on the caller's thread. With SHARC_TRACE=dir (or
 * cfg.trace_dir) each rank writes dir/trace-rank<R>.json, a Chrome trace
 * (one process per rank; thread 0 the caller: compute and waits, thread 1
 * the communication stream) that Perfetto and chrome://tracing open.
 * Timestamps are CLOCK_MONOTONIC microseconds, shared by every rank of a
 * host, so the ranks' traces line up.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "trace.h"

struct span {
  span_t *next;
  const char *name;
  int unit;
  double t0, t1; /* monotonic seconds, written on the stream thread */
};

double trace_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void stamp_begin(void *arg) { ((span_t *)arg)->t0 = trace_now(); }
static void stamp_end(void *arg) { ((span_t *)arg)->t1 = trace_now(); }

sharc_status_t trace_coll_begin(trace_t *t, const char *name, int u) {
  span_t *sp = calloc(1, sizeof *sp);
  if (!sp)
    return SHARC_ERR_NO_MEM;
  sp->name = name;
  sp->unit = u;
  sharc_status_t st = sharc_stream_launch_host_func(t->stream, stamp_begin, sp);
  if (st != SHARC_OK) {
    free(sp);
    return st;
  }
  if (t->spans_tail)
    t->spans_tail->next = sp;
  else
    t->spans = sp;
  t->spans_tail = sp;
  t->open_span = sp;
  return SHARC_OK;
}

sharc_status_t trace_coll_end(trace_t *t) {
  span_t *sp = t->open_span;
  t->open_span = NULL;
  return sp ? sharc_stream_launch_host_func(t->stream, stamp_end, sp)
            : SHARC_OK;
}

double trace_comm_seconds(const trace_t *t) {
  double sum = 0;
  for (span_t *sp = t->spans; sp; sp = sp->next)
    if (sp->t1 > sp->t0)
      sum += sp->t1 - sp->t0;
  return sum;
}

static void emit(trace_t *t, const char *name, int unit, int tid, double t0,
                 double t1, uint64_t step) {
  if (!t->file)
    return;
  const char *uname = unit >= 0 ? t->model->units[unit].name : "";
  fprintf(t->file,
          "%s{\"name\":\"%s%s%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
          "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%llu}}",
          t->first ? "" : ",\n", name, unit >= 0 ? " " : "", uname, t->rank,
          tid, t0 * 1e6, (t1 - t0) * 1e6, (unsigned long long)step + 1);
  t->first = 0;
}

void trace_span(trace_t *t, const char *name, int unit, double t0, double t1,
                uint64_t step) {
  emit(t, name, unit, 0, t0, t1, step);
}

void trace_step_end(trace_t *t, uint64_t step) {
  /* host functions still reference the spans: let the stream drain */
  (void)sharc_stream_synchronize(t->stream);
  for (span_t *sp = t->spans, *next; sp; sp = next) {
    next = sp->next;
    if (sp->t1 > sp->t0)
      emit(t, sp->name, sp->unit, 1, sp->t0, sp->t1, step);
    free(sp);
  }
  t->spans = t->spans_tail = t->open_span = NULL;
  if (t->file)
    fflush(t->file);
}

void trace_open(trace_t *t, const char *dir) {
  if (!dir)
    dir = getenv("SHARC_TRACE");
  if (!dir || !*dir)
    return;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "sharc: SHARC_TRACE=%s: cannot create it (%s); no trace\n",
            dir, strerror(errno));
    return;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/trace-rank%d.json", dir, t->rank);
  t->file = fopen(path, "w");
  if (!t->file) {
    fprintf(stderr, "sharc: cannot write %s (%s); no trace\n", path,
            strerror(errno));
    return;
  }
  fprintf(t->file, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  fprintf(t->file,
          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
          "\"args\":{\"name\":\"rank %d\"}},\n"
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
          "\"args\":{\"name\":\"compute\"}},\n"
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,"
          "\"args\":{\"name\":\"comm stream\"}}",
          t->rank, t->rank, t->rank, t->rank);
  t->first = 0;
}

void trace_close(trace_t *t) {
  if (!t->file)
    return;
  fprintf(t->file, "\n]}\n");
  fclose(t->file);
  t->file = NULL;
}

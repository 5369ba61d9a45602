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

#include "engine.h"

struct span {
  span_t *next;
  const char *name;
  int unit;
  double t0, t1; /* monotonic seconds, written on the stream thread */
};

static void stamp_begin(void *arg) { ((span_t *)arg)->t0 = eng_now(); }
static void stamp_end(void *arg) { ((span_t *)arg)->t1 = eng_now(); }

sharc_status_t trace_coll_begin(struct sharc_shard *e, const char *name,
                                int u) {
  span_t *sp = calloc(1, sizeof *sp);
  if (!sp)
    return eng_fail(e, SHARC_ERR_NO_MEM, "shard: out of memory (trace)");
  sp->name = name;
  sp->unit = u;
  sharc_status_t st = sharc_stream_launch_host_func(e->stream, stamp_begin, sp);
  if (st != SHARC_OK) {
    free(sp);
    return st;
  }
  if (e->spans_tail)
    e->spans_tail->next = sp;
  else
    e->spans = sp;
  e->spans_tail = sp;
  e->open_span = sp;
  return SHARC_OK;
}

sharc_status_t trace_coll_end(struct sharc_shard *e) {
  span_t *sp = e->open_span;
  e->open_span = NULL;
  return sp ? sharc_stream_launch_host_func(e->stream, stamp_end, sp)
            : SHARC_OK;
}

double trace_comm_seconds(struct sharc_shard *e) {
  double t = 0;
  for (span_t *sp = e->spans; sp; sp = sp->next)
    if (sp->t1 > sp->t0)
      t += sp->t1 - sp->t0;
  return t;
}

static void emit(struct sharc_shard *e, const char *name, int unit, int tid,
                 double t0, double t1) {
  if (!e->trace)
    return;
  const char *uname = unit >= 0 ? e->model->units[unit].name : "";
  fprintf(e->trace,
          "%s{\"name\":\"%s%s%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
          "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%llu}}",
          e->trace_first ? "" : ",\n", name, unit >= 0 ? " " : "", uname,
          e->world_rank, tid, t0 * 1e6, (t1 - t0) * 1e6,
          (unsigned long long)e->steps + 1);
  e->trace_first = 0;
}

void trace_span(struct sharc_shard *e, const char *name, int unit, double t0,
                double t1, int compute) {
  (void)compute;
  emit(e, name, unit, 0, t0, t1);
}

void trace_step_end(struct sharc_shard *e) {
  /* host functions still reference the spans: let the stream drain */
  (void)sharc_stream_synchronize(e->stream);
  for (span_t *sp = e->spans, *next; sp; sp = next) {
    next = sp->next;
    if (sp->t1 > sp->t0)
      emit(e, sp->name, sp->unit, 1, sp->t0, sp->t1);
    free(sp);
  }
  e->spans = e->spans_tail = e->open_span = NULL;
  if (e->trace)
    fflush(e->trace);
}

void trace_open(struct sharc_shard *e) {
  const char *dir = e->cfg.trace_dir ? e->cfg.trace_dir : getenv("SHARC_TRACE");
  if (!dir || !*dir)
    return;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "sharc: SHARC_TRACE=%s: cannot create it (%s); no trace\n",
            dir, strerror(errno));
    return;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/trace-rank%d.json", dir, e->world_rank);
  e->trace = fopen(path, "w");
  if (!e->trace) {
    fprintf(stderr, "sharc: cannot write %s (%s); no trace\n", path,
            strerror(errno));
    return;
  }
  fprintf(e->trace, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  fprintf(e->trace,
          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
          "\"args\":{\"name\":\"rank %d\"}},\n"
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
          "\"args\":{\"name\":\"compute\"}},\n"
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,"
          "\"args\":{\"name\":\"comm stream\"}}",
          e->world_rank, e->world_rank, e->world_rank, e->world_rank);
  e->trace_first = 0;
}

void trace_close(struct sharc_shard *e) {
  if (!e->trace)
    return;
  fprintf(e->trace, "\n]}\n");
  fclose(e->trace);
  e->trace = NULL;
}

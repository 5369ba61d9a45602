/*
 * trace.h - where a step's time goes (trace.c): collective spans stamped on
 * the communication stream's thread, compute and wait spans on the
 * caller's, and the Chrome trace they are written to. Knows nothing of the
 * engine: it is given the stream, the rank and the unit names.
 */
#ifndef SHARC_SHARD_TRACE_H
#define SHARC_SHARD_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "sharc_shard.h"

typedef struct span span_t;

typedef struct {
  sharc_stream_t stream;      /* where the collectives run */
  int rank;                   /* the trace's process id: the world rank */
  const sharc_model_t *model; /* unit names */
  span_t *spans, *spans_tail; /* collectives of this step */
  span_t *open_span;          /* enqueued, its end not yet enqueued */
  FILE *file;                 /* Chrome trace, or NULL */
  int first;                  /* no event written yet */
} trace_t;

/* Monotonic seconds (CLOCK_MONOTONIC, shared by the ranks of a host). */
double trace_now(void);

/* A collective's span is stamped on the stream's thread, by host
 * functions enqueued around it. SHARC_ERR_NO_MEM or the stream's error. */
sharc_status_t trace_coll_begin(trace_t *t, const char *name, int unit);
sharc_status_t trace_coll_end(trace_t *t);
/* Seconds collectives of this step ran; call after the stream is idle. */
double trace_comm_seconds(const trace_t *t);
/* A span on the caller's thread (compute, optimizer, waits), of step
 * `step` (0-based: written as step + 1). */
void trace_span(trace_t *t, const char *name, int unit, double t0, double t1,
                uint64_t step);
/* Writes this step's collective spans to the trace and frees them. */
void trace_step_end(trace_t *t, uint64_t step);
/* Opens dir/trace-rank<R>.json when dir (else SHARC_TRACE) names a
 * directory; no trace otherwise, or with a note when it cannot be
 * written. t's stream, rank and model must be set. */
void trace_open(trace_t *t, const char *dir);
void trace_close(trace_t *t);

#endif /* SHARC_SHARD_TRACE_H */

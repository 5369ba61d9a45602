/*
 * bench_sharc.c - the sharc backend of sharc-bench: collectives enqueued on
 * one sharc stream (-z 0, the nccl-tests way: back to back, then an event
 * and a synchronize) or called blocking with stream NULL (-z 1).
 */
#include <stdlib.h>

#include "bench.h"

typedef struct {
  sharc_comm_t comm;
  sharc_stream_t stream;
  sharc_event_t event;
} sharc_ctx_t;

static int sh_supports(backend_t *b, coll_t c, sharc_dtype_t dt, int op) {
  (void)b, (void)c, (void)dt, (void)op;
  return 1;
}

static int sh_coll(backend_t *b, coll_t c, const void *s, void *r, size_t count,
                   sharc_dtype_t dt, sharc_op_t op, int root, int blocking) {
  sharc_ctx_t *x = b->ctx;
  sharc_stream_t st = blocking ? NULL : x->stream;
  switch (c) {
  case C_AG:
    return sharc_all_gather(s, r, count, dt, x->comm, st);
  case C_RS:
    return sharc_reduce_scatter(s, r, count, dt, op, x->comm, st);
  case C_AR:
    return sharc_all_reduce(s, r, count, dt, op, x->comm, st);
  default:
    return sharc_broadcast(s, r, count, dt, root, x->comm, st);
  }
}

static int sh_sync(backend_t *b) {
  sharc_ctx_t *x = b->ctx;
  int st = sharc_event_record(x->event, x->stream);
  return st ? st : sharc_event_synchronize(x->event);
}

static int sh_barrier(backend_t *b) {
  return sharc_barrier(((sharc_ctx_t *)b->ctx)->comm, NULL);
}

static const char *sh_last_error(backend_t *b) {
  return sharc_comm_last_error(((sharc_ctx_t *)b->ctx)->comm);
}

static void sh_finalize(backend_t *b) {
  sharc_ctx_t *x = b->ctx;
  sharc_event_destroy(x->event);
  sharc_stream_destroy(x->stream);
  sharc_comm_destroy(x->comm);
  free(x);
}

int bench_sharc_init(backend_t *b, const opts_t *o) {
  (void)o;
  sharc_ctx_t *x = calloc(1, sizeof *x);
  if (!x)
    return SHARC_ERR_NO_MEM;
  sharc_status_t st = sharc_comm_init_env(&x->comm);
  if (st != SHARC_OK) {
    fprintf(stderr, "sharc-bench: sharc_comm_init_env: %s: %s\n",
            sharc_status_name(st), sharc_last_error());
    free(x);
    return st;
  }
  if ((st = sharc_stream_create(&x->stream)) != SHARC_OK ||
      (st = sharc_event_create(&x->event)) != SHARC_OK) {
    fprintf(stderr, "sharc-bench: stream/event: %s\n", sharc_status_name(st));
    return st;
  }
  sharc_comm_rank(x->comm, &b->rank);
  sharc_comm_size(x->comm, &b->nranks);
  sharc_comm_nhosts(x->comm, &b->nhosts);
  sharc_comm_local_rank(x->comm, &b->local_rank);
  b->name = "sharc";
  b->ctx = x;
  b->supports = sh_supports;
  b->coll = sh_coll;
  b->sync = sh_sync;
  b->barrier = sh_barrier;
  b->last_error = sh_last_error;
  b->finalize = sh_finalize;
  return 0;
}

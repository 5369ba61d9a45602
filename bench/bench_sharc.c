/*
 * bench_sharc.c - the sharc backend of sharc-bench: collectives enqueued on
 * one sharc stream (-z 0, the nccl-tests way: back to back, then an event
 * and a synchronize) or called blocking with stream NULL (-z 1).
 *
 * --mem cuda: the stream is sharc_stream_create_cuda over the bench's
 * cudaStream_t (NCCL semantics, the staged path: copies through pinned host
 * memory, no kernel); -z 0 enqueues back to back, then waits with
 * sharc_stream_synchronize and cudaStreamSynchronize; -z 1 enqueues one and
 * waits for it (a blocking sharc call takes host memory only).
 *
 * send_recv is one group (sharc_group_start, sharc_send to the next rank,
 * sharc_recv from the previous one, sharc_group_end) on the same stream,
 * or with stream NULL where the collectives are blocking: group end then
 * returns when both are done. It has no in-place form (column N/A).
 */
#include <stdlib.h>

#include "bench.h"

typedef struct {
  sharc_comm_t comm;
  sharc_stream_t stream;
  sharc_event_t event;
  int cuda; /* stream is bound to the bench's cudaStream_t */
  int rank, nranks;
} sharc_ctx_t;

static int sh_supports(backend_t *b, coll_t c, sharc_dtype_t dt, int op) {
  (void)b, (void)c, (void)dt, (void)op;
  return 1;
}

static int sh_inplace(backend_t *b, coll_t c) {
  (void)b;
  return bench_coll_has_inplace(c);
}

/* count elements to the next rank, count from the previous, one group; a
 * call's error closes the group too (group end then issues nothing). */
static int send_recv(sharc_ctx_t *x, const void *s, void *r, size_t count,
                     sharc_dtype_t dt, sharc_stream_t st) {
  int next = bench_sr_to(x->rank, x->nranks);
  int prev = bench_sr_from(x->rank, x->nranks);
  sharc_status_t gs = sharc_group_start();
  if (gs != SHARC_OK)
    return gs;
  sharc_status_t ss = sharc_send(s, count, dt, next, x->comm, st);
  sharc_status_t rs = sharc_recv(r, count, dt, prev, x->comm, st);
  sharc_status_t es = sharc_group_end();
  return ss != SHARC_OK ? ss : rs != SHARC_OK ? rs : es;
}

static int enqueue(sharc_ctx_t *x, coll_t c, const void *s, void *r,
                   size_t count, sharc_dtype_t dt, sharc_op_t op, int root,
                   sharc_stream_t st) {
  switch (c) {
  case C_AG:
    return sharc_all_gather(s, r, count, dt, x->comm, st);
  case C_RS:
    return sharc_reduce_scatter(s, r, count, dt, op, x->comm, st);
  case C_AR:
    return sharc_all_reduce(s, r, count, dt, op, x->comm, st);
  case C_BC:
    return sharc_broadcast(s, r, count, dt, root, x->comm, st);
  case C_RD:
    return sharc_reduce(s, r, count, dt, op, root, x->comm, st);
  case C_GA:
    return sharc_gather(s, r, count, dt, root, x->comm, st);
  case C_SC:
    return sharc_scatter(s, r, count, dt, root, x->comm, st);
  case C_SR:
    return send_recv(x, s, r, count, dt, st);
  default:
    return sharc_all_to_all(s, r, count, dt, x->comm, st);
  }
}

static int sh_coll(backend_t *b, coll_t c, const void *s, void *r, size_t count,
                   sharc_dtype_t dt, sharc_op_t op, int root, int blocking) {
  sharc_ctx_t *x = b->ctx;
  sharc_stream_t st = blocking && !x->cuda ? NULL : x->stream;
  int rc = enqueue(x, c, s, r, count, dt, op, root, st);
  return rc || !(blocking && x->cuda) ? rc : b->sync(b);
}

static int sh_host_coll(backend_t *b, coll_t c, const void *s, void *r,
                        size_t count, sharc_dtype_t dt, sharc_op_t op,
                        int root) {
  return enqueue(b->ctx, c, s, r, count, dt, op, root, NULL);
}

/* On a CUDA stream an event records host-side completion only: wait for
 * the stream (host work, then the cudaStream_t) and for the cudaStream_t. */
static int sh_sync(backend_t *b) {
  sharc_ctx_t *x = b->ctx;
  if (x->cuda) {
    int st = sharc_stream_synchronize(x->stream);
    if (st == SHARC_OK && bench_cuda_sync()) {
      fprintf(stderr, "sharc-bench: rank %d: %s\n", b->rank,
              bench_cuda_error());
      return SHARC_ERR_CUDA;
    }
    return st;
  }
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
  sharc_comm_rank(x->comm, &b->rank);
  sharc_comm_size(x->comm, &b->nranks);
  sharc_comm_nhosts(x->comm, &b->nhosts);
  sharc_comm_local_rank(x->comm, &b->local_rank);
  x->rank = b->rank;
  x->nranks = b->nranks;
  /* --mem cuda: the device (local rank % devices) and the bench's
   * cudaStream_t exist before the stream bound to it */
  x->cuda = o->cuda;
  if (o->cuda && bench_cuda_setup(b->local_rank)) {
    fprintf(stderr, "sharc-bench: rank %d: %s\n", b->rank, bench_cuda_error());
    return SHARC_ERR_CUDA;
  }
  st = o->cuda ? sharc_stream_create_cuda(&x->stream, bench_cuda_stream())
               : sharc_stream_create(&x->stream);
  if (st == SHARC_OK)
    st = sharc_event_create(&x->event);
  if (st != SHARC_OK) {
    fprintf(stderr, "sharc-bench: rank %d: %s: %s: %s\n", b->rank,
            o->cuda ? "sharc_stream_create_cuda" : "stream/event",
            sharc_status_name(st), sharc_last_error());
    return st;
  }
  b->name = "sharc";
  b->ctx = x;
  b->supports = sh_supports;
  b->inplace = sh_inplace;
  b->coll = sh_coll;
  b->sync = sh_sync;
  b->barrier = sh_barrier;
  b->host_coll = sh_host_coll;
  b->last_error = sh_last_error;
  b->finalize = sh_finalize;
  return 0;
}

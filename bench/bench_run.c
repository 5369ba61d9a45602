/*
 * bench_run.c - the timing and validation loop of sharc-bench, the same
 * for every backend (so sharc and its peers are timed by the same code).
 *
 * Per size and placement, as nccl-tests: fill inputs (when checking), one
 * synchronised operation, a barrier, then `iters` operations enqueued back
 * to back (-z 0) or each completed and followed by a barrier (-z 1), one
 * synchronize, time / iters combined over ranks as -a says; then `check`
 * validation runs on fresh inputs. Each iteration moves the buffers by one
 * operation's footprint (within maxBytes) so small sizes do not run out of
 * the same cache lines every time. With --mem cuda the buffers are device
 * memory: inputs are written on host mirrors and copied in, results copied
 * out and checked there, all outside the timed loop. Results that only the
 * root receives (reduce, gather) are checked on the root alone.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

const char *const bench_coll_names[C_N] = {
    "all_gather", "reduce_scatter", "all_reduce", "broadcast",
    "reduce",     "gather",         "scatter",    "all_to_all"};

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(backend_t *b, int st, const char *what) {
  fprintf(stderr, "sharc-bench: rank %d: %s %s failed (%d): %s\n", b->rank,
          b->name, what, st, b->last_error(b));
  exit(2);
}
#define RUN(b, call, what)                                                     \
  do {                                                                         \
    int st_ = (call);                                                          \
    if (st_ != 0)                                                              \
      die(b, st_, what);                                                       \
  } while (0)

/* ---- -T: a watchdog thread ends the process when a phase overruns ---- */

static _Atomic double deadline; /* 0: disarmed */
static int timeout_s;

static void *watchdog(void *arg) {
  (void)arg;
  for (;;) {
    usleep(100 * 1000);
    double d = atomic_load(&deadline);
    if (d > 0 && bench_now() > d) {
      char host[256] = "?";
      gethostname(host, sizeof host);
      fprintf(stderr,
              "%s: Test timeout (%ds): an operation did not complete in "
              "-T %d seconds; aborting\n",
              host, timeout_s, timeout_s);
      _exit(3);
    }
  }
  return NULL;
}

void bench_timeout_arm(int seconds) {
  static int started;
  if (seconds <= 0) {
    atomic_store(&deadline, 0.0);
    return;
  }
  if (!started) {
    pthread_t t;
    timeout_s = seconds;
    if (pthread_create(&t, NULL, watchdog, NULL) == 0)
      pthread_detach(t);
    started = 1;
  }
  atomic_store(&deadline, bench_now() + seconds);
}

/* ---- control collectives on the backend itself ------------------------ */

int bench_allreduce_f64(backend_t *b, double *v, int mode) {
  double in = *v, out = 0;
  int st;
  if (mode == 0) /* rank 0's value */
    st = b->host_coll(b, C_BC, &in, &out, 1, SHARC_F64, SHARC_SUM, 0);
  else
    st = b->host_coll(b, C_AR, &in, &out, 1, SHARC_F64,
                      mode == 2   ? SHARC_MIN
                      : mode == 3 ? SHARC_MAX
                                  : SHARC_SUM,
                      0);
  if (mode == 1)
    out /= b->nranks;
  *v = out;
  return st;
}

static int64_t sum_i64(backend_t *b, int64_t v) {
  int64_t out = 0;
  RUN(b, b->host_coll(b, C_AR, &v, &out, 1, SHARC_I64, SHARC_SUM, 0),
      "all_reduce(#wrong)");
  return out;
}

int bench_allgather_bytes(backend_t *b, const void *mine, void *all,
                          size_t bytes) {
  return b->host_coll(b, C_AG, mine, all, bytes, SHARC_U8, SHARC_SUM, 0);
}

/* ---- buffers ----------------------------------------------------------- */

/* --mem cuda: cudaMalloc'd buffers and host mirrors of the same size, where
 * inputs are written and results read back (untimed). -R is 0 here. */
static int cuda_alloc(buffers_t *bu, size_t n) {
  if (bench_cuda_alloc(&bu->sbuf, n) || bench_cuda_alloc(&bu->rbuf, n) ||
      bench_cuda_memset(bu->sbuf, 0, n) || bench_cuda_memset(bu->rbuf, 0, n)) {
    fprintf(stderr, "sharc-bench: device buffers of 2 x %zu bytes: %s\n", n,
            bench_cuda_error());
    return -1;
  }
  if (posix_memalign(&bu->hs, 4096, n) || posix_memalign(&bu->hr, 4096, n)) {
    fprintf(stderr,
            "sharc-bench: cannot allocate 2 x %zu bytes (host "
            "mirrors of the device buffers)\n",
            n);
    return -1;
  }
  memset(bu->hs, 0, n);
  memset(bu->hr, 0, n);
  return 0;
}

int bench_buffers_alloc(buffers_t *bu, const opts_t *o) {
  /* -R 0: malloc; 1: sharc_mem_alloc (peers map it); 2: malloc +
   * sharc_mem_register. */
  size_t n = o->maxb ? o->maxb : 64;
  bu->bytes = n;
  bu->sbuf = bu->rbuf = bu->hs = bu->hr = NULL;
  bu->cuda = o->cuda;
  if (o->cuda)
    return cuda_alloc(bu, n);
  if (o->reg == 1) {
    if (sharc_mem_alloc(&bu->sbuf, n) != SHARC_OK ||
        sharc_mem_alloc(&bu->rbuf, n) != SHARC_OK) {
      fprintf(stderr, "sharc-bench: sharc_mem_alloc(%zu): %s\n", n,
              sharc_last_error());
      return -1;
    }
  } else {
    if (posix_memalign(&bu->sbuf, 4096, n) ||
        posix_memalign(&bu->rbuf, 4096, n)) {
      fprintf(stderr, "sharc-bench: cannot allocate 2 x %zu bytes\n", n);
      return -1;
    }
    if (o->reg == 2 && (sharc_mem_register(bu->sbuf, n) != SHARC_OK ||
                        sharc_mem_register(bu->rbuf, n) != SHARC_OK)) {
      fprintf(stderr, "sharc-bench: sharc_mem_register(%zu): %s\n", n,
              sharc_last_error());
      return -1;
    }
  }
  memset(bu->sbuf, 0, n);
  memset(bu->rbuf, 0, n);
  return 0;
}

void bench_buffers_free(buffers_t *bu, const opts_t *o) {
  if (bu->cuda) {
    bench_cuda_free(bu->sbuf);
    bench_cuda_free(bu->rbuf);
    free(bu->hs);
    free(bu->hr);
    return;
  }
  if (o->reg == 1) {
    sharc_mem_free(bu->sbuf);
    sharc_mem_free(bu->rbuf);
    return;
  }
  if (o->reg == 2) {
    sharc_mem_deregister(bu->sbuf);
    sharc_mem_deregister(bu->rbuf);
  }
  free(bu->sbuf);
  free(bu->rbuf);
}

/* ---- one operation's shape (nccl-tests' getCollByteCount) --------------
 * bytes is the size asked for; count = bytes / type size. all-gather and
 * gather send count/n and receive (count/n)*n; reduce-scatter and scatter
 * the reverse; all-to-all sends and receives (count/n)*n, count/n per
 * peer; all-reduce, broadcast and reduce move count. The param count (the
 * table's count column) is what the call takes. */

typedef struct {
  size_t sendcount, recvcount, paramcount; /* elements */
  size_t send_ip, recv_ip; /* in-place offsets per rank (elements) */
  size_t ts;
} shape_t;

static shape_t shape(coll_t c, size_t bytes, sharc_dtype_t dt, int n) {
  shape_t s = {0};
  s.ts = sharc_dtype_size(dt);
  size_t count = bytes / s.ts, per = count / (size_t)n;
  switch (c) {
  case C_AG:
  case C_GA:
    s.sendcount = s.paramcount = per;
    s.recvcount = per * (size_t)n;
    s.send_ip = per;
    break;
  case C_RS:
  case C_SC:
    s.sendcount = per * (size_t)n;
    s.recvcount = s.paramcount = per;
    s.recv_ip = per;
    break;
  case C_AA: /* in place: sendbuf == recvbuf */
    s.sendcount = s.recvcount = per * (size_t)n;
    s.paramcount = per;
    break;
  default:
    s.sendcount = s.recvcount = s.paramcount = count;
    break;
  }
  return s;
}

/* nccl-tests' getBw: busbw = algbw x this factor. (n-1)/n for all-gather,
 * reduce-scatter, gather, scatter and all-to-all, 2(n-1)/n for all-reduce,
 * 1 for broadcast and reduce. */
double bench_bus_factor(coll_t c, int n) {
  return c == C_AR                ? 2.0 * (n - 1) / n
         : c == C_BC || c == C_RD ? 1.0
                                  : (double)(n - 1) / n;
}

/* Whether the param count is one rank's block: algbw then counts the n
 * blocks (nccl-tests' getBw: count * nranks * typesize / time). */
static int per_block(coll_t c) {
  return c == C_AG || c == C_RS || c == C_GA || c == C_SC || c == C_AA;
}

typedef struct {
  backend_t *b;
  const opts_t *o;
  buffers_t *bu;
  coll_t c;
  sharc_dtype_t dt;
  int op, root;
  shape_t sh;
} op_t;

/* The send and receive pointers of iteration iter in the buffers (host 0)
 * or, host 1 with --mem cuda, at the same offsets in their host mirrors. */
static void place(const op_t *x, int inplace, int iter, int host, uint8_t **s,
                  uint8_t **r) {
  size_t total =
      x->sh.sendcount > x->sh.recvcount ? x->sh.sendcount : x->sh.recvcount;
  total *= x->sh.ts;
  size_t steps = total ? x->bu->bytes / total : 1;
  size_t shift = steps ? total * ((size_t)iter % steps) : 0;
  uint8_t *sb = (uint8_t *)(host ? x->bu->hs : x->bu->sbuf) + shift,
          *rb = (uint8_t *)(host ? x->bu->hr : x->bu->rbuf) + shift;
  size_t rank = (size_t)x->b->rank;
  *s = inplace ? rb + x->sh.send_ip * rank * x->sh.ts : sb;
  *r = inplace ? rb + x->sh.recv_ip * rank * x->sh.ts : rb;
}

static void buffers_for(const op_t *x, int inplace, int iter, uint8_t **s,
                        uint8_t **r) {
  place(x, inplace, iter, 0, s, r);
}

static void start(const op_t *x, int inplace, int iter) {
  uint8_t *s, *r;
  buffers_for(x, inplace, iter, &s, &r);
  backend_t *b = x->b;
  RUN(b,
      b->coll(b, x->c, s, r, x->sh.paramcount, x->dt,
              x->op < 0 ? SHARC_SUM : (sharc_op_t)x->op, x->root,
              x->o->blocking),
      bench_coll_names[x->c]);
  if (x->o->blocking)
    RUN(b, b->barrier(b), "barrier");
}

static void complete(const op_t *x) {
  if (!x->o->blocking)
    RUN(x->b, x->b->sync(x->b), "synchronize");
}

static void cuda_die(const op_t *x, const char *what) {
  fprintf(stderr, "sharc-bench: rank %d: %s: %s\n", x->b->rank, what,
          bench_cuda_error());
  exit(2);
}

/* Fresh inputs for iteration 0 of this placement; the output poisoned.
 * --mem cuda: written on the host mirror, then copied in (the mirror's
 * final state, so the in-place overlap of send and receive is kept). */
static void init_data(const op_t *x, int inplace) {
  uint8_t *s, *r;
  int dev = x->bu->cuda;
  place(x, inplace, 0, dev, &s, &r);
  int rank = x->b->rank, n = x->b->nranks;
  size_t rb = x->sh.recvcount * x->sh.ts, sb = x->sh.sendcount * x->sh.ts;
  memset(r, 0xa5, rb);
  /* broadcast and scatter read sendbuf on the root only */
  int fill = !((x->c == C_BC || x->c == C_SC) && rank != x->root);
  if (fill)
    data_fill(s, x->sh.sendcount, 0, x->dt, x->op, x->c, rank, n);
  if (dev) {
    uint8_t *ds, *dr;
    place(x, inplace, 0, 0, &ds, &dr);
    if (bench_cuda_copy(dr, r, rb) || (fill && bench_cuda_copy(ds, s, sb)))
      cuda_die(x, "inputs to the device");
  }
}

static int64_t check_data(const op_t *x, int inplace) {
  uint8_t *s, *r;
  int rank = x->b->rank;
  if (bench_coll_root_only(x->c) && rank != x->root)
    return 0; /* recvbuf is the root's alone */
  place(x, inplace, 0, x->bu->cuda, &s, &r);
  if (x->bu->cuda) {
    uint8_t *ds, *dr;
    place(x, inplace, 0, 0, &ds, &dr);
    if (bench_cuda_copy(r, dr, x->sh.recvcount * x->sh.ts))
      cuda_die(x, "results from the device");
  }
  static int corrupt = -1;
  if (corrupt < 0) {
    const char *e = getenv("SHARC_BENCH_CORRUPT");
    corrupt = e && atoi(e) > 0;
  }
  /* on rank 0, or the root where only the root checks */
  int victim = bench_coll_root_only(x->c) ? x->root : 0;
  if (corrupt && rank == victim && x->sh.recvcount)
    data_corrupt(r, x->dt);
  size_t base =
      x->c == C_RS || x->c == C_SC ? (size_t)rank * x->sh.recvcount : 0;
  return data_check(r, x->sh.recvcount, base, x->dt, x->op, x->c, x->root, rank,
                    x->b->nranks, x->sh.paramcount);
}

int bench_warmup(backend_t *b, const opts_t *o, buffers_t *bu, coll_t c,
                 sharc_dtype_t dt, int op, int root) {
  size_t sizes[2] = {o->maxb, o->minb};
  bench_timeout_arm(o->timeout);
  for (int k = 0; k < 2; k++) {
    op_t x = {b, o, bu, c, dt, op, root, shape(c, sizes[k], dt, b->nranks)};
    for (int it = 0; it < o->warmup; it++)
      start(&x, 0, it);
    complete(&x);
  }
  bench_timeout_arm(0);
  return 0;
}

int bench_one(backend_t *b, const opts_t *o, buffers_t *bu, row_t *row) {
  op_t x = {b,          o,
            bu,         row->coll,
            row->dtype, row->op,
            row->root,  shape(row->coll, row->size, row->dtype, b->nranks)};
  size_t send_b = x.sh.sendcount * x.sh.ts, recv_b = x.sh.recvcount * x.sh.ts;
  size_t size = send_b > recv_b ? send_b : recv_b;
  row->count = x.sh.paramcount;
  double factor = bench_bus_factor(row->coll, b->nranks);
  for (int ip = 0; ip < 2; ip++) {
    if (ip && b->inplace && !b->inplace(b, row->coll)) {
      row->time_us[ip] = -1; /* N/A: the same on every rank */
      row->algbw[ip] = row->busbw[ip] = 0;
      row->wrong[ip] = -1;
      continue;
    }
    bench_timeout_arm(o->timeout);
    if (o->check)
      init_data(&x, ip);
    start(&x, ip, 0);
    complete(&x);
    RUN(b, b->barrier(b), "barrier");
    double t0 = bench_now();
    for (int it = 0; it < o->iters; it++)
      start(&x, ip, it);
    complete(&x);
    double sec = (bench_now() - t0) / o->iters;
    RUN(b, bench_allreduce_f64(b, &sec, o->average), "all_reduce(time)");
    /* algbw over the param count, as nccl-tests' getBw */
    double base = (double)(x.sh.paramcount * x.sh.ts) / 1e9 / sec;
    row->time_us[ip] = sec * 1e6;
    row->algbw[ip] = per_block(row->coll) ? base * b->nranks : base;
    row->busbw[ip] = row->algbw[ip] * factor;
    RUN(b, b->barrier(b), "barrier");
    row->wrong[ip] = o->check ? 0 : -1;
    for (int k = 0; k < o->check; k++) {
      init_data(&x, ip);
      start(&x, ip, 0);
      complete(&x);
      row->wrong[ip] = sum_i64(b, check_data(&x, ip));
      if (row->wrong[ip])
        break;
    }
    bench_timeout_arm(0);
  }
  row->size = size;
  return 0;
}

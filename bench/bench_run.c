/*
 * bench_run.c - the timing and validation loop of sharc-bench, the same
 * for every backend (so sharc and its peers are timed by the same code).
 *
 * Per size and placement: fill inputs (when checking), one synchronised
 * operation, a barrier, then `iters` timed operations, one of two ways
 * (--timing):
 *   call   (OSU, IMB and the MPI libraries' own benchmarks): per iteration
 *          a barrier, t0, one operation, completed (stream synchronized,
 *          or a blocking call with -z 1), t1. The per-iteration maximum
 *          over ranks of t1 - t0; the median over iterations is the time,
 *          the minimum the fastest call.
 *   stream (nccl-tests): the operations enqueued back to back (-z 0), or
 *          each completed and followed by a barrier (-z 1), one
 *          synchronize; time / iters combined over ranks as -a says.
 * Then `check` validation runs on fresh inputs. The buffers are the same
 * every iteration, as OSU and IMB keep them; --cold 1 moves them by one
 * operation's footprint each iteration (nccl-tests' way) within twice
 * maxBytes, so that every size, the largest too, rotates through at least
 * two places. With --mem cuda the buffers are device memory: inputs are
 * written on host mirrors and copied in, results copied out and checked
 * there, all outside the timed loop. Results that only the root receives
 * (reduce, gather) are checked on the root alone.
 *
 * CPU time per call: this process's CPU clock (user + sys of every thread,
 * the library's own threads too) around each timed call (call) or the
 * whole loop (stream), less what reading the clock itself adds; the
 * maximum over ranks. A library that busy-polls while it waits shows a CPU
 * time near its wall time; one that blocks, far less.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

const char *const bench_coll_names[C_N] = {
    "all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce",
    "gather",     "scatter",        "all_to_all", "send_recv"};

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bench_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of n values (sorts v). */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The process CPU clock is a system call that sums every thread's time:
 * part of each read lands inside the interval it bounds. */
double bench_cpu_clock_cost(void) {
  static double cost = -1;
  if (cost < 0) {
    enum { N = 101 };
    double v[N];
    for (int k = 0; k < N; k++) {
      double c0 = bench_cpu_now();
      v[k] = bench_cpu_now() - c0;
    }
    cost = median(v, N);
  }
  return cost;
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
static int cuda_alloc(buffers_t *bu, size_t n, int reg) {
  if (bench_cuda_alloc(&bu->sbuf, n) || bench_cuda_alloc(&bu->rbuf, n) ||
      bench_cuda_memset(bu->sbuf, 0, n) || bench_cuda_memset(bu->rbuf, 0, n)) {
    fprintf(stderr, "sharc-bench: device buffers of 2 x %zu bytes: %s\n", n,
            bench_cuda_error());
    return -1;
  }
  if (reg && (sharc_mem_register(bu->sbuf, n) != SHARC_OK ||
              sharc_mem_register(bu->rbuf, n) != SHARC_OK)) {
    fprintf(stderr,
            "sharc-bench: sharc_mem_register of a device buffer "
            "(%zu bytes): %s\n",
            n, sharc_last_error());
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
   * sharc_mem_register. --cold 1: twice maxBytes, room to move the
   * largest size too (else it would stay in place while smaller ones
   * moved, and -R 1 there would be measured on other terms). */
  size_t n = o->maxb ? o->maxb : 64;
  if (o->cold)
    n *= 2;
  bu->bytes = n;
  bu->sbuf = bu->rbuf = bu->hs = bu->hr = NULL;
  bu->cuda = o->cuda;
  if (o->cuda)
    return cuda_alloc(bu, n, o->reg);
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
    if (o->reg) {
      sharc_mem_deregister(bu->sbuf);
      sharc_mem_deregister(bu->rbuf);
    }
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
 * peer; all-reduce, broadcast and reduce move count; send-recv sends count
 * (to the next rank) and receives count (from the previous one), no
 * in-place form. The param count (the table's count column) is what the
 * call takes. */

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
  default: /* all-reduce, broadcast, reduce; send-recv: the bytes a rank
              sends */
    s.sendcount = s.recvcount = s.paramcount = count;
    break;
  }
  return s;
}

/* nccl-tests' getBw: busbw = algbw x this factor. (n-1)/n for all-gather,
 * reduce-scatter, gather, scatter and all-to-all, 2(n-1)/n for all-reduce,
 * 1 for broadcast, reduce and send-recv (nccl-tests' sendrecv). */
double bench_bus_factor(coll_t c, int n) {
  return c == C_AR                             ? 2.0 * (n - 1) / n
         : c == C_BC || c == C_RD || c == C_SR ? 1.0
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
 * or, host 1 with --mem cuda, at the same offsets in their host mirrors.
 * The same every iteration unless --cold 1. */
static void place(const op_t *x, int inplace, int iter, int host, uint8_t **s,
                  uint8_t **r) {
  size_t total =
      x->sh.sendcount > x->sh.recvcount ? x->sh.sendcount : x->sh.recvcount;
  total *= x->sh.ts;
  size_t steps = total && x->o->cold ? x->bu->bytes / total : 1;
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

/* One operation: enqueued (-z 0) or blocking (-z 1). */
static void issue(const op_t *x, int inplace, int iter) {
  uint8_t *s, *r;
  buffers_for(x, inplace, iter, &s, &r);
  backend_t *b = x->b;
  RUN(b,
      b->coll(b, x->c, s, r, x->sh.paramcount, x->dt,
              x->op < 0 ? SHARC_SUM : (sharc_op_t)x->op, x->root,
              x->o->blocking),
      bench_coll_names[x->c]);
}

static void complete(const op_t *x) {
  if (!x->o->blocking)
    RUN(x->b, x->b->sync(x->b), "synchronize");
}

/* One step of the stream loop: -z 1 completes it and adds a barrier. */
static void start(const op_t *x, int inplace, int iter) {
  issue(x, inplace, iter);
  if (x->o->blocking)
    RUN(x->b, x->b->barrier(x->b), "barrier");
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
    for (int it = 0; it < o->warmup; it++) {
      if (o->timing == BENCH_CALL) { /* as the timed loop runs them */
        RUN(b, b->barrier(b), "barrier");
        issue(&x, 0, it);
        complete(&x);
      } else {
        start(&x, 0, it);
      }
    }
    complete(&x);
  }
  bench_timeout_arm(0);
  return 0;
}

/* --timing call: iters calls, each alone; *sec the median of the
 * per-iteration maximum over ranks, *fast the least of them, *cpu the CPU
 * time per call of this rank. */
static void time_calls(const op_t *x, int ip, double *sec, double *fast,
                       double *cpu) {
  static double *mine, *all;
  static int cap;
  backend_t *b = x->b;
  int n = x->o->iters;
  if (n > cap) {
    free(mine);
    free(all);
    mine = malloc((size_t)n * sizeof *mine);
    all = malloc((size_t)n * sizeof *all);
    if (!mine || !all) {
      fprintf(stderr, "sharc-bench: out of memory (%d times)\n", n);
      exit(2);
    }
    cap = n;
  }
  double used = 0;
  for (int it = 0; it < n; it++) {
    RUN(b, b->barrier(b), "barrier");
    double c0 = bench_cpu_now();
    double t0 = bench_now();
    issue(x, ip, it);
    complete(x);
    double t1 = bench_now();
    used += bench_cpu_now() - c0;
    mine[it] = t1 - t0;
  }
  RUN(b, b->host_coll(b, C_AR, mine, all, (size_t)n, SHARC_F64, SHARC_MAX, 0),
      "all_reduce(times)");
  *sec = median(all, n); /* sorted: all[0] is the fastest */
  *fast = all[0];
  *cpu = used / n - bench_cpu_clock_cost();
}

/* --timing stream: the loop back to back; *cpu per call of this rank. */
static void time_stream(const op_t *x, int ip, double *sec, double *cpu) {
  backend_t *b = x->b;
  int n = x->o->iters;
  double c0 = bench_cpu_now();
  double t0 = bench_now();
  for (int it = 0; it < n; it++)
    start(x, ip, it);
  complete(x);
  *sec = (bench_now() - t0) / n;
  *cpu = (bench_cpu_now() - c0 - bench_cpu_clock_cost()) / n;
  RUN(b, bench_allreduce_f64(b, sec, x->o->average), "all_reduce(time)");
}

int bench_one(backend_t *b, const opts_t *o, buffers_t *bu, row_t *row,
              int pass) {
  op_t x = {b,          o,
            bu,         row->coll,
            row->dtype, row->op,
            row->root,  shape(row->coll, row->size, row->dtype, b->nranks)};
  size_t send_b = x.sh.sendcount * x.sh.ts, recv_b = x.sh.recvcount * x.sh.ts;
  size_t size = send_b > recv_b ? send_b : recv_b;
  row->count = x.sh.paramcount;
  /* algbw over the param count, as nccl-tests' getBw */
  row->alg_bytes = (double)(x.sh.paramcount * x.sh.ts) *
                   (per_block(row->coll) ? b->nranks : 1);
  if (pass < BENCH_MAX_PASSES)
    row->passes = pass + 1;
  int slot = row->passes - 1;
  for (int ip = 0; ip < 2; ip++) {
    if (ip && b->inplace && !b->inplace(b, row->coll)) {
      row->time_us[ip] = -1; /* N/A: the same on every rank */
      row->algbw[ip] = row->busbw[ip] = 0;
      row->wrong[ip] = -1;
      continue;
    }
    if (pass == 0)
      row->wrong[ip] = o->check ? 0 : -1;
    row->time_us[ip] = 0;
    bench_timeout_arm(o->timeout);
    if (o->check)
      init_data(&x, ip);
    issue(&x, ip, 0);
    complete(&x);
    RUN(b, b->barrier(b), "barrier");
    double sec, fast = -1, cpu;
    if (o->timing == BENCH_CALL)
      time_calls(&x, ip, &sec, &fast, &cpu);
    else
      time_stream(&x, ip, &sec, &cpu);
    if (cpu < 0)
      cpu = 0;
    RUN(b, bench_allreduce_f64(b, &cpu, 3), "all_reduce(cpu time)");
    row->pass_us[ip][slot] = sec * 1e6;
    row->pass_min_us[ip][slot] = fast < 0 ? -1 : fast * 1e6;
    row->pass_cpu_us[ip][slot] = cpu * 1e6;
    RUN(b, b->barrier(b), "barrier");
    for (int k = 0; k < o->check; k++) {
      init_data(&x, ip);
      issue(&x, ip, 0);
      complete(&x);
      int64_t w = sum_i64(b, check_data(&x, ip));
      if (w > row->wrong[ip])
        row->wrong[ip] = w;
      if (w)
        break;
    }
    bench_timeout_arm(0);
  }
  row->size = size;
  return 0;
}

void bench_passes_finish(backend_t *b, row_t *row) {
  double factor = bench_bus_factor(row->coll, b->nranks);
  int n = row->passes;
  for (int ip = 0; ip < 2; ip++) {
    if (row->time_us[ip] < 0)
      continue;
    double t[BENCH_MAX_PASSES], bw[BENCH_MAX_PASSES];
    double best = row->pass_us[ip][0], worst = best, fast = -1;
    int bp = 0; /* the best pass */
    for (int p = 0; p < n; p++) {
      t[p] = row->pass_us[ip][p];
      bp = t[p] < best ? p : bp;
      best = t[p] < best ? t[p] : best;
      worst = t[p] > worst ? t[p] : worst;
      bw[p] = t[p] > 0 ? row->alg_bytes / 1e3 / t[p] * factor : 0;
      double m = row->pass_min_us[ip][p];
      if (m >= 0 && (fast < 0 || m < fast))
        fast = m;
    }
    row->time_us[ip] = best;
    row->algbw[ip] = best > 0 ? row->alg_bytes / 1e3 / best : 0;
    row->busbw[ip] = row->algbw[ip] * factor;
    row->busbw_med[ip] = median(bw, n);
    row->spread[ip] = best > 0 ? worst / best : 1;
    row->min_us[ip] = fast;
    row->cpu_us[ip] = row->pass_cpu_us[ip][bp];
  }
}

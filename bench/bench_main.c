/*
 * sharc-bench - bandwidth benchmark in the nccl-tests layout.
 *
 *   sharcrun -n 4 sharc-bench all_reduce -b 8 -e 256M -f 2
 *   mpirun -np 4 sharc-bench all -b 8 -e 64M -f 4 --compare mpi
 *   mpirun -np 2 sharc-bench all_reduce -b 8 -e 64M -f 4 --compare ccl
 *     (oneCCL, bench_ccl.cpp: Intel MPI's mpirun, bench/peers/peers_env.sh)
 *
 * Collectives: all_gather, reduce_scatter, all_reduce, broadcast, reduce,
 * gather, scatter, all_to_all (nccl-tests' alltoall; that name works too),
 * send_recv (nccl-tests' sendrecv, that name too: each rank sends count
 * elements to the next rank and receives count from the previous one, in
 * one group; out of place only). Their size column, count column and bus
 * bandwidth are nccl-tests': the size is the larger buffer of a rank
 * (gather and scatter: the root's nranks*count elements, all-to-all:
 * nranks*count per rank, send_recv: the count a rank sends), the count
 * what the call takes; busbw = algbw x bench_bus_factor().
 *
 * Flags, meanings and defaults are nccl-tests' (bench_opts.c); the tables
 * are printed line for line in its layout, so its parsers read ours. Per
 * collective: one table (every type, op and root of the sweep), then
 * "# Out of bounds values" and "# Avg bus bandwidth", then "#" lines with
 * the fraction of this host's physical limit the largest sizes reach. With
 * --compare the sharc and peer tables are followed by a "#"-prefixed
 * table of busbw ratios. Exit status: 0 all values right, 1 some wrong,
 * 2 usage or runtime error, 3 timeout (-T), 77 skipped: --mem cuda without
 * a usable CUDA device (or in a build without CUDA), --backend/--compare
 * nccl without libnccl.so.2 (one "SKIP: ..." line on stdout).
 *
 * Timing (--timing, bench_run.c): `call` is the default on host memory,
 * the way OSU, IMB and the MPI libraries' own benchmarks measure (a
 * barrier, then one call timed alone, blocking unless -z 0; the median
 * over calls of the slowest rank's time): host-memory users compare our
 * numbers with theirs. `stream`, the default with --mem cuda (where the
 * peer is NCCL and the reference nccl-tests), is nccl-tests' back-to-back
 * average; with --cold 1 (buffers moved every call) it is nccl-tests' own
 * method whole. Both run every backend through the same code. --passes P sweeps
 * every size P times: the rows give the best pass, a "#" table after each table
 * the median busbw over passes, the spread and the CPU time per call (the rows
 * keep nccl-tests' 13 columns, so its parsers still read them).
 *
 * --mem cuda: cudaMalloc'd buffers on device local rank % devices, one
 * cudaStream_t per rank; sharc runs on sharc_stream_create_cuda over it
 * (the path SHARC_CUDA_PATH chooses: direct on one host), NCCL on it
 * directly. -R 1 and 2 both register the device buffers with
 * sharc_mem_register (the direct path's peers then read them in place
 * from SHARC_CUDA_INPLACE_BYTES); a "#" line says so.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static void print_header(void) {
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place              "
         "         in-place          \n",
         "", "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n",
         "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
         "#wrong", "time", "algbw", "busbw", "#wrong");
  printf(
      "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n",
      "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
      "(GB/s)", "(GB/s)", "");
}

static void time_str(char *buf, size_t n, double us) {
  snprintf(buf, n,
           us >= 10000.0 ? "%7.0f"
           : us >= 100.0 ? "%7.1f"
                         : "%7.2f",
           us);
}

static void print_row(const row_t *r) {
  printf("%12li  %12li  %8s  %6s  %6i", (long)r->size, (long)r->count,
         data_type_name(r->dtype), data_op_name(r->op), r->root);
  for (int ip = 0; ip < 2; ip++) {
    char t[32], w[32];
    if (r->time_us[ip] < 0) { /* placement not run by this backend */
      printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    time_str(t, sizeof t, r->time_us[ip]);
    if (r->wrong[ip] < 0)
      snprintf(w, sizeof w, "N/A");
    else
      snprintf(w, sizeof w, "%lli", (long long)r->wrong[ip]);
    printf("  %7s  %6.2f  %6.2f  %5s", t, r->algbw[ip], r->busbw[ip], w);
  }
  printf("\n");
  fflush(stdout);
}

typedef struct {
  backend_t *b;
  row_t *rows;
  size_t n, cap;
  int errors;
  double bw_sum;
  int bw_n;
} table_t;

static void table_add(table_t *t, const row_t *r) {
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 64;
    t->rows = realloc(t->rows, t->cap * sizeof *t->rows);
    if (!t->rows) {
      fprintf(stderr, "sharc-bench: out of memory\n");
      exit(2);
    }
  }
  t->rows[t->n++] = *r;
  for (int ip = 0; ip < 2; ip++) {
    if (r->wrong[ip] > 0) /* counted on every rank, as nccl-tests */
      t->errors += t->b->nranks;
    if (r->time_us[ip] < 0)
      continue;
    t->bw_sum += r->busbw[ip];
    t->bw_n++;
  }
}

static void print_footer(const table_t *t, const limits_t *lim, coll_t c,
                         const opts_t *o) {
  printf("# Out of bounds values : %d %s\n", t->errors,
         t->errors ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n", t->bw_n ? t->bw_sum / t->bw_n : 0.0);
  printf("#\n");
  const char *what[2] = {"", ""};
  double cap[2] = {0, 0};
  /* no in-place form (send_recv): the out-of-place limit alone */
  int ipl = bench_coll_has_inplace(c);
  for (int ip = 0; ip < 1 + ipl && lim; ip++)
    cap[ip] = limits_busbw(lim, c, t->b->nranks, t->b->nhosts, ip, &what[ip]);
  if (cap[0] <= 0 || (ipl && cap[1] <= 0) || !t->n)
    return;
  /* over TCP, also the rate of one of two simultaneous streams: a 2-rank
   * exchange sends and receives at once on the same cores */
  const char *tp = getenv("SHARC_TRANSPORT");
  double two = tp && !strcmp(tp, "tcp") ? lim->tcp2 : 0;
  size_t big = 0;
  for (size_t i = 0; i < t->n; i++)
    if (t->rows[i].size > big)
      big = t->rows[i].size;
  int sharc = !strcmp(t->b->name, "sharc");
  const char *path = getenv("SHARC_CUDA_PATH");
  int staged = t->b->nhosts > 1 || (path && !strcmp(path, "staged"));
  const char *fifo =
      o->cuda && sharc && staged
          ? "; sharc's staged path copies through pinned host memory (D2H, "
            "host collective, H2D): PCIe bounds it well below this"
      : o->cuda && sharc
          ? "; sharc's direct and ipc paths copy between the GPU ranks' "
            "memory (the direct path twice, into its staging and out, "
            "unless it reads registered buffers in place: -R 1)"
      : o->reg == 0 && sharc && !two
          ? "; -R 0 stages through FIFOs (2 copies): half of it"
          : "";
  if (!ipl || !strcmp(what[0], what[1]))
    printf("# Limit (%s, %s): busbw <= %.2f GB/s%s\n", t->b->name, what[0],
           cap[0], fifo);
  else
    printf("# Limit (%s, %s): busbw <= %.2f GB/s out-of-place; (%s): %.2f "
           "GB/s in-place%s\n",
           t->b->name, what[0], cap[0], what[1], cap[1], fifo);
  if (two > 0)
    printf("# Limit (%s, loopback TCP, one of two streams at once): busbw <= "
           "%.2f GB/s\n",
           t->b->name, two);
  for (size_t i = 0; i < t->n; i++) {
    const row_t *r = &t->rows[i];
    if (r->size < (16u << 20) && r->size != big)
      continue;
    if (!ipl) {
      printf("#   %12li  %8s  %6s  %6i  out-of-place %5.1f%% of limit",
             (long)r->size, data_type_name(r->dtype), data_op_name(r->op),
             r->root, 100 * r->busbw[0] / cap[0]);
      if (two > 0)
        printf("; %5.1f%% of the two-stream rate", 100 * r->busbw[0] / two);
      printf("\n");
      continue;
    }
    printf("#   %12li  %8s  %6s  %6i  out-of-place %5.1f%%  in-place %5.1f%% "
           "of limit",
           (long)r->size, data_type_name(r->dtype), data_op_name(r->op),
           r->root, 100 * r->busbw[0] / cap[0], 100 * r->busbw[1] / cap[1]);
    if (two > 0)
      printf("; %5.1f%% / %5.1f%% of the two-stream rate",
             100 * r->busbw[0] / two, 100 * r->busbw[1] / two);
    printf("\n");
  }
  printf("#\n");
}

/* The rows' other half: per size and placement the fastest call (--timing
 * call), the best and median busbw over passes, the spread (slowest pass's
 * time / fastest's) and the CPU time per call (the best pass's, maximum
 * over ranks). "#"-prefixed, so nccl-tests' parsers skip it. */
static void print_passes(const table_t *t, const opts_t *o) {
  printf("# Passes (%s): %d; busbw best and median over passes (GB/s), "
         "spread = slowest / fastest pass, cpu = CPU time per call in the best "
         "pass (us, user + sys of this process, max over ranks)%s\n",
         t->b->name, o->passes,
         o->timing == BENCH_CALL ? ", min = fastest call (us)" : "");
  printf("# %10s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %7s  %8s  %7s  %7s  %6s  "
         "%7s\n",
         "size", "type", "redop", "root", "min", "best", "median", "spread",
         "cpu", "min", "best", "median", "spread", "cpu");
  printf("# %10s  %8s  %6s  %6s  %41s  %41s\n", "(B)", "", "", "",
         "out-of-place", "in-place");
  for (size_t i = 0; i < t->n; i++) {
    const row_t *r = &t->rows[i];
    printf("# %10li  %8s  %6s  %6i", (long)r->size, data_type_name(r->dtype),
           data_op_name(r->op), r->root);
    for (int ip = 0; ip < 2; ip++) {
      char m[32] = "-";
      if (r->time_us[ip] < 0) {
        printf("  %8s  %7s  %7s  %6s  %7s", "N/A", "N/A", "N/A", "N/A", "N/A");
        continue;
      }
      if (r->min_us[ip] >= 0)
        time_str(m, sizeof m, r->min_us[ip]);
      printf("  %8s  %7.2f  %7.2f  %6.2f  %7.2f", m, r->busbw[ip],
             r->busbw_med[ip], r->spread[ip], r->cpu_us[ip]);
    }
    printf("\n");
  }
  printf("#\n");
}

/* SMs an all-gather occupies on device memory. No sharc device path
 * queues a kernel for it: the direct one (comm/gpu/path_direct.c, auto's
 * choice on one host) cudaMemcpyAsync between the ranks' device memory
 * and stream memory operations; the staged one (comm/gpu/path_staged.c)
 * cudaMemcpyAsync D2H and H2D and a stream wait (cuStreamWaitValue32 or a host
 * function), the reduction on the host; the CUDA IPC one (comm/gpu/path_ipc.c,
 * SHARC_CUDA_PATH=ipc) cudaMemcpyAsync on IPC-mapped pointers, reductions
 * in kernels (reduce-scatter, all-reduce only). NCCL runs its collectives
 * as kernels (one CTA per channel, channels its own choice): not measured
 * here. */
static void print_sms(const backend_t *b) {
  const char *path = getenv("SHARC_CUDA_PATH");
  const char *how =
      path && !strcmp(path, "ipc")
          ? "the CUDA IPC path queues cudaMemcpyAsync on IPC-mapped peer "
            "buffers, no kernel"
      : path && !strcmp(path, "staged")
          ? "the staged path queues cudaMemcpyAsync D2H/H2D and stream "
            "waits, no kernel"
      : path && !strcmp(path, "direct")
          ? "the direct path queues cudaMemcpyAsync between the ranks' "
            "device memory and stream memory operations, no kernel"
          : "SHARC_CUDA_PATH=auto: on one host the direct path "
            "(cudaMemcpyAsync between the ranks' device memory and stream "
            "memory operations), else the staged path (cudaMemcpyAsync "
            "D2H/H2D and stream waits); no kernel either way";
  if (!strcmp(b->name, "sharc"))
    printf("# SMs used by all_gather: 0 (copy engines only: %s)\n", how);
  else
    printf("# SMs used by all_gather (%s): not measured (NCCL launches "
           "kernels: one CTA per channel)\n",
           b->name);
  printf("#\n");
}

static void print_compare(const table_t *a, const table_t *p) {
  printf("# Compare: busbw %s / %s (ratio > 1: %s faster)\n", a->b->name,
         p->b->name, a->b->name);
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %7s  %6s  %7s  %7s  %6s\n", "size",
         "count", "type", "redop", "root", "sharc", p->b->name, "ratio",
         "sharc", p->b->name, "ratio");
  printf("# %10s  %12s  %8s  %6s  %6s  %24s  %24s\n", "(B)", "(elements)", "",
         "", "", "out-of-place (GB/s)", "in-place (GB/s)");
  for (size_t i = 0, j = 0; i < a->n && j < p->n; i++) {
    const row_t *x = &a->rows[i], *y = &p->rows[j];
    if (x->size != y->size || x->dtype != y->dtype || x->op != y->op ||
        x->root != y->root)
      continue; /* peer skipped this combination */
    j++;
    printf("# %10li  %12li  %8s  %6s  %6i", (long)x->size, (long)x->count,
           data_type_name(x->dtype), data_op_name(x->op), x->root);
    for (int ip = 0; ip < 2; ip++) {
      char xs[32] = "N/A", ys[32] = "N/A", q[32] = "N/A";
      int both = x->time_us[ip] >= 0 && y->time_us[ip] >= 0;
      if (x->time_us[ip] >= 0)
        snprintf(xs, sizeof xs, "%.2f", x->busbw[ip]);
      if (y->time_us[ip] >= 0)
        snprintf(ys, sizeof ys, "%.2f", y->busbw[ip]);
      if (both)
        snprintf(q, sizeof q, "%.2f",
                 y->busbw[ip] > 0 ? x->busbw[ip] / y->busbw[ip] : 0.0);
      printf("  %7s  %7s  %6s", xs, ys, q);
    }
    printf("\n");
  }
  printf("#\n");
}

/* One placement's time, algbw, busbw and wrong as JSON members (prefix
 * "" or "inplace_"); null where the backend did not run it. */
static void json_place(FILE *f, const row_t *r, int ip) {
  const char *p = ip ? "inplace_" : "";
  if (r->time_us[ip] < 0)
    fprintf(f,
            "\"%stime_us\": null, \"%salgbw\": null, \"%sbusbw\": null, "
            "\"%swrong\": null",
            p, p, p, p);
  else
    fprintf(f,
            "\"%stime_us\": %.3f, \"%salgbw\": %.4f, \"%sbusbw\": %.4f, "
            "\"%swrong\": %lld",
            p, r->time_us[ip], p, r->algbw[ip], p, r->busbw[ip], p,
            (long long)r->wrong[ip]);
}

/* The pass statistics of one placement (null where not run): busbw
 * median, spread, fastest call (null with --timing stream), CPU time per
 * call, and each pass's time and CPU time. */
static void json_passes(FILE *f, const row_t *r, int ip) {
  const char *p = ip ? "inplace_" : "";
  if (r->time_us[ip] < 0) {
    fprintf(f,
            ", \"%sbusbw_median\": null, \"%sspread\": null, \"%smin_us\": "
            "null, \"%scpu_us\": null, \"%spass_time_us\": null, "
            "\"%spass_cpu_us\": null",
            p, p, p, p, p, p);
    return;
  }
  fprintf(f, ", \"%sbusbw_median\": %.4f, \"%sspread\": %.4f, ", p,
          r->busbw_med[ip], p, r->spread[ip]);
  if (r->min_us[ip] < 0)
    fprintf(f, "\"%smin_us\": null", p);
  else
    fprintf(f, "\"%smin_us\": %.3f", p, r->min_us[ip]);
  fprintf(f, ", \"%scpu_us\": %.3f, \"%spass_time_us\": [", p, r->cpu_us[ip],
          p);
  for (int k = 0; k < r->passes; k++)
    fprintf(f, "%s%.3f", k ? ", " : "", r->pass_us[ip][k]);
  fprintf(f, "], \"%spass_cpu_us\": [", p);
  for (int k = 0; k < r->passes; k++)
    fprintf(f, "%s%.3f", k ? ", " : "", r->pass_cpu_us[ip][k]);
  fprintf(f, "]");
}

static void json_rows(FILE *f, const table_t *t, int *first) {
  for (size_t i = 0; f && i < t->n; i++) {
    const row_t *r = &t->rows[i];
    fprintf(f,
            "%s\n {\"backend\": \"%s\", \"collective\": \"%s\", \"size\": "
            "%zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
            "\"root\": %d, ",
            *first ? "" : ",", t->b->name, bench_coll_names[r->coll], r->size,
            r->count, data_type_name(r->dtype), data_op_name(r->op), r->root);
    json_place(f, r, 0);
    fprintf(f, ", ");
    json_place(f, r, 1);
    for (int ip = 0; ip < 2; ip++)
      json_passes(f, r, ip);
    fprintf(f, "}");
    *first = 0;
  }
}

static void cpu_model(char *buf, size_t n) {
  snprintf(buf, n, "cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
      char *v = strchr(line, ':') + 2;
      v[strcspn(v, "\n")] = 0;
      snprintf(buf, n, "cpu: %s", v);
      break;
    }
  if (f)
    fclose(f);
}

/* nccl-tests' preamble; device lines gathered from every rank. */
static void preamble(backend_t *b, const opts_t *o, const limits_t *lim) {
  enum { LINE = 256 };
  char line[LINE], host[64] = "?", cpu[160];
  gethostname(host, sizeof host);
  cpu_model(cpu, sizeof cpu);
  if (o->cuda) {
    char dev[160];
    bench_cuda_describe(dev, sizeof dev);
    snprintf(line, LINE,
             "#  Rank %2d Group %2d Pid %6d on %10s device %2d %s\n", b->rank,
             0, (int)getpid(), host, bench_cuda_device(), dev);
  } else {
    snprintf(line, LINE,
             "#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x00] host "
             "memory (%s)\n",
             b->rank, 0, (int)getpid(), host, b->local_rank, cpu);
  }
  char *all = malloc((size_t)b->nranks * LINE);
  if (!all || bench_allgather_bytes(b, line, all, LINE)) {
    fprintf(stderr, "sharc-bench: gathering device lines failed\n");
    exit(2);
  }
  if (b->rank == 0) {
    printf(
        "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) "
        "warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n",
        o->minb, o->maxb, o->step_factor > 1 ? o->step_factor : o->step_bytes,
        o->step_factor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check);
    if (o->blocking && o->timing == BENCH_STREAM)
      printf("# Blocking Enabled: wait for completion and barrier after each "
             "collective \n");
    printf("#\n# Using devices\n");
    for (int r = 0; r < b->nranks; r++)
      printf("%s", all + (size_t)r * LINE);
    static const char *const regs[] = {"malloc", "sharc_mem_alloc",
                                       "malloc + sharc_mem_register"};
    if (o->cuda)
      printf("#\n# sharc-bench %s: backend %s%s%s, %d ranks on %d host(s), "
             "device memory (cudaMalloc%s, device local rank %% %d; sharc: "
             "sharc_stream_create_cuda, SHARC_CUDA_PATH=%s), %s\n",
             sharc_version(), o->backend, o->compare ? " vs " : "",
             o->compare ? o->compare : "", b->nranks, b->nhosts,
             o->reg ? " + sharc_mem_register" : "", bench_cuda_ndev(),
             getenv("SHARC_CUDA_PATH") && *getenv("SHARC_CUDA_PATH")
                 ? getenv("SHARC_CUDA_PATH")
                 : "auto",
             o->blocking ? "blocking (-z 1)" : "stream (-z 0)");
    else
      printf("#\n# sharc-bench %s: backend %s%s%s, %d ranks on %d host(s), "
             "host memory, buffers %s (-R %d), %s\n",
             sharc_version(), o->backend, o->compare ? " vs " : "",
             o->compare ? o->compare : "", b->nranks, b->nhosts, regs[o->reg],
             o->reg, o->blocking ? "blocking (-z 1)" : "stream (-z 0)");
    if (o->timing == BENCH_CALL)
      printf("# Timing: call (per iteration a barrier, t0, one operation "
             "%s, t1; time = median over %d iterations of the slowest "
             "rank's t1 - t0)",
             o->blocking && !o->cuda ? "called blocking"
                                     : "enqueued and synchronized",
             o->iters);
    else
      printf("# Timing: stream (%d operations %s, then synchronize; time = "
             "total / %d, %s over ranks)",
             o->iters,
             o->blocking ? "each blocking with a barrier after it"
                         : "enqueued back to back",
             o->iters,
             (const char *[]){"rank 0's", "average", "minimum",
                              "maximum"}[o->average]);
    printf("; buffers %s; %d pass%s%s; CPU clock read cost %.3f us "
           "(subtracted)\n",
           o->cold ? "cold (--cold 1: moved by one footprint every iteration "
                     "within 2 x maxBytes)"
                   : "the same every iteration",
           o->passes, o->passes > 1 ? "es" : "",
           o->passes > 1 ? " (rows: the best pass)" : "",
           bench_cpu_clock_cost() * 1e6);
    if (bench_sr_pair)
      printf("# send_recv: --exchange pair (each rank with rank ^ 1)\n");
    if (o->cuda && o->reg)
      printf("# -R %d with device memory: cudaMalloc + sharc_mem_register "
             "(on the direct path, peers read calls of at least "
             "SHARC_CUDA_INPLACE_BYTES in place)\n",
             o->reg);
    if (*bench_nccl_version())
      printf("# NCCL version %s (libnccl.so.2, loaded at run time)\n",
             bench_nccl_version());
    if (*bench_nccl_missing())
      printf("# NCCL %s exports no %s: nccl is not supported there\n",
             bench_nccl_version(), bench_nccl_missing());
    /* SHARC_CHECK adds a signature exchange to every sharc collective:
     * say so, so that its times are not taken for the plain ones. */
    const char *chk = getenv("SHARC_CHECK");
    if (chk && atoi(chk) != 0)
      printf("# SHARC_CHECK=%s: every sharc collective first compares its "
             "signature across ranks (one small all-gather)\n",
             chk);
    if (*bench_mpi_library())
      printf("# MPI library: %s\n", bench_mpi_library());
    if (*bench_ccl_version())
      printf("# oneCCL version %s (ATL transport %s: CCL_ATL_TRANSPORT)\n",
             bench_ccl_version(), bench_ccl_transport());
    if (lim)
      printf("# Limits: memcpy %.2f GB/s (one core), %.2f GB/s (%d ranks at "
             "once, per host); loopback TCP %.2f GB/s (one stream), %.2f GB/s "
             "(each of two streams at once)\n",
             lim->copy1, lim->copy_all, b->nranks, lim->tcp, lim->tcp2);
    if (lim && lim->cuda)
      printf("# Limits: GPU device-to-device copy %.2f GB/s (cudaMemcpyAsync "
             "of 256 MiB, one rank alone, best of 5); ranks %s\n",
             lim->d2d,
             lim->one_gpu ? "share one GPU: the bounds below divide it"
                          : "on several GPUs or hosts: no bound printed");
    printf("#\n");
    fflush(stdout);
  }
  free(all);
}

int main(int argc, char **argv) {
  opts_t o = {.minb = 32u << 20,
              .maxb = 32u << 20,
              .step_bytes = 1u << 20,
              .step_factor = 1,
              .iters = 20,
              .warmup = 5,
              .check = 1,
              .op = SHARC_SUM,
              .dtype = SHARC_F32,
              .root = 0,
              .average = 1,
              .limits = 1,
              .blocking = -1, /* -z: by --timing */
              .timing = -1,   /* by --mem */
              .passes = 1,
              .backend = "sharc"};
  unsigned which; /* bit mask of coll_t */
  bench_parse(argc, argv, &o, &which);
  setvbuf(stdout, NULL, _IOLBF, 0);

  backend_t sb = {0}, mb = {0}, nb = {0}, cb = {0};
  backend_t *main_b = NULL, *peer_b = NULL;
  int want_mpi =
      !strcmp(o.backend, "mpi") || (o.compare && !strcmp(o.compare, "mpi"));
  int want_nccl =
      !strcmp(o.backend, "nccl") || (o.compare && !strcmp(o.compare, "nccl"));
  int want_ccl =
      !strcmp(o.backend, "ccl") || (o.compare && !strcmp(o.compare, "ccl"));
  if (want_ccl && o.cuda) {
    fprintf(stderr, "sharc-bench: --backend/--compare ccl measures oneCCL on "
                    "host memory: use --mem host\n");
    return 2;
  }
  if (want_ccl && !bench_ccl_available()) {
    bench_ccl_init(&cb, &o, NULL); /* says how to build it */
    return 2;
  }
  if (want_nccl && !o.cuda) {
    fprintf(stderr, "sharc-bench: --backend/--compare nccl measures device "
                    "memory: pass --mem cuda (needs a GPU)\n");
    return 2;
  }
  if (want_mpi && o.cuda) {
    fprintf(stderr, "sharc-bench: --backend/--compare mpi with --mem cuda: "
                    "not supported (the MPI backend passes host memory; "
                    "device buffers need a CUDA-aware MPI); use --mem host\n");
    return 2;
  }
  if (o.cuda) { /* every rank decides alone, before any rendezvous */
    char why[256];
    if (!bench_cuda_probe(why, sizeof why)) {
      if (bench_env_rank0())
        printf("SKIP: no CUDA device (%s)\n", why);
      return 77;
    }
    if (want_nccl && bench_nccl_load(why, sizeof why)) {
      if (bench_env_rank0())
        printf("SKIP: no NCCL (%s)\n", why);
      return 77;
    }
    o.reg_asked = o.reg; /* device memory: any -R registers (top of file) */
  }
  if (want_mpi) {
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_RANK") &&
        !getenv("PMIX_RANK")) {
      fprintf(stderr, "sharc-bench: --backend/--compare mpi: start under "
                      "mpirun, e.g. mpirun -np 4 sharc-bench all --compare "
                      "mpi\n");
      return 2;
    }
    if (bench_mpi_init(&mb, &argc, &argv))
      return 2;
  }
  /* sharc also carries NCCL's unique id and oneCCL's store address,
   * NCCL's barriers and both peers' control values */
  if ((!strcmp(o.backend, "sharc") || want_nccl || want_ccl) &&
      bench_sharc_init(&sb, &o))
    return 2;
  if (want_nccl && bench_nccl_init(&nb, &o, &sb))
    return 2;
  if (want_ccl && bench_ccl_init(&cb, &o, &sb))
    return 2;
  main_b = !strcmp(o.backend, "mpi")    ? &mb
           : !strcmp(o.backend, "nccl") ? &nb
           : !strcmp(o.backend, "ccl")  ? &cb
                                        : &sb;
  if (o.compare)
    peer_b = !strcmp(o.compare, "nccl")  ? &nb
             : !strcmp(o.compare, "ccl") ? &cb
                                         : &mb;
  backend_t *b = main_b;
  if (o.root < -1 || o.root >= b->nranks) {
    if (b->rank == 0)
      fprintf(stderr, "sharc-bench: -r %d outside 0..%d (or -1: every root)\n",
              o.root, b->nranks - 1);
    return 2;
  }
  buffers_t bu;
  if (bench_buffers_alloc(&bu, &o))
    return 2;
  limits_t lim, *limp = NULL;
  if (o.limits) {
    limits_measure(b, &lim, o.cuda);
    limp = &lim;
  }
  preamble(b, &o, limp);

  FILE *json = NULL;
  int first = 1;
  if (b->rank == 0 && o.json) {
    if (!(json = fopen(o.json, "w"))) {
      fprintf(stderr, "sharc-bench: cannot write %s\n", o.json);
      return 2;
    }
    char host[64] = "?";
    gethostname(host, sizeof host);
    fprintf(json,
            "{\"nranks\": %d, \"nhosts\": %d, \"host\": \"%s\", \"backend\": "
            "\"%s\", \"compare\": \"%s\", \"registration\": %d, \"blocking\": "
            "%d, \"iters\": %d, \"warmup\": %d, \"sharc_check\": %d, "
            "\"memory\": \"%s\", \"timing\": \"%s\", \"cold\": %d, "
            "\"passes\": %d, \"average\": %d, \"exchange\": \"%s\", "
            "\"cpu_clock_cost_us\": %.4f",
            b->nranks, b->nhosts, host, o.backend, o.compare ? o.compare : "",
            o.reg, o.blocking, o.iters, o.warmup,
            getenv("SHARC_CHECK") ? atoi(getenv("SHARC_CHECK")) != 0 : 0,
            o.cuda ? "cuda" : "host",
            o.timing == BENCH_CALL ? "call" : "stream", o.cold, o.passes,
            o.average, bench_sr_pair ? "pair" : "ring",
            bench_cpu_clock_cost() * 1e6);
    if (o.cuda) {
      char dev[160];
      bench_cuda_describe(dev, sizeof dev);
      fprintf(json, ", \"device\": \"%s\", \"registration_asked\": %d", dev,
              o.reg_asked);
    }
    if (*bench_nccl_version())
      fprintf(json, ", \"nccl_version\": \"%s\"", bench_nccl_version());
    if (*bench_mpi_library())
      fprintf(json, ", \"mpi_library\": \"%s\"", bench_mpi_library());
    if (*bench_ccl_version())
      fprintf(json, ", \"ccl_version\": \"%s\", \"ccl_transport\": \"%s\"",
              bench_ccl_version(), bench_ccl_transport());
    if (limp)
      fprintf(json,
              ", \"limits\": {\"memcpy_1core\": %.3f, \"memcpy_all\": %.3f, "
              "\"tcp_loopback\": %.3f, \"tcp_loopback_2streams\": %.3f}",
              lim.copy1, lim.copy_all, lim.tcp, lim.tcp2);
    if (limp && lim.cuda)
      fprintf(json,
              ", \"limits_gpu\": {\"d2d_copy\": %.3f, \"one_gpu\": %d, "
              "\"sharc_all_gather_sms\": 0}",
              lim.d2d, lim.one_gpu);
    fprintf(json, ", \"results\": [");
  }

  /* the sizes of the sweep, and a row per size and backend */
  size_t nsizes = 0, *sizes = NULL;
  for (size_t size = o.minb; size <= o.maxb;
       size = o.step_factor > 1 ? size * o.step_factor : size + o.step_bytes) {
    size_t *grown = realloc(sizes, (nsizes + 1) * sizeof *sizes);
    if (!grown) {
      fprintf(stderr, "sharc-bench: out of memory\n");
      return 2;
    }
    sizes = grown;
    sizes[nsizes++] = size;
    if (size == 0)
      break;
  }
  row_t *acc = calloc(2 * nsizes, sizeof *acc);
  if (!acc) {
    fprintf(stderr, "sharc-bench: out of memory\n");
    return 2;
  }

  int errors = 0;
  int ntypes = o.dtype < 0 ? SHARC_DTYPE_COUNT : 1;
  int several = (which & (which - 1)) != 0;
  for (int c = 0; c < C_N; c++) {
    if (!(which & (1u << c)))
      continue;
    table_t tm = {.b = main_b}, tp = {.b = peer_b};
    int reduces = bench_coll_reduces((coll_t)c);
    int rooted = bench_coll_rooted((coll_t)c);
    int nops = reduces ? (o.op < 0 ? SHARC_OP_COUNT : 1) : 1;
    int r0 = rooted ? (o.root < 0 ? 0 : o.root) : -1;
    int r1 = rooted ? (o.root < 0 ? b->nranks - 1 : o.root) : -1;
    if (b->rank == 0) {
      if (several)
        printf("#\n# Collective test: %s\n#\n", bench_coll_names[c]);
      if (!peer_b)
        print_header();
    }
    for (int ti = 0; ti < ntypes; ti++) {
      sharc_dtype_t dt =
          o.dtype < 0 ? data_type_order[ti] : (sharc_dtype_t)o.dtype;
      for (int oi = 0; oi < nops; oi++) {
        int op = !reduces ? -1 : o.op < 0 ? (int)data_op_order[oi] : o.op;
        for (int root = r0; root <= r1; root++) {
          backend_t *bs[2] = {main_b, peer_b};
          int ok[2];
          for (int k = 0; k < 2; k++) {
            ok[k] = bs[k] && bs[k]->supports(bs[k], (coll_t)c, dt, op);
            if (bs[k] && !ok[k] && b->rank == 0)
              printf("# %s: %s %s %s not supported by this backend, "
                     "skipped\n",
                     bs[k]->name, bench_coll_names[c], data_type_name(dt),
                     data_op_name(op));
            if (ok[k])
              bench_warmup(bs[k], &o, &bu, (coll_t)c, dt, op, root);
          }
          /* pass by pass over every size, each size's rows kept until
           * the last pass; the backends alternate on each size */
          for (size_t si = 0; si < nsizes; si++)
            for (int k = 0; k < 2; k++)
              acc[2 * si + k] = (row_t){.coll = (coll_t)c,
                                        .size = sizes[si],
                                        .dtype = dt,
                                        .op = op,
                                        .root = root};
          for (int pass = 0; pass < o.passes; pass++)
            for (size_t si = 0; si < nsizes; si++)
              for (int k = 0; k < 2; k++) {
                if (!ok[k])
                  continue;
                row_t *row = &acc[2 * si + k];
                row->size = sizes[si];
                bench_one(bs[k], &o, &bu, row, pass);
                if (pass < o.passes - 1)
                  continue;
                bench_passes_finish(bs[k], row);
                table_add(k ? &tp : &tm, row);
                if (!peer_b && b->rank == 0)
                  print_row(row);
              }
        }
      }
    }
    if (b->rank == 0) {
      table_t *ts[2] = {&tm, &tp};
      for (int k = 0; k < (peer_b ? 2 : 1); k++) {
        if (peer_b && !ts[k]->n) { /* nothing it supports in this table */
          printf("# Backend: %s: no rows (%s, with the types and ops "
                 "asked, is not supported by this backend)\n#\n",
                 ts[k]->b->name, bench_coll_names[c]);
          continue;
        }
        if (peer_b) {
          printf("# Backend: %s\n", ts[k]->b->name);
          print_header();
          for (size_t i = 0; i < ts[k]->n; i++)
            print_row(&ts[k]->rows[i]);
        }
        print_footer(ts[k], limp, (coll_t)c, &o);
        print_passes(ts[k], &o);
        if (c == C_AG && o.cuda)
          print_sms(ts[k]->b);
        json_rows(json, ts[k], &first);
      }
      if (peer_b && tm.n && tp.n)
        print_compare(&tm, &tp);
    }
    errors += tm.errors + tp.errors;
    free(tm.rows);
    free(tp.rows);
  }
  if (json) {
    fprintf(json, "\n]}\n");
    fclose(json);
  }
  free(acc);
  free(sizes);
  bench_buffers_free(&bu, &o);
  if (nb.finalize)
    nb.finalize(&nb);
  if (cb.finalize)
    cb.finalize(&cb);
  if (sb.finalize) /* before the cudaStream_t it is bound to */
    sb.finalize(&sb);
  if (o.cuda)
    bench_cuda_teardown();
  if (mb.finalize)
    mb.finalize(&mb);
  return errors ? 1 : 0;
}

/*
 * sharc-bench - bandwidth benchmark in the nccl-tests layout.
 *
 *   sharcrun -n 4 sharc-bench all_reduce -b 8 -e 256M -f 2
 *
 * Times back-to-back collectives (iters after warm-up), reports per-op time
 * in microseconds, algbw = size / time and busbw = algbw * factor (GB/s,
 * 1e9 B/s), with nccl-tests' factors: (n-1)/n for all-gather and
 * reduce-scatter, 2(n-1)/n for all-reduce, 1 for broadcast. With -c 1 each
 * size is also checked (#wrong counts wrong elements on this rank; the sum
 * over ranks is printed) and the exit status is 1 when any value is wrong.
 * -J FILE writes the rows as JSON.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sharc.h"

typedef enum { C_AG, C_RS, C_AR, C_BC, C_N } coll_t;
static const char *const coll_names[C_N] = {"all_gather", "reduce_scatter",
                                            "all_reduce", "broadcast"};

typedef struct {
  size_t minb, maxb, step_factor, step_bytes;
  int iters, warmup, check, root, reg;
  sharc_dtype_t dtype;
  sharc_op_t op;
  const char *json;
} opts_t;

static int rank, nranks;
static sharc_comm_t comm;

#define DIE_IF(st, what)                                                       \
  do {                                                                         \
    if ((st) != SHARC_OK) {                                                    \
      fprintf(stderr, "sharc-bench: %s failed: %s: %s\n", what,                \
              sharc_status_name(st), sharc_comm_last_error(comm));             \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0) {
    fprintf(stderr, "sharc-bench: bad size '%s' (use e.g. 8, 64K, 256M, 1G)\n",
            s);
    exit(2);
  }
  switch (*end) {
  case 'K':
  case 'k':
    v *= 1024;
    break;
  case 'M':
  case 'm':
    v *= 1024 * 1024;
    break;
  case 'G':
  case 'g':
    v *= 1024.0 * 1024 * 1024;
    break;
  case '\0':
    break;
  default:
    fprintf(stderr, "sharc-bench: bad size suffix in '%s' (K, M or G)\n", s);
    exit(2);
  }
  return (size_t)v;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Element values: small integers, exact in every type for sum over <= 64
 * ranks. */
static double value(int r, size_t i) {
  return (double)((r * 7 + (int)(i % 13)) % 8);
}

static void fill(void *buf, size_t n, int r, size_t base) {
  for (size_t i = 0; i < n; i++)
    ((float *)buf)[i] = (float)value(r, base + i);
}

static sharc_status_t run(coll_t c, void *s, void *r, size_t count,
                          const opts_t *o) {
  switch (c) {
  case C_AG:
    return sharc_all_gather(s, r, count, o->dtype, comm, NULL);
  case C_RS:
    return sharc_reduce_scatter(s, r, count, o->dtype, o->op, comm, NULL);
  case C_AR:
    return sharc_all_reduce(s, r, count, o->dtype, o->op, comm, NULL);
  default:
    return sharc_broadcast(s, r, count, o->dtype, o->root, comm, NULL);
  }
}

/* Counts wrong elements of the result on this rank (sum, float). */
static size_t check(coll_t c, const float *r, size_t count, const opts_t *o) {
  size_t wrong = 0;
  size_t n = c == C_AG ? count * (size_t)nranks : count;
  for (size_t i = 0; i < n; i++) {
    double want;
    if (c == C_AG)
      want = value((int)(i / count), i % count);
    else if (c == C_BC)
      want = value(o->root, i);
    else {
      size_t gi = c == C_RS ? (size_t)rank * count + i : i;
      want = 0;
      for (int q = 0; q < nranks; q++)
        want += value(q, gi);
    }
    if (r[i] != (float)want)
      wrong++;
  }
  return wrong;
}

static double time_op(coll_t c, uint8_t *sbuf, uint8_t *rbuf, size_t count,
                      const opts_t *o, int inplace, size_t *wrong) {
  /* NCCL's in-place layouts. */
  size_t mine = (size_t)rank * count * 4;
  uint8_t *s = sbuf, *r = rbuf;
  if (inplace) {
    if (c == C_AG)
      s = rbuf + mine;
    else if (c == C_RS)
      r = sbuf + mine;
    else
      s = rbuf;
  }
  for (int w = 0; w < o->warmup; w++)
    DIE_IF(run(c, s, r, count, o), coll_names[c]);
  DIE_IF(sharc_barrier(comm, NULL), "barrier");
  double t0 = now_s();
  for (int it = 0; it < o->iters; it++)
    DIE_IF(run(c, s, r, count, o), coll_names[c]);
  double us = (now_s() - t0) * 1e6 / o->iters;
  /* Average the time over ranks, as nccl-tests' default -a. */
  double sum;
  DIE_IF(sharc_all_reduce(&us, &sum, 1, SHARC_F64, SHARC_SUM, comm, NULL),
         "time reduce");
  us = sum / nranks;
  *wrong = 0;
  if (o->check) {
    size_t in_n = c == C_RS ? count * (size_t)nranks : count;
    if (c == C_BC && rank != o->root)
      memset(r, 0, count * 4);
    else
      fill(s, in_n, rank, 0);
    DIE_IF(run(c, s, r, count, o), coll_names[c]);
    uint64_t w = check(c, (const float *)r, count, o), tot;
    DIE_IF(sharc_all_reduce(&w, &tot, 1, SHARC_U64, SHARC_SUM, comm, NULL),
           "check reduce");
    *wrong = (size_t)tot;
  }
  return us;
}

static void usage(void) {
  fprintf(
      stderr,
      "usage: sharc-bench "
      "<all_gather|reduce_scatter|all_reduce|broadcast|all>\n"
      "  [-b minbytes] [-e maxbytes] [-f factor] [-i stepbytes] [-n iters]\n"
      "  [-w warmup] [-c 0|1] [-r root] [-R 0|1|2] [-J file.json]\n"
      "  -R: 0 malloc'ed buffers, 1 malloc + sharc_mem_register, 2 "
      "sharc_mem_alloc\n"
      "run under a launcher, e.g.: sharcrun -n 4 sharc-bench all_reduce -b 8 "
      "-e 64M\n");
  exit(2);
}

int main(int argc, char **argv) {
  opts_t o = {8, 32 * 1024 * 1024, 2,         0,   20, 5, 1, 0,
              0, SHARC_F32,        SHARC_SUM, NULL};
  if (argc < 2)
    usage();
  int which = -1;
  if (!strcmp(argv[1], "all"))
    which = C_N;
  for (int c = 0; c < C_N; c++)
    if (!strcmp(argv[1], coll_names[c]))
      which = c;
  if (which < 0)
    usage();
  for (int i = 2; i < argc; i++) {
    if (i + 1 >= argc)
      usage();
    const char *a = argv[i], *v = argv[++i];
    if (!strcmp(a, "-b"))
      o.minb = parse_size(v);
    else if (!strcmp(a, "-e"))
      o.maxb = parse_size(v);
    else if (!strcmp(a, "-f"))
      o.step_factor = (size_t)atol(v);
    else if (!strcmp(a, "-i"))
      o.step_bytes = parse_size(v);
    else if (!strcmp(a, "-n"))
      o.iters = atoi(v);
    else if (!strcmp(a, "-w"))
      o.warmup = atoi(v);
    else if (!strcmp(a, "-c"))
      o.check = atoi(v);
    else if (!strcmp(a, "-r"))
      o.root = atoi(v);
    else if (!strcmp(a, "-J"))
      o.json = v;
    else if (!strcmp(a, "-R"))
      o.reg = atoi(v);
    else
      usage();
  }
  if (o.iters < 1 || o.minb > o.maxb ||
      (o.step_factor < 2 && o.step_bytes == 0))
    usage();
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    fprintf(stderr, "sharc-bench: init failed: %s: %s\n", sharc_status_name(st),
            sharc_last_error());
    return 2;
  }
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &nranks);
  if (o.root < 0 || o.root >= nranks) {
    fprintf(stderr, "sharc-bench: root %d outside 0..%d\n", o.root, nranks - 1);
    return 2;
  }
  size_t maxbuf = o.maxb + 64 * (size_t)nranks;
  /* -R 0: plain malloc; 1: malloc + sharc_mem_register; 2: sharc_mem_alloc. */
  void *sbuf = NULL, *rbuf = NULL;
  if (o.reg == 2) {
    if (sharc_mem_alloc(&sbuf, maxbuf) != SHARC_OK)
      sbuf = NULL;
    if (sharc_mem_alloc(&rbuf, maxbuf) != SHARC_OK)
      rbuf = NULL;
  } else {
    sbuf = malloc(maxbuf);
    rbuf = malloc(maxbuf);
    if (o.reg == 1 && sbuf && rbuf &&
        (sharc_mem_register(sbuf, maxbuf) != SHARC_OK ||
         sharc_mem_register(rbuf, maxbuf) != SHARC_OK)) {
      fprintf(stderr, "sharc-bench: sharc_mem_register: %s\n",
              sharc_last_error());
      return 2;
    }
  }
  if (!sbuf || !rbuf) {
    fprintf(stderr, "sharc-bench: cannot allocate 2 x %zu bytes\n", maxbuf);
    return 2;
  }
  memset(sbuf, 0, maxbuf);
  memset(rbuf, 0, maxbuf);
  FILE *json = NULL;
  if (rank == 0 && o.json) {
    json = fopen(o.json, "w");
    if (!json) {
      fprintf(stderr, "sharc-bench: cannot write %s\n", o.json);
      return 2;
    }
    fprintf(json, "{\"nranks\": %d, \"results\": [", nranks);
  }
  char host[64];
  gethostname(host, sizeof host);
  int nhosts = 1;
  sharc_comm_nhosts(comm, &nhosts);
  if (rank == 0) {
    printf("# sharc-bench %s: %d ranks on %d host(s), minBytes %zu maxBytes "
           "%zu step: %zu(%s) "
           "warmup iters: %d iters: %d validation: %d registration: %d\n",
           sharc_version(), nranks, nhosts, o.minb, o.maxb,
           o.step_bytes ? o.step_bytes : o.step_factor,
           o.step_bytes ? "bytes" : "factor", o.warmup, o.iters, o.check,
           o.reg);
  }
  size_t total_wrong = 0;
  double bw_sum = 0;
  int bw_n = 0, first_json = 1;
  for (int c = (which == C_N ? 0 : which); c < (which == C_N ? C_N : which + 1);
       c++) {
    if (rank == 0) {
      printf("#\n# Collective test: %s\n#\n", coll_names[c]);
      printf("#%75s%34s\n", "out-of-place", "in-place");
      printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n",
             "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
             "#wrong", "time", "algbw", "busbw", "#wrong");
      printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)",
             "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
             "(GB/s)", "(GB/s)", "");
    }
    double factor = c == C_AR   ? 2.0 * (nranks - 1) / nranks
                    : c == C_BC ? 1.0
                                : (double)(nranks - 1) / nranks;
    for (size_t bytes = o.minb; bytes <= o.maxb;
         bytes = o.step_bytes ? bytes + o.step_bytes : bytes * o.step_factor) {
      size_t count = bytes / 4; /* float */
      if (c == C_AG || c == C_RS)
        count /= (size_t)nranks;
      size_t size =
          (c == C_AG || c == C_RS) ? count * 4 * (size_t)nranks : count * 4;
      if (count == 0) {
        if (bytes == 0)
          break;
        continue;
      }
      size_t w0, w1;
      double t0 = time_op((coll_t)c, sbuf, rbuf, count, &o, 0, &w0);
      double t1 = time_op((coll_t)c, sbuf, rbuf, count, &o, 1, &w1);
      double a0 = (double)size / t0 / 1e3, a1 = (double)size / t1 / 1e3;
      total_wrong += w0 + w1;
      bw_sum += a0 * factor;
      bw_n++;
      if (rank == 0) {
        printf("  %10zu %12zu %8s %6s %6d %9.2f %7.2f %7.2f %6zu %9.2f %7.2f "
               "%7.2f %6zu\n",
               size, count, "float", (c == C_AR || c == C_RS) ? "sum" : "none",
               c == C_BC ? o.root : -1, t0, a0, a0 * factor, w0, t1, a1,
               a1 * factor, w1);
        fflush(stdout);
        if (json) {
          fprintf(
              json,
              "%s\n {\"collective\": \"%s\", \"size\": %zu, \"count\": %zu, "
              "\"type\": \"float\", \"time_us\": %.3f, \"algbw\": %.4f, "
              "\"busbw\": %.4f, "
              "\"wrong\": %zu, \"inplace_time_us\": %.3f, \"inplace_busbw\": "
              "%.4f, "
              "\"inplace_wrong\": %zu}",
              first_json ? "" : ",", coll_names[c], size, count, t0, a0,
              a0 * factor, w0, t1, a1 * factor, w1);
          first_json = 0;
        }
      }
      if (bytes == 0)
        break;
    }
  }
  if (rank == 0) {
    printf("# Out of bounds values : %zu %s\n", total_wrong,
           total_wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n#\n", bw_n ? bw_sum / bw_n : 0.0);
    if (json) {
      fprintf(json, "\n]}\n");
      fclose(json);
    }
  }
  if (o.reg == 2) {
    sharc_mem_free(sbuf);
    sharc_mem_free(rbuf);
  } else {
    if (o.reg == 1) {
      sharc_mem_deregister(sbuf);
      sharc_mem_deregister(rbuf);
    }
    free(sbuf);
    free(rbuf);
  }
  sharc_comm_destroy(comm);
  return total_wrong ? 1 : 0;
}

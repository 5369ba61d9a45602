/*
 * bench_opts.c - sharc-bench's command line: usage(), the flags and their
 * checks (bench_parse), and which rank prints (bench_env_rank0). The
 * flags, their meanings and defaults are nccl-tests' (bench_main.c says
 * how the tables and the timing read).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

int bench_sr_pair; /* --exchange pair */

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: sharc-bench <all_gather|reduce_scatter|all_reduce|broadcast|"
      "reduce|gather|scatter|all_to_all|send_recv|all> [flags]\n"
      "  (several collectives: a comma-separated list, e.g. "
      "all_gather,all_reduce)\n"
      "  -b,--minbytes N     smallest size (K, M, G suffixes)     [32M]\n"
      "  -e,--maxbytes N     largest size                          [32M]\n"
      "  -i,--stepbytes N    size increment (when -f is 1)         [1M]\n"
      "  -f,--stepfactor N   size multiplier                       [1]\n"
      "  -n,--iters N        timed iterations                      [20]\n"
      "  -w,--warmup_iters N warm-up iterations                    [5]\n"
      "  -c,--check N        validation iterations (0: none)       [1]\n"
      "  -o,--op OP          sum|prod|min|max|avg|all              [sum]\n"
      "  -d,--datatype T     int8|uint8|int32|uint32|int64|uint64|half|float|"
      "double|bfloat16|all [float]\n"
      "  -r,--root N         root of broadcast, reduce, gather and scatter;\n"
      "                      -1 every rank                         [0]\n"
      "  -a,--average N      time over ranks: 0 rank 0, 1 avg, 2 min, 3 max "
      "[1]\n"
      "  -z,--blocking 0|1   1: each operation blocking (stream NULL; with\n"
      "                      --timing stream a barrier after it); 0: enqueue\n"
      "                      on a stream, then synchronize\n"
      "                      [1 with --timing call, 0 with stream]\n"
      "  --timing call|stream  call: per iteration a barrier, t0, one\n"
      "                      operation completed, t1; the median over\n"
      "                      iterations of the slowest rank (OSU, IMB, MPI\n"
      "                      peers; -a unused). stream: -n operations back\n"
      "                      to back, the average (nccl-tests)\n"
      "                      [call with --mem host, stream with --mem cuda]\n"
      "  --cold 0|1          1: move the buffers by one footprint each\n"
      "                      iteration within 2 x maxBytes (nccl-tests;\n"
      "                      cold caches); 0: the same buffers (OSU, IMB) [0]\n"
      "  --exchange ring|pair  send_recv's peers: ring sends to rank+1 and\n"
      "                      receives from rank-1 (nccl-tests' sendrecv);\n"
      "                      pair exchanges with rank^1 (an odd last rank\n"
      "                      with itself)                          [ring]\n"
      "  --passes P          sweep every size P times (1..16): rows show the\n"
      "                      best pass; a '#' table the median busbw, the\n"
      "                      spread and the CPU time per call     [1]\n"
      "  -R,--registration N buffers: 0 malloc, 1 sharc_mem_alloc (peers map\n"
      "                      them), 2 malloc + sharc_mem_register  [0]\n"
      "  -T,--timeout S      abort when a phase takes over S seconds [0: "
      "none]\n"
      "  -J,--json FILE      write the rows as JSON (rank 0)\n"
      "  --mem host|cuda     buffer memory; cuda: cudaMalloc on device local\n"
      "                      rank %% devices, exit 77 without one  [host]\n"
      "  --backend B         sharc|mpi|nccl|ccl (nccl: --mem cuda,\n"
      "                      libnccl.so.2 loaded at run time; ccl: oneCCL,\n"
      "                      host memory, a build with it)         [sharc]\n"
      "  --compare P         mpi|nccl|ccl: run sharc and P alternately on\n"
      "                      each size; print both tables and the busbw\n"
      "                      ratios. ccl runs all_gather, reduce_scatter,\n"
      "                      all_reduce and broadcast; the others are not\n"
      "                      supported by that backend (sharc alone)\n"
      "  --limits 0|1        measure memcpy / TCP limits first     [1]\n"
      "  --transport T       auto|shm|tcp|ib: sets SHARC_TRANSPORT (ib: verbs\n"
      "                      for every pair; SHARC_NET=ib keeps shm within a\n"
      "                      host)                                 [env]\n"
      "MPI (--backend/--compare mpi) needs mpirun, e.g.\n"
      "  mpirun -np 4 sharc-bench all -b 8 -e 64M -f 4 --compare mpi\n"
      "oneCCL (--compare ccl) runs over Intel MPI (CCL_ATL_TRANSPORT=mpi,\n"
      "the default here): start it under Intel MPI's mpirun, its lib/ and\n"
      "oneCCL's in LD_LIBRARY_PATH (bench/peers/peers_env.sh ccl)\n"
      "otherwise run under a launcher: sharcrun -n 4 sharc-bench all_reduce\n"
      "Testing: SHARC_BENCH_CORRUPT=1 changes one element of every result on\n"
      "rank 0 before validation (the run must then report #wrong > 0,\n"
      "FAILED and exit 1).\n");
}

static size_t parse_size(const char *s, const char *flag) {
  char *end;
  double v = strtod(s, &end);
  double unit = *end == 'K' || *end == 'k'   ? 1024.0
                : *end == 'M' || *end == 'm' ? 1048576.0
                : *end == 'G' || *end == 'g' ? 1073741824.0
                : *end == '\0'               ? 1.0
                                             : -1;
  if (end == s || v < 0 || unit < 0 || (*end && end[1])) {
    fprintf(stderr,
            "sharc-bench: %s: bad size '%s' (use e.g. 8, 64K, 256M, 1G)\n",
            flag, s);
    exit(2);
  }
  return (size_t)(v * unit);
}

static int parse_int(const char *s, const char *flag) {
  char *end;
  long v = strtol(s, &end, 0);
  if (end == s || *end) {
    fprintf(stderr, "sharc-bench: %s: '%s' is not an integer\n", flag, s);
    exit(2);
  }
  return (int)v;
}

/* Whether the len characters at a are name or name_perf (nccl-tests'
 * binary's name). */
static int names_coll(const char *a, size_t len, const char *name) {
  size_t cl = strlen(name);
  return (len == cl || (len == cl + 5 && !strncmp(a + cl, "_perf", 5))) &&
         !strncmp(a, name, cl);
}

/* Collective names: one, a comma-separated list or "all" -> bit mask of
 * coll_t; 0 when a name is unknown. */
static unsigned parse_colls(const char *a) {
  unsigned mask = 0;
  while (*a) {
    size_t len = strcspn(a, ",");
    unsigned bit = 0;
    if (len == 3 && !strncmp(a, "all", 3))
      bit = (1u << C_N) - 1;
    for (int c = 0; c < C_N; c++)
      if (names_coll(a, len, bench_coll_names[c]))
        bit = 1u << c;
    if (names_coll(a, len, "alltoall")) /* nccl-tests' spelling */
      bit = 1u << C_AA;
    if (names_coll(a, len, "sendrecv")) /* nccl-tests' spelling */
      bit = 1u << C_SR;
    if (!bit)
      return 0;
    mask |= bit;
    a += len + (a[len] == ',');
  }
  return mask;
}

/* Whether this process is rank 0 (or not under a launcher), from the
 * launchers' variables: for lines printed before the communicator exists. */
int bench_env_rank0(void) {
  static const char *const vars[] = {
      "SHARC_RANK", "RANK",      "OMPI_COMM_WORLD_RANK",
      "PMI_RANK",   "PMIX_RANK", "SLURM_PROCID"};
  for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) {
    const char *v = getenv(vars[k]);
    if (v && *v)
      return atoi(v) == 0;
  }
  return 1;
}

void bench_parse(int argc, char **argv, opts_t *o, unsigned *which) {
  static const struct {
    char s;
    const char *l;
  } names[] = {{'b', "minbytes"},     {'e', "maxbytes"},  {'i', "stepbytes"},
               {'f', "stepfactor"},   {'n', "iters"},     {'w', "warmup_iters"},
               {'c', "check"},        {'o', "op"},        {'d', "datatype"},
               {'r', "root"},         {'a', "average"},   {'z', "blocking"},
               {'R', "registration"}, {'T', "timeout"},   {'J', "json"},
               {'M', "mem"},          {'B', "backend"},   {'P', "compare"},
               {'L', "limits"},       {'X', "transport"}, {'t', "timing"},
               {'C', "cold"},         {'p', "passes"},    {'E', "exchange"}};
  *which = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    if (a[0] != '-') {
      if (*which) {
        fprintf(stderr,
                "sharc-bench: two collective arguments given ('%s'); list "
                "several with commas\n",
                a);
        exit(2);
      }
      *which = parse_colls(a);
      if (!*which) {
        fprintf(stderr, "sharc-bench: unknown collective in '%s'\n", a);
        usage(stderr);
        exit(2);
      }
      continue;
    }
    char key = 0;
    char lbuf[64];
    if (a[1] == '-') {
      snprintf(lbuf, sizeof lbuf, "%s", a + 2);
      char *eq = strchr(lbuf, '=');
      if (eq) {
        *eq = 0;
        v = a + 2 + (eq - lbuf) + 1;
      }
      for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(lbuf, names[k].l))
          key = names[k].s;
    } else if (a[1] && !a[2] && strchr("beifnwcodrazRTJ", a[1])) {
      key = a[1];
    }
    if (!key) {
      fprintf(stderr, "sharc-bench: unknown flag '%s'\n", a);
      usage(stderr);
      exit(2);
    }
    if (!v) {
      if (i + 1 >= argc) {
        fprintf(stderr, "sharc-bench: %s needs a value\n", a);
        exit(2);
      }
      v = argv[++i];
    }
    switch (key) {
    case 'b':
      o->minb = parse_size(v, a);
      break;
    case 'e':
      o->maxb = parse_size(v, a);
      break;
    case 'i':
      o->step_bytes = parse_size(v, a);
      break;
    case 'f':
      o->step_factor = (size_t)parse_int(v, a);
      break;
    case 'n':
      o->iters = parse_int(v, a);
      break;
    case 'w':
      o->warmup = parse_int(v, a);
      break;
    case 'c':
      o->check = parse_int(v, a);
      break;
    case 'o':
      if ((o->op = data_parse_op(v)) == -2) {
        fprintf(stderr, "sharc-bench: -o: unknown op '%s'\n", v);
        exit(2);
      }
      break;
    case 'd':
      if ((o->dtype = data_parse_type(v)) == -2) {
        fprintf(stderr, "sharc-bench: -d: unknown type '%s'\n", v);
        exit(2);
      }
      break;
    case 'r':
      o->root = parse_int(v, a);
      break;
    case 'a':
      o->average = parse_int(v, a);
      break;
    case 'z':
      o->blocking = parse_int(v, a);
      break;
    case 'R':
      o->reg = parse_int(v, a);
      break;
    case 'T':
      o->timeout = parse_int(v, a);
      break;
    case 'J':
      o->json = v;
      break;
    case 'M':
      if (strcmp(v, "host") && strcmp(v, "cuda")) {
        fprintf(stderr, "sharc-bench: --mem: host or cuda, not '%s'\n", v);
        exit(2);
      }
      o->cuda = !strcmp(v, "cuda");
      break;
    case 'B':
      o->backend = v;
      break;
    case 'P':
      o->compare = v;
      break;
    case 'L':
      o->limits = parse_int(v, a);
      break;
    case 't':
      if (strcmp(v, "call") && strcmp(v, "stream")) {
        fprintf(stderr, "sharc-bench: --timing: call or stream, not '%s'\n", v);
        exit(2);
      }
      o->timing = strcmp(v, "call") ? BENCH_STREAM : BENCH_CALL;
      break;
    case 'C':
      o->cold = parse_int(v, a);
      break;
    case 'p':
      o->passes = parse_int(v, a);
      break;
    case 'E':
      if (strcmp(v, "ring") && strcmp(v, "pair")) {
        fprintf(stderr, "sharc-bench: --exchange: ring or pair, not '%s'\n", v);
        exit(2);
      }
      bench_sr_pair = !strcmp(v, "pair");
      break;
    case 'X': /* read by sharc_comm_init_env, after parsing */
      if (strcmp(v, "auto") && strcmp(v, "shm") && strcmp(v, "tcp") &&
          strcmp(v, "ib")) {
        fprintf(stderr,
                "sharc-bench: --transport: auto, shm, tcp or ib, not '%s'\n",
                v);
        exit(2);
      }
      setenv("SHARC_TRANSPORT", v, 1);
      break;
    }
  }
  const char *bad = NULL;
  if (!*which)
    bad = "name a collective (or all)";
  else if (o->iters < 1)
    bad = "-n must be at least 1";
  else if (o->warmup < 0 || o->check < 0)
    bad = "-w and -c must be >= 0";
  else if (o->minb > o->maxb)
    bad = "-b is larger than -e";
  else if (o->step_factor <= 1 && o->step_bytes == 0)
    bad = "-i 0 with -f 1 would not advance";
  else if (o->average < 0 || o->average > 3)
    bad = "-a takes 0 (rank 0), 1 (avg), 2 (min) or 3 (max)";
  else if (o->blocking < -1 || o->blocking > 1)
    bad = "-z takes 0 (stream) or 1 (blocking)";
  else if (o->cold < 0 || o->cold > 1)
    bad = "--cold takes 0 (the same buffers) or 1 (moved every iteration)";
  else if (o->passes < 1 || o->passes > BENCH_MAX_PASSES)
    bad = "--passes takes 1 to 16";
  else if (o->reg < 0 || o->reg > 2)
    bad = "-R takes 0 (malloc), 1 (sharc_mem_alloc), 2 (sharc_mem_register)";
  else if (strcmp(o->backend, "sharc") && strcmp(o->backend, "mpi") &&
           strcmp(o->backend, "nccl") && strcmp(o->backend, "ccl"))
    bad = "--backend takes sharc, mpi, nccl or ccl";
  else if (o->compare && strcmp(o->compare, "mpi") &&
           strcmp(o->compare, "nccl") && strcmp(o->compare, "ccl"))
    bad = "--compare takes mpi, nccl or ccl";
  else if (o->compare && strcmp(o->backend, "sharc"))
    bad = "--compare compares sharc with a peer: leave --backend at sharc";
  if (bad) {
    fprintf(stderr, "sharc-bench: %s\n", bad);
    usage(stderr);
    exit(2);
  }
  /* Host memory: the peers are MPI libraries (and oneCCL), whose
   * benchmarks (OSU, IMB, oneCCL's) time each call alone; device memory: the
   * peer is NCCL, measured the nccl-tests way. */
  /* One call timed alone completes the way a host library's call does
   * (MPI's are blocking): a blocking sharc call, where the stream path
   * would add its hand-off to the stream's thread and back. */
  if (o->timing < 0)
    o->timing = o->cuda ? BENCH_STREAM : BENCH_CALL;
  if (o->blocking < 0)
    o->blocking = o->timing == BENCH_CALL;
}

/* ---- output ------------------------------------------------------------- */

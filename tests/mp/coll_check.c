/*
 * coll_check.c - multi-process correctness sweep of every sharc collective.
 *
 *   sharcrun -n N coll_check [--quick|--full|--small] [--types f32,bf16,...]
 *       [--colls ag,rs,ar,bc,barrier,stream,mem,split,cudaq,red,ga,sc,a2a]
 *       [--iters K]
 *       [--seed S] [--mem host|cuda]
 *
 * Sweeps collective (the rooted ones: broadcast, reduce, gather, scatter,
 * over three roots) x dtype x op x in-place/out-of-place
 * x count {0, 1, 7, 37, 1000, 1048579} (37: the shm transport's messages
 * of 74-296 bytes, in several header slots); the large count runs for a
 * representative subset only (fewer with --quick) so the suite stays within
 * budget on 2 cores with 8 ranks and under AddressSanitizer. Every rank
 * generates every rank's input from (seed, rank, index), so each rank
 * computes its own reference (f64 for floats, exact 64-bit integer
 * arithmetic wrapped to the type width for integers): see coll_data.c.
 * In-place calls use NCCL's layouts; coll_split.c checks sharc_comm_split.
 * Guard bytes around every buffer must stay untouched, and out-of-place send
 * buffers unmodified. Also checks the stream/event API, sharc_mem_alloc buffers
 * and sharc_comm_split. Exit 0 when everything passed, 1 otherwise, 2 when the
 * communicator could not be created.
 *
 * --mem cuda (the staged GPU path): the sweep's buffers live in
 * device memory (cudaMalloc, guards included, filled and read back with
 * cudaMemcpyAsync on the rank's cudaStream_t) and every collective runs on a
 * sharc_stream_create_cuda stream over that cudaStream_t; the checks are the
 * host ones, on the copy read back. Ranks share the GPUs round-robin by
 * local rank (several per GPU on a one-GPU machine). "cudaq" then queues
 * many calls at once: device and host memory on the CUDA stream, a
 * blocking host call, the legacy default stream; "stream", "mem" and
 * "split" run on host memory as usual, so one job mixes both paths. Without
 * a usable CUDA device every rank exits 77 (rank 0 prints one "SKIP: no
 * CUDA device (why)" line), before creating the communicator.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_check.h"
#include "coll_data.h"
#include "sharc.h"

static const char *coll_name[C_N] = {
    "all_gather", "reduce_scatter", "all_reduce", "broadcast",
    "barrier",    "stream",         "mem",        "split",
    "cuda_queue", "reduce",         "gather",     "scatter",
    "all_to_all"};
static const char *coll_short[C_N] = {
    "ag",    "rs",    "ar",  "bc", "barrier", "stream", "mem",
    "split", "cudaq", "red", "ga", "sc",      "a2a"};
/* The collectives the sweep runs, in order. */
static const int sweep_colls[] = {C_AG,  C_RS, C_AR, C_BC, C_BAR,
                                  C_RED, C_GA, C_SC, C_A2A};

/* Broadcast, reduce, gather, scatter. */
static int rooted(int coll) {
  return coll == C_BC || coll == C_RED || coll == C_GA || coll == C_SC;
}

#define LARGE                                                                  \
  ((size_t)1048579) /* elements (per rank for AG/RS), odd on purpose */
#define POISON 0x5B /* initial bytes of output buffers */
static const size_t counts[] = {0, 1, 7, 37, 1000, LARGE};

/* Large-count cases: which (coll, dtype, op, in-place) run 1048579
 * elements; for broadcast `op` selects the root (0: rank 0, 1: the last
 * rank, 2: nranks/2). `quick` marks those kept under --quick. */
static const struct {
  int coll, dt, op, inplace, quick;
} large_cases[] = {
    {C_AG, SHARC_F32, DATA_OP_COPY, 0, 1},
    {C_AG, SHARC_I8, DATA_OP_COPY, 1, 0},
    {C_AG, SHARC_F16, DATA_OP_COPY, 0, 0},
    {C_RS, SHARC_F32, SHARC_SUM, 0, 1},
    {C_RS, SHARC_BF16, SHARC_AVG, 1, 0},
    {C_RS, SHARC_I32, SHARC_MAX, 0, 0},
    {C_RS, SHARC_U8, SHARC_SUM, 1, 0},
    {C_RS, SHARC_F64, SHARC_PROD, 0, 0},
    {C_AR, SHARC_F32, SHARC_SUM, 1, 1},
    {C_AR, SHARC_F64, SHARC_SUM, 0, 0},
    {C_AR, SHARC_F16, SHARC_AVG, 0, 1},
    {C_AR, SHARC_I64, SHARC_MIN, 1, 0},
    {C_AR, SHARC_U32, SHARC_PROD, 0, 0},
    {C_AR, SHARC_I8, SHARC_SUM, 1, 0},
    {C_BC, SHARC_F32, 0, 0, 1},
    {C_BC, SHARC_U64, 1, 1, 0},
    {C_BC, SHARC_BF16, 2, 0, 0},
    {C_RED, SHARC_F32, SHARC_SUM, 0, 1},
    {C_RED, SHARC_BF16, SHARC_AVG, 1, 0},
    {C_RED, SHARC_I64, SHARC_MAX, 0, 0},
    {C_GA, SHARC_F32, 0, 0, 1},
    {C_GA, SHARC_U8, 1, 1, 0},
    {C_SC, SHARC_F32, 0, 0, 1},
    {C_SC, SHARC_F16, 2, 1, 0},
    {C_A2A, SHARC_F32, DATA_OP_COPY, 0, 1},
    {C_A2A, SHARC_BF16, DATA_OP_COPY, 1, 0},
};

cc_state_t X;

/* ---- jobs ------------------------------------------------------------------
 */

void fail_job(job_t *j, const char *what, size_t idx, const char *es,
              const char *gs) {
  char op[48];
  j->ok = 0;
  if (X.printed++ >= MAX_PRINT)
    return;
  if (j->coll == C_RED)
    snprintf(op, sizeof op, "op=%s root=%d", data_op_name[j->op], j->root);
  else if (rooted(j->coll))
    snprintf(op, sizeof op, "root=%d", j->root);
  else
    snprintf(op, sizeof op, "op=%s",
             j->coll == C_AG || j->coll == C_A2A ? "-" : data_op_name[j->op]);
  printf("coll_check FAIL: coll=%s dtype=%s %s inplace=%d count=%zu%s: %s "
         "index=%zu "
         "expected=%s got=%s\n",
         coll_name[j->coll], j->coll == C_BAR ? "-" : data_dt_name[j->dt], op,
         j->inplace, j->count,
         j->mem == 1   ? " mem=alloc"
         : j->mem == 2 ? " mem=registered"
         : j->dev      ? " mem=cuda"
         : X.cuda      ? " mem=host-on-cuda-stream"
                       : "",
         what, idx, es, gs);
}

static unsigned char *galloc(job_t *j, size_t bytes) {
  unsigned char *p = NULL;
  if (j->mem == 1) {
    void *q = NULL;
    if (sharc_mem_alloc(&q, bytes + 2 * GUARD) != SHARC_OK)
      q = NULL;
    p = q;
  } else if (j->mem == 2) { /* caller-owned memory, registered */
    p = malloc(bytes + 2 * GUARD);
    if (p && sharc_mem_register(p, bytes + 2 * GUARD) != SHARC_OK) {
      free(p);
      p = NULL;
    }
  } else {
    p = malloc(bytes + 2 * GUARD);
  }
  if (!p) {
    fail_job(j, "allocation failed", bytes, "-", sharc_last_error());
    return NULL;
  }
  memset(p, 0xA5, GUARD);
  memset(p + GUARD, POISON, bytes);
  memset(p + GUARD + bytes, 0xA5, GUARD);
  return p + GUARD;
}

static void gfree(job_t *j, unsigned char *p, size_t bytes, const char *name) {
  if (!p)
    return;
  for (size_t k = 0; k < GUARD; k++) {
    int before = p[-1 - (long)k] != 0xA5;
    if (before || p[bytes + k] != 0xA5) {
      char what[80], got[8];
      snprintf(what, sizeof what, "guard %s %s overwritten, byte",
               before ? "before" : "after", name);
      snprintf(got, sizeof got, "0x%02x",
               before ? p[-1 - (long)k] : p[bytes + k]);
      fail_job(j, what, before ? k : bytes + k, "0xa5", got);
      break;
    }
  }
  if (j->mem == 1) {
    sharc_mem_free(p - GUARD);
  } else {
    if (j->mem == 2 && sharc_mem_deregister(p - GUARD) != SHARC_OK)
      fail_job(j, "sharc_mem_deregister failed", 0, "SHARC_OK",
               sharc_last_error());
    free(p - GUARD);
  }
}

static void fill(job_t *j, unsigned char *p, int r, size_t n) {
  size_t sz = data_dt_size[j->dt];
  for (size_t g = 0; g < n; g++)
    data_put(&j->d, p + g * sz, data_gen(&j->d, r, g));
}

/* Allocates and fills the buffers of j (NCCL in-place layouts). 0 on failure.
 */
int job_prepare(job_t *j) {
  size_t c = j->count, sz = data_dt_size[j->dt], n = (size_t)X.n,
         r = (size_t)X.rank;
  size_t rel = 0, sel = 0; /* elements of the recv / send allocations */
  j->ok = 1;
  j->d = (data_spec_t){j->dt, j->op, X.n, X.seed * 1000003u + ++X.jobno};
  if (j->coll == C_BAR)
    return 1;
  int root = X.rank == j->root;
  /* reduce, gather and scatter run in place on the root only */
  int ip = j->inplace && (root || j->coll == C_BC || !rooted(j->coll));
  if (j->coll == C_A2A)
    rel = sel = n * c;
  else if (j->coll == C_AG || (j->coll == C_GA && root))
    rel = n * c, sel = c;
  else if (j->coll == C_RS || (j->coll == C_SC && root))
    rel = ip ? n * c : c, sel = n * c;
  else if (j->coll == C_GA || j->coll == C_RED)
    rel = root ? c : 0, sel = c; /* off the root: no result */
  else if (j->coll == C_SC)
    rel = c, sel = 0; /* off the root: no input */
  else
    rel = sel = c;
  j->rbytes = rel * sz;
  if (!(j->rb = galloc(j, j->rbytes)))
    return 0;
  if (!ip) {
    j->sbytes = sel * sz;
    if (!(j->sb = galloc(j, j->sbytes)))
      return 0;
  }
  unsigned char *in = ip ? j->rb : j->sb;
  j->recv = j->rb;
  j->send = in;
  if ((j->coll == C_AG || j->coll == C_GA) && ip)
    j->send = in = j->rb + r * c * sz;
  if ((j->coll == C_RS || j->coll == C_SC) && ip)
    j->recv = j->rb + r * c * sz;
  if (j->coll == C_BC || j->coll == C_SC) {
    if (root)
      fill(j, in, j->root, sel);
    else if (!j->inplace && c == 7)
      j->send = NULL; /* allowed off the root */
  } else {
    fill(j, in, X.rank, sel);
    if ((j->coll == C_RED || j->coll == C_GA) && !root && c == 7)
      j->recv = NULL; /* allowed off the root */
  }
  return 1;
}

sharc_status_t job_launch(job_t *j, sharc_stream_t s) {
  switch (j->coll) {
  case C_AG:
    return sharc_all_gather(j->send, j->recv, j->count, j->dt, X.comm, s);
  case C_RS:
    return sharc_reduce_scatter(j->send, j->recv, j->count, j->dt, j->op,
                                X.comm, s);
  case C_AR:
    return sharc_all_reduce(j->send, j->recv, j->count, j->dt, j->op, X.comm,
                            s);
  case C_BC:
    return sharc_broadcast(j->send, j->recv, j->count, j->dt, j->root, X.comm,
                           s);
  case C_RED:
    return sharc_reduce(j->send, j->recv, j->count, j->dt, j->op, j->root,
                        X.comm, s);
  case C_GA:
    return sharc_gather(j->send, j->recv, j->count, j->dt, j->root, X.comm, s);
  case C_SC:
    return sharc_scatter(j->send, j->recv, j->count, j->dt, j->root, X.comm, s);
  case C_A2A:
    return sharc_all_to_all(j->send, j->recv, j->count, j->dt, X.comm, s);
  default:
    return sharc_barrier(X.comm, s);
  }
}

/* Checks results, guards and the send buffer; frees; counts the job. */
void job_verify(job_t *j) {
  size_t c = j->count, sz = data_dt_size[j->dt], n = (size_t)X.n, bad = 0,
         first = 0;
  char es[64], gs[64], fes[64] = "", fgs[64] = "";
  const unsigned char *out = j->recv;
  int root = X.rank == j->root;
  int whole = j->coll == C_AG || j->coll == C_A2A || (j->coll == C_GA && root);
  size_t nout = whole                                            ? n * c
                : j->coll == C_BAR                               ? 0
                : (j->coll == C_GA || j->coll == C_RED) && !root ? 0
                                                                 : c;
  if (!j->rb && j->coll != C_BAR)
    nout = 0; /* allocation failed, already counted */
  for (size_t k = 0; k < nout; k++) {
    data_val_t e;
    if (j->coll == C_AG || j->coll == C_GA)
      e = data_gen(&j->d, (int)(k / c), k % c);
    else if (j->coll == C_A2A) /* block p: rank p's block for this rank */
      e = data_gen(&j->d, (int)(k / c), (size_t)X.rank * c + k % c);
    else if (j->coll == C_BC)
      e = data_gen(&j->d, j->root, k);
    else if (j->coll == C_SC)
      e = data_gen(&j->d, j->root, (size_t)X.rank * c + k);
    else
      e = data_reference(&j->d, j->coll == C_RS ? (size_t)X.rank * c + k : k);
    if (!data_matches(&j->d, out + k * sz, e, es, gs) && bad++ == 0) {
      first = k;
      strcpy(fes, es), strcpy(fgs, gs);
    }
  }
  if (bad) {
    char what[64];
    snprintf(what, sizeof what, "%zu wrong elements, first at", bad);
    fail_job(j, what, first, fes, fgs);
  }
  /* out of place: the send buffer must be unmodified */
  int from_root = j->coll == C_BC || j->coll == C_SC;
  if (j->sb && j->send && (!from_root || root)) {
    int r = from_root ? j->root : X.rank;
    unsigned char want[8];
    for (size_t k = 0; k < j->sbytes / sz; k++) {
      data_put(&j->d, want, data_gen(&j->d, r, k));
      if (memcmp(want, j->sb + k * sz, sz)) {
        fail_job(j, "sendbuf modified at", k, "-", "-");
        break;
      }
    }
  }
  gfree(j, j->rb, j->rbytes, "recvbuf");
  gfree(j, j->sb, j->sbytes, "sendbuf");
  j->rb = j->sb = NULL;
  if (j->ok)
    X.pass++;
  else
    X.fail++;
}

void job_status_fail(job_t *j, sharc_status_t st) {
  fail_job(j, sharc_status_name(st), 0, "SHARC_OK",
           sharc_comm_last_error(X.comm));
  X.dead = 1;
}

static void run_blocking(job_t *j) {
  if (X.cuda && j->dev) {
    run_cuda(j);
    return;
  }
  if (job_prepare(j)) {
    sharc_status_t st = job_launch(j, NULL);
    if (st != SHARC_OK)
      job_status_fail(j, st);
  }
  job_verify(j);
}

static int large_ok(int coll, int dt, int opsel, int inplace) {
  if (X.small)
    return 0; /* many ranks: memory would grow with n^2 */
  if (X.full)
    return 1; /* every case at the large count */
  for (size_t k = 0; k < sizeof large_cases / sizeof *large_cases; k++)
    if (large_cases[k].coll == coll && large_cases[k].dt == dt &&
        large_cases[k].op == opsel && large_cases[k].inplace == inplace &&
        (!X.quick || large_cases[k].quick))
      return 1;
  return 0;
}

static void sweep(void) {
  int roots[3] = {0, X.n - 1, X.n / 2};
  for (size_t k = 0; k < sizeof sweep_colls / sizeof *sweep_colls && !X.dead;
       k++) {
    int coll = sweep_colls[k];
    if (!(X.colls & (1u << coll)))
      continue;
    if (coll == C_BAR) {
      job_t j = {.coll = C_BAR, .dev = X.cuda};
      run_blocking(&j);
      continue;
    }
    /* sel: the op (reductions), else the root (rooted collectives) */
    int nsel = coll == C_AG || coll == C_A2A                  ? 1
               : coll == C_BC || coll == C_GA || coll == C_SC ? 3
                                                              : SHARC_OP_COUNT;
    int by_root = coll == C_BC || coll == C_GA || coll == C_SC;
    for (int dt = 0; dt < SHARC_DTYPE_COUNT; dt++) {
      if (!(X.types & (1u << dt)))
        continue;
      for (int sel = 0; sel < nsel; sel++) {
        if (by_root && ((sel == 1 && roots[1] == 0) ||
                        (sel == 2 && (roots[2] == 0 || roots[2] == roots[1]))))
          continue; /* duplicate root on small communicators */
        for (int ip = 0; ip < 2; ip++) {
          for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
            int opsel = coll == C_AG || coll == C_A2A ? DATA_OP_COPY : sel;
            if (counts[ci] == LARGE && !large_ok(coll, dt, opsel, ip))
              continue;
            job_t j = {.coll = coll,
                       .dt = dt,
                       .inplace = ip,
                       .count = counts[ci],
                       .dev = X.cuda};
            j.op =
                coll == C_AG || coll == C_A2A || by_root ? DATA_OP_COPY : sel;
            /* reduce: each op at one of the roots, in turn */
            j.root = by_root         ? roots[sel]
                     : coll == C_RED ? roots[(sel + dt + (int)ci) % 3]
                                     : 0;
            run_blocking(&j);
            if (X.dead)
              return;
          }
        }
      }
    }
  }
}

/* ---- checks, streams, events, sharc_mem_alloc ---------------------------- */

void cc_check(int cond, const char *what, long a, long b) {
  if (cond) {
    X.pass++;
    return;
  }
  X.fail++;
  if (X.printed++ < MAX_PRINT)
    printf("coll_check FAIL: %s (expected %ld, got %ld)\n", what, a, b);
}

void cc_check_st(sharc_status_t st, sharc_comm_t comm, const char *what) {
  if (st == SHARC_OK) {
    X.pass++;
    return;
  }
  X.fail++;
  if (X.printed++ < MAX_PRINT)
    printf("coll_check FAIL: %s returned %s: %s\n", what, sharc_status_name(st),
           sharc_comm_last_error(comm));
}

static void run_stream(void) {
  int last = X.n - 1;
  job_t jobs[] = {
      {.coll = C_AR, .dt = SHARC_F32, .op = SHARC_SUM, .count = 1000},
      {.coll = C_AG,
       .dt = SHARC_I32,
       .op = DATA_OP_COPY,
       .inplace = 1,
       .count = 7},
      {.coll = C_BC,
       .dt = SHARC_F64,
       .op = DATA_OP_COPY,
       .root = last,
       .count = 1000},
      {.coll = C_RS,
       .dt = SHARC_BF16,
       .op = SHARC_AVG,
       .inplace = 1,
       .count = 1000},
      {.coll = C_BAR},
      {.coll = C_AR,
       .dt = SHARC_U8,
       .op = SHARC_MAX,
       .inplace = 1,
       .count = 262147},
      {.coll = C_AR, .dt = SHARC_I64, .op = SHARC_SUM, .count = 1},
      {.coll = C_AG, .dt = SHARC_F16, .op = DATA_OP_COPY, .count = 0},
  };
  size_t nj = sizeof jobs / sizeof *jobs, k;
  sharc_stream_t s = NULL;
  sharc_event_t ev = NULL;
  sharc_status_t st;
  int done = -1;
  cc_check_st(st = sharc_stream_create(&s), X.comm, "sharc_stream_create");
  if (st != SHARC_OK)
    return;
  cc_check_st(st = sharc_event_create(&ev), X.comm, "sharc_event_create");
  for (k = 0; k < nj && st == SHARC_OK; k++)
    if (job_prepare(&jobs[k]) && (st = job_launch(&jobs[k], s)) != SHARC_OK)
      job_status_fail(&jobs[k], st);
  if (ev && st == SHARC_OK) {
    cc_check_st(sharc_event_record(ev, s), X.comm, "sharc_event_record");
    cc_check_st(sharc_event_query(ev, &done), X.comm, "sharc_event_query");
    cc_check_st(st = sharc_event_synchronize(ev), X.comm,
                "sharc_event_synchronize");
    done = -1;
    cc_check_st(sharc_event_query(ev, &done), X.comm,
                "sharc_event_query after synchronize");
    cc_check(done == 1, "event done after sharc_event_synchronize", 1, done);
    cc_check_st(sharc_stream_synchronize(s), X.comm,
                "sharc_stream_synchronize");
    if (st != SHARC_OK)
      X.dead = 1;
  } else {
    sharc_stream_synchronize(
        s); /* buffers stay valid until the queue drained */
  }
  for (k = 0; k < nj; k++)
    job_verify(&jobs[k]);
  cc_check_st(sharc_event_destroy(ev), X.comm, "sharc_event_destroy");
  cc_check_st(sharc_stream_destroy(s), X.comm, "sharc_stream_destroy");
}

static void run_mem(void) {
  job_t jobs[] = {
      {.coll = C_AG,
       .dt = SHARC_F32,
       .op = DATA_OP_COPY,
       .inplace = 1,
       .count = 1000},
      {.coll = C_AG,
       .dt = SHARC_F32,
       .op = DATA_OP_COPY,
       .inplace = 1,
       .count = 262147},
      /* messages below SHARC_SHM_DIRECT_MIN_BYTES: through the FIFO */
      {.coll = C_AG, .dt = SHARC_U8, .op = DATA_OP_COPY, .count = 1001},
      {.coll = C_AR,
       .dt = SHARC_F32,
       .op = SHARC_SUM,
       .inplace = 1,
       .count = 1000},
      {.coll = C_AR,
       .dt = SHARC_F32,
       .op = SHARC_SUM,
       .inplace = 1,
       .count = 262147},
      {.coll = C_AR, .dt = SHARC_F64, .op = SHARC_SUM, .count = 1000},
      /* out of place, large: SEND read in place, the reduced RECV blocks
       * (fresh, below SHARC_SHM_DIRECT_FRESH_BYTES) through the FIFO, in
       * one call */
      {.coll = C_AR, .dt = SHARC_F32, .op = SHARC_SUM, .count = 262147},
      {.coll = C_RS,
       .dt = SHARC_I32,
       .op = SHARC_SUM,
       .inplace = 1,
       .count = 1000},
      {.coll = C_BC,
       .dt = SHARC_U8,
       .op = DATA_OP_COPY,
       .root = X.n - 1,
       .count = 1000},
      /* where ranks share cores: below SHARC_SHM_DIRECT_SHARED_BYTES
       * through the FIFOs (8 KiB), from it read in place (80 KB); with a
       * core per rank both from 2 KiB (SHARC_SHM_DIRECT_MIN_BYTES) */
      {.coll = C_BC,
       .dt = SHARC_F32,
       .op = DATA_OP_COPY,
       .root = 0,
       .count = 2047},
      {.coll = C_BC,
       .dt = SHARC_F32,
       .op = DATA_OP_COPY,
       .root = 0,
       .count = 20011},
      {.coll = C_SC, .dt = SHARC_F32, .op = DATA_OP_COPY, .count = 1000},
      {.coll = C_SC, .dt = SHARC_F32, .op = DATA_OP_COPY, .count = 5003},
  };
  /* 1: sharc_mem_alloc (peers map it), 2: malloc + sharc_mem_register
   * (peers read it with cross-memory attach). */
  for (int mem = 1; mem <= 2; mem++)
    for (size_t k = 0; k < sizeof jobs / sizeof *jobs && !X.dead; k++) {
      jobs[k].mem = mem;
      run_blocking(&jobs[k]);
    }
}

/* ---- main -------------------------------------------------------------------
 */

static unsigned parse_list(const char *s, const char *const *names, int n,
                           const char *opt) {
  unsigned mask = 0;
  char *dup = strdup(s), *save = NULL;
  for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int k = 0;
    while (k < n && strcmp(t, names[k]) &&
           (opt[0] != 'c' || strcmp(t, coll_name[k])))
      k++;
    if (k == n) {
      fprintf(stderr, "coll_check: unknown %s entry '%s'\n", opt, t);
      free(dup);
      exit(2);
    }
    mask |= 1u << k;
  }
  free(dup);
  return mask;
}

static void usage(void) {
  fprintf(stderr,
          "usage: sharcrun -n N coll_check [--quick|--full|--small] [--types "
          "f32,f64,f16,bf16,i8,u8,"
          "i32,u32,i64,u64] [--colls ag,rs,ar,bc,barrier,stream,mem,split,"
          "cudaq] [--iters K] [--seed S] [--mem host|cuda]\n");
  exit(2);
}

int main(int argc, char **argv) {
  X.types = (1u << SHARC_DTYPE_COUNT) - 1;
  X.colls = (1u << C_N) - 1;
  X.iters = 1;
  X.seed = 20240601;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quick"))
      X.quick = 1;
    else if (!strcmp(a, "--full"))
      X.full = 1;
    else if (!strcmp(a, "--small"))
      X.small = 1;
    else if (!strcmp(a, "--types") && v)
      X.types = parse_list(v, data_dt_name, SHARC_DTYPE_COUNT, "dtype"), i++;
    else if (!strcmp(a, "--colls") && v)
      X.colls = parse_list(v, coll_short, C_N, "coll"), i++;
    else if (!strcmp(a, "--iters") && v)
      X.iters = atoi(v), i++;
    else if (!strcmp(a, "--seed") && v)
      X.seed = strtoull(v, NULL, 0), i++;
    else if (!strcmp(a, "--mem") && v && !strcmp(v, "host"))
      X.cuda = 0, i++;
    else if (!strcmp(a, "--mem") && v && !strcmp(v, "cuda"))
      X.cuda = 1, i++;
    else
      usage();
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  int ndev = 0;
  if (X.cuda) { /* every rank decides alone, before any rendezvous */
    char why[256];
    if (!(ndev = cuda_probe(why, sizeof why))) {
      const char *r = getenv("SHARC_RANK");
      if (!r || !strcmp(r, "0"))
        printf("SKIP: no CUDA device (%s)\n", why);
      return 77;
    }
  }
  sharc_status_t st = sharc_comm_init_env(&X.comm);
  if (st != SHARC_OK) {
    printf("coll_check: sharc_comm_init_env: %s: %s\n", sharc_status_name(st),
           sharc_last_error());
    return 2;
  }
  int lr = -1, ls = -1, nh = -1;
  cc_check_st(sharc_comm_rank(X.comm, &X.rank), X.comm, "sharc_comm_rank");
  cc_check_st(sharc_comm_size(X.comm, &X.n), X.comm, "sharc_comm_size");
  const char *er = getenv("SHARC_RANK"), *en = getenv("SHARC_WORLD_SIZE");
  if (er && en) {
    cc_check(X.rank == atoi(er), "rank equals SHARC_RANK", atoi(er), X.rank);
    cc_check(X.n == atoi(en), "size equals SHARC_WORLD_SIZE", atoi(en), X.n);
  }
  cc_check_st(sharc_comm_local_rank(X.comm, &lr), X.comm,
              "sharc_comm_local_rank");
  cc_check_st(sharc_comm_local_size(X.comm, &ls), X.comm,
              "sharc_comm_local_size");
  cc_check_st(sharc_comm_nhosts(X.comm, &nh), X.comm, "sharc_comm_nhosts");
  cc_check(ls >= 1 && ls <= X.n && lr >= 0 && lr < ls,
           "0 <= local_rank < local_size <= size", ls, lr);
  cc_check(nh >= 1 && nh <= X.n, "1 <= nhosts <= size", 1, nh);
  if (X.n < 1)
    X.n = 1, X.dead = 1;
  if (X.cuda && !X.dead)
    cuda_setup(ndev, lr);

  for (int it = 0; it < X.iters && !X.dead; it++) {
    X.seed += (uint64_t)it * 7919;
    sweep();
    if (!X.dead && (X.colls & (1u << C_STREAM)))
      run_stream();
    if (!X.dead && (X.colls & (1u << C_MEM)))
      run_mem();
    if (!X.dead && (X.colls & (1u << C_SPLIT)) &&
        split_check(X.comm, X.rank, X.n) != 0)
      X.dead = 1;
    if (!X.dead && X.cuda && (X.colls & (1u << C_CUDAQ)))
      run_cuda_queue();
  }
  if (X.cuda && !X.dead)
    cuda_teardown();

  int rc = X.fail ? 1 : 0;
  if (X.dead) { /* no further collective can be trusted: report locally */
    printf("coll_check: rank %d stopped after a failed collective: %ld passed, "
           "%ld failed\n",
           X.rank, X.pass, X.fail);
    sharc_comm_abort(X.comm);
    return 1;
  }
  int64_t tot[2] = {X.pass, X.fail};
  if (X.fail)
    printf("coll_check: rank %d: %ld passed, %ld failed\n", X.rank, X.pass,
           X.fail);
  st = sharc_all_reduce(tot, tot, 2, SHARC_I64, SHARC_SUM, X.comm, NULL);
  if (st != SHARC_OK) {
    printf("coll_check: summary all_reduce failed: %s: %s; rank %d: %ld "
           "passed, %ld failed\n",
           sharc_status_name(st), sharc_comm_last_error(X.comm), X.rank, X.pass,
           X.fail + 1);
    sharc_comm_abort(X.comm);
    return 1;
  }
  if (X.rank == 0)
    printf("coll_check: %lld passed, %lld failed (checks summed over %d "
           "ranks%s)\n",
           (long long)tot[0], (long long)tot[1], X.n,
           X.quick ? ", --quick" : "");
  if (tot[1])
    rc = 1;
  st = sharc_comm_destroy(X.comm);
  if (st != SHARC_OK) {
    printf("coll_check: sharc_comm_destroy: %s\n", sharc_status_name(st));
    rc = 1;
  }
  return rc;
}

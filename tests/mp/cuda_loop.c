/*
 * cuda_loop.c - a training loop on device memory: the same device buffers
 * serve collective after collective on one CUDA stream, the caller's next
 * writes queued right behind them, no synchronisation between steps:
 *
 *   sharcrun -n N cuda_loop [--steps K] [--window W] [--count C] [--act A]
 *       [--compute-us U] [--seed S]
 *
 * Each step, in the order of the rank's cudaStream_t, as a data-parallel
 * step queues its work:
 *   - the passes' time: a host function that sleeps U us (default 2000; a
 *     GPU computes without the CPU, where softcuda's copies would take it
 *     from the peers), then act (A copies of params, the previous step's
 *     all-gather result) filled by doubling device-to-device copies;
 *   - the step's inputs are copied into the device buffers, grad first
 *     (new values every step, from (seed, step, rank, buffer, index));
 *   - all_gather(shard -> params), reduce_scatter(part -> mine, SUM) and
 *     last all_reduce(grad, grad, SUM) in place (C elements, blocks of
 *     uneven sizes when N does not divide C);
 *   - the results (and act's last copy of params) are copied out into the
 *     step's pinned host slot; the next step's passes follow at once, then
 *     its copy into grad.
 * So a rank that leaves a collective before its peers finished reading its
 * buffers overwrites them under their reads, and a collective that starts
 * before its inputs were written reads the previous step's. The host fills
 * W steps' inputs, queues the W steps, synchronizes and checks their
 * results bit for bit (grad: f32 multiples of 1/4, whose sums are exact in
 * any order; mine: i32 sums wrapping; params: copies; act: the previous
 * step's params).
 *
 * Prints "cuda_loop: rank R ok (...)" or FAIL lines (up to 10 per rank);
 * exit 0, 1 on a failure, 2 when the communicator could not be created, 77
 * (with a SKIP line from rank 0) without a usable CUDA device.
 */
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sharc.h"

#define MAX_PRINT 10

enum { B_GRAD, B_SHARD, B_PART }; /* inputs, for gen() */

static struct {
  sharc_comm_t comm;
  sharc_stream_t s;
  cudaStream_t cs;
  int rank, n, printed;
  int dead; /* a call failed: the communicator cannot be trusted */
  long fails;
  uint64_t seed;
  size_t c, m;     /* grad elements; shard elements (part: n * m) */
  size_t act;      /* copies of params in act: a power of two */
  long compute_us; /* the passes' time on the stream */
} L;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  L.fails++;
  if (L.printed++ >= MAX_PRINT)
    return;
  char line[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  printf("cuda_loop FAIL: rank %d: %s\n", L.rank, line);
}

/* 32 bits of (seed, step, rank, buffer, index): splitmix64's finaliser. */
static uint32_t gen(long step, int r, int buf, size_t i) {
  uint64_t x = L.seed ^ ((uint64_t)step << 40) ^ ((uint64_t)r << 32) ^
               ((uint64_t)buf << 28) ^ (uint64_t)i;
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)(x ^ (x >> 31));
}

/* A gradient value: a multiple of 1/4 in [-500, 500]. */
static float grad_val(long step, int r, size_t i) {
  return (float)((int)(gen(step, r, B_GRAD, i) % 4001) - 2000) * 0.25f;
}

/* One step's host side: inputs written before the step is queued, outputs
 * read after the window synchronized. Pinned, so that the copies are
 * asynchronous on a real GPU too. */
typedef struct {
  float *grad_in, *grad_out;   /* [c] */
  uint32_t *shard_in;          /* [m] */
  uint32_t *params_out;        /* [n * m] */
  int32_t *part_in, *mine_out; /* [n * m], [m] */
  uint32_t *act_out;           /* [n * m]: act's last copy of params */
} slot_t;

/* The device buffers, allocated once and reused by every step. */
typedef struct {
  float *grad;
  uint32_t *shard, *params;
  int32_t *part, *mine;
  uint32_t *act; /* [act * n * m] */
} bufs_t;

static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return 1;
  L.dead = 1;
  fail("%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return 0;
}

static int sharc_ok(sharc_status_t st, const char *what, long step) {
  if (st == SHARC_OK)
    return 1;
  L.dead = 1;
  fail("step %ld: %s: %s: %s", step, what, sharc_status_name(st),
       sharc_comm_last_error(L.comm));
  return 0;
}

static void fill(slot_t *h, long step) {
  size_t nm = (size_t)L.n * L.m;
  for (size_t i = 0; i < L.c; i++)
    h->grad_in[i] = grad_val(step, L.rank, i);
  for (size_t i = 0; i < L.m; i++)
    h->shard_in[i] = gen(step, L.rank, B_SHARD, i);
  for (size_t i = 0; i < nm; i++)
    h->part_in[i] = (int32_t)gen(step, L.rank, B_PART, i);
}

static int copy(void *dst, const void *src, size_t bytes,
                enum cudaMemcpyKind kind, const char *what) {
  return cuda_ok(cudaMemcpyAsync(dst, src, bytes, kind, L.cs), what);
}

/* The forward and backward passes' time (a host function on the stream):
 * a GPU computes without the CPU, and copies standing in for the compute
 * would take the CPU from the peers' workers here (softcuda). */
static void compute(void *arg) {
  (void)arg;
  struct timespec ts = {L.compute_us / 1000000, L.compute_us % 1000000 * 1000};
  while (nanosleep(&ts, &ts))
    ;
}

/* Queues step `step` on the CUDA stream; 0 when something failed. The
 * all-reduce comes last, then only its result's copy out: the next step's
 * forward pass and its copy into grad follow it. */
static int queue_step(const bufs_t *d, slot_t *h, long step) {
  size_t nm = (size_t)L.n * L.m, pb = nm * sizeof(uint32_t);
  uint8_t *act = (uint8_t *)d->act;
  int ok = !L.compute_us || cuda_ok(cudaLaunchHostFunc(L.cs, compute, NULL),
                                    "cudaLaunchHostFunc");
  ok = ok && copy(act, d->params, pb, cudaMemcpyDeviceToDevice,
                  "the forward pass's copy of params");
  for (size_t have = pb; ok && have < L.act * pb; have *= 2)
    ok = copy(act + have, act, have, cudaMemcpyDeviceToDevice,
              "the forward pass's doubling copy");
  ok = ok &&
       copy(d->grad, h->grad_in, L.c * sizeof(float), cudaMemcpyHostToDevice,
            "copying grad in") &&
       copy(d->shard, h->shard_in, L.m * sizeof(uint32_t),
            cudaMemcpyHostToDevice, "copying shard in") &&
       copy(d->part, h->part_in, nm * sizeof(int32_t), cudaMemcpyHostToDevice,
            "copying part in");
  ok = ok &&
       sharc_ok(
           sharc_all_gather(d->shard, d->params, L.m, SHARC_U32, L.comm, L.s),
           "sharc_all_gather", step) &&
       sharc_ok(sharc_reduce_scatter(d->part, d->mine, L.m, SHARC_I32,
                                     SHARC_SUM, L.comm, L.s),
                "sharc_reduce_scatter", step);
  ok = ok &&
       copy(h->act_out, act + (L.act - 1) * pb, pb, cudaMemcpyDeviceToHost,
            "copying act out") &&
       copy(h->params_out, d->params, pb, cudaMemcpyDeviceToHost,
            "copying params out") &&
       copy(h->mine_out, d->mine, L.m * sizeof(int32_t), cudaMemcpyDeviceToHost,
            "copying mine out");
  return ok &&
         sharc_ok(sharc_all_reduce(d->grad, d->grad, L.c, SHARC_F32, SHARC_SUM,
                                   L.comm, L.s),
                  "sharc_all_reduce", step) &&
         copy(h->grad_out, d->grad, L.c * sizeof(float), cudaMemcpyDeviceToHost,
              "copying grad out");
}

/* The step's results against the references, bit for bit. */
static void check_step(const slot_t *h, long step) {
  size_t bad = 0, first = 0;
  float want_f = 0;
  for (size_t i = 0; i < L.c; i++) {
    double sum = 0; /* exact: at most n * 2000 quarters */
    for (int r = 0; r < L.n; r++)
      sum += grad_val(step, r, i);
    float w = (float)sum;
    if (memcmp(&w, &h->grad_out[i], sizeof w) && bad++ == 0)
      first = i, want_f = w;
  }
  if (bad)
    fail("step %ld: all_reduce (f32 sum, in place, %zu elements): %zu wrong, "
         "first grad[%zu] = %.9g, want %.9g",
         step, L.c, bad, first, h->grad_out[first], want_f);
  bad = 0;
  uint32_t want_u = 0;
  for (size_t i = 0; i < (size_t)L.n * L.m; i++) {
    uint32_t w = gen(step, (int)(i / L.m), B_SHARD, i % L.m);
    if (h->params_out[i] != w && bad++ == 0)
      first = i, want_u = w;
  }
  if (bad)
    fail("step %ld: all_gather (u32, %zu per rank): %zu wrong, first "
         "params[%zu] = %u, want %u",
         step, L.m, bad, first, h->params_out[first], want_u);
  bad = 0;
  for (size_t i = 0; i < L.m; i++) {
    uint32_t w = 0; /* the wrapped sum */
    for (int r = 0; r < L.n; r++)
      w += gen(step, r, B_PART, (size_t)L.rank * L.m + i);
    if ((uint32_t)h->mine_out[i] != w && bad++ == 0)
      first = i, want_u = w;
  }
  if (bad)
    fail("step %ld: reduce_scatter (i32 sum, %zu per rank): %zu wrong, first "
         "mine[%zu] = %d, want %d",
         step, L.m, bad, first, h->mine_out[first], (int32_t)want_u);
  bad = 0;
  for (size_t i = 0; i < (size_t)L.n * L.m; i++) {
    uint32_t w = step ? gen(step - 1, (int)(i / L.m), B_SHARD, i % L.m) : 0;
    if (h->act_out[i] != w && bad++ == 0)
      first = i, want_u = w;
  }
  if (bad)
    fail("step %ld: forward pass: %zu of act's elements are not the "
         "previous step's params, first act[%zu] = %u, want %u",
         step, bad, first, h->act_out[first], want_u);
}

static int alloc_slot(slot_t *h) {
  size_t nm = (size_t)L.n * L.m;
  return cuda_ok(cudaMallocHost((void **)&h->grad_in, L.c * sizeof(float)),
                 "cudaMallocHost") &&
         cuda_ok(cudaMallocHost((void **)&h->grad_out, L.c * sizeof(float)),
                 "cudaMallocHost") &&
         cuda_ok(cudaMallocHost((void **)&h->shard_in, L.m * sizeof(uint32_t)),
                 "cudaMallocHost") &&
         cuda_ok(cudaMallocHost((void **)&h->params_out, nm * sizeof(uint32_t)),
                 "cudaMallocHost") &&
         cuda_ok(cudaMallocHost((void **)&h->part_in, nm * sizeof(int32_t)),
                 "cudaMallocHost") &&
         cuda_ok(cudaMallocHost((void **)&h->mine_out, L.m * sizeof(int32_t)),
                 "cudaMallocHost") &&
         cuda_ok(cudaMallocHost((void **)&h->act_out, nm * sizeof(uint32_t)),
                 "cudaMallocHost");
}

static void free_slot(slot_t *h) {
  cudaFreeHost(h->grad_in);
  cudaFreeHost(h->grad_out);
  cudaFreeHost(h->shard_in);
  cudaFreeHost(h->params_out);
  cudaFreeHost(h->part_in);
  cudaFreeHost(h->mine_out);
  cudaFreeHost(h->act_out);
}

static int alloc_dev(bufs_t *d) {
  size_t nm = (size_t)L.n * L.m;
  return cuda_ok(cudaMalloc((void **)&d->grad, L.c * sizeof(float)),
                 "cudaMalloc") &&
         cuda_ok(cudaMalloc((void **)&d->shard, L.m * sizeof(uint32_t)),
                 "cudaMalloc") &&
         cuda_ok(cudaMalloc((void **)&d->params, nm * sizeof(uint32_t)),
                 "cudaMalloc") &&
         cuda_ok(cudaMalloc((void **)&d->part, nm * sizeof(int32_t)),
                 "cudaMalloc") &&
         cuda_ok(cudaMalloc((void **)&d->mine, L.m * sizeof(int32_t)),
                 "cudaMalloc") &&
         cuda_ok(cudaMalloc((void **)&d->act, L.act * nm * sizeof(uint32_t)),
                 "cudaMalloc") &&
         /* step 0's forward pass sees zeros */
         cuda_ok(cudaMemsetAsync(d->params, 0, nm * sizeof(uint32_t), L.cs),
                 "cudaMemsetAsync");
}

static void free_dev(bufs_t *d) {
  cudaFree(d->grad);
  cudaFree(d->shard);
  cudaFree(d->params);
  cudaFree(d->part);
  cudaFree(d->mine);
  cudaFree(d->act);
}

/* steps in windows of w: queue w steps, synchronize, check them. */
static void loop(long steps, int w) {
  bufs_t d = {0};
  slot_t *h = calloc((size_t)w, sizeof *h);
  int ok = h && alloc_dev(&d);
  for (int k = 0; ok && k < w; k++)
    ok = alloc_slot(&h[k]);
  for (long first = 0; ok && first < steps; first += w) {
    int k, nw = steps - first < w ? (int)(steps - first) : w;
    for (k = 0; k < nw; k++) /* the host's work first: then it only queues */
      fill(&h[k], first + k);
    for (k = 0; k < nw; k++)
      if (!queue_step(&d, &h[k], first + k))
        break;
    ok = k == nw;
    /* whatever was queued must drain before the slots are reused */
    ok &= cuda_ok(cudaStreamSynchronize(L.cs), "cudaStreamSynchronize");
    ok &= sharc_ok(sharc_stream_synchronize(L.s), "sharc_stream_synchronize",
                   first + nw - 1);
    for (k = 0; ok && k < nw; k++)
      check_step(&h[k], first + k);
  }
  for (int k = 0; h && k < w; k++)
    free_slot(&h[k]);
  free(h);
  free_dev(&d);
}

int main(int argc, char **argv) {
  long steps = 128;
  int window = 8;
  L.c = ((size_t)1 << 16) + 3; /* odd: uneven all-reduce blocks */
  L.m = 4099;
  L.act = 32;
  L.compute_us = 2000;
  L.seed = 20250325;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *a = argv[i], *v = argv[i + 1];
    if (!strcmp(a, "--steps"))
      steps = atol(v);
    else if (!strcmp(a, "--window"))
      window = atoi(v);
    else if (!strcmp(a, "--count"))
      L.c = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--compute-us"))
      L.compute_us = atol(v);
    else if (!strcmp(a, "--act"))
      L.act = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--seed"))
      L.seed = strtoull(v, NULL, 0);
    else {
      fprintf(stderr, "usage: sharcrun -n N cuda_loop [--steps K] [--window "
                      "W] [--count C] [--act A] [--seed S]\n");
      return 2;
    }
  }
  if (steps < 1 || window < 1 || L.c < 1 || !L.act || (L.act & (L.act - 1))) {
    fprintf(stderr, "cuda_loop: --steps, --window and --count must be >= 1, "
                    "--act a power of two\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *r = getenv("SHARC_RANK");
  L.rank = r ? atoi(r) : 0;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0) {
    if (L.rank == 0)
      printf("SKIP: no CUDA device (%s)\n",
             e != cudaSuccess ? cudaGetErrorString(e)
                              : "cudaGetDeviceCount found none");
    return 77;
  }
  sharc_status_t st = sharc_comm_init_env(&L.comm);
  if (st != SHARC_OK) {
    printf("cuda_loop: sharc_comm_init_env: %s: %s\n", sharc_status_name(st),
           sharc_last_error());
    return 2;
  }
  int lr = 0;
  sharc_comm_rank(L.comm, &L.rank);
  sharc_comm_size(L.comm, &L.n);
  sharc_comm_local_rank(L.comm, &lr);
  if (cuda_ok(cudaSetDevice(lr % ndev), "cudaSetDevice") &&
      cuda_ok(cudaStreamCreateWithFlags(&L.cs, cudaStreamNonBlocking),
              "cudaStreamCreateWithFlags") &&
      sharc_ok(sharc_stream_create_cuda(&L.s, L.cs), "sharc_stream_create_cuda",
               -1))
    loop(steps, window);
  if (L.dead) { /* a peer may wait in a collective this rank left */
    printf("cuda_loop: rank %d stopped after a failed call\n", L.rank);
    sharc_comm_abort(L.comm);
    return 1;
  }
  int64_t tot = L.fails;
  sharc_ok(sharc_stream_destroy(L.s), "sharc_stream_destroy", steps);
  cudaStreamDestroy(L.cs);
  sharc_ok(sharc_all_reduce(&tot, &tot, 1, SHARC_I64, SHARC_SUM, L.comm, NULL),
           "the summary sharc_all_reduce", steps);
  sharc_ok(sharc_comm_destroy(L.comm), "sharc_comm_destroy", steps);
  if (L.fails || tot) {
    printf("cuda_loop: rank %d: %ld failures here, %lld on all ranks\n", L.rank,
           L.fails, (long long)tot);
    return 1;
  }
  printf("cuda_loop: rank %d ok (%ld steps of all_gather, reduce_scatter and "
         "all_reduce in place on the same buffers, %zu + %zu elements)\n",
         L.rank, steps, L.c, L.m);
  return 0;
}

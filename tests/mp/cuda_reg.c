/*
 * cuda_reg.c - sharc_mem_register on device memory, one
 * rank per process, ranks sharing the machine's GPUs:
 *
 *   sharcrun -n N cuda_reg [--register 0|1] [--iters K]
 *
 * First the registration's refusals (every rank): a range running past its
 * cudaMalloc allocation, an overlapping registration, sharc_mem_free of a
 * registered buffer, a deregistration of something never registered.
 * Then two phases of K all-reduces (f32 sum, 1 MiB, out of place) on a CUDA
 * stream, each followed by sharc_stream_synchronize, checked against the
 * expected sums; between the phases the buffers are deregistered, freed and
 * allocated again. With --register 1 both phases run on registered buffers
 * (with SHARC_CUDA_PATH=ipc peers then map them once per phase:
 * cuda_reg_test.sh counts the mappings in the trace). A third phase misuses
 * registration: one call on registered buffers, then cudaFree without
 * sharc_mem_deregister and two calls on new buffers, which may sit at the
 * same addresses; the sums must still be right (sharc notices the stale
 * registration and says so). Before the phases, a collective enqueued on
 * the CUDA stream while it is being captured into a CUDA graph must be
 * refused (SHARC_ERR_UNSUPPORTED, naming the capture) without breaking the
 * capture: it still ends with a graph. Prints "cuda_reg: rank R stale reuse
 * yes|no" and "cuda_reg: rank R ok" or what failed; exit 0, 1 on a failure, 77
 * (with a SKIP line) without a usable CUDA device.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sharc.h"

#define COUNT ((size_t)1 << 18) /* floats: 1 MiB */

static int rank, fails;

static void fail(const char *fmt, const char *a, const char *b) {
  fails++;
  printf("cuda_reg FAIL: rank %d: ", rank);
  printf(fmt, a, b);
  printf("\n");
}

/* st must be want; the message (sharc_last_error) must contain part. */
static void expect_st(sharc_status_t st, sharc_status_t want, const char *part,
                      const char *what) {
  if (st != want) {
    char got[320];
    snprintf(got, sizeof got, "%s (%s)", sharc_status_name(st),
             st == SHARC_OK ? "no error" : sharc_last_error());
    fail("%s: got %s", what, got);
  } else if (part && !strstr(sharc_last_error(), part)) {
    fail("%s: the message does not say '%s'", what, part);
  }
}

static void refusals(void) {
  void *d = NULL;
  size_t bytes = 4096;
  if (cudaMalloc(&d, bytes) != cudaSuccess) {
    fail("%s%s", "cudaMalloc for the refusals failed", "");
    return;
  }
  expect_st(sharc_mem_register(d, bytes + 256), SHARC_ERR_INVALID_ARG,
            "past the end of its allocation",
            "registering 256 bytes past a cudaMalloc allocation");
  expect_st(sharc_mem_register((char *)d + 1024, 1024), SHARC_OK, NULL,
            "registering part of an allocation");
  expect_st(sharc_mem_register(d, bytes), SHARC_ERR_INVALID_ARG, "overlaps",
            "registering an overlapping range");
  expect_st(sharc_mem_free((char *)d + 1024), SHARC_ERR_INVALID_ARG,
            "sharc_mem_deregister", "sharc_mem_free of registered memory");
  expect_st(sharc_mem_deregister((char *)d + 1024), SHARC_OK, NULL,
            "deregistering it");
  expect_st(sharc_mem_deregister((char *)d + 1024), SHARC_ERR_INVALID_ARG,
            "was not registered", "deregistering it twice");
  cudaFree(d);
}

/* A collective on a stream being captured: refused, the capture intact. */
static void capture_refusal(sharc_comm_t comm, sharc_stream_t s,
                            cudaStream_t cs) {
  void *d = NULL;
  cudaGraph_t g = NULL;
  if (cudaMalloc(&d, 4096) != cudaSuccess ||
      cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal) != cudaSuccess) {
    fail("%s%s", "cudaMalloc or cudaStreamBeginCapture failed", "");
    cudaFree(d);
    return;
  }
  expect_st(sharc_all_reduce(d, d, 1024, SHARC_F32, SHARC_SUM, comm, s),
            SHARC_ERR_UNSUPPORTED, "captured into a CUDA graph",
            "an all-reduce on a stream being captured");
  cudaError_t e = cudaStreamEndCapture(cs, &g);
  if (e != cudaSuccess || !g)
    fail("ending the capture after the refusal: %s%s", cudaGetErrorName(e),
         " (sharc broke the capture)");
  if (g)
    cudaGraphDestroy(g);
  cudaFree(d);
}

/* Calls first..first+iters-1 of phase `which` on dsend/drecv: fill,
 * all-reduce, synchronize, check. */
static void calls(sharc_comm_t comm, sharc_stream_t s, cudaStream_t cs,
                  float *h, void *dsend, void *drecv, int first, int iters,
                  int nranks, int which) {
  for (int it = first; it < first + iters; it++) {
    for (size_t i = 0; i < COUNT; i++) /* small integers: exact sums */
      h[i] = (float)((rank + 1) * (int)((i + (size_t)it + (size_t)which) % 7));
    cudaMemcpyAsync(dsend, h, COUNT * sizeof(float), cudaMemcpyHostToDevice,
                    cs);
    sharc_status_t st =
        sharc_all_reduce(dsend, drecv, COUNT, SHARC_F32, SHARC_SUM, comm, s);
    if (st == SHARC_OK)
      st = sharc_stream_synchronize(s);
    if (st != SHARC_OK) {
      fail("all_reduce: %s: %s", sharc_status_name(st), sharc_last_error());
      break;
    }
    if (cudaMemcpy(h, drecv, COUNT * sizeof(float), cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      fail("%s%s", "reading the result back failed", "");
      break;
    }
    float tri = (float)(nranks * (nranks + 1) / 2);
    for (size_t i = 0; i < COUNT; i++) {
      float want = tri * (float)((i + (size_t)it + (size_t)which) % 7);
      if (h[i] != want) {
        char at[96], vals[96];
        snprintf(at, sizeof at, "phase %d call %d element %zu", which, it, i);
        snprintf(vals, sizeof vals, "%g, want %g", h[i], want);
        fail("wrong sum at %s: %s", at, vals);
        break;
      }
    }
  }
}

static int alloc2(void **a, void **b) {
  *a = *b = NULL;
  if (cudaMalloc(a, COUNT * sizeof(float)) == cudaSuccess &&
      cudaMalloc(b, COUNT * sizeof(float)) == cudaSuccess)
    return 1;
  fail("%s%s", "allocating a phase's buffers failed", "");
  cudaFree(*a);
  cudaFree(*b);
  return 0;
}

static void register2(void *a, void *b) {
  expect_st(sharc_mem_register(a, COUNT * sizeof(float)), SHARC_OK, NULL,
            "registering the send buffer");
  expect_st(sharc_mem_register(b, COUNT * sizeof(float)), SHARC_OK, NULL,
            "registering the receive buffer");
}

/* K all-reduces on fresh buffers; 0 when the phase could not run. */
static int phase(sharc_comm_t comm, sharc_stream_t s, cudaStream_t cs, int reg,
                 int iters, int nranks, int which) {
  float *h = malloc(COUNT * sizeof *h);
  void *dsend = NULL, *drecv = NULL;
  if (!h || !alloc2(&dsend, &drecv)) {
    free(h);
    return 0;
  }
  if (reg)
    register2(dsend, drecv);
  calls(comm, s, cs, h, dsend, drecv, 0, iters, nranks, which);
  if (reg) {
    expect_st(sharc_mem_deregister(dsend), SHARC_OK, NULL,
              "deregistering the send buffer");
    expect_st(sharc_mem_deregister(drecv), SHARC_OK, NULL,
              "deregistering the receive buffer");
  }
  cudaFree(dsend);
  cudaFree(drecv);
  free(h);
  return 1;
}

/* Freed without deregistering: the calls on the next buffers (perhaps at
 * the same addresses) must not use the stale registration. */
static void stale(sharc_comm_t comm, sharc_stream_t s, cudaStream_t cs, int reg,
                  int nranks) {
  float *h = malloc(COUNT * sizeof *h);
  void *a, *b, *a2, *b2;
  if (!h || !alloc2(&a, &b)) {
    free(h);
    return;
  }
  if (reg)
    register2(a, b);
  calls(comm, s, cs, h, a, b, 0, 1, nranks, 2);
  cudaFree(a); /* the misuse: still registered */
  cudaFree(b);
  if (alloc2(&a2, &b2)) {
    printf("cuda_reg: rank %d stale reuse %s\n", rank,
           a2 == a || b2 == b ? "yes" : "no");
    calls(comm, s, cs, h, a2, b2, 1, 2, nranks, 2);
    cudaFree(a2);
    cudaFree(b2);
  }
  if (reg) { /* the registry still holds them: deregistering works */
    expect_st(sharc_mem_deregister(a), SHARC_OK, NULL,
              "deregistering the freed send buffer");
    expect_st(sharc_mem_deregister(b), SHARC_OK, NULL,
              "deregistering the freed receive buffer");
  }
  free(h);
}

int main(int argc, char **argv) {
  int reg = 1, iters = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--register"))
      reg = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--iters"))
      iters = atoi(argv[i + 1]);
  }
  const char *r = getenv("SHARC_RANK");
  rank = r ? atoi(r) : 0;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0) {
    if (rank == 0)
      printf("SKIP: no CUDA device (%s)\n",
             e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 77;
  }
  sharc_comm_t comm;
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    printf("cuda_reg: sharc_comm_init_env: %s: %s\n", sharc_status_name(st),
           sharc_last_error());
    return 2;
  }
  int nranks = 1, lr = 0;
  sharc_comm_size(comm, &nranks);
  sharc_comm_local_rank(comm, &lr);
  cudaStream_t cs = NULL;
  sharc_stream_t s = NULL;
  if (cudaSetDevice(lr % ndev) != cudaSuccess ||
      cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess ||
      sharc_stream_create_cuda(&s, cs) != SHARC_OK) {
    fail("%s%s", "CUDA stream setup failed: ", sharc_last_error());
  } else {
    refusals();
    capture_refusal(comm, s, cs);
    for (int p = 0; p < 2 && !fails; p++)
      phase(comm, s, cs, reg, iters, nranks, p);
    if (!fails)
      stale(comm, s, cs, reg, nranks);
    sharc_stream_destroy(s);
  }
  if (cs)
    cudaStreamDestroy(cs);
  sharc_comm_destroy(comm);
  if (!fails)
    printf("cuda_reg: rank %d ok (%s, %d calls per phase)\n", rank,
           reg ? "registered" : "unregistered", iters);
  return fails ? 1 : 0;
}

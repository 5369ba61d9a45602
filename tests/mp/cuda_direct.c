/*
 * cuda_direct.c - what the direct GPU path (SHARC_CUDA_PATH=direct,
 * comm/gpu/path_direct.c) promises beyond correct results:
 *
 *   sharcrun -n N cuda_direct [--count C]
 *
 *  1. No host thread waits inside a call. Each rank closes a gate on its
 *     CUDA stream (a host function that blocks until the rank opens it),
 *     then enqueues all_gather, broadcast, reduce_scatter and all_reduce on
 *     device memory. Every call must return while the gate is closed (the
 *     device has run none of them), and a sharc event recorded on the sharc
 *     stream after them must be complete at once: the stream's host worker
 *     was given nothing to do. Only then is the gate opened; the results
 *     are checked bit for bit after sharc_stream_synchronize.
 *  0. A call on a stream being captured into a CUDA graph is refused on every
 *     rank with SHARC_ERR_UNSUPPORTED, saying why, and the capture still
 *     ends with a graph; the calls after it (below) still pair up.
 *  2. all_gather and broadcast launch no kernel (copy engines only), while
 *     reduce_scatter and all_reduce do. Kernels are counted by softcuda
 *     (softcuda_kernel_launches, found with dlsym); on a real CUDA runtime
 *     the count is not available and that check says so and is skipped.
 *
 * Prints "cuda_direct: rank R ok (...)" or FAIL lines; exit 0, 1 on a
 * failure, 2 on bad usage or setup, 77 (SKIP line from rank 0) without a
 * usable CUDA device.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sharc.h"

static int rank, n, fails;

#define FAIL(...)                                                              \
  do {                                                                         \
    fails++;                                                                   \
    printf("cuda_direct FAIL: rank %d: ", rank);                               \
    printf(__VA_ARGS__);                                                       \
    printf("\n");                                                              \
  } while (0)

/* The gate: a host function on the CUDA stream that blocks until opened. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int open, reached;
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static void gate_fn(void *arg) {
  (void)arg;
  pthread_mutex_lock(&gate.lock);
  gate.reached = 1;
  while (!gate.open)
    pthread_cond_wait(&gate.cond, &gate.lock);
  pthread_mutex_unlock(&gate.lock);
}

static void gate_open(void) {
  pthread_mutex_lock(&gate.lock);
  gate.open = 1;
  pthread_cond_broadcast(&gate.cond);
  pthread_mutex_unlock(&gate.lock);
}

static int gate_is_open(void) {
  pthread_mutex_lock(&gate.lock);
  int o = gate.open;
  pthread_mutex_unlock(&gate.lock);
  return o;
}

static uint32_t val(int r, int buf, size_t i) {
  uint64_t x = ((uint64_t)r << 40) ^ ((uint64_t)buf << 32) ^ (uint64_t)i;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)(x ^ (x >> 31));
}

typedef unsigned long long (*count_fn)(void);

int main(int argc, char **argv) {
  size_t c = 70001; /* per-rank elements: several pieces at small slots */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--count") && i + 1 < argc) {
      c = strtoull(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: cuda_direct [--count C]\n");
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *er = getenv("SHARC_RANK");
  rank = er ? atoi(er) : 0;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0) {
    if (rank == 0)
      printf("SKIP: no CUDA device (%s)\n",
             e != cudaSuccess ? cudaGetErrorString(e)
                              : "cudaGetDeviceCount found none");
    return 77;
  }
  const char *path = getenv("SHARC_CUDA_PATH");
  if (!path || strcmp(path, "direct")) {
    fprintf(stderr, "cuda_direct: run with SHARC_CUDA_PATH=direct\n");
    return 2;
  }
  sharc_comm_t comm;
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    printf("cuda_direct: sharc_comm_init_env: %s: %s\n", sharc_status_name(st),
           sharc_last_error());
    return 2;
  }
  int lr = 0;
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &n);
  sharc_comm_local_rank(comm, &lr);
  cudaStream_t cs;
  sharc_stream_t s;
  sharc_event_t ev;
  size_t nc = (size_t)n * c, b = sizeof(uint32_t);
  uint32_t *d_in, *d_all, *d_bc, *d_mine, *d_ar, *h;
  if (cudaSetDevice(lr % ndev) != cudaSuccess ||
      cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc((void **)&d_in, nc * b) != cudaSuccess ||
      cudaMalloc((void **)&d_all, nc * b) != cudaSuccess ||
      cudaMalloc((void **)&d_bc, c * b) != cudaSuccess ||
      cudaMalloc((void **)&d_mine, c * b) != cudaSuccess ||
      cudaMalloc((void **)&d_ar, nc * b) != cudaSuccess ||
      !(h = malloc(nc * b)) || sharc_stream_create_cuda(&s, cs) != SHARC_OK ||
      sharc_event_create(&ev) != SHARC_OK) {
    printf("cuda_direct: rank %d: setup failed: %s\n", rank,
           sharc_last_error());
    sharc_comm_abort(comm);
    return 2;
  }
  for (size_t i = 0; i < nc; i++)
    h[i] = val(rank, 0, i);
  cudaMemcpy(d_in, h, nc * b, cudaMemcpyHostToDevice);
  cudaDeviceSynchronize(); /* it may land later; cs does not wait */
  /* A first call sets the path up (a host exchange, once per comm). */
  if (sharc_all_reduce(d_in, d_ar, 1, SHARC_U32, SHARC_SUM, comm, s) ||
      sharc_stream_synchronize(s)) {
    printf("cuda_direct: rank %d: the first call failed: %s\n", rank,
           sharc_last_error());
    sharc_comm_abort(comm);
    return 2;
  }
  count_fn kernels = (count_fn)dlsym(RTLD_DEFAULT, "softcuda_kernel_launches");

  /* 0. A call on a stream being captured into a CUDA graph: refused on
   * every rank, naming why, the capture left intact; since every rank
   * refused it, the calls after it pair up as before (checked below). */
  cudaGraph_t graph = NULL;
  if (cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal) != cudaSuccess)
    FAIL("cudaStreamBeginCapture");
  st = sharc_all_reduce(d_in, d_ar, nc, SHARC_U32, SHARC_SUM, comm, s);
  if (st != SHARC_ERR_UNSUPPORTED ||
      !strstr(sharc_last_error(), "captured into a CUDA graph") ||
      !strstr(sharc_last_error(), "step numbers"))
    FAIL("an all_reduce during a capture: %s: %s (want SHARC_ERR_UNSUPPORTED "
         "naming the capture and why)",
         sharc_status_name(st), sharc_last_error());
  if (cudaStreamEndCapture(cs, &graph) != cudaSuccess || !graph)
    FAIL("the capture did not end with a graph after the refusal");
  if (graph)
    cudaGraphDestroy(graph);

  /* 1. Everything enqueued behind the closed gate. */
  if (cudaLaunchHostFunc(cs, gate_fn, NULL) != cudaSuccess)
    FAIL("cudaLaunchHostFunc");
  unsigned long long k0 = kernels ? kernels() : 0;
  st = sharc_all_gather(d_in, d_all, c, SHARC_U32, comm, s);
  if (!st)
    st = sharc_broadcast(d_in, d_bc, c, SHARC_U32, n - 1, comm, s);
  unsigned long long k1 = kernels ? kernels() : 0;
  if (!st)
    st = sharc_reduce_scatter(d_in, d_mine, c, SHARC_U32, SHARC_SUM, comm, s);
  if (!st)
    st = sharc_all_reduce(d_in, d_ar, nc, SHARC_U32, SHARC_SUM, comm, s);
  unsigned long long k2 = kernels ? kernels() : 0;
  if (st)
    FAIL("enqueueing: %s: %s", sharc_status_name(st), sharc_last_error());
  int done = 0;
  if (sharc_event_record(ev, s) || sharc_event_query(ev, &done))
    FAIL("sharc_event_record/query: %s", sharc_last_error());
  else if (!done)
    FAIL("the sharc stream's host worker has work from the direct path's "
         "calls (an event recorded after them is not complete)");
  if (gate_is_open())
    FAIL("the gate opened itself");
  printf("cuda_direct: rank %d: 4 collectives enqueued behind a closed gate "
         "(the CUDA stream ran none of them), the sharc stream's host "
         "worker idle\n",
         rank);
  gate_open();
  st = sharc_stream_synchronize(s);
  if (st)
    FAIL("sharc_stream_synchronize: %s: %s", sharc_status_name(st),
         sharc_last_error());

  /* 2. Kernels: all_gather and broadcast none, the reductions some. */
  if (!kernels) {
    printf("cuda_direct: rank %d: kernel count not available (not "
           "softcuda): that check is skipped\n",
           rank);
  } else {
    if (k1 != k0)
      FAIL("all_gather and broadcast launched %llu kernels, want 0", k1 - k0);
    if (k2 == k1 && n > 1)
      FAIL("reduce_scatter and all_reduce launched no kernel: the count "
           "does not work");
    printf("cuda_direct: rank %d: kernels launched: all_gather + broadcast "
           "%llu, reduce_scatter + all_reduce %llu\n",
           rank, k1 - k0, k2 - k1);
  }

  /* The results, bit for bit (u32 sums wrap, in any order). */
  size_t bad = 0;
  cudaMemcpy(h, d_all, nc * b, cudaMemcpyDeviceToHost);
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c; i++)
      bad += h[(size_t)r * c + i] != val(r, 0, i);
  cudaMemcpy(h, d_bc, c * b, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < c; i++)
    bad += h[i] != val(n - 1, 0, i);
  cudaMemcpy(h, d_mine, c * b, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < c; i++) {
    uint32_t want = 0;
    for (int r = 0; r < n; r++)
      want += val(r, 0, (size_t)rank * c + i);
    bad += h[i] != want;
  }
  cudaMemcpy(h, d_ar, nc * b, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < nc; i++) {
    uint32_t want = 0;
    for (int r = 0; r < n; r++)
      want += val(r, 0, i);
    bad += h[i] != want;
  }
  if (bad)
    FAIL("%zu wrong elements over the four results", bad);
  sharc_event_destroy(ev);
  sharc_stream_destroy(s);
  int64_t tot = fails;
  sharc_all_reduce(&tot, &tot, 1, SHARC_I64, SHARC_SUM, comm, NULL);
  sharc_comm_destroy(comm);
  if (fails || tot) {
    printf("cuda_direct: rank %d: %d failures here, %lld on all ranks\n", rank,
           fails, (long long)tot);
    return 1;
  }
  printf("cuda_direct: rank %d ok (%zu elements per rank, %d ranks)\n", rank, c,
         n);
  return 0;
}

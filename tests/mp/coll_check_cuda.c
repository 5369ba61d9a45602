/*
 * coll_check_cuda.c - coll_check's device memory (--mem cuda): each sweep
 * case with its buffers in device memory on the rank's cudaStream_t
 * (run_cuda), the queue of many calls in flight on it (run_cuda_queue,
 * "cudaq"), and device buffers refused on host paths. See coll_check.c for
 * the sweep itself.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_check.h"

#ifdef SHARC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/*
 * Each device buffer mirrors its host twin byte for byte, guards included:
 * the host side is filled and checked as for host memory, and the device
 * side is what the collective sees. */

#ifdef SHARC_HAVE_CUDA

/* Number of usable devices; 0 with the reason in why. */
int cuda_probe(char *why, size_t n) {
  int cnt = 0;
  cudaError_t e = cudaGetDeviceCount(&cnt);
  if (e != cudaSuccess) {
    snprintf(why, n, "cudaGetDeviceCount: %s: %s", cudaGetErrorName(e),
             cudaGetErrorString(e));
    return 0;
  }
  if (cnt <= 0)
    snprintf(why, n, "cudaGetDeviceCount found no device");
  return cnt > 0 ? cnt : 0;
}

static void cuda_fail(job_t *j, const char *what, cudaError_t e) {
  char got[160];
  snprintf(got, sizeof got, "%s: %s", cudaGetErrorName(e),
           cudaGetErrorString(e));
  if (j) {
    fail_job(j, what, 0, "cudaSuccess", got);
  } else {
    X.fail++;
    if (X.printed++ < MAX_PRINT)
      printf("coll_check FAIL: %s: %s\n", what, got);
  }
  X.dead = 1;
}

/* The rank's device, its cudaStream_t and the sharc stream on it. 0 on
 * failure (counted). */
int cuda_setup(int ndev, int local_rank) {
  cudaStream_t cs = NULL;
  cudaError_t e = cudaSetDevice(local_rank % ndev);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
  X.cuda_stream = cs;
  if (e != cudaSuccess) {
    cuda_fail(NULL, "cudaSetDevice / cudaStreamCreateWithFlags", e);
    return 0;
  }
  sharc_status_t st = sharc_stream_create_cuda(&X.dstream, X.cuda_stream);
  cc_check_st(st, X.comm, "sharc_stream_create_cuda");
  if (st != SHARC_OK)
    X.dead = 1;
  return st == SHARC_OK;
}

void cuda_teardown(void) {
  if (X.dstream)
    cc_check_st(sharc_stream_destroy(X.dstream), X.comm,
                "sharc_stream_destroy (CUDA stream)");
  if (X.cuda_stream)
    cudaStreamDestroy((cudaStream_t)X.cuda_stream);
}

/* Copies host buffer h (bytes + guards) into a new device buffer on cs. */
static unsigned char *upload(job_t *j, const unsigned char *h, size_t bytes,
                             void *cs) {
  void *d = NULL;
  cudaError_t e = cudaMalloc(&d, bytes + 2 * GUARD);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(d, h - GUARD, bytes + 2 * GUARD, cudaMemcpyHostToDevice,
                        (cudaStream_t)cs);
  if (e != cudaSuccess) {
    cuda_fail(j, "cudaMalloc / cudaMemcpyAsync of an input", e);
    cudaFree(d);
    return NULL;
  }
  return d;
}

/* After job_prepare: device twins of rb and sb. 0 on failure. */
static int dev_prepare(job_t *j, void *cs) {
  if (j->rb && !(j->drb = upload(j, j->rb, j->rbytes, cs)))
    return 0;
  if (j->sb && !(j->dsb = upload(j, j->sb, j->sbytes, cs)))
    return 0;
  return 1;
}

/* The device address of host pointer p (inside rb or sb, guards included);
 * other pointers (NULL) unchanged. */
static void *to_dev(const job_t *j, const void *p) {
  uintptr_t q = (uintptr_t)p;
  if (j->drb && q >= (uintptr_t)j->rb - GUARD &&
      q <= (uintptr_t)j->rb + j->rbytes + GUARD)
    return j->drb + (q - ((uintptr_t)j->rb - GUARD));
  if (j->dsb && q >= (uintptr_t)j->sb - GUARD &&
      q <= (uintptr_t)j->sb + j->sbytes + GUARD)
    return j->dsb + (q - ((uintptr_t)j->sb - GUARD));
  return (void *)p;
}

/* job_launch with the device addresses. */
static sharc_status_t dev_launch(job_t *j, sharc_stream_t s) {
  void *hs = j->send, *hr = j->recv;
  j->send = to_dev(j, hs);
  j->recv = to_dev(j, hr);
  sharc_status_t st = job_launch(j, s);
  j->send = hs;
  j->recv = hr;
  return st;
}

/* Queues the copies of the device buffers back into their host twins. */
static void dev_readback(job_t *j, void *cs) {
  cudaError_t e = cudaSuccess;
  if (j->drb)
    e = cudaMemcpyAsync(j->rb - GUARD, j->drb, j->rbytes + 2 * GUARD,
                        cudaMemcpyDeviceToHost, (cudaStream_t)cs);
  if (e == cudaSuccess && j->dsb)
    e = cudaMemcpyAsync(j->sb - GUARD, j->dsb, j->sbytes + 2 * GUARD,
                        cudaMemcpyDeviceToHost, (cudaStream_t)cs);
  if (e != cudaSuccess)
    cuda_fail(j, "cudaMemcpyAsync of a result", e);
}

/* After the stream synchronized: frees the device twins. */
static void dev_release(job_t *j) {
  cudaFree(j->drb);
  cudaFree(j->dsb);
  j->drb = j->dsb = NULL;
}

/* Waits for cs (the results are in the host twins then) and for the sharc
 * stream s (its status). */
static void dev_sync(job_t *j, void *cs, sharc_stream_t s) {
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)cs);
  if (e != cudaSuccess)
    cuda_fail(j, "cudaStreamSynchronize", e);
  sharc_status_t st = sharc_stream_synchronize(s);
  if (st != SHARC_OK) {
    if (j)
      job_status_fail(j, st);
    else
      cc_check_st(st, X.comm, "sharc_stream_synchronize (CUDA stream)");
    X.dead = 1;
  }
}

/* One sweep case on device memory: upload, collective, read back, all in
 * the order of the rank's cudaStream_t; then the host checks. */
void run_cuda(job_t *j) {
  if (job_prepare(j) && dev_prepare(j, X.cuda_stream)) {
    sharc_status_t st = dev_launch(j, X.dstream);
    if (st != SHARC_OK)
      job_status_fail(j, st);
    dev_readback(j, X.cuda_stream);
    dev_sync(j, X.cuda_stream, X.dstream);
  }
  dev_release(j);
  job_verify(j);
}

/* Device memory without a CUDA-bound stream is refused with a message on
 * every rank alike (nothing runs, so the ranks stay in step), and the
 * communicator goes on working. */
static void refuse_device_on_host(void) {
  void *d = NULL;
  cudaError_t e = cudaMalloc(&d, 64);
  if (e != cudaSuccess) {
    cuda_fail(NULL, "cudaMalloc (device buffer on a host path)", e);
    return;
  }
  float h[16] = {0};
  sharc_status_t st =
      sharc_all_reduce(d, h, 16, SHARC_F32, SHARC_SUM, X.comm, NULL);
  const char *msg = sharc_last_error();
  cc_check(st == SHARC_ERR_INVALID_ARG && strstr(msg, "sendbuf is device"),
           "device sendbuf with no stream is refused", SHARC_ERR_INVALID_ARG,
           st);
  st = sharc_all_gather(h, d, 1, SHARC_F32, X.comm, NULL);
  msg = sharc_last_error();
  cc_check(st == SHARC_ERR_INVALID_ARG && strstr(msg, "recvbuf is device"),
           "device recvbuf with no stream is refused", SHARC_ERR_INVALID_ARG,
           st);
  cudaFree(d);
  cc_check_st(sharc_barrier(X.comm, NULL), X.comm,
              "sharc_barrier after refused device buffers");
}

/* Many calls in flight at once on the CUDA stream (the staging buffer is
 * reused and outgrown while earlier calls still use it), host memory on the
 * CUDA stream, a blocking host collective and a second sharc stream on the
 * legacy default stream queued behind them; one synchronisation at the
 * end. */
void run_cuda_queue(void) {
  int last = X.n - 1;
  job_t jobs[] = {
      {.coll = C_AR, .dt = SHARC_F32, .op = SHARC_SUM, .count = 1000, .dev = 1},
      {.coll = C_AG,
       .dt = SHARC_I32,
       .op = DATA_OP_COPY,
       .inplace = 1,
       .count = 7,
       .dev = 1},
      {.coll = C_BC,
       .dt = SHARC_F64,
       .op = DATA_OP_COPY,
       .root = last,
       .count = 1000,
       .dev = 1},
      {.coll = C_RS,
       .dt = SHARC_BF16,
       .op = SHARC_AVG,
       .inplace = 1,
       .count = 1000,
       .dev = 1},
      {.coll = C_BAR, .dev = 1},
      {.coll = C_AR,
       .dt = SHARC_U8,
       .op = SHARC_MAX,
       .inplace = 1,
       .count = 262147,
       .dev = 1},
      {.coll = C_RS,
       .dt = SHARC_F32,
       .op = SHARC_SUM,
       .count = 65537,
       .dev = 1},
      {.coll = C_AR, .dt = SHARC_F32, .op = SHARC_SUM, .count = 999}, /* host */
      {.coll = C_AG,
       .dt = SHARC_U8,
       .op = DATA_OP_COPY,
       .inplace = 1,
       .count = 1001}, /* host memory, in place, on the CUDA stream */
      {.coll = C_AR, .dt = SHARC_I64, .op = SHARC_SUM, .count = 1, .dev = 1},
  };
  enum { NJ = sizeof jobs / sizeof *jobs };
  job_t blocking = {.coll = C_AR,
                    .dt = SHARC_F64,
                    .op = SHARC_SUM,
                    .count = 1000}; /* host memory, no stream */
  job_t legacy = {.coll = C_AR,
                  .dt = SHARC_F16,
                  .op = SHARC_AVG,
                  .inplace = 1,
                  .count = 4097,
                  .dev = 1}; /* on the legacy default stream */
  sharc_stream_t s0 = NULL;
  sharc_status_t st;
  size_t k;
  /* The CUDA IPC path shares device memory only: host buffers on the CUDA
   * stream are refused there (a sticky stream error), so they stay out. */
  const char *path = getenv("SHARC_CUDA_PATH");
  int ipc = path && !strcmp(path, "ipc");
  for (k = 0; k < NJ && !X.dead; k++) {
    if (ipc && !jobs[k].dev && jobs[k].coll != C_BAR)
      continue;
    if (!job_prepare(&jobs[k]) ||
        (jobs[k].dev && !dev_prepare(&jobs[k], X.cuda_stream)))
      break;
    st = jobs[k].dev ? dev_launch(&jobs[k], X.dstream)
                     : job_launch(&jobs[k], X.dstream);
    if (st != SHARC_OK) {
      job_status_fail(&jobs[k], st);
      break;
    }
  }
  /* queued behind the calls above; the main thread blocks until it ran */
  if (!X.dead && job_prepare(&blocking) &&
      (st = job_launch(&blocking, NULL)) != SHARC_OK)
    job_status_fail(&blocking, st);
  if (!X.dead) {
    cc_check_st(st = sharc_stream_create_cuda(&s0, NULL), X.comm,
                "sharc_stream_create_cuda (legacy default stream)");
    if (st != SHARC_OK)
      X.dead = 1;
  }
  if (!X.dead && job_prepare(&legacy) && dev_prepare(&legacy, NULL)) {
    if ((st = dev_launch(&legacy, s0)) != SHARC_OK)
      job_status_fail(&legacy, st);
    dev_readback(&legacy, NULL);
  }
  for (k = 0; k < NJ; k++)
    if (jobs[k].dev)
      dev_readback(&jobs[k], X.cuda_stream);
  dev_sync(NULL, X.cuda_stream, X.dstream);
  if (s0) {
    dev_sync(NULL, NULL, s0);
    cc_check_st(sharc_stream_destroy(s0), X.comm,
                "sharc_stream_destroy (legacy default stream)");
  }
  for (k = 0; k < NJ; k++) {
    dev_release(&jobs[k]);
    if (ipc && !jobs[k].dev && jobs[k].coll != C_BAR)
      continue; /* not run */
    job_verify(&jobs[k]);
  }
  job_verify(&blocking);
  dev_release(&legacy);
  job_verify(&legacy);
  if (!X.dead)
    refuse_device_on_host();
}

#else /* the library was built without CUDA: --mem cuda skips */

int cuda_probe(char *why, size_t n) {
  snprintf(why, n, "sharc and its tests were built without CUDA");
  return 0;
}
int cuda_setup(int ndev, int local_rank) { return 0; }
void cuda_teardown(void) {}
void run_cuda(job_t *j) { job_verify(j); }
void run_cuda_queue(void) {}

#endif /* SHARC_HAVE_CUDA */

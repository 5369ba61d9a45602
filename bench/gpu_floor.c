/*
 * gpu_floor.c - the latencies of the CUDA primitives sharc's device paths
 * are built from, one at a time, so that a GPU run says where a call's
 * fixed cost goes (the first H100 run measured 60-500 us per call at 8 B
 * on every path: bench/results/gpu_h100_first).
 *
 *   sharc-gpu-floor [-n ITERS] [-J out.json]
 *
 * Rows (median and 90th percentile of ITERS round trips, microseconds):
 *   stream_sync      cudaMemsetAsync of 4 bytes, cudaStreamSynchronize
 *   event_spin       the same, then cudaEventSynchronize (default event)
 *   event_blocking   the same with a cudaEventBlockingSync event (sharc's
 *                    workers wait so)
 *   host_func        cudaLaunchHostFunc until the function ran (the
 *                    staged path's release fallback)
 *   wait_value       host writes a pinned word, the stream's
 *                    cuStreamWaitValue32 passes and its cuStreamWriteValue32
 *                    answers in another pinned word (the release of the
 *                    staged and IPC paths)
 *   ipc_pingpong     two processes on the device, each stream waiting for
 *                    the other's cuStreamWriteValue32 on CUDA IPC memory
 *                    (the direct path's step signal); a round trip
 *   ipc_open_close   cudaIpcOpenMemHandle + cudaIpcCloseMemHandle of a
 *                    peer's buffer (the IPC path maps per call)
 * Exit 0, 1 when a primitive failed (the row says why), 77 without a CUDA
 * device. On softcuda the numbers are those of its threads: plumbing only.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef CUresult (*wait32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);

static wait32_fn wait32;
static write32_fn write32;
static int iters = 200;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct {
  const char *name;
  double median, p90;
  char why[160]; /* empty: measured */
} row_t;

static row_t rows[8];
static int nrows;

/* Records a row from the samples t[0..n). */
static void add_row(const char *name, double *t, int n) {
  row_t *r = &rows[nrows++];
  r->name = name;
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  r->median = t[n / 2];
  r->p90 = t[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
}

static void fail_row(const char *name, const char *what, cudaError_t e) {
  row_t *r = &rows[nrows++];
  r->name = name;
  snprintf(r->why, sizeof r->why, "%s: %s", what, cudaGetErrorName(e));
  (void)cudaGetLastError();
}

#define TRY(name, call)                                                        \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      fail_row(name, #call, e_);                                               \
      free(t);                                                                 \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* stream_sync, event_spin, event_blocking */
static void sync_rows(cudaStream_t s, void *d) {
  double *t = calloc((size_t)iters, sizeof *t);
  if (!t)
    return;
  for (int i = 0; i < iters; i++) {
    double t0 = now_us();
    TRY("stream_sync", cudaMemsetAsync(d, i, 4, s));
    TRY("stream_sync", cudaStreamSynchronize(s));
    t[i] = now_us() - t0;
  }
  add_row("stream_sync", t, iters);
  const unsigned flags[2] = {cudaEventDisableTiming,
                             cudaEventDisableTiming | cudaEventBlockingSync};
  const char *names[2] = {"event_spin", "event_blocking"};
  for (int k = 0; k < 2; k++) {
    cudaEvent_t ev;
    TRY(names[k], cudaEventCreateWithFlags(&ev, flags[k]));
    for (int i = 0; i < iters; i++) {
      double t0 = now_us();
      TRY(names[k], cudaMemsetAsync(d, i, 4, s));
      TRY(names[k], cudaEventRecord(ev, s));
      TRY(names[k], cudaEventSynchronize(ev));
      t[i] = now_us() - t0;
    }
    cudaEventDestroy(ev);
    add_row(names[k], t, iters);
  }
  free(t);
}

static void CUDART_CB mark(void *p) {
  atomic_store_explicit((_Atomic int *)p, 1, memory_order_release);
}

static void host_func_row(cudaStream_t s) {
  double *t = calloc((size_t)iters, sizeof *t);
  _Atomic int flag;
  if (!t)
    return;
  for (int i = 0; i < iters; i++) {
    atomic_store(&flag, 0);
    double t0 = now_us();
    TRY("host_func", cudaLaunchHostFunc(s, mark, (void *)&flag));
    while (!atomic_load_explicit(&flag, memory_order_acquire))
      ;
    t[i] = now_us() - t0;
  }
  TRY("host_func", cudaStreamSynchronize(s));
  add_row("host_func", t, iters);
  free(t);
}

/* wait_value: words[0] the host's, words[1] the stream's answer. */
static void wait_value_row(cudaStream_t s) {
  double *t = calloc((size_t)iters, sizeof *t);
  if (!t)
    return;
  volatile uint32_t *words = NULL;
  void *dw = NULL;
  TRY("wait_value", cudaHostAlloc((void **)&words, 64, cudaHostAllocMapped));
  TRY("wait_value", cudaHostGetDevicePointer(&dw, (void *)words, 0));
  words[0] = words[1] = 0;
  CUdeviceptr a = (CUdeviceptr)(uintptr_t)dw, b = a + 4;
  int bad = 0;
  for (int i = 1; i <= iters && !bad; i++) {
    bad = wait32((CUstream)s, a, (cuuint32_t)i, CU_STREAM_WAIT_VALUE_GEQ) ||
          write32((CUstream)s, b, (cuuint32_t)i, 0);
    double t0 = now_us();
    __atomic_store_n(&words[0], (uint32_t)i, __ATOMIC_RELEASE);
    while (!bad && __atomic_load_n(&words[1], __ATOMIC_ACQUIRE) != (uint32_t)i)
      ;
    t[i - 1] = now_us() - t0;
  }
  if (bad) {
    words[0] = UINT32_MAX; /* let a queued wait pass */
    fail_row("wait_value", "cuStreamWaitValue32/WriteValue32",
             cudaErrorUnknown);
  } else {
    add_row("wait_value", t, iters);
  }
  cudaStreamSynchronize(s);
  cudaFreeHost((void *)words);
  free(t);
}

/* ipc_pingpong and ipc_open_close: a child process maps the parent's
 * buffer; word 0 is the parent's, word 1 the child's. The parent queues
 * every round (write i, wait for the child's i) at once and times the
 * whole; the child answers each round. Both processes are forked before
 * CUDA starts in either. Returns the child's pid (0: no child). */
static int pipe_up[2], pipe_down[2];

/* cudaGetDriverEntryPoint by version where the runtime has it (12.5+) */
static cudaError_t entry(const char *sym, void **fn) {
  enum cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
  return cudaGetDriverEntryPointByVersion(sym, fn, 12000, cudaEnableDefault,
                                          &q);
#else
  return cudaGetDriverEntryPoint(sym, fn, cudaEnableDefault, &q);
#endif
}

/* The stream memory operations from the driver; 0 or -1. */
static int load_entries(void) {
  void *fw = NULL, *fr = NULL;
  if (entry("cuStreamWaitValue32", &fw) != cudaSuccess || !fw ||
      entry("cuStreamWriteValue32", &fr) != cudaSuccess || !fr)
    return -1;
  wait32 = (wait32_fn)fw;
  write32 = (write32_fn)fr;
  return 0;
}

/* Waits for s for at most 30 s, and for at most 2 s once the child has
 * exited (its writes are in by then; the child is not reaped here):
 * cudaErrorNotReady when either ends first. */
static cudaError_t sync_or_give_up(cudaStream_t s, pid_t child) {
  double end = now_us() + 30e6, gone = 0;
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    double t = now_us();
    if (e != cudaErrorNotReady || t >= end || (gone > 0 && t - gone > 2e6))
      return e;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (gone == 0 &&
        waitid(P_PID, (id_t)child, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        si.si_pid == child)
      gone = t;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

static int child_main(void) {
  if (load_entries())
    return 9;
  cudaIpcMemHandle_t h;
  if (read(pipe_down[0], &h, sizeof h) != (ssize_t)sizeof h)
    return 1;
  void *p = NULL;
  cudaStream_t s;
  if (cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) !=
          cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
    return 2;
  CUdeviceptr mine = (CUdeviceptr)(uintptr_t)p + 4, theirs = mine - 4;
  for (int i = 1; i <= iters; i++)
    if (wait32((CUstream)s, theirs, (cuuint32_t)i, CU_STREAM_WAIT_VALUE_GEQ) ||
        write32((CUstream)s, mine, (cuuint32_t)i, 0))
      return 3;
  if (cudaStreamSynchronize(s) != cudaSuccess)
    return 4;
  char ok = 1;
  if (write(pipe_up[1], &ok, 1) != 1) /* pingpong done */
    return 5;
  if (cudaIpcCloseMemHandle(p) != cudaSuccess)
    return 6;
  double *t = calloc((size_t)iters, sizeof *t);
  for (int i = 0; t && i < iters; i++) {
    double t0 = now_us();
    if (cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) !=
            cudaSuccess ||
        cudaIpcCloseMemHandle(p) != cudaSuccess)
      return 7;
    t[i] = now_us() - t0;
  }
  if (!t || write(pipe_up[1], t, sizeof *t * (size_t)iters) !=
                (ssize_t)(sizeof *t * (size_t)iters))
    return 8;
  free(t);
  return 0;
}

static void ipc_rows(pid_t child) {
  double *t = calloc((size_t)iters, sizeof *t);
  if (!t)
    return;
  void *d = NULL;
  cudaStream_t s;
  cudaIpcMemHandle_t h;
  TRY("ipc_pingpong", cudaMalloc(&d, 64));
  TRY("ipc_pingpong", cudaMemset(d, 0, 64));
  TRY("ipc_pingpong", cudaDeviceSynchronize());
  TRY("ipc_pingpong", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TRY("ipc_pingpong", cudaIpcGetMemHandle(&h, d));
  if (write(pipe_down[1], &h, sizeof h) != (ssize_t)sizeof h) {
    fail_row("ipc_pingpong", "pipe to the child", cudaErrorUnknown);
    free(t);
    return;
  }
  CUdeviceptr mine = (CUdeviceptr)(uintptr_t)d, theirs = mine + 4;
  double t0 = now_us();
  int bad = 0;
  for (int i = 1; i <= iters && !bad; i++)
    bad = write32((CUstream)s, mine, (cuuint32_t)i, 0) ||
          wait32((CUstream)s, theirs, (cuuint32_t)i, CU_STREAM_WAIT_VALUE_GEQ);
  cudaError_t e = bad ? cudaErrorUnknown : sync_or_give_up(s, child);
  double per = (now_us() - t0) / iters;
  if (e != cudaSuccess) { /* let the child's waits pass */
    (void)cudaGetLastError();
    (void)cudaMemset(d, 0xff, 4);
    (void)cudaDeviceSynchronize();
  }
  char ok = 0; /* read whether or not the round trips completed here */
  int got_ok = read(pipe_up[0], &ok, 1) == 1 && ok;
  if (e == cudaSuccess && got_ok) {
    for (int i = 0; i < iters; i++)
      t[i] = per; /* one number: the rounds were queued back to back */
    add_row("ipc_pingpong", t, iters);
  } else {
    fail_row("ipc_pingpong", "the round trips", e);
  }
  size_t want = sizeof *t * (size_t)iters, got = 0;
  while (got < want) {
    ssize_t r = read(pipe_up[0], (char *)t + got, want - got);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (got == want && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    add_row("ipc_open_close", t, iters);
  } else {
    row_t *r = &rows[nrows++];
    r->name = "ipc_open_close";
    snprintf(r->why, sizeof r->why, "the child exited with status %d",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  cudaStreamDestroy(s);
  cudaFree(d);
  free(t);
}

int main(int argc, char **argv) {
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc) {
      iters = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "-J") && i + 1 < argc) {
      json = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [-n ITERS] [-J out.json]\n", argv[0]);
      return 2;
    }
  }
  if (iters < 10 || iters > 1000000) {
    fprintf(stderr, "sharc-gpu-floor: -n %d: use 10 to 1000000\n", iters);
    return 2;
  }
  /* the child, before CUDA starts here */
  if (pipe(pipe_up) || pipe(pipe_down)) {
    perror("sharc-gpu-floor: pipe");
    return 1;
  }
  pid_t child = fork();
  if (child < 0) {
    perror("sharc-gpu-floor: fork");
    return 1;
  }
  if (child == 0) {
    close(pipe_down[1]);
    close(pipe_up[0]);
    alarm(120); /* a primitive that never completes ends the run */
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
      _exit(77);
    _exit(child_main());
  }
  close(pipe_down[0]);
  close(pipe_up[1]);
  alarm(120);
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 77;
  }
  if (load_entries()) {
    fprintf(stderr, "sharc-gpu-floor: the driver has no "
                    "cuStreamWaitValue32/cuStreamWriteValue32\n");
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 1;
  }
  struct cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  cudaStream_t s;
  void *d = NULL;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(&d, 64) != cudaSuccess) {
    fprintf(stderr, "sharc-gpu-floor: stream or 64 bytes: %s\n",
            cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  sync_rows(s, d);
  host_func_row(s);
  wait_value_row(s);
  ipc_rows(child);
  printf("# sharc-gpu-floor: %s, %d round trips per row (us)\n", prop.name,
         iters);
  printf("# %-16s %10s %10s\n", "primitive", "median", "p90");
  int failed = 0;
  for (int i = 0; i < nrows; i++) {
    if (rows[i].why[0]) {
      printf("  %-16s FAILED: %s\n", rows[i].name, rows[i].why);
      failed = 1;
    } else {
      printf("  %-16s %10.2f %10.2f\n", rows[i].name, rows[i].median,
             rows[i].p90);
    }
  }
  if (json) {
    FILE *f = fopen(json, "w");
    if (!f) {
      fprintf(stderr, "sharc-gpu-floor: %s: %s\n", json, strerror(errno));
      return 1;
    }
    fprintf(f, "{\"device\": \"%s\", \"iters\": %d, \"rows\": [", prop.name,
            iters);
    for (int i = 0; i < nrows; i++)
      fprintf(f,
              "%s\n  {\"primitive\": \"%s\", \"median_us\": %.3f, "
              "\"p90_us\": %.3f, \"failed\": %s}",
              i ? "," : "", rows[i].name, rows[i].median, rows[i].p90,
              rows[i].why[0] ? "true" : "false");
    fprintf(f, "\n]}\n");
    fclose(f);
  }
  cudaFree(d);
  cudaStreamDestroy(s);
  return failed;
}

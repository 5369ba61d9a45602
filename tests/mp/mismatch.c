/*
 * mismatch.c - ranks that disagree on a collective must all fail with
 * SHARC_ERR_MISMATCH within seconds (not hang, time out or corrupt data).
 *
 *   sharcrun -n N mismatch CASE [--mem cuda]
 *
 * Every rank first runs three correct all-reduces (checked), then the case:
 *   coll     rank N-1 calls all_gather(512, float), the others
 *            all_reduce(1024, float, sum)
 *   count    all_reduce count 512 on rank N-1, 1024 elsewhere
 *   dtype    all_reduce int32 on rank N-1, float elsewhere
 *   op       all_reduce max on rank N-1, sum elsewhere
 *   root     broadcast root 1 on rank N-1, root 0 elsewhere
 *   barrier  rank N-1 calls all_reduce(1, float, sum), the others barrier
 *   rs       reduce_scatter recvcount 128 on rank N-1, 256 elsewhere
 *   reduce   reduce (sum) to root 1 on rank N-1, to root 0 elsewhere
 *   gather   rank N-1 calls scatter(512, float, root 0), the others
 *            gather(512, float, root 0)
 *   groups   all_reduce count 1000 on even ranks, 1001 on odd ranks
 *   many     all_reduce count 1000 + rank: one group per rank; the message
 *            names the first ones and counts the rest
 *   inplace  rank N-1 all-reduces in place, the others out of place: legal,
 *            must pass (no false alarm); then one more checked all-reduce
 *
 * With SHARC_CHECK=1 (read from the environment) each rank checks: status
 * SHARC_ERR_MISMATCH within MAX_MS; the message names "collective
 * mismatch", both rank groups ("ranks 0-2", "rank 3") and both signatures
 * ("all_reduce(count 1024, float, sum)"); the output buffer is untouched
 * (no data moved); the next collective fails at once with the same status.
 * Without SHARC_CHECK only `count` is meaningful: the shm transport's
 * message headers must still turn it into an error (any status but OK)
 * within MAX_MS.
 *
 * --mem cuda: the case's buffers are device memory and its calls (and the
 * next one) go on a CUDA stream: on one host the direct GPU path, which
 * runs SHARC_CHECK's agreement as each call is enqueued (the warm-up stays
 * on host memory). Every rank exits 77 without a CUDA device.
 *
 * Each rank prints "mismatch: rank R CASE: N passed, M failed" and exits 0
 * when all its checks passed, 1 otherwise, 2 on a usage or init error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sharc.h"

#define COUNT 1024   /* elements of the agreeing call */
#define POISON 0x5B  /* bytes of every output buffer before the call */
#define MAX_MS 5000  /* a mismatch must be reported within this */
#define FAST_MS 1000 /* later calls on the failed comm return within this */

static int rank, n, pass, fail;
static const char *cname;

static void ok(int cond, const char *what, const char *detail) {
  if (cond) {
    pass++;
    return;
  }
  fail++;
  printf("mismatch FAIL: rank %d %s: %s%s%s\n", rank, cname, what,
         detail ? ": " : "", detail ? detail : "");
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* "rank 3", "ranks 0-2", or for parity groups "ranks 0,2" / "rank 1". */
static void span(char *out, size_t len, int lo, int hi) {
  if (lo == hi)
    snprintf(out, len, "rank %d", lo);
  else
    snprintf(out, len, "ranks %d-%d", lo, hi);
}
static void parity(char *out, size_t len, int first) {
  int o = snprintf(out, len, "%s", first + 2 < n ? "ranks " : "rank ");
  for (int r = first; r < n && (size_t)o < len; r += 2)
    o += snprintf(out + o, len - (size_t)o, "%s%d", r == first ? "" : ",", r);
}

/* Three correct all-reduces, so the mismatch is not collective #0. */
static void warm_up(sharc_comm_t comm) {
  float a[16], b[16];
  for (int it = 0; it < 3; it++) {
    for (int i = 0; i < 16; i++)
      a[i] = (float)(rank + i);
    sharc_status_t st =
        sharc_all_reduce(a, b, 16, SHARC_F32, SHARC_SUM, comm, NULL);
    int good = st == SHARC_OK;
    for (int i = 0; i < 16 && good; i++)
      good = b[i] == (float)(n * (n - 1) / 2 + n * i);
    ok(good, "warm-up all_reduce", sharc_status_name(st));
  }
}

static void dev_get(void *host, const void *p, size_t bytes);
static void dev_put(void *p, const void *host, size_t bytes);

/* --mem cuda: the three warm-up all-reduces on the device (in, whose
 * elements are rank + 1, into out, poisoned again after), so that the
 * case is collective #3 only if the device path numbers its calls as the
 * host path does. */
static void warm_up_dev(sharc_comm_t comm, void *in, void *out,
                        sharc_stream_t s) {
  float b[16];
  uint8_t poison[16 * sizeof(float)];
  memset(poison, POISON, sizeof poison);
  for (int it = 0; it < 3; it++) {
    sharc_status_t st =
        sharc_all_reduce(in, out, 16, SHARC_F32, SHARC_SUM, comm, s);
    if (st == SHARC_OK)
      st = sharc_stream_synchronize(s);
    dev_get(b, out, sizeof b);
    int good = st == SHARC_OK;
    for (int i = 0; i < 16 && good; i++)
      good = b[i] == (float)(n * (n + 1) / 2);
    ok(good, "warm-up all_reduce on the device", sharc_status_name(st));
  }
  dev_put(out, poison, sizeof poison);
}

/* ---- --mem cuda ----------------------------------------------------------
 * The device side: two buffers and a sharc stream on a CUDA stream. In a
 * build without CUDA --mem cuda skips (77). */
#ifdef SHARC_HAVE_CUDA
#include <cuda_runtime_api.h>

static struct {
  cudaStream_t cs;
  sharc_stream_t s;
  void *in, *out;
} D;

static int dev_usable(void) {
  int cnt = 0;
  if (cudaGetDeviceCount(&cnt) != cudaSuccess || cnt <= 0) {
    const char *r = getenv("SHARC_RANK");
    if (!r || atoi(r) == 0)
      printf("SKIP: no CUDA device\n");
    return 0;
  }
  return 1;
}

/* Device copies of in (bytes) and of an output poisoned like out. */
static int dev_open(sharc_comm_t comm, size_t bytes, const void *in, void **din,
                    void **dout, sharc_stream_t *s) {
  int lr = 0, cnt = 1;
  sharc_comm_local_rank(comm, &lr);
  cudaGetDeviceCount(&cnt);
  if (cudaSetDevice(lr % cnt) != cudaSuccess ||
      cudaStreamCreateWithFlags(&D.cs, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(&D.in, bytes) != cudaSuccess ||
      cudaMalloc(&D.out, bytes) != cudaSuccess ||
      cudaMemcpy(D.in, in, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemset(D.out, POISON, bytes) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess || /* D.cs does not wait */
      sharc_stream_create_cuda(&D.s, D.cs) != SHARC_OK) {
    printf("mismatch: rank %d: device setup failed: %s\n", rank,
           sharc_last_error());
    return 0;
  }
  *din = D.in;
  *dout = D.out;
  *s = D.s;
  return 1;
}

/* host <- device (after the CUDA stream is idle), or nothing for host. */
static void dev_get(void *host, const void *p, size_t bytes) {
  if (p != D.out)
    return;
  cudaStreamSynchronize(D.cs);
  cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost);
}

static void dev_put(void *p, const void *host, size_t bytes) {
  if (p == D.out) {
    cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize(); /* it may land later; D.cs does not wait */
  }
}

static void dev_close(void) {
  if (!D.s)
    return;
  sharc_stream_destroy(D.s);
  cudaStreamDestroy(D.cs);
  cudaFree(D.in);
  cudaFree(D.out);
}
#else
static int dev_usable(void) {
  const char *r = getenv("SHARC_RANK");
  if (!r || atoi(r) == 0)
    printf("SKIP: built without CUDA\n");
  return 0;
}
static int dev_open(sharc_comm_t comm, size_t bytes, const void *in, void **din,
                    void **dout, sharc_stream_t *s) {
  (void)comm, (void)bytes, (void)in, (void)din, (void)dout, (void)s;
  return 0;
}
static void dev_get(void *host, const void *p, size_t bytes) {
  (void)host, (void)p, (void)bytes;
}
static void dev_put(void *p, const void *host, size_t bytes) {
  (void)p, (void)host, (void)bytes;
}
static void dev_close(void) {}
#endif

static int untouched(const uint8_t *p, size_t bytes) {
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != POISON)
      return 0;
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: sharcrun -n N mismatch "
            "coll|count|dtype|op|root|barrier|rs|reduce|gather|groups|many|"
            "inplace\n");
    return 2;
  }
  cname = argv[1];
  int cuda = argc > 3 && !strcmp(argv[2], "--mem") && !strcmp(argv[3], "cuda");
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (cuda && !dev_usable())
    return 77;
  const char *env = getenv("SHARC_CHECK");
  int checking = env && atoi(env) != 0;
  sharc_comm_t comm;
  if (sharc_comm_init_env(&comm) != SHARC_OK) {
    fprintf(stderr, "mismatch: init failed: %s\n", sharc_last_error());
    return 2;
  }
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &n);
  if (n < 2) {
    fprintf(stderr, "mismatch: needs at least 2 ranks\n");
    sharc_comm_destroy(comm);
    return 2;
  }
  int odd = rank == n - 1; /* the rank that disagrees */
  size_t total = (size_t)COUNT * (size_t)n;
  float *in = malloc(total * sizeof *in);
  uint8_t *out = malloc(total * sizeof(float));
  if (!in || !out) {
    fprintf(stderr, "mismatch: out of memory\n");
    return 2;
  }
  for (size_t i = 0; i < total; i++)
    in[i] = (float)(rank + 1);
  memset(out, POISON, total * sizeof(float));
  /* --mem cuda: the case's buffers in device memory, its calls on a CUDA
   * stream (the direct path on one host), the warm-up's too */
  void *IN = in, *OUT = out;
  sharc_stream_t S = NULL;
  if (cuda && !dev_open(comm, total * sizeof(float), in, &IN, &OUT, &S)) {
    sharc_comm_abort(comm);
    return 2;
  }
  if (cuda)
    warm_up_dev(comm, IN, OUT, S);
  else
    warm_up(comm);

  /* majority / odd-rank group names and signatures, as the library prints
   * them */
  char grp_a[64], grp_b[64], sig_a[96], sig_b[96];
  span(grp_a, sizeof grp_a, 0, n - 2);
  span(grp_b, sizeof grp_b, n - 1, n - 1);
  const char *ar = "all_reduce(count 1024, float, sum)";
  snprintf(sig_a, sizeof sig_a, "%s", ar);
  sharc_status_t st;
  double t0 = now_ms();
  if (!strcmp(cname, "coll")) {
    st = odd ? sharc_all_gather(IN, OUT, 512, SHARC_F32, comm, S)
             : sharc_all_reduce(IN, OUT, COUNT, SHARC_F32, SHARC_SUM, comm, S);
    snprintf(sig_b, sizeof sig_b, "all_gather(count 512, float)");
  } else if (!strcmp(cname, "count")) {
    st = sharc_all_reduce(IN, OUT, odd ? 512 : COUNT, SHARC_F32, SHARC_SUM,
                          comm, S);
    snprintf(sig_b, sizeof sig_b, "all_reduce(count 512, float, sum)");
  } else if (!strcmp(cname, "dtype")) {
    st = sharc_all_reduce(IN, OUT, COUNT, odd ? SHARC_I32 : SHARC_F32,
                          SHARC_SUM, comm, S);
    snprintf(sig_b, sizeof sig_b, "all_reduce(count 1024, int32, sum)");
  } else if (!strcmp(cname, "op")) {
    st = sharc_all_reduce(IN, OUT, COUNT, SHARC_F32,
                          odd ? SHARC_MAX : SHARC_SUM, comm, S);
    snprintf(sig_b, sizeof sig_b, "all_reduce(count 1024, float, max)");
  } else if (!strcmp(cname, "root")) {
    st = sharc_broadcast(IN, OUT, COUNT, SHARC_F32, odd ? 1 : 0, comm, S);
    snprintf(sig_a, sizeof sig_a, "broadcast(count 1024, float, root 0)");
    snprintf(sig_b, sizeof sig_b, "broadcast(count 1024, float, root 1)");
  } else if (!strcmp(cname, "barrier")) {
    st = odd ? sharc_all_reduce(IN, OUT, 1, SHARC_F32, SHARC_SUM, comm, S)
             : sharc_barrier(comm, S);
    snprintf(sig_a, sizeof sig_a, "barrier()");
    snprintf(sig_b, sizeof sig_b, "all_reduce(count 1, float, sum)");
  } else if (!strcmp(cname, "rs")) {
    st = sharc_reduce_scatter(IN, OUT, odd ? 128 : 256, SHARC_F32, SHARC_SUM,
                              comm, S);
    snprintf(sig_a, sizeof sig_a, "reduce_scatter(count 256, float, sum)");
    snprintf(sig_b, sizeof sig_b, "reduce_scatter(count 128, float, sum)");
  } else if (!strcmp(cname, "reduce")) {
    st = sharc_reduce(IN, OUT, COUNT, SHARC_F32, SHARC_SUM, odd ? 1 : 0, comm,
                      S);
    snprintf(sig_a, sizeof sig_a, "reduce(count 1024, float, sum, root 0)");
    snprintf(sig_b, sizeof sig_b, "reduce(count 1024, float, sum, root 1)");
  } else if (!strcmp(cname, "gather")) {
    st = odd ? sharc_scatter(IN, OUT, 512, SHARC_F32, 0, comm, S)
             : sharc_gather(IN, OUT, 512, SHARC_F32, 0, comm, S);
    snprintf(sig_a, sizeof sig_a, "gather(count 512, float, root 0)");
    snprintf(sig_b, sizeof sig_b, "scatter(count 512, float, root 0)");
  } else if (!strcmp(cname, "groups")) {
    st = sharc_all_reduce(IN, OUT, rank % 2 ? 1001 : 1000, SHARC_F32, SHARC_SUM,
                          comm, S);
    parity(grp_a, sizeof grp_a, 0);
    parity(grp_b, sizeof grp_b, 1);
    snprintf(sig_a, sizeof sig_a, "all_reduce(count 1000, float, sum)");
    snprintf(sig_b, sizeof sig_b, "all_reduce(count 1001, float, sum)");
  } else if (!strcmp(cname, "many")) {
    st = sharc_all_reduce(IN, OUT, 1000 + (size_t)rank, SHARC_F32, SHARC_SUM,
                          comm, S);
    span(grp_a, sizeof grp_a, 0, 0);
    span(grp_b, sizeof grp_b, 1, 1);
    snprintf(sig_a, sizeof sig_a, "all_reduce(count 1000, float, sum)");
    snprintf(sig_b, sizeof sig_b, "all_reduce(count 1001, float, sum)");
  } else if (!strcmp(cname, "inplace")) {
    float *buf = (float *)out;
    for (size_t i = 0; i < COUNT; i++)
      buf[i] = (float)(rank + 1);
    dev_put(OUT, buf, COUNT * sizeof(float));
    st = sharc_all_reduce(odd ? (const void *)OUT : (const void *)IN, OUT,
                          COUNT, SHARC_F32, SHARC_SUM, comm, S);
    if (st == SHARC_OK && S)
      st = sharc_stream_synchronize(S);
    dev_get(buf, OUT, COUNT * sizeof(float));
    int good = st == SHARC_OK;
    for (size_t i = 0; i < COUNT && good; i++)
      good = buf[i] == (float)(n * (n + 1) / 2);
    ok(good, "mixed in-place / out-of-place all_reduce is legal",
       sharc_comm_last_error(comm));
    warm_up(comm);
    goto done;
  } else {
    fprintf(stderr, "mismatch: unknown case '%s'\n", cname);
    return 2;
  }
  double ms = now_ms() - t0;
  const char *msg = sharc_comm_last_error(comm);
  char d[800];
  snprintf(d, sizeof d, "%s after %.0f ms: %s", sharc_status_name(st), ms, msg);
  printf("mismatch: rank %d %s: %s\n", rank, cname, d);
  ok(ms < MAX_MS, "reported within 5 s", d);

  if (!checking) { /* the transports' own detection (shm headers) */
    ok(st != SHARC_OK, "fails without SHARC_CHECK", d);
    goto done;
  }
  ok(st == SHARC_ERR_MISMATCH, "status SHARC_ERR_MISMATCH", d);
  ok(strstr(msg, "collective mismatch") != NULL, "message says so", msg);
  char want[400];
  snprintf(want, sizeof want, "%s called %s but %s called %s", grp_a, sig_a,
           grp_b, sig_b);
  ok(strstr(msg, want) != NULL, "message names ranks and signatures", want);
  if (!strcmp(cname, "many") && n > 2) {
    /* every group named, or the ones left out counted; never cut short */
    snprintf(want, sizeof want, "rank %d called all_reduce(count %d,", n - 1,
             1000 + n - 1);
    ok(strstr(msg, want) || strstr(msg, "more signatures)"),
       "every group named or counted", msg);
    ok(msg[strlen(msg) - 1] == ')', "message complete", msg);
  }
  snprintf(want, sizeof want, " #3: ");
  ok(strstr(msg, want) != NULL, "message names collective #3", msg);
  dev_get(out, OUT, total * sizeof(float));
  ok(untouched(out, total * sizeof(float)), "no data moved", NULL);

  /* The comm is failed: the next call returns the same status at once. */
  t0 = now_ms();
  st = sharc_all_reduce(IN, OUT, COUNT, SHARC_F32, SHARC_SUM, comm, S);
  ms = now_ms() - t0;
  snprintf(d, sizeof d, "%s after %.0f ms: %s", sharc_status_name(st), ms,
           sharc_comm_last_error(comm));
  ok(st == SHARC_ERR_MISMATCH && ms < FAST_MS &&
         strstr(sharc_comm_last_error(comm), "collective mismatch"),
     "next call fails fast", d);
done:
  printf("mismatch: rank %d %s: %d passed, %d failed\n", rank, cname, pass,
         fail);
  dev_close();
  sharc_comm_destroy(comm);
  free(in);
  free(out);
  return fail ? 1 : 0;
}

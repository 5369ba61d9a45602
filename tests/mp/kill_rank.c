/*
 * kill_rank.c - a rank dies mid-collective (or mid-setup); every survivor
 * must fail with SHARC_ERR_PEER_LOST and a message naming the dead rank.
 *
 *   sharcrun -n N kill_rank [--coll C] [--at WHEN] K [SECONDS [LINGER]]
 *
 * All ranks loop 1 MiB f32 collectives C (all_reduce, the default,
 * all_gather, reduce_scatter, reduce to rank 0, all_to_all, gather to rank
 * 0 or scatter from rank 0; out of place,
 * checking the result where it lands). Rank K
 * (for publish: K may be "all") fails at WHEN:
 *   run      after SECONDS (default 0.5) of the loop it raises SIGKILL;
 *   publish  the instant its shared-memory segment appears in /dev/shm,
 *            before its peers have mapped it (setup);
 *   unlink   when it would remove its segment's name, every peer having
 *            mapped it (end of setup): the name stays, the survivors must
 *            remove it, and they fail in their first collective;
 *   abort    after SECONDS it calls sharc_comm_abort and exits 0; the others
 *            must fail with SHARC_ERR_ABORTED naming it.
 * publish and unlink replace libc's linkat and unlink in this program (the
 * executable's definitions come first for libsharc too) to stop the rank at
 * that exact point. A survivor lingers LINGER seconds (default 1) after its
 * failure before it exits, so every survivor learns of rank K's failure
 * before it learns of another survivor's exit (which would be a second,
 * legitimate peer loss).
 *
 * --mem cuda: the buffers are device memory and the collectives
 * run on a sharc stream bound to a CUDA stream (sharc_stream_create_cuda);
 * each call is followed by cudaStreamSynchronize and sharc_stream_synchronize,
 * whose status is the call's. A survivor's CUDA stream must not stay blocked
 * behind the failed collective. `kill_rank --probe-cuda` exits 0 when a CUDA
 * device is usable, else prints "SKIP: no CUDA device (why)" and exits 77
 * (kill_test.sh asks before it starts the jobs).
 *
 * Rank K prints "kill_rank: rank K raising SIGKILL ... at T" (T: seconds of
 * the realtime clock) and a survivor "kill_rank: survivor R status S after I
 * C calls (E s) at T: MESSAGE" ("in setup" for I when init failed); it exits
 * 3 when S is the expected status and MESSAGE names "rank K" (any rank for
 * "all"), 4 for any other status or message or for no failure 20 s after
 * SECONDS, 5 for a wrong result, 2 for bad usage or an unexpected init
 * failure. Driven by kill_test.sh.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "names_rank.h"
#include "sharc.h"

#ifdef SHARC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define COUNT (1u << 18) /* f32 elements per rank's output of all_reduce */
#define GIVE_UP_S 20.0   /* no failure this long after SECONDS: exit 4 */

enum at { AT_RUN, AT_PUBLISH, AT_UNLINK, AT_ABORT };
enum coll {
  C_ALL_REDUCE,
  C_ALL_GATHER,
  C_REDUCE_SCATTER,
  C_REDUCE,
  C_ALL_TO_ALL,
  C_GATHER,
  C_SCATTER,
  C_SEND_RECV,   /* all_to_all's data by grouped sharc_send/sharc_recv */
  C_ALL_TO_ALLV, /* all_to_all's data by sharc_all_to_allv */
  C_NCOLL
};
static const char *const coll_names[C_NCOLL] = {
    "all_reduce", "all_gather", "reduce_scatter", "reduce",     "all_to_all",
    "gather",     "scatter",    "send_recv",      "all_to_allv"};

static enum at at = AT_RUN;
static int victim;  /* this process fails at `at` */
static int my_rank; /* from SHARC_RANK: known before init */

static double now_s(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *when) {
  printf("kill_rank: rank %d raising SIGKILL %s at %.3f\n", my_rank, when,
         now_s(CLOCK_REALTIME));
  fflush(stdout);
  raise(SIGKILL);
}

/* ---- fault injection in the shm transport's setup ---- */

#define EXPORTED __attribute__((visibility("default")))

/* The segment is linked into /dev/shm once it is complete (shm_seg.c). */
EXPORTED int linkat(int olddirfd, const char *oldpath, int newdirfd,
                    const char *newpath, int flags) {
  long r = syscall(SYS_linkat, olddirfd, oldpath, newdirfd, newpath, flags);
  if (r == 0 && victim && at == AT_PUBLISH && strstr(newpath, "/sharc-"))
    die("with its segment published");
  return (int)r;
}

/* The owner removes its segment's name once every local peer mapped it. */
EXPORTED int unlink(const char *path) {
  char own[24];
  int len = snprintf(own, sizeof own, "-%d", my_rank);
  size_t pl = strlen(path);
  if (victim && at == AT_UNLINK && strstr(path, "/sharc-") &&
      pl > (size_t)len && strcmp(path + pl - (size_t)len, own) == 0)
    die("instead of removing its segment's name");
  return (int)syscall(SYS_unlinkat, AT_FDCWD, path, 0);
}

/* ---- the loop ---- */

static int usage(void) {
  fprintf(stderr, "usage: sharcrun -n N kill_rank [--coll all_reduce|"
                  "all_gather|reduce_scatter|reduce|all_to_all|gather|scatter|"
                  "send_recv|all_to_allv] "
                  "[--at run|publish|unlink|abort] "
                  "[--mem host|cuda] K [SECONDS [LINGER]]\n"
                  "       kill_rank --probe-cuda\n");
  return 2;
}

/* ---- buffers: host memory, or device memory on a CUDA stream ---- */

static int on_device;              /* --mem cuda */
static sharc_stream_t dev_sstream; /* the sharc stream on cuda_stream */

#ifdef SHARC_HAVE_CUDA
static cudaStream_t cuda_stream;

/* 1 if a CUDA device is usable; else 0 with the reason in why. */
static int cuda_usable(char *why, size_t n) {
  int cnt = 0;
  cudaError_t e = cudaGetDeviceCount(&cnt);
  if (e != cudaSuccess)
    snprintf(why, n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
  else if (cnt <= 0)
    snprintf(why, n, "cudaGetDeviceCount found no device");
  return e == cudaSuccess && cnt > 0;
}

/* The rank's device, its CUDA stream and the sharc stream on it. */
static int dev_open(sharc_comm_t comm) {
  int lr = 0, ndev = 1;
  sharc_comm_local_rank(comm, &lr);
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e == cudaSuccess)
    e = cudaSetDevice(lr % ndev);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithFlags(&cuda_stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    printf("kill_rank: CUDA setup: %s\n", cudaGetErrorString(e));
    return 0;
  }
  sharc_status_t st = sharc_stream_create_cuda(&dev_sstream, cuda_stream);
  if (st != SHARC_OK)
    printf("kill_rank: sharc_stream_create_cuda: %s: %s\n",
           sharc_status_name(st), sharc_last_error());
  return st == SHARC_OK;
}

static float *buf_alloc(size_t n) {
  void *p = NULL;
  if (!on_device)
    return malloc(n * sizeof(float));
  return cudaMalloc(&p, n * sizeof(float)) == cudaSuccess ? p : NULL;
}

static void buf_free(float *p) {
  if (on_device)
    cudaFree(p);
  else
    free(p);
}

/* b[i] = v (the CUDA stream orders it before the next collective). */
static void buf_set(float *b, size_t i, float v) {
  if (on_device)
    cudaMemcpyAsync(b + i, &v, sizeof v, cudaMemcpyHostToDevice, cuda_stream);
  else
    b[i] = v;
}

/* *dst = b[i], for a device buffer once the CUDA stream got there (*dst
 * must stay valid until dev_finish). */
static void buf_get(const float *b, size_t i, float *dst) {
  if (on_device)
    cudaMemcpyAsync(dst, b + i, sizeof *dst, cudaMemcpyDeviceToHost,
                    cuda_stream);
  else
    *dst = b[i];
}

/* After a call on the CUDA stream: waits for it (it must not stay blocked
 * when the collective failed) and returns the collective's status. */
static sharc_status_t dev_finish(sharc_status_t st) {
  cudaError_t e = cudaStreamSynchronize(cuda_stream);
  if (e != cudaSuccess)
    printf("kill_rank: cudaStreamSynchronize: %s\n", cudaGetErrorString(e));
  sharc_status_t sst = sharc_stream_synchronize(dev_sstream);
  return st != SHARC_OK ? st : sst;
}

static void dev_close(void) {
  if (dev_sstream)
    sharc_stream_destroy(dev_sstream);
  if (cuda_stream)
    cudaStreamDestroy(cuda_stream);
}
#else /* built without CUDA: --mem cuda skips */
static int cuda_usable(char *why, size_t n) {
  snprintf(why, n, "sharc and its tests were built without CUDA");
  return 0;
}
static int dev_open(sharc_comm_t comm) {
  (void)comm;
  return 0;
}
static float *buf_alloc(size_t n) { return malloc(n * sizeof(float)); }
static void buf_free(float *p) { free(p); }
static void buf_set(float *b, size_t i, float v) { b[i] = v; }
static void buf_get(const float *b, size_t i, float *dst) { *dst = b[i]; }
static sharc_status_t dev_finish(sharc_status_t st) { return st; }
static void dev_close(void) {}
#endif

/* One collective; 1 if the result is right. */
static int step(enum coll c, const float *in, float *out, size_t per, int n,
                sharc_comm_t comm, sharc_status_t *st) {
  size_t total = c == C_ALL_REDUCE || c == C_REDUCE ? COUNT : per * (size_t)n;
  size_t outn = c == C_REDUCE_SCATTER || c == C_SCATTER ? per : total;
  sharc_stream_t s = on_device ? dev_sstream : NULL;
  buf_set(out, 0, -1.0f);
  buf_set(out, outn - 1, -1.0f);
  if (c == C_ALL_REDUCE)
    *st = sharc_all_reduce(in, out, COUNT, SHARC_F32, SHARC_SUM, comm, s);
  else if (c == C_ALL_GATHER)
    *st = sharc_all_gather(in, out, per, SHARC_F32, comm, s);
  else if (c == C_REDUCE_SCATTER)
    *st = sharc_reduce_scatter(in, out, per, SHARC_F32, SHARC_SUM, comm, s);
  else if (c == C_REDUCE)
    *st = sharc_reduce(in, out, COUNT, SHARC_F32, SHARC_SUM, 0, comm, s);
  else if (c == C_GATHER)
    *st = sharc_gather(in, out, per, SHARC_F32, 0, comm, s);
  else if (c == C_SCATTER)
    *st = sharc_scatter(in, out, per, SHARC_F32, 0, comm, s);
  else if (c == C_SEND_RECV) {
    sharc_group_start();
    for (int p = 0; p < n; p++) {
      sharc_send(in + (size_t)p * per, per, SHARC_F32, p, comm, s);
      sharc_recv(out + (size_t)p * per, per, SHARC_F32, p, comm, s);
    }
    *st = sharc_group_end();
  } else if (c == C_ALL_TO_ALLV) {
    size_t *cnt = malloc(2 * (size_t)n * sizeof *cnt);
    if (!cnt) {
      *st = SHARC_ERR_NO_MEM;
      return 0;
    }
    for (int p = 0; p < n; p++) {
      cnt[p] = per;
      cnt[n + p] = (size_t)p * per;
    }
    *st = sharc_all_to_allv(in, cnt, cnt + n, out, cnt, cnt + n, SHARC_F32,
                            comm, s);
    free(cnt);
  } else
    *st = sharc_all_to_all(in, out, per, SHARC_F32, comm, s);
  /* reduce, gather: the root's result */
  int checked = (c != C_REDUCE && c != C_GATHER) || my_rank == 0;
  float got[2] = {-2.0f, -2.0f};
  if (*st == SHARC_OK) {
    buf_get(out, 0, &got[0]);
    buf_get(out, outn - 1, &got[1]);
  }
  if (on_device)
    *st = dev_finish(*st);
  if (*st != SHARC_OK || !checked)
    return 1;
  /* all_gather, all_to_all, gather: block r holds r + 1 (rank r's value);
   * scatter: rank r gets the root's block r, r + 1; the reductions: n
   * everywhere. */
  int blocks = c == C_ALL_GATHER || c == C_ALL_TO_ALL || c == C_GATHER ||
               c == C_SEND_RECV || c == C_ALL_TO_ALLV;
  float first = blocks           ? 1.0f
                : c == C_SCATTER ? (float)(my_rank + 1)
                                 : (float)n;
  float last = c == C_SCATTER ? first : (float)n;
  return got[0] == first && got[1] == last;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  enum coll coll = C_ALL_REDUCE;
  int i = 1;
  if (argc == 2 && !strcmp(argv[1], "--probe-cuda")) {
    char why[160] = "";
    if (cuda_usable(why, sizeof why))
      return 0;
    printf("SKIP: no CUDA device (%s)\n", why);
    return 77;
  }
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(argv[i], "--coll")) {
      int c = 0;
      while (c < C_NCOLL && strcmp(v, coll_names[c]))
        c++;
      if (c == C_NCOLL)
        return usage();
      coll = (enum coll)c;
    } else if (!strcmp(argv[i], "--at")) {
      static const char *const ats[] = {"run", "publish", "unlink", "abort"};
      int a = 0;
      while (a < 4 && strcmp(v, ats[a]))
        a++;
      if (a == 4)
        return usage();
      at = (enum at)a;
    } else if (!strcmp(argv[i], "--mem")) {
      if (strcmp(v, "host") && strcmp(v, "cuda"))
        return usage();
      on_device = !strcmp(v, "cuda");
    } else {
      return usage();
    }
    i++;
  }
  if (argc - i < 1 || argc - i > 3)
    return usage();
  int all = !strcmp(argv[i], "all");
  int k = all ? -1 : atoi(argv[i]);
  double delay = argc - i > 1 ? atof(argv[i + 1]) : 0.5,
         linger = argc - i > 2 ? atof(argv[i + 2]) : 1.0;
  if (all && at != AT_PUBLISH)
    return usage();
  const char *env_rank = getenv("SHARC_RANK");
  my_rank = env_rank ? atoi(env_rank) : -1;
  victim = all || my_rank == k;

  sharc_comm_t comm = NULL;
  int rank = my_rank, n = 0;
  long iters = 0;
  double t0 = now_s(CLOCK_MONOTONIC);
  char done[64];
  sharc_status_t st = sharc_comm_init_env(&comm);
  const char *msg = NULL;
  float *in = NULL, *out = NULL;
  if (st != SHARC_OK) {
    /* Expected only when a rank died in setup. */
    if (at != AT_PUBLISH) {
      printf("kill_rank: sharc_comm_init_env: %s: %s\n", sharc_status_name(st),
             sharc_last_error());
      return 2;
    }
    msg = sharc_last_error();
    snprintf(done, sizeof done, "in setup");
  } else {
    sharc_comm_rank(comm, &rank);
    sharc_comm_size(comm, &n);
    if (k < -1 || k >= n) {
      printf("kill_rank: rank to kill %d is outside 0..%d\n", k, n - 1);
      sharc_comm_destroy(comm);
      return 2;
    }
    if (on_device && !dev_open(comm)) {
      sharc_comm_abort(comm);
      return 2;
    }
    size_t per = COUNT / (size_t)n; /* all_gather in, reduce_scatter out */
    size_t inn = coll == C_ALL_REDUCE || coll == C_REDUCE   ? COUNT
                 : coll == C_ALL_GATHER || coll == C_GATHER ? per
                                                            : per * (size_t)n;
    float *fill = malloc(inn * sizeof *fill);
    in = buf_alloc(inn);
    out = buf_alloc(COUNT);
    if (!fill || !in || !out)
      return 2;
    for (size_t j = 0; j < inn; j++)
      fill[j] = coll == C_ALL_GATHER || coll == C_ALL_TO_ALL ||
                        coll == C_GATHER || coll == C_SEND_RECV ||
                        coll == C_ALL_TO_ALLV
                    ? (float)(rank + 1)
                : coll == C_SCATTER ? (float)(j / per + 1) /* block b: b + 1 */
                                    : 1.0f;
#ifdef SHARC_HAVE_CUDA
    /* the copy may land after cudaMemcpy returned, and the non-blocking
     * CUDA stream does not wait for it: synchronise */
    if (on_device && (cudaMemcpy(in, fill, inn * sizeof *fill,
                                 cudaMemcpyHostToDevice) != cudaSuccess ||
                      cudaDeviceSynchronize() != cudaSuccess))
      return 2;
#endif
    if (!on_device)
      memcpy(in, fill, inn * sizeof *fill);
    free(fill);
    for (;;) {
      if (rank == k && (at == AT_RUN || at == AT_ABORT) &&
          now_s(CLOCK_MONOTONIC) - t0 >= delay) {
        char when[64];
        snprintf(when, sizeof when, "after %ld %s calls", iters,
                 coll_names[coll]);
        if (at == AT_RUN)
          die(when);
        printf("kill_rank: rank %d calling sharc_comm_abort %s at %.3f\n", rank,
               when, now_s(CLOCK_REALTIME));
        sharc_comm_abort(comm);
        buf_free(in);
        buf_free(out);
        return 0;
      }
      if (now_s(CLOCK_MONOTONIC) - t0 > delay + GIVE_UP_S) {
        /* publish/unlink where the shm transport never got there (tcp,
         * one rank per host): say so rather than loop on. */
        printf("kill_rank: rank %d: no failure after %.0f s of %s calls\n",
               rank, delay + GIVE_UP_S, coll_names[coll]);
        sharc_comm_destroy(comm);
        return 4;
      }
      if (!step(coll, in, out, per, n, comm, &st)) {
        printf("kill_rank: rank %d: wrong %s result after %ld calls\n", rank,
               coll_names[coll], iters);
        return 5;
      }
      if (st != SHARC_OK)
        break;
      iters++;
    }
    msg = sharc_comm_last_error(comm);
    snprintf(done, sizeof done, "after %ld %s calls", iters, coll_names[coll]);
  }

  sharc_status_t want =
      at == AT_ABORT ? SHARC_ERR_ABORTED : SHARC_ERR_PEER_LOST;
  int good = st == want && msg && (all || names_rank(msg, k));
  printf("kill_rank: survivor %d status %s %s (%.2f s) at %.3f: %s\n", rank,
         sharc_status_name(st), done, now_s(CLOCK_MONOTONIC) - t0,
         now_s(CLOCK_REALTIME), msg ? msg : "(null)");
  if (!good)
    printf("kill_rank: survivor %d: unexpected; wanted %s naming rank %d\n",
           rank, sharc_status_name(want), k);
  if (comm) {
    /* Later calls on the broken communicator must fail too, not hang. */
    step(coll, in, out, COUNT / (size_t)n, n, comm, &st);
    if (st == SHARC_OK) {
      printf("kill_rank: survivor %d: %s succeeded on a broken "
             "communicator\n",
             rank, coll_names[coll]);
      good = 0;
    }
  }
  struct timespec ts = {(time_t)linger, (long)((linger - (long)linger) * 1e9)};
  nanosleep(&ts, NULL);
  sharc_comm_abort(comm);
  dev_close();
  buf_free(in);
  buf_free(out);
  return good ? 3 : 4;
}

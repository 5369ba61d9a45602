/*
 * bench_limits.c - the physical limits sharc-bench prints beside its
 * numbers: this host's memcpy rate (one core alone, then every rank at
 * once) and the loopback TCP stream rate.
 *
 * Bus bandwidth bounds on one host (S bytes per operation, n ranks, C the
 * aggregate copy rate of all ranks copying at once): in-place all-gather,
 * reduce-scatter and all-reduce must copy (n-1)S (all-reduce 2(n-1)S)
 * bytes in total, so busbw <= C/n; out-of-place all-gather also copies
 * each rank's own block into its output, nS in total, so busbw <=
 * C(n-1)/n^2 (half of C/n at 2 ranks); broadcast copies (n-1)S with
 * factor 1 in place, so busbw <= C/(n-1), and nS out of place (the root's
 * own copy), busbw <= C/n; reduce is its mirror image ((n-1)S into the
 * root, plus the root's own S out of place), with the same bounds. Gather
 * and scatter (S the root's nranks*count bytes, factor (n-1)/n) move
 * (n-1)S/n in place (the root's block stays) and S out of place, so
 * busbw <= C and C(n-1)/n. All-to-all (S per rank, factor (n-1)/n) moves
 * (n-1)S in place and nS out of place (each rank's own block too), the
 * bounds of all-gather: C/n and C(n-1)/n^2. Send-recv (S the bytes each
 * rank sends, factor 1, out of place only) copies S per rank, nS in
 * total, so busbw <= C/n (its in-place column is N/A: no in-place bound
 * is printed). Those are zero-copy bounds (each byte copied once, as with
 * sharc_mem_alloc buffers); staging through FIFOs copies twice and halves
 * them. Over TCP the bound is the stream
 * rate of one connection (as the issue states it); a 2-rank exchange runs a
 * stream each way at once on the same cores, so the rate of one of two
 * simultaneous streams is printed too.
 *
 * Device memory (--mem cuda) on one GPU: the same copy bounds with C the
 * GPU's device-to-device copy rate, measured by one rank while the others
 * wait; the ranks sharing the GPU share that rate, so all-gather in place
 * is bounded by C/n (the "copy rate divided by the rank count").
 * For reduce-scatter, all-reduce and reduce the copy rate is a loose bound: a
 * reduction reads two inputs per output, so it moves more bytes than the
 * copy (C/n stays an upper bound, not a target). sharc's staged path
 * crosses PCIe to host memory and back on top, so it stays far below. With
 * ranks on several GPUs (or hosts) the bound depends on the links between
 * them, which the bench does not measure: none is printed.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"

#define COPY_BYTES (128u << 20) /* 4x a 32 MiB L3: memory, not cache */

/* Best of 5 memcpy rates (GB/s); -1 when memory is short. With sync, every
 * rank copies at once and the result is the aggregate: on one host, the
 * slowest rank's rate times the ranks, so ranks that share a core (more
 * ranks than cores) are not counted as if each had one (a rank that ran
 * first, alone, would report a core's full rate); across hosts, the mean
 * rank's rate times ranks per host. Best of 5: on a shared machine other
 * work only ever lowers a sample. */
static double copy_rate(backend_t *b, int sync) {
  char *src = malloc(COPY_BYTES), *dst = malloc(COPY_BYTES);
  double best = -1;
  int ok = src && dst;
  if (ok) {
    memset(src, 1, COPY_BYTES);
    memset(dst, 2, COPY_BYTES);
  }
  if (sync) { /* every rank runs the collectives, even without memory */
    double v = ok ? 1 : 0;
    bench_allreduce_f64(b, &v, 2); /* min */
    ok = v > 0;
  }
  for (int k = 0; ok && k < 5; k++) {
    if (sync)
      b->barrier(b);
    double t0 = bench_now();
    memcpy(dst, src, COPY_BYTES);
    double r = COPY_BYTES / (bench_now() - t0) / 1e9;
    if (sync && b->nhosts == 1) {
      bench_allreduce_f64(b, &r, 2); /* the slowest rank's */
      r *= b->nranks;
    } else if (sync) {
      bench_allreduce_f64(b, &r, 1); /* mean */
      r = r * b->nranks / (b->nhosts > 0 ? b->nhosts : 1);
    }
    if (r > best)
      best = r;
  }
  free(src);
  free(dst);
  return best;
}

typedef struct {
  int tx, rx; /* the two ends of one loopback connection */
  double until;
  size_t got;
  double secs;
} stream_t;

static void *send_loop(void *arg) {
  stream_t *s = arg;
  size_t n = 1u << 20;
  char *buf = calloc(1, n);
  while (buf && bench_now() < s->until)
    if (send(s->tx, buf, n, MSG_NOSIGNAL) < 0)
      break;
  free(buf);
  shutdown(s->tx, SHUT_WR);
  return NULL;
}

static void *recv_loop(void *arg) {
  stream_t *s = arg;
  size_t n = 1u << 20;
  char *buf = malloc(n);
  double t0 = bench_now();
  ssize_t got;
  while (buf && (got = recv(s->rx, buf, n, 0)) > 0)
    s->got += (size_t)got;
  s->secs = bench_now() - t0;
  free(buf);
  return NULL;
}

/* A connected pair over 127.0.0.1; 0 on success. */
static int loop_pair(int *tx, int *rx) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  *tx = *rx = -1;
  if (ls >= 0 && !bind(ls, (struct sockaddr *)&a, sizeof a) && !listen(ls, 1) &&
      !getsockname(ls, (struct sockaddr *)&a, &al) &&
      (*tx = socket(AF_INET, SOCK_STREAM, 0)) >= 0 &&
      !connect(*tx, (struct sockaddr *)&a, sizeof a))
    *rx = accept(ls, NULL, NULL);
  if (ls >= 0)
    close(ls);
  if (*rx >= 0)
    return 0;
  if (*tx >= 0)
    close(*tx);
  return -1;
}

/* n TCP streams over 127.0.0.1 at once for about half a second, each with
 * its own sending and receiving thread; the rate of one stream (GB/s). One
 * stream is the bound the issue names; two at once is what a 2-rank
 * exchange runs (each rank sends and receives), on the same cores. */
static double tcp_rate(int n) {
  stream_t s[2] = {0};
  pthread_t ts[2], tr[2];
  int ok = 0;
  double until = bench_now() + 0.5;
  for (; ok < n; ok++) {
    s[ok].until = until;
    if (loop_pair(&s[ok].tx, &s[ok].rx))
      break;
    if (pthread_create(&ts[ok], NULL, send_loop, &s[ok])) {
      close(s[ok].tx);
      close(s[ok].rx);
      break;
    }
    if (pthread_create(&tr[ok], NULL, recv_loop, &s[ok])) {
      shutdown(s[ok].rx, SHUT_RDWR); /* ends the sender */
      pthread_join(ts[ok], NULL);
      close(s[ok].tx);
      close(s[ok].rx);
      break;
    }
  }
  double total = 0, secs = 0;
  for (int i = 0; i < ok; i++) {
    pthread_join(ts[i], NULL);
    pthread_join(tr[i], NULL);
    total += (double)s[i].got;
    secs = s[i].secs > secs ? s[i].secs : secs;
    close(s[i].tx);
    close(s[i].rx);
  }
  return ok == n && secs > 0 ? total / secs / n / 1e9 : 0;
}

void limits_measure(backend_t *b, limits_t *l, int cuda) {
  memset(l, 0, sizeof *l);
  l->cuda = cuda;
  if (cuda) {
    double dmin = bench_cuda_device(), dmax = dmin;
    bench_allreduce_f64(b, &dmin, 2);
    bench_allreduce_f64(b, &dmax, 3);
    l->one_gpu = b->nhosts == 1 && dmin == dmax;
    b->barrier(b); /* rank 0 alone on the GPU */
    if (b->rank == 0)
      l->d2d = bench_cuda_d2d_rate();
    if (b->rank == 0 && l->d2d <= 0)
      fprintf(stderr, "sharc-bench: %s\n", bench_cuda_error());
    bench_allreduce_f64(b, &l->d2d, 0);
  }
  b->barrier(b);
  if (b->rank == 0) {
    l->copy1 = copy_rate(b, 0);
    for (int k = 0; k < 2; k++) { /* best of 2: it varies from run to run */
      double one = tcp_rate(1), two = tcp_rate(2);
      l->tcp = one > l->tcp ? one : l->tcp;
      l->tcp2 = two > l->tcp2 ? two : l->tcp2;
    }
  }
  b->barrier(b);
  l->copy_all = copy_rate(b, 1); /* the same on every rank */
  bench_allreduce_f64(b, &l->copy1, 0);
  bench_allreduce_f64(b, &l->tcp, 0);
  bench_allreduce_f64(b, &l->tcp2, 0);
}

/* The share of the copy rate C that bounds busbw (see the top of this
 * file), with its formula as printed. */
typedef enum { SH_N2, SH_N, SH_N1, SH_NN, SH_ONE } share_t;

static share_t share_of(coll_t c, int inplace) {
  switch (c) {
  case C_AG:
  case C_AA:
    return inplace ? SH_N : SH_N2;
  case C_SR: /* each rank's S copied once; out of place only */
    return SH_N;
  case C_BC:
  case C_RD:
    return inplace ? SH_N1 : SH_N;
  case C_GA:
  case C_SC:
    return inplace ? SH_ONE : SH_NN;
  default: /* reduce-scatter, all-reduce */
    return SH_N;
  }
}

double limits_busbw(const limits_t *l, coll_t c, int nranks, int nhosts,
                    int inplace, const char **what) {
  static const char *const formula[] = {[SH_N2] = " x (n-1) / n^2",
                                        [SH_N] = " / n",
                                        [SH_N1] = " / (n-1)",
                                        [SH_NN] = " x (n-1) / n",
                                        [SH_ONE] = ""};
  static char buf[2][160]; /* one per placement: both are printed at once */
  const char *tp = getenv("SHARC_TRANSPORT");
  double n = nranks, rate;
  share_t sh = share_of(c, inplace);
  char *w = buf[inplace != 0];
  *what = "";
  if (nranks < 2 || nhosts > 1)
    return 0;
  if (l->cuda) {
    if (!l->one_gpu || l->d2d <= 0)
      return 0;
    snprintf(w, sizeof buf[0], "GPU D2D copy rate%s, ranks share one GPU%s",
             formula[sh],
             bench_coll_reduces(c) ? "; a reduction moves more than a copy: "
                                     "loose"
                                   : "");
    rate = l->d2d;
  } else if (tp && !strcmp(tp, "tcp")) {
    *what = "loopback TCP, one stream";
    return l->tcp;
  } else {
    snprintf(w, sizeof buf[0], "copy rate of all ranks%s", formula[sh]);
    rate = l->copy_all;
  }
  *what = w;
  switch (sh) {
  case SH_N2:
    return rate * (n - 1) / (n * n);
  case SH_N:
    return rate / n;
  case SH_N1:
    return rate / (n - 1);
  case SH_NN:
    return rate * (n - 1) / n;
  default:
    return rate;
  }
}

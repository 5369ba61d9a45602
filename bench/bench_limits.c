/*
 * bench_limits.c - the physical limits sharc-bench prints beside its
 * numbers: this host's memcpy rate (one core alone, then every rank at
 * once) and the loopback TCP stream rate.
 *
 * Bus bandwidth bounds on one host (S bytes per operation, n ranks, C the
 * aggregate copy rate of all ranks copying at once): all-gather,
 * reduce-scatter and all-reduce must copy (n-1)S (all-reduce 2(n-1)S)
 * bytes in total, so busbw <= C/n; broadcast copies (n-1)S with factor 1,
 * so busbw <= C/(n-1). That is the zero-copy bound (each byte copied once,
 * as with sharc_mem_alloc buffers); staging through FIFOs copies twice and
 * halves it. Over TCP the bound is the stream rate of one connection.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"

#define COPY_BYTES (128u << 20) /* 4x a 32 MiB L3: memory, not cache */

/* Best of 3 memcpy rates (GB/s); -1 when memory is short. With sync, every
 * rank copies at once and the result is the aggregate: on one host, all
 * ranks' bytes over the span from the first start to the last end
 * (CLOCK_MONOTONIC is one clock per host), so ranks that share a core
 * (more ranks than cores) are not counted as if each had one; across hosts,
 * the mean rank's rate times ranks per host. */
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
  for (int k = 0; ok && k < 3; k++) {
    if (sync)
      b->barrier(b);
    double t0 = bench_now();
    memcpy(dst, src, COPY_BYTES);
    double t1 = bench_now(), r = COPY_BYTES / (t1 - t0) / 1e9;
    if (sync && b->nhosts == 1) {
      bench_allreduce_f64(b, &t0, 2); /* first start */
      bench_allreduce_f64(b, &t1, 3); /* last end */
      r = (double)COPY_BYTES * b->nranks / (t1 - t0) / 1e9;
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
  int fd;
  double until;
} sender_t;

static void *send_loop(void *arg) {
  sender_t *s = arg;
  size_t n = 1u << 20;
  char *buf = calloc(1, n);
  while (buf && bench_now() < s->until)
    if (send(s->fd, buf, n, MSG_NOSIGNAL) < 0)
      break;
  free(buf);
  shutdown(s->fd, SHUT_WR);
  return NULL;
}

/* One TCP stream over 127.0.0.1 for about half a second (GB/s). */
static double tcp_rate(void) {
  int ls = socket(AF_INET, SOCK_STREAM, 0), cs = -1, as = -1;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  double rate = 0;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
      getsockname(ls, (struct sockaddr *)&a, &al))
    goto out;
  cs = socket(AF_INET, SOCK_STREAM, 0);
  if (cs < 0 || connect(cs, (struct sockaddr *)&a, sizeof a))
    goto out;
  as = accept(ls, NULL, NULL);
  if (as < 0)
    goto out;
  sender_t s = {cs, bench_now() + 0.5};
  pthread_t t;
  if (pthread_create(&t, NULL, send_loop, &s))
    goto out;
  size_t n = 1u << 20, total = 0;
  char *buf = malloc(n);
  double t0 = bench_now();
  ssize_t got;
  while (buf && (got = recv(as, buf, n, 0)) > 0)
    total += (size_t)got;
  rate = (double)total / (bench_now() - t0) / 1e9;
  pthread_join(t, NULL);
  free(buf);
out:
  if (as >= 0)
    close(as);
  if (cs >= 0)
    close(cs);
  if (ls >= 0)
    close(ls);
  return rate;
}

void limits_measure(backend_t *b, limits_t *l) {
  memset(l, 0, sizeof *l);
  b->barrier(b);
  if (b->rank == 0) {
    l->copy1 = copy_rate(b, 0);
    l->tcp = tcp_rate();
  }
  b->barrier(b);
  l->copy_all = copy_rate(b, 1); /* the same on every rank */
  bench_allreduce_f64(b, &l->copy1, 0);
  bench_allreduce_f64(b, &l->tcp, 0);
}

double limits_busbw(const limits_t *l, coll_t c, int nranks, int nhosts,
                    const char **what) {
  const char *tp = getenv("SHARC_TRANSPORT");
  *what = "";
  if (nranks < 2 || nhosts > 1)
    return 0;
  if (tp && !strcmp(tp, "tcp")) {
    *what = "loopback TCP, one stream";
    return l->tcp;
  }
  if (c == C_BC) {
    *what = "copy rate of all ranks / (n-1)";
    return l->copy_all / (nranks - 1);
  }
  *what = "copy rate of all ranks / n";
  return l->copy_all / nranks;
}

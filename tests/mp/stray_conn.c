/*
 * stray_conn.c - the job under stray_test.sh: rank 1 arrives late so the
 * script can connect stray sockets to the rendezvous port while init is in
 * progress; the job must still form and compute correctly.
 *
 *   sharcrun -n N --port P stray_conn [DELAY_MS]
 *
 * Rank 1 sleeps DELAY_MS (default 1000) before sharc_comm_init_env. Then
 * every rank checks an all-reduce and a barrier, prints "stray_conn: rank R
 * ok" and exits 0; 1 on a wrong result, 2 when init failed.
 *
 *   stray_conn --stray KIND HOST PORT
 *
 * is one stray client instead (no sharc calls): it connects, sends KIND and
 * waits for the root to close the connection. KIND: "truncated" (a valid
 * header and half a hello, then it closes its side), "oversize" (a hello
 * header announcing 4 GiB - 16 bytes, then 4 KiB), "version" (a header of
 * protocol version 99), "token" (a complete, well-formed hello with a
 * wrong job token) or "random" (4 KiB of random bytes). Prints
 * "stray_conn: stray KIND rejected after N ms" and exits 0 when the root
 * closed the connection within 10 s; 1 when it did not (or answered),
 * 2 when the connection failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap_wire.h" /* the wire layout only: no internal calls */
#include "sharc.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void fill_random(uint8_t *p, size_t n) {
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f || fread(p, 1, n, f) != n)
    for (size_t i = 0; i < n; i++)
      p[i] = (uint8_t)rand();
  if (f)
    fclose(f);
}

static int stray(const char *kind, const char *host, int port) {
  static uint8_t msg[WIRE_HELLO_BYTES + 4096];
  size_t n = 0;
  int half_close = 0;
  wire_hdr_t h = {WIRE_MAGIC, WIRE_VERSION, MSG_HELLO, sizeof(wire_hello_t)};
  wire_hello_t hello;
  memset(&hello, 0, sizeof hello);
  memset(msg, 0, sizeof msg);
  if (!strcmp(kind, "truncated")) {
    memcpy(msg, &h, sizeof h);
    n = sizeof h + sizeof hello / 2;
    half_close = 1;
  } else if (!strcmp(kind, "oversize")) {
    h.len = 0xfffffff0u;
    memcpy(msg, &h, sizeof h);
    n = sizeof h + 4096;
  } else if (!strcmp(kind, "version")) {
    h.version = 99;
    memcpy(msg, &h, sizeof h);
    n = sizeof h;
  } else if (!strcmp(kind, "token")) {
    /* Everything right but the token (a random one). */
    struct sockaddr_in *sa = (struct sockaddr_in *)&hello.info.addr.sa;
    fill_random(hello.token, sizeof hello.token);
    hello.nranks = 4;
    hello.info.rank = 1;
    hello.info.pid = (int32_t)getpid();
    snprintf(hello.info.host, sizeof hello.info.host, "stray");
    sa->sin_family = AF_INET;
    sa->sin_port = htons(1);
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    hello.info.addr.len = sizeof *sa;
    memcpy(msg, &h, sizeof h);
    memcpy(msg + sizeof h, &hello, sizeof hello);
    n = WIRE_HELLO_BYTES;
  } else if (!strcmp(kind, "random")) {
    fill_random(msg, 4096);
    n = 4096;
  } else {
    fprintf(stderr, "stray_conn: unknown stray kind '%s'\n", kind);
    return 2;
  }
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
      connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
    printf("stray_conn: stray %s: cannot connect to %s:%d\n", kind, host, port);
    return 2;
  }
  double t0 = now_ms();
  /* The root may close as soon as it has seen enough: a failed send is
   * part of being rejected. */
  for (size_t o = 0; o < n;) {
    ssize_t k = send(s, msg + o, n - o, MSG_NOSIGNAL);
    if (k <= 0)
      break;
    o += (size_t)k;
  }
  if (half_close)
    shutdown(s, SHUT_WR);
  struct timeval tv = {10, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char b;
  ssize_t k = recv(s, &b, 1, 0);
  double ms = now_ms() - t0;
  close(s);
  if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
    printf("stray_conn: stray %s rejected after %.0f ms\n", kind, ms);
    return 0;
  }
  printf("stray_conn: stray %s: the root %s\n", kind,
         k > 0 ? "answered a stranger" : "kept the connection open 10 s");
  return 1;
}

int main(int argc, char **argv) {
  enum { CNT = 1000 };
  if (argc == 5 && !strcmp(argv[1], "--stray"))
    return stray(argv[2], argv[3], atoi(argv[4]));
  sharc_comm_t comm;
  int rank = -1, n = 0, bad = 0;
  long delay_ms = argc > 1 ? atol(argv[1]) : 1000;
  const char *er = getenv("SHARC_RANK");
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (er && atoi(er) == 1) {
    printf("stray_conn: rank 1 sleeping %ld ms before init\n", delay_ms);
    struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    printf("stray_conn: rank 1 calling init\n");
  }
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    printf("stray_conn: init failed: %s: %s\n", sharc_status_name(st),
           sharc_last_error());
    return 2;
  }
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &n);
  int32_t v[CNT];
  for (int i = 0; i < CNT; i++)
    v[i] = rank + 1 + i;
  st = sharc_all_reduce(v, v, CNT, SHARC_I32, SHARC_SUM, comm, NULL);
  for (int i = 0; st == SHARC_OK && i < CNT; i++)
    bad += v[i] != n * (n + 1) / 2 + n * i;
  if (st == SHARC_OK)
    st = sharc_barrier(comm, NULL);
  if (st != SHARC_OK || bad) {
    printf("stray_conn: rank %d: %s, %d wrong elements: %s\n", rank,
           sharc_status_name(st), bad, sharc_comm_last_error(comm));
    sharc_comm_abort(comm);
    return 1;
  }
  printf("stray_conn: rank %d ok\n", rank);
  return sharc_comm_destroy(comm) == SHARC_OK ? 0 : 1;
}

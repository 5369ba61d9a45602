/*
 * test_net_pend.c - the accepted connections that wait for their hello
 * (comm/net/net.h net_pend_*, shared by the tcp and ib transports): accepting
 * until none waits or the array is full, a hello read in pieces, a peer
 * that closes before its hello, an overdue hello dropped while the others
 * keep their order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "net.h"

#include "unit/expect.h"

typedef struct {
  net_pend_t p;
  char hello[24];
} pend_t;

static int dial(const net_addr_t *a) {
  int fd = -1;
  if (net_connect(a, time_ns() + 2000000000ull, &fd) != SHARC_OK)
    return -1;
  return fd;
}

static void send_str(int fd, const char *s, size_t n) {
  EXPECT(net_send_all(fd, s, n, time_ns() + 2000000000ull) == SHARC_OK,
         "sending %zu bytes", n);
}

/* Reads pe until it is complete or closed; -2 when nothing came in 2 s. */
static int read_until(pend_t *pe) {
  for (int i = 0; i < 2000; i++) {
    int r = net_pend_read(&pe->p, pe->hello, sizeof pe->hello, "test");
    if (r != 0)
      return r;
    usleep(1000);
  }
  return -2;
}

int main(void) {
  setenv("SHARC_DEBUG", "NONE", 0); /* the drops WARN by design */
  net_addr_t a;
  int lfd = -1;
  EXPECT(net_resolve("127.0.0.1", 0, &a) == SHARC_OK, "resolve: %s",
         err_last());
  EXPECT(net_listen(&a, 16, &lfd, &a) == SHARC_OK, "listen: %s", err_last());
  if (lfd < 0) {
    printf("test_net_pend: %d passed, %d failed\n", passed, failed);
    return 1;
  }
  net_set_nonblocking(lfd);
  pend_t pend[3];
  int n = 0;
  uint64_t pause = 0;
  net_pend_accept(lfd, pend, sizeof *pend, &n, 3, 1000000000ull, "test",
                  &pause);
  EXPECT(n == 0, "accepted %d with nobody dialing", n);

  int c[4];
  for (int i = 0; i < 4; i++)
    c[i] = dial(&a);
  usleep(100000); /* the connections reach the accept queue */
  net_pend_accept(lfd, pend, sizeof *pend, &n, 3, 1000000000ull, "test",
                  &pause);
  EXPECT(n == 3, "accepted %d of 4 into 3 places", n);
  for (int i = 0; i < n; i++)
    EXPECT(pend[i].p.fd >= 0 && pend[i].p.fill == 0 &&
               pend[i].p.deadline > time_ns(),
           "place %d: fd %d fill %zu", i, pend[i].p.fd, pend[i].p.fill);

  /* 0: the hello in two pieces; 1: closes after a few bytes; 2: silent */
  const char hello[24] = "0123456789abcdefghijklm";
  send_str(c[0], hello, 10);
  usleep(50000);
  EXPECT(net_pend_read(&pend[0].p, pend[0].hello, sizeof pend[0].hello,
                       "test") == 0 &&
             pend[0].p.fill == 10,
         "a partial hello: fill %zu", pend[0].p.fill);
  send_str(c[0], hello + 10, sizeof hello - 10);
  EXPECT(read_until(&pend[0]) == 1 &&
             !memcmp(pend[0].hello, hello, sizeof hello),
         "the hello in two pieces");
  send_str(c[1], hello, 5);
  close(c[1]);
  EXPECT(read_until(&pend[1]) == -1 && pend[1].p.fd == -1,
         "a peer closing before its hello: fd %d", pend[1].p.fd);

  /* The transport took 0's socket (its fd is -1 now); 2 is overdue. */
  int taken = pend[0].p.fd;
  pend[0].p.fd = -1;
  n = net_pend_expire(pend, sizeof *pend, n, time_ns(), 1000000000ull, "test");
  EXPECT(n == 1 && pend[0].p.fd >= 0, "not yet overdue: %d left", n);
  int silent = pend[0].p.fd;
  n = net_pend_expire(pend, sizeof *pend, n, time_ns() + 2000000000ull,
                      1000000000ull, "test");
  EXPECT(n == 0, "overdue: %d left", n);
  char b;
  EXPECT(recv(c[2], &b, 1, 0) == 0, "the overdue connection was not closed");
  (void)silent;

  /* Room again: the fourth dialer, waiting in the accept queue. */
  net_pend_accept(lfd, pend, sizeof *pend, &n, 3, 1000000000ull, "test",
                  &pause);
  EXPECT(n == 1, "accepted %d after the drops", n);
  /* Compaction keeps the order of those left. */
  int d5 = dial(&a), d6 = dial(&a);
  usleep(100000);
  net_pend_accept(lfd, pend, sizeof *pend, &n, 3, 1000000000ull, "test",
                  &pause);
  EXPECT(n == 3, "accepted %d of 3", n);
  int keep = pend[2].p.fd;
  close(pend[1].p.fd);
  pend[1].p.fd = -1;
  close(pend[0].p.fd);
  pend[0].p.fd = -1;
  n = net_pend_expire(pend, sizeof *pend, n, time_ns(), 1000000000ull, "test");
  EXPECT(n == 1 && pend[0].p.fd == keep, "compaction: %d left", n);
  close(pend[0].p.fd);
  close(taken);
  for (int i = 0; i < 4; i++)
    if (c[i] >= 0 && i != 1)
      close(c[i]);
  close(d5);
  close(d6);
  close(lfd);
  printf("test_net_pend: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

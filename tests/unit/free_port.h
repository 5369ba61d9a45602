/*
 * free_port.h - a TCP port on 127.0.0.1 that was free a moment ago, for the
 * one-process tests that start a rendezvous. Include after net.h.
 */
#ifndef SHARC_TEST_FREE_PORT_H
#define SHARC_TEST_FREE_PORT_H

#include <unistd.h>

static int free_port(void) {
  net_addr_t a, b;
  int fd, port = -1;
  if (net_resolve("127.0.0.1", 0, &a) == SHARC_OK &&
      net_listen(&a, 1, &fd, &b) == SHARC_OK) {
    port = net_addr_port(&b);
    close(fd);
  }
  return port;
}

#endif /* SHARC_TEST_FREE_PORT_H */

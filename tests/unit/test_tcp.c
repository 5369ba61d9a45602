/*
 * test_tcp.c - the tcp transport in one process: the transport contract
 * (transport_contract.h: streams, abort notices, clean goodbye, peer loss)
 * plus tcp's own hello checks, with stray connections on a listener while
 * the streams flow.
 */
#include "unit/expect.h"
#include "unit/transport_contract.h"

/* ---- stray connections ------------------------------------------------- */

/* Sends `len` bytes to addr and expects the server to close the socket. */
static int stray_dropped(const net_addr_t *addr, const void *msg, size_t len) {
  int fd;
  if (net_connect(addr, time_ns() + 2000000000ull, &fd) != SHARC_OK)
    return 0;
  if (len &&
      net_send_all(fd, msg, len, time_ns() + 2000000000ull) != SHARC_OK) {
    close(fd);
    return 1; /* already dropped */
  }
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char b[16];
  ssize_t n = recv(fd, b, sizeof b, 0);
  close(fd);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

typedef struct {
  uint32_t magic, version;
  uint64_t uid;
  uint8_t token[SHARC_TOKEN_BYTES];
  int32_t rank;
  uint32_t chan;
} fake_hello_t; /* the transport's hello layout */

/* Rank 2 accepts from 0 and 1; its channels are up once traffic flows. */
static int strays(struct sharc_comm **cs, int n) {
  usleep(100000);
  struct sharc_comm *c = cs[2];
  fake_hello_t h = {0x53484354u, 1, c->uid, {0}, 0, 0};
  memset(h.token, 0x11, sizeof h.token); /* wrong token */
  int ok = stray_dropped(&c->listen_addr, &h, sizeof h);
  char junk[40];
  memset(junk, 'x', sizeof junk);
  ok &= stray_dropped(&c->listen_addr, junk, sizeof junk);
  memcpy(h.token, c->token, sizeof h.token);
  h.uid = c->uid + 1; /* another communicator */
  ok &= stray_dropped(&c->listen_addr, &h, sizeof h);
  h.uid = c->uid;
  h.rank = c->rank; /* a rank that must not dial this one */
  ok &= stray_dropped(&c->listen_addr, &h, sizeof h);
  h.rank = 0;
  h.chan = 0; /* duplicate of an established channel */
  ok &= stray_dropped(&c->listen_addr, &h, sizeof h);
  EXPECT(ok, "stray connections were not all dropped");
  return ok;
}

int main(void) {
  pattern_init();
  tp = &transport_tcp;
  setenv("SHARC_DEBUG", "NONE", 0); /* the drops below WARN by design */
  uint64_t t0 = time_ns();
  contract_stream(strays);
  contract_goodbye();
  contract_peer_lost(NCHAN + 1); /* a data socket per channel, one control */
  printf("test_tcp: %d passed, %d failed (%.1f s)\n", passed, failed,
         (double)(time_ns() - t0) / 1e9);
  return failed ? 1 : 0;
}

/*
 * test_bootstrap_wire.c - the rendezvous parsers (comm/net/bootstrap_wire.h) on
 * the messages a stray, broken or foreign client sends: each is dropped or
 * rejected with a reason at the first byte that gives it away, and a valid
 * hello is accepted only when complete. Also the rank's side: answer
 * headers, error texts and rank tables. (tests/fuzz/fuzz_bootstrap.c feeds
 * the same functions random bytes.)
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap_wire.h"

#include "unit/expect.h"

static const uint8_t tok[SHARC_TOKEN_BYTES] = {1, 2,  3,  4,  5,  6,  7,  8,
                                               9, 10, 11, 12, 13, 14, 15, 16};

typedef struct {
  wire_hdr_t h;
  wire_hello_t b;
} msg_t;

static void row(peer_info_t *p, int rank) {
  struct sockaddr_in *s = (struct sockaddr_in *)&p->addr.sa;
  memset(p, 0, sizeof *p);
  snprintf(p->host, sizeof p->host, "node%d", rank);
  p->rank = rank;
  s->sin_family = AF_INET;
  s->sin_port = htons(4000);
  s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  p->addr.len = sizeof *s;
}

static msg_t hello(int nranks, int rank) {
  msg_t m;
  memset(&m, 0, sizeof m);
  m.h = (wire_hdr_t){WIRE_MAGIC, WIRE_VERSION, MSG_HELLO, sizeof m.b};
  memcpy(m.b.token, tok, sizeof tok);
  m.b.nranks = nranks;
  row(&m.b.info, rank);
  return m;
}

/* The bytes on the wire: the header, then the hello (no padding). */
static void wire(const msg_t *m, uint8_t *buf) {
  memcpy(buf, &m->h, sizeof m->h);
  memcpy(buf + sizeof m->h, &m->b, sizeof m->b);
}

/* Parses the first len bytes of m for a job of job_nranks; why into
 * why[256]. */
static wire_verdict_t parse(const msg_t *m, size_t len, int job_nranks,
                            sharc_status_t *st, char *why) {
  uint8_t buf[WIRE_HELLO_BYTES];
  size_t need = 0;
  wire_hello_t out;
  wire(m, buf);
  why[0] = '\0';
  return bootstrap_parse_hello(buf, len, tok, job_nranks, &need, &out, st, why,
                               256);
}

static void test_hello(void) {
  char why[256];
  sharc_status_t st;
  const size_t all = WIRE_HELLO_BYTES;
  msg_t m = hello(4, 2);
  EXPECT(parse(&m, all, 4, &st, why) == WIRE_OK && st == SHARC_OK,
         "valid hello: %s", why);
  EXPECT(parse(&m, all, 0, &st, why) == WIRE_OK, "unique-id job: %s", why);

  /* Every proper prefix of a valid hello: wait for more, never accept. */
  int more = 1;
  for (size_t k = 0; k < all; k++) {
    uint8_t buf[WIRE_HELLO_BYTES];
    size_t need = 0;
    wire_hello_t out;
    wire(&m, buf);
    if (bootstrap_parse_hello(buf, k, tok, 4, &need, &out, &st, why,
                              sizeof why) != WIRE_MORE ||
        need <= k || need > all)
      more = 0;
  }
  EXPECT(more, "prefixes wait for the rest");

  msg_t bad = m;
  bad.h.magic = 0x50545448; /* "HTTP" */
  EXPECT(parse(&bad, 4, 4, &st, why) == WIRE_DROP && strstr(why, "bad magic"),
         "bad magic after 4 bytes: %s", why);
  bad = m;
  bad.h.version = 99;
  EXPECT(parse(&bad, 6, 4, &st, why) == WIRE_DROP &&
             strstr(why, "protocol version 99"),
         "version after 6 bytes: %s", why);
  bad = m;
  bad.h.type = MSG_TABLE;
  EXPECT(parse(&bad, 8, 4, &st, why) == WIRE_DROP && strstr(why, "type 2"),
         "type after 8 bytes: %s", why);
  bad = m;
  bad.h.len = 0xfffffff0u;
  EXPECT(parse(&bad, sizeof bad.h, 4, &st, why) == WIRE_DROP &&
             strstr(why, "length 4294967280"),
         "oversize length after the header: %s", why);
  bad.h.len = 0;
  EXPECT(parse(&bad, sizeof bad.h, 4, &st, why) == WIRE_DROP, "zero length: %s",
         why);

  bad = m;
  bad.b.token[7] ^= 1;
  EXPECT(parse(&bad, all, 4, &st, why) == WIRE_DROP &&
             strstr(why, "wrong job token"),
         "wrong token: %s", why);
  bad = m;
  bad.b.nranks = 0;
  EXPECT(parse(&bad, all, 0, &st, why) == WIRE_REJECT &&
             st == SHARC_ERR_INVALID_ARG && strstr(why, "nranks 0"),
         "nranks 0: %s", why);
  bad.b.nranks = MAX_RANKS + 1;
  EXPECT(parse(&bad, all, 0, &st, why) == WIRE_REJECT, "nranks too large: %s",
         why);
  bad = hello(6, 5);
  EXPECT(parse(&bad, all, 4, &st, why) == WIRE_REJECT &&
             st == SHARC_ERR_MISMATCH && strstr(why, "nranks 6"),
         "size mismatch: %s", why);
  bad = hello(4, 4);
  EXPECT(parse(&bad, all, 4, &st, why) == WIRE_REJECT &&
             strstr(why, "rank 4 is not in 0..3"),
         "rank out of range: %s", why);
  bad = hello(4, -1);
  EXPECT(parse(&bad, all, 0, &st, why) == WIRE_REJECT, "negative rank: %s",
         why);
  bad = m;
  bad.b.info.addr.len = 1000;
  EXPECT(parse(&bad, all, 4, &st, why) == WIRE_REJECT &&
             strstr(why, "bad address"),
         "address length: %s", why);
  bad = m;
  bad.b.info.addr.sa.ss_family = AF_UNIX;
  EXPECT(parse(&bad, all, 4, &st, why) == WIRE_REJECT, "address family: %s",
         why);
  bad = m;
  memset(bad.b.info.host, 'x', sizeof bad.b.info.host);
  EXPECT(parse(&bad, all, 4, &st, why) == WIRE_REJECT &&
             strstr(why, "host name"),
         "unterminated host name: %s", why);
}

static void test_reply(void) {
  char why[256], msg[64];
  int type = 0;
  uint32_t plen = 0;
  size_t tbytes = 3 * sizeof(peer_info_t);
  wire_hdr_t h = {WIRE_MAGIC, WIRE_VERSION, MSG_TABLE, (uint32_t)tbytes};
  EXPECT(bootstrap_parse_reply_hdr((const uint8_t *)&h, sizeof h, 3, &type,
                                   &plen, why, sizeof why) == SHARC_OK &&
             type == MSG_TABLE && plen == tbytes,
         "table header: %s", why);
  EXPECT(bootstrap_parse_reply_hdr((const uint8_t *)&h, sizeof h, 4, &type,
                                   &plen, why, sizeof why) == SHARC_ERR_NET &&
             strstr(why, "bad header"),
         "table of the wrong size: %s", why);
  EXPECT(bootstrap_parse_reply_hdr((const uint8_t *)&h, 5, 3, &type, &plen, why,
                                   sizeof why) == SHARC_ERR_NET,
         "short header");
  h = (wire_hdr_t){WIRE_MAGIC, WIRE_VERSION, MSG_ERROR, 0xffffffffu};
  EXPECT(bootstrap_parse_reply_hdr((const uint8_t *)&h, sizeof h, 3, &type,
                                   &plen, why, sizeof why) == SHARC_ERR_NET,
         "oversize error text refused before it is read");
  h.len = 4;
  EXPECT(bootstrap_parse_reply_hdr((const uint8_t *)&h, sizeof h, 3, &type,
                                   &plen, why, sizeof why) == SHARC_ERR_NET,
         "error without text");
  h.len = 20;
  EXPECT(bootstrap_parse_reply_hdr((const uint8_t *)&h, sizeof h, 3, &type,
                                   &plen, why, sizeof why) == SHARC_OK &&
             type == MSG_ERROR && plen == 20,
         "error header: %s", why);

  uint8_t e[12];
  int32_t code = SHARC_ERR_TIMEOUT;
  memcpy(e, &code, 4);
  memcpy(e + 4, "late!!!!", 8); /* no NUL: cut at the payload's end */
  sharc_status_t c = SHARC_OK;
  EXPECT(bootstrap_parse_error(e, sizeof e, &c, msg, sizeof msg) == SHARC_OK &&
             c == SHARC_ERR_TIMEOUT && !strcmp(msg, "late!!!!"),
         "%d '%s'", (int)c, msg);
  code = 7;
  memcpy(e, &code, 4);
  EXPECT(bootstrap_parse_error(e, sizeof e, &c, msg, 4) == SHARC_OK &&
             c == SHARC_ERR_INTERNAL && !strcmp(msg, "lat"),
         "a non-error code becomes INTERNAL; text cut to the buffer");
  EXPECT(bootstrap_parse_error(e, 4, &c, msg, sizeof msg) == SHARC_ERR_NET,
         "no text");

  peer_info_t t[3];
  for (int i = 0; i < 3; i++)
    row(&t[i], i);
  EXPECT(bootstrap_check_table(t, 3, why, sizeof why) == SHARC_OK, "%s", why);
  t[1].rank = 2;
  EXPECT(bootstrap_check_table(t, 3, why, sizeof why) == SHARC_ERR_NET &&
             strstr(why, "entry 1 holds rank 2"),
         "%s", why);
  t[1].rank = 1;
  memset(t[2].host, 'y', sizeof t[2].host);
  EXPECT(bootstrap_check_table(t, 3, why, sizeof why) == SHARC_ERR_NET &&
             strstr(why, "entry 2"),
         "%s", why);
  row(&t[2], 2);
  t[0].addr.len = 0;
  EXPECT(bootstrap_check_table(t, 3, why, sizeof why) == SHARC_ERR_NET &&
             strstr(why, "bad address"),
         "%s", why);
}

int main(void) {
  test_hello();
  test_reply();
  printf("test_bootstrap_wire: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

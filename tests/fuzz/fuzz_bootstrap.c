/*
 * fuzz_bootstrap.c - libFuzzer target for the rendezvous message parsers
 * (comm/net/bootstrap_wire.h): what the root accepts from any client that
 * connects to its port, and what a rank accepts from the root.
 *
 * One input is the bytes of one connection. The root's side sees them the
 * way the root thread does (every prefix, as they trickle in) for a job of
 * 4 ranks and for a unique-id job of unknown size; the rank's side reads
 * them as the root's answer (header, then an error text or a rank table).
 * Invariants the root relies on are checked; a violation aborts (a
 * finding), as do sanitizer reports.
 *
 * Built with -DFUZZ_SEED_MAIN instead, it is a program that writes the
 * seed inputs (a valid hello, a table, an error) into the directory given:
 * run_fuzz.sh does that on every run so the seeds follow the struct layout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap_wire.h"

#define FUZZ_NRANKS 4

/* The token the seeds carry, so inputs grown from them reach past it. */
static const uint8_t fuzz_token[SHARC_TOKEN_BYTES] = {
    0x53, 0x48, 0x41, 0x52, 0x43, 0x2d, 0x66, 0x75,
    0x7a, 0x7a, 0x2d, 0x74, 0x6f, 0x6b, 0x65, 0x6e};

#define REQUIRE(c)                                                             \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_bootstrap: invariant broken: %s (line %d)\n", #c,  \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static int terminated(const char *s, size_t n) { return memchr(s, 0, n) != 0; }

/* The root's side: every prefix, as the root thread sees it. */
static void root_side(const uint8_t *data, size_t size, int job_nranks) {
  size_t upto = size < WIRE_HELLO_BYTES ? size : WIRE_HELLO_BYTES;
  for (size_t k = 0; k <= upto; k++) {
    size_t need = 0;
    wire_hello_t h;
    sharc_status_t st = SHARC_OK;
    char why[256];
    why[0] = '\0';
    wire_verdict_t v = bootstrap_parse_hello(data, k, fuzz_token, job_nranks,
                                             &need, &h, &st, why, sizeof why);
    switch (v) {
    case WIRE_MORE:
      REQUIRE(k < WIRE_HELLO_BYTES && need > k && need <= WIRE_HELLO_BYTES);
      continue;
    case WIRE_OK: {
      int n = job_nranks > 0 ? job_nranks : (int)h.nranks;
      REQUIRE(k == WIRE_HELLO_BYTES && st == SHARC_OK);
      REQUIRE(h.nranks >= 1 && h.nranks <= MAX_RANKS);
      REQUIRE(h.info.rank >= 0 && h.info.rank < n);
      REQUIRE(terminated(h.info.host, sizeof h.info.host));
      REQUIRE(h.info.addr.len <= sizeof h.info.addr.sa);
      return;
    }
    case WIRE_REJECT:
      REQUIRE(k == WIRE_HELLO_BYTES && st < 0);
      REQUIRE(terminated(why, sizeof why) && why[0]);
      return;
    case WIRE_DROP:
      REQUIRE(terminated(why, sizeof why) && why[0]);
      return;
    }
    REQUIRE(!"unknown verdict");
  }
}

/* The rank's side: the bytes as the root's answer. */
static void rank_side(const uint8_t *data, size_t size, int nranks) {
  int type = 0;
  uint32_t plen = 0;
  char why[256];
  if (bootstrap_parse_reply_hdr(data, size, nranks, &type, &plen, why,
                                sizeof why) != SHARC_OK)
    return;
  REQUIRE(type == MSG_TABLE || type == MSG_ERROR);
  const uint8_t *p = data + sizeof(wire_hdr_t);
  size_t left = size - sizeof(wire_hdr_t);
  if (type == MSG_ERROR) {
    REQUIRE(plen > 4 && plen <= WIRE_MAX_ERROR_BYTES);
    if (left < plen)
      return;
    sharc_status_t code = SHARC_OK;
    char msg[WIRE_MAX_ERROR_BYTES];
    REQUIRE(bootstrap_parse_error(p, plen, &code, msg, sizeof msg) == SHARC_OK);
    REQUIRE(code < 0 && code >= SHARC_ERR_INTERNAL);
    REQUIRE(terminated(msg, sizeof msg));
    return;
  }
  REQUIRE(plen == (size_t)nranks * sizeof(peer_info_t));
  if (left < plen)
    return;
  peer_info_t *t = malloc(plen); /* aligned, as the rank's table is */
  if (!t)
    return;
  memcpy(t, p, plen);
  if (bootstrap_check_table(t, nranks, why, sizeof why) == SHARC_OK)
    for (int i = 0; i < nranks; i++) {
      REQUIRE(t[i].rank == i);
      REQUIRE(terminated(t[i].host, sizeof t[i].host));
    }
  free(t);
}

/* The raw bytes as an error payload and as a table of whole rows. */
static void payloads(const uint8_t *data, size_t size) {
  sharc_status_t code = SHARC_OK;
  char msg[64];
  if (bootstrap_parse_error(data, size, &code, msg, sizeof msg) == SHARC_OK)
    REQUIRE(terminated(msg, sizeof msg) && code < 0);
  bootstrap_parse_error(data, size, &code, msg, 1);
  size_t rows = size / sizeof(peer_info_t);
  if (rows > 0 && rows <= 64) {
    peer_info_t *t = malloc(rows * sizeof *t);
    if (t) {
      memcpy(t, data, rows * sizeof *t);
      bootstrap_check_table(t, (int)rows, msg, sizeof msg);
      free(t);
    }
  }
}

#ifndef FUZZ_SEED_MAIN

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  root_side(data, size, FUZZ_NRANKS);
  root_side(data, size, 0);
  rank_side(data, size, FUZZ_NRANKS);
  rank_side(data, size, 1);
  payloads(data, size);
  return 0;
}

#else /* the seed writer */

#include <arpa/inet.h>

static void put(const char *dir, const char *name, const void *p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) {
    perror(path);
    exit(1);
  }
  fclose(f);
}

static void row(peer_info_t *p, int rank) {
  struct sockaddr_in *s = (struct sockaddr_in *)&p->addr.sa;
  memset(p, 0, sizeof *p);
  p->host_hash = 0x1234567890abcdefull;
  snprintf(p->host, sizeof p->host, "node%02d", rank);
  p->pid = 4242 + rank;
  p->rank = rank;
  s->sin_family = AF_INET;
  s->sin_port = htons((uint16_t)(40000 + rank));
  s->sin_addr.s_addr = htonl(0x0a000001u + (uint32_t)rank);
  p->addr.len = sizeof *s;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  /* The wire has no padding between the header and the payload. */
  wire_hdr_t h = {WIRE_MAGIC, WIRE_VERSION, MSG_HELLO, sizeof(wire_hello_t)};
  wire_hello_t hello;
  uint8_t hm[WIRE_HELLO_BYTES];
  memset(&hello, 0, sizeof hello);
  memcpy(hello.token, fuzz_token, sizeof fuzz_token);
  hello.nranks = FUZZ_NRANKS;
  row(&hello.info, 2);
  memcpy(hm, &h, sizeof h);
  memcpy(hm + sizeof h, &hello, sizeof hello);
  put(argv[1], "hello_rank2", hm, sizeof hm);
  /* IPv6 address, rank 0 */
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&hello.info.addr.sa;
  memset(&hello.info.addr, 0, sizeof hello.info.addr);
  s6->sin6_family = AF_INET6;
  s6->sin6_port = htons(29500);
  s6->sin6_addr.s6_addr[15] = 1;
  hello.info.addr.len = sizeof *s6;
  hello.info.rank = 0;
  memcpy(hm + sizeof h, &hello, sizeof hello);
  put(argv[1], "hello_rank0_v6", hm, sizeof hm);

  size_t tbytes = FUZZ_NRANKS * sizeof(peer_info_t);
  uint8_t *tm = calloc(1, sizeof(wire_hdr_t) + tbytes);
  wire_hdr_t th = {WIRE_MAGIC, WIRE_VERSION, MSG_TABLE, (uint32_t)tbytes};
  memcpy(tm, &th, sizeof th);
  for (int r = 0; r < FUZZ_NRANKS; r++) {
    peer_info_t p;
    row(&p, r);
    memcpy(tm + sizeof th + (size_t)r * sizeof p, &p, sizeof p);
  }
  put(argv[1], "table4", tm, sizeof th + tbytes);
  free(tm);

  const char text[] = "bootstrap: rank 3 not seen after 30 s";
  uint8_t em[sizeof(wire_hdr_t) + 4 + sizeof text];
  wire_hdr_t eh = {WIRE_MAGIC, WIRE_VERSION, MSG_ERROR, 4 + sizeof text};
  int32_t code = SHARC_ERR_TIMEOUT;
  memcpy(em, &eh, sizeof eh);
  memcpy(em + sizeof eh, &code, 4);
  memcpy(em + sizeof eh + 4, text, sizeof text);
  put(argv[1], "error_timeout", em, sizeof em);
  put(argv[1], "http", "GET / HTTP/1.0\r\n\r\n", 18);
  return 0;
}

#endif

/*
 * bootstrap_wire.h - the rendezvous wire format and the checks every
 * received message passes before anything in it is trusted.
 *
 * Both ends run the same build on the same architecture, so messages are
 * fixed-size host-order structs: wire_hdr_t, then `len` payload bytes. A
 * rank sends HELLO (wire_hello_t); the root answers TABLE (nranks
 * peer_info_t ordered by rank) or ERROR (int32 status, NUL-terminated
 * text).
 *
 * The parsers below are pure: no I/O, no allocation, no logging, no global
 * state. They look at bytes exactly as received (any length, any content)
 * and either accept them or say why not in `why`. Lengths are checked
 * against fixed limits before the caller reads or sizes anything by them.
 * tests/fuzz/fuzz_bootstrap.c feeds them arbitrary bytes.
 */
#ifndef SHARC_BOOTSTRAP_WIRE_H
#define SHARC_BOOTSTRAP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "bootstrap_env.h"
#include "net.h"

/* One row of the rank table: what every rank tells all others. */
typedef struct {
  uint64_t host_hash;            /* equal on one host (see host_identity) */
  char host[SHARC_HOSTNAME_MAX]; /* host name, for messages */
  int32_t pid;
  int32_t rank;
  net_addr_t addr; /* the rank's data listener (tcp) */
  /* CPUs the rank may share with its host's other ranks, as it sees them
   * (exec_host_cpus; 0: unknown): with the table every rank decides the
   * same about ranks sharing cores (struct sharc_comm.oversubscribed) */
  int32_t cpus;
  int32_t reserved; /* 0 */
} peer_info_t;

#define WIRE_MAGIC 0x43524853u    /* "SHRC" in memory on little-endian */
#define WIRE_VERSION 2            /* 2: peer_info_t.cpus */
#define WIRE_MAX_ERROR_BYTES 4096 /* ERROR payload limit, status included */

enum { MSG_HELLO = 1, MSG_TABLE = 2, MSG_ERROR = 3 };

typedef struct {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t len; /* payload bytes that follow */
} wire_hdr_t;

typedef struct {
  uint8_t token[SHARC_TOKEN_BYTES];
  int32_t nranks;
  int32_t reserved;
  peer_info_t info;
} wire_hello_t;

/* A complete hello: header and payload. */
#define WIRE_HELLO_BYTES (sizeof(wire_hdr_t) + sizeof(wire_hello_t))

typedef enum {
  WIRE_MORE = 0, /* valid so far: read until *need bytes are in */
  WIRE_OK,       /* a complete, valid message */
  WIRE_DROP,     /* not from this job (header or token): close, say nothing */
  WIRE_REJECT    /* this job's token but unusable: tell the sender why */
} wire_verdict_t;

/* Looks at the first len bytes a connection sent to the root. token is the
 * job's; job_nranks the job's size (0: not known yet, the unique-id root
 * learns it from the first hello). WIRE_MORE sets *need (> len, at most
 * WIRE_HELLO_BYTES); WIRE_OK copies the hello into *out; WIRE_REJECT sets
 * *st (the status the sender gets). why (may be NULL) receives the reason
 * for anything but WIRE_MORE and WIRE_OK. Each field is checked as soon as
 * its bytes are in, so a stray client is dropped after its first bytes;
 * bytes past WIRE_HELLO_BYTES are not looked at. Checks that need the
 * root's state (a rank registered twice) are the caller's. */
wire_verdict_t bootstrap_parse_hello(const uint8_t *buf, size_t len,
                                     const uint8_t *token, int job_nranks,
                                     size_t *need, wire_hello_t *out,
                                     sharc_status_t *st, char *why,
                                     size_t why_len);

/* The root's answer header for a job of nranks (len bytes, a complete
 * header is sizeof(wire_hdr_t)): SHARC_OK with *type MSG_TABLE and *plen
 * nranks * sizeof(peer_info_t), or *type MSG_ERROR and 4 < *plen <=
 * WIRE_MAX_ERROR_BYTES; else SHARC_ERR_NET and why. */
sharc_status_t bootstrap_parse_reply_hdr(const uint8_t *buf, size_t len,
                                         int nranks, int *type, uint32_t *plen,
                                         char *why, size_t why_len);

/* An ERROR payload of len bytes: *code gets the status (anything that is
 * not a sharc error becomes SHARC_ERR_INTERNAL), msg (msg_len > 0) the
 * text, cut at the first NUL or at the end of the payload. SHARC_ERR_NET
 * when len is outside 5..WIRE_MAX_ERROR_BYTES. */
sharc_status_t bootstrap_parse_error(const uint8_t *buf, size_t len,
                                     sharc_status_t *code, char *msg,
                                     size_t msg_len);

/* A received rank table: row i holds rank i, every host name is
 * NUL-terminated and every address is an IPv4 or IPv6 socket address of
 * its size. SHARC_ERR_NET and why on the first bad row. */
sharc_status_t bootstrap_check_table(const peer_info_t *table, int nranks,
                                     char *why, size_t why_len);

#endif /* SHARC_BOOTSTRAP_WIRE_H */

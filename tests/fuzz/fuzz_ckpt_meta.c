/*
 * fuzz_ckpt_meta.c - libFuzzer target for the checkpoint metadata parser
 * (shard/ckpt_meta.c): a checkpoint directory is untrusted input (copied
 * between clusters, truncated by a full disk, edited by hand). Whatever
 * parses must print back to text that parses to the same metadata, and
 * its file offsets must be computable without overflow.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_meta.h"

#define REQUIRE(c)                                                             \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "fuzz_ckpt_meta: invariant broken: %s (line %d)\n", #c,  \
              __LINE__);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ckpt_meta_t m, back;
  char err[256];
  err[0] = '\0';
  int rc = ckpt_meta_parse((const char *)data, size, &m, err, sizeof err);
  if (rc != 0) {
    REQUIRE(err[0] != '\0'); /* a refusal always says why */
    ckpt_meta_free(&m);
    return 0;
  }
  REQUIRE(m.nunits >= 1 && m.shards >= 1 && m.states >= 1 && m.states <= 3);
  REQUIRE(m.nfiles == (m.full ? 1 : m.shards));
  uint64_t prev = 0;
  for (int u = 0; u <= m.nunits; u++) { /* offsets grow, never wrap */
    uint64_t off = ckpt_unit_offset(&m, u);
    REQUIRE(off >= prev);
    prev = off;
  }
  char *text;
  size_t len;
  REQUIRE(ckpt_meta_print(&m, &text, &len) == 0);
  REQUIRE(ckpt_meta_parse(text, len, &back, err, sizeof err) == 0);
  REQUIRE(back.nunits == m.nunits && back.shards == m.shards &&
          back.world == m.world && back.steps == m.steps &&
          back.full == m.full && back.seed == m.seed);
  for (int u = 0; u < m.nunits; u++)
    REQUIRE(back.units[u].numel == m.units[u].numel &&
            strcmp(back.units[u].name, m.units[u].name) == 0);
  for (int f = 0; f < m.nfiles; f++)
    REQUIRE(back.file_sums[f] == m.file_sums[f]);
  free(text);
  ckpt_meta_free(&back);
  ckpt_meta_free(&m);
  return 0;
}

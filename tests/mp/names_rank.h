/*
 * names_rank.h - does an error message name "rank K" (and not "rank K0")?
 * Shared by the failure tests (kill_rank, hang_rank).
 */
#ifndef SHARC_TEST_NAMES_RANK_H
#define SHARC_TEST_NAMES_RANK_H

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static inline int names_rank(const char *msg, int k) {
  char want[32];
  int len = snprintf(want, sizeof want, "rank %d", k);
  for (const char *p = strstr(msg, want); p; p = strstr(p + 1, want))
    if (!isdigit((unsigned char)p[len]))
      return 1;
  return 0;
}

#endif /* SHARC_TEST_NAMES_RANK_H */

/*
 * expect.h - the check macro of the one-process unit tests: counts passes
 * and failures, prints each failure with its place and a formatted reason.
 * Include once per test program; print the counts at the end.
 */
#ifndef SHARC_TEST_EXPECT_H
#define SHARC_TEST_EXPECT_H

#include <stdio.h>

static int passed, failed;

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (cond) {                                                                \
      passed++;                                                                \
    } else {                                                                   \
      failed++;                                                                \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

#endif /* SHARC_TEST_EXPECT_H */

/*
 * cuda_ok.h - the gpu tests' checks: CUDA_OK, a CUDA runtime call that
 * must succeed (otherwise one FAIL line naming the call and the error, and
 * exit 1), and CHECK, a condition counted in the including test's
 * `passed` and `failed` (the first 40 failures printed).
 */
#ifndef SHARC_TESTS_GPU_CUDA_OK_H
#define SHARC_TESTS_GPU_CUDA_OK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_OK(call)                                                          \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "FAIL %s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,   \
              cudaGetErrorName(e_), cudaGetErrorString(e_));                   \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* One check, counted in the test's own `static int passed, failed;`. */
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (cond) {                                                                \
      passed++;                                                                \
    } else if (failed++ < 40) {                                                \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                              \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

#endif /* SHARC_TESTS_GPU_CUDA_OK_H */

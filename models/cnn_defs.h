/*
 * cnn_defs.h - what the CNN's host code (cnn.c, cnn_impl.h) and its CUDA
 * twin (cnn_cuda.cu) share: the shapes, the dropout rates and the dropout
 * mask hash, written once so that both draw bit-identical masks. Valid C11
 * and C++17; under nvcc the hash functions are __host__ __device__.
 *
 * Also declares the internal entry points of cnn_cuda.cu that cnn.c calls
 * (CUDA builds only, SHARC_MODELS_CUDA).
 */
#ifndef SHARC_MODELS_CNN_DEFS_H
#define SHARC_MODELS_CNN_DEFS_H

#include <stddef.h>
#include <stdint.h>

#include "sharc_shard.h"

#if defined(__CUDACC__)
#define CNN_HD __host__ __device__
#else
#define CNN_HD
#endif

/* Shapes (elements). */
#define IMG_HW 28
#define IMG_PIX (IMG_HW * IMG_HW)
#define C1 32
#define H1 26
#define P1 (H1 * H1)
#define A1_NUMEL (C1 * P1)
#define C2 64
#define H2 24
#define P2 (H2 * H2)
#define HP 12
#define FLAT (C2 * HP * HP)
#define F1 128
/* cnn.h's CNN_CLASSES and CNN_STAGES (cnn.c checks they agree): this
 * header does not include cnn.h, so that cnn.c and cnn_cuda.cu, which call
 * each other, do not also depend on each other's headers. */
#define NCLS 10
#define NSTAGES 4

/* Dropout probabilities and the matching thresholds on a 64-bit hash:
 * an element is dropped when its hash < p * 2^64 (exact for these p). */
#define DROP1_P 0.25
#define DROP1_THR (UINT64_C(1) << 62)
#define DROP2_P 0.5
#define DROP2_THR (UINT64_C(1) << 63)

/* The dropout stream of one micro-batch (plain data: CUDA kernels take it
 * by value). */
typedef struct {
  uint64_t seed, step, first; /* first: global index of sample 0 */
  int on;                     /* model built with dropout and training */
} drop_t;

/* A bijective 64-bit mixer (xor-shift / multiply rounds). */
static inline CNN_HD uint64_t mix64(uint64_t z) {
  z ^= z >> 32;
  z *= 0xd6e8feb86659fd93ull;
  z ^= z >> 32;
  z *= 0xd6e8feb86659fd93ull;
  z ^= z >> 32;
  return z;
}

/* Key of one (stage, global sample) of the batch's step. */
static inline CNN_HD uint64_t drop_key(const drop_t *d, int stage,
                                       uint64_t sample) {
  uint64_t k = mix64(d->seed ^ 0x5bd1e9955bd1e995ull);
  k = mix64(k ^ d->step);
  k = mix64(k ^ sample);
  return mix64(k ^ (uint64_t)(unsigned)stage);
}

/* 1 when element e survives (drop probability thr / 2^64). */
static inline CNN_HD int drop_keep(uint64_t key, uint64_t e, uint64_t thr) {
  return mix64(key + (e + 1) * 0x9e3779b97f4a7c15ull) >= thr;
}

#ifdef SHARC_MODELS_CUDA
#ifdef __cplusplus
extern "C" {
#endif
/* cnn_cuda.cu: the SHARC_DEVICE_CUDA twin of host (cnn_model's
 * description: its units and stages are shared, not copied) for the
 * current CUDA device, keyed by seed and dropout as cnn_create. Returns
 * NULL with a one-line reason in why when no device is usable or cuBLAS
 * fails. cnn_cuda_close frees what open returned (NULL: nothing). */
const sharc_model_t *cnn_cuda_open(const sharc_model_t *host, uint64_t seed,
                                   int dropout, char *why, size_t whylen);
void cnn_cuda_close(const sharc_model_t *m);
#ifdef __cplusplus
}
#endif
#endif

#endif /* SHARC_MODELS_CNN_DEFS_H */

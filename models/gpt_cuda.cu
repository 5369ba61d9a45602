/*
 * gpt_cuda.cu - the GPT decoder of gpt.c on a CUDA device: the same
 * network, units, stages and parameter layout (so checkpoints interchange
 * with host runs) as a SHARC_DEVICE_CUDA sharc_model_t (gpt_cuda_model in
 * gpt.h). The GEMMs are cuBLAS in f32 (CUBLAS_COMPUTE_32F, default math
 * mode: no TF32); everything else is a small kernel (gpt_cuda_kernels.cu)
 * that redoes gpt_impl.h's arithmetic, with a fixed summation order and no
 * atomics, so that a run is deterministic and every kernel runs unchanged on
 * softcuda: one thread per output element; a block per row where a row is
 * reduced (LayerNorm, the softmaxes, the loss: block_reduce's tree in
 * shared memory, softcuda's cooperative blocks); blocks of 32 x 8 threads
 * for column sums over the rows (the LayerNorm and bias gradients). The
 * reductions sum in another order than the host's loops: last bits.
 * (Until 2026-11-28 these were one thread per row or channel: on the
 * first H100 run, bench/results/gpu_h100_first, the tiny grids left the
 * GPU idle: 8192 threads for the loss over 50,257 columns each.)
 *
 * What differs from the host callbacks:
 *  - the GEMMs' summation order (cuBLAS's, not OpenBLAS's): last bits;
 *  - expf and logf (softmaxes, GELU's tanh, the loss) are CUDA's (within
 *    2 ulp) on a GPU, glibc's on softcuda; sqrtf and division are IEEE
 *    in both (--prec-div=true --fmad=false, no contraction);
 *  - attention runs per sequence, each GEMM strided-batched over the
 *    heads (a head's q, k, v are hs columns apart in qkv), and the
 *    backward keeps d att of all heads at once (n,H,T,T) in scratch;
 *  - the wte gradient of the embedding: each token's positions are
 *    chained on the device (next position with the same token), and one
 *    thread per (first position of a token, channel) walks its chain, so
 *    the sum runs in the host's position order without a sort;
 *  - scratch holds device copies of the host tokens and targets
 *    (batch->x, batch->y), copied on the stream each call, and the head's
 *    per-row losses, which one thread sums in the host's order.
 *
 * This file holds the launches, the GEMMs, the buffer layouts, the stages
 * and the callbacks; the kernels are defined in gpt_cuda_kernels.cu and
 * declared in gpt_cuda_kernels.cuh. They are launched from here with
 * cudaLaunchKernel on typed pointers, which needs only the declarations:
 * the two files compile separately, without relocatable device code.
 * Compiled by nvcc, or on softcuda as host C++ (cmake/sharc_cuda.cmake).
 */
#include "gpt_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>

#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpt_cuda_kernels.cuh"

#ifndef SHARC_CUDA_ARCHS
#define SHARC_CUDA_ARCHS "?"
#endif

namespace {

/* The kernels, and their column blocks' kColX x kColY. */
using namespace gpt_kernels;

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096; /* grid-stride beyond this */

/* ---- launching ----------------------------------------------------------- */

template <class T> struct same { using type = T; };

/* fn over `work` owned elements on s (nothing for none); the arguments
 * convert to the kernel's parameter types. 0 or a cudaError_t. */
template <class... P>
int launch(void (*fn)(P...), size_t work, cudaStream_t s,
           typename same<P>::type... args) {
  if (work == 0)
    return 0;
  size_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks)
    blocks = kMaxBlocks;
  void *argv[] = {(void *)&args...};
  return (int)cudaLaunchKernel(fn, dim3((unsigned)blocks), dim3(kThreads), argv,
                               0, s);
}

/* Threads per row for a row kernel over rows of len elements: a power of
 * two from 32 to 256, about 8 elements each. */
unsigned row_threads(size_t len) {
  unsigned t = 32;
  while (t < 256 && (size_t)t * 8 < len)
    t *= 2;
  return t;
}

/* A row kernel (a block per row, FOR_EACH_ROW) over rows of len elements:
 * row_threads(len) threads, and per thread shared_per_thread bytes of
 * dynamic shared memory. */
constexpr size_t kMaxRowBlocks = 65535; /* rows beyond: a block takes more */
template <class... P>
int launch_rows(void (*fn)(P...), size_t rows, size_t len,
                size_t shared_per_thread, cudaStream_t s,
                typename same<P>::type... args) {
  if (rows == 0)
    return 0;
  unsigned threads = row_threads(len);
  size_t blocks = rows < kMaxRowBlocks ? rows : kMaxRowBlocks;
  void *argv[] = {(void *)&args...};
  return (int)cudaLaunchKernel(fn, dim3((unsigned)blocks), dim3(threads), argv,
                               threads * shared_per_thread, s);
}

/* A column-sum kernel (kColX x kColY blocks) over cols columns. */
template <class... P>
int launch_cols(void (*fn)(P...), size_t cols, cudaStream_t s,
                typename same<P>::type... args) {
  if (cols == 0)
    return 0;
  size_t blocks = (cols + kColX - 1) / kColX;
  if (blocks > kMaxBlocks)
    blocks = kMaxBlocks;
  void *argv[] = {(void *)&args...};
  return (int)cudaLaunchKernel(fn, dim3((unsigned)blocks), dim3(kColX, kColY),
                               argv, 2 * kColX * kColY * sizeof(float), s);
}

/* ---- the model ----------------------------------------------------------- */

struct gcuda {
  sharc_model_t model; /* ctx points back here */
  gpt_cuda_shape_t cfg;
  int device; /* current when created: the handle's */
  cublasHandle_t blas;
  pthread_mutex_t lock; /* the handle's stream: callbacks share it */
};

/* One stage call, checked (to_call). */
struct call {
  gcuda *g;
  cudaStream_t s;
  int n, global_n;
  size_t N, T, C, V, H; /* N = n*T rows */
  const float *const *p;
  float *const *gr;
  const sharc_stage_call_t *sc;
};

#define TRY(x)                                                                 \
  do {                                                                         \
    int rc_ = (x);                                                             \
    if (rc_ != 0)                                                              \
      return rc_;                                                              \
  } while (0)

/* Row-major C (M,N) = alpha op(A) op(B) + beta C, gpt_impl.h's gemm, as
 * cuBLAS's column-major C^T = op(B)^T op(A)^T. batch > 1: matrix i at
 * A + i*sa, B + i*sb, C + i*sc (elements). Returns 0 or a cublasStatus_t. */
int gemm(const call &c, int ta, int tb, size_t M, size_t N, size_t K,
         float alpha, const float *A, size_t lda, size_t sa, const float *B,
         size_t ldb, size_t sb, float beta, float *Cm, size_t ldc, size_t sc,
         int batch) {
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t st;
  pthread_mutex_lock(&c.g->lock);
  st = cublasSetStream(c.g->blas, c.s);
  if (st == CUBLAS_STATUS_SUCCESS && batch == 1)
    st = cublasSgemm(c.g->blas, ob, oa, (int)N, (int)M, (int)K, &alpha, B,
                     (int)ldb, A, (int)lda, &beta, Cm, (int)ldc);
  else if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasGemmStridedBatchedEx(
        c.g->blas, ob, oa, (int)N, (int)M, (int)K, &alpha, B, CUDA_R_32F,
        (int)ldb, (long long)sb, A, CUDA_R_32F, (int)lda, (long long)sa, &beta,
        Cm, CUDA_R_32F, (int)ldc, (long long)sc, batch, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT);
  pthread_mutex_unlock(&c.g->lock);
  return (int)st;
}

int gemm1(const call &c, int ta, int tb, size_t M, size_t N, size_t K,
          float alpha, const float *A, size_t lda, const float *B, size_t ldb,
          float beta, float *Cm, size_t ldc) {
  return gemm(c, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, Cm, ldc, 0,
              1);
}

/* out (N,OC) = in (N,IC) @ w^T + b; w (OC,IC); b NULL: no bias. */
int linear_fwd(const call &c, float *out, const float *in, const float *w,
               const float *b, size_t N, size_t IC, size_t OC) {
  if (b)
    TRY(launch(bias_fill_k, N * OC, c.s, out, b, N, OC));
  return gemm1(c, 0, 1, N, OC, IC, 1, in, IC, w, IC, b ? 1.0f : 0.0f, out, OC);
}

/* din (N,IC) = dout @ w (when din); dw (OC,IC) += dout^T @ in; db (OC) +=
 * column sums of dout (when db). */
int linear_bwd(const call &c, float *din, float *dw, float *db,
               const float *dout, const float *in, const float *w, size_t N,
               size_t IC, size_t OC) {
  if (din)
    TRY(gemm1(c, 0, 0, N, IC, OC, 1, dout, OC, w, IC, 0, din, IC));
  TRY(gemm1(c, 1, 0, OC, IC, N, 1, dout, OC, in, IC, 1, dw, IC));
  return db ? launch_cols(bias_bwd_k, OC, c.s, db, dout, N, OC) : 0;
}

int layernorm_fwd(const call &c, float *out, float *mean, float *rstd,
                  const float *in, const float *w, const float *b) {
  return launch_rows(layernorm_fwd_k, c.N, c.C, sizeof(float), c.s, out, mean,
                     rstd, in, w, b, c.N, c.C);
}

/* din += the input gradient; dw, db += the parameter gradients. */
int layernorm_bwd(const call &c, float *din, float *dw, float *db,
                  const float *dout, const float *in, const float *mean,
                  const float *rstd, const float *w) {
  TRY(launch_rows(layernorm_bwd_in_k, c.N, c.C, sizeof(float), c.s, din, dout,
                  in, mean, rstd, w, c.N, c.C));
  return launch_cols(layernorm_bwd_par_k, c.C, c.s, dw, db, dout, in, mean,
                     rstd, c.N, c.C);
}

/* ---- buffer layouts (bytes; pieces 256-byte aligned) --------------------- */

size_t carve(const size_t *bytes, int k, size_t *off) {
  size_t at = 0;
  for (int i = 0; i < k; i++) {
    off[i] = at;
    at += (bytes[i] + 255) / 256 * 256;
  }
  return at;
}

/* A block's saved tensors (f32), as gpt.c's. */
enum {
  BS_LN1,
  BS_M1,
  BS_R1,
  BS_QKV,
  BS_ATT,
  BS_ATTY,
  BS_X2,
  BS_LN2,
  BS_M2,
  BS_R2,
  BS_FCH,
  BS_GEL,
  BS_N
};
/* A block's backward scratch (f32): d gel / d fch then d qkv (N,4C); d ln2
 * then d ln1 (N,C); d atty (N,C); d att of every head (n,H,T,T). */
enum { BK_DBIG, BK_DLN, BK_DATTY, BK_DATT, BK_N };
/* The head's saved tensors: lnf (N,C), mean, rstd (N), probs (N,V). */
enum { HS_LN, HS_M, HS_R, HS_PROBS, HS_N };
/* The head's scratch: targets (N int32), row losses and hits (N double
 * each; forward), d lnf (N,C f32; backward). */
enum { HK_TGT, HK_LOSS, HK_OK, HK_DLN, HK_N };
/* Stage 0's scratch: tokens, next position, first-position flags (N int32
 * each). */
enum { EK_TOK, EK_NXT, EK_LEAD, EK_N };

size_t block_saved(const gpt_cuda_shape_t &f, size_t n, size_t *off) {
  size_t T = (size_t)f.ctx, C = (size_t)f.channels, N = n * T;
  size_t H = (size_t)f.heads, fl = sizeof(float);
  size_t b[BS_N] = {N * C * fl,
                    N * fl,
                    N * fl,
                    N * 3 * C * fl,
                    n * H * T * T * fl,
                    N * C * fl,
                    N * C * fl,
                    N * C * fl,
                    N * fl,
                    N * fl,
                    N * 4 * C * fl,
                    N * 4 * C * fl};
  return carve(b, BS_N, off);
}

size_t block_scratch(const gpt_cuda_shape_t &f, size_t n, size_t *off) {
  size_t T = (size_t)f.ctx, C = (size_t)f.channels, N = n * T;
  size_t H = (size_t)f.heads, fl = sizeof(float);
  size_t b[BK_N] = {N * 4 * C * fl, N * C * fl, N * C * fl, n * H * T * T * fl};
  return carve(b, BK_N, off);
}

size_t head_saved(const gpt_cuda_shape_t &f, size_t n, size_t *off) {
  size_t C = (size_t)f.channels, V = (size_t)f.vocab, N = n * (size_t)f.ctx;
  size_t b[HS_N] = {N * C * sizeof(float), N * sizeof(float), N * sizeof(float),
                    N * V * sizeof(float)};
  return carve(b, HS_N, off);
}

size_t head_scratch(const gpt_cuda_shape_t &f, size_t n, size_t *off) {
  size_t C = (size_t)f.channels, N = n * (size_t)f.ctx;
  size_t b[HK_N] = {N * sizeof(int32_t), N * sizeof(double), N * sizeof(double),
                    N * C * sizeof(float)};
  return carve(b, HK_N, off);
}

size_t embed_scratch(const gpt_cuda_shape_t &f, size_t n, size_t *off) {
  size_t N = n * (size_t)f.ctx;
  size_t b[EK_N] = {N * sizeof(int32_t), N * sizeof(int32_t),
                    N * sizeof(int32_t)};
  return carve(b, EK_N, off);
}

template <class T> T *at(void *base, size_t off) {
  return reinterpret_cast<T *>(static_cast<char *>(base) + off);
}

/* 1 when a value of the (N) host tokens is outside [0, V). */
int tokens_bad(const void *p, size_t N, size_t V) {
  const int32_t *x = static_cast<const int32_t *>(p);
  if (!x)
    return 1;
  for (size_t i = 0; i < N; i++)
    if (x[i] < 0 || (size_t)x[i] >= V)
      return 1;
  return 0;
}

/* Copies the (N) host tokens into dev on the stream. */
int tokens_to_device(const call &c, int32_t *dev, const void *host) {
  return (int)cudaMemcpyAsync(dev, host, c.N * sizeof(int32_t),
                              cudaMemcpyHostToDevice, c.s);
}

/* ---- stages -------------------------------------------------------------- */

int embed_fwd(const call &c) {
  size_t off[EK_N];
  embed_scratch(c.g->cfg, (size_t)c.n, off);
  int32_t *tok = at<int32_t>(c.sc->scratch, off[EK_TOK]);
  if (tokens_bad(c.sc->in, c.N, c.V))
    return -1;
  TRY(tokens_to_device(c, tok, c.sc->in));
  return launch(embed_fwd_k, c.N * c.C, c.s, (float *)c.sc->out, tok, c.p[0],
                c.p[1], c.N, c.T, c.C);
}

int embed_bwd(const call &c) {
  size_t off[EK_N];
  embed_scratch(c.g->cfg, (size_t)c.n, off);
  int32_t *tok = at<int32_t>(c.sc->scratch, off[EK_TOK]);
  int32_t *nxt = at<int32_t>(c.sc->scratch, off[EK_NXT]);
  int32_t *lead = at<int32_t>(c.sc->scratch, off[EK_LEAD]);
  const float *dout = static_cast<const float *>(c.sc->dout);
  if (tokens_bad(c.sc->in, c.N, c.V))
    return -1;
  TRY(tokens_to_device(c, tok, c.sc->in));
  TRY(launch(token_chain_k, c.N, c.s, nxt, lead, tok, c.N));
  TRY(launch(embed_wte_bwd_k, c.N * c.C, c.s, c.gr[0], dout, tok, nxt, lead,
             c.N, c.C));
  return launch(embed_wpe_bwd_k, c.T * c.C, c.s, c.gr[1], dout, (size_t)c.n,
                c.T, c.C);
}

/* Causal self-attention of qkv (n,T,3C) into att (n,H,T,T) and atty
 * (n,T,C), per sequence, batched over the heads. */
int attention_fwd(const call &c, float *atty, float *att, const float *qkv) {
  size_t T = c.T, C = c.C, H = c.H, hs = C / H;
  float scale = 1 / sqrtf((float)hs);
  for (size_t b = 0; b < (size_t)c.n; b++) {
    const float *q = qkv + b * T * 3 * C, *k = q + C;
    TRY(gemm(c, 0, 1, T, T, hs, scale, q, 3 * C, hs, k, 3 * C, hs, 0,
             att + b * H * T * T, T, T * T, (int)H));
  }
  TRY(launch_rows(softmax_fwd_k, (size_t)c.n * H * T, T, sizeof(float), c.s,
                  att, (size_t)c.n * H * T, T));
  for (size_t b = 0; b < (size_t)c.n; b++) {
    const float *v = qkv + b * T * 3 * C + 2 * C;
    TRY(gemm(c, 0, 0, T, hs, T, 1, att + b * H * T * T, T, T * T, v, 3 * C, hs,
             0, atty + b * T * C, C, hs, (int)H));
  }
  return 0;
}

/* dqkv (n,T,3C) = the gradient of qkv for datty (n,T,C); datt (n,H,T,T)
 * scratch. */
int attention_bwd(const call &c, float *dqkv, float *datt, const float *datty,
                  const float *att, const float *qkv) {
  size_t T = c.T, C = c.C, H = c.H, hs = C / H, TT = T * T;
  float scale = 1 / sqrtf((float)hs);
  for (size_t b = 0; b < (size_t)c.n; b++) {
    const float *v = qkv + b * T * 3 * C + 2 * C, *dy = datty + b * T * C;
    const float *a = att + b * H * TT;
    float *da = datt + b * H * TT, *dv = dqkv + b * T * 3 * C + 2 * C;
    // datt (T,T) = dy (T,hs) @ v^T; dv (T,hs) = a^T @ dy
    TRY(gemm(c, 0, 1, T, T, hs, 1, dy, C, hs, v, 3 * C, hs, 0, da, T, TT,
             (int)H));
    TRY(gemm(c, 1, 0, T, hs, T, 1, a, T, TT, dy, C, hs, 0, dv, 3 * C, hs,
             (int)H));
  }
  TRY(launch_rows(softmax_bwd_k, (size_t)c.n * H * T, T, sizeof(float), c.s,
                  datt, att, (size_t)c.n * H * T, T, scale));
  for (size_t b = 0; b < (size_t)c.n; b++) {
    const float *q = qkv + b * T * 3 * C, *k = q + C;
    float *dq = dqkv + b * T * 3 * C, *dk = dq + C, *da = datt + b * H * TT;
    // dq (T,hs) = datt @ k; dk (T,hs) = datt^T @ q
    TRY(gemm(c, 0, 0, T, hs, T, 1, da, T, TT, k, 3 * C, hs, 0, dq, 3 * C, hs,
             (int)H));
    TRY(gemm(c, 1, 0, T, hs, T, 1, da, T, TT, q, 3 * C, hs, 0, dk, 3 * C, hs,
             (int)H));
  }
  return 0;
}

int block_fwd(const call &c) {
  size_t N = c.N, C = c.C, off[BS_N];
  block_saved(c.g->cfg, (size_t)c.n, off);
  void *s = c.sc->saved;
  const float *x = static_cast<const float *>(c.sc->in), *const *P = c.p;
  float *out = static_cast<float *>(c.sc->out);
  float *ln1 = at<float>(s, off[BS_LN1]), *qkv = at<float>(s, off[BS_QKV]);
  float *att = at<float>(s, off[BS_ATT]), *atty = at<float>(s, off[BS_ATTY]);
  float *x2 = at<float>(s, off[BS_X2]), *ln2 = at<float>(s, off[BS_LN2]);
  float *fch = at<float>(s, off[BS_FCH]), *gel = at<float>(s, off[BS_GEL]);
  TRY(layernorm_fwd(c, ln1, at<float>(s, off[BS_M1]), at<float>(s, off[BS_R1]),
                    x, P[0], P[1]));
  TRY(linear_fwd(c, qkv, ln1, P[2], P[3], N, C, 3 * C));
  TRY(attention_fwd(c, atty, att, qkv));
  TRY(linear_fwd(c, x2, atty, P[4], P[5], N, C, C));
  TRY(launch(add_k, N * C, c.s, x2, x, N * C));
  TRY(layernorm_fwd(c, ln2, at<float>(s, off[BS_M2]), at<float>(s, off[BS_R2]),
                    x2, P[6], P[7]));
  TRY(linear_fwd(c, fch, ln2, P[8], P[9], N, C, 4 * C));
  TRY(launch(gelu_fwd_k, N * 4 * C, c.s, gel, fch, N * 4 * C));
  TRY(linear_fwd(c, out, gel, P[10], P[11], N, 4 * C, C));
  return launch(add_k, N * C, c.s, out, x2, N * C);
}

/* din accumulates the residual stream's gradient as in gpt_impl.h. */
int block_bwd(const call &c) {
  size_t N = c.N, C = c.C, off[BS_N], sk[BK_N];
  block_saved(c.g->cfg, (size_t)c.n, off);
  block_scratch(c.g->cfg, (size_t)c.n, sk);
  void *s = c.sc->saved, *w = c.sc->scratch;
  const float *x = static_cast<const float *>(c.sc->in), *const *P = c.p;
  const float *dout = static_cast<const float *>(c.sc->dout);
  float *din = static_cast<float *>(c.sc->din), *const *G = c.gr;
  const float *x2 = at<float>(s, off[BS_X2]), *att = at<float>(s, off[BS_ATT]);
  const float *m1 = at<float>(s, off[BS_M1]), *r1 = at<float>(s, off[BS_R1]);
  const float *m2 = at<float>(s, off[BS_M2]), *r2 = at<float>(s, off[BS_R2]);
  float *dbig = at<float>(w, sk[BK_DBIG]), *dln = at<float>(w, sk[BK_DLN]);
  float *datty = at<float>(w, sk[BK_DATTY]), *datt = at<float>(w, sk[BK_DATT]);
  if (din != dout) /* dout is not read after din is first changed */
    TRY((int)cudaMemcpyAsync(din, dout, N * C * sizeof(float),
                             cudaMemcpyDeviceToDevice, c.s));
  // MLP: dbig (N,4C) = d gel, then d fch
  TRY(linear_bwd(c, dbig, G[10], G[11], dout, at<float>(s, off[BS_GEL]), P[10],
                 N, 4 * C, C));
  TRY(launch(gelu_bwd_k, N * 4 * C, c.s, dbig,
             (const float *)at<float>(s, off[BS_FCH]), N * 4 * C));
  TRY(linear_bwd(c, dln, G[8], G[9], dbig, at<float>(s, off[BS_LN2]), P[8], N,
                 C, 4 * C));
  TRY(layernorm_bwd(c, din, G[6], G[7], dln, x2, m2, r2, P[6]));
  // attention: din now holds d x2; dbig (N,3C) becomes d qkv
  TRY(linear_bwd(c, datty, G[4], G[5], din, at<float>(s, off[BS_ATTY]), P[4], N,
                 C, C));
  TRY(attention_bwd(c, dbig, datt, datty, att, at<float>(s, off[BS_QKV])));
  TRY(linear_bwd(c, dln, G[2], G[3], dbig, at<float>(s, off[BS_LN1]), P[2], N,
                 C, 3 * C));
  return layernorm_bwd(c, din, G[0], G[1], dln, x, m1, r1, P[0]);
}

/* lnf, logits (N,V) = lnf @ wte^T, softmax cross-entropy; out gets the
 * statistics (device doubles). */
int head_fwd(const call &c) {
  size_t sv[HS_N], sk[HK_N];
  if (tokens_bad(c.sc->batch->y, c.N, c.V))
    return -1;
  head_saved(c.g->cfg, (size_t)c.n, sv);
  head_scratch(c.g->cfg, (size_t)c.n, sk);
  void *s = c.sc->saved, *w = c.sc->scratch;
  float *ln = at<float>(s, sv[HS_LN]), *probs = at<float>(s, sv[HS_PROBS]);
  int32_t *tgt = at<int32_t>(w, sk[HK_TGT]);
  double *loss = at<double>(w, sk[HK_LOSS]), *ok = at<double>(w, sk[HK_OK]);
  TRY(tokens_to_device(c, tgt, c.sc->batch->y));
  TRY(layernorm_fwd(c, ln, at<float>(s, sv[HS_M]), at<float>(s, sv[HS_R]),
                    static_cast<const float *>(c.sc->in), c.p[2], c.p[3]));
  TRY(linear_fwd(c, probs, ln, c.p[0], nullptr, c.N, c.C, c.V));
  TRY(launch_rows(xent_fwd_k, c.N, c.V, sizeof(float) + sizeof(size_t), c.s,
                  probs, loss, ok, tgt, c.N, c.V));
  return launch(xent_stats_k, 1, c.s, static_cast<double *>(c.sc->out),
                (const double *)loss, (const double *)ok, (size_t)c.n, c.T);
}

/* d logits = (probs - onehot(y)) / (global_n T) over the saved probs,
 * then through the tied head and lnf. */
int head_bwd(const call &c) {
  size_t sv[HS_N], sk[HK_N];
  if (tokens_bad(c.sc->batch->y, c.N, c.V) || c.global_n < 1)
    return -1;
  head_saved(c.g->cfg, (size_t)c.n, sv);
  head_scratch(c.g->cfg, (size_t)c.n, sk);
  void *s = c.sc->saved, *w = c.sc->scratch;
  float *dlog = at<float>(s, sv[HS_PROBS]), *dln = at<float>(w, sk[HK_DLN]);
  int32_t *tgt = at<int32_t>(w, sk[HK_TGT]);
  float *din = static_cast<float *>(c.sc->din);
  float scale = (float)(1.0 / ((double)c.global_n * (double)c.T));
  TRY(tokens_to_device(c, tgt, c.sc->batch->y));
  TRY(launch(xent_bwd_k, c.N * c.V, c.s, dlog, (const int32_t *)tgt, c.N, c.V,
             scale));
  TRY(linear_bwd(c, dln, c.gr[0], nullptr, dlog, at<float>(s, sv[HS_LN]),
                 c.p[0], c.N, c.C, c.V));
  TRY((int)cudaMemsetAsync(din, 0, c.N * c.C * sizeof(float), c.s));
  return layernorm_bwd(c, din, c.gr[2], c.gr[3], dln,
                       static_cast<const float *>(c.sc->in),
                       at<float>(s, sv[HS_M]), at<float>(s, sv[HS_R]), c.p[2]);
}

/* ---- callbacks ----------------------------------------------------------- */

size_t cb_out_bytes(void *ctx, int stage, int n) {
  const gcuda *g = static_cast<const gcuda *>(ctx);
  if (stage == g->model.nstages - 1)
    return SHARC_STAGE_STATS * sizeof(double);
  if (n <= 0 || stage < 0 || stage >= g->model.nstages)
    return 0;
  return (size_t)n * (size_t)g->cfg.ctx * (size_t)g->cfg.channels *
         sizeof(float);
}

enum { SZ_SAVED, SZ_SCRATCH };

/* gpt.h's stage order (gpt_cuda.h): embedding, the blocks, the head. */
enum { EMBED, BLOCK, HEAD };
int kind_of(const gcuda *g, int stage) {
  return stage == 0 ? EMBED : stage == g->model.nstages - 1 ? HEAD : BLOCK;
}

size_t stage_bytes(const gcuda *g, int stage, int n, int what) {
  size_t off[BS_N];
  if (n <= 0 || stage < 0 || stage >= g->model.nstages)
    return 0;
  switch (kind_of(g, stage)) {
  case EMBED:
    return what == SZ_SAVED ? 0 : embed_scratch(g->cfg, (size_t)n, off);
  case BLOCK:
    return what == SZ_SAVED ? block_saved(g->cfg, (size_t)n, off)
                            : block_scratch(g->cfg, (size_t)n, off);
  default:
    return what == SZ_SAVED ? head_saved(g->cfg, (size_t)n, off)
                            : head_scratch(g->cfg, (size_t)n, off);
  }
}

size_t cb_saved_bytes(void *ctx, int stage, int n) {
  return stage_bytes(static_cast<const gcuda *>(ctx), stage, n, SZ_SAVED);
}

size_t cb_scratch_bytes(void *ctx, int stage, int n) {
  return stage_bytes(static_cast<const gcuda *>(ctx), stage, n, SZ_SCRATCH);
}

/* Checks an engine call (stage, unit, n within the int dimensions cuBLAS
 * takes, the calling thread on the handle's device) and restates it. */
int to_call(gcuda *g, const sharc_stage_call_t *sc, call *c) {
  int dev = -1;
  if (!sc || sc->stage < 0 || sc->stage >= g->model.nstages || !sc->batch ||
      sc->batch->n < 0 || sc->unit != g->model.stages[sc->stage].unit ||
      (size_t)sc->batch->n * (size_t)g->cfg.ctx > (size_t)INT_MAX)
    return -1;
  if (cudaGetDevice(&dev) != cudaSuccess || dev != g->device)
    return -1;
  c->g = g;
  c->s = static_cast<cudaStream_t>(sc->cuda_stream);
  c->n = sc->batch->n;
  c->global_n = sc->batch->global_n;
  c->T = (size_t)g->cfg.ctx;
  c->N = (size_t)c->n * c->T;
  c->C = (size_t)g->cfg.channels;
  c->V = (size_t)g->cfg.vocab;
  c->H = (size_t)g->cfg.heads;
  c->p = sc->params;
  c->gr = sc->grads;
  c->sc = sc;
  return 0;
}

int cb_forward(void *ctx, const sharc_stage_call_t *sc) {
  gcuda *g = static_cast<gcuda *>(ctx);
  call c;
  if (to_call(g, sc, &c) != 0)
    return -1;
  int kind = kind_of(g, sc->stage);
  if (c.n == 0)
    return kind == HEAD
               ? (int)cudaMemsetAsync(sc->out, 0,
                                      SHARC_STAGE_STATS * sizeof(double), c.s)
               : 0;
  return kind == EMBED   ? embed_fwd(c)
         : kind == BLOCK ? block_fwd(c)
                         : head_fwd(c);
}

int cb_backward(void *ctx, const sharc_stage_call_t *sc) {
  gcuda *g = static_cast<gcuda *>(ctx);
  call c;
  if (to_call(g, sc, &c) != 0)
    return -1;
  if (c.n == 0)
    return 0;
  int kind = kind_of(g, sc->stage);
  return kind == EMBED   ? embed_bwd(c)
         : kind == BLOCK ? block_bwd(c)
                         : head_bwd(c);
}

void say(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void say(char *why, size_t whylen, const char *fmt, ...) {
  if (why == nullptr || whylen == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
}

} /* namespace */

extern "C" {

const sharc_model_t *gpt_cuda_create(const sharc_model_t *host,
                                     const gpt_cuda_shape_t *shape, char *why,
                                     size_t whylen) {
  int ndev = 0, dev = 0;
  if (!host || !shape || host->nstages != shape->layers + 2) {
    say(why, whylen, "gpt: the CUDA model needs gpt.c's model and shape");
    return nullptr;
  }
  cudaError_t err = cudaGetDeviceCount(&ndev);
  if (err != cudaSuccess || ndev <= 0) {
    say(why, whylen,
        "gpt: no usable CUDA device (cudaGetDeviceCount: %s, %d "
        "devices)",
        err != cudaSuccess ? cudaGetErrorName(err) : "cudaSuccess", ndev);
    (void)cudaGetLastError();
    return nullptr;
  }
  /* Loading one kernel proves the binary has code this device runs. */
  cudaFuncAttributes attr;
  err = cudaGetDevice(&dev);
  if (err == cudaSuccess)
    err = cudaFuncGetAttributes(&attr, reinterpret_cast<const void *>(add_k));
  if (err != cudaSuccess) {
    say(why, whylen,
        "gpt: device %d cannot run the model's kernels: %s: %s "
        "(this build: %s)",
        dev, cudaGetErrorName(err), cudaGetErrorString(err), SHARC_CUDA_ARCHS);
    (void)cudaGetLastError();
    return nullptr;
  }
  gcuda *g = static_cast<gcuda *>(calloc(1, sizeof *g));
  if (!g) {
    say(why, whylen, "gpt: out of memory creating the CUDA model");
    return nullptr;
  }
  cublasStatus_t st = cublasCreate(&g->blas);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasSetPointerMode(g->blas, CUBLAS_POINTER_MODE_HOST);
  if (st == CUBLAS_STATUS_SUCCESS) /* full f32: no TF32 */
    st = cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) {
    say(why, whylen, "gpt: cuBLAS on device %d: %s: %s", dev,
        cublasGetStatusName(st), cublasGetStatusString(st));
    if (g->blas)
      cublasDestroy(g->blas);
    free(g);
    return nullptr;
  }
  pthread_mutex_init(&g->lock, nullptr);
  g->cfg = *shape;
  g->device = dev;
  g->model = *host;
  g->model.ctx = g;
  g->model.out_bytes = cb_out_bytes;
  g->model.saved_bytes = cb_saved_bytes;
  g->model.scratch_bytes = cb_scratch_bytes;
  g->model.forward = cb_forward;
  g->model.backward = cb_backward;
  g->model.device = SHARC_DEVICE_CUDA;
  return &g->model;
}

void gpt_cuda_destroy(const sharc_model_t *m) {
  if (!m)
    return;
  gcuda *g = static_cast<gcuda *>(m->ctx);
  cublasDestroy(g->blas);
  pthread_mutex_destroy(&g->lock);
  free(g);
}

} /* extern "C" */

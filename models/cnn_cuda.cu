/*
 * cnn_cuda.cu - the reference CNN (cnn.h) as a SHARC_DEVICE_CUDA model,
 * cnn_cuda_model's: the same units, stages and layer math as the host
 * callbacks of cnn.c / cnn_impl.h, with the GEMMs on cuBLAS and the rest in
 * small grid-stride kernels where each output element belongs to one
 * thread, except the convolutions' bias gradients: a block per channel
 * with a fixed-order tree in shared memory (models/cuda_block.cuh). No
 * atomics: results do not depend on the schedule, and softcuda runs the
 * kernels as they are (the tree on its cooperative blocks).
 *
 * What differs from the host model:
 *  - the GEMMs' summation order: cuBLAS's (on softcuda, OpenBLAS's), and a
 *    convolution is one GEMM over the whole micro-batch where the host runs
 *    one per sample (the weight gradients sum over all samples and
 *    positions in one product of depth n*P). Results differ in the last
 *    bits; tests/gpu/test_cnn_cuda.c bounds the difference;
 *  - the log-softmax's exp and log are CUDA's double functions (within an
 *    ulp or two of glibc's);
 *  - the convolutions' bias gradients: a tree over each channel's n * P
 *    terms (the host: per sample, eight partial sums per row);
 *  - layouts: the im2col matrices and the conv pre-activations and their
 *    gradients are channel-major over the micro-batch, (rows, n, P), so a
 *    convolution is one GEMM; stage outputs and saved flags keep the host's
 *    layouts (the flags byte for byte).
 * What is the same, operation for operation: the dropout masks
 * (cnn_defs.h's hash), ReLU, the pooling tie rule (first maximum), the
 * flags, the dropout scaling, the fully connected layers' bias-gradient
 * sums (rows in order), col2im's order (ky, then kx), the softmax in
 * double and the statistics summed over samples in order.
 *
 * Buffers (n samples; sub-buffers start 256-byte aligned):
 *   stage 0 conv1  scratch x (n,784) copied from batch->x, col (9,n,676),
 *                  dpre (32,n,676) (backward); saved nothing.
 *   stage 1 conv2  saved flags (n,9216) bytes, as the host's; scratch col
 *                  (288,n,576) (in backward also the gradient of col) and
 *                  pre or dpre (64,n,576).
 *   stage 2 fc1    saved flags (n,128) bytes; scratch dpre (n,128).
 *   stage 3 fc2    saved lp (n,10) f32 then the labels (n) int32 copied
 *                  from batch->y; scratch: forward each sample's lp of its
 *                  label (n) f64 and hit (n) int32; backward dlogits (n,10).
 * With nvcc every stage's scratch also ends with cuBLAS's workspace (one
 * per call, so GEMMs of engines on other streams never share one).
 *
 * Built with --fmad=false --prec-div=true --ftz=false (on softcuda, as host
 * C++ with -ffp-contract=off): IEEE arithmetic as on the host.
 */
#include "cnn_defs.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_block.cuh"

namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;
constexpr size_t kAlign = 256; /* bytes, sub-buffer alignment */
#if defined(__CUDACC__)
/* cuBLAS's recommended workspace for pre-Hopper parts; a smaller one only
 * limits its choice of algorithms. */
constexpr size_t kWorkspace = size_t(4) << 20;
#else
constexpr size_t kWorkspace = 0; /* softcublas has no workspace */
#endif

struct cnn_cuda {
  sharc_model_t model; /* model.ctx points here */
  uint64_t seed;
  int dropout;
  cublasHandle_t blas;
  pthread_mutex_t lock; /* the handle's stream and workspace, per GEMM */
};

size_t up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

/* ---- kernels ----------------------------------------------------------------
 * Grid-stride loops over size_t indices; every kernel writes each output
 * element from exactly one thread. */

__device__ __forceinline__ size_t first_index() {
  return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t stride() {
  return (size_t)gridDim.x * blockDim.x;
}

/* col (c*9, n, P), P = (h-2)*(w-2), from in (n, c, h, w): row ch*9+ky*3+kx,
 * column (i, oy*(w-2)+ox) holds in (i, ch, oy+ky, ox+kx). */
__global__ void im2col(const float *in, int c, int h, int w, int n,
                       float *col) {
  const int ow = w - 2;
  const size_t P = (size_t)(h - 2) * ow, total = (size_t)c * 9 * n * P;
  for (size_t t = first_index(); t < total; t += stride()) {
    const size_t p = t % P, i = t / P % n, r = t / P / n;
    const int ch = (int)(r / 9), ky = (int)(r % 9 / 3), kx = (int)(r % 3);
    const int oy = (int)(p / ow), ox = (int)(p % ow);
    col[t] = in[((i * c + ch) * h + oy + ky) * w + ox + kx];
  }
}

/* in (n, c, h, w) = the adjoint of im2col: each element sums the col
 * entries copied from it, ky then kx ascending (cnn_impl.h's order). */
__global__ void col2im(const float *col, int c, int h, int w, int n,
                       float *in) {
  const int oh = h - 2, ow = w - 2;
  const size_t P = (size_t)oh * ow, total = (size_t)n * c * h * w;
  for (size_t t = first_index(); t < total; t += stride()) {
    const int x = (int)(t % w), y = (int)(t / w % h);
    const int ch = (int)(t / ((size_t)w * h) % c);
    const size_t i = t / ((size_t)w * h * c);
    float s = 0;
    for (int ky = 0; ky < 3; ky++) {
      const int oy = y - ky;
      if (oy < 0 || oy >= oh)
        continue;
      for (int kx = 0; kx < 3; kx++) {
        const int ox = x - kx;
        if (ox < 0 || ox >= ow)
          continue;
        s += col[((size_t)(ch * 9 + ky * 3 + kx) * n + i) * P + oy * ow + ox];
      }
    }
    in[t] = s;
  }
}

/* out (rows, cols) = b[row % nb] along each row. */
__global__ void fill_rows(float *out, const float *b, size_t rows, size_t cols,
                          int nb) {
  const size_t total = rows * cols;
  for (size_t t = first_index(); t < total; t += stride())
    out[t] = b[t / cols % nb];
}

__global__ void relu(float *x, size_t count) {
  for (size_t t = first_index(); t < count; t += stride())
    x[t] = x[t] > 0 ? x[t] : 0;
}

/* dpre (c, n, p) = d where a > 0, else 0; a and d are (n, c, p). */
__global__ void relu_bwd(const float *a, const float *d, int n, int c, int p,
                         float *dpre) {
  const size_t total = (size_t)c * n * p;
  for (size_t t = first_index(); t < total; t += stride()) {
    const size_t q = t % p, i = t / p % n, ch = t / p / n;
    const size_t src = (i * c + ch) * p + q;
    const float g = d[src];
    dpre[t] = a[src] > 0 ? g : 0;
  }
}

/* gb (rows) += row sums of d (rows, n, cols): a block per row (its n *
 * cols elements are contiguous), block_sum's fixed order
 * (cuda_block.cuh; kThreads floats of shared memory). One thread per row
 * summed up to 36,864 elements serially: the conv bias gradients left
 * 32 or 64 threads for the whole GPU. */
__global__ void add_row_sums(float *gb, const float *d, int rows, int n,
                             int cols) {
  SHARC_DYNAMIC_SHARED(float, sh);
  const size_t len = (size_t)n * cols;
  for (size_t r = blockIdx.x; r < (size_t)rows; r += gridDim.x) {
    const float *row = d + r * len;
    float acc = 0;
    for (size_t j = threadIdx.x; j < len; j += blockDim.x)
      acc += row[j];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0)
      gb[r] += acc;
  }
}

/* gb (cols) += column sums of d (rows, cols), rows in order. */
__global__ void add_col_sums(float *gb, const float *d, int rows, int cols) {
  for (size_t j = first_index(); j < (size_t)cols; j += stride()) {
    float g = gb[j];
    for (int r = 0; r < rows; r++)
      g += d[(size_t)r * cols + j];
    gb[j] = g;
  }
}

/* Stage 1 after the GEMM: ReLU, 2x2 max-pool (first maximum), dropout.
 * pre (64, n, 576) -> a2 (n, 9216) and flags (n, 9216) as cnn_impl.h's
 * conv2_fwd: bits 0-1 the window position, bit 2 max > 0, bit 3 kept. */
__global__ void pool_fwd(drop_t d, const float *pre, int n, float scale,
                         float *a2, uint8_t *flags) {
  const size_t total = (size_t)n * FLAT;
  for (size_t t = first_index(); t < total; t += stride()) {
    const size_t i = t / FLAT;
    const int e = (int)(t % FLAT);
    const int c = e / (HP * HP), py = e / HP % HP, px = e % HP;
    const float *q = pre + ((size_t)c * n + i) * P2 + 2 * py * H2 + 2 * px;
    const float v[4] = {q[0], q[1], q[H2], q[H2 + 1]};
    float m = v[0];
    int k = 0;
    for (int s = 1; s < 4; s++) {
      const int gt = v[s] > m;
      k = gt ? s : k;
      m = gt ? v[s] : m;
    }
    const int pos = m > 0;
    const int kept = !d.on || drop_keep(drop_key(&d, 1, d.first + i),
                                        (uint64_t)e, DROP1_THR);
    a2[t] = pos && kept ? m * scale : 0;
    flags[t] = (uint8_t)(k | pos << 2 | kept << 3);
  }
}

/* dpre (64, n, 576): the pooled gradient g (n, 9216) times scale at each
 * window's recorded maximum where ReLU and dropout passed, else 0. */
__global__ void pool_bwd(const uint8_t *flags, const float *g, int n,
                         float scale, float *dpre) {
  const size_t total = (size_t)C2 * n * P2;
  for (size_t t = first_index(); t < total; t += stride()) {
    const int p = (int)(t % P2);
    const size_t i = t / P2 % n, c = t / P2 / n;
    const int y = p / H2, x = p % H2;
    const size_t e = i * FLAT + (c * HP + y / 2) * HP + x / 2;
    const int f = flags[e];
    const int at = (y % 2) * 2 + x % 2;
    dpre[t] = (f & 12) == 12 && (f & 3) == at ? g[e] * scale : 0;
  }
}

/* Stage 2 after the GEMM: bias, ReLU, dropout on a3 (n, 128) in place;
 * flags bit 0 ReLU passes, bit 1 kept. */
__global__ void fc1_act(drop_t d, const float *b, int n, float scale, float *a3,
                        uint8_t *flags) {
  const size_t total = (size_t)n * F1;
  for (size_t t = first_index(); t < total; t += stride()) {
    const size_t i = t / F1;
    const int j = (int)(t % F1);
    const float v = a3[t] + b[j];
    const int pos = v > 0;
    const int kept = !d.on || drop_keep(drop_key(&d, 2, d.first + i),
                                        (uint64_t)j, DROP2_THR);
    a3[t] = pos && kept ? v * scale : 0;
    flags[t] = (uint8_t)(pos | kept << 1);
  }
}

__global__ void fc1_bwd(const float *da3, const uint8_t *flags, size_t count,
                        float scale, float *dpre) {
  for (size_t t = first_index(); t < count; t += stride()) {
    const float g = da3[t] * scale;
    dpre[t] = flags[t] == 3 ? g : 0;
  }
}

/* Stage 3 after the GEMM, one thread per sample: lp (n, 10) holds the
 * logits without bias; adds it, finds the first maximum, turns the row
 * into log-probabilities (in double, as the host) and records the
 * log-probability of the label and whether the maximum was it. */
__global__ void fc2_softmax(const float *b, const int32_t *y, int n, float *lp,
                            double *lpy, int32_t *hit) {
  for (size_t i = first_index(); i < (size_t)n; i += stride()) {
    float *z = lp + i * NCLS;
    int arg = 0;
    for (int j = 0; j < NCLS; j++) {
      z[j] += b[j];
      if (z[j] > z[arg])
        arg = j;
    }
    const double m = (double)z[arg];
    double s = 0;
    for (int j = 0; j < NCLS; j++)
      s += exp((double)z[j] - m);
    const double lse = m + log(s);
    for (int j = 0; j < NCLS; j++)
      z[j] = (float)((double)z[j] - lse);
    lpy[i] = (double)z[y[i]];
    hit[i] = arg == y[i];
  }
}

/* One thread: the statistics summed over samples in order (NLL, hits). */
__global__ void fc2_stats(const double *lpy, const int32_t *hit, int n,
                          double *stats) {
  if (first_index() != 0)
    return;
  double loss = 0, correct = 0;
  for (int i = 0; i < n; i++) {
    loss -= lpy[i];
    correct += hit[i];
  }
  stats[0] = loss;
  stats[1] = correct;
}

/* dlogits (n, 10) of the loss sum / global_n (inv = 1 / global_n). */
__global__ void fc2_dz(const float *lp, const int32_t *y, int n, double inv,
                       float *dz) {
  const size_t total = (size_t)n * NCLS;
  for (size_t t = first_index(); t < total; t += stride()) {
    const int j = (int)(t % NCLS);
    dz[t] = (float)((exp((double)lp[t]) - (j == y[t / NCLS])) * inv);
  }
}

/* ---- launches, GEMMs, errors ------------------------------------------- */

template <class T> struct same { using type = T; };

/* k over `work` elements on stream s: one thread per element up to
 * kMaxBlocks blocks, grid-stride beyond. The arguments convert to the
 * kernel's parameter types (a launch copies them, as CUDA's does). */
template <class... P>
cudaError_t launch(void (*k)(P...), size_t work, cudaStream_t s,
                   typename same<P>::type... a) {
  if (work == 0)
    return cudaSuccess;
  size_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks)
    blocks = kMaxBlocks;
  void *args[] = {static_cast<void *>(&a)...};
  /* The typed pointer (the runtime's template overload): softcuda's
   * launcher (tests/softcuda/cuda_host.h) needs the argument types. */
  return cudaLaunchKernel(k, dim3((unsigned)blocks), dim3(kThreads), args, 0,
                          s);
}

/* k with a block of kThreads per row, rows blocks (up to kMaxBlocks,
 * blocks taking more rows beyond) and kThreads floats of shared memory:
 * the row kernels (add_row_sums). */
template <class... P>
cudaError_t launch_rows(void (*k)(P...), size_t rows, cudaStream_t s,
                        typename same<P>::type... a) {
  if (rows == 0)
    return cudaSuccess;
  size_t blocks = rows < kMaxBlocks ? rows : kMaxBlocks;
  void *args[] = {static_cast<void *>(&a)...};
  return cudaLaunchKernel(k, dim3((unsigned)blocks), dim3(kThreads), args,
                          kThreads * sizeof(float), s);
}

bool ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  fprintf(stderr, "cnn_cuda: %s: %s: %s\n", what, cudaGetErrorName(e),
          cudaGetErrorString(e));
  return false;
}

bool ok(cublasStatus_t e, const char *what) {
  if (e == CUBLAS_STATUS_SUCCESS)
    return true;
  fprintf(stderr, "cnn_cuda: %s: %s: %s\n", what, cublasGetStatusName(e),
          cublasGetStatusString(e));
  return false;
}

#define TRY(call)                                                              \
  do {                                                                         \
    if (!ok((call), #call))                                                    \
      return -1;                                                               \
  } while (0)

/* One row-major GEMM as cblas_sgemm(CblasRowMajor, ...) takes it, over
 * count matrices sa, sb, sc elements apart (count 1: one GEMM):
 * C (m, n) = op(A) op(B) + beta C. cuBLAS is column major, where a
 * row-major matrix is its transpose, so it computes C^T = op(B)^T op(A)^T
 * with the operands swapped and the same transposes. */
struct gemm_t {
  bool ta, tb;
  int m, n, k;
  const float *a;
  int lda;
  const float *b;
  int ldb;
  float beta;
  float *c;
  int ldc;
  long long sa, sb, sc;
  int count;
};

int gemm(cnn_cuda *g, cudaStream_t s, void *workspace, const gemm_t &q) {
  const float one = 1;
  const cublasOperation_t ta = q.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = q.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t st;
  /* The handle's stream (and workspace) are per handle: set and used
   * under one lock, so that threads sharing the model do not mix them. */
  pthread_mutex_lock(&g->lock);
  st = cublasSetStream(g->blas, s);
#if defined(__CUDACC__)
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasSetWorkspace(g->blas, workspace, kWorkspace);
#else
  (void)workspace;
#endif
  if (st == CUBLAS_STATUS_SUCCESS && q.count == 1)
    st = cublasSgemm(g->blas, tb, ta, q.n, q.m, q.k, &one, q.b, q.ldb, q.a,
                     q.lda, &q.beta, q.c, q.ldc);
  else if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasGemmStridedBatchedEx(
        g->blas, tb, ta, q.n, q.m, q.k, &one, q.b, CUDA_R_32F, q.ldb, q.sb, q.a,
        CUDA_R_32F, q.lda, q.sa, &q.beta, q.c, CUDA_R_32F, q.ldc, q.sc, q.count,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  pthread_mutex_unlock(&g->lock);
  return ok(st, "cublas GEMM") ? 0 : -1;
}

/* A plain GEMM (count 1). */
gemm_t mm(bool ta, bool tb, int m, int n, int k, const float *a, int lda,
          const float *b, int ldb, float beta, float *c, int ldc) {
  return gemm_t{ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, 0, 0, 0, 1};
}

/* ---- buffer sizes ------------------------------------------------------- */

size_t cuda_out_bytes(void *ctx, int stage, int n) {
  static const size_t per[NSTAGES] = {A1_NUMEL, FLAT, F1, 0};
  if (stage == NSTAGES - 1)
    return SHARC_STAGE_STATS * sizeof(double);
  if (stage < 0 || stage >= NSTAGES || n <= 0)
    return 0;
  return per[stage] * (size_t)n * sizeof(float);
}

size_t cuda_saved_bytes(void *ctx, int stage, int n) {
  const size_t k = n > 0 ? (size_t)n : 0;
  switch (stage) {
  case 1:
    return k * FLAT;
  case 2:
    return k * F1;
  case 3:
    return k ? up(k * NCLS * sizeof(float)) + k * sizeof(int32_t) : 0;
  default:
    return 0;
  }
}

/* Without the workspace. */
size_t stage_scratch(int stage, size_t n) {
  const size_t f = sizeof(float);
  switch (stage) {
  case 0:
    return up(n * IMG_PIX * f) + up(9 * n * P1 * f) +
           up((size_t)C1 * n * P1 * f);
  case 1:
    return up((size_t)C1 * 9 * n * P2 * f) + up((size_t)C2 * n * P2 * f);
  case 2:
    return up(n * F1 * f);
  default: {
    const size_t fwd = up(n * sizeof(double)) + up(n * sizeof(int32_t));
    const size_t bwd = up(n * NCLS * f);
    return fwd > bwd ? fwd : bwd;
  }
  }
}

size_t cuda_scratch_bytes(void *ctx, int stage, int n) {
  if (n <= 0 || stage < 0 || stage >= NSTAGES)
    return 0;
  return stage_scratch(stage, (size_t)n) + kWorkspace;
}

/* cuBLAS's workspace: the end of the call's scratch (NULL without one). */
void *workspace_of(const sharc_stage_call_t *call, int n) {
  if (kWorkspace == 0)
    return nullptr;
  return static_cast<char *>(call->scratch) +
         stage_scratch(call->stage, (size_t)n);
}

/* ---- stages ------------------------------------------------------------- */

float drop_scale(const drop_t &d, double p) {
  return d.on ? (float)(1.0 / (1.0 - p)) : 1.0f;
}

/* A pointer `bytes` (rounded up to kAlign) past p. */
template <class T> T *after(void *p, size_t bytes) {
  return reinterpret_cast<T *>(static_cast<char *>(p) + up(bytes));
}

int conv1_fwd(cnn_cuda *g, const sharc_stage_call_t *call, cudaStream_t s,
              int n) {
  const float *w = call->params[0], *b = call->params[1];
  float *xs = static_cast<float *>(call->scratch);
  float *col = after<float>(xs, (size_t)n * IMG_PIX * sizeof(float));
  float *a1 = static_cast<float *>(call->out);
  TRY(cudaMemcpyAsync(xs, call->batch->x, (size_t)n * IMG_PIX * sizeof(float),
                      cudaMemcpyHostToDevice, s));
  TRY(launch(im2col, (size_t)9 * n * P1, s, xs, 1, IMG_HW, IMG_HW, n, col));
  TRY(launch(fill_rows, (size_t)n * A1_NUMEL, s, a1, b, (size_t)n * C1,
             (size_t)P1, C1));
  /* per sample: a1_i (32, 676) += w (32, 9) @ col_i (9, 676), col_i
   * being columns i*676.. of col (9, n*676) */
  gemm_t q = {false,  false, C1, P1, 9, w,  9,        col,
              n * P1, 1.0f,  a1, P1, 0, P1, A1_NUMEL, n};
  if (gemm(g, s, workspace_of(call, n), q) != 0)
    return -1;
  TRY(launch(relu, (size_t)n * A1_NUMEL, s, a1, (size_t)n * A1_NUMEL));
  return 0;
}

int conv1_bwd(cnn_cuda *g, const sharc_stage_call_t *call, cudaStream_t s,
              int n) {
  float *gw = call->grads[0], *gb = call->grads[1];
  const size_t f = sizeof(float);
  float *xs = static_cast<float *>(call->scratch);
  float *col = after<float>(xs, (size_t)n * IMG_PIX * f);
  float *dpre = after<float>(col, (size_t)9 * n * P1 * f);
  TRY(cudaMemcpyAsync(xs, call->batch->x, (size_t)n * IMG_PIX * f,
                      cudaMemcpyHostToDevice, s));
  TRY(launch(relu_bwd, (size_t)C1 * n * P1, s,
             static_cast<const float *>(call->out),
             static_cast<const float *>(call->dout), n, C1, P1, dpre));
  TRY(launch_rows(add_row_sums, C1, s, gb, dpre, C1, n, P1));
  TRY(launch(im2col, (size_t)9 * n * P1, s, xs, 1, IMG_HW, IMG_HW, n, col));
  /* gw (32, 9) += dpre (32, n*676) @ col^T */
  return gemm(
      g, s, workspace_of(call, n),
      mm(false, true, C1, 9, n * P1, dpre, n * P1, col, n * P1, 1, gw, 9));
}

int conv2_fwd(cnn_cuda *g, const sharc_stage_call_t *call, cudaStream_t s,
              int n, const drop_t &d) {
  const float *w = call->params[0], *b = call->params[1];
  const float *a1 = static_cast<const float *>(call->in);
  float *col = static_cast<float *>(call->scratch);
  float *pre = after<float>(col, (size_t)C1 * 9 * n * P2 * sizeof(float));
  TRY(launch(im2col, (size_t)C1 * 9 * n * P2, s, a1, C1, H1, H1, n, col));
  TRY(launch(fill_rows, (size_t)C2 * n * P2, s, pre, b, (size_t)C2,
             (size_t)n * P2, C2));
  /* pre (64, n*576) += w (64, 288) @ col (288, n*576) */
  if (gemm(g, s, workspace_of(call, n),
           mm(false, false, C2, n * P2, C1 * 9, w, C1 * 9, col, n * P2, 1, pre,
              n * P2)) != 0)
    return -1;
  TRY(launch(pool_fwd, (size_t)n * FLAT, s, d, pre, n, drop_scale(d, DROP1_P),
             static_cast<float *>(call->out),
             static_cast<uint8_t *>(call->saved)));
  return 0;
}

int conv2_bwd(cnn_cuda *g, const sharc_stage_call_t *call, cudaStream_t s,
              int n, const drop_t &d) {
  const float *w = call->params[0];
  float *gw = call->grads[0], *gb = call->grads[1];
  const float *a1 = static_cast<const float *>(call->in);
  float *col = static_cast<float *>(call->scratch);
  float *dpre = after<float>(col, (size_t)C1 * 9 * n * P2 * sizeof(float));
  void *ws = workspace_of(call, n);
  TRY(launch(pool_bwd, (size_t)C2 * n * P2, s,
             static_cast<const uint8_t *>(call->saved),
             static_cast<const float *>(call->dout), n, drop_scale(d, DROP1_P),
             dpre));
  TRY(launch_rows(add_row_sums, C2, s, gb, dpre, C2, n, P2));
  TRY(launch(im2col, (size_t)C1 * 9 * n * P2, s, a1, C1, H1, H1, n, col));
  /* gw (64, 288) += dpre (64, n*576) @ col^T */
  if (gemm(g, s, ws,
           mm(false, true, C2, C1 * 9, n * P2, dpre, n * P2, col, n * P2, 1, gw,
              C1 * 9)) != 0)
    return -1;
  if (!call->din)
    return 0;
  /* dcol (288, n*576) = w^T @ dpre, into col (the GEMM above, earlier on
   * the stream, has read it) */
  if (gemm(g, s, ws,
           mm(true, false, C1 * 9, n * P2, C2, w, C1 * 9, dpre, n * P2, 0, col,
              n * P2)) != 0)
    return -1;
  TRY(launch(col2im, (size_t)n * A1_NUMEL, s, col, C1, H1, H1, n,
             static_cast<float *>(call->din)));
  return 0;
}

int fc1_fwd(cnn_cuda *g, const sharc_stage_call_t *call, cudaStream_t s, int n,
            const drop_t &d) {
  const float *w = call->params[0], *b = call->params[1];
  float *a3 = static_cast<float *>(call->out);
  /* a3 (n, 128) = a2 (n, 9216) @ w^T */
  if (gemm(g, s, workspace_of(call, n),
           mm(false, true, n, F1, FLAT, static_cast<const float *>(call->in),
              FLAT, w, FLAT, 0, a3, F1)) != 0)
    return -1;
  TRY(launch(fc1_act, (size_t)n * F1, s, d, b, n, drop_scale(d, DROP2_P), a3,
             static_cast<uint8_t *>(call->saved)));
  return 0;
}

int fc1_bwd_stage(cnn_cuda *g, const sharc_stage_call_t *call, cudaStream_t s,
                  int n, const drop_t &d) {
  const float *w = call->params[0];
  float *gw = call->grads[0], *gb = call->grads[1];
  const float *a2 = static_cast<const float *>(call->in);
  float *dpre = static_cast<float *>(call->scratch);
  void *ws = workspace_of(call, n);
  TRY(launch(fc1_bwd, (size_t)n * F1, s, static_cast<const float *>(call->dout),
             static_cast<const uint8_t *>(call->saved), (size_t)n * F1,
             drop_scale(d, DROP2_P), dpre));
  TRY(launch(add_col_sums, F1, s, gb, dpre, n, F1));
  /* gw (128, 9216) += dpre^T (128, n) @ a2 (n, 9216) */
  if (gemm(g, s, ws,
           mm(true, false, F1, FLAT, n, dpre, F1, a2, FLAT, 1, gw, FLAT)) != 0)
    return -1;
  if (!call->din)
    return 0;
  /* din (n, 9216) = dpre (n, 128) @ w (128, 9216) */
  return gemm(g, s, ws,
              mm(false, false, n, FLAT, F1, dpre, F1, w, FLAT, 0,
                 static_cast<float *>(call->din), FLAT));
}

int fc2_fwd(cnn_cuda *g, const sharc_stage_call_t *call, cudaStream_t s,
            int n) {
  const float *w = call->params[0], *b = call->params[1];
  const int32_t *y = static_cast<const int32_t *>(call->batch->y);
  /* Labels are host memory: checked here, before anything is queued. */
  for (int i = 0; i < n; i++)
    if (y[i] < 0 || y[i] >= NCLS) {
      fprintf(stderr,
              "cnn_cuda: label %d of sample %d (global %llu) is outside "
              "0..%d\n",
              (int)y[i], i, (unsigned long long)(call->batch->first + i),
              NCLS - 1);
      return -1;
    }
  float *lp = static_cast<float *>(call->saved);
  int32_t *ys = after<int32_t>(lp, (size_t)n * NCLS * sizeof(float));
  double *lpy = static_cast<double *>(call->scratch);
  int32_t *hit = after<int32_t>(lpy, (size_t)n * sizeof(double));
  TRY(cudaMemcpyAsync(ys, y, (size_t)n * sizeof(int32_t),
                      cudaMemcpyHostToDevice, s));
  /* lp (n, 10) = a3 (n, 128) @ w^T */
  if (gemm(g, s, workspace_of(call, n),
           mm(false, true, n, NCLS, F1, static_cast<const float *>(call->in),
              F1, w, F1, 0, lp, NCLS)) != 0)
    return -1;
  TRY(launch(fc2_softmax, (size_t)n, s, b, ys, n, lp, lpy, hit));
  TRY(launch(fc2_stats, 1, s, lpy, hit, n, static_cast<double *>(call->out)));
  return 0;
}

int fc2_bwd(cnn_cuda *g, const sharc_stage_call_t *call, cudaStream_t s,
            int n) {
  const float *w = call->params[0];
  float *gw = call->grads[0], *gb = call->grads[1];
  const float *a3 = static_cast<const float *>(call->in);
  const float *lp = static_cast<const float *>(call->saved);
  const int32_t *ys =
      after<int32_t>(call->saved, (size_t)n * NCLS * sizeof(float));
  float *dz = static_cast<float *>(call->scratch);
  void *ws = workspace_of(call, n);
  if (call->batch->global_n < 1)
    return -1;
  TRY(launch(fc2_dz, (size_t)n * NCLS, s, lp, ys, n,
             1.0 / call->batch->global_n, dz));
  TRY(launch(add_col_sums, NCLS, s, gb, dz, n, NCLS));
  /* gw (10, 128) += dz^T (10, n) @ a3 (n, 128) */
  if (gemm(g, s, ws, mm(true, false, NCLS, F1, n, dz, NCLS, a3, F1, 1, gw, F1)))
    return -1;
  if (!call->din)
    return 0;
  /* din (n, 128) = dz (n, 10) @ w (10, 128) */
  return gemm(g, s, ws,
              mm(false, false, n, F1, NCLS, dz, NCLS, w, F1, 0,
                 static_cast<float *>(call->din), F1));
}

drop_t drop_of(const cnn_cuda *g, const sharc_batch_t *b) {
  drop_t d = {g->seed, b->step, b->first, g->dropout && b->training == 1};
  return d;
}

int cuda_forward(void *ctx, const sharc_stage_call_t *call) {
  cnn_cuda *g = static_cast<cnn_cuda *>(ctx);
  cudaStream_t s = static_cast<cudaStream_t>(call->cuda_stream);
  const int n = call->batch->n;
  if (call->stage == NSTAGES - 1 && n <= 0)
    TRY(cudaMemsetAsync(call->out, 0, SHARC_STAGE_STATS * sizeof(double), s));
  if (n < 0 || call->stage < 0 || call->stage >= NSTAGES)
    return -1;
  if (n == 0)
    return 0;
  const drop_t d = drop_of(g, call->batch);
  switch (call->stage) {
  case 0:
    return conv1_fwd(g, call, s, n);
  case 1:
    return conv2_fwd(g, call, s, n, d);
  case 2:
    return fc1_fwd(g, call, s, n, d);
  default:
    return fc2_fwd(g, call, s, n);
  }
}

int cuda_backward(void *ctx, const sharc_stage_call_t *call) {
  cnn_cuda *g = static_cast<cnn_cuda *>(ctx);
  cudaStream_t s = static_cast<cudaStream_t>(call->cuda_stream);
  const int n = call->batch->n;
  if (n < 0 || call->stage < 0 || call->stage >= NSTAGES)
    return -1;
  if (n == 0)
    return 0;
  const drop_t d = drop_of(g, call->batch);
  switch (call->stage) {
  case 0:
    return conv1_bwd(g, call, s, n);
  case 1:
    return conv2_bwd(g, call, s, n, d);
  case 2:
    return fc1_bwd_stage(g, call, s, n, d);
  default:
    return fc2_bwd(g, call, s, n);
  }
}

void say(char *why, size_t whylen, const char *what, const char *name,
         const char *text) {
  if (why && whylen)
    snprintf(why, whylen, "cnn_cuda: %s: %s: %s", what, name, text);
}

} /* namespace */

extern "C" {

const sharc_model_t *cnn_cuda_open(const sharc_model_t *host, uint64_t seed,
                                   int dropout, char *why, size_t whylen) {
  int count = 0, dev = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count <= 0)
    e = cudaErrorNoDevice;
  if (e == cudaSuccess)
    e = cudaGetDevice(&dev);
  if (e != cudaSuccess) {
    say(why, whylen, "no usable CUDA device (cudaGetDeviceCount)",
        cudaGetErrorName(e), cudaGetErrorString(e));
    (void)cudaGetLastError(); /* the probe's error is not the caller's */
    return nullptr;
  }
  /* Loading one kernel proves the binary has code this device runs. */
  cudaFuncAttributes attr;
  e = cudaFuncGetAttributes(&attr, reinterpret_cast<const void *>(relu));
  if (e != cudaSuccess) {
    say(why, whylen,
        "device cannot run the model's kernels "
        "(cudaFuncGetAttributes; check CMAKE_CUDA_ARCHITECTURES)",
        cudaGetErrorName(e), cudaGetErrorString(e));
    (void)cudaGetLastError();
    return nullptr;
  }
  cnn_cuda *g = static_cast<cnn_cuda *>(calloc(1, sizeof *g));
  if (!g) {
    say(why, whylen, "calloc", "out of memory", "no room for the model");
    return nullptr;
  }
  cublasStatus_t st = cublasCreate(&g->blas);
  if (st == CUBLAS_STATUS_SUCCESS) {
    /* host scalars; full f32 GEMMs (no TF32): the host model's precision */
    st = cublasSetPointerMode(g->blas, CUBLAS_POINTER_MODE_HOST);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH);
    if (st != CUBLAS_STATUS_SUCCESS)
      cublasDestroy(g->blas);
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    say(why, whylen, "cublasCreate", cublasGetStatusName(st),
        cublasGetStatusString(st));
    free(g);
    return nullptr;
  }
  if (pthread_mutex_init(&g->lock, nullptr) != 0) {
    say(why, whylen, "pthread_mutex_init", "failed", "no mutex");
    cublasDestroy(g->blas);
    free(g);
    return nullptr;
  }
  g->seed = seed;
  g->dropout = dropout != 0;
  g->model = *host;
  g->model.ctx = g;
  g->model.out_bytes = cuda_out_bytes;
  g->model.saved_bytes = cuda_saved_bytes;
  g->model.scratch_bytes = cuda_scratch_bytes;
  g->model.forward = cuda_forward;
  g->model.backward = cuda_backward;
  g->model.device = SHARC_DEVICE_CUDA;
  return &g->model;
}

void cnn_cuda_close(const sharc_model_t *m) {
  if (!m)
    return;
  cnn_cuda *g = static_cast<cnn_cuda *>(m->ctx);
  cublasDestroy(g->blas); /* synchronizes the device */
  pthread_mutex_destroy(&g->lock);
  free(g);
}

} /* extern "C" */

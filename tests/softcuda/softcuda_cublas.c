/*
 * softcuda_cublas.c - cuBLAS on softcuda (libsoftcublas, CUDA::cublas in
 * a -DSHARC_SOFTCUDA=ON build): the handle calls and the GEMMs the GPU
 * training path makes, so that their plumbing (transposes, leading
 * dimensions, strides, scalars, stream order) is checked without a GPU.
 *
 * What it models:
 *  - handles: cublasCreate/Destroy (Destroy synchronizes the device, as
 *    cuBLAS's does), the stream, pointer mode and math mode; a NULL or
 *    destroyed handle is CUBLAS_STATUS_NOT_INITIALIZED;
 *  - cublasSgemm, cublasGemmEx and cublasGemmStridedBatchedEx, column
 *    major, op N, T and C (= T for real types), with the argument checks of
 *    cuBLAS (BLAS's xerbla checks: m, n, k, lda, ldb, ldc, the transposes;
 *    CUBLAS_STATUS_INVALID_VALUE; a negative batchCount, which cuBLAS does
 *    not check, fails as its launch does: CUBLAS_STATUS_EXECUTION_FAILED)
 *    and its quick returns (m, n or
 *    batchCount 0: nothing; k 0 or alpha 0: C = beta C, A and B unread;
 *    beta 0: C is written, not read, so a NaN there does not survive);
 *  - types: A and B f32, f16 or bf16 (the same), C f32 or A's type,
 *    compute CUBLAS_COMPUTE_32F (the _PEDANTIC and _FAST_* variants run as
 *    32F), float alpha and beta; anything else is
 *    CUBLAS_STATUS_NOT_SUPPORTED, with a line on stderr;
 *  - stream order: each call is one kernel launch on the handle's stream
 *    (softcuda_launch, one block of one thread), run asynchronously by the
 *    stream's worker. Host-mode alpha and beta are read when the call is
 *    made, device-mode ones when the GEMM runs, as on a GPU;
 *  - faults: A, B, C (and device-mode alpha, beta) must be device or
 *    pinned memory, and every matrix of the batch must lie inside its
 *    allocation; otherwise CUBLAS_STATUS_EXECUTION_FAILED with a line on
 *    stderr, where a GPU would fault or silently read a neighbour.
 *
 * The arithmetic is OpenBLAS's cblas_sgemm: 16-bit inputs are widened to
 * f32 first (exactly), 16-bit outputs rounded from f32 to nearest even.
 * What it does not model: performance, tensor cores and the reduced
 * precision they allow (TF32, FAST_16F, math modes: all run in full f32),
 * cuBLAS's summation order (results differ from a GPU's in the last bits),
 * the _64 entry points and every other cuBLAS routine.
 *
 * SOFTCUDA_DEBUG=1 also prints a line for every argument refused with
 * CUBLAS_STATUS_INVALID_VALUE or CUBLAS_STATUS_NOT_INITIALIZED.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

/* The cuBLAS API is what this library exports (the target builds with
 * -fvisibility=hidden, like the rest of sharc). */
#pragma GCC visibility push(default)
#include <cublas_v2.h>
#pragma GCC visibility pop
#include <cuda.h>

#include "softcuda_launch.h"

/* ---- messages and status names ------------------------------------------ */

#define STATUSES(X)                                                            \
  X(CUBLAS_STATUS_SUCCESS, "success")                                          \
  X(CUBLAS_STATUS_NOT_INITIALIZED, "the library was not initialized")          \
  X(CUBLAS_STATUS_ALLOC_FAILED, "the resource allocation failed")              \
  X(CUBLAS_STATUS_INVALID_VALUE,                                               \
    "an invalid numeric value was used as an argument")                        \
  X(CUBLAS_STATUS_ARCH_MISMATCH,                                               \
    "an absent device architectural feature is required")                      \
  X(CUBLAS_STATUS_MAPPING_ERROR, "an access to GPU memory space failed")       \
  X(CUBLAS_STATUS_EXECUTION_FAILED, "the GPU program failed to execute")       \
  X(CUBLAS_STATUS_INTERNAL_ERROR, "an internal operation failed")              \
  X(CUBLAS_STATUS_NOT_SUPPORTED,                                               \
    "the functionality requested is not supported")                            \
  X(CUBLAS_STATUS_LICENSE_ERROR, "error detected trying to check the license")

const char *cublasGetStatusName(cublasStatus_t status) {
#define NAME(s, text)                                                          \
  case s:                                                                      \
    return #s;
  switch (status) { STATUSES(NAME) }
#undef NAME
  return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasGetStatusString(cublasStatus_t status) {
#define TEXT(s, text)                                                          \
  case s:                                                                      \
    return text;
  switch (status) { STATUSES(TEXT) }
#undef TEXT
  return "unknown cuBLAS status";
}

typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int debug_on;
/* cuMemGetAddressRange, for the extent of every matrix (softcuda provides
 * it through the entry point table); NULL: not checked. */
static range_fn address_range;

static void init_once(void) {
  const char *e = getenv("SOFTCUDA_DEBUG");
  debug_on = e && *e && strcmp(e, "0");
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000,
                                       cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess)
    address_range = (range_fn)fn;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char line[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "softcublas[%d]: %s\n", (int)getpid(), line);
}

/* An argument error: said only under SOFTCUDA_DEBUG, as softcuda does
 * (programs probe arguments; cuBLAS itself says nothing). */
#define REFUSE(st, ...)                                                        \
  do {                                                                         \
    pthread_once(&once, init_once);                                            \
    if (debug_on)                                                              \
      say(__VA_ARGS__);                                                        \
    return (st);                                                               \
  } while (0)

/* ---- handles --------------------------------------------------------------
 * Every live handle is in one list, so that a destroyed one is recognised
 * without reading freed memory. */

struct cublasContext {
  struct cublasContext *next;
  cudaStream_t stream;
  cublasPointerMode_t pointer_mode;
  cublasMath_t math_mode;
};

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cublasContext *handles;

/* The live handle h, or NULL; handles_lock held. */
static struct cublasContext *find(cublasHandle_t h) {
  struct cublasContext *c = handles;
  while (c && c != h)
    c = c->next;
  return c;
}

/* A copy of h's settings, taken under the lock; 0: not a live handle. */
static int settings(cublasHandle_t h, struct cublasContext *out) {
  pthread_mutex_lock(&handles_lock);
  struct cublasContext *c = find(h);
  if (c)
    *out = *c;
  pthread_mutex_unlock(&handles_lock);
  return c != NULL;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  if (!handle)
    REFUSE(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: handle is NULL");
  int dev;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess)
    REFUSE(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate: no device: %s",
           cudaGetErrorName(e));
  struct cublasContext *c = calloc(1, sizeof *c);
  if (!c) {
    say("cublasCreate: out of host memory");
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  pthread_mutex_lock(&handles_lock);
  c->next = handles;
  handles = c;
  pthread_mutex_unlock(&handles_lock);
  *handle = c;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  pthread_mutex_lock(&handles_lock);
  struct cublasContext **pp = &handles;
  while (*pp && *pp != handle)
    pp = &(*pp)->next;
  struct cublasContext *c = *pp;
  if (c)
    *pp = c->next;
  pthread_mutex_unlock(&handles_lock);
  if (!c)
    REFUSE(CUBLAS_STATUS_NOT_INITIALIZED,
           "cublasDestroy(%p): not a live handle (NULL or destroyed; "
           "cublasCreate makes one)",
           (void *)handle);
  free(c);
  /* cuBLAS documents this synchronization; code may rely on it. */
  (void)cudaDeviceSynchronize();
  return CUBLAS_STATUS_SUCCESS;
}

/* A setter or getter on a live handle: the body runs under the lock. */
#define WITH_HANDLE(fn, handle, body)                                          \
  do {                                                                         \
    pthread_mutex_lock(&handles_lock);                                         \
    struct cublasContext *c = find(handle);                                    \
    if (c) {                                                                   \
      body;                                                                    \
    }                                                                          \
    pthread_mutex_unlock(&handles_lock);                                       \
    if (!c)                                                                    \
      REFUSE(CUBLAS_STATUS_NOT_INITIALIZED,                                    \
             "%s(%p): not a live handle (NULL or destroyed; cublasCreate "     \
             "makes one)",                                                     \
             fn, (void *)(handle));                                            \
    return CUBLAS_STATUS_SUCCESS;                                              \
  } while (0)

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle,
                                  cudaStream_t streamId) {
  WITH_HANDLE("cublasSetStream", handle, c->stream = streamId);
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle,
                                  cudaStream_t *streamId) {
  if (!streamId)
    REFUSE(CUBLAS_STATUS_INVALID_VALUE, "cublasGetStream: streamId is NULL");
  WITH_HANDLE("cublasGetStream", handle, *streamId = c->stream);
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle,
                                       cublasPointerMode_t mode) {
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
    REFUSE(CUBLAS_STATUS_INVALID_VALUE,
           "cublasSetPointerMode: mode %d is neither "
           "CUBLAS_POINTER_MODE_HOST nor CUBLAS_POINTER_MODE_DEVICE",
           (int)mode);
  WITH_HANDLE("cublasSetPointerMode", handle, c->pointer_mode = mode);
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle,
                                       cublasPointerMode_t *mode) {
  if (!mode)
    REFUSE(CUBLAS_STATUS_INVALID_VALUE, "cublasGetPointerMode: mode is NULL");
  WITH_HANDLE("cublasGetPointerMode", handle, *mode = c->pointer_mode);
}

/* The math mode is kept and returned; it changes nothing here (every GEMM
 * runs in full f32). */
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  int base = (int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
      base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH &&
      base != CUBLAS_FP32_EMULATED_BF16X9_MATH &&
      base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)
    REFUSE(CUBLAS_STATUS_INVALID_VALUE,
           "cublasSetMathMode: mode %d is not a cublasMath_t", (int)mode);
  WITH_HANDLE("cublasSetMathMode", handle, c->math_mode = mode);
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
  if (!mode)
    REFUSE(CUBLAS_STATUS_INVALID_VALUE, "cublasGetMathMode: mode is NULL");
  WITH_HANDLE("cublasGetMathMode", handle, *mode = c->math_mode);
}

/* ---- 16-bit floats ---------------------------------------------------------
 * Widening is exact; narrowing rounds to nearest even, overflows to
 * infinity, and keeps a NaN a (quiet) NaN with its payload's top bits. */

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) /* infinity, NaN */
    return float_of(sign | 0x7f800000u | man << 13);
  if (exp) /* normal: rebias 15 -> 127 */
    return float_of(sign | (exp + 112) << 23 | man << 13);
  float mag = (float)man * 0x1p-24f; /* subnormal or zero: exact */
  return sign ? -mag : mag;
}

static uint16_t f32_to_f16(float f) {
  uint32_t x = bits_of(f);
  uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN */
    return (uint16_t)(sign | 0x7e00 | (ax >> 13 & 0x3ff));
  if (ax >= 0x477ff000u) /* from 65520, halfway past 65504: infinity */
    return sign | 0x7c00;
  if (ax >= 0x38800000u) {         /* 2^-14 and up: normal */
    uint32_t r = ax - 0x38000000u; /* exponent rebias 127 -> 15 */
    r += 0xfffu + (r >> 13 & 1);   /* to nearest, ties to even */
    return (uint16_t)(sign | r >> 13);
  }
  if (ax <= 0x33000000u) /* up to 2^-25, half the least subnormal: zero */
    return sign;
  /* subnormal: the significand in units of 2^-24, to nearest even (may
   * round up to the least normal, whose encoding follows on) */
  uint32_t man = (ax & 0x7fffffu) | 0x800000u;
  int shift = 126 - (int)(ax >> 23);
  uint32_t q = man >> shift, rem = man & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1)))
    q++;
  return (uint16_t)(sign | q);
}

static float bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }

static uint16_t f32_to_bf16(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN */
    return (uint16_t)(x >> 16 | 0x40);
  x += 0x7fffu + (x >> 16 & 1); /* to nearest, ties to even */
  return (uint16_t)(x >> 16);
}

static size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static float load(cudaDataType t, const void *p, size_t i) {
  if (t == CUDA_R_32F)
    return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return t == CUDA_R_16F ? f16_to_f32(h) : bf16_to_f32(h);
}

static void store(cudaDataType t, void *p, size_t i, float v) {
  if (t == CUDA_R_32F)
    ((float *)p)[i] = v;
  else
    ((uint16_t *)p)[i] = t == CUDA_R_16F ? f32_to_f16(v) : f32_to_bf16(v);
}

/* dst (rows x cols, leading dimension ld_dst, type td) = src (the same
 * shape, ld_src, ts), through f32. */
static void convert(cudaDataType ts, const void *src, int ld_src,
                    cudaDataType td, void *dst, int ld_dst, int rows,
                    int cols) {
  for (int j = 0; j < cols; j++)
    for (int i = 0; i < rows; i++)
      store(td, dst, (size_t)j * ld_dst + i,
            load(ts, src, (size_t)j * ld_src + i));
}

/* ---- the GEMM -------------------------------------------------------------
 * One call, its arguments as cuBLAS takes them (strides in elements). */

typedef struct {
  const char *fn;
  cublasOperation_t ta, tb;
  int m, n, k;
  const void *alpha, *beta;
  const void *a, *b;
  void *c;
  cudaDataType at, bt, ct;
  int lda, ldb, ldc;
  long long sa, sb, sc;
  int batch;
  cublasComputeType_t compute;
  cublasGemmAlgo_t algo;
} gemm_args_t;

/* What the queued operation needs, copied at call time. */
typedef struct {
  enum CBLAS_TRANSPOSE ta, tb;
  int m, n, k, lda, ldb, ldc, batch;
  int rows_a, cols_a, rows_b, cols_b; /* A and B as stored */
  long long sa, sb, sc;
  cudaDataType at, ct; /* B's type is A's */
  const char *a, *b;   /* NULL: not read (k 0, or alpha 0 in host mode) */
  char *c;
  int device_scalars;
  float alpha, beta;           /* host mode: read at call time */
  const float *dalpha, *dbeta; /* device mode: read when run */
  float *wa, *wb, *wc;         /* f32 copies of 16-bit A, B, C */
} gemm_t;

/* One GEMM of the batch: C = alpha op(A) op(B) + beta C. */
static void gemm_one(const gemm_t *g, float alpha, float beta, const char *a,
                     const char *b, char *c) {
  if (g->k == 0 || alpha == 0.0f) { /* BLAS's quick return: C = beta C */
    for (int j = 0; j < g->n; j++)
      for (int i = 0; i < g->m; i++) {
        size_t at = (size_t)j * g->ldc + i;
        /* beta 0 writes zeros, whatever C held (NaN included) */
        store(g->ct, c, at, beta == 0.0f ? 0.0f : beta * load(g->ct, c, at));
      }
    return;
  }
  const float *fa = (const float *)a, *fb = (const float *)b;
  int lda = g->lda, ldb = g->ldb;
  if (g->at != CUDA_R_32F) {
    convert(g->at, a, g->lda, CUDA_R_32F, g->wa, g->rows_a, g->rows_a,
            g->cols_a);
    convert(g->at, b, g->ldb, CUDA_R_32F, g->wb, g->rows_b, g->rows_b,
            g->cols_b);
    fa = g->wa;
    fb = g->wb;
    lda = g->rows_a;
    ldb = g->rows_b;
  }
  if (g->ct == CUDA_R_32F) {
    cblas_sgemm(CblasColMajor, g->ta, g->tb, g->m, g->n, g->k, alpha, fa, lda,
                fb, ldb, beta, (float *)c, g->ldc);
    return;
  }
  /* BLAS does not read C when beta is 0: the copy is needed only then */
  if (beta != 0.0f)
    convert(g->ct, c, g->ldc, CUDA_R_32F, g->wc, g->m, g->m, g->n);
  cblas_sgemm(CblasColMajor, g->ta, g->tb, g->m, g->n, g->k, alpha, fa, lda, fb,
              ldb, beta, g->wc, g->m);
  convert(CUDA_R_32F, g->wc, g->m, g->ct, c, g->ldc, g->m, g->n);
}

/* The stream's worker runs this once per call: the whole batch. */
static void gemm_run(void *ctx, int reverse) {
  (void)reverse; /* one block of one thread: no order to choose */
  const gemm_t *g = ctx;
  float alpha = g->device_scalars ? *g->dalpha : g->alpha;
  float beta = g->device_scalars ? *g->dbeta : g->beta;
  size_t ea = type_size(g->at), ec = type_size(g->ct);
  for (int i = 0; i < g->batch; i++) {
    /* no offset on a NULL A or B (not read): that would be undefined */
    const char *a = g->a ? g->a + (ptrdiff_t)(i * g->sa) * (ptrdiff_t)ea : NULL;
    const char *b = g->b ? g->b + (ptrdiff_t)(i * g->sb) * (ptrdiff_t)ea : NULL;
    gemm_one(g, alpha, beta, a, b,
             g->c + (ptrdiff_t)(i * g->sc) * (ptrdiff_t)ec);
  }
}

static void gemm_release(void *ctx) {
  gemm_t *g = ctx;
  free(g->wa);
  free(g->wb);
  free(g->wc);
  free(g);
}

static int op_ok(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

static const char *op_name(cublasOperation_t op) {
  return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C";
}

static int max1(int x) { return x > 1 ? x : 1; }

static const char *type_name(cudaDataType t) {
  switch (t) {
  case CUDA_R_32F:
    return "CUDA_R_32F";
  case CUDA_R_16F:
    return "CUDA_R_16F";
  case CUDA_R_16BF:
    return "CUDA_R_16BF";
  default:
    return "not modelled";
  }
}

/* Why this compute type, these types and this algorithm are not modelled,
 * or NULL. */
static const char *unsupported(const gemm_args_t *g) {
  cublasComputeType_t ct = g->compute;
  if (ct != CUBLAS_COMPUTE_32F && ct != CUBLAS_COMPUTE_32F_PEDANTIC &&
      ct != CUBLAS_COMPUTE_32F_FAST_16F && ct != CUBLAS_COMPUTE_32F_FAST_16BF &&
      ct != CUBLAS_COMPUTE_32F_FAST_TF32)
    return "compute type: only CUBLAS_COMPUTE_32F (and its _PEDANTIC and "
           "_FAST_* variants, run as 32F) is modelled";
  if (g->at != CUDA_R_32F && g->at != CUDA_R_16F && g->at != CUDA_R_16BF)
    return "Atype: A and B may be CUDA_R_32F, CUDA_R_16F or CUDA_R_16BF";
  if (g->bt != g->at)
    return "Btype differs from Atype";
  if (g->ct != CUDA_R_32F && g->ct != g->at)
    return "Ctype: C may be CUDA_R_32F or A's 16-bit type";
  int algo = (int)g->algo;
  if (!(algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) &&
      !(algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP &&
        algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP) &&
      algo != CUBLAS_GEMM_AUTOTUNE)
    return "algo: not a cublasGemmAlgo_t";
  return NULL;
}

/* Whether every one of the batch's matrices X (rows x cols stored with
 * leading dimension ld, stride apart) lies in X's allocation; says why
 * not. Pointers outside any allocation pass: softcuda_launch refuses
 * those. */
static int inside(const gemm_args_t *g, const char *what, const void *p,
                  size_t esize, int rows, int cols, int ld, long long stride,
                  int batch) {
  CUdeviceptr base;
  size_t size;
  if (!address_range ||
      address_range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
    return 1;
  /* elements [lo, hi) from p; a product that overflows is past anything */
  long long span = (long long)(cols - 1) * ld + rows, last, lo, hi;
  int over = __builtin_mul_overflow(stride, (long long)(batch - 1), &last);
  lo = last < 0 ? last : 0;
  over |= __builtin_add_overflow(last > 0 ? last : 0, span, &hi);
  over |= __builtin_mul_overflow(lo, (long long)esize, &lo);
  over |= __builtin_mul_overflow(hi, (long long)esize, &hi);
  long long off = (long long)((uintptr_t)p - (uintptr_t)base);
  if (!over && off + lo >= 0 && off + hi <= (long long)size)
    return 1;
  char batches[64] = "";
  if (batch > 1)
    snprintf(batches, sizeof batches, ", %d matrices %lld elements apart",
             batch, stride);
  say("%s: %s at %p (%d x %d, leading dimension %d%s) spans bytes "
      "[%lld, %lld) from it, past its allocation of %zu bytes at %p: on a GPU "
      "the kernel would fault or touch other memory; check m, n, k, the "
      "transposes, the leading dimensions and the strides; "
      "CUBLAS_STATUS_EXECUTION_FAILED",
      g->fn, what, p, rows, cols, ld, batches, lo, hi, size,
      (void *)(uintptr_t)base);
  return 0;
}

/* A pointer the GEMM reads or writes: NULL faults on a GPU. */
static int present(const gemm_args_t *g, const char *what, const void *p) {
  if (p)
    return 1;
  say("%s: %s is NULL: on a GPU the kernel would fault; "
      "CUBLAS_STATUS_EXECUTION_FAILED",
      g->fn, what);
  return 0;
}

static cublasStatus_t gemm(cublasHandle_t handle, const gemm_args_t *g) {
  pthread_once(&once, init_once); /* address_range */
  struct cublasContext h;
  if (!settings(handle, &h))
    REFUSE(
        CUBLAS_STATUS_NOT_INITIALIZED,
        "%s(%p): not a live handle (NULL or destroyed; cublasCreate makes one)",
        g->fn, (void *)handle);
  const char *fn = g->fn;
  if (!op_ok(g->ta) || !op_ok(g->tb))
    REFUSE(CUBLAS_STATUS_INVALID_VALUE,
           "%s: transa %d or transb %d is not CUBLAS_OP_N, _T or _C", fn,
           (int)g->ta, (int)g->tb);
  int rows_a = g->ta == CUBLAS_OP_N ? g->m : g->k;
  int cols_a = g->ta == CUBLAS_OP_N ? g->k : g->m;
  int rows_b = g->tb == CUBLAS_OP_N ? g->k : g->n;
  int cols_b = g->tb == CUBLAS_OP_N ? g->n : g->k;
  if (g->m < 0 || g->n < 0 || g->k < 0)
    REFUSE(CUBLAS_STATUS_INVALID_VALUE,
           "%s: m %d, n %d, k %d: none may be negative", fn, g->m, g->n, g->k);
  if (g->lda < max1(rows_a) || g->ldb < max1(rows_b) || g->ldc < max1(g->m))
    REFUSE(CUBLAS_STATUS_INVALID_VALUE,
           "%s: lda %d, ldb %d, ldc %d: each must be at least max(1, rows) "
           "= %d, %d, %d (transa %s, transb %s, m %d, n %d, k %d)",
           fn, g->lda, g->ldb, g->ldc, max1(rows_a), max1(rows_b), max1(g->m),
           op_name(g->ta), op_name(g->tb), g->m, g->n, g->k);
  const char *why = unsupported(g);
  if (why) {
    say("%s: Atype %d (%s), Btype %d (%s), Ctype %d (%s), compute type %d, "
        "algo %d: %s; CUBLAS_STATUS_NOT_SUPPORTED (cuBLAS may support it; "
        "this stand-in does not)",
        fn, (int)g->at, type_name(g->at), (int)g->bt, type_name(g->bt),
        (int)g->ct, type_name(g->ct), (int)g->compute, (int)g->algo, why);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (!g->alpha || !g->beta)
    REFUSE(CUBLAS_STATUS_INVALID_VALUE, "%s: alpha or beta is NULL", fn);
  /* cuBLAS 13.0 does not check batchCount: a negative one fails at the
   * launch (CUBLAS_STATUS_EXECUTION_FAILED, no xerbla line; seen on an
   * H100, bench/results/gpu_h100_first) */
  if (g->batch < 0)
    REFUSE(CUBLAS_STATUS_EXECUTION_FAILED,
           "%s: batchCount %d is negative (cuBLAS fails the launch)", fn,
           g->batch);
  if (g->m == 0 || g->n == 0 || g->batch == 0)
    return CUBLAS_STATUS_SUCCESS;

  int dev = h.pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  float alpha = dev ? 0.0f : *(const float *)g->alpha;
  int reads_ab = g->k > 0 && (dev || alpha != 0.0f);
  size_t ea = type_size(g->at), ec = type_size(g->ct);
  if (reads_ab &&
      (!present(g, "A", g->a) || !present(g, "B", g->b) ||
       !inside(g, "A", g->a, ea, rows_a, cols_a, g->lda, g->sa, g->batch) ||
       !inside(g, "B", g->b, ea, rows_b, cols_b, g->ldb, g->sb, g->batch)))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if (!present(g, "C", g->c) ||
      !inside(g, "C", g->c, ec, g->m, g->n, g->ldc, g->sc, g->batch) ||
      (dev && (!inside(g, "alpha", g->alpha, 4, 1, 1, 1, 0, 1) ||
               !inside(g, "beta", g->beta, 4, 1, 1, 1, 0, 1))))
    return CUBLAS_STATUS_EXECUTION_FAILED;

  gemm_t *q = calloc(1, sizeof *q);
  if (!q) {
    say("%s: out of host memory", fn);
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  *q = (gemm_t){
      .ta = g->ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
      .tb = g->tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
      .m = g->m,
      .n = g->n,
      .k = g->k,
      .lda = g->lda,
      .ldb = g->ldb,
      .ldc = g->ldc,
      .batch = g->batch,
      .rows_a = rows_a,
      .cols_a = cols_a,
      .rows_b = rows_b,
      .cols_b = cols_b,
      .sa = g->sa,
      .sb = g->sb,
      .sc = g->sc,
      .at = g->at,
      .ct = g->ct,
      .a = reads_ab ? g->a : NULL,
      .b = reads_ab ? g->b : NULL,
      .c = g->c,
      .device_scalars = dev,
      .alpha = alpha,
      .beta = dev ? 0.0f : *(const float *)g->beta,
      .dalpha = dev ? g->alpha : NULL,
      .dbeta = dev ? g->beta : NULL,
  };
  /* f32 copies of 16-bit operands, made here so that a shortage is an
   * error of the call, not of the queued operation */
  if (reads_ab && g->at != CUDA_R_32F) {
    q->wa = malloc((size_t)rows_a * cols_a * sizeof(float));
    q->wb = malloc((size_t)rows_b * cols_b * sizeof(float));
  }
  if (g->ct != CUDA_R_32F)
    q->wc = malloc((size_t)g->m * g->n * sizeof(float));
  if ((reads_ab && g->at != CUDA_R_32F && (!q->wa || !q->wb)) ||
      (g->ct != CUDA_R_32F && !q->wc)) {
    say("%s: out of host memory for the f32 copies of %d x %d, %d x %d and "
        "%d x %d matrices",
        fn, rows_a, cols_a, rows_b, cols_b, g->m, g->n);
    gemm_release(q);
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  const void *ptrs[5] = {q->a, q->b, q->c, q->dalpha, q->dbeta};
  cudaError_t e =
      softcuda_launch((const void *)gemm_run, (dim3){1, 1, 1}, (dim3){1, 1, 1},
                      0, h.stream, gemm_run, gemm_release, q, ptrs, 5);
  if (e != cudaSuccess) {
    say("%s(A %p, B %p, C %p) on stream %p: the launch failed: %s: %s; "
        "CUBLAS_STATUS_EXECUTION_FAILED",
        fn, g->a, g->b, g->c, (void *)h.stream, cudaGetErrorName(e),
        cudaGetErrorString(e));
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

/* Every GEMM entry point: one argument set, named in messages by fn. */
static cublasStatus_t
gemm_ex(const char *fn, cublasHandle_t handle, cublasOperation_t transa,
        cublasOperation_t transb, int m, int n, int k, const void *alpha,
        const void *A, cudaDataType Atype, int lda, long long strideA,
        const void *B, cudaDataType Btype, int ldb, long long strideB,
        const void *beta, void *C, cudaDataType Ctype, int ldc,
        long long strideC, int batchCount, cublasComputeType_t computeType,
        cublasGemmAlgo_t algo) {
  gemm_args_t g = {.fn = fn,
                   .ta = transa,
                   .tb = transb,
                   .m = m,
                   .n = n,
                   .k = k,
                   .alpha = alpha,
                   .beta = beta,
                   .a = A,
                   .b = B,
                   .c = C,
                   .at = Atype,
                   .bt = Btype,
                   .ct = Ctype,
                   .lda = lda,
                   .ldb = ldb,
                   .ldc = ldc,
                   .sa = strideA,
                   .sb = strideB,
                   .sc = strideC,
                   .batch = batchCount,
                   .compute = computeType,
                   .algo = algo};
  return gemm(handle, &g);
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k,
                              const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
  return gemm_ex("cublasSgemm", handle, transa, transb, m, n, k, alpha, A,
                 CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, beta, C, CUDA_R_32F,
                 ldc, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A,
                            cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta,
                            void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  return gemm_ex("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A,
                 Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1,
                 computeType, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
    int lda, long long int strideA, const void *B, cudaDataType Btype, int ldb,
    long long int strideB, const void *beta, void *C, cudaDataType Ctype,
    int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return gemm_ex("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k,
                 alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                 Ctype, ldc, strideC, batchCount, computeType, algo);
}

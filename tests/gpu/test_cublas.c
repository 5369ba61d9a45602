/*
 * test_cublas.c - the cuBLAS calls the GPU training path makes
 * (cublasSgemm, cublasGemmEx, cublasGemmStridedBatchedEx and the handle
 * calls), against a double-precision GEMM on the host. It checks plumbing,
 * not bits: cuBLAS sums in its own order, so each element must lie within
 * a bound derived from k and the output type's rounding (the inputs are
 * generated exactly in their own type, so their rounding adds nothing).
 *  - every transpose pair (N, T, C) for f32, f16 and bf16 inputs, with f32
 *    output and with output of the input's type; m x n x k of 7 x 5 x 3,
 *    33 x 17 x 65 and 1 x 1 x 1; leading dimensions at their minimum and
 *    three past it: padding rows of A and B hold NaN (a read of them
 *    shows), and C's padding and the elements after C must keep their
 *    0xA5 fill;
 *  - strided batched, batch 3: gaps between matrices, a broadcast B
 *    (stride 0), overlapping A matrices;
 *  - alpha and beta in device memory (CUBLAS_POINTER_MODE_DEVICE), read
 *    when the GEMM runs, and host alpha read when the call is made;
 *  - beta 0 over a C full of NaN; m, n, k, batchCount 0; alpha 0;
 *  - ties of the rounding to f16 and bf16 output, to nearest even;
 *  - every CUBLAS_STATUS_INVALID_VALUE case of the argument checks, leaving
 *    C untouched; CUBLAS_STATUS_NOT_SUPPORTED for mixed input types;
 *    CUBLAS_STATUS_NOT_INITIALIZED for a NULL handle;
 *  - stream order: two GEMMs on a non-blocking stream held back by a host
 *    function, the second reading the first's output.
 * On softcuda (TEST_CUBLAS_SOFTCUDA) it also checks what only the stand-in
 * reports: a destroyed handle, pageable memory and a matrix running past
 * its allocation (CUBLAS_STATUS_EXECUTION_FAILED), invalid modes.
 *
 *   test_cublas     the test (exit 77 and one SKIP line without a usable
 *                   CUDA device)
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_ok.h"

static int passed, failed;

/* A call that must return want. */
#define IS(call, want)                                                         \
  do {                                                                         \
    cublasStatus_t s_ = (call);                                                \
    CHECK(s_ == (want), "%s: %s, want %s", #call, cublasGetStatusName(s_),     \
          cublasGetStatusName(want));                                          \
  } while (0)

/* ---- types: encoding, decoding, rounding bounds ------------------------- */

typedef struct {
  cudaDataType t;
  const char *name;
  size_t size; /* bytes */
  int man;     /* stored significand bits */
  int bias;    /* exponent bias */
  double u;    /* unit roundoff */
  double tiny; /* half the least subnormal: the absolute rounding error */
  uint32_t nan;
} type_t;

static const type_t F32 = {CUDA_R_32F, "f32",   4,        23,
                           127,        0x1p-24, 0x1p-150, 0x7fc00000u};
static const type_t F16 = {CUDA_R_16F, "f16",   2,       10,
                           15,         0x1p-11, 0x1p-25, 0x7e00u};
static const type_t BF16 = {CUDA_R_16BF, "bf16", 2,        7,
                            127,         0x1p-8, 0x1p-134, 0x7fc0u};

static void put(const type_t *t, void *p, size_t i, uint32_t bits) {
  if (t->size == 4)
    ((uint32_t *)p)[i] = bits;
  else
    ((uint16_t *)p)[i] = (uint16_t)bits;
}

static uint32_t get(const type_t *t, const void *p, size_t i) {
  return t->size == 4 ? ((const uint32_t *)p)[i] : ((const uint16_t *)p)[i];
}

static double decode(const type_t *t, uint32_t b) {
  int ebits = (int)t->size * 8 - 1 - t->man;
  uint32_t man = b & ((1u << t->man) - 1), emax = (1u << ebits) - 1;
  uint32_t exp = b >> t->man & emax, sign = b >> (t->size * 8 - 1) & 1;
  double v = exp == emax ? (man ? NAN : INFINITY)
             : exp ? ldexp(man + (1u << t->man), (int)exp - t->bias - t->man)
                   : ldexp(man, 1 - t->bias - t->man);
  return sign ? -v : v;
}

/* splitmix64, fixed seed: the same inputs on every run. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A value of type t, exact in it: 1 in 16 zero, the rest +-[1/8, 2) with
 * every significand bit random. */
static uint32_t random_value(const type_t *t) {
  uint64_t r = rnd();
  if ((r & 15) == 0)
    return 0;
  uint32_t sign = (uint32_t)(r >> 4 & 1), e = (uint32_t)(r >> 5 & 3);
  uint32_t man = (uint32_t)(r >> 8) & ((1u << t->man) - 1);
  return sign << (t->size * 8 - 1) | (uint32_t)(t->bias - (int)e) << t->man |
         man;
}

/* ---- one GEMM against the host ---------------------------------------- */

typedef enum { API_SGEMM, API_GEMMEX, API_STRIDED } api_t;
static const char *const api_names[] = {"cublasSgemm", "cublasGemmEx",
                                        "cublasGemmStridedBatchedEx"};

typedef struct {
  api_t api;
  const type_t *ab, *c; /* A's and B's type, C's */
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc, batch;
  long long sa, sb, sc; /* elements */
  float alpha, beta;
  int c_nan;       /* C starts as NaN (with beta 0) */
  int dev_scalars; /* alpha and beta in device memory */
} case_t;

static int max1(int x) { return x > 1 ? x : 1; }
static int rows_a(const case_t *x) {
  return x->ta == CUBLAS_OP_N ? x->m : x->k;
}
static int cols_a(const case_t *x) {
  return x->ta == CUBLAS_OP_N ? x->k : x->m;
}
static int rows_b(const case_t *x) {
  return x->tb == CUBLAS_OP_N ? x->k : x->n;
}
static int cols_b(const case_t *x) {
  return x->tb == CUBLAS_OP_N ? x->n : x->k;
}

/* Elements one matrix spans, stored rows x cols with leading dimension ld. */
static size_t span(int rows, int cols, int ld) {
  return rows && cols ? (size_t)(cols - 1) * ld + rows : 0;
}

/* A batch of 1, leading dimensions pad past their minimum. */
static case_t mk(api_t api, const type_t *ab, const type_t *c,
                 cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                 int k, int pad, float alpha, float beta) {
  case_t x = {.api = api,
              .ab = ab,
              .c = c,
              .ta = ta,
              .tb = tb,
              .m = m,
              .n = n,
              .k = k,
              .batch = 1,
              .alpha = alpha,
              .beta = beta};
  x.lda = max1(rows_a(&x)) + pad;
  x.ldb = max1(rows_b(&x)) + pad;
  x.ldc = max1(m) + pad;
  return x;
}

static const char *op_name(cublasOperation_t op) {
  return op == CUBLAS_OP_N ? "N" : op == CUBLAS_OP_T ? "T" : "C";
}

static void describe(const case_t *x, char *s, size_t n) {
  snprintf(s, n,
           "%s %s->%s %s%s m %d n %d k %d lda %d ldb %d ldc %d batch %d "
           "strides %lld/%lld/%lld alpha %g beta %g%s%s",
           api_names[x->api], x->ab->name, x->c->name, op_name(x->ta),
           op_name(x->tb), x->m, x->n, x->k, x->lda, x->ldb, x->ldc, x->batch,
           x->sa, x->sb, x->sc, x->alpha, x->beta, x->c_nan ? " C=NaN" : "",
           x->dev_scalars ? " device scalars" : "");
}

static cublasStatus_t gemm(cublasHandle_t h, const case_t *x, const void *alpha,
                           const void *beta, const void *a, const void *b,
                           void *c) {
  switch (x->api) {
  case API_SGEMM:
    return cublasSgemm(h, x->ta, x->tb, x->m, x->n, x->k, alpha, a, x->lda, b,
                       x->ldb, beta, c, x->ldc);
  case API_GEMMEX:
    return cublasGemmEx(h, x->ta, x->tb, x->m, x->n, x->k, alpha, a, x->ab->t,
                        x->lda, b, x->ab->t, x->ldb, beta, c, x->c->t, x->ldc,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  default:
    return cublasGemmStridedBatchedEx(
        h, x->ta, x->tb, x->m, x->n, x->k, alpha, a, x->ab->t, x->lda, x->sa, b,
        x->ab->t, x->ldb, x->sb, beta, c, x->c->t, x->ldc, x->sc, x->batch,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
}

#define GUARD 16 /* elements of 0xA5 after the last C */

/* Device memory holding n elements of t copied from host; at least one. */
static void *to_device(const void *host, size_t n, const type_t *t) {
  void *d = NULL;
  size_t bytes = (n ? n : 1) * t->size;
  CUDA_OK(cudaMalloc(&d, bytes));
  CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  /* from pageable memory it may land after cudaMemcpy returned, and a
   * non-blocking stream does not wait for it */
  CUDA_OK(cudaDeviceSynchronize());
  return d;
}

/* Fills the batch's matrices (rows x cols, ld, stride apart) of buf with
 * random values of t, or with NaN. */
static void fill(const type_t *t, void *buf, int rows, int cols, int ld,
                 long long stride, int batch, int with_nan) {
  for (int q = 0; q < batch; q++)
    for (int j = 0; j < cols; j++)
      for (int i = 0; i < rows; i++)
        put(t, buf, (size_t)(q * stride) + (size_t)j * ld + i,
            with_nan ? t->nan : random_value(t));
}

/* Runs x on the handle (its stream must be the legacy one, which
 * cudaMemcpy waits for) and checks every element of C's buffer. */
static void run_case(cublasHandle_t h, const case_t *x) {
  const type_t *ta = x->ab, *tc = x->c;
  int ra = rows_a(x), ca = cols_a(x), rb = rows_b(x), cb = cols_b(x);
  size_t last = x->batch > 0 ? (size_t)(x->batch - 1) : 0;
  size_t na = last * (size_t)x->sa + span(ra, ca, x->lda);
  size_t nb = last * (size_t)x->sb + span(rb, cb, x->ldb);
  size_t nc = last * (size_t)x->sc + (size_t)x->ldc * x->n + GUARD;
  void *ha = malloc((na ? na : 1) * ta->size);
  void *hb = malloc((nb ? nb : 1) * ta->size);
  void *hc = malloc(nc * tc->size), *got = malloc(nc * tc->size);
  char *in_c = calloc(nc, 1); /* element of some C matrix */
  if (!ha || !hb || !hc || !got || !in_c) {
    fprintf(stderr, "FAIL: out of host memory\n");
    exit(1);
  }
  /* padding of A and B: NaN, which would spread to C if read */
  for (size_t i = 0; i < na; i++)
    put(ta, ha, i, ta->nan);
  for (size_t i = 0; i < nb; i++)
    put(ta, hb, i, ta->nan);
  fill(ta, ha, ra, ca, x->lda, x->sa, x->batch, 0);
  fill(ta, hb, rb, cb, x->ldb, x->sb, x->batch, 0);
  memset(hc, 0xA5, nc * tc->size);
  fill(tc, hc, x->m, x->n, x->ldc, x->sc, x->batch, x->c_nan);
  for (int q = 0; q < x->batch; q++)
    for (int j = 0; j < x->n; j++)
      for (int i = 0; i < x->m; i++)
        in_c[(size_t)(q * x->sc) + (size_t)j * x->ldc + i] = 1;

  void *da = to_device(ha, na, ta), *db = to_device(hb, nb, ta);
  void *dc = to_device(hc, nc, tc);
  float scalars[2] = {x->alpha, x->beta}, *ds = NULL;
  const void *alpha = &scalars[0], *beta = &scalars[1];
  if (x->dev_scalars) {
    CUDA_OK(cudaMalloc((void **)&ds, sizeof scalars));
    CUDA_OK(cudaMemcpy(ds, scalars, sizeof scalars, cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize()); /* as in to_device */
    alpha = &ds[0];
    beta = &ds[1];
    IS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE),
       CUBLAS_STATUS_SUCCESS);
  }
  char what[256];
  describe(x, what, sizeof what);
  cublasStatus_t st = gemm(h, x, alpha, beta, da, db, dc);
  if (x->dev_scalars)
    IS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST),
       CUBLAS_STATUS_SUCCESS);
  CHECK(st == CUBLAS_STATUS_SUCCESS, "%s: %s", what, cublasGetStatusName(st));
  CUDA_OK(cudaMemcpy(got, dc, nc * tc->size, cudaMemcpyDeviceToHost));

  /* one check per case: the first wrong element says why */
  char why[256] = "";
  for (size_t e = 0; e < nc && !*why; e++) {
    if (!in_c[e]) { /* padding, gaps, the guard: untouched */
      uint32_t g = get(tc, got, e), want = get(tc, hc, e);
      if (g != want)
        snprintf(why, sizeof why, "element %zu outside C: 0x%x, want 0x%x", e,
                 g, want);
      continue;
    }
    size_t q = x->sc ? e / (size_t)x->sc : 0; /* e's batch, row, column */
    size_t off = e - q * (size_t)x->sc;
    int i = (int)(off % (size_t)x->ldc), j = (int)(off / (size_t)x->ldc);
    double sum = 0, mag = 0;
    for (int l = 0; l < x->k; l++) {
      size_t ia =
          q * (size_t)x->sa + (x->ta == CUBLAS_OP_N ? (size_t)l * x->lda + i
                                                    : (size_t)i * x->lda + l);
      size_t ib =
          q * (size_t)x->sb + (x->tb == CUBLAS_OP_N ? (size_t)j * x->ldb + l
                                                    : (size_t)l * x->ldb + j);
      double p = decode(ta, get(ta, ha, ia)) * decode(ta, get(ta, hb, ib));
      sum += p;
      mag += fabs(p);
    }
    double c0 = x->beta != 0 ? decode(tc, get(tc, hc, e)) : 0;
    double want = x->alpha * sum + x->beta * c0;
    /* f32 accumulation over k products plus alpha and beta, twice the
     * classical bound; then the rounding to the output type */
    double acc = 2.0 * (x->k + 2) * 0x1p-24 *
                 (fabs(x->alpha) * mag + fabs(x->beta * c0));
    double tol = acc + tc->u * (fabs(want) + acc) + tc->tiny;
    double g = decode(tc, get(tc, got, e));
    if (!(fabs(g - want) <= tol)) /* NaN fails too */
      snprintf(why, sizeof why,
               "C[%d,%d] of batch %zu = %.9g, want %.9g (tolerance %.3g)", i, j,
               q, g, want, tol);
  }
  CHECK(!*why, "%s: %s", what, why);
  CUDA_OK(cudaFree(da));
  CUDA_OK(cudaFree(db));
  CUDA_OK(cudaFree(dc));
  CUDA_OK(cudaFree(ds));
  free(ha);
  free(hb);
  free(hc);
  free(got);
  free(in_c);
}

/* ---- the sweeps ------------------------------------------------------- */

static const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};
static const struct {
  const type_t *ab, *c;
} combos[] = {
    {&F32, &F32}, {&F16, &F32}, {&F16, &F16}, {&BF16, &F32}, {&BF16, &BF16}};
#define N_COMBOS (sizeof combos / sizeof combos[0])

static void test_transposes(cublasHandle_t h) {
  static const int sizes[][3] = {{7, 5, 3}, {33, 17, 65}, {1, 1, 1}};
  for (size_t t = 0; t < N_COMBOS; t++)
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++)
        for (int s = 0; s < 3; s++)
          for (int pad = 0; pad <= 3; pad += 3) {
            int plain = (s + pad) % 2; /* alpha 1, beta 0 half of the time */
            case_t x = mk(API_GEMMEX, combos[t].ab, combos[t].c, ops[a], ops[b],
                          sizes[s][0], sizes[s][1], sizes[s][2], pad,
                          plain ? 1.0f : 1.5f, plain ? 0.0f : -0.75f);
            run_case(h, &x);
            if (combos[t].ab == &F32) {
              x.api = API_SGEMM;
              run_case(h, &x);
            }
          }
}

static void test_strided(cublasHandle_t h) {
  for (size_t t = 0; t < N_COMBOS; t++)
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++)
        for (int layout = 0; layout < 2; layout++) {
          case_t x = mk(API_STRIDED, combos[t].ab, combos[t].c, ops[a], ops[b],
                        7, 5, 3, 2, 1.25f, 0.5f);
          x.batch = 3;
          long long span_a = (long long)span(rows_a(&x), cols_a(&x), x.lda);
          long long span_b = (long long)span(rows_b(&x), cols_b(&x), x.ldb);
          if (layout == 0) { /* gaps; one B for every batch */
            x.sa = span_a + 5;
            x.sb = 0;
            x.sc = (long long)x.ldc * x.n + 7;
          } else { /* A matrices overlapping by all but a column */
            x.sa = x.lda;
            x.sb = span_b + 1;
            x.sc = (long long)x.ldc * x.n;
          }
          run_case(h, &x);
        }
}

/* beta 0 over NaN, sizes and alpha of 0, scalars in device memory. */
static void test_edges(cublasHandle_t h) {
  for (size_t t = 0; t < N_COMBOS; t++) {
    const type_t *ab = combos[t].ab, *c = combos[t].c;
    api_t api = ab == &F32 ? API_SGEMM : API_GEMMEX;
    for (int a = 0; a < 2; a++) {
      case_t x = mk(api, ab, c, ops[a], ops[a], 33, 17, 65, 1, 1.0f, 0.0f);
      x.c_nan = 1;
      run_case(h, &x);
    }
    case_t zero[] = {
        mk(api, ab, c, CUBLAS_OP_N, CUBLAS_OP_N, 0, 5, 3, 0, 1.0f, 0.5f),
        mk(api, ab, c, CUBLAS_OP_T, CUBLAS_OP_N, 0, 5, 3, 2, 1.0f, 0.5f),
        mk(api, ab, c, CUBLAS_OP_N, CUBLAS_OP_T, 7, 0, 3, 0, 1.0f, 0.5f),
        mk(api, ab, c, CUBLAS_OP_N, CUBLAS_OP_N, 7, 5, 0, 1, 1.0f, 0.5f),
        mk(api, ab, c, CUBLAS_OP_T, CUBLAS_OP_T, 7, 5, 0, 0, 1.0f, 0.0f),
        mk(api, ab, c, CUBLAS_OP_N, CUBLAS_OP_T, 7, 5, 3, 1, 0.0f, -2.0f),
        mk(api, ab, c, CUBLAS_OP_T, CUBLAS_OP_N, 7, 5, 3, 0, 0.0f, 0.0f)};
    for (size_t z = 0; z < sizeof zero / sizeof zero[0]; z++) {
      zero[z].c_nan = zero[z].beta == 0;
      run_case(h, &zero[z]);
    }
    case_t none = mk(API_STRIDED, ab, c, CUBLAS_OP_N, CUBLAS_OP_N, 7, 5, 3, 0,
                     1.0f, 0.5f);
    none.batch = 0;
    run_case(h, &none);
    case_t dev =
        mk(api, ab, c, CUBLAS_OP_T, CUBLAS_OP_N, 7, 5, 3, 1, 0.5f, 2.0f);
    dev.dev_scalars = 1;
    run_case(h, &dev);
    dev.api = API_STRIDED;
    dev.batch = 3;
    dev.sa = 40;
    dev.sb = 0;
    dev.sc = (long long)dev.ldc * dev.n;
    run_case(h, &dev);
  }
}

/* Every argument check; C must stay as it was. */
static void test_invalid(cublasHandle_t h) {
  enum { m = 7, n = 5, k = 3 };
  float hc[(m + 1) * n], got[(m + 1) * n];
  for (int i = 0; i < (m + 1) * n; i++)
    hc[i] = (float)i;
  float *a = to_device(hc, sizeof hc / 4, &F32);
  float *b = to_device(hc, sizeof hc / 4, &F32);
  float *c = to_device(hc, sizeof hc / 4, &F32);
  const float one = 1.0f;
  for (int api = 0; api < 3; api++) {
    case_t ok = mk((api_t)api, &F32, &F32, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, 0,
                   1.0f, 0.0f);
    case_t bad[16];
    int nbad = 0;
    bad[nbad] = ok, bad[nbad++].m = -1;
    bad[nbad] = ok, bad[nbad++].n = -1;
    bad[nbad] = ok, bad[nbad++].k = -1;
    bad[nbad] = ok, bad[nbad++].lda = m - 1;
    bad[nbad] = ok, bad[nbad].ta = CUBLAS_OP_T, bad[nbad++].lda = k - 1;
    bad[nbad] = ok, bad[nbad++].ldb = k - 1;
    bad[nbad] = ok, bad[nbad].tb = CUBLAS_OP_T, bad[nbad++].ldb = n - 1;
    bad[nbad] = ok, bad[nbad++].ldc = m - 1;
    bad[nbad] = ok, bad[nbad].m = 0, bad[nbad++].lda = 0; /* max(1, 0) */
    bad[nbad] = ok, bad[nbad++].ta = (cublasOperation_t)7;
    bad[nbad] = ok, bad[nbad++].tb = (cublasOperation_t)7;
    /* cuBLAS 13.0 does not check a negative batchCount: the launch fails
     * (CUBLAS_STATUS_EXECUTION_FAILED; seen on an H100) */
    int nchecked = nbad;
    if (api == API_STRIDED)
      bad[nbad] = ok, bad[nbad++].batch = -1;
    for (int i = 0; i < nbad; i++) {
      char what[256];
      describe(&bad[i], what, sizeof what);
      cublasStatus_t st = gemm(h, &bad[i], &one, &one, a, b, c);
      cublasStatus_t want = i < nchecked ? CUBLAS_STATUS_INVALID_VALUE
                                         : CUBLAS_STATUS_EXECUTION_FAILED;
      CHECK(st == want, "%s: %s, want %s", what, cublasGetStatusName(st),
            cublasGetStatusName(want));
    }
  }
  /* mixed input types are not a cuBLAS combination */
  IS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_16F, m,
                  b, CUDA_R_16BF, k, &one, c, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                  CUBLAS_GEMM_DEFAULT),
     CUBLAS_STATUS_NOT_SUPPORTED);
  IS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a,
                                CUDA_R_16BF, m, 0, b, CUDA_R_16F, k, 0, &one, c,
                                CUDA_R_32F, m, 0, 1, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
     CUBLAS_STATUS_NOT_SUPPORTED);
  /* a NULL handle */
  cudaStream_t s;
  cublasPointerMode_t pm;
  cublasMath_t mm;
  IS(cublasSgemm(NULL, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, b, k,
                 &one, c, m),
     CUBLAS_STATUS_NOT_INITIALIZED);
  IS(cublasGemmEx(NULL, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_32F,
                  m, b, CUDA_R_32F, k, &one, c, CUDA_R_32F, m,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
     CUBLAS_STATUS_NOT_INITIALIZED);
  IS(cublasGemmStridedBatchedEx(NULL, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one,
                                a, CUDA_R_32F, m, 0, b, CUDA_R_32F, k, 0, &one,
                                c, CUDA_R_32F, m, 0, 1, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
     CUBLAS_STATUS_NOT_INITIALIZED);
  IS(cublasSetStream(NULL, NULL), CUBLAS_STATUS_NOT_INITIALIZED);
  IS(cublasGetStream(NULL, &s), CUBLAS_STATUS_NOT_INITIALIZED);
  IS(cublasSetPointerMode(NULL, CUBLAS_POINTER_MODE_HOST),
     CUBLAS_STATUS_NOT_INITIALIZED);
  IS(cublasGetPointerMode(NULL, &pm), CUBLAS_STATUS_NOT_INITIALIZED);
  IS(cublasSetMathMode(NULL, CUBLAS_DEFAULT_MATH),
     CUBLAS_STATUS_NOT_INITIALIZED);
  IS(cublasGetMathMode(NULL, &mm), CUBLAS_STATUS_NOT_INITIALIZED);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(got, c, sizeof got, cudaMemcpyDeviceToHost));
  CHECK(!memcmp(got, hc, sizeof got), "a refused call changed C");
  CUDA_OK(cudaFree(a));
  CUDA_OK(cudaFree(b));
  CUDA_OK(cudaFree(c));
}

/* Ties of the rounding to a 16-bit output: with u half an ulp of 1, the
 * sums 1 + u and 1 + 3u are exact in f32 and halfway between two values
 * of the type; to nearest even they go down to 1 and up to 1 + 4u. */
static void test_ties(cublasHandle_t h) {
  const type_t *types[] = {&F16, &BF16};
  for (int t = 0; t < 2; t++) {
    const type_t *ty = types[t];
    uint32_t one = (uint32_t)ty->bias << ty->man;
    uint32_t u = (uint32_t)(ty->bias - ty->man - 1) << ty->man;
    uint32_t three = (uint32_t)(ty->bias + 1) << ty->man | 1u << (ty->man - 1);
    uint16_t a[2] = {(uint16_t)one, (uint16_t)u}; /* 1 x 2 */
    uint16_t b[4] = {(uint16_t)one, (uint16_t)one, (uint16_t)one,
                     (uint16_t)three}; /* 2 x 2: columns (1, 1), (1, 3) */
    uint16_t c[2];
    void *da = to_device(a, 2, ty), *db = to_device(b, 4, ty);
    void *dc = to_device(a, 2, ty);
    const float alpha = 1.0f, beta = 0.0f;
    IS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 2, 2, &alpha, da, ty->t, 1,
                    db, ty->t, 2, &beta, dc, ty->t, 1, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT),
       CUBLAS_STATUS_SUCCESS);
    CUDA_OK(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost));
    CHECK(c[0] == one && c[1] == (one | 2),
          "%s ties: 0x%04x 0x%04x, want 0x%04x 0x%04x (to nearest even)",
          ty->name, c[0], c[1], one, one | 2);
    CUDA_OK(cudaFree(da));
    CUDA_OK(cudaFree(db));
    CUDA_OK(cudaFree(dc));
  }
}

/* ---- stream order ---------------------------------------------------------
 * Integer data, so that every result is exact whatever the summation
 * order. The stream is held back by a host function, so that a GEMM run
 * at call time, or on another stream, reads inputs not yet copied. */

static void hold(void *arg) {
  (void)arg;
  struct timespec t = {0, 100 * 1000 * 1000};
  nanosleep(&t, NULL);
}

static void fill_ints(float *p, int n, int mod) {
  for (int i = 0; i < n; i++)
    p[i] = (float)((int)(rnd() % (uint64_t)mod) - mod / 2);
}

/* want (m x n) = alpha a^T_or_not (m x k or k x m) b (k x n), packed. */
static void ref_gemm(int ta, int m, int n, int k, float alpha, const float *a,
                     const float *b, float *want) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int l = 0; l < k; l++)
        s += (double)(ta ? a[i * k + l] : a[l * m + i]) * b[j * k + l];
      want[j * m + i] = (float)(alpha * s);
    }
}

static void test_stream_order(cublasHandle_t h) {
  enum { M = 9, N = 6, K = 11, P = 4 };
  /* D (M x N) = A (M x K) B (K x N); F (N x P) = D^T E (M x P) */
  float *pin, *dev;
  size_t total = M * K + K * N + M * P + N * P;
  CUDA_OK(cudaMallocHost((void **)&pin, total * sizeof(float)));
  /* after the inputs and F: D, two scalars, one more M x N output */
  CUDA_OK(cudaMalloc((void **)&dev, (total + 2 * M * N + 2) * sizeof(float)));
  float *a = pin, *b = a + M * K, *e = b + K * N, *f = e + M * P;
  float *da = dev, *db = da + M * K, *de = db + K * N, *df = de + M * P;
  float *dd = df + N * P, *dalpha = dd + M * N, *dzero = dalpha + 1;
  float *dout = dzero + 1;
  fill_ints(a, M * K, 9);
  fill_ints(b, K * N, 9);
  fill_ints(e, M * P, 9);
  float d[M * N], want[N * P];
  ref_gemm(0, M, N, K, 1.0f, a, b, d);
  ref_gemm(1, N, P, M, 1.0f, d, e, want);

  cudaStream_t s, got;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  IS(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS);
  IS(cublasGetStream(h, &got), CUBLAS_STATUS_SUCCESS);
  CHECK(got == s, "cublasGetStream: %p, want %p", (void *)got, (void *)s);
  CUDA_OK(cudaLaunchHostFunc(s, hold, NULL));
  CUDA_OK(cudaMemcpyAsync(da, a, (M * K + K * N + M * P) * sizeof(float),
                          cudaMemcpyHostToDevice, s));
  const float one = 1.0f, zero = 0.0f;
  IS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K,
                 &zero, dd, M),
     CUBLAS_STATUS_SUCCESS);
  IS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, P, M, &one, dd, CUDA_R_32F, M,
                  de, CUDA_R_32F, M, &zero, df, CUDA_R_32F, N,
                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
     CUBLAS_STATUS_SUCCESS);
  CUDA_OK(
      cudaMemcpyAsync(f, df, N * P * sizeof(float), cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK(!memcmp(f, want, sizeof want),
        "two GEMMs on a non-blocking stream: F[0] = %g, want %g", f[0],
        want[0]);

  /* host alpha is read at the call, device alpha when the GEMM runs */
  float alpha = 2.0f;
  float *palpha = f;
  CUDA_OK(cudaMemcpy(dzero, &zero, sizeof zero, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize()); /* as in to_device */
  CUDA_OK(cudaLaunchHostFunc(s, hold, NULL));
  IS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, da, M, db, K,
                 &zero, dout, M),
     CUBLAS_STATUS_SUCCESS);
  alpha = 1000.0f; /* too late for the call above */
  CUDA_OK(cudaStreamSynchronize(s));
  ref_gemm(0, M, N, K, 2.0f, a, b, d);
  float gotd[M * N];
  CUDA_OK(cudaMemcpy(gotd, dout, sizeof gotd, cudaMemcpyDeviceToHost));
  CHECK(!memcmp(gotd, d, sizeof d), "host alpha: C[0] = %g, want %g", gotd[0],
        d[0]);

  *palpha = 1.0f;
  CUDA_OK(cudaMemcpy(dalpha, palpha, sizeof(float), cudaMemcpyHostToDevice));
  *palpha = 3.0f;
  CUDA_OK(cudaLaunchHostFunc(s, hold, NULL));
  CUDA_OK(cudaMemcpyAsync(dalpha, palpha, sizeof(float), cudaMemcpyHostToDevice,
                          s));
  IS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE),
     CUBLAS_STATUS_SUCCESS);
  IS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, dalpha, da, M, db, K,
                 dzero, dout, M),
     CUBLAS_STATUS_SUCCESS);
  IS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  CUDA_OK(cudaStreamSynchronize(s));
  ref_gemm(0, M, N, K, 3.0f, a, b, d);
  CUDA_OK(cudaMemcpy(gotd, dout, sizeof gotd, cudaMemcpyDeviceToHost));
  CHECK(!memcmp(gotd, d, sizeof d), "device alpha: C[0] = %g, want %g", gotd[0],
        d[0]);

  IS(cublasSetStream(h, NULL), CUBLAS_STATUS_SUCCESS);
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaFreeHost(pin));
  CUDA_OK(cudaFree(dev));
}

/* ---- the handle --------------------------------------------------------- */

static void test_handle(cublasHandle_t h) {
  cudaStream_t s = cudaStreamPerThread; /* not NULL */
  cublasPointerMode_t pm;
  cublasMath_t mm;
  IS(cublasGetStream(h, &s), CUBLAS_STATUS_SUCCESS);
  CHECK(s == NULL, "a new handle's stream: %p, want NULL", (void *)s);
  IS(cublasGetPointerMode(h, &pm), CUBLAS_STATUS_SUCCESS);
  CHECK(pm == CUBLAS_POINTER_MODE_HOST, "pointer mode %d, want host", (int)pm);
  IS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE),
     CUBLAS_STATUS_SUCCESS);
  IS(cublasGetPointerMode(h, &pm), CUBLAS_STATUS_SUCCESS);
  CHECK(pm == CUBLAS_POINTER_MODE_DEVICE, "pointer mode %d, want device",
        (int)pm);
  IS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  IS(cublasGetMathMode(h, &mm), CUBLAS_STATUS_SUCCESS);
  CHECK(mm == CUBLAS_DEFAULT_MATH, "math mode %d, want default", (int)mm);
  IS(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), CUBLAS_STATUS_SUCCESS);
  IS(cublasGetMathMode(h, &mm), CUBLAS_STATUS_SUCCESS);
  CHECK(mm == CUBLAS_PEDANTIC_MATH, "math mode %d, want pedantic", (int)mm);
  IS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
  static const cublasStatus_t all[] = {
      CUBLAS_STATUS_SUCCESS,          CUBLAS_STATUS_NOT_INITIALIZED,
      CUBLAS_STATUS_ALLOC_FAILED,     CUBLAS_STATUS_INVALID_VALUE,
      CUBLAS_STATUS_ARCH_MISMATCH,    CUBLAS_STATUS_MAPPING_ERROR,
      CUBLAS_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_INTERNAL_ERROR,
      CUBLAS_STATUS_NOT_SUPPORTED,    CUBLAS_STATUS_LICENSE_ERROR};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    const char *name = cublasGetStatusName(all[i]);
    const char *text = cublasGetStatusString(all[i]);
    CHECK(name && !strncmp(name, "CUBLAS_STATUS_", 14), "status %d: name %s",
          (int)all[i], name ? name : "(null)");
    CHECK(text && *text, "status %d: no text", (int)all[i]);
  }
  CHECK(!strcmp(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE),
                "CUBLAS_STATUS_INVALID_VALUE"),
        "the name of CUBLAS_STATUS_INVALID_VALUE");
}

#ifdef TEST_CUBLAS_SOFTCUDA
/* What only the stand-in reports: on a GPU these are undefined (a
 * destroyed handle), may work (pageable memory under HMM) or read another
 * allocation silently (a matrix past the end of its own). */
static void test_softcuda_faults(void) {
  cublasHandle_t h;
  const float one = 1.0f;
  float *a, *c, pageable[64] = {0};
  CUDA_OK(cudaMalloc((void **)&a, 64 * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&c, 64 * sizeof(float)));
  IS(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  IS(cublasSetPointerMode(h, (cublasPointerMode_t)5),
     CUBLAS_STATUS_INVALID_VALUE);
  IS(cublasSetMathMode(h, (cublasMath_t)77), CUBLAS_STATUS_INVALID_VALUE);
  IS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, pageable, 4, a, 4,
                 &one, c, 4),
     CUBLAS_STATUS_EXECUTION_FAILED);
  /* 4 x 4 with lda 21 spans 67 elements of a 64-element allocation; 5
   * C matrices 16 apart span 80 */
  IS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 21, a, 4, &one,
                 c, 4),
     CUBLAS_STATUS_EXECUTION_FAILED);
  IS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a,
                                CUDA_R_32F, 4, 0, a, CUDA_R_32F, 4, 0, &one, c,
                                CUDA_R_32F, 4, 16, 5, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
     CUBLAS_STATUS_EXECUTION_FAILED);
  (void)cudaGetLastError(); /* the refused launch's */
  IS(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  IS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, a, 4, &one,
                 c, 4),
     CUBLAS_STATUS_NOT_INITIALIZED);
  IS(cublasSetStream(h, NULL), CUBLAS_STATUS_NOT_INITIALIZED);
  IS(cublasDestroy(h), CUBLAS_STATUS_NOT_INITIALIZED);
  CUDA_OK(cudaFree(a));
  CUDA_OK(cudaFree(c));
}
#endif

int main(void) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0) {
    int drv = 0, rt = 0;
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices; "
           "driver %d, runtime %d)\n",
           e != cudaSuccess ? cudaGetErrorName(e) : "cudaSuccess", ndev, drv,
           rt);
    return 77;
  }
  int dev = 0;
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaGetDeviceProperties(&prop, dev));
  printf("test_cublas: device %d of %d: %s (sm_%d%d), cuBLAS %d\n", dev, ndev,
         prop.name, prop.major, prop.minor, CUBLAS_VERSION);

  cublasHandle_t h;
  cublasStatus_t st = cublasCreate(&h);
  if (st != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "FAIL: cublasCreate: %s: %s\n", cublasGetStatusName(st),
            cublasGetStatusString(st));
    return 1;
  }
  test_handle(h);
  test_transposes(h);
  test_strided(h);
  test_edges(h);
  test_ties(h);
  test_invalid(h);
  test_stream_order(h);
  IS(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
#ifdef TEST_CUBLAS_SOFTCUDA
  test_softcuda_faults();
#endif
  printf("test_cublas: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

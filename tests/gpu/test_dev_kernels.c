/*
 * test_dev_kernels.c - the device kernels (kernels/device.cu) against the
 * host reference (kernels/reduce.c), bit for bit:
 *  - kernel_dev_reduce for every dtype x op, counts {0, 1, 7, 1000,
 *    1048579}, six pointer layouts (all 16-byte aligned, all one element
 *    off, mixed offsets: the scalar path, dst == a aligned and one element
 *    off, dst == b) on a non-blocking stream, compared with kernel_reduce;
 *  - kernel_dev_div for every dtype, divisors {2, 3, 7, 8, 12345} (and 1,
 *    a no-op), aligned and one element off, compared with kernel_div;
 *  - sizes around every boundary of the kernel's split (device.cu's
 *    launch): one 16-byte vector, one block of vectors or scalars, the
 *    whole grid (SMs x 4 blocks x 256 threads) and its first grid-stride
 *    wrap, each minus one, exact and plus one, for sum, min and division;
 *  - every one of the 65536 f16 and bf16 bit patterns against two
 *    permutations of them, for every op and divisor (rounding ties,
 *    subnormals, infinities and NaNs of the 16-bit types, all reached);
 *  - kernel_dev_copy, device to device and host to device;
 *  - kernel_dev_reduce_n (one kernel for up to 8 ranks' buffers) for every
 *    dtype x op, 1, 2, 3, 8 and 11 sources (two kernels), counts 0, 1, 7,
 *    1000: f16/bf16 against f32 accumulation rounded once per kernel, every
 *    other type against the pairwise host chain, bit for bit;
 *  - kernel_dev_convert against sharc_convert for every pair of f32, f16
 *    and bf16 (all 65536 patterns of the 16-bit sources);
 *  - argument errors come back as return values and leave no CUDA error.
 * Inputs include NaN (quiet, signalling, payloads, negative), infinities,
 * signed zeros, subnormals, the largest finite values, x and -x pairs, and
 * integers that wrap. Bytes around dst must keep their 0xA5 guard fill.
 * Results must be equal byte for byte, except that where the host and the
 * device both produce a NaN from sum, prod or div its payload and sign may
 * differ (kernels/device.h says why); those are counted and reported, not
 * failed.
 *
 * On softcuda the kernels are device.cu's own code compiled as host C++
 * (tests/softcuda/cuda_host.h); ctest runs this test in both grid orders
 * (SOFTCUDA_GRID_ORDER=reverse), under ASan and UBSan in CI, so that a
 * misaligned vector load is a report as it is a fault on a GPU.
 *
 *   test_dev_kernels          the test (exit 77 and one SKIP line without a
 *                             usable CUDA device)
 *   test_dev_kernels --big    also n = 2^31 + 17 u8 elements (about 6.5 GB
 *                             of device and 9 GB of host memory): indices
 *                             past 2^31 in the vector and the scalar path
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "reduce.h"
#include "sharc.h"

#include "cuda_ok.h"

/* n_failures counts failed cases; REPORT prints the first 40 lines. */
static uint64_t n_cases, n_failures, n_nan_payload, n_reported;

#define REPORT(...)                                                            \
  do {                                                                         \
    if (n_reported++ < 40) {                                                   \
      fprintf(stderr, "FAIL: ");                                               \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
    }                                                                          \
  } while (0)

/* splitmix64, fixed seed: the same inputs on every run. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#define MAX_N ((size_t)(1u << 20) + 3)
#define GUARD 16 /* elements of 0xA5 checked after dst */
static const size_t counts[] = {0, 1, 7, 1000, MAX_N};
#define N_COUNTS (sizeof counts / sizeof counts[0])

static int is_float(sharc_dtype_t dt) {
  return dt == SHARC_F32 || dt == SHARC_F64 || dt == SHARC_F16 ||
         dt == SHARC_BF16;
}

/* ---- inputs -----------------------------------------------------------------
 * Per element, 1 in 8 is a special value of the type, 1 in 8 random bits,
 * the rest ordinary values (24 or 53 significant bits, magnitudes around
 * 2^-8..2^8, so sums round and products stay finite). */

static const uint32_t f32_special[] = {
    0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
    0x7f800001, 0x7fa12345, 0xffd54321, 0x7f7fffff, 0xff7fffff, 0x00800000,
    0x00000001, 0x807fffff, 0x3f800000, 0xbf800000};
static const uint64_t f64_special[] = {
    0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull,
    0xfff0000000000000ull, 0x7ff8000000000000ull, 0xfff8000000000000ull,
    0x7ff0000000000001ull, 0x7ff4000012345678ull, 0x7fefffffffffffffull,
    0xffefffffffffffffull, 0x0010000000000000ull, 0x0000000000000001ull,
    0x800fffffffffffffull, 0x3ff0000000000000ull};
static const uint16_t f16_special[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00,
                                       0xfe00, 0x7c01, 0x7d55, 0x7bff, 0xfbff,
                                       0x0400, 0x0001, 0x83ff, 0x3c00};
static const uint16_t bf16_special[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0,
                                        0xffc0, 0x7f81, 0x7fa5, 0x7f7f, 0xff7f,
                                        0x0080, 0x0001, 0x807f, 0x3f80};
static const int64_t int_special[] = {
    0,         1,         -1,        127,       -128,    255,
    INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, 0x10000, -0x10000};
#define PICK(arr, r) (arr[(r) % (sizeof arr / sizeof arr[0])])

static void fill(sharc_dtype_t dt, void *buf, size_t n) {
  const size_t es = sharc_dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    unsigned kind = (unsigned)(r & 7); /* 0 special, 1 random bits */
    uint64_t s = r >> 3;
    uint8_t *p = (uint8_t *)buf + i * es;
    switch (dt) {
    case SHARC_F32: {
      uint32_t u = (uint32_t)(s >> 16);
      if (kind == 0)
        u = PICK(f32_special, s);
      else if (kind > 1) /* sign, exponent 119..134, random mantissa */
        u = (uint32_t)(s & 0x807fffffu) |
            ((119u + (unsigned)(s >> 40) % 16) << 23);
      memcpy(p, &u, 4);
      break;
    }
    case SHARC_F64: {
      uint64_t u = r;
      if (kind == 0)
        u = PICK(f64_special, s);
      else if (kind > 1)
        u = (r & 0x800fffffffffffffull) |
            ((uint64_t)(1015u + (unsigned)(s >> 50) % 16) << 52);
      memcpy(p, &u, 8);
      break;
    }
    case SHARC_F16: {
      uint16_t u = (uint16_t)(s >> 8);
      if (kind == 0)
        u = PICK(f16_special, s);
      else if (kind > 1) /* exponent 7..22 of 0..30: 2^-8..2^7 */
        u = (uint16_t)((u & 0x83ffu) | ((7u + (unsigned)(s >> 40) % 16) << 10));
      memcpy(p, &u, 2);
      break;
    }
    case SHARC_BF16: {
      uint16_t u = (uint16_t)(s >> 8);
      if (kind == 0)
        u = PICK(bf16_special, s);
      else if (kind > 1)
        u = (uint16_t)((u & 0x807fu) |
                       ((119u + (unsigned)(s >> 40) % 16) << 7));
      memcpy(p, &u, 2);
      break;
    }
    default: { /* integers: little-endian low bytes of a 64-bit value */
      int64_t v = (int64_t)r;
      if (kind == 0)
        v = PICK(int_special, s);
      else if (kind > 3) /* small values, so min/max/div see both signs */
        v = (int64_t)(s % 2001) - 1000;
      memcpy(p, &v, es);
      break;
    }
    }
  }
}

/* b[i] = -a[i] for about 1 in 16 float elements: exact cancellation, so
 * sums produce +0 and x - x style zeros. */
static void add_negations(sharc_dtype_t dt, const void *a, void *b, size_t n) {
  const size_t es = sharc_dtype_size(dt);
  if (!is_float(dt))
    return;
  for (size_t i = 0; i < n; i++) {
    if ((rnd() & 15) != 0)
      continue;
    memcpy((uint8_t *)b + i * es, (const uint8_t *)a + i * es, es);
    ((uint8_t *)b)[i * es + es - 1] ^= 0x80; /* sign bit, little-endian */
  }
}

/* ---- comparison -------------------------------------------------------- */

static int is_nan(sharc_dtype_t dt, const uint8_t *p) {
  switch (dt) {
  case SHARC_F32: {
    uint32_t u;
    memcpy(&u, p, 4);
    return (u & 0x7fffffffu) > 0x7f800000u;
  }
  case SHARC_F64: {
    uint64_t u;
    memcpy(&u, p, 8);
    return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
  }
  case SHARC_F16: {
    uint16_t u;
    memcpy(&u, p, 2);
    return (u & 0x7fffu) > 0x7c00u;
  }
  case SHARC_BF16: {
    uint16_t u;
    memcpy(&u, p, 2);
    return (u & 0x7fffu) > 0x7f80u;
  }
  default:
    return 0;
  }
}

static void hex(char *out, size_t len, const uint8_t *p, size_t es) {
  size_t k = 0;
  k += (size_t)snprintf(out, len, "0x");
  for (size_t j = es; j-- > 0 && k < len;)
    k += (size_t)snprintf(out + k, len - k, "%02x", p[j]);
}

/* got and want hold n elements; got_full is dst's whole buffer region as
 * copied back (od elements before dst, GUARD after). nan_any: arithmetic
 * op on a float type, so NaN payloads may differ. Returns failures. */
static int compare(const char *what, sharc_dtype_t dt, int nan_any,
                   const uint8_t *got_full, size_t od, const uint8_t *want,
                   const uint8_t *a, const uint8_t *b, size_t n) {
  const size_t es = sharc_dtype_size(dt);
  const uint8_t *got = got_full + od * es;
  int bad = 0;
  for (size_t i = 0; i < od * es; i++)
    if (got_full[i] != 0xA5) {
      REPORT("%s: byte %zu before dst overwritten (0x%02x)", what, od * es - i,
             got_full[i]);
      return 1;
    }
  for (size_t i = 0; i < GUARD * es; i++)
    if (got[n * es + i] != 0xA5) {
      REPORT("%s: byte %zu after dst[n - 1] overwritten (0x%02x)", what, i,
             got[n * es + i]);
      return 1;
    }
  if (n == 0 || memcmp(got, want, n * es) == 0)
    return 0;
  for (size_t i = 0; i < n; i++) {
    const uint8_t *g = got + i * es, *w = want + i * es;
    if (memcmp(g, w, es) == 0)
      continue;
    if (nan_any && is_nan(dt, g) && is_nan(dt, w)) {
      n_nan_payload++;
      continue;
    }
    if (bad++ < 3) {
      char sa[24], sb[24] = "-", sg[24], sw[24];
      hex(sa, sizeof sa, a + i * es, es);
      if (b != NULL)
        hex(sb, sizeof sb, b + i * es, es);
      hex(sg, sizeof sg, g, es);
      hex(sw, sizeof sw, w, es);
      REPORT("%s: element %zu: a %s b %s: device %s, host %s", what, i, sa, sb,
             sg, sw);
    }
  }
  return bad > 0;
}

/* ---- the cases ---------------------------------------------------------- */

typedef struct {
  const char *name;
  size_t od, oa, ob; /* element offsets of dst, a, b in their buffers */
  int alias;         /* 0: dst apart, 1: dst == a, 2: dst == b */
} layout_t;

static const layout_t layouts[] = {
    {"aligned", 0, 0, 0, 0}, /* 16-byte vectors throughout */
    {"all+1", 1, 1, 1, 0},   /* scalar head, then vectors */
    {"mixed", 2, 1, 0, 0},   /* offsets differ mod 16: scalar path */
    {"dst==a", 0, 0, 0, 1},   {"dst==a+1", 1, 1, 1, 1},
    {"dst==b+1", 1, 0, 1, 2}, /* in place, scalar path */
};
#define N_LAYOUTS (sizeof layouts / sizeof layouts[0])

typedef struct {
  uint8_t *da, *db, *dd; /* device buffers, (MAX_N + 2 * GUARD) * 8 bytes */
  uint8_t *ha, *hb;      /* inputs, MAX_N * 8 bytes */
  uint8_t *want, *got;   /* host results */
  size_t bytes;
  cudaStream_t stream;
} ctx_t;

static void run_reduce(ctx_t *c, sharc_dtype_t dt, sharc_op_t op, size_t n,
                       const layout_t *l) {
  const size_t es = sharc_dtype_size(dt);
  uint8_t *a = c->da + l->oa * es, *b = c->db + l->ob * es;
  uint8_t *dbuf = l->alias == 1 ? c->da : l->alias == 2 ? c->db : c->dd;
  size_t od = l->alias == 1 ? l->oa : l->alias == 2 ? l->ob : l->od;
  uint8_t *dst = dbuf + od * es;
  const size_t span = (od + n + GUARD) * es;
  char what[128];
  snprintf(what, sizeof what, "reduce %s %s n=%zu %s", sharc_dtype_name(dt),
           sharc_op_name(op), n, l->name);
  n_cases++;

  /* the bytes this case touches, and its guards (not the whole buffers:
   * the boundary sweep runs thousands of cases) */
  const size_t maxoff = 2; /* the largest element offset of `layouts` */
  const size_t fill_bytes = (maxoff + n + GUARD) * es;
  CUDA_OK(cudaMemsetAsync(c->da, 0xA5, fill_bytes, c->stream));
  CUDA_OK(cudaMemsetAsync(c->db, 0xA5, fill_bytes, c->stream));
  CUDA_OK(cudaMemsetAsync(c->dd, 0xA5, fill_bytes, c->stream));
  CUDA_OK(cudaMemcpyAsync(a, c->ha, n * es, cudaMemcpyHostToDevice, c->stream));
  CUDA_OK(cudaMemcpyAsync(b, c->hb, n * es, cudaMemcpyHostToDevice, c->stream));
  int rc = kernel_dev_reduce(dt, op, dst, a, b, n, c->stream);
  if (rc != 0) {
    REPORT("%s: kernel_dev_reduce returned %s", what,
           kernel_dev_error_string(rc));
    n_failures++;
    CUDA_OK(cudaStreamSynchronize(c->stream));
    return;
  }
  CUDA_OK(
      cudaMemcpyAsync(c->got, dbuf, span, cudaMemcpyDeviceToHost, c->stream));
  CUDA_OK(cudaStreamSynchronize(c->stream));

  /* The host reference, in place where the device ran in place. */
  if (l->alias == 1) {
    memcpy(c->want, c->ha, n * es);
    kernel_reduce(dt, op, c->want, c->want, c->hb, n);
  } else if (l->alias == 2) {
    memcpy(c->want, c->hb, n * es);
    kernel_reduce(dt, op, c->want, c->ha, c->want, n);
  } else {
    kernel_reduce(dt, op, c->want, c->ha, c->hb, n);
  }
  const int nan_any = is_float(dt) && op != SHARC_MIN && op != SHARC_MAX;
  if (compare(what, dt, nan_any, c->got, od, c->want, c->ha, c->hb, n))
    n_failures++;
}

static void run_div(ctx_t *c, sharc_dtype_t dt, int divisor, size_t n,
                    size_t off) {
  const size_t es = sharc_dtype_size(dt);
  uint8_t *buf = c->da + off * es;
  const size_t span = (off + n + GUARD) * es;
  char what[128];
  snprintf(what, sizeof what, "div %s /%d n=%zu offset %zu",
           sharc_dtype_name(dt), divisor, n, off);
  n_cases++;

  CUDA_OK(cudaMemsetAsync(c->da, 0xA5, span, c->stream));
  CUDA_OK(
      cudaMemcpyAsync(buf, c->ha, n * es, cudaMemcpyHostToDevice, c->stream));
  int rc = kernel_dev_div(dt, buf, n, divisor, c->stream);
  if (rc != 0) {
    REPORT("%s: kernel_dev_div returned %s", what, kernel_dev_error_string(rc));
    n_failures++;
    CUDA_OK(cudaStreamSynchronize(c->stream));
    return;
  }
  CUDA_OK(
      cudaMemcpyAsync(c->got, c->da, span, cudaMemcpyDeviceToHost, c->stream));
  CUDA_OK(cudaStreamSynchronize(c->stream));
  memcpy(c->want, c->ha, n * es);
  kernel_div(dt, c->want, n, divisor);
  if (compare(what, dt, is_float(dt), c->got, off, c->want, c->ha, NULL, n))
    n_failures++;
}

static void run_copy(ctx_t *c, size_t bytes, size_t od, size_t os,
                     int from_host) {
  char what[96];
  snprintf(what, sizeof what, "copy %zu bytes dst+%zu src+%zu from %s", bytes,
           od, os, from_host ? "host" : "device");
  n_cases++;
  CUDA_OK(cudaMemsetAsync(c->dd, 0xA5, c->bytes, c->stream));
  const uint8_t *src = c->ha + os;
  if (!from_host) {
    CUDA_OK(cudaMemcpyAsync(c->da, c->ha, os + bytes, cudaMemcpyHostToDevice,
                            c->stream));
    src = c->da + os;
  }
  int rc = kernel_dev_copy(c->dd + od, src, bytes, c->stream);
  if (rc != 0) {
    REPORT("%s: kernel_dev_copy returned %s", what,
           kernel_dev_error_string(rc));
    n_failures++;
    CUDA_OK(cudaStreamSynchronize(c->stream));
    return;
  }
  CUDA_OK(cudaMemcpyAsync(c->got, c->dd, od + bytes + GUARD,
                          cudaMemcpyDeviceToHost, c->stream));
  CUDA_OK(cudaStreamSynchronize(c->stream));
  /* As a u8 array: od bytes of guard before, GUARD after. */
  if (compare(what, SHARC_U8, 0, c->got, od, c->ha + os, c->ha + os, NULL,
              bytes))
    n_failures++;
}

/* Invalid arguments: a return value, nothing queued, no CUDA error left. */
static void run_errors(ctx_t *c) {
  void *s = c->stream;
  struct {
    const char *what;
    int rc;
    int want_error;
  } t[] = {
      {"bad dtype",
       kernel_dev_reduce(SHARC_DTYPE_COUNT, SHARC_SUM, c->dd, c->da, c->db, 8,
                         s),
       1},
      {"bad op",
       kernel_dev_reduce(SHARC_F32, SHARC_OP_COUNT, c->dd, c->da, c->db, 8, s),
       1},
      {"NULL dst",
       kernel_dev_reduce(SHARC_F32, SHARC_SUM, NULL, c->da, c->db, 8, s), 1},
      {"f32 at an odd address",
       kernel_dev_reduce(SHARC_F32, SHARC_SUM, c->dd + 1, c->da, c->db, 8, s),
       1},
      {"n == 0 with NULL",
       kernel_dev_reduce(SHARC_F32, SHARC_SUM, NULL, NULL, NULL, 0, s), 0},
      {"divisor 0", kernel_dev_div(SHARC_I32, c->da, 8, 0, s), 1},
      {"divisor -3", kernel_dev_div(SHARC_I32, c->da, 8, -3, s), 1},
      {"div bad dtype", kernel_dev_div(SHARC_DTYPE_COUNT, c->da, 8, 2, s), 1},
      {"div f64 misaligned", kernel_dev_div(SHARC_F64, c->da + 4, 8, 2, s), 1},
      {"copy NULL", kernel_dev_copy(NULL, c->da, 8, s), 1},
      {"copy 0 bytes", kernel_dev_copy(NULL, NULL, 0, s), 0},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    n_cases++;
    if (t[i].want_error ? t[i].rc == 0 : t[i].rc != 0) {
      REPORT("%s: returned %d (%s), expected %s", t[i].what, t[i].rc,
             kernel_dev_error_string(t[i].rc),
             t[i].want_error ? "an error" : "0");
      n_failures++;
    }
  }
  CUDA_OK(cudaStreamSynchronize(c->stream));
  cudaError_t last = cudaGetLastError();
  n_cases++;
  if (last != cudaSuccess) {
    REPORT("argument errors left a CUDA error: %s", cudaGetErrorName(last));
    n_failures++;
  }
}

/* n = 2^31 + 17 u8 elements: the vector loop (all+1) and the scalar loop
 * (mixed) index past 2^31. Inputs are a cheap pattern, not random. */
static void run_big(cudaStream_t stream) {
  const size_t n = ((size_t)1 << 31) + 17;
  uint8_t *ha = malloc(n), *hb = malloc(n), *want = malloc(n),
          *got = malloc(n + 2);
  uint8_t *da, *db, *dd;
  if (!ha || !hb || !want || !got) {
    REPORT("--big needs 9 GB of host memory");
    n_failures++;
    goto out;
  }
  CUDA_OK(cudaMalloc((void **)&da, n + 16));
  CUDA_OK(cudaMalloc((void **)&db, n + 16));
  CUDA_OK(cudaMalloc((void **)&dd, n + 16));
  for (size_t i = 0; i < n; i++) {
    ha[i] = (uint8_t)(i * 131u + (i >> 20));
    hb[i] = (uint8_t)(i * 71u + 3u + (i >> 27));
  }
  kernel_reduce(SHARC_U8, SHARC_SUM, want, ha, hb, n);
  for (int v = 0; v < 2; v++) { /* 0: all+1 (vectors), 1: mixed (scalar) */
    size_t od = v ? 2 : 1;
    n_cases++;
    CUDA_OK(cudaMemcpyAsync(da + 1, ha, n, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaMemcpyAsync(db + (v ? 0 : 1), hb, n, cudaMemcpyHostToDevice,
                            stream));
    int rc = kernel_dev_reduce(SHARC_U8, SHARC_SUM, dd + od, da + 1,
                               db + (v ? 0 : 1), n, stream);
    if (rc != 0) {
      REPORT("big %s: %s", v ? "mixed" : "all+1", kernel_dev_error_string(rc));
      n_failures++;
      continue;
    }
    CUDA_OK(cudaMemcpyAsync(got, dd + od, n, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    if (memcmp(got, want, n) != 0) {
      size_t i = 0;
      while (got[i] == want[i])
        i++;
      REPORT("big u8 sum n=%zu %s: element %zu: device %u, host %u", n,
             v ? "mixed" : "all+1", i, got[i], want[i]);
      n_failures++;
    }
  }
  CUDA_OK(cudaFree(da));
  CUDA_OK(cudaFree(db));
  CUDA_OK(cudaFree(dd));
out:
  free(ha);
  free(hb);
  free(want);
  free(got);
}

/* Counts around the boundaries of device.cu's split of n elements of es
 * bytes over a grid of at most sms x 4 blocks of 256 threads: a vector (V
 * elements), a block of vectors and of scalars, the full grid of each and
 * its first grid-stride wrap; each -1, +0, +1; those up to MAX_N. */
static size_t boundary_counts(size_t es, int sms, size_t *out, size_t max) {
  const size_t v = 16 / es, threads = 256, grid = (size_t)sms * 4 * threads;
  const size_t edge[] = {v,           2 * v,        threads,
                         threads * v, grid,         grid * v,
                         2 * grid,    2 * grid * v, 2 * grid * v + 3 * v};
  size_t k = 0;
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
    for (int d = -1; d <= 1; d++) {
      size_t n = edge[i] + (size_t)d;
      int seen = n == 0 || n > MAX_N;
      for (size_t j = 0; j < k && !seen; j++)
        seen = out[j] == n;
      if (!seen && k < max)
        out[k++] = n;
    }
  return k;
}

/* The boundary sizes of dt: sum, min and division, on the vector path
 * (aligned, one element off, in place) and the scalar path (mixed). */
static void run_boundaries(ctx_t *c, sharc_dtype_t dt, int sms) {
  size_t ns[32];
  size_t k = boundary_counts(sharc_dtype_size(dt), sms, ns, 32);
  static const sharc_op_t ops[] = {SHARC_SUM, SHARC_MIN};
  for (size_t i = 0; i < k; i++) {
    for (size_t o = 0; o < 2; o++)
      for (size_t l = 0; l < 4; l++) /* aligned, all+1, mixed, dst==a */
        run_reduce(c, dt, ops[o], ns[i], &layouts[l]);
    run_div(c, dt, 3, ns[i], 0);
    run_div(c, dt, 3, ns[i], 1);
  }
}

/* Every 16-bit pattern of dt (f16, bf16) as a, against two permutations
 * as b (x -> 40503 x + 1 and x -> 65535 - x, mod 2^16): every op, in place
 * and apart, and every pattern divided by each divisor. */
static void run_patterns(ctx_t *c, sharc_dtype_t dt) {
  enum { NP = 65536 };
  uint16_t *a = (uint16_t *)c->ha, *b = (uint16_t *)c->hb;
  static const int divisors[] = {2, 3, 7, 8, 12345};
  for (int perm = 0; perm < 2; perm++) {
    for (uint32_t i = 0; i < NP; i++) {
      a[i] = (uint16_t)i;
      b[i] = perm ? (uint16_t)(NP - 1 - i) : (uint16_t)(40503u * i + 1u);
    }
    for (int o = 0; o < SHARC_OP_COUNT; o++) {
      run_reduce(c, dt, (sharc_op_t)o, NP, &layouts[0]);
      run_reduce(c, dt, (sharc_op_t)o, NP, &layouts[3]);
    }
  }
  for (uint32_t i = 0; i < NP; i++)
    a[i] = (uint16_t)i;
  for (size_t v = 0; v < sizeof divisors / sizeof divisors[0]; v++)
    run_div(c, dt, divisors[v], NP, 0);
}

/* One element of kernel_dev_reduce_n's 16-bit float reference: x OP y in
 * f32 (min and max as the kernels compare). */
static float op_f32(sharc_op_t op, float x, float y) {
  switch (op) {
  case SHARC_PROD:
    return x * y;
  case SHARC_MIN:
    return x < y ? x : y;
  case SHARC_MAX:
    return x > y ? x : y;
  default: /* SUM, AVG */
    return x + y;
  }
}

static float ld16(sharc_dtype_t dt, uint16_t v) {
  return dt == SHARC_F16 ? kernel_f16_to_f32(v) : kernel_bf16_to_f32(v);
}

static uint16_t st16(sharc_dtype_t dt, float f) {
  return dt == SHARC_F16 ? kernel_f32_to_f16(f) : kernel_f32_to_bf16(f);
}

/* kernel_dev_reduce_n over nsrc sources of n elements (source k at element
 * k * stride of da), into dd, against its reference: f16/bf16 accumulated
 * in f32 and rounded once per kernel of up to 8 sources (AVG divided in
 * f32 before the last rounding); every other type the pairwise host
 * chain kernel_reduce (and kernel_div for AVG), bit for bit. */
static void run_reduce_n(ctx_t *c, sharc_dtype_t dt, sharc_op_t op, int nsrc,
                         size_t n, size_t stride) {
  const size_t es = sharc_dtype_size(dt);
  const void *srcs[16];
  for (int k = 0; k < nsrc; k++)
    srcs[k] = c->da + (size_t)k * stride * es;
  /* on the kernel's stream: a cudaMemcpy from pageable memory may return
   * before it landed, and c->stream does not wait for the legacy stream */
  CUDA_OK(cudaMemcpyAsync(c->da, c->ha, (size_t)nsrc * stride * es,
                          cudaMemcpyHostToDevice, c->stream));
  memset(c->got, 0xA5, (n + GUARD) * es);
  CUDA_OK(cudaMemcpyAsync(c->dd, c->got, (n + GUARD) * es,
                          cudaMemcpyHostToDevice, c->stream));
  char what[80];
  snprintf(what, sizeof what, "reduce_n %s %s, %d sources, n %zu",
           sharc_dtype_name(dt), sharc_op_name(op), nsrc, n);
  n_cases++;
  int err = kernel_dev_reduce_n(dt, op, c->dd, srcs, nsrc, n, c->stream);
  if (err != 0) {
    REPORT("%s: %s", what, kernel_dev_error_string(err));
    n_failures++;
    return;
  }
  CUDA_OK(cudaStreamSynchronize(c->stream));
  CUDA_OK(cudaMemcpy(c->got, c->dd, (n + GUARD) * es, cudaMemcpyDeviceToHost));
  uint8_t *want = c->want;
  if (dt == SHARC_F16 || dt == SHARC_BF16) {
    const uint16_t *h = (const uint16_t *)c->ha;
    uint16_t *w = (uint16_t *)want;
    for (size_t i = 0; i < n; i++) {
      int k = 1;
      float acc = ld16(dt, h[i]); /* the first kernel: sources 0..7 */
      for (int first = 1; first || k < nsrc; first = 0) {
        int m = 1;
        if (!first) /* a later kernel: dst, then up to 7 more sources */
          acc = ld16(dt, w[i]);
        for (; m < 8 && k < nsrc; m++, k++)
          acc = op_f32(op, acc, ld16(dt, h[(size_t)k * stride + i]));
        if (op == SHARC_AVG && k == nsrc)
          acc = acc / (float)nsrc;
        w[i] = st16(dt, acc);
      }
    }
  } else {
    memcpy(want, c->ha, n * es);
    sharc_op_t pop = op == SHARC_AVG ? SHARC_SUM : op;
    for (int k = 1; k < nsrc; k++)
      kernel_reduce(dt, pop, want, want, c->ha + (size_t)k * stride * es, n);
    if (op == SHARC_AVG)
      kernel_div(dt, want, n, nsrc);
  }
  int arith = (op == SHARC_SUM || op == SHARC_PROD || op == SHARC_AVG) &&
              (dt == SHARC_F32 || dt == SHARC_F64 || dt == SHARC_F16 ||
               dt == SHARC_BF16);
  if (compare(what, dt, arith, c->got, 0, want, c->ha, NULL, n))
    n_failures++;
}

/* kernel_dev_convert (sharc_convert_cuda's kernel) against sharc_convert,
 * bit for bit: every pair of f32, f16 and bf16; 16-bit sources over all
 * 65536 patterns, f32 sources over fill()'s values (specials, ties). */
static void run_convert(ctx_t *c) {
  static const sharc_dtype_t t[] = {SHARC_F32, SHARC_F16, SHARC_BF16};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      sharc_dtype_t dt = t[i], st = t[j];
      size_t n = st == SHARC_F32 ? MAX_N : 65536;
      if (st == SHARC_F32)
        fill(st, c->ha, n);
      else
        for (uint32_t k = 0; k < n; k++)
          ((uint16_t *)c->ha)[k] = (uint16_t)k;
      size_t ds = sharc_dtype_size(dt), ss = sharc_dtype_size(st);
      memset(c->got, 0xA5, (n + GUARD) * ds);
      CUDA_OK(cudaMemcpyAsync(c->dd, c->got, (n + GUARD) * ds,
                              cudaMemcpyHostToDevice, c->stream));
      CUDA_OK(cudaMemcpyAsync(c->da, c->ha, n * ss, cudaMemcpyHostToDevice,
                              c->stream));
      char what[64];
      snprintf(what, sizeof what, "convert %s to %s", sharc_dtype_name(st),
               sharc_dtype_name(dt));
      int err = kernel_dev_convert(c->dd, dt, c->da, st, n, c->stream);
      if (err != 0) {
        REPORT("%s: %s", what, kernel_dev_error_string(err));
        n_failures++;
        continue;
      }
      CUDA_OK(cudaStreamSynchronize(c->stream));
      CUDA_OK(
          cudaMemcpy(c->got, c->dd, (n + GUARD) * ds, cudaMemcpyDeviceToHost));
      if (sharc_convert(c->want, dt, c->ha, st, n) != SHARC_OK) {
        REPORT("%s: sharc_convert failed", what);
        n_failures++;
        continue;
      }
      n_cases++;
      if (compare(what, dt, 0, c->got, 0, c->want, c->ha, NULL, n))
        n_failures++;
    }
  /* not a float pair: refused, nothing queued */
  if (kernel_dev_convert(c->dd, SHARC_I32, c->da, SHARC_F32, 1, c->stream) !=
      (int)cudaErrorInvalidValue) {
    REPORT("convert f32 to i32 was not refused");
    n_failures++;
  }
  n_cases++;
}

int main(int argc, char **argv) {
  int big = argc > 1 && strcmp(argv[1], "--big") == 0;
  char why[256];
  int ndev = 0;
  if (!kernel_dev_available(&ndev, why, sizeof why)) {
    printf("SKIP: no CUDA device (%s)\n", why);
    return 77;
  }
  int dev = 0;
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaGetDeviceProperties(&prop, dev));
  const char *order = getenv("SOFTCUDA_GRID_ORDER");
  printf("test_dev_kernels: device %d of %d: %s (sm_%d%d, %d SMs)%s%s\n", dev,
         ndev, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
         order ? ", SOFTCUDA_GRID_ORDER=" : "", order ? order : "");
  char ver[96];
  kernel_dev_versions(ver, sizeof ver);
  printf("test_dev_kernels: %s\n", ver);

  ctx_t c = {0};
  c.bytes = (MAX_N + 2 * GUARD) * 8;
  CUDA_OK(cudaMalloc((void **)&c.da, c.bytes));
  CUDA_OK(cudaMalloc((void **)&c.db, c.bytes));
  CUDA_OK(cudaMalloc((void **)&c.dd, c.bytes));
  CUDA_OK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  c.ha = malloc(c.bytes);
  c.hb = malloc(c.bytes);
  c.want = malloc(c.bytes);
  c.got = malloc(c.bytes);
  if (!c.ha || !c.hb || !c.want || !c.got) {
    fprintf(stderr, "FAIL: out of host memory\n");
    return 1;
  }

  static const int divisors[] = {1, 2, 3, 7, 8, 12345};
  for (int d = 0; d < SHARC_DTYPE_COUNT; d++) {
    sharc_dtype_t dt = (sharc_dtype_t)d;
    fill(dt, c.ha, MAX_N);
    fill(dt, c.hb, MAX_N);
    add_negations(dt, c.ha, c.hb, MAX_N);
    uint64_t fails_before = n_failures;
    for (int o = 0; o < SHARC_OP_COUNT; o++)
      for (size_t k = 0; k < N_COUNTS; k++)
        for (size_t l = 0; l < N_LAYOUTS; l++)
          run_reduce(&c, dt, (sharc_op_t)o, counts[k], &layouts[l]);
    for (size_t v = 0; v < sizeof divisors / sizeof divisors[0]; v++)
      for (size_t k = 0; k < N_COUNTS; k++)
        for (size_t off = 0; off < 2; off++)
          run_div(&c, dt, divisors[v], counts[k], off);
    fill(dt, c.ha, MAX_N);
    fill(dt, c.hb, MAX_N);
    run_boundaries(&c, dt, prop.multiProcessorCount);
    if (dt == SHARC_F16 || dt == SHARC_BF16)
      run_patterns(&c, dt);
    printf("  %-5s reduce (5 ops x %zu counts x %zu layouts), div, boundary "
           "sizes%s: %s\n",
           sharc_dtype_name(dt), N_COUNTS, N_LAYOUTS,
           dt == SHARC_F16 || dt == SHARC_BF16 ? ", all 65536 patterns" : "",
           n_failures == fails_before ? "ok" : "FAILED");
  }

  fill(SHARC_U8, c.ha, MAX_N);
  for (size_t k = 0; k < N_COUNTS; k++)
    for (int h = 0; h < 2; h++) {
      run_copy(&c, counts[k], 0, 0, h);
      run_copy(&c, counts[k], 3, 1, h);
    }
  static const int nsrcs[] = {1, 2, 3, 8, 11};
  for (int d = 0; d < SHARC_DTYPE_COUNT; d++) {
    fill((sharc_dtype_t)d, c.ha, 11 * 1024);
    for (int o = 0; o < SHARC_OP_COUNT; o++)
      for (size_t k = 0; k < sizeof nsrcs / sizeof nsrcs[0]; k++)
        for (size_t j = 0; j < 4; j++) /* counts 0, 1, 7, 1000 */
          run_reduce_n(&c, (sharc_dtype_t)d, (sharc_op_t)o, nsrcs[k], counts[j],
                       1024);
  }
  printf("  reduce_n (every dtype x op, 1-11 sources): %s\n",
         n_failures ? "see above" : "ok");
  run_convert(&c);
  printf("  convert f32/f16/bf16 pairs (all 16-bit patterns): %s\n",
         n_failures ? "see above" : "ok");
  run_errors(&c);
  if (big)
    run_big(c.stream);

  CUDA_OK(cudaStreamDestroy(c.stream));
  CUDA_OK(cudaFree(c.da));
  CUDA_OK(cudaFree(c.db));
  CUDA_OK(cudaFree(c.dd));
  free(c.ha);
  free(c.hb);
  free(c.want);
  free(c.got);
  printf("test_dev_kernels: %llu cases, %llu failures; %llu NaN results "
         "differ from the host only in payload or sign\n",
         (unsigned long long)n_cases, (unsigned long long)n_failures,
         (unsigned long long)n_nan_payload);
  return n_failures == 0 ? 0 : 1;
}

/*
 * test_kernels.c - checks the host reduction kernels (kernels/reduce.c)
 * against references computed from first principles in higher precision:
 *  - kernel_reduce for every dtype x op, counts {0, 1, 7, 1000, 1048579},
 *    aligned and misaligned, out of place and with dst == a, dst == b,
 *    dst == a == b; inputs must stay untouched and bytes outside
 *    [dst, dst + n) must not be written;
 *  - kernel_div for every dtype and a few divisors;
 *  - f16/bf16 <-> f32: exhaustive round trips of all 65536 patterns, every
 *    rounding tie and its neighbours, a strided sweep of f32 patterns, and
 *    hand-written known cases (ties to even, subnormals, overflow, NaN).
 * References: f32 results must equal the f64 result rounded to f32 (exact:
 * f64 has more than 2*24+2 bits, so the double rounding is innocuous for
 * one +, * or /); f64 within 1 ulp of a long double reference; f16/bf16
 * equal to round-to-nearest-even of that f32 result, with the rounding
 * done by an independent frexp/nearbyint encoder; integers bit-exact
 * against wrapping 64-bit arithmetic.
 *
 * `test_kernels --bench` prints throughput instead (not part of the test).
 */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reduce.h"
#include "sharc.h"

static uint64_t n_checks, n_failures;

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    n_checks++;                                                                \
    if (!(cond) && n_failures++ < 30) {                                        \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
    }                                                                          \
  } while (0)

/* splitmix64 with a fixed seed: the same inputs on every run. */
static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ---- reference half-precision formats --------------------------------------
 * A binary format with `mb` stored mantissa bits and `eb` exponent bits:
 * binary16 is (10, 5), bfloat16 is (7, 8). Written from the definitions,
 * sharing nothing with reduce.c's bit tricks. */
#define F16_FMT 10, 5
#define BF16_FMT 7, 8

static double ref_decode(uint32_t h, int mb, int eb) {
  int bias = (1 << (eb - 1)) - 1;
  uint32_t mant = h & ((1u << mb) - 1), emax = (1u << eb) - 1;
  uint32_t exp = (h >> mb) & emax;
  double v;
  if (exp == emax)
    v = mant ? NAN : INFINITY;
  else if (exp == 0)
    v = ldexp((double)mant, 1 - bias - mb);
  else
    v = ldexp((double)(mant | (1u << mb)), (int)exp - bias - mb);
  return ((h >> (mb + eb)) & 1) ? -v : v;
}

/* x rounded to nearest, ties to even (the default rounding mode of
 * nearbyint). NaN gives a quiet NaN; callers compare NaN-ness only. */
static uint32_t ref_encode(double x, int mb, int eb) {
  int bias = (1 << (eb - 1)) - 1, emin = 1 - bias;
  uint32_t emax = (1u << eb) - 1;
  uint32_t sign = signbit(x) ? 1u << (mb + eb) : 0u;
  double a = fabs(x);
  if (isnan(x))
    return sign | (emax << mb) | (1u << (mb - 1));
  if (isinf(x))
    return sign | (emax << mb);
  if (a < ldexp(1.0, emin)) {
    /* Subnormal grid, step 2^(emin - mb); 2^mb is the smallest normal. */
    return sign | (uint32_t)nearbyint(ldexp(a, mb - emin));
  }
  int e;
  frexp(a, &e); /* a = [0.5, 1) * 2^e: unbiased exponent e - 1 */
  int E = e - 1;
  double q = nearbyint(ldexp(a, mb - E)); /* [2^mb, 2^(mb+1)] */
  if (q == ldexp(1.0, mb + 1)) {
    q /= 2;
    E++;
  }
  if (E + bias >= (int)emax)
    return sign | (emax << mb);
  return sign | ((uint32_t)(E + bias) << mb) | ((uint32_t)q - (1u << mb));
}

static int is_nan16(uint32_t h, int mb, int eb) {
  uint32_t emax = (1u << eb) - 1;
  return ((h >> mb) & emax) == emax && (h & ((1u << mb) - 1)) != 0;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint64_t f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}
static double bits_f64(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* ---- elements as raw bits ---- */

static size_t esize(sharc_dtype_t dt) { return sharc_dtype_size(dt); }
static int is_float(sharc_dtype_t dt) { return dt <= SHARC_BF16; }
static int is_signed_int(sharc_dtype_t dt) {
  return dt == SHARC_I8 || dt == SHARC_I32 || dt == SHARC_I64;
}
static uint64_t width_mask(sharc_dtype_t dt) {
  return esize(dt) == 8 ? ~0ull : (1ull << (8 * esize(dt))) - 1;
}

static uint64_t load_bits(sharc_dtype_t dt, const void *p, size_t i) {
  const unsigned char *c = (const unsigned char *)p + i * esize(dt);
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  uint64_t u64;
  switch (esize(dt)) {
  case 1:
    memcpy(&u8, c, 1);
    return u8;
  case 2:
    memcpy(&u16, c, 2);
    return u16;
  case 4:
    memcpy(&u32, c, 4);
    return u32;
  default:
    memcpy(&u64, c, 8);
    return u64;
  }
}

static void store_bits(sharc_dtype_t dt, void *p, size_t i, uint64_t v) {
  unsigned char *c = (unsigned char *)p + i * esize(dt);
  uint8_t u8 = (uint8_t)v;
  uint16_t u16 = (uint16_t)v;
  uint32_t u32 = (uint32_t)v;
  switch (esize(dt)) {
  case 1:
    memcpy(c, &u8, 1);
    break;
  case 2:
    memcpy(c, &u16, 2);
    break;
  case 4:
    memcpy(c, &u32, 4);
    break;
  default:
    memcpy(c, &v, 8);
    break;
  }
}

static int64_t sext(sharc_dtype_t dt, uint64_t v) {
  unsigned sh = 64 - 8 * (unsigned)esize(dt);
  return (int64_t)(v << sh) >> sh; /* arithmetic shift (gcc) */
}

static double to_double(sharc_dtype_t dt, uint64_t v) {
  switch (dt) {
  case SHARC_F32:
    return bits_f32((uint32_t)v);
  case SHARC_F64:
    return bits_f64(v);
  case SHARC_F16:
    return ref_decode((uint32_t)v, F16_FMT);
  case SHARC_BF16:
    return ref_decode((uint32_t)v, BF16_FMT);
  default:
    return 0;
  }
}

/* A double that is exactly an f32 value, stored as dt (f32 rounding of a
 * reduction result is done by the caller). */
static uint64_t from_float(sharc_dtype_t dt, double v) {
  switch (dt) {
  case SHARC_F32:
    return f32_bits((float)v);
  case SHARC_F64:
    return f64_bits(v);
  case SHARC_F16:
    return ref_encode(v, F16_FMT);
  default:
    return ref_encode(v, BF16_FMT);
  }
}

static int nan_bits(sharc_dtype_t dt, uint64_t v) {
  return is_float(dt) && isnan(to_double(dt, v));
}

/* Random element: floats mix special values, random finite bit patterns,
 * random mantissas of moderate size and small integers (ties, zeros,
 * exact cancellation); integers mix random bits and small values. */
static uint64_t rnd_elem(sharc_dtype_t dt) {
  uint64_t r = rnd();
  unsigned kind = (unsigned)(r & 63);
  r >>= 6;
  if (is_float(dt)) {
    static const double specials[] = {0.0,      -0.0,    INFINITY, -INFINITY,
                                      NAN,      65504.0, 0x1p-24,  -0x1p-133,
                                      0x1p-149, 3.4e38,  -1e300,   0x1p-1070};
    double v;
    if (kind == 0)
      v = specials[r % (sizeof specials / sizeof specials[0])];
    else if (kind < 24) { /* random finite pattern */
      uint64_t m = dt == SHARC_F64   ? 0x7ff0000000000000ull
                   : dt == SHARC_F32 ? 0x7f800000u
                   : dt == SHARC_F16 ? 0x7c00u
                                     : 0x7f80u;
      uint64_t bits = r & width_mask(dt);
      if ((bits & m) == m)
        bits &= ~(m & (m >> 1)); /* clear exponent MSB */
      return bits;
    } else if (kind < 48) /* random mantissa, scale 2^[-20, 11) */
      v = ldexp((double)(r >> 11), -53 + (int)(r % 31) - 20) *
          ((r & 1024) ? -1 : 1);
    else
      v = (double)((int)(r % 9) - 4);
    /* Round to dt first (values must be representable). */
    if (dt == SHARC_F64)
      return f64_bits(v);
    return from_float(dt, (float)v);
  }
  if (kind < 40)
    return r & width_mask(dt);
  return (uint64_t)((int64_t)(r % 7) - 3) & width_mask(dt);
}

/* ---- reduce references ---- */

/* Expected bits of x OP y; for f64 sum/prod *approx is set and *ld holds a
 * long double reference to compare within 1 ulp. */
static uint64_t ref_reduce(sharc_dtype_t dt, sharc_op_t op, uint64_t a,
                           uint64_t b, int *approx, long double *ld) {
  *approx = 0;
  if (op == SHARC_AVG)
    op = SHARC_SUM;
  if (is_float(dt)) {
    double x = to_double(dt, a), y = to_double(dt, b), r;
    switch (op) {
    case SHARC_SUM:
      r = x + y;
      break;
    case SHARC_PROD:
      r = x * y;
      break;
    case SHARC_MIN:
      r = x < y ? x : y;
      break;
    default:
      r = x > y ? x : y;
      break;
    }
    if (dt == SHARC_F64) {
      if (op == SHARC_SUM || op == SHARC_PROD) {
        *approx = 1;
        *ld = op == SHARC_SUM ? (long double)x + y : (long double)x * y;
      }
      return f64_bits(r);
    }
    return from_float(dt, (float)r); /* f32 rounding first, then to dt */
  }
  uint64_t m = width_mask(dt), r;
  switch (op) {
  case SHARC_SUM:
    r = a + b;
    break;
  case SHARC_PROD:
    r = a * b;
    break;
  case SHARC_MIN:
    r = is_signed_int(dt) ? (sext(dt, a) < sext(dt, b) ? a : b)
                          : (a < b ? a : b);
    break;
  default:
    r = is_signed_int(dt) ? (sext(dt, a) > sext(dt, b) ? a : b)
                          : (a > b ? a : b);
    break;
  }
  return r & m;
}

static int f64_close(double got, long double ref) {
  double e = (double)ref;
  if (got == e || (isnan(got) && isnan(e)))
    return 1;
  if (!isfinite(got) || !isfinite(e))
    return 0;
  double ulp = nextafter(fabs(e), INFINITY) - fabs(e);
  return fabsl((long double)got - ref) <= (long double)ulp;
}

static int same_result(sharc_dtype_t dt, uint64_t got, uint64_t want,
                       int approx, long double ld) {
  if (approx)
    return f64_close(bits_f64(got), ld);
  return got == want || (nan_bits(dt, got) && nan_bits(dt, want));
}

/* ---- reduce sweep ---- */

enum { GUARD = 16 }; /* elements around each buffer that must stay intact */
enum { ALIAS_NONE, ALIAS_A, ALIAS_B, ALIAS_AB };
static const char *const alias_names[] = {"dst", "dst=a", "dst=b", "dst=a=b"};

/* Bytes outside [off, off + n) elements of buf must equal those of ref. */
static void check_guards(sharc_dtype_t dt, const void *buf, const void *ref,
                         size_t off, size_t n, const char *what) {
  size_t es = esize(dt), total = (n + 2 * GUARD) * es;
  const unsigned char *p = buf, *q = ref;
  int ok = memcmp(p, q, off * es) == 0 &&
           memcmp(p + (off + n) * es, q + (off + n) * es,
                  total - (off + n) * es) == 0;
  EXPECT(ok, "%s %s n=%zu: bytes outside the range written",
         sharc_dtype_name(dt), what, n);
}

static void reduce_case(sharc_dtype_t dt, sharc_op_t op, size_t n, size_t offd,
                        size_t offa, size_t offb, int alias) {
  size_t es = esize(dt), bytes = (n + 2 * GUARD) * es;
  unsigned char *A = malloc(bytes), *B = malloc(bytes), *D = malloc(bytes);
  unsigned char *A0 = malloc(bytes), *B0 = malloc(bytes), *D0 = malloc(bytes);
  if (!A || !B || !D || !A0 || !B0 || !D0) {
    fprintf(stderr, "test_kernels: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  for (size_t i = 0; i < n + 2 * GUARD; i++) {
    store_bits(dt, A, i, rnd_elem(dt));
    store_bits(dt, B, i, rnd_elem(dt));
  }
  /* Every 16th pair equal, and every 16th opposite: min/max ties, exact
   * cancellation. */
  for (size_t i = 5; i < n; i += 16)
    store_bits(dt, B + offb * es, i, load_bits(dt, A + offa * es, i));
  for (size_t i = 11; i < n; i += 16) {
    uint64_t v = load_bits(dt, A + offa * es, i);
    v = is_float(dt) ? v ^ (1ull << (8 * es - 1)) : (0 - v) & width_mask(dt);
    store_bits(dt, B + offb * es, i, v);
  }
  memset(D, 0xa5, bytes);
  memcpy(A0, A, bytes);
  memcpy(B0, B, bytes);
  memcpy(D0, D, bytes);

  unsigned char *pa = A + offa * es, *pb = B + offb * es, *out;
  size_t offo;
  switch (alias) {
  case ALIAS_A:
    out = pa, offo = offa;
    break;
  case ALIAS_B:
    out = pb, offo = offb;
    break;
  case ALIAS_AB:
    out = pb = pa, offo = offa;
    break;
  default:
    out = D + offd * es, offo = offd;
    break;
  }
  kernel_reduce(dt, op, out, pa, pb, n);

  const unsigned char *ra = A0 + offa * es;
  const unsigned char *rb = alias == ALIAS_AB ? ra : B0 + offb * es;
  for (size_t i = 0; i < n; i++) {
    uint64_t a = load_bits(dt, ra, i), b = load_bits(dt, rb, i);
    int approx;
    long double ld;
    uint64_t want = ref_reduce(dt, op, a, b, &approx, &ld);
    uint64_t got = load_bits(dt, out, i);
    EXPECT(same_result(dt, got, want, approx, ld),
           "reduce %s %s n=%zu %s offsets %zu/%zu/%zu: [%zu] %#llx op %#llx = "
           "%#llx, want %#llx",
           sharc_dtype_name(dt), sharc_op_name(op), n, alias_names[alias], offd,
           offa, offb, i, (unsigned long long)a, (unsigned long long)b,
           (unsigned long long)got, (unsigned long long)want);
  }
  /* Inputs untouched, nothing written outside dst's range. */
  if (alias == ALIAS_NONE) {
    EXPECT(memcmp(A, A0, bytes) == 0 && memcmp(B, B0, bytes) == 0,
           "reduce %s %s n=%zu: an input was modified", sharc_dtype_name(dt),
           sharc_op_name(op), n);
    check_guards(dt, D, D0, offo, n, "reduce");
  } else {
    unsigned char *buf = alias == ALIAS_B ? B : A,
                  *ref = alias == ALIAS_B ? B0 : A0;
    unsigned char *other = alias == ALIAS_B ? A : B,
                  *oref = alias == ALIAS_B ? A0 : B0;
    check_guards(dt, buf, ref, offo, n, alias_names[alias]);
    EXPECT(memcmp(other, oref, bytes) == 0,
           "reduce %s %s n=%zu %s: the other input was modified",
           sharc_dtype_name(dt), sharc_op_name(op), n, alias_names[alias]);
  }
  free(A), free(B), free(D), free(A0), free(B0), free(D0);
}

static void test_reduce(void) {
  static const size_t sizes[] = {0, 1, 7, 1000, 1048579};
  static const size_t small[] = {1, 7, 1000, 65539};
  for (int dt = 0; dt < SHARC_DTYPE_COUNT; dt++)
    for (int op = 0; op < SHARC_OP_COUNT; op++) {
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        reduce_case(dt, op, sizes[k], 0, 0, 0, ALIAS_NONE);
      for (size_t k = 0; k < sizeof small / sizeof small[0]; k++) {
        reduce_case(dt, op, small[k], 1, 3, 2, ALIAS_NONE); /* misaligned */
        for (int al = ALIAS_A; al <= ALIAS_AB; al++) {
          reduce_case(dt, op, small[k], 0, 0, 0, al);
          reduce_case(dt, op, small[k], 0, 3, 1, al);
        }
      }
    }
}

/* ---- kernel_div ---- */

static void test_div(void) {
  static const size_t sizes[] = {0, 1, 7, 1000, 65539};
  static const int divisors[] = {1, 2, 3, 7, 8, 13, 64, 1000};
  for (int dt = 0; dt < SHARC_DTYPE_COUNT; dt++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (size_t k = 0; k < sizeof divisors / sizeof divisors[0]; k++) {
        size_t n = sizes[s], es = esize(dt), bytes = (n + 2 * GUARD) * es;
        int d = divisors[k];
        unsigned char *buf = malloc(bytes), *ref = malloc(bytes);
        if (!buf || !ref)
          exit(1);
        for (size_t i = 0; i < n + 2 * GUARD; i++)
          store_bits(dt, buf, i, rnd_elem(dt));
        memcpy(ref, buf, bytes);
        kernel_div(dt, buf + GUARD * es, n, d);
        for (size_t i = 0; i < n; i++) {
          uint64_t v = load_bits(dt, ref + GUARD * es, i), want;
          uint64_t got = load_bits(dt, buf + GUARD * es, i);
          int approx = 0;
          long double ld = 0;
          if (dt == SHARC_F64) {
            approx = 1;
            ld = (long double)bits_f64(v) / d;
            want = 0;
          } else if (is_float(dt)) {
            want = from_float(dt, (float)(to_double(dt, v) / d));
          } else if (is_signed_int(dt)) {
            want = (uint64_t)(sext(dt, v) / d) & width_mask(dt);
          } else {
            want = v / (uint64_t)d;
          }
          EXPECT(same_result(dt, got, want, approx, ld),
                 "div %s n=%zu [%zu] %#llx / %d = %#llx, want %#llx",
                 sharc_dtype_name(dt), n, i, (unsigned long long)v, d,
                 (unsigned long long)got, (unsigned long long)want);
        }
        check_guards(dt, buf, ref, GUARD, n, "div");
        free(buf), free(ref);
      }
}

/* ---- conversions ---- */

/* Every 16-bit pattern: decodes to its exact value, and encodes back to
 * itself; NaN decodes to NaN and comes back as a quiet NaN, same sign. */
static void test_round_trip(const char *name, int mb, int eb,
                            float (*to32)(uint16_t),
                            uint16_t (*from32)(float)) {
  uint32_t sign_bit = 1u << (mb + eb), quiet = 1u << (mb - 1);
  for (uint32_t h = 0; h < 65536; h++) {
    float f = to32((uint16_t)h);
    double want = ref_decode(h, mb, eb);
    int neg = (h & sign_bit) != 0;
    uint16_t back = from32(f);
    if (isnan(want)) {
      EXPECT(isnan(f) && !!signbit(f) == neg, "%s %#x -> f32 %#x: want NaN",
             name, h, f32_bits(f));
      EXPECT(is_nan16(back, mb, eb) && (back & quiet) &&
                 !!(back & sign_bit) == neg,
             "%s NaN %#x -> f32 -> %#x: want a quiet NaN", name, h, back);
    } else {
      EXPECT((double)f == want && !!signbit(f) == neg,
             "%s %#x -> f32 %a, want %a", name, h, f, want);
      EXPECT(back == h, "%s %#x -> f32 -> %#x", name, h, back);
    }
  }
}

static void expect_encode(const char *name, int mb, int eb,
                          uint16_t (*from32)(float), float f) {
  uint32_t got = from32(f), want = ref_encode(f, mb, eb);
  int ok = isnan(f)
               ? is_nan16(got, mb, eb) && !!(got >> (mb + eb)) == !!signbit(f)
               : got == want;
  EXPECT(ok, "%s(f32 %#x = %a) = %#x, want %#x", name, f32_bits(f), f, got,
         want);
}

/* Every tie between neighbouring finite values (and the f32 values just
 * around it), both signs, then a strided sweep over all f32 patterns. */
static void test_encode_sweep(const char *name, int mb, int eb,
                              uint16_t (*from32)(float)) {
  uint32_t inf = ((1u << eb) - 1) << mb;
  for (uint32_t h = 0; h < inf; h++) {
    double lo = ref_decode(h, mb, eb);
    /* Past the largest finite value the grid goes on to 2^(bias + 1). */
    double hi =
        h + 1 == inf ? ldexp(1.0, 1 << (eb - 1)) : ref_decode(h + 1, mb, eb);
    float mid = (float)((lo + hi) / 2); /* exact: 1 bit more than the format */
    float probes[] = {(float)lo, mid, nextafterf(mid, 0),
                      nextafterf(mid, INFINITY)};
    for (int k = 0; k < 4; k++) {
      expect_encode(name, mb, eb, from32, probes[k]);
      expect_encode(name, mb, eb, from32, -probes[k]);
    }
  }
  for (uint64_t u = 0; u < (1ull << 32); u += 4099)
    expect_encode(name, mb, eb, from32, bits_f32((uint32_t)u));
}

struct known {
  uint32_t f32; /* input bits */
  uint16_t want;
};

static void test_known(const char *name, const struct known *k, size_t n,
                       int mb, int eb, uint16_t (*from32)(float)) {
  for (size_t i = 0; i < n; i++) {
    uint16_t got = from32(bits_f32(k[i].f32));
    int ok =
        is_nan16(k[i].want, mb, eb)
            ? is_nan16(got, mb, eb) && (got & 0x8000) == (k[i].want & 0x8000)
            : got == k[i].want;
    EXPECT(ok, "%s(%#x) = %#x, want %#x", name, k[i].f32, got, k[i].want);
  }
}

static void test_conversions(void) {
  test_round_trip("f16", F16_FMT, kernel_f16_to_f32, kernel_f32_to_f16);
  test_round_trip("bf16", BF16_FMT, kernel_bf16_to_f32, kernel_f32_to_bf16);
  test_encode_sweep("f32_to_f16", F16_FMT, kernel_f32_to_f16);
  test_encode_sweep("f32_to_bf16", BF16_FMT, kernel_f32_to_bf16);

  static const struct known f16[] = {
      {0x3f800000, 0x3c00}, /* 1 */
      {0xc0000000, 0xc000}, /* -2 */
      {0x00000000, 0x0000},
      {0x80000000, 0x8000}, /* +-0 */
      {0x3f801000, 0x3c00}, /* 1 + 2^-11: tie, down to even */
      {0x3f803000, 0x3c02}, /* 1 + 3*2^-11: tie, up to even */
      {0x3f801001, 0x3c01}, /* just above the tie */
      {0x3f800fff, 0x3c00}, /* just below the tie */
      {0x477fe000, 0x7bff}, /* 65504, the largest finite */
      {0x477fefff, 0x7bff}, /* just below 65520 */
      {0x477ff000, 0x7c00}, /* 65520: tie, to even = infinity */
      {0x501502f9, 0x7c00}, /* 1e10 */
      {0x7f7fffff, 0x7c00}, /* f32 max */
      {0x7f800000, 0x7c00},
      {0xff800000, 0xfc00}, /* +-inf */
      {0x33800000, 0x0001}, /* 2^-24, the smallest subnormal */
      {0x33000000, 0x0000}, /* 2^-25: tie, to even = 0 */
      {0x33000001, 0x0001}, /* just above 2^-25 */
      {0xb3000001, 0x8001},
      {0x33c00000, 0x0002}, /* 3*2^-25: tie, to even = 2 */
      {0x34200000, 0x0002}, /* 5*2^-25: tie, to even = 2 */
      {0x387fc000, 0x03ff}, /* the largest subnormal */
      {0x387fe000, 0x0400}, /* tie between it and 2^-14: to even */
      {0x38800000, 0x0400}, /* 2^-14, the smallest normal */
      {0x00000001, 0x0000},
      {0x80000001, 0x8000}, /* f32 subnormals */
      {0x7fc00000, 0x7e00}, /* quiet NaN */
      {0x7f800001, 0x7e00}, /* NaN whose payload is all shifted out */
      {0xffc00000, 0xfe00},
  };
  static const struct known bf16[] = {
      {0x3f800000, 0x3f80},
      {0xbf800000, 0xbf80},
      {0x3f808000, 0x3f80}, /* tie, down to even */
      {0x3f818000, 0x3f82}, /* tie, up to even */
      {0x3f808001, 0x3f81},
      {0x3f807fff, 0x3f80},
      {0x7f7f0000, 0x7f7f}, /* the largest finite */
      {0x7f7f7fff, 0x7f7f},
      {0x7f7f8000, 0x7f80}, /* tie, to even = infinity */
      {0x7f7fffff, 0x7f80}, /* f32 max overflows */
      {0x7f800000, 0x7f80},
      {0xff800000, 0xff80},
      {0x00008000, 0x0000}, /* subnormal tie, to even = 0 */
      {0x00018000, 0x0002}, /* subnormal tie, to even = 2 */
      {0x00010000, 0x0001},
      {0x00000001, 0x0000},
      {0x80000001, 0x8000},
      {0x007f8000, 0x0080}, /* rounds up into the smallest normal */
      {0x7fc00000, 0x7fc0},
      {0x7f800001, 0x7fc0}, /* NaN whose payload is all shifted out */
      {0xff800001, 0xffc0},
  };
  test_known("f32_to_f16", f16, sizeof f16 / sizeof f16[0], F16_FMT,
             kernel_f32_to_f16);
  test_known("f32_to_bf16", bf16, sizeof bf16 / sizeof bf16[0], BF16_FMT,
             kernel_f32_to_bf16);
}

/* ---- throughput (not a test) ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GB/s counted as bytes read (a, b) plus bytes written (dst). */
static int bench(void) {
  const size_t bytes = 64u << 20;
  unsigned char *a = malloc(bytes), *b = malloc(bytes), *d = malloc(bytes);
  if (!a || !b || !d)
    return 1;
  for (size_t i = 0; i < bytes; i++)
    a[i] = (unsigned char)(i * 7), b[i] = (unsigned char)(i * 13);
  static const sharc_dtype_t dts[] = {SHARC_F32,  SHARC_F64, SHARC_F16,
                                      SHARC_BF16, SHARC_I8,  SHARC_I32,
                                      SHARC_I64};
  printf("%-9s %-5s %14s %14s\n", "dtype", "op", "dst GB/s", "dst=a GB/s");
  for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
    for (int op = SHARC_SUM; op <= SHARC_MAX; op += 2) {
      size_t n = bytes / esize(dts[t]);
      double gbs[2];
      for (int inplace = 0; inplace < 2; inplace++) {
        void *dst = inplace ? (void *)a : (void *)d;
        kernel_reduce(dts[t], op, dst, a, b, n); /* warm up, fault pages in */
        int iters = 10;
        double t0 = now_s();
        for (int it = 0; it < iters; it++)
          kernel_reduce(dts[t], op, dst, a, b, n);
        gbs[inplace] = 3.0 * (double)bytes * iters / (now_s() - t0) / 1e9;
      }
      printf("%-9s %-5s %14.2f %14.2f\n", sharc_dtype_name(dts[t]),
             sharc_op_name(op), gbs[0], gbs[1]);
    }
  free(a), free(b), free(d);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--bench") == 0)
    return bench();
  test_conversions();
  test_reduce();
  test_div();
  if (n_failures) {
    printf("test_kernels: %llu of %llu checks FAILED\n",
           (unsigned long long)n_failures, (unsigned long long)n_checks);
    return 1;
  }
  printf("test_kernels: %llu checks passed\n", (unsigned long long)n_checks);
  return 0;
}

/*
 * coll_data.c - the inputs and references of coll_check (see coll_data.h).
 *
 * Inputs are chosen so the reference is meaningful: sums of same-sign
 * values in [1, 4), products of {+-1, 2, 0.5, 1.5} on at most three ranks
 * per element, small integers where the sum must not wrap (signed types,
 * AVG), full-range values where wrapping is well defined (unsigned SUM) or
 * irrelevant (MIN, MAX, data movement). Host byte order is little-endian.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coll_data.h"

const char *const data_dt_name[SHARC_DTYPE_COUNT] = {
    "f32", "f64", "f16", "bf16", "i8", "u8", "i32", "u32", "i64", "u64"};
const size_t data_dt_size[SHARC_DTYPE_COUNT] = {4, 8, 2, 2, 1, 1, 4, 4, 8, 8};
const char *const data_op_name[SHARC_OP_COUNT + 1] = {"sum", "prod", "min",
                                                      "max", "avg",  "copy"};

/* ---- f16 / bf16 (round to nearest even) --------------------------------- */

uint16_t data_f32_to_f16(float f) {
  uint32_t x, ax, sign;
  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000u;
  ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u)
    return (uint16_t)(sign | 0x7e00u); /* NaN */
  if (ax >= 0x47800000u)
    return (uint16_t)(sign | 0x7c00u); /* >= 65536: inf */
  if (ax < 0x33000000u)
    return (uint16_t)sign; /* <= 2^-25: 0 */
  uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift, r, rem, half;
  if (ax < 0x38800000u) { /* subnormal result: units of 2^-24 */
    shift = 126 - e;
    r = m >> shift;
  } else {
    shift = 13;
    r = ((e - 112) << 10) | ((ax & 0x7fffffu) >> 13);
  }
  rem = m & ((1u << shift) - 1);
  half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1)))
    r++; /* may carry into exponent */
  return (uint16_t)(sign | r);
}

float data_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu,
           m = h & 0x3ffu, x;
  if (e == 0) {
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
  }
  x = sign |
      (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
  float f;
  memcpy(&f, &x, 4);
  return f;
}

uint16_t data_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float data_bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* ---- element access (host is little-endian) -------------------------------
 */

static int is_float(int dt) { return dt <= SHARC_BF16; }
static int is_signed(int dt) {
  return dt == SHARC_I8 || dt == SHARC_I32 || dt == SHARC_I64;
}

/* Truncates v to the width of dt, sign-extending signed types. */
static uint64_t norm_int(int dt, uint64_t v) {
  unsigned w = 8 * (unsigned)data_dt_size[dt];
  if (w == 64)
    return v;
  uint64_t mask = (UINT64_C(1) << w) - 1;
  v &= mask;
  if (is_signed(dt) && (v >> (w - 1)) & 1)
    v |= ~mask;
  return v;
}

static void store_flt(int dt, void *p, double v) {
  float f = (float)v;
  uint16_t h;
  switch (dt) {
  case SHARC_F32:
    memcpy(p, &f, 4);
    break;
  case SHARC_F64:
    memcpy(p, &v, 8);
    break;
  case SHARC_F16:
    h = data_f32_to_f16(f);
    memcpy(p, &h, 2);
    break;
  default:
    h = data_f32_to_bf16(f);
    memcpy(p, &h, 2);
    break;
  }
}

static double load_flt(int dt, const void *p) {
  float f;
  double d;
  uint16_t h;
  switch (dt) {
  case SHARC_F32:
    memcpy(&f, p, 4);
    return f;
  case SHARC_F64:
    memcpy(&d, p, 8);
    return d;
  case SHARC_F16:
    memcpy(&h, p, 2);
    return data_f16_to_f32(h);
  default:
    memcpy(&h, p, 2);
    return data_bf16_to_f32(h);
  }
}

static uint64_t load_bits(int dt, const void *p) {
  uint64_t u = 0;
  memcpy(&u, p, data_dt_size[dt]);
  return u;
}

/* The nearest value of dt (what storing x and loading it back gives). */
static double quantize(int dt, double x) {
  unsigned char b[8];
  store_flt(dt, b, x);
  return load_flt(dt, b);
}

/* ---- inputs and reference ------------------------------------------------ */

static uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= UINT64_C(0xbf58476d1ce4e5b9);
  x ^= x >> 27;
  x *= UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

/* Input element g (global index into the rank's send buffer) of rank r. */
data_val_t data_gen(const data_spec_t *j, int r, size_t g) {
  static const double fprod[6] = {1, -1, 2, 0.5, 1.5, -2};
  static const int64_t sprod[5] = {-2, -1, 1, 2, 3};
  static const uint64_t uprod[8] = {1, 2, 3, 1, 2, 3, 1, 0};
  uint64_t h =
      mix(j->seed ^ ((uint64_t)r << 47) ^ (g * UINT64_C(0x9e3779b97f4a7c15)));
  int window =
      (((size_t)r + g) % (size_t)j->nranks) < 3; /* ranks allowed |v| != 1 */
  data_val_t v = {0, 0.0};
  int dt = j->dt;
  if (j->op == DATA_OP_COPY) {
    v.u = h;
    return v;
  }
  if (is_float(dt)) {
    double unit = (double)(h >> 11) * 0x1p-53; /* [0, 1) */
    switch (j->op) {
    case SHARC_SUM:
    case SHARC_AVG: /* same sign on every rank, |v| in [1, 4) */
      v.f = (g % 3 == j->seed % 3 ? -1.0 : 1.0) * (1.0 + 3.0 * unit);
      break;
    case SHARC_PROD:
      v.f = window ? fprod[h % 6] : (h & 1 ? 1.0 : -1.0);
      break;
    default:
      v.f = 200.0 * unit - 100.0;
      break; /* MIN, MAX */
    }
    v.f = quantize(dt, v.f);
    return v;
  }
  int s = is_signed(dt);
  switch (j->op) {
  case SHARC_SUM:
    v.u = s ? (uint64_t)((int64_t)(h % 17) - 8) : h;
    break;
  case SHARC_AVG:
    v.u = s ? (uint64_t)((int64_t)(h % 17) - 8) : h % 16;
    break;
  case SHARC_PROD:
    if (window)
      v.u = s ? (uint64_t)sprod[h % 5] : uprod[h % 8];
    else
      v.u = s ? (h & 1 ? 1 : (uint64_t)-1) : 1;
    break;
  default:
    v.u = h;
    break; /* MIN, MAX: full range */
  }
  v.u = norm_int(dt, v.u);
  return v;
}

void data_put(const data_spec_t *j, void *p, data_val_t v) {
  if (j->op == DATA_OP_COPY || !is_float(j->dt))
    memcpy(p, &v.u, data_dt_size[j->dt]);
  else
    store_flt(j->dt, p, v.f);
}

/* Reduction over all ranks of input element g. */
data_val_t data_reference(const data_spec_t *j, size_t g) {
  data_val_t acc = data_gen(j, 0, g), v;
  int dt = j->dt, op = j->op;
  for (int q = 1; q < j->nranks; q++) {
    v = data_gen(j, q, g);
    if (is_float(dt)) {
      if (op == SHARC_SUM || op == SHARC_AVG)
        acc.f += v.f;
      else if (op == SHARC_PROD)
        acc.f *= v.f;
      else if (op == SHARC_MIN)
        acc.f = v.f < acc.f ? v.f : acc.f;
      else
        acc.f = v.f > acc.f ? v.f : acc.f;
    } else if (op == SHARC_SUM || op == SHARC_AVG) {
      acc.u += v.u;
    } else if (op == SHARC_PROD) {
      acc.u *= v.u;
    } else {
      int less = is_signed(dt) ? (int64_t)v.u < (int64_t)acc.u : v.u < acc.u;
      if (less == (op == SHARC_MIN))
        acc.u = v.u;
    }
  }
  if (op == SHARC_AVG && is_float(dt))
    acc.f /= j->nranks;
  if (is_float(dt))
    return acc;
  acc.u = norm_int(dt, acc.u); /* the sum in the type's width ... */
  if (op == SHARC_AVG)         /* ... then divided, truncating toward zero */
    acc.u = is_signed(dt) ? (uint64_t)((int64_t)acc.u / j->nranks)
                          : acc.u / (uint64_t)j->nranks;
  acc.u = norm_int(dt, acc.u);
  return acc;
}

/* Does element p match e? Fills text forms for the failure report. */
int data_matches(const data_spec_t *j, const void *p, data_val_t e, char *es,
                 char *gs) {
  int dt = j->dt, op = j->op;
  size_t sz = data_dt_size[dt];
  if (op == DATA_OP_COPY || !is_float(dt)) {
    uint64_t got = load_bits(dt, p),
             want =
                 e.u & (sz == 8 ? ~UINT64_C(0) : (UINT64_C(1) << 8 * sz) - 1);
    if (got == want)
      return 1;
    if (op == DATA_OP_COPY) {
      sprintf(es, "0x%0*llx", (int)sz * 2, (unsigned long long)want);
      sprintf(gs, "0x%0*llx", (int)sz * 2, (unsigned long long)got);
    } else if (is_signed(dt)) {
      sprintf(es, "%lld", (long long)e.u);
      sprintf(gs, "%lld", (long long)norm_int(dt, got));
    } else {
      sprintf(es, "%llu", (unsigned long long)e.u);
      sprintf(gs, "%llu", (unsigned long long)got);
    }
    return 0;
  }
  double got = load_flt(dt, p), rel = 0, abs_tol = 0;
  if (op != SHARC_MIN && op != SHARC_MAX) { /* min/max must be exact */
    if (dt == SHARC_F64)
      rel = 1e-12;
    else if (dt == SHARC_F32)
      rel = 1e-6;
    else if (dt == SHARC_F16)
      rel = 2e-3 * j->nranks, abs_tol = 1e-3;
    else
      rel = 1.6e-2 * j->nranks, abs_tol = 1e-2;
  }
  if (fabs(got - e.f) <= rel * fabs(e.f) + abs_tol)
    return 1;
  sprintf(es, "%.17g", e.f);
  sprintf(gs, "%.17g", got);
  return 0;
}

/*
 * bench_data.c - input values and expected results of sharc-bench's
 * validation, for every dtype and op.
 *
 * Values are small integers picked so that each reduction is exact in the
 * element type at this rank count (sums stay under the type's exact-integer
 * range: 256 for bfloat16, 2048 for half, 127 for int8), so the check is an
 * equality, except for avg of floating types (a division) which allows one
 * rounding of the type. Collectives that move data without reducing it
 * give each rank (and, all-to-all, each destination block) its own values,
 * so a block delivered to the wrong place is counted wrong; send-recv's
 * result is what the previous rank sent, so data from any other rank (its
 * own included) is counted wrong too.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* nccl-tests' order and names for -d all and -o all. */
const sharc_dtype_t data_type_order[SHARC_DTYPE_COUNT] = {
    SHARC_I8,  SHARC_U8,  SHARC_I32, SHARC_U32, SHARC_I64,
    SHARC_U64, SHARC_F16, SHARC_F32, SHARC_F64, SHARC_BF16};
const sharc_op_t data_op_order[SHARC_OP_COUNT] = {
    SHARC_SUM, SHARC_PROD, SHARC_MAX, SHARC_MIN, SHARC_AVG};

static const char *const type_names[SHARC_DTYPE_COUNT] = {
    [SHARC_F32] = "float",     [SHARC_F64] = "double", [SHARC_F16] = "half",
    [SHARC_BF16] = "bfloat16", [SHARC_I8] = "int8",    [SHARC_U8] = "uint8",
    [SHARC_I32] = "int32",     [SHARC_U32] = "uint32", [SHARC_I64] = "int64",
    [SHARC_U64] = "uint64"};
static const char *const op_names[SHARC_OP_COUNT] = {[SHARC_SUM] = "sum",
                                                     [SHARC_PROD] = "prod",
                                                     [SHARC_MIN] = "min",
                                                     [SHARC_MAX] = "max",
                                                     [SHARC_AVG] = "avg"};

const char *data_type_name(sharc_dtype_t dt) {
  return (unsigned)dt < SHARC_DTYPE_COUNT ? type_names[dt] : "?";
}
const char *data_op_name(int op) {
  return op >= 0 && op < SHARC_OP_COUNT ? op_names[op] : "none";
}

int data_parse_type(const char *s) {
  static const struct {
    const char *name;
    sharc_dtype_t dt;
  } alias[] = {
      {"f32", SHARC_F32},     {"float32", SHARC_F32}, {"f64", SHARC_F64},
      {"float64", SHARC_F64}, {"f16", SHARC_F16},     {"float16", SHARC_F16},
      {"bf16", SHARC_BF16},   {"i8", SHARC_I8},       {"char", SHARC_I8},
      {"u8", SHARC_U8},       {"i32", SHARC_I32},     {"int", SHARC_I32},
      {"u32", SHARC_U32},     {"i64", SHARC_I64},     {"u64", SHARC_U64}};
  if (!strcmp(s, "all"))
    return -1;
  for (int t = 0; t < SHARC_DTYPE_COUNT; t++)
    if (!strcmp(s, type_names[t]))
      return t;
  for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
    if (!strcmp(s, alias[i].name))
      return (int)alias[i].dt;
  return -2;
}

int data_parse_op(const char *s) {
  if (!strcmp(s, "all"))
    return -1;
  for (int o = 0; o < SHARC_OP_COUNT; o++)
    if (!strcmp(s, op_names[o]))
      return o;
  return -2;
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
  float f;
  if (e == 0)
    f = ldexpf((float)m, -24);
  else if (e == 31)
    f = m ? NAN : INFINITY;
  else
    f = ldexpf((float)(m | 1024), (int)e - 25);
  return sign ? -f : f;
}

/* Only small integers are written, so truncation is exact. */
static uint16_t float_to_half(float f) {
  uint16_t sign = f < 0 ? 0x8000 : 0;
  f = fabsf(f);
  if (f == 0)
    return sign;
  int e;
  float m = frexpf(f, &e); /* f = m * 2^e, m in [0.5, 1) */
  return (uint16_t)(sign | (uint16_t)((e + 14) << 10) |
                    (uint16_t)((uint32_t)(m * 2048.0f) & 1023));
}

static double get(const void *buf, size_t i, sharc_dtype_t dt) {
  switch (dt) {
  case SHARC_F32:
    return ((const float *)buf)[i];
  case SHARC_F64:
    return ((const double *)buf)[i];
  case SHARC_F16:
    return half_to_float(((const uint16_t *)buf)[i]);
  case SHARC_BF16: {
    uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  case SHARC_I8:
    return ((const int8_t *)buf)[i];
  case SHARC_U8:
    return ((const uint8_t *)buf)[i];
  case SHARC_I32:
    return ((const int32_t *)buf)[i];
  case SHARC_U32:
    return ((const uint32_t *)buf)[i];
  case SHARC_I64:
    return (double)((const int64_t *)buf)[i];
  default:
    return (double)((const uint64_t *)buf)[i];
  }
}

static void set(void *buf, size_t i, sharc_dtype_t dt, double v) {
  switch (dt) {
  case SHARC_F32:
    ((float *)buf)[i] = (float)v;
    break;
  case SHARC_F64:
    ((double *)buf)[i] = v;
    break;
  case SHARC_F16:
    ((uint16_t *)buf)[i] = float_to_half((float)v);
    break;
  case SHARC_BF16: {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
    break;
  }
  case SHARC_I8:
    ((int8_t *)buf)[i] = (int8_t)v;
    break;
  case SHARC_U8:
    ((uint8_t *)buf)[i] = (uint8_t)v;
    break;
  case SHARC_I32:
    ((int32_t *)buf)[i] = (int32_t)v;
    break;
  case SHARC_U32:
    ((uint32_t *)buf)[i] = (uint32_t)v;
    break;
  case SHARC_I64:
    ((int64_t *)buf)[i] = (int64_t)v;
    break;
  default:
    ((uint64_t *)buf)[i] = (uint64_t)v;
    break;
  }
}

/* Values per element for sums: 0..m-1 with (m-1)*nranks exact in dt. */
static int sum_modulus(sharc_dtype_t dt, int nranks) {
  int limit = dt == SHARC_BF16  ? 256
              : dt == SHARC_F16 ? 2048
              : dt == SHARC_I8  ? 127
              : dt == SHARC_U8  ? 255
                                : 1 << 20;
  int m = limit / nranks + 1;
  return m > 8 ? 8 : m < 1 ? 1 : m;
}

static int is_float(sharc_dtype_t dt) {
  return dt == SHARC_F32 || dt == SHARC_F64 || dt == SHARC_F16 ||
         dt == SHARC_BF16;
}

/* Collectives that copy their inputs (no reduction): values mod 61. */
static int copies(coll_t c) {
  return c == C_AG || c == C_BC || c == C_GA || c == C_SC || c == C_SR;
}

/* All-to-all: element i of the block rank `from` sends to rank `to`. A
 * block from another rank, or meant for another, differs (13 and 29 are
 * prime to 61, up to 61 ranks). */
static double a2a_value(size_t i, int from, int to) {
  return (double)((i * 5 + (size_t)from * 13 + (size_t)to * 29) % 61);
}

/* Input element at global index g on rank r (all-to-all: a2a_value). */
static double value(size_t g, int r, sharc_dtype_t dt, int op, coll_t c,
                    int nranks) {
  if (copies(c))
    return (double)((g * 5 + (size_t)r * 13) % 61);
  switch (op) {
  case SHARC_PROD: /* 1 everywhere but one rank per element */
    return g % (size_t)nranks == (size_t)r ? (double)(1 + (g / nranks) % 3)
                                           : 1.0;
  case SHARC_MIN:
  case SHARC_MAX:
    return (double)((g * 3 + (size_t)r * 7) % 16);
  default:
    return (double)((g + (size_t)r) % (size_t)sum_modulus(dt, nranks));
  }
}

/* Every input and expected value repeats along the global index with this
 * period (elements; for all-gather, gather and all-to-all, within one
 * rank's block), so fill and check work on one period, typed, and copy or
 * compare it along the buffer: at 256 MiB the element-wise versions took
 * longer than the timed operations. */
static size_t period(sharc_dtype_t dt, int op, coll_t c, int nranks) {
  if (copies(c) || c == C_AA)
    return 61;
  return op == SHARC_PROD                     ? 3 * (size_t)nranks
         : op == SHARC_MIN || op == SHARC_MAX ? 16
                                              : (size_t)sum_modulus(dt, nranks);
}

/* Copies buf's first p elements along its n: doubling copies, so few,
 * large memcpy calls. */
static void repeat(void *buf, size_t n, size_t p, size_t ts) {
  for (size_t have = p; p && have < n;) {
    size_t k = have - have % p, m = n - have < k ? n - have : k;
    memcpy((uint8_t *)buf + have * ts, buf, m * ts);
    have += m;
  }
}

void data_fill(void *buf, size_t n, size_t base, sharc_dtype_t dt, int op,
               coll_t c, int r, int nranks) {
  size_t p = period(dt, op, c, nranks), ts = sharc_dtype_size(dt);
  if (c == C_AA) { /* n = nranks blocks, block q for rank q */
    size_t per = n / (size_t)nranks, m = p < per ? p : per;
    for (int q = 0; q < nranks; q++) {
      uint8_t *blk = (uint8_t *)buf + (size_t)q * per * ts;
      for (size_t i = 0; i < m; i++)
        set(blk, i, dt, a2a_value(i, r, q));
      repeat(blk, per, m, ts);
    }
    return;
  }
  if (p > n)
    p = n;
  for (size_t i = 0; i < p; i++)
    set(buf, i, dt, value(base + i, r, dt, op, c, nranks));
  repeat(buf, n, p, ts);
}

/* Element g of rank's result. */
static double expected(size_t g, sharc_dtype_t dt, int op, coll_t c, int root,
                       int rank, int nranks, size_t per_rank) {
  if (c == C_AG || c == C_GA) /* block q from rank q */
    return value(g % per_rank, (int)(g / per_rank), dt, op, c, nranks);
  if (c == C_BC || c == C_SC) /* root's element g */
    return value(g, root, dt, op, c, nranks);
  if (c == C_AA) /* block q: what rank q sent to rank */
    return a2a_value(g % per_rank, (int)(g / per_rank), rank);
  if (c == C_SR) /* what the rank it receives from sent */
    return value(g, bench_sr_from(rank, nranks), dt, op, c, nranks);
  double acc = value(g, 0, dt, op, c, nranks);
  for (int q = 1; q < nranks; q++) {
    double v = value(g, q, dt, op, c, nranks);
    acc = op == SHARC_PROD  ? acc * v
          : op == SHARC_MIN ? fmin(acc, v)
          : op == SHARC_MAX ? fmax(acc, v)
                            : acc + v;
  }
  if (op == SHARC_AVG)
    acc = is_float(dt) ? acc / nranks : floor(acc / nranks);
  return acc;
}

int64_t data_check(const void *buf, size_t n, size_t base, sharc_dtype_t dt,
                   int op, coll_t c, int root, int rank, int nranks,
                   size_t per_rank) {
  double tol = 0;
  int blocks = c == C_AG || c == C_GA || c == C_AA; /* values per block */
  if (op == SHARC_AVG && is_float(dt) && !copies(c) && c != C_AA)
    tol = dt == SHARC_BF16  ? 1.0 / 128
          : dt == SHARC_F16 ? 1.0 / 1024
          : dt == SHARC_F32 ? 1e-6
                            : 1e-14;
  /* Compare a period at a time with the expected values written in the
   * type; elements whose bytes differ get the exact test (so -0.0, and avg
   * rounded otherwise than the table, are judged as before). Values written
   * in the type are small integers, or one rounding of avg's quotient, so
   * equal bytes always pass the exact test. */
  size_t p = period(dt, op, c, nranks), ts = sharc_dtype_size(dt);
  p *= p < 1024 ? 1024 / p : 1; /* whole periods, about 1024 elements */
  uint8_t *want_t = malloc(p * ts);
  int64_t wrong = 0;
  size_t i = 0;
  while (i < n) {
    size_t g = base + i, len = n - i;
    if (blocks && per_rank && per_rank - g % per_rank < len)
      len = per_rank - g % per_rank; /* to the end of this rank's block */
    size_t tl = len < p ? len : p;
    if (want_t)
      for (size_t k = 0; k < tl; k++)
        set(want_t, k, dt,
            expected(g + k, dt, op, c, root, rank, nranks, per_rank));
    for (size_t j = 0; j < len; j += tl) {
      size_t m = len - j < tl ? len - j : tl;
      const uint8_t *at = (const uint8_t *)buf + (i + j) * ts;
      if (want_t && !memcmp(at, want_t, m * ts))
        continue;
      for (size_t k = 0; k < m; k++) {
        double want =
            expected(g + j + k, dt, op, c, root, rank, nranks, per_rank);
        double got = get(buf, i + j + k, dt);
        if (tol ? !(fabs(got - want) <= tol * fmax(1.0, fabs(want)))
                : got != want)
          wrong++;
      }
    }
    i += len;
  }
  free(want_t);
  return wrong;
}

/* Changes element 0 by one (an exact small integer in every type). */
void data_corrupt(void *buf, sharc_dtype_t dt) {
  double v = get(buf, 0, dt);
  set(buf, 0, dt, v >= 1 ? v - 1 : v + 1);
}

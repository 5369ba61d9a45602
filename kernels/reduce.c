/*
 * reduce.c - host reduction kernels (dst = a OP b) and the AVG finish step
 * (buf /= divisor) for every sharc dtype, plus f16/bf16 <-> f32 conversion.
 *
 * All (dtype, op) kernels come from one loop template, REDUCE_FN, expanded
 * over the dtype table SHARC_KERNEL_DTYPES; a 2-D function table dispatches
 * once per call, so the inner loops have no per-element branches and gcc -O3
 * vectorises them, f16/bf16 included (see the conversion notes below).
 * Baseline x86-64 (SSE2) has no 64-bit integer compare or multiply nor any
 * integer divide, so i64/u64 min/max/prod and the integer kernel_div stay
 * scalar unless built for a newer -march.
 */
#include "reduce.h"
#include "dtypes.h"

#include <float.h>
#include <string.h>

#include "core.h"

/* f32_to_f16 relies on a float addition rounding once, to f32 (no excess
 * precision), as it does with SSE and NEON. */
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "reduce.c needs FLT_EVAL_METHOD == 0 (SSE or NEON floating point)"
#endif

/* ---- bit casts and half-precision conversion ------------------------------
 * The f16 conversions run inside the vectorised reduce loops, so they are
 * branch-free integer code around a single float operation that every lane
 * executes and uses. Two gcc habits drive the shape:
 *  - a ?: becomes a branch, and if a float operation ends up on one side of
 *    it, gcc will not if-convert (so not vectorise) the loop, since the
 *    operation might trap (-ftrapping-math): selects here pick integer
 *    inputs of the float step, never its output, or are masks;
 *  - every extra value narrowed from 32 to 16 bits costs a shuffle chain on
 *    SSE2 (no packusdw), so the result is assembled in 32 bits and narrowed
 *    once, by the final shift. */

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* All ones when v, read as signed, is negative; else 0. gcc emits one
 * arithmetic shift for it. */
static inline uint32_t neg_mask(uint32_t v) { return 0u - (v >> 31); }

/* binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Every f16 value
 * is exactly representable in f32, so this direction never rounds. Moving
 * exponent and mantissa up 13 bits and rebiasing the exponent 15 -> 127
 * decodes normal numbers; inf/NaN (em > 0x7bff) get a second rebias that
 * lands them on exponent 255, payload kept. Zero and subnormals
 * (em < 0x400) are em * 2^-24: they get an exponent one higher, which reads
 * them as 2^-14 * (1 + em/1024), and 2^-14 is subtracted (exactly). Other
 * lanes subtract 0, which changes nothing but quiets a signalling NaN. No
 * f32 subnormal appears, so flush-to-zero / denormals-are-zero modes do not
 * change the result. */
static inline float f16_to_f32(uint16_t h) {
  uint32_t x = h;
  uint32_t em = x & 0x7fffu;                 /* exponent and mantissa */
  uint32_t sub = neg_mask(em - 0x0400u);     /* zero or subnormal */
  uint32_t special = neg_mask(0x7bffu - em); /* inf or NaN */
  uint32_t rebias = ((127u - 15u) << 23) + (sub & (1u << 23)) +
                    (special & ((127u - 15u) << 23));
  float v = bits_f32((em << 13) + rebias) - bits_f32(sub & 0x38800000u);
  return bits_f32(f32_bits(v) | ((x & 0x8000u) << 16));
}

/* f32 -> binary16 with one float addition that rounds for us, for normal
 * and subnormal results alike. Let E = max(exponent of |f|, -14): the f16
 * ulp at |f| is 2^(E-10). M = 2^(E+13) has f32 ulp 2^(E-10), so |f| + M
 * rounds |f| to the f16 grid (ties to even), and the bits of the sum minus
 * the bits of M count f16 ulps above M: 1024 + mantissa for normal results
 * (2048 when rounding carried into the next binade), the integer mantissa
 * for subnormal ones. Adding (E + 14) << 10 turns that count into the f16
 * encoding in both cases, carries included; [65520, 2^16) carries into
 * infinity by itself, and larger inputs, inf and NaN are clamped to 2^16,
 * which encodes as infinity. NaN then ORs in the quiet bit (the payload
 * bits that survive may all be zero, which would read as infinity) and
 * what fits of its payload. Values are signed int32 (all non-negative) so
 * that SSE2 can compare them directly. */
static inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  int32_t ax = (int32_t)(x & 0x7fffffffu);
  uint32_t nan = neg_mask(0x7f800000u - (uint32_t)ax) &
                 ((0x200u << 13) | ((uint32_t)ax & (0x1ffu << 13)));
  int32_t in = SHARC_MIN(ax, 0x47800000);             /* <= 2^16 */
  int32_t e = SHARC_MAX(in & 0x7f800000, 0x38800000); /* 2^E, E >= -14 */
  int32_t m = e + (13 << 23);                         /* M = 2^(E+13) */
  uint32_t ulps =
      f32_bits(bits_f32((uint32_t)in) + bits_f32((uint32_t)m)) - (uint32_t)m;
  /* The encoding, sign and NaN bits, all shifted up by 13. */
  uint32_t r = ((uint32_t)e - 0x38800000u) + (ulps << 13);
  r |= ((x >> 3) & 0x10000000u) | nan;
  return (uint16_t)(r >> 13);
}

/* bfloat16 is the top half of an f32: same exponent range, 7 mantissa bits. */
static inline float bf16_to_f32(uint16_t h) {
  return bits_f32((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  /* Ties to even on the low 16 bits; overflow carries into infinity. */
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x0040u; /* quiet, see f32_to_f16 */
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

float kernel_f16_to_f32(uint16_t h) { return f16_to_f32(h); }
uint16_t kernel_f32_to_f16(float f) { return f32_to_f16(f); }
float kernel_bf16_to_f32(uint16_t h) { return bf16_to_f32(h); }
uint16_t kernel_f32_to_bf16(float f) { return f32_to_bf16(f); }

/* The dtype table, SHARC_KERNEL_DTYPES, is in dtypes.h. */

/* Float min/max are plain comparisons (minps/maxps semantics): with a NaN
 * operand the result is the second operand. */
#define OP_SUM(C, U, x, y) ((C)((U)(x) + (U)(y)))
#define OP_PROD(C, U, x, y) ((C)((U)(x) * (U)(y)))
#define OP_MIN(C, U, x, y) ((x) < (y) ? (x) : (y))
#define OP_MAX(C, U, x, y) ((x) > (y) ? (x) : (y))

typedef void (*reduce_fn_t)(void *dst, const void *a, const void *b, size_t n);
typedef void (*div_fn_t)(void *buf, size_t n, int divisor);

/* The loop template. No restrict: dst may be a or b, and gcc versions the
 * loop with a run-time overlap test that still takes the vector path when
 * dst == a or dst == b (distance 0 carries no dependence). */
#define REDUCE_FN(DT, OPN, T, C, U, LD, ST)                                    \
  static void reduce_##DT##_##OPN(void *dst_, const void *a_, const void *b_,  \
                                  size_t n) {                                  \
    T *dst = dst_;                                                             \
    const T *a = a_, *b = b_;                                                  \
    for (size_t i = 0; i < n; i++) {                                           \
      C x = LD(C, a[i]), y = LD(C, b[i]);                                      \
      dst[i] = ST(T, OP_##OPN(C, U, x, y));                                    \
    }                                                                          \
  }

/* AVG finish: C division truncates toward zero for integers; floats divide
 * in C (f32 for f16/bf16) and round once when stored. divisor > 0. */
#define DIV_FN(DT, T, C, LD, ST)                                               \
  static void div_##DT(void *buf_, size_t n, int divisor) {                    \
    T *buf = buf_;                                                             \
    const C d = (C)divisor;                                                    \
    for (size_t i = 0; i < n; i++)                                             \
      buf[i] = ST(T, (C)(LD(C, buf[i]) / d));                                  \
  }

#define DEFINE_DTYPE_KERNELS(DT, T, C, U, LD, ST)                              \
  REDUCE_FN(DT, SUM, T, C, U, LD, ST)                                          \
  REDUCE_FN(DT, PROD, T, C, U, LD, ST)                                         \
  REDUCE_FN(DT, MIN, T, C, U, LD, ST)                                          \
  REDUCE_FN(DT, MAX, T, C, U, LD, ST)                                          \
  DIV_FN(DT, T, C, LD, ST)

SHARC_KERNEL_DTYPES(DEFINE_DTYPE_KERNELS)

/* AVG reduces as SUM; kernel_div divides once every rank's data is in. */
#define REDUCE_ROW(DT, T, C, U, LD, ST)                                        \
  [SHARC_##DT] = {[SHARC_SUM] = reduce_##DT##_SUM,                             \
                  [SHARC_PROD] = reduce_##DT##_PROD,                           \
                  [SHARC_MIN] = reduce_##DT##_MIN,                             \
                  [SHARC_MAX] = reduce_##DT##_MAX,                             \
                  [SHARC_AVG] = reduce_##DT##_SUM},
static const reduce_fn_t reduce_fns[SHARC_DTYPE_COUNT][SHARC_OP_COUNT] = {
    SHARC_KERNEL_DTYPES(REDUCE_ROW)};

#define DIV_ROW(DT, T, C, U, LD, ST) [SHARC_##DT] = div_##DT,
static const div_fn_t div_fns[SHARC_DTYPE_COUNT] = {
    SHARC_KERNEL_DTYPES(DIV_ROW)};

/* ---- entry points ---- */

/* Out-of-range arguments are a caller bug (the collectives validate dtype
 * and op first); report it and touch nothing rather than index off the
 * table. */
void kernel_reduce(sharc_dtype_t dtype, sharc_op_t op, void *dst, const void *a,
                   const void *b, size_t n) {
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT || (unsigned)op >= SHARC_OP_COUNT) {
    WARN(SUB_COMM,
         "kernel_reduce: dtype %d / op %d out of range (%d dtypes, %d ops); "
         "nothing reduced",
         (int)dtype, (int)op, SHARC_DTYPE_COUNT, SHARC_OP_COUNT);
    return;
  }
  if (n == 0)
    return;
  reduce_fns[dtype][op](dst, a, b, n);
}

void kernel_div(sharc_dtype_t dtype, void *buf, size_t n, int divisor) {
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT || divisor <= 0) {
    WARN(SUB_COMM,
         "kernel_div: dtype %d (of %d) / divisor %d invalid (need a rank "
         "count > 0); nothing divided",
         (int)dtype, SHARC_DTYPE_COUNT, divisor);
    return;
  }
  if (n == 0 || divisor == 1)
    return; /* x / 1 == x in every type */
  div_fns[dtype](buf, n, divisor);
}

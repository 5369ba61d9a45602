/*
 * test_convert.c - sharc_convert (include/sharc.h) against the kernels'
 * own conversions (kernels/reduce.h), element by element: every f16 and
 * bf16 bit pattern to f32 and back, f32 values around the rounding ties,
 * f16 <-> bf16, in place, and the refusals (other types, NULL buffers).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"
#include "sharc.h"
#include "unit/expect.h"

/* Bit-exact float equality (NaN payloads included). */
static int same_f32(float a, float b) { return !memcmp(&a, &b, sizeof a); }

static void halves_to_f32(sharc_dtype_t t) {
  uint16_t *h = malloc(65536 * sizeof *h);
  float *f = malloc(65536 * sizeof *f);
  for (uint32_t i = 0; i < 65536; i++)
    h[i] = (uint16_t)i;
  EXPECT(sharc_convert(f, SHARC_F32, h, t, 65536) == SHARC_OK, "%s",
         sharc_dtype_name(t));
  int bad = 0;
  for (uint32_t i = 0; i < 65536; i++) {
    float want =
        t == SHARC_BF16 ? kernel_bf16_to_f32(h[i]) : kernel_f16_to_f32(h[i]);
    bad += !same_f32(f[i], want);
  }
  EXPECT(bad == 0, "%s -> f32: %d of 65536 bit patterns differ",
         sharc_dtype_name(t), bad);
  /* and back: every non-NaN pattern survives the round trip */
  uint16_t *back = malloc(65536 * sizeof *back);
  EXPECT(sharc_convert(back, t, f, SHARC_F32, 65536) == SHARC_OK, "back");
  bad = 0;
  for (uint32_t i = 0; i < 65536; i++)
    bad += !isnan(f[i]) && back[i] != h[i];
  EXPECT(bad == 0, "%s round trip: %d patterns changed", sharc_dtype_name(t),
         bad);
  free(back);
  free(f);
  free(h);
}

static void f32_to_halves(void) {
  /* ties and near-ties of both formats' rounding, denormals, overflow */
  enum { N = 4096 };
  float *f = malloc(N * sizeof *f);
  uint16_t *h = malloc(N * sizeof *h), *b = malloc(N * sizeof *b);
  uint32_t x = 0x3f800000u;
  for (int i = 0; i < N; i++) {
    uint32_t bits = i < N / 2 ? x + (uint32_t)i * 0x1000u - 0x800000u
                              : (uint32_t)i * 0x000f4243u * 2654435761u;
    memcpy(&f[i], &bits, sizeof bits);
  }
  f[0] = 65520.0f; /* rounds to f16 infinity */
  f[1] = 5.96e-8f; /* f16's smallest denormal, about */
  f[2] = -0.0f;
  EXPECT(sharc_convert(h, SHARC_F16, f, SHARC_F32, N) == SHARC_OK, "f16");
  EXPECT(sharc_convert(b, SHARC_BF16, f, SHARC_F32, N) == SHARC_OK, "bf16");
  int bad = 0;
  for (int i = 0; i < N; i++)
    bad += h[i] != kernel_f32_to_f16(f[i]) || b[i] != kernel_f32_to_bf16(f[i]);
  EXPECT(bad == 0, "f32 -> f16/bf16: %d of %d values differ", bad, N);
  free(b);
  free(h);
  free(f);
}

static void half_to_half(void) {
  uint16_t src[3] = {0x3c00 /* f16 1.0 */, 0x7bff /* f16 max */, 0x0001};
  uint16_t out[3], inplace[3];
  memcpy(inplace, src, sizeof src);
  EXPECT(sharc_convert(out, SHARC_BF16, src, SHARC_F16, 3) == SHARC_OK,
         "f16 -> bf16");
  EXPECT(sharc_convert(inplace, SHARC_BF16, inplace, SHARC_F16, 3) == SHARC_OK,
         "in place");
  for (int i = 0; i < 3; i++) {
    uint16_t want = kernel_f32_to_bf16(kernel_f16_to_f32(src[i]));
    EXPECT(out[i] == want && inplace[i] == want,
           "f16 0x%04x -> bf16 0x%04x / 0x%04x, want 0x%04x", src[i], out[i],
           inplace[i], want);
  }
  float a[2] = {1.5f, -2.25f}, c[2];
  EXPECT(sharc_convert(c, SHARC_F32, a, SHARC_F32, 2) == SHARC_OK &&
             !memcmp(a, c, sizeof a),
         "f32 -> f32 copies");
}

static void refusals(void) {
  float f = 1;
  int32_t i = 0;
  EXPECT(sharc_convert(&i, SHARC_I32, &f, SHARC_F32, 1) ==
             SHARC_ERR_UNSUPPORTED,
         "i32 destination");
  EXPECT(sharc_convert(&f, SHARC_F32, &f, SHARC_F64, 1) ==
             SHARC_ERR_UNSUPPORTED,
         "f64 source");
  EXPECT(sharc_convert(NULL, SHARC_F16, &f, SHARC_F32, 1) ==
             SHARC_ERR_INVALID_ARG,
         "NULL dst");
  EXPECT(sharc_convert(&f, SHARC_F32, NULL, SHARC_F16, 1) ==
             SHARC_ERR_INVALID_ARG,
         "NULL src");
  EXPECT(sharc_convert(NULL, SHARC_F16, NULL, SHARC_F32, 0) == SHARC_OK,
         "count 0 touches nothing");
}

int main(void) {
  halves_to_f32(SHARC_F16);
  halves_to_f32(SHARC_BF16);
  f32_to_halves();
  half_to_half();
  refusals();
  printf("test_convert: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

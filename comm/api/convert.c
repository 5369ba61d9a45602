/*
 * convert.c - sharc_convert: f32, f16 and bf16 to one another on the host,
 * with the kernels' rounding (kernels/reduce.h), for mixed precision
 * around the collectives (the FSDP engine's bf16 gathers).
 */
#include <string.h>

#include "core.h"
#include "reduce.h"
#ifdef SHARC_HAVE_CUDA
#include "device.h"
#endif

static int half_type(sharc_dtype_t t) {
  return t == SHARC_F16 || t == SHARC_BF16;
}

sharc_status_t sharc_convert(void *dst, sharc_dtype_t dst_type, const void *src,
                             sharc_dtype_t src_type, size_t count) {
  if ((dst_type != SHARC_F32 && !half_type(dst_type)) ||
      (src_type != SHARC_F32 && !half_type(src_type)))
    return err_set(SHARC_ERR_UNSUPPORTED,
                   "sharc_convert: %s to %s: only f32, f16 and bf16 convert; "
                   "pass one of those",
                   sharc_dtype_name(src_type), sharc_dtype_name(dst_type));
  if (count == 0)
    return SHARC_OK;
  if (!dst || !src)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_convert: %s is NULL with count %zu",
                   dst ? "src" : "dst", count);
  if (dst_type == src_type) {
    if (dst != src)
      memcpy(dst, src, count * sharc_dtype_size(src_type));
    return SHARC_OK;
  }
  if (src_type == SHARC_F32) { /* f32 -> f16 / bf16 */
    const float *s = src;
    uint16_t *d = dst;
    if (dst_type == SHARC_BF16)
      for (size_t i = 0; i < count; i++)
        d[i] = kernel_f32_to_bf16(s[i]);
    else
      for (size_t i = 0; i < count; i++)
        d[i] = kernel_f32_to_f16(s[i]);
    return SHARC_OK;
  }
  if (dst_type == SHARC_F32) { /* f16 / bf16 -> f32 */
    const uint16_t *s = src;
    float *d = dst;
    if (src_type == SHARC_BF16)
      for (size_t i = 0; i < count; i++)
        d[i] = kernel_bf16_to_f32(s[i]);
    else
      for (size_t i = 0; i < count; i++)
        d[i] = kernel_f16_to_f32(s[i]);
    return SHARC_OK;
  }
  /* f16 <-> bf16 through f32, element by element (in place is allowed: same
   * size, each element read before it is written) */
  const uint16_t *s = src;
  uint16_t *d = dst;
  for (size_t i = 0; i < count; i++) {
    float f = src_type == SHARC_BF16 ? kernel_bf16_to_f32(s[i])
                                     : kernel_f16_to_f32(s[i]);
    d[i] =
        dst_type == SHARC_BF16 ? kernel_f32_to_bf16(f) : kernel_f32_to_f16(f);
  }
  return SHARC_OK;
}

sharc_status_t sharc_convert_cuda(void *dst, sharc_dtype_t dst_type,
                                  const void *src, sharc_dtype_t src_type,
                                  size_t count, void *cuda_stream) {
  if ((dst_type != SHARC_F32 && !half_type(dst_type)) ||
      (src_type != SHARC_F32 && !half_type(src_type)))
    return err_set(SHARC_ERR_UNSUPPORTED,
                   "sharc_convert_cuda: %s to %s: only f32, f16 and bf16 "
                   "convert; pass one of those",
                   sharc_dtype_name(src_type), sharc_dtype_name(dst_type));
  if (count > 0 && (!dst || !src))
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_convert_cuda: %s is NULL with count %zu",
                   dst ? "src" : "dst", count);
#ifdef SHARC_HAVE_CUDA
  int err =
      kernel_dev_convert(dst, dst_type, src, src_type, count, cuda_stream);
  if (err != 0)
    return err_set(SHARC_ERR_CUDA, "sharc_convert_cuda: %s to %s: %s",
                   sharc_dtype_name(src_type), sharc_dtype_name(dst_type),
                   kernel_dev_error_string(err));
  return SHARC_OK;
#else
  (void)cuda_stream;
  return err_set(SHARC_ERR_CUDA,
                 "sharc_convert_cuda: this build of sharc has no CUDA; "
                 "rebuild where CMake finds nvcc (-DSHARC_WITH_CUDA=ON)");
#endif
}

/*
 * dtypes.h - the dtype table the host kernels (reduce.c) and the device
 * kernels (device.cu) are both instantiated from, so the two cannot
 * disagree on a type's compute or wrap-around type.
 *
 * The LD/ST macros name f16_to_f32, f32_to_f16, bf16_to_f32 and
 * f32_to_bf16, which each including file defines for its side (host C or
 * device code) before expanding the table.
 */
#ifndef SHARC_KERNELS_DTYPES_H
#define SHARC_KERNELS_DTYPES_H

/* ---- the dtype table -------------------------------------------------------
 * One row per dtype:
 *   T   storage type of one element;
 *   C   compute type (what min/max compare and div divides in);
 *   U   type sum and prod are computed in: the float itself, or an unsigned
 *       integer at least as wide as int, so integer overflow wraps modulo
 *       2^bits (defined behaviour) instead of being signed overflow (UB);
 *       storing back into T keeps the low bits;
 *   LD  T -> C, ST  C -> T.
 */
#define SHARC_KERNEL_DTYPES(X)                                                 \
  X(F32, float, float, float, LD_CAST, ST_CAST)                                \
  X(F64, double, double, double, LD_CAST, ST_CAST)                             \
  X(F16, uint16_t, float, float, LD_F16, ST_F16)                               \
  X(BF16, uint16_t, float, float, LD_BF16, ST_BF16)                            \
  X(I8, int8_t, int32_t, uint32_t, LD_CAST, ST_CAST)                           \
  X(U8, uint8_t, uint32_t, uint32_t, LD_CAST, ST_CAST)                         \
  X(I32, int32_t, int32_t, uint32_t, LD_CAST, ST_CAST)                         \
  X(U32, uint32_t, uint32_t, uint32_t, LD_CAST, ST_CAST)                       \
  X(I64, int64_t, int64_t, uint64_t, LD_CAST, ST_CAST)                         \
  X(U64, uint64_t, uint64_t, uint64_t, LD_CAST, ST_CAST)

#define LD_CAST(C, v) ((C)(v))
#define ST_CAST(T, v) ((T)(v))
#define LD_F16(C, v) f16_to_f32(v)
#define ST_F16(T, v) f32_to_f16(v)
#define LD_BF16(C, v) bf16_to_f32(v)
#define ST_BF16(T, v) f32_to_bf16(v)

#endif /* SHARC_KERNELS_DTYPES_H */

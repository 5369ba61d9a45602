/*
 * reduce.h - host reduction and conversion kernels.
 *
 * Every (dtype, op) pair is one instantiation of a single macro template in
 * reduce.c; loops are written so the compiler vectorises them. f16 and bf16
 * are accumulated in f32 and rounded to nearest even when stored.
 */
#ifndef SHARC_KERNELS_REDUCE_H
#define SHARC_KERNELS_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "sharc.h"

/* dst[i] = a[i] OP b[i] for i in [0, n) elements. dst may equal a or b
 * (exactly, not partially overlapping). SHARC_AVG reduces as SHARC_SUM; the
 * division is kernel_div's job once all contributions are in. */
void kernel_reduce(sharc_dtype_t dtype, sharc_op_t op, void *dst, const void *a,
                   const void *b, size_t n);

/* buf[i] /= divisor for n elements (the AVG finish step). Integers divide
 * truncating toward zero; floats divide in their own precision (f16/bf16 in
 * f32, rounded to nearest even). */
void kernel_div(sharc_dtype_t dtype, void *buf, size_t n, int divisor);

/* IEEE binary16 and bfloat16 <-> f32, round to nearest even; NaN stays NaN,
 * overflow goes to infinity. */
float kernel_f16_to_f32(uint16_t h);
uint16_t kernel_f32_to_f16(float f);
float kernel_bf16_to_f32(uint16_t h);
uint16_t kernel_f32_to_bf16(float f);

#endif /* SHARC_KERNELS_REDUCE_H */

/*
 * coll_data.h - inputs, references and comparisons for coll_check: what
 * every rank's buffers hold and what a collective must produce from them.
 * Pure functions of (spec, rank, index), so every rank can compute every
 * other rank's input and check its own output without communicating.
 */
#ifndef SHARC_TESTS_COLL_DATA_H
#define SHARC_TESTS_COLL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "sharc.h"

#define DATA_OP_COPY                                                           \
  SHARC_OP_COUNT /* pseudo-op: data movement, raw random bits */

extern const char
    *const data_dt_name[SHARC_DTYPE_COUNT];          /* "f32", "bf16", ... */
extern const size_t data_dt_size[SHARC_DTYPE_COUNT]; /* bytes */
extern const char
    *const data_op_name[SHARC_OP_COUNT + 1]; /* "sum" ... "copy" */

typedef struct {
  int dt, op;    /* sharc_dtype_t; sharc_op_t or DATA_OP_COPY */
  int nranks;    /* ranks contributing to a reduction */
  uint64_t seed; /* differs per collective call */
} data_spec_t;

typedef struct {
  uint64_t u; /* integers (sign-extended to 64 bits) and raw bits of COPY */
  double f;   /* floats: exactly representable in the dtype */
} data_val_t;

/* Input element g (index into rank r's send buffer, elements). */
data_val_t data_gen(const data_spec_t *s, int r, size_t g);
/* Stores v as one element of s->dt at p. */
void data_put(const data_spec_t *s, void *p, data_val_t v);
/* The reduction over ranks 0..nranks-1 of input element g: f64 for floats,
 * 64-bit integer arithmetic wrapped to the type width for integers. */
data_val_t data_reference(const data_spec_t *s, size_t g);
/* 1 if the element at p matches e (integers and COPY bit-exact, MIN/MAX
 * exact, other float ops within a dtype- and nranks-based tolerance); else 0
 * with both values written as text into es and gs (64 bytes each). */
int data_matches(const data_spec_t *s, const void *p, data_val_t e, char *es,
                 char *gs);

/* IEEE binary16 and bfloat16 conversions, round to nearest even. */
uint16_t data_f32_to_f16(float f);
float data_f16_to_f32(uint16_t h);
uint16_t data_f32_to_bf16(float f);
float data_bf16_to_f32(uint16_t h);

#endif /* SHARC_TESTS_COLL_DATA_H */

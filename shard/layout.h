/*
 * layout.h - where each parameter element lives: the flat buffer of a unit,
 * its padding to a multiple of the shard count, each rank's contiguous
 * slice, and the overlap of two slicings (to re-slice a checkpoint saved at
 * another world size). Pure functions, unit-tested in tests/unit.
 */
#ifndef SHARC_SHARD_LAYOUT_H
#define SHARC_SHARD_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "sharc_shard.h"

typedef struct {
  size_t numel;  /* elements of all tensors, unpadded */
  size_t padded; /* numel rounded up to a multiple of shards */
  size_t slice;  /* padded / shards: elements each rank owns */
  int shards;
  int ntensors;
  size_t off[SHARC_UNIT_MAX_PARAMS];   /* first element of tensor k */
  size_t count[SHARC_UNIT_MAX_PARAMS]; /* elements of tensor k */
} layout_t;

/* Elements of one tensor (product of its shape); 0 with *ok = 0 when the
 * spec is malformed (ndim out of range, a zero dimension, overflow). */
size_t layout_tensor_numel(const sharc_param_spec_t *p, int *ok);

/* Lays out unit over shards ranks. Returns 0, or -1 with a message in err
 * when the unit's spec is malformed. */
int layout_unit(const sharc_unit_spec_t *unit, int shards, layout_t *out,
                char *err, size_t errlen);

/* Rank r's slice is [r*slice, (r+1)*slice) of the padded buffer; the part
 * of it that holds real elements (not padding) has this many elements. */
size_t layout_slice_real(const layout_t *l, int rank);

/* The overlap of [a0, a1) and [b0, b1): *lo, *hi (empty when lo >= hi). */
void layout_overlap(size_t a0, size_t a1, size_t b0, size_t b1, size_t *lo,
                    size_t *hi);

/* Initial value of element i of tensor k of unit u: a pure function of
 * (seed, u, k, i) and the tensor's init kind, identical for any world size
 * or strategy. */
float layout_init_value(const sharc_param_spec_t *p, uint64_t seed, int u,
                        int k, size_t i);

/* A 64-bit mixing function (splitmix64 finaliser). */
uint64_t layout_mix(uint64_t x);

#endif /* SHARC_SHARD_LAYOUT_H */

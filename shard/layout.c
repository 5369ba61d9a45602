/*
 * layout.c - the flat-buffer layout of a unit and deterministic
 * initialisation (see layout.h).
 */
#include "layout.h"

#include <math.h>
#include <stdio.h>

size_t layout_tensor_numel(const sharc_param_spec_t *p, int *ok) {
  *ok = 0;
  if (p->ndim < 1 || p->ndim > SHARC_TENSOR_MAX_DIMS)
    return 0;
  size_t n = 1;
  for (int d = 0; d < p->ndim; d++) {
    size_t s = p->shape[d];
    if (s == 0 || n > SIZE_MAX / s / 8)
      return 0;
    n *= s;
  }
  *ok = 1;
  return n;
}

int layout_unit(const sharc_unit_spec_t *unit, int shards, layout_t *out,
                char *err, size_t errlen) {
  if (shards < 1) {
    snprintf(err, errlen, "shard layout: %d shards; need at least 1", shards);
    return -1;
  }
  if (unit->nparams < 1 || unit->nparams > SHARC_UNIT_MAX_PARAMS) {
    snprintf(err, errlen,
             "unit '%s' declares %d parameter tensors; a unit holds 1 to %d",
             unit->name ? unit->name : "?", unit->nparams,
             SHARC_UNIT_MAX_PARAMS);
    return -1;
  }
  size_t total = 0;
  for (int k = 0; k < unit->nparams; k++) {
    const sharc_param_spec_t *p = &unit->params[k];
    int ok;
    size_t n = layout_tensor_numel(p, &ok);
    if (!ok) {
      snprintf(err, errlen,
               "unit '%s' tensor %d ('%s'): ndim %d or a dimension is 0 or "
               "too large; give 1..%d dimensions, each >= 1",
               unit->name ? unit->name : "?", k, p->name ? p->name : "?",
               p->ndim, SHARC_TENSOR_MAX_DIMS);
      return -1;
    }
    if (total > SIZE_MAX / 8 - n) {
      snprintf(err, errlen,
               "unit '%s': its tensors hold more than %zu "
               "elements together",
               unit->name ? unit->name : "?", SIZE_MAX / 8);
      return -1;
    }
    out->off[k] = total;
    out->count[k] = n;
    total += n;
  }
  out->ntensors = unit->nparams;
  out->numel = total;
  out->shards = shards;
  out->padded = (total + (size_t)shards - 1) / (size_t)shards * (size_t)shards;
  out->slice = out->padded / (size_t)shards;
  return 0;
}

size_t layout_slice_real(const layout_t *l, int rank) {
  size_t lo = (size_t)rank * l->slice, hi = lo + l->slice;
  if (lo >= l->numel)
    return 0;
  return (hi > l->numel ? l->numel : hi) - lo;
}

void layout_overlap(size_t a0, size_t a1, size_t b0, size_t b1, size_t *lo,
                    size_t *hi) {
  *lo = a0 > b0 ? a0 : b0;
  *hi = a1 < b1 ? a1 : b1;
  if (*hi < *lo)
    *hi = *lo;
}

uint64_t layout_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* A uniform double in (0, 1) from 53 bits of a hash. */
static double unit_uniform(uint64_t h) {
  return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

float layout_init_value(const sharc_param_spec_t *p, uint64_t seed, int u,
                        int k, size_t i) {
  uint64_t key = layout_mix(
      layout_mix(seed) ^ ((uint64_t)(unsigned)u << 32 | (uint64_t)(unsigned)k));
  switch (p->init) {
  case SHARC_INIT_ZEROS:
    return 0.0f;
  case SHARC_INIT_ONES:
    return 1.0f;
  case SHARC_INIT_UNIFORM:
    return (float)(p->init_scale *
                   (2.0 * unit_uniform(layout_mix(key ^ layout_mix(i))) - 1.0));
  case SHARC_INIT_NORMAL: {
    /* Box-Muller on two hashes of the element index */
    double u1 = unit_uniform(layout_mix(key ^ layout_mix(2 * (uint64_t)i)));
    double u2 = unit_uniform(layout_mix(key ^ layout_mix(2 * (uint64_t)i + 1)));
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    return (float)(p->init_scale * z);
  }
  }
  return 0.0f;
}

size_t sharc_param_numel(const sharc_param_spec_t *p) {
  int ok = 0;
  size_t n = p ? layout_tensor_numel(p, &ok) : 0;
  return ok ? n : 0;
}

float sharc_param_init_value(const sharc_param_spec_t *p, uint64_t seed,
                             int unit, int tensor, size_t i) {
  return p ? layout_init_value(p, seed, unit, tensor, i) : 0.0f;
}

/*
 * ckpt_meta.h - the checkpoint metadata: what a checkpoint holds (units, their
 * tensors and shapes, how it was sliced, the optimizer, the step) as a
 * small text file, parsed and printed by pure functions (unit-tested and
 * fuzzed: the file is untrusted input).
 */
#ifndef SHARC_SHARD_CKPT_META_H
#define SHARC_SHARD_CKPT_META_H

#include <stddef.h>
#include <stdint.h>

#include "sharc_shard.h"

#define CKPT_MAX_UNITS 4096
#define CKPT_MAX_FILES 65536
#define CKPT_NAME 64

typedef struct {
  char name[CKPT_NAME];
  int ndim;
  size_t shape[SHARC_TENSOR_MAX_DIMS];
} ckpt_tensor_t;

typedef struct {
  char name[CKPT_NAME];
  size_t numel;
  int ntensors;
  ckpt_tensor_t tensors[SHARC_UNIT_MAX_PARAMS];
} ckpt_unit_t;

typedef struct {
  int full; /* 1: one file, unsharded; 0: one file per shard */
  char model[CKPT_NAME];
  char strategy[CKPT_NAME];
  int world, shards; /* the saving job's; files = full ? 1 : shards */
  int states;        /* f32 arrays per element: params + optimizer (1..3) */
  char optim[16];    /* "sgd" or "adamw" */
  uint64_t steps;
  uint64_t optim_steps; /* steps the optimizer state has seen */
  double lr;
  uint64_t seed;
  int nunits;
  ckpt_unit_t *units; /* nunits */
  int nfiles;
  uint64_t *file_sums; /* nfiles FNV-1a 64 of each data file */
} ckpt_meta_t;

/* Parses meta text (len bytes, need not be NUL-terminated). Returns 0, or
 * -1 with err saying the line and what is wrong. Free with ckpt_meta_free
 * (also after a failure). */
int ckpt_meta_parse(const char *text, size_t len, ckpt_meta_t *m, char *err,
                    size_t errlen);
/* Writes m as text into a malloc'ed string (*out, *len). -1: no memory. */
int ckpt_meta_print(const ckpt_meta_t *m, char **out, size_t *len);
void ckpt_meta_free(ckpt_meta_t *m);

/* Elements of one slice of unit u when sliced over m->shards, and the
 * byte offset of unit u's block in a data file: each file holds, unit by
 * unit, states arrays of (full ? numel : slice) f32. */
size_t ckpt_unit_slice(const ckpt_meta_t *m, int u);
uint64_t ckpt_unit_offset(const ckpt_meta_t *m, int u);
/* Bytes of one data file. */
uint64_t ckpt_file_bytes(const ckpt_meta_t *m);

/* FNV-1a 64 over len bytes, continuing from h (start with CKPT_FNV0). */
#define CKPT_FNV0 0xcbf29ce484222325ull
uint64_t ckpt_fnv(uint64_t h, const void *p, size_t len);

#endif /* SHARC_SHARD_CKPT_META_H */

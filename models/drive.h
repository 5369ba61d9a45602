/*
 * drive.h - runs a sharc_model_t in one process without the engine: every
 * unit's parameters whole, stages forward in order and backward in reverse.
 * The reference executor of the model tests (gradient checks) and a
 * readable statement of the callback contract the engine honours.
 */
#ifndef SHARC_MODELS_DRIVE_H
#define SHARC_MODELS_DRIVE_H

#include "sharc_shard.h"

typedef struct {
  const sharc_model_t *m;
  float **params; /* [unit]: numel f32, tensors in declared order */
  float **grads;  /* [unit]: numel f32, accumulated by drive_run */
  size_t *numel;  /* [unit] */
} drive_t;

/* Allocates params and grads and initialises params as the engine does
 * (layout_init_value with seed). Returns 0 or -1 (out of memory or a
 * malformed spec, with a message on stderr). */
int drive_init(drive_t *d, const sharc_model_t *m, uint64_t seed);
void drive_free(drive_t *d);
/* Zeroes every gradient. */
void drive_zero_grads(drive_t *d);
/* Forward of every stage on batch b; with backward != 0 also backward,
 * ADDING into d->grads. stats gets the last stage's SHARC_STAGE_STATS
 * sums. Returns 0, or the first nonzero callback result. */
int drive_run(drive_t *d, const sharc_batch_t *b, int backward,
              double stats[SHARC_STAGE_STATS]);
/* Pointer to tensor k of unit u in d->params (or d->grads with grad 1). */
float *drive_tensor(drive_t *d, int u, int k, int grad);

#endif /* SHARC_MODELS_DRIVE_H */

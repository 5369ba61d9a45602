/*
 * gpt_cuda.h - between gpt.c and gpt_cuda.cu, not part of the models' API:
 * gpt_cuda_model (gpt.h) creates the device twin through these, under
 * gpt.c's lock. Only built with SHARC_MODELS_CUDA. It does not include
 * gpt.h: gpt.c depends on gpt_cuda.cu, never the reverse (the layering
 * check, tests/layers, refuses the cycle).
 */
#ifndef SHARC_MODELS_GPT_CUDA_H
#define SHARC_MODELS_GPT_CUDA_H

#include <stddef.h>

#include "sharc_shard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gpt_config_t's fields. The stages are gpt.h's: stage 0 the embedding,
 * stages 1..layers the blocks, the last the head. */
typedef struct {
  int vocab, ctx, layers, heads, channels;
} gpt_cuda_shape_t;

/* The SHARC_DEVICE_CUDA twin of host (gpt.c's model of shape): the same
 * name, units and stages (host's arrays, which must outlive it), its own
 * callbacks and buffer sizes, bound to the calling thread's current
 * device and a cuBLAS handle of its own. NULL with a one-line reason in
 * why when no device is usable, cublasCreate fails or memory runs out.
 * Free with gpt_cuda_destroy. */
const sharc_model_t *gpt_cuda_create(const sharc_model_t *host,
                                     const gpt_cuda_shape_t *shape, char *why,
                                     size_t whylen);

/* Frees a model of gpt_cuda_create (NULL: nothing); its cuBLAS handle's
 * destruction waits for the device. */
void gpt_cuda_destroy(const sharc_model_t *m);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_MODELS_GPT_CUDA_H */

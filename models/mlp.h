/*
 * mlp.h - a multilayer perceptron as a sharc_model_t: fc -> ReLU -> ... ->
 * fc -> log-softmax -> NLL, one unit and one stage per layer. Small and
 * fast: the engine's schedule, strategy and checkpoint tests train it.
 * Input x is f32 (n, dims[0]); targets y are int32 class indices (n).
 */
#ifndef SHARC_MODELS_MLP_H
#define SHARC_MODELS_MLP_H

#include "sharc_shard.h"

#define MLP_MAX_LAYERS 8

typedef struct mlp mlp_t;

/* dims[0] inputs, dims[nlayers] classes, hidden widths between. Returns
 * 0, or -1 with a message in err. */
int mlp_create(mlp_t **out, const int *dims, int nlayers, char *err,
               size_t errlen);
const sharc_model_t *mlp_model(const mlp_t *m);
void mlp_destroy(mlp_t *m);

#endif /* SHARC_MODELS_MLP_H */

/*
 * cnn.h - the reference CNN for the FSDP engine (the PyTorch examples/mnist
 * network) on Fashion-MNIST, as a sharc_model_t:
 *
 *   x (n,1,28,28) f32 -> conv1 3x3 1->32 -> ReLU            (n,32,26,26)
 *     -> conv2 3x3 32->64 -> ReLU -> max-pool 2 -> dropout 0.25
 *                                                           (n,9216)
 *     -> fc1 9216->128 -> ReLU -> dropout 0.5               (n,128)
 *     -> fc2 128->10 -> log-softmax -> NLL loss
 *
 * batch->x is n*28*28 floats (images already normalised, see mnist.h) and
 * batch->y n int32_t labels in 0..9. Four units (conv1, conv2, fc1, fc2:
 * weight then bias, PyTorch shapes and uniform 1/sqrt(fan_in) init) and
 * four stages, stage s using unit s (kind s). The last stage's statistics are
 * the NLL sum and the number of correct predictions (argmax == label).
 *
 * Dropout masks are a pure function of (seed, batch->step, batch->first +
 * sample, stage, element): every rank count and micro-batch split draws the
 * same masks. Dropout runs only when the model was created with it and
 * batch->training is 1 (inverted: kept values are scaled by 1/(1-p)).
 *
 * The callbacks use OpenBLAS CBLAS on the calling thread and keep no state
 * between calls: one model may serve several engines at once.
 * cnn_cuda_model gives the same network for GPU training.
 */
#ifndef SHARC_MODELS_CNN_H
#define SHARC_MODELS_CNN_H

#include <stdint.h>

#include "sharc_shard.h"

#define CNN_IMAGE_H 28
#define CNN_IMAGE_W 28
#define CNN_CLASSES 10
#define CNN_UNITS 4
#define CNN_STAGES 4

typedef struct cnn cnn_t;

/* Creates the model; seed keys the dropout masks (pass the engine's seed),
 * dropout 0 turns dropout off for every batch. Returns 0, or -1 when out of
 * memory (*out = NULL). */
int cnn_create(cnn_t **out, uint64_t seed, int dropout);

/* The model description (SHARC_DEVICE_HOST); it lives as long as c. */
const sharc_model_t *cnn_model(const cnn_t *c);

/* The same network as a SHARC_DEVICE_CUDA model (models/cnn_cuda.cu):
 * the same name, units, parameter specs, stages and kinds as cnn_model(c),
 * so checkpoints interchange between host and GPU training, and the same
 * dropout masks bit for bit. Its callbacks take device memory except
 * batch->x and batch->y (host memory, copied with cudaMemcpyAsync on the
 * call's stream, so they must stay valid until that stream passes the
 * call), queue their work (cuBLAS GEMMs and small kernels) on
 * call->cuda_stream and return without synchronizing; the last stage
 * writes its statistics to device memory. A label outside 0..9 is checked
 * on the host before anything is queued and fails the call. Results equal
 * the host model's up to the GEMMs' summation order (cuBLAS's, not
 * OpenBLAS's); elementwise steps, masks and statistics sums follow the
 * host code's order. Its saved and scratch sizes differ from the host
 * model's (whole micro-batches per GEMM).
 *
 * Created on the first call, for the CUDA device current then (its cuBLAS
 * handle belongs to that device), and owned by c: it lives until
 * cnn_destroy, which synchronizes that device. Thread safe; the model may
 * serve several engines and threads at once. Returns NULL and a one-line
 * reason in why (whylen bytes, may be 0) when the build has no CUDA or
 * cuBLAS, no CUDA device is usable, or cublasCreate fails; a later call
 * tries again. */
const sharc_model_t *cnn_cuda_model(cnn_t *c, char *why, size_t whylen);

/* Frees c and its CUDA model, if one was made (NULL: nothing). */
void cnn_destroy(cnn_t *c);

/* The same forward and backward in double precision, from the same layer
 * code as the f32 callbacks (the reference of the gradient check).
 * params[u] holds unit u's tensors flat in declared order (weight, bias);
 * grads, if not NULL, gets the gradients of the returned loss ADDED into
 * grads[u] (same layout). Samples are first, first+1, ... of a global batch
 * of global_n at optimizer step step; training as in sharc_batch_t.
 * Returns the loss summed over the n samples divided by global_n, and
 * writes stats (if not NULL) as the last stage does: NLL sum, correct
 * predictions. Returns NAN for a label outside 0..9, n < 0, global_n < 1 or
 * no memory. Allocates its own buffers; thread safe. */
double cnn_loss_grad_f64(const cnn_t *c, const double *const *params,
                         double *const *grads, const float *x, const int32_t *y,
                         int n, int global_n, uint64_t first, uint64_t step,
                         int training, double stats[SHARC_STAGE_STATS]);

#endif /* SHARC_MODELS_CNN_H */

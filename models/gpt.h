/*
 * gpt.h - a GPT-style decoder (GPT-2 shapes: learned positions, pre-norm
 * blocks with causal multi-head self-attention and a GELU MLP, a final
 * LayerNorm and an output head tied to the token embedding) as a
 * sharc_model_t for the FSDP engine, on the host with CBLAS, and its
 * twin on a CUDA device (gpt_cuda_model).
 *
 * Units: unit 0 "embed" = {wte (V,C), wpe (T,C), lnf.weight (C),
 * lnf.bias (C)}; unit 1+l "block<l>" for l in [0, L) = {ln1.weight,
 * ln1.bias, attn.qkv.weight (3C,C), attn.qkv.bias (3C), attn.proj.weight
 * (C,C), attn.proj.bias (C), ln2.weight, ln2.bias, mlp.fc.weight (4C,C),
 * mlp.fc.bias (4C), mlp.proj.weight (C,4C), mlp.proj.bias (C)}.
 *
 * Stages: stage 0 (GPT_STAGE_EMBED, unit 0) turns tokens into (n,T,C);
 * stage 1+l (GPT_STAGE_BLOCK, unit 1+l) maps (n,T,C) to (n,T,C); stage L+1
 * (GPT_STAGE_HEAD, unit 0 again: the tied head) applies the final
 * LayerNorm, the logits x @ wte^T and the softmax cross-entropy, and
 * writes the statistics: [0] the sum over its n sequences of each
 * sequence's mean token loss, [1] the tokens whose argmax logit is the
 * target. wte's gradient gets contributions from stages 0 and L+1.
 *
 * Batch layout: x and y are int32_t (n,T) tokens and targets (targets are
 * the next token), every value in [0, V); any other value makes forward
 * (and backward) return nonzero. No dropout: forward is deterministic, so
 * the engine can recompute it under activation checkpointing.
 */
#ifndef SHARC_MODELS_GPT_H
#define SHARC_MODELS_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "sharc_shard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int vocab;    /* V: token values are [0, V); 256 for byte tokens */
  int ctx;      /* T: tokens per sequence (every sequence is full) */
  int layers;   /* L: transformer blocks */
  int heads;    /* H: attention heads; channels % heads == 0 */
  int channels; /* C: embedding width */
} gpt_config_t;

/* sharc_stage_spec_t.kind of the three stage kinds. */
enum { GPT_STAGE_EMBED = 0, GPT_STAGE_BLOCK = 1, GPT_STAGE_HEAD = 2 };

/* Fills cfg with a named shape: "tiny" (V256 T16 L2 H2 C32, the tests'),
 * "small" (V256 T64 L4 H4 C128) or "gpt2" (the 124M model's shapes: V50257
 * T1024 L12 H12 C768; on sharc's byte tokens only 256 of the 50257
 * embedding and output rows are ever used: the shapes, for speed and
 * memory, not GPT-2's vocabulary). Returns 0, or -1 for any other name
 * (cfg untouched). */
int gpt_config_preset(const char *name, gpt_config_t *cfg);

typedef struct gpt gpt_t;

/* Builds the model description for cfg (copied). Returns 0 with *out set,
 * or -1 with a message in err (a non-positive field, channels not
 * divisible by heads, a size past the limits, out of memory). Free with
 * gpt_destroy. The model is immutable after creation: its callbacks may
 * run from any thread, and several at once on distinct buffers. */
int gpt_create(gpt_t **out, const gpt_config_t *cfg, char *err, size_t errlen);

/* The sharc_model_t to hand to sharc_shard_create or drive_init; owned by
 * g and valid until gpt_destroy. */
const sharc_model_t *gpt_model(const gpt_t *g);

/* The configuration g was created with. */
const gpt_config_t *gpt_config(const gpt_t *g);

/* Parameters of all units together (elements). */
size_t gpt_num_params(const gpt_t *g);

/* The same network as a SHARC_DEVICE_CUDA model (gpt_cuda.cu): the same
 * name, units, stages, kinds and parameter specs as gpt_model(g), so
 * checkpoints interchange between host and device runs; its own buffer
 * sizes (saved and scratch differ from the host model's). The GEMMs are
 * cuBLAS, the rest deterministic kernels (no atomics) with the host's
 * arithmetic; results differ from gpt_model's only by the GEMMs'
 * summation order and the device's expf and logf.
 *
 * Every buffer its callbacks get is device memory except batch->x and
 * batch->y (host int32 tokens and targets, so stage 0's in), which are
 * checked on the host (a value outside [0, V) fails the call) and copied
 * on call->cuda_stream: on softcuda, where that copy is asynchronous, they
 * must stay valid until the stream passes it. The last stage's out is its
 * SHARC_STAGE_STATS doubles in device memory. Callbacks queue everything
 * on (cudaStream_t)call->cuda_stream and return without synchronizing;
 * they may run from several threads at once (one cuBLAS handle, under a
 * mutex), each thread's current device being the one current at creation
 * (otherwise the call fails).
 *
 * Created on the first call, on the calling thread's current device, and
 * owned by g until gpt_destroy; thread safe (a mutex in g guards the
 * creation: later calls return the same model). Returns NULL with a
 * one-line reason in why (which may be NULL) when the build has no CUDA
 * models (SHARC_MODELS_CUDA: CUDA and cuBLAS, or softcuda), no device is
 * usable, or cuBLAS fails to start; a later call tries again. */
const sharc_model_t *gpt_cuda_model(gpt_t *g, char *why, size_t whylen);

/* Frees g and its CUDA model, if one was created (destroying its cuBLAS
 * handle waits for the device): no callback may still run, and no work
 * queued by one may still be pending. NULL: nothing. */
void gpt_destroy(gpt_t *g);

/* The f64 reference of the whole model, for gradient checks: the same
 * layer code as the callbacks, instantiated in double. params[u] is unit
 * u's flat parameters (tensors in declared order, no gaps). Sets *loss to
 * the sum over the n sequences of x and y ((n,T) each) of their mean
 * token losses, divided by global_n; when grads is not NULL, ADDS the
 * gradient of *loss to grads[u] (same layout as params[u]). Returns 0, or
 * -1 for a token outside [0, V), n < 0, global_n < 1 or out of memory. */
int gpt_loss_grad_f64(const gpt_t *g, const double *const *params,
                      double *const *grads, const int32_t *x, const int32_t *y,
                      int n, int global_n, double *loss);

/* gpt_loss_grad_f64 that also keeps what each stage passes on, for checks
 * of single stages: when outs is not NULL, outs[s] gets stage s's output
 * ((n,T,C) elements; for the last stage its SHARC_STAGE_STATS statistics);
 * when dins is not NULL (grads must not be NULL then), dins[s] for s >= 1
 * gets the gradient of stage s's input ((n,T,C); dins[0] is not used).
 * Same returns. */
int gpt_trace_f64(const gpt_t *g, const double *const *params,
                  double *const *grads, const int32_t *x, const int32_t *y,
                  int n, int global_n, double *const *outs, double *const *dins,
                  double *loss);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_MODELS_GPT_H */

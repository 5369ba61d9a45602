/*
 * sharc_shard.h - the FSDP engine: trains a model whose parameters,
 * gradients and optimizer state are sharded across the ranks of a
 * communicator (Fully Sharded Data Parallel / ZeRO-3, ZeRO-2, DDP and hybrid
 * HSDP), gathering each unit's parameters just before use and discarding
 * them after.
 *
 * A model is a list of units (layers or blocks), each declaring its
 * parameter tensors, and a list of stages run in order in forward and in
 * reverse in backward. A stage uses one unit's parameters; a unit may be
 * used by several stages (a tied embedding and output head), and then stays
 * gathered from its first to its last use. The engine owns every buffer the
 * model touches (parameters, gradients, activations, the stage's saved
 * tensors and scratch), so its memory report adds up to what was allocated.
 *
 * Each unit's parameters live in one flat f32 buffer (tensors in declared
 * order, no gaps) padded to a multiple of the shard count; rank r of the
 * shard group owns elements [r*S, (r+1)*S) of it, S = padded / shards.
 * Initialisation is a pure function of (seed, unit, tensor, element), so
 * every world size and strategy starts from the same weights.
 *
 * The engine calls only the public collectives of sharc.h, on one
 * communication stream of its own. Valid C99, includable from C++.
 */
#ifndef SHARC_SHARD_H
#define SHARC_SHARD_H

#include "sharc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- model description -------------------------------------------------- */

/* Where a model computes and the engine keeps its state. */
typedef enum {
  SHARC_DEVICE_HOST = 0, /* host memory; callbacks compute on the calling
                          * thread and return when done */
  SHARC_DEVICE_CUDA      /* device memory of the calling thread's current
                          * CUDA device; callbacks queue their work on
                          * call->cuda_stream and may return before it
                          * ran (CUDA builds only) */
} sharc_device_t;

typedef enum {
  SHARC_INIT_ZEROS = 0,
  SHARC_INIT_ONES,
  SHARC_INIT_NORMAL,  /* mean 0, standard deviation init_scale */
  SHARC_INIT_UNIFORM, /* uniform in [-init_scale, init_scale] */
} sharc_init_t;

#define SHARC_TENSOR_MAX_DIMS 4
#define SHARC_UNIT_MAX_PARAMS 16

typedef struct {
  const char *name; /* "conv1.weight"; unique within the unit */
  int ndim;         /* 1..SHARC_TENSOR_MAX_DIMS */
  size_t shape[SHARC_TENSOR_MAX_DIMS];
  sharc_init_t init;
  double init_scale;
  int no_decay; /* 1: weight decay (AdamW's decoupled decay, SGD's L2
                 * term) skips it: biases, norm gains */
} sharc_param_spec_t;

typedef struct {
  const char *name; /* "block3" */
  int nparams;
  sharc_param_spec_t params[SHARC_UNIT_MAX_PARAMS];
} sharc_unit_spec_t;

typedef struct {
  int unit; /* index of the unit whose parameters the stage uses */
  int kind; /* the model's own tag, passed back in every call */
} sharc_stage_spec_t;

/* One micro-batch as this rank sees it. x and y are the model's own input
 * layout (images and labels, tokens and targets). The loss is normalised
 * by global_n, the samples of the whole global batch over all ranks and
 * micro-batches, so gradients summed over ranks are those of the mean. */
typedef struct {
  int n;          /* samples on this rank in this micro-batch */
  int global_n;   /* samples in the global batch (all ranks) */
  const void *x;  /* model-defined input for the n samples */
  const void *y;  /* model-defined targets for the n samples */
  uint64_t first; /* global index of sample 0 (per-sample randomness) */
  uint64_t step;  /* optimizer step this micro-batch belongs to */
  int training;   /* 1: training (dropout on), 0: evaluation */
} sharc_batch_t;

/* The last stage writes SHARC_STAGE_STATS doubles to its output: the sum
 * over its samples of the loss, and of a model-defined second statistic
 * (correct predictions for a classifier). */
#define SHARC_STAGE_STATS 2

/* What a forward or backward callback receives. Tensor pointers are f32,
 * in the shapes of the unit's sharc_param_spec_t, packed (params[k] and
 * grads[k] are 4-byte aligned); in, out, dout, din, saved and scratch are
 * 64-byte aligned (256 for a CUDA model).
 *
 * A SHARC_DEVICE_CUDA model gets every buffer below in device memory
 * except the batch: batch->x and batch->y (and so stage 0's in) stay the
 * caller's host memory, and a stage copies what it needs of them into its
 * saved or scratch buffer. The last stage's out (the statistics) is device
 * memory too; the engine reads it after the stream passed it. */
typedef struct {
  int stage, unit, kind;
  const sharc_batch_t *batch;
  const float *const *params; /* full parameters of the unit (read only) */
  float *const *grads;        /* backward: ADD the parameter gradients */
  const void *in;             /* stage input: the previous stage's output,
                               * or for stage 0 batch->x */
  void *out;                  /* forward: the stage's output */
  const void *dout;           /* backward: gradient of out (NULL for the
                               * last stage, which starts the chain) */
  void *din;                  /* backward: write the gradient of in
                               * (NULL for stage 0) */
  void *saved;                /* saved_bytes: written by forward, read by
                               * the matching backward */
  void *scratch;              /* scratch_bytes: undefined between calls */
  void *cuda_stream;          /* CUDA models: the cudaStream_t to queue the
                               * work on (in, dout, params are ready on it;
                               * out, din, grads are read after it) */
} sharc_stage_call_t;

typedef struct {
  const char *name;
  int nunits;
  const sharc_unit_spec_t *units;
  int nstages;
  const sharc_stage_spec_t *stages;
  void *ctx; /* passed to every callback */
  /* Sizes in bytes for a micro-batch of n samples. out_bytes of the last
   * stage is ignored (SHARC_STAGE_STATS doubles). */
  size_t (*out_bytes)(void *ctx, int stage, int n);
  size_t (*saved_bytes)(void *ctx, int stage, int n);
  size_t (*scratch_bytes)(void *ctx, int stage, int n);
  /* Return 0 on success; nonzero fails the step with SHARC_ERR_INTERNAL. */
  int (*forward)(void *ctx, const sharc_stage_call_t *call);
  int (*backward)(void *ctx, const sharc_stage_call_t *call);
  /* Where the callbacks expect their buffers (see sharc_stage_call_t);
   * the engine must be created with the same cfg.device. */
  sharc_device_t device;
} sharc_model_t;

/* ---- engine configuration ------------------------------------------------ */

typedef enum {
  SHARC_FULL_SHARD = 0,     /* ZeRO-3: gather per use, discard after */
  SHARC_SHARD_GRAD_OP,      /* ZeRO-2: keep gathered from forward to backward */
  SHARC_NO_SHARD,           /* DDP: replicated, gradients all-reduced */
  SHARC_HYBRID_SHARD,       /* FULL_SHARD in a group, replicate across groups */
  SHARC_HYBRID_SHARD_ZERO2, /* SHARD_GRAD_OP in a group, replicate across */
  SHARC_STRATEGY_COUNT
} sharc_strategy_t;

typedef enum { SHARC_OPTIM_SGD = 0, SHARC_OPTIM_ADAMW } sharc_optim_kind_t;

typedef struct {
  sharc_optim_kind_t kind;
  double lr;
  double momentum;     /* SGD (0: plain SGD) */
  double beta1, beta2; /* AdamW */
  double eps;          /* AdamW */
  double weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
} sharc_optim_t;

typedef struct {
  sharc_strategy_t strategy;
  int shard_group; /* hybrid: ranks per shard group; 0 = one per host */
  sharc_dtype_t param_dtype; /* SHARC_F32, or SHARC_BF16 / SHARC_F16 to
                              * gather and compute parameters in (mixed
                              * precision; master slices and optimizer
                              * state stay f32, gradients reduce in f32) */
  int prefetch; /* most gathered units alive at once (default 2; 1 =
                 * no prefetch) */
  int checkpoint_activations; /* 1: drop each stage's saved tensors after
                               * forward, recompute them in backward */
  int offload;   /* 1: slices and optimizer state in host memory with
                  * the step on the host (GPU training only) */
  uint64_t seed; /* initialisation (and the model's randomness) */
  sharc_optim_t optim;
  double clip_norm;      /* clip the global gradient norm to this; 0: off */
  const char *trace_dir; /* Chrome trace JSON per rank; NULL: SHARC_TRACE */
  sharc_device_t device; /* SHARC_DEVICE_CUDA: train on the calling
                          * thread's current CUDA device (a CUDA model):
                          * slices, gradients, optimizer state, gathered
                          * parameters and activations in device memory,
                          * the optimizer step on the device; with
                          * offload, slices and optimizer state in pinned
                          * host memory and the step on the host */
} sharc_shard_config_t;

/* Fills cfg with the defaults: FULL_SHARD, f32, prefetch 2, AdamW lr 1e-3
 * betas (0.9, 0.999) eps 1e-8 weight decay 0, no clipping, seed 0. */
SHARC_API void sharc_shard_config_default(sharc_shard_config_t *cfg);

/* "full", "grad_op", "no_shard", "hybrid", "hybrid_zero2"; parse returns
 * SHARC_ERR_INVALID_ARG for any other name. */
SHARC_API const char *sharc_strategy_name(sharc_strategy_t s);
SHARC_API sharc_status_t sharc_strategy_parse(const char *name,
                                              sharc_strategy_t *s);

/* ---- the engine ------------------------------------------------------------
 */

typedef struct sharc_shard *sharc_shard_t;

/* Memory in bytes by category; the engine allocates everything the model
 * touches, so total is what it holds. The sharded state is param_slices +
 * grad_slices + optim; gathered and unsharded_grads are the transient full
 * copies of the units in use. */
typedef struct {
  size_t param_slices;    /* f32 master slices (and their 16-bit
                           * copies under mixed precision) */
  size_t grad_slices;     /* reduced gradient slices */
  size_t optim;           /* optimizer state (slices) */
  size_t gathered;        /* gathered full parameters (and their f32
                           * compute copies under mixed precision) */
  size_t unsharded_grads; /* full gradient accumulators of the units in
                           * backward, until their reduce-scatter ends */
  size_t activations;     /* stage outputs, their gradients, saved
                           * tensors, scratch */
  size_t total;
  size_t device; /* of total, the bytes in device memory (GPU training;
                  * under offload the sharded state is host memory) */
  size_t cached; /* GPU training: freed device memory the engine keeps for
                  * reuse (not in total): peak, the most during the step;
                  * now, after the step released what the step did not
                  * reuse */
} sharc_mem_bytes_t;

typedef struct {
  double loss;      /* mean loss over the global batch */
  double stat;      /* second statistic summed over the global batch */
  double grad_norm; /* global gradient norm before clipping */
  double t_step;    /* seconds, wall (host clock) */
  double t_compute; /* seconds in forward/backward/optimizer callbacks
                     * (host clock: in GPU training, the time the callbacks
                     * took to queue their work) */
  double t_comm;    /* seconds collectives ran on the communication stream */
  double t_exposed; /* seconds compute waited for communication */
  sharc_mem_bytes_t peak; /* this rank's peak in this step, by category */
  sharc_mem_bytes_t now;  /* held between steps */
  /* How t_comm and t_exposed were measured. 0: the host clock (host
   * training: stamps on the stream's thread around each collective, and
   * the caller's waits). 1: CUDA timing events (GPU training): t_comm is
   * the sum of the collectives' spans on the comm stream (an event before
   * and one after each); t_exposed the sum of the compute stream's stalls
   * on communication: at each wait of compute for a collective, the
   * collective's end minus an event recorded on compute just before the
   * wait, when positive (docs/gpu.md). A GPU step whose timing events
   * failed reports host times and 0. */
  int timing_cuda_events;
} sharc_step_stats_t;

/* Creates the engine over comm (every rank of comm calls it with the same
 * model and configuration: collective). Sets up the strategy's
 * communicators, lays out and initialises the local slices. The model
 * description must outlive the engine. */
SHARC_API sharc_status_t sharc_shard_create(sharc_comm_t comm,
                                            const sharc_model_t *model,
                                            const sharc_shard_config_t *cfg,
                                            sharc_shard_t *engine);

/* One optimizer step over nmicro micro-batches: forward and backward of
 * each (gradients accumulate locally; they are reduced once, after the
 * last), gradient clipping, then the optimizer on the local slices.
 * Collective. stats may be NULL. A step that fails on one rank leaves the
 * others waiting in a collective until SHARC_TIMEOUT or that rank's exit
 * (SHARC_ERR_PEER_LOST); after a failed step or evaluation every later
 * call on the engine returns SHARC_ERR_ABORTED: destroy it (and, usually,
 * the communicator). A bad argument (SHARC_ERR_INVALID_ARG, checked before
 * anything moves) does not count as a failure. */
SHARC_API sharc_status_t sharc_shard_step(sharc_shard_t e,
                                          const sharc_batch_t *micro,
                                          int nmicro,
                                          sharc_step_stats_t *stats);

/* Forward only (no gradients, training = 0 is the caller's choice): the
 * loss sum and statistic sum over all ranks' samples of this batch.
 * Collective. */
SHARC_API sharc_status_t sharc_shard_eval(sharc_shard_t e,
                                          const sharc_batch_t *batch,
                                          double sums[SHARC_STAGE_STATS]);

/* Sets the learning rate of later steps (schedules). */
SHARC_API sharc_status_t sharc_shard_set_lr(sharc_shard_t e, double lr);
/* Number of optimizer steps taken (restored by load). */
SHARC_API sharc_status_t sharc_shard_steps(sharc_shard_t e, uint64_t *steps);

/* Copies unit's full f32 parameters (numel elements, unpadded) into out on
 * every rank. Collective. For tests and export. */
SHARC_API sharc_status_t sharc_shard_unit_params(sharc_shard_t e, int unit,
                                                 float *out, size_t numel);
/* Elements of unit's parameters (unpadded) and of this rank's slice. */
SHARC_API sharc_status_t sharc_shard_unit_numel(sharc_shard_t e, int unit,
                                                size_t *numel, size_t *slice);

/* Elements of one parameter tensor (the product of its shape); 0 when the
 * spec is malformed (ndim out of 1..SHARC_TENSOR_MAX_DIMS, a zero
 * dimension, overflow). */
SHARC_API size_t sharc_param_numel(const sharc_param_spec_t *p);
/* The value the engine initialises element i of tensor `tensor` of unit
 * `unit` with, for `seed`: a pure function of these and the tensor's init
 * kind and scale, the same at every world size and strategy, so a
 * one-process reference starts from the engine's weights. Thread safe. */
SHARC_API float sharc_param_init_value(const sharc_param_spec_t *p,
                                       uint64_t seed, int unit, int tensor,
                                       size_t i);

/* ---- checkpoints -------------------------------------------------------- */

typedef enum {
  SHARC_CKPT_SHARDED = 0, /* each shard writes its slices (one file each) */
  SHARC_CKPT_FULL         /* whole units gathered and written by rank 0 */
} sharc_ckpt_kind_t;

/* Saves parameters, optimizer state and the step count under dir (a shared
 * directory every rank can reach) as dir/step-<N>/ and points dir/latest
 * at it. Atomic: files are written into a temporary directory, fsynced and
 * renamed, so a crash of any rank during a save leaves dir/latest naming
 * the previous complete checkpoint. Keeps the previous checkpoint and
 * removes older ones. Collective; blocking. */
SHARC_API sharc_status_t sharc_shard_save(sharc_shard_t e, const char *dir,
                                          sharc_ckpt_kind_t kind);

/* Loads a checkpoint of either kind saved at any world size or strategy
 * (re-slicing from its metadata): dir is a save directory (its latest is
 * followed) or one step-<N> directory. The model's units and shapes must
 * match; files are verified against their checksums. Optimizer state of
 * another optimizer is skipped with a note (parameters only). The learning
 * rate stays this engine's. Collective; blocking. */
SHARC_API sharc_status_t sharc_shard_load(sharc_shard_t e, const char *dir);

/* Frees the engine and its communicators (not comm). */
SHARC_API sharc_status_t sharc_shard_destroy(sharc_shard_t e);

/* The message of the engine's last error. */
SHARC_API const char *sharc_shard_last_error(sharc_shard_t e);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_SHARD_H */

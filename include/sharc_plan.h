/*
 * sharc_plan.h - the planner behind sharc-plan: predicts, before a cluster
 * is rented, what one optimizer step of the FSDP engine (sharc_shard.h)
 * costs per rank: memory by the engine's own categories, bytes per link
 * class, the time of each collective, compute, the step with the engine's
 * overlap, and a ranked list of the configurations that fit.
 *
 * Pure logic: no I/O, no communicator, no threads. Every prediction is
 * closed-form per unit and per collective, never per rank, so a 70B model
 * on 100,000 GPUs costs what the same model on 8 GPUs costs. The memory
 * numbers come from replaying the engine's own allocation sequence
 * (shard/step.c) with the engine's own layout code (shard/layout.c), so
 * the sharded state equals what sharc_shard_step reports by construction.
 * Collective times come from sharc's cost model (comm/algo/cost.c), the one
 * the runtime picks algorithms with. docs/plan.md gives the formulas. The
 * links and compute rates can be fitted to sharc-bench and sharc-train
 * measurements (the calibration section below).
 *
 * Valid C99, includable from C++. All functions are thread safe on
 * distinct arguments.
 */
#ifndef SHARC_PLAN_H
#define SHARC_PLAN_H

#include "sharc_shard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- inputs --------------------------------------------------------------
 */

/* A model to plan: the engine's model description (units, stages and the
 * byte callbacks out_bytes, saved_bytes, scratch_bytes; forward and
 * backward are never called) and what a stage computes. */
typedef struct {
  const sharc_model_t *model;
  /* Floating-point operations of stage's forward for n samples; backward
   * is counted as twice its forward. NULL: 2 flops per parameter of the
   * stage's unit per sample (a dense layer). */
  double (*stage_flops)(void *ctx, int stage, int n);
  void *ctx;
  const char *label;        /* "gpt:L=80,C=8192,..." for tables */
  double tokens_per_sample; /* tokens/s = samples/s * this (1: images) */
} sharc_plan_model_t;

/* The cluster: nodes x gpus_per_node ranks, ranks of a node contiguous.
 * Bandwidths are per GPU and per direction; latencies per message. */
typedef struct {
  int nodes, gpus_per_node;
  double intra_lat_us, intra_gbs; /* within a node (NVLink), GB/s = 1e9 B/s */
  double inter_lat_us, inter_gbs; /* between nodes, one NIC per GPU */
  double gpu_mem_gib;             /* memory per GPU, GiB (2^30 bytes) */
  double tflops;  /* sustained FLOP/s per GPU, 1e12 (not the peak) */
  double hbm_gbs; /* memory bandwidth per GPU, GB/s (optimizer step) */
} sharc_plan_cluster_t;

/* Fills c with the documented default node (docs/plan.md): an H100 SXM
 * node of 8 GPUs on NDR InfiniBand, one node. */
SHARC_API void sharc_plan_cluster_default(sharc_plan_cluster_t *c);

/* One step's batch: global samples, split into micro micro-batches, each
 * split over the data-parallel ranks as sharc-train does (rank 0, which
 * gets the most, is the one predicted). */
typedef struct {
  int global_batch;
  int micro;
} sharc_plan_batch_t;

/* ---- one prediction ------------------------------------------------------
 */

/* The three collectives of a step. */
typedef enum {
  SHARC_PLAN_ALL_GATHER = 0,
  SHARC_PLAN_REDUCE_SCATTER,
  SHARC_PLAN_ALL_REDUCE, /* hybrid and no_shard: across replicas */
  SHARC_PLAN_NCOLL
} sharc_plan_coll_t;

typedef struct {
  int calls;         /* per step */
  double seconds;    /* per step, all calls */
  double largest_us; /* the call on the largest unit */
  const char *algo;  /* the algorithm sharc picks for that call */
  int ranks, nodes;  /* the communicator it runs on */
} sharc_plan_coll_stats_t;

typedef struct {
  sharc_shard_config_t cfg; /* strategy, shard_group (resolved), dtype,
                             * prefetch (resolved), checkpointing,
                             * offload, optimizer kind */
  int world, shards, replicas;
  int micro_n; /* samples of rank 0's largest micro-batch */
  /* Memory of rank 0 at its peak in the step, by the engine's categories
   * (the snapshot sharc_step_stats_t.peak reports); device: what the GPU
   * holds (offload moves the sharded state to the host). */
  sharc_mem_bytes_t mem;
  size_t params; /* model parameters (elements, unpadded) */
  int fits;      /* mem.device <= the GPU's memory */
  /* Bytes rank 0 sends per step, by link class. */
  double bytes_intra, bytes_inter;
  sharc_plan_coll_stats_t coll[SHARC_PLAN_NCOLL];
  /* Seconds per step: compute (forward, backward, recomputation and the
   * optimizer), communication (all collectives, serial on the engine's
   * one comm stream), exposed (compute waiting for communication) and the
   * step (compute + exposed). */
  double t_compute, t_comm, t_exposed, t_step;
  double t_optim;                /* the optimizer's part of t_compute */
  double t_unit_fwd, t_unit_bwd; /* the largest unit's, one micro-batch */
  double samples_per_s, tokens_per_s;
} sharc_plan_result_t;

/* Predicts one step of model on cluster with batch under cfg (strategy,
 * shard_group: 0 = one group per node, prefetch: 0 = the engine's 2,
 * param_dtype, checkpoint_activations, offload, optim.kind). Returns
 * SHARC_OK, or SHARC_ERR_INVALID_ARG with a message in err (errlen bytes)
 * for input the engine would refuse (a shard group that does not divide
 * the world, fewer samples than data-parallel ranks, ...). */
SHARC_API sharc_status_t sharc_plan_predict(const sharc_plan_model_t *model,
                                            const sharc_plan_cluster_t *cl,
                                            const sharc_plan_batch_t *batch,
                                            const sharc_shard_config_t *cfg,
                                            sharc_plan_result_t *out, char *err,
                                            size_t errlen);

/* ---- the search ----------------------------------------------------------
 */

/* Which configurations to try: every combination of the listed values. */
typedef struct {
  int nstrategies;
  sharc_strategy_t strategies[SHARC_STRATEGY_COUNT];
  int ngroups; /* hybrid shard-group sizes; 0 entries: the powers of two
                * from 2 to the world that divide it, and the node */
  int groups[32];
  int nprefetch; /* 0 entries: {2} */
  int prefetch[8];
  int ndtypes; /* 0 entries: {bf16} */
  sharc_dtype_t dtypes[3];
  int nckpt; /* 0 entries: {0, 1} */
  int ckpt[2];
  int noffload; /* 0 entries: {0} */
  int offload[2];
  sharc_optim_kind_t optim; /* AdamW by default (0 is SGD: set it) */
} sharc_plan_space_t;

/* Fills s with every strategy, the default groups, prefetch {2}, bf16,
 * checkpointing off and on, no offload, AdamW. */
SHARC_API void sharc_plan_space_default(sharc_plan_space_t *s);

/* Predicts every configuration of space and ranks them: those that fit
 * first, by step time (ties: less memory), then those that do not fit, by
 * memory. *out (free with free()) gets *n results; configurations the
 * engine would refuse are skipped. Returns SHARC_ERR_INVALID_ARG with a
 * message when the inputs are bad or no configuration is valid. */
SHARC_API sharc_status_t sharc_plan_search(const sharc_plan_model_t *model,
                                           const sharc_plan_cluster_t *cl,
                                           const sharc_plan_batch_t *batch,
                                           const sharc_plan_space_t *space,
                                           sharc_plan_result_t **out, int *n,
                                           char *err, size_t errlen);

/* ---- calibration ---------------------------------------------------------
 *
 * Fits the cluster's link and compute numbers to measurements taken on
 * the user's machines, by inverting the same models the predictions use
 * (docs/plan.md, "Calibration"). Pure logic: the callers read the files
 * and pass their text.
 */

/* One measured collective (a sharc-bench -J row). */
typedef struct {
  sharc_plan_coll_t coll;
  int ranks, nodes; /* the communicator: ranks over nodes hosts, equal
                     * shares, ranks of a host contiguous */
  size_t bytes;     /* per-rank block (all-gather, reduce-scatter) or the
                     * vector (all-reduce), as sharc's calls count them */
  double seconds;   /* measured time of one call */
  /* Set by sharc_plan_fit_link for the samples of the class it fits: */
  const char *algo; /* the algorithm the runtime picked (see below) */
  double predicted; /* seconds, with the fitted link */
} sharc_plan_sample_t;

/* The cost-model parameters the runtime chose its algorithms with while
 * the samples were measured: SHARC_ALPHA_US, SHARC_BETA_GBS,
 * SHARC_NET_ALPHA_US, SHARC_NET_BETA_GBS (its defaults are 4 us, 5 GB/s,
 * 20 us, 1 GB/s). The fit charges each sample the formula of the
 * algorithm that actually ran, which these decide, not the true links. */
typedef struct {
  double alpha_us, beta_gbs, net_alpha_us, net_beta_gbs;
} sharc_plan_runtime_t;

/* Fills rt with the runtime's defaults (comm/core/core.h). */
SHARC_API void sharc_plan_runtime_default(sharc_plan_runtime_t *rt);

typedef struct {
  double lat_us;   /* fitted latency per message */
  double gbs;      /* fitted bandwidth, GB/s: per rank within a node; per
                    * rank's NIC between nodes (the planner's units, so a
                    * cluster shaped like the one measured predicts it) */
  int used;        /* samples fitted */
  int lat_clamped; /* the free fit gave a latency < 0: refitted at 0 */
  double rms_rel, max_rel; /* residuals (predicted - measured) / measured */
} sharc_plan_fit_t;

/* Fits one link class by weighted least squares on relative error:
 * inter = 0 fits the intra-node link (lat, gbs) to the samples with
 * nodes == 1; inter = 1 fits the inter-node link to the samples with
 * nodes > 1, holding cl's intra link fixed. For each sample the model is
 * the cost of the algorithm rt makes the runtime pick, which is linear in
 * the latency and in 1/bandwidth: t = a * lat + b / gbs (+ the fixed
 * class's part), so the fit is a 2x2 normal-equation solve, minimizing
 * sum(((t_pred - t) / t)^2) so small and large sizes count alike. Samples
 * of the class get algo and predicted. Returns SHARC_ERR_INVALID_ARG with
 * a message when fewer than two distinct sizes, or a bandwidth <= 0, come
 * out. Samples of zero bytes or seconds <= 0 are skipped. */
SHARC_API sharc_status_t sharc_plan_fit_link(sharc_plan_sample_t *s, int n,
                                             int inter,
                                             const sharc_plan_cluster_t *cl,
                                             const sharc_plan_runtime_t *rt,
                                             sharc_plan_fit_t *out, char *err,
                                             size_t errlen);

/* Sets algo and predicted of every sample from cl's links (no fitting):
 * how a calibration predicts another measurement. Returns the rms of the
 * relative errors in *rms_rel (NULL: not wanted). */
SHARC_API void sharc_plan_predict_samples(sharc_plan_sample_t *s, int n,
                                          const sharc_plan_cluster_t *cl,
                                          const sharc_plan_runtime_t *rt,
                                          double *rms_rel);

/* Reads the text of a sharc-bench -J file (len bytes, need not end in
 * '\0'): its all_gather, reduce_scatter and all_reduce rows of backend
 * sharc with a size > 0 and no wrong values, out-of-place median time.
 * *out (free with free()) gets *n samples; *nodes the file's hosts.
 * Returns SHARC_ERR_INVALID_ARG with a message (naming what is missing)
 * for text that is not such a file or holds no usable row. */
SHARC_API sharc_status_t sharc_plan_bench_parse(const char *text, size_t len,
                                                sharc_plan_sample_t **out,
                                                int *n, char *err,
                                                size_t errlen);

/* What a sharc-train --log file says of its steps: the medians over the
 * steps after the first (the first pays for first touches). */
typedef struct {
  int steps;                 /* step records read */
  int ranks;                 /* world size */
  sharc_strategy_t strategy; /* as logged */
  int global_batch;          /* samples per step (from the logged rate) */
  int is_gpt;                /* the rate was tokens/s */
  double t_step, t_compute, t_comm, t_exposed; /* seconds, medians */
} sharc_plan_train_log_t;

/* Reads the text of a sharc-train --log file (JSON lines). tokens_per_sample
 * converts a GPT log's tokens/s into samples (its sequence length; ignored
 * for samples/s). Returns SHARC_ERR_INVALID_ARG with a message when no
 * line is a step record. */
SHARC_API sharc_status_t sharc_plan_train_parse(const char *text, size_t len,
                                                double tokens_per_sample,
                                                sharc_plan_train_log_t *out,
                                                char *err, size_t errlen);

/* Fits the compute rates to a training log of model under cfg on cl (its
 * world must be the log's ranks; batch the log's): tflops so that the
 * predicted forward, backward and recomputation equal the measured
 * t_compute (the engine's time inside the model's callbacks), and hbm_gbs
 * so that the optimizer's predicted time equals the rest of the measured
 * step (t_step - t_compute - t_exposed: the optimizer, and every engine
 * overhead the model does not name, charged to the optimizer's memory
 * rate). Both come from the prediction being linear in 1/tflops and
 * 1/hbm_gbs. Returns SHARC_ERR_INVALID_ARG with a message when the log and
 * the configuration disagree or a rate would be <= 0. */
SHARC_API sharc_status_t sharc_plan_fit_compute(
    const sharc_plan_model_t *model, const sharc_plan_cluster_t *cl,
    const sharc_plan_batch_t *batch, const sharc_shard_config_t *cfg,
    const sharc_plan_train_log_t *log, double *tflops, double *hbm_gbs,
    char *err, size_t errlen);

/* ---- built-in models -----------------------------------------------------
 */

typedef struct sharc_plan_builtin sharc_plan_builtin_t;

/* A built-in model by spec: "cnn" (models/cnn.h), "gpt:tiny",
 * "gpt:small", "gpt:gpt2" (sharc-train's GPT presets, byte vocabulary as
 * sharc-train trains them), "gpt:gpt2-124m" (GPT-2's vocabulary 50257),
 * "gpt:7b", "gpt:13b", "gpt:70b" (Llama-like shapes with sharc's GPT
 * block: docs/plan.md) or "gpt:L,C,H,V,T" (layers, channels, heads,
 * vocabulary, sequence). seq > 0 overrides a GPT's sequence length.
 * Returns 0 with *out, or -1 with a message in err. */
SHARC_API int sharc_plan_builtin_create(const char *spec, int seq,
                                        sharc_plan_builtin_t **out, char *err,
                                        size_t errlen);
SHARC_API const sharc_plan_model_t *
sharc_plan_builtin_model(const sharc_plan_builtin_t *b);
SHARC_API void sharc_plan_builtin_destroy(sharc_plan_builtin_t *b);

/* ---- a model from a unit list --------------------------------------------
 *
 * A model described by its units, one line each (docs/plan.md, "A unit
 * list"; sharc-plan --model units:FILE):
 *
 *   NAME PARAMS FLOPS SAVED [OUT [SCRATCH [SCRATCH_FIXED]]]
 *
 * whitespace separated, '#' to the end of a line a comment: the unit's
 * parameter count (elements), its forward FLOPs per sample, the bytes per
 * sample its forward saves for backward, and optionally the bytes per
 * sample of its output (default 0: SAVED then stands for all the stage
 * keeps), of its scratch during a call, and a fixed scratch per call.
 * Each line is one stage, run in file order; PARAMS "=NAME" makes the line
 * another stage of the unit NAME declared on an earlier line (tied
 * weights: a GPT's output head on its embedding). "@tokens T" sets the
 * tokens per sample (tokens/s; default 1). The last stage's OUT is
 * ignored (the engine's loss statistics take its place).
 */

typedef struct sharc_plan_units sharc_plan_units_t;

/* Parses the text of a unit list (len bytes, need not end in '\0') into a
 * model labelled "units:LABEL" (label NULL: "units:list"; quotes,
 * backslashes and control characters become '_'): one unit per
 * declaring line, holding one flat tensor of PARAMS elements, one stage per
 * line; the byte callbacks return the per-sample numbers times the
 * micro-batch (plus SCRATCH_FIXED), saturating at 16 TiB; stage_flops is
 * FLOPS times the micro-batch. Strict: returns SHARC_ERR_INVALID_ARG with
 * "line N: ..." in err for a malformed line (fields missing or extra, a
 * number out of range, a repeated name, =NAME of no earlier unit) and a
 * message for text with no unit. *out is the caller's
 * (sharc_plan_units_destroy); the model stays valid until then. */
SHARC_API sharc_status_t sharc_plan_units_parse(const char *text, size_t len,
                                                const char *label,
                                                sharc_plan_units_t **out,
                                                char *err, size_t errlen);
SHARC_API const sharc_plan_model_t *
sharc_plan_units_model(const sharc_plan_units_t *u);
SHARC_API void sharc_plan_units_destroy(sharc_plan_units_t *u);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_PLAN_H */

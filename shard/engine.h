/*
 * engine.h - the FSDP engine's state, shared by its files: engine.c
 * (creation, memory, gather and reduce), step.c (the per-step schedule),
 * optim.c (optimizers on the local slices), ckpt.c (checkpoints) and
 * trace.c (collective spans and the Chrome trace).
 */
#ifndef SHARC_SHARD_ENGINE_H
#define SHARC_SHARD_ENGINE_H

#include <stdio.h>

#include "device.h"
#include "layout.h"
#include "sharc_shard.h"
#include "trace.h"

enum {
  MEM_PSLICE,
  MEM_GSLICE,
  MEM_OPTIM,
  MEM_GATHERED,
  MEM_UGRAD,
  MEM_ACT,
  MEM_NCAT
};

enum { G_NONE, G_ISSUED, G_READY }; /* a unit's gathered parameters */

/* Where a memory category lives (eng_at): GPU training keeps everything on
 * the device except, under offload, the sharded state (pinned host). */
enum { AT_HOST, AT_PINNED, AT_DEV };

typedef struct {
  layout_t lay;
  float *master;     /* f32 slice: lay.slice elements */
  void *send_lp;     /* the slice in param_dtype, mixed precision only */
  float *grad_slice; /* reduced gradient slice */
  float *opt_a;      /* SGD momentum / AdamW first moment */
  float *opt_b;      /* AdamW second moment */
  void *gathered;    /* lay.padded elements of param_dtype, or NULL */
  float *compute;    /* f32 full parameters the callbacks read */
  int state;         /* G_* */
  sharc_event_t gather_ev;
  float *ugrad; /* lay.padded f32 gradient accumulator (backward) */
  sharc_event_t reduce_ev;
  int reducing; /* ugrad is being reduced; free when reduce_ev ends */
  void *gather_cev, *reduce_cev; /* GPU training: cudaEvent_t behind the
                                  * all-gather and the reduction */
  int gather_mark; /* GPU training: the timing mark beside gather_cev
                    * (dev_time_mark), -1 when none */
  int first_stage, last_stage; /* the stages that use it */
  const float *pptr[SHARC_UNIT_MAX_PARAMS];
  float *gptr[SHARC_UNIT_MAX_PARAMS];
} eunit_t;

typedef struct { /* one stage's activations within a micro-batch */
  void *out;
  size_t out_b;
  void *saved;
  size_t saved_b;
} estage_t;

struct sharc_shard {
  const sharc_model_t *model;
  sharc_shard_config_t cfg;
  sharc_comm_t shard_comm, rep_comm; /* rep_comm has size 1 unless hybrid */
  int shard_rank, shards, rep_size, world_rank, world;
  int keep;     /* SHARD_GRAD_OP, hybrid ZeRO-2, NO_SHARD: gathered f->b */
  size_t psize; /* bytes of one gathered parameter element */
  sharc_stream_t stream;
  int dev;     /* cfg.device == SHARC_DEVICE_CUDA */
  devctx_t dv; /* GPU training: streams, events (device.h) */
  eunit_t *units;
  estage_t *outs;
  uint64_t steps;
  int failed; /* a step or evaluation failed: ranks may be out of step */
  uint64_t opt_steps; /* steps the optimizer state has seen (AdamW bias
                       * correction; 0 after a parameters-only load) */
  double lr;
  /* memory by category: now, and the categories when the total peaked */
  size_t mem_now[MEM_NCAT], mem_at_peak[MEM_NCAT], total_now, total_peak;
  /* step timing (host clock; GPU training times comm and exposed with
   * events on its streams instead: dv.tm) */
  double t_compute, t_exposed;
  trace_t tr;      /* spans of this step and the Chrome trace (trace.h) */
  double t_origin; /* monotonic seconds at creation */
  char err[512];
};

/* engine.c */
sharc_status_t eng_fail(struct sharc_shard *e, sharc_status_t st,
                        const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
sharc_status_t eng_coll_fail(struct sharc_shard *e, sharc_status_t st,
                             const char *what, int u);
/* 64-byte aligned memory counted in category cat; free with the same
 * size. */
void *eng_alloc(struct sharc_shard *e, int cat, size_t bytes);
void *eng_calloc(struct sharc_shard *e, int cat, size_t bytes);
void eng_free(struct sharc_shard *e, int cat, void *p, size_t bytes);
void eng_mem_report(const struct sharc_shard *e, const size_t *cats,
                    size_t total, size_t cached, sharc_mem_bytes_t *out);
double eng_now(void);
/* SHARC_FAULT's engine points (tests only; comm/fault validates the spec
 * when the first communicator is created): 1 once per process when an
 * entry kill:R:<point>[:N] (or save_kill:R for "save") names this rank and,
 * with N, at == N; it prints when and where (where) and the caller raises
 * SIGKILL. Points: "save" (half-way through a checkpoint file), "step"
 * (at N = the optimizer step, 1-based: in its backward, with collectives
 * queued). */
int eng_fault_kill(const char *point, int rank, uint64_t at, const char *where);
/* The refusal of every call after a failed step or evaluation. */
sharc_status_t eng_failed_before(struct sharc_shard *e);
/* Enqueues the all-gather of unit u (no-op when gathered or in flight). */
sharc_status_t eng_gather(struct sharc_shard *e, int u);
/* Waits for unit u's gather (issuing it if needed); pptr then valid. */
sharc_status_t eng_ready(struct sharc_shard *e, int u);
void eng_discard(struct sharc_shard *e, int u);
int eng_gathered_count(const struct sharc_shard *e);
/* Allocates unit u's zeroed gradient accumulator if it has none. */
sharc_status_t eng_ugrad(struct sharc_shard *e, int u);
/* Enqueues the reduction of unit u's accumulator into its grad slice. */
sharc_status_t eng_reduce(struct sharc_shard *e, int u);
/* Frees the accumulators whose reduction ended (all, waiting, if wait). */
sharc_status_t eng_reap(struct sharc_shard *e, int wait);
sharc_status_t eng_sync(struct sharc_shard *e);
sharc_status_t eng_gather_f32(struct sharc_shard *e, int u, const float *slice,
                              float *full);

/* Where memory of category cat lives (AT_*). */
int eng_at(const struct sharc_shard *e, int cat);
/* Copies bytes between host and the engine's memory of any kind (blocking:
 * the compute stream's earlier work is done first). */
sharc_status_t eng_copy(struct sharc_shard *e, void *dst, const void *src,
                        size_t bytes);

/* The gradient norm's partial sums in GPU training (OPTIM_DEV_PARTS). */
#define OPTIM_PARTS 4096
#define OPTIM_PARTS_BYTES (OPTIM_PARTS * sizeof(double))

/* optim.c: clip and step on the local slices; *norm = global norm. */
sharc_status_t optim_step(struct sharc_shard *e, double *norm);

/* trace_coll_begin on the engine's trace; out of memory fails the engine. */
sharc_status_t eng_coll_begin(struct sharc_shard *e, const char *name, int u);

#endif /* SHARC_SHARD_ENGINE_H */

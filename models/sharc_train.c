/*
 * sharc_train.c - sharc-train: trains a reference model with the FSDP
 * engine across the ranks of a job (sharcrun, srun, mpirun, torchrun env).
 *
 *   sharcrun -n 4 sharc-train --model cnn --strategy full --epochs 1
 *
 * Data: the CNN and the MLP read Fashion-MNIST (dataset-fashion-mnist);
 * the GPT reads byte tokens of any text file. Each step's global batch is
 * drawn by index from a per-epoch permutation that every rank computes
 * alike, split into micro-batches, each split into contiguous rank parts,
 * so the samples of a step (and the dropout masks, keyed by sample index)
 * do not depend on the world size: 1 and N ranks see the same losses.
 * Rank 0 prints a line per logging step and appends the same as JSON lines
 * to --log.
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef SHARC_MODELS_CUDA
#include <cuda_runtime_api.h>
#endif

#include "cnn.h"
#include "gpt.h"
#include "mlp.h"
#include "mnist.h"
#include "sharc_shard.h"
#include "text.h"

typedef struct {
  const char *model, *gpt_size, *data, *save, *load, *trace, *log, *dump;
  sharc_shard_config_t cfg;
  long steps;
  int epochs, batch, micro, log_every, save_every, save_full, dropout;
  int eval, synthetic, eval_batch;
  double holdout;    /* gpt: the held-out fraction of the text */
  long eval_windows; /* gpt: held-out windows evaluated (0: all) */
} opts_t;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: sharc-train [options]   (one process per rank: sharcrun -n N "
      "...)\n"
      "  --model cnn|gpt|mlp     model (default cnn: the two-convolution "
      "network)\n"
      "  --gpt-size tiny|small|gpt2  GPT shapes (default tiny; gpt2 is "
      "GPT-2 124M's\n"
      "                          shapes on byte tokens: 256 of its 50257 "
      "vocabulary\n"
      "                          rows are ever used)\n"
      "  --data PATH             Fashion-MNIST directory (default\n"
      "                          " MNIST_DEFAULT_DIR
      ") or, for gpt, a text file\n"
      "  --synthetic             cnn/mlp: generated images instead of the data "
      "set\n"
      "  --strategy S            full|grad_op|no_shard|hybrid|hybrid_zero2 "
      "(full)\n"
      "  --shard-group K         hybrid: ranks per shard group (0: one per "
      "host)\n"
      "  --steps N | --epochs E  length of training (default 100 steps)\n"
      "  --batch B               global batch, samples (default 64)\n"
      "  --micro M               micro-batches per step (gradient "
      "accumulation)\n"
      "  --lr X --optim adamw|sgd --momentum X --wd X --clip X\n"
      "  --mp bf16|f16|off       parameters gathered and computed in low "
      "precision\n"
      "  --prefetch P            gathered units alive at once (default 2)\n"
      "  --device host|cuda      where to train (default host); cuda: local "
      "rank r on\n"
      "                          GPU r mod (GPUs of the host), cnn and gpt\n"
      "  --offload               cuda: slices and optimizer state in pinned "
      "host\n"
      "                          memory, the optimizer step on the host\n"
      "  --checkpoint-activations  recompute each stage's saved tensors in "
      "backward\n"
      "  --dropout 0|1           cnn dropout (default 1)\n"
      "  --save DIR [--save-every N] [--save-full]   checkpoints (atomic)\n"
      "  --load DIR              resume from a checkpoint (any world "
      "size/strategy)\n"
      "  --trace DIR             Chrome trace per rank (as SHARC_TRACE)\n"
      "  --seed S                initialisation, data order, dropout (default "
      "0)\n"
      "  --log FILE.jsonl        one JSON line per logging step (rank 0)\n"
      "  --log-every K           print every K steps (default 10)\n"
      "  --eval 0|1              at the end: cnn/mlp test-set loss and "
      "accuracy;\n"
      "                          gpt loss, perplexity and token accuracy on "
      "the\n"
      "                          held-out text\n"
      "  --holdout F             gpt: the text's last fraction F is held out "
      "of\n"
      "                          training, for --eval (default 0.1; 0: "
      "none)\n"
      "  --eval-windows N        gpt: evaluate at most N held-out windows "
      "(default\n"
      "                          all)\n"
      "  --dump-params FILE      rank 0 writes every unit's f32 parameters\n");
}

static int die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "sharc-train: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return 2;
}

static int num(const char *flag, const char *v, double lo, double hi,
               double *out) {
  char *e;
  errno = 0;
  double x = v ? strtod(v, &e) : 0;
  if (!v || e == v || *e || errno || !(x >= lo && x <= hi)) {
    die("%s '%s': expected a number in [%g, %g]", flag, v ? v : "", lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

static int parse(int argc, char **argv, opts_t *o) {
  memset(o, 0, sizeof *o);
  sharc_shard_config_default(&o->cfg);
  o->model = "cnn";
  o->gpt_size = "tiny";
  o->steps = -1;
  o->batch = 64;
  o->micro = 1;
  o->log_every = 10;
  o->dropout = 1;
  o->eval = -1;
  o->eval_batch = 1000;
  o->holdout = 0.1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    double x;
#define NUM(flag, lo, hi, dst)                                                 \
  if (strcmp(a, flag) == 0) {                                                  \
    if (num(flag, v, lo, hi, &x) != 0)                                         \
      return -1;                                                               \
    dst = x;                                                                   \
    i++;                                                                       \
    continue;                                                                  \
  }
#define STR(flag, dst)                                                         \
  if (strcmp(a, flag) == 0) {                                                  \
    if (!v)                                                                    \
      return die("%s needs a value", flag), -1;                                \
    dst = v;                                                                   \
    i++;                                                                       \
    continue;                                                                  \
  }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    }
    STR("--model", o->model);
    STR("--gpt-size", o->gpt_size);
    STR("--data", o->data);
    STR("--save", o->save);
    STR("--load", o->load);
    STR("--trace", o->trace);
    STR("--log", o->log);
    STR("--dump-params", o->dump);
    NUM("--steps", 0, 1e12, o->steps);
    NUM("--epochs", 1, 1e6, o->epochs);
    NUM("--batch", 1, 1 << 24, o->batch);
    NUM("--micro", 1, 1 << 16, o->micro);
    NUM("--lr", 0, 1e3, o->cfg.optim.lr);
    NUM("--momentum", 0, 0.999999, o->cfg.optim.momentum);
    NUM("--wd", 0, 1e3, o->cfg.optim.weight_decay);
    NUM("--clip", 0, 1e12, o->cfg.clip_norm);
    NUM("--prefetch", 1, 1 << 16, o->cfg.prefetch);
    NUM("--shard-group", 0, 1 << 20, o->cfg.shard_group);
    NUM("--seed", 0, 1.8e19, o->cfg.seed);
    NUM("--log-every", 1, 1e9, o->log_every);
    NUM("--save-every", 0, 1e12, o->save_every);
    NUM("--dropout", 0, 1, o->dropout);
    NUM("--eval", 0, 1, o->eval);
    NUM("--holdout", 0, 0.9, o->holdout);
    NUM("--eval-windows", 0, 1e12, o->eval_windows);
    if (strcmp(a, "--strategy") == 0) {
      if (!v || sharc_strategy_parse(v, &o->cfg.strategy) != SHARC_OK)
        return die("--strategy '%s': use full, grad_op, no_shard, hybrid or "
                   "hybrid_zero2",
                   v ? v : ""),
               -1;
      i++;
      continue;
    }
    if (strcmp(a, "--optim") == 0) {
      if (v && strcmp(v, "adamw") == 0)
        o->cfg.optim.kind = SHARC_OPTIM_ADAMW;
      else if (v && strcmp(v, "sgd") == 0)
        o->cfg.optim.kind = SHARC_OPTIM_SGD;
      else
        return die("--optim '%s': use adamw or sgd", v ? v : ""), -1;
      i++;
      continue;
    }
    if (strcmp(a, "--mp") == 0) {
      if (v && strcmp(v, "bf16") == 0)
        o->cfg.param_dtype = SHARC_BF16;
      else if (v && strcmp(v, "f16") == 0)
        o->cfg.param_dtype = SHARC_F16;
      else if (v && strcmp(v, "off") == 0)
        o->cfg.param_dtype = SHARC_F32;
      else
        return die("--mp '%s': use bf16, f16 or off", v ? v : ""), -1;
      i++;
      continue;
    }
    if (strcmp(a, "--device") == 0) {
      if (v && strcmp(v, "host") == 0)
        o->cfg.device = SHARC_DEVICE_HOST;
      else if (v && strcmp(v, "cuda") == 0)
        o->cfg.device = SHARC_DEVICE_CUDA;
      else
        return die("--device '%s': use host or cuda", v ? v : ""), -1;
      i++;
      continue;
    }
    if (strcmp(a, "--offload") == 0) {
      o->cfg.offload = 1;
      continue;
    }
    if (strcmp(a, "--checkpoint-activations") == 0) {
      o->cfg.checkpoint_activations = 1;
      continue;
    }
    if (strcmp(a, "--save-full") == 0) {
      o->save_full = 1;
      continue;
    }
    if (strcmp(a, "--synthetic") == 0) {
      o->synthetic = 1;
      continue;
    }
    die("unknown option '%s' (see --help)", a);
    return -1;
#undef NUM
#undef STR
  }
  if (strcmp(o->model, "cnn") && strcmp(o->model, "gpt") &&
      strcmp(o->model, "mlp"))
    return die("--model '%s': use cnn, gpt or mlp", o->model), -1;
  if (o->steps >= 0 && o->epochs)
    return die("give --steps or --epochs, not both"), -1;
  if (o->steps < 0 && !o->epochs)
    o->steps = 100;
  if (o->micro > o->batch)
    return die("--micro %d exceeds --batch %d: each micro-batch needs a "
               "sample",
               o->micro, o->batch),
           -1;
  if (!strcmp(o->model, "gpt") && !o->data)
    return die("--model gpt needs --data FILE (any text file; its bytes are "
               "the tokens)"),
           -1;
  if (!strcmp(o->model, "gpt") && o->epochs)
    return die("--epochs is for the image models; give --steps for gpt"), -1;
  if (!strcmp(o->model, "gpt") && o->eval == 1 && o->holdout <= 0)
    return die("--eval for gpt reads the held-out text: give --holdout F > 0 "
               "(the default is 0.1)"),
           -1;
  o->cfg.trace_dir = o->trace;
  return 0;
}

/* ---- data ------------------------------------------------------------------
 */

typedef struct {
  int is_gpt, T, in_elems; /* per-sample input elements (images) */
  mnist_set_t train, test;
  text_t text;
  int32_t *perm; /* this epoch's order (image models) */
  long perm_epoch;
} data_t;

/* Deterministic images whose class is the brightest of 10 bands, so the
 * models can learn them (for tests and machines without the data set). */
static int synth(mnist_set_t *s, int n, uint64_t seed) {
  s->n = n;
  s->rows = s->cols = 28;
  s->images = malloc((size_t)n * 784 * sizeof(float));
  s->labels = malloc((size_t)n * sizeof(int32_t));
  if (!s->images || !s->labels)
    return -1;
  uint64_t h = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < n; i++) {
    int c = (int)((uint64_t)i * 2654435761u % 10);
    s->labels[i] = c;
    for (int p = 0; p < 784; p++) {
      h ^= h << 13, h ^= h >> 7, h ^= h << 17;
      float v = (float)(h >> 40) / (float)(1 << 24) - 0.5f;
      s->images[(size_t)i * 784 + p] = v + ((p / 28) * 10 / 28 == c ? 1.f : 0);
    }
  }
  return 0;
}

static int data_open(const opts_t *o, data_t *d, int rank) {
  char err[512];
  memset(d, 0, sizeof *d);
  d->perm_epoch = -1;
  if (!strcmp(o->model, "gpt")) {
    d->is_gpt = 1;
    if (text_load(o->data, &d->text, err, sizeof err) != 0)
      return die("%s", err);
    return 0;
  }
  d->in_elems = 784;
  if (o->synthetic) {
    if (synth(&d->train, 8192, o->cfg.seed) || synth(&d->test, 1024, 99))
      return die("out of memory");
  } else {
    const char *dir = o->data ? o->data : MNIST_DEFAULT_DIR;
    if (mnist_load(dir, 1, &d->train, err, sizeof err) != 0 ||
        mnist_load(dir, 0, &d->test, err, sizeof err) != 0)
      return die("rank %d: %s", rank, err);
  }
  if (o->batch > d->train.n)
    return die("--batch %d is larger than the training set (%d samples)",
               o->batch, d->train.n);
  d->perm = malloc((size_t)d->train.n * sizeof(int32_t));
  return d->perm ? 0 : die("out of memory");
}

static void data_close(data_t *d) {
  mnist_free(&d->train);
  mnist_free(&d->test);
  text_free(&d->text);
  free(d->perm);
}

/* Fills b with this rank's part of micro-batch m of global step t. */
static void make_batch(const opts_t *o, data_t *d, long t, int m, int world,
                       int rank, sharc_batch_t *b, void *x, int32_t *y) {
  int B = o->batch, M = o->micro;
  int m0 = (int)((long)B * m / M), m1 = (int)((long)B * (m + 1) / M);
  int first, count;
  mnist_rank_part(m1 - m0, world, rank, &first, &count);
  int j0 = m0 + first; /* position within the step's global batch */
  b->n = count;
  b->global_n = B;
  b->first = (uint64_t)t * (uint64_t)B + (uint64_t)j0;
  b->step = (uint64_t)t;
  b->training = 1;
  b->x = x;
  b->y = y;
  if (d->is_gpt) {
    text_batch(&d->text, d->T, o->cfg.seed, b->first, count, x, y);
    return;
  }
  long spe = d->train.n / B; /* steps per epoch */
  long epoch = t / spe, within = t % spe;
  if (epoch != d->perm_epoch) {
    mnist_epoch_order(o->cfg.seed, (uint64_t)epoch, d->train.n, d->perm);
    d->perm_epoch = epoch;
  }
  float *xf = x;
  for (int i = 0; i < count; i++) {
    int idx = d->perm[within * B + j0 + i];
    memcpy(xf + (size_t)i * 784, d->train.images + (size_t)idx * 784,
           784 * sizeof(float));
    y[i] = d->train.labels[idx];
  }
}

/* ---- output
 * -------------------------------------------------------------------- */

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void json_mem(FILE *f, const char *key, const sharc_mem_bytes_t *m) {
  fprintf(f,
          "\"%s\":{\"param_slices\":%zu,\"grad_slices\":%zu,\"optim\":%zu,"
          "\"gathered\":%zu,\"unsharded_grads\":%zu,\"activations\":%zu,"
          "\"total\":%zu,\"device\":%zu,\"cached\":%zu}",
          key, m->param_slices, m->grad_slices, m->optim, m->gathered,
          m->unsharded_grads, m->activations, m->total, m->device, m->cached);
}

static int check(sharc_status_t st, sharc_shard_t e, const char *what,
                 int rank) {
  if (st == SHARC_OK)
    return 0;
  fprintf(stderr, "sharc-train: rank %d: %s failed: %s: %s\n", rank, what,
          sharc_status_name(st),
          e ? sharc_shard_last_error(e) : sharc_last_error());
  return 1;
}

/* The eval set's size: test images, or held-out text windows (gpt). */
static long eval_count(const opts_t *o, const data_t *d) {
  if (!d->is_gpt)
    return d->test.n;
  long n = (long)text_eval_windows(&d->text, d->T);
  return o->eval_windows && o->eval_windows < n ? o->eval_windows : n;
}

/* Loss and accuracy over the eval set, each rank its part of each batch:
 * per image, or (gpt) per held-out window (the loss a token's mean, the
 * accuracy per token). */
static int evaluate(const opts_t *o, data_t *d, sharc_shard_t e, int world,
                    int rank, void *x, int32_t *y, double *loss, double *acc) {
  double tot[SHARC_STAGE_STATS] = {0};
  /* gpt: batches of a training micro-batch's size, whose activations fit */
  int EB = d->is_gpt ? (o->batch + o->micro - 1) / o->micro : o->eval_batch;
  long N = eval_count(o, d);
  for (long b0 = 0; b0 < N; b0 += EB) {
    int gb = N - b0 < EB ? (int)(N - b0) : EB, first, count;
    mnist_rank_part(gb, world, rank, &first, &count);
    float *xf = x;
    int32_t *xt = x;
    for (int i = 0; i < count; i++) {
      long k = b0 + first + i;
      if (d->is_gpt) {
        text_eval_window(&d->text, d->T, (uint64_t)k, xt + (size_t)i * d->T,
                         y + (size_t)i * d->T);
        continue;
      }
      memcpy(xf + (size_t)i * 784, d->test.images + (size_t)k * 784,
             784 * sizeof(float));
      y[i] = d->test.labels[k];
    }
    sharc_batch_t b = {.n = count,
                       .global_n = gb,
                       .x = x,
                       .y = y,
                       .first = (uint64_t)(b0 + first),
                       .training = 0};
    double s[SHARC_STAGE_STATS];
    if (check(sharc_shard_eval(e, &b, s), e, "evaluation", rank))
      return 1;
    tot[0] += s[0];
    tot[1] += s[1];
  }
  *loss = tot[0] / (double)N;
  *acc = tot[1] / ((double)N * (d->is_gpt ? d->T : 1));
  return 0;
}

static int dump_params(const char *path, sharc_shard_t e,
                       const sharc_model_t *m, int rank) {
  FILE *f = rank == 0 ? fopen(path, "wb") : NULL;
  if (rank == 0 && !f)
    fprintf(stderr, "sharc-train: cannot write %s: %s\n", path,
            strerror(errno));
  int rc = 0;
  for (int u = 0; u < m->nunits && rc == 0; u++) {
    size_t n;
    sharc_shard_unit_numel(e, u, &n, NULL);
    float *p = malloc(n * sizeof(float));
    if (!p || check(sharc_shard_unit_params(e, u, p, n), e, "export", rank))
      rc = 1;
    else if (f && fwrite(p, sizeof(float), n, f) != n)
      rc = 1;
    free(p);
  }
  if (f && fclose(f) != 0)
    rc = 1;
  return rc;
}

/* --device cuda: local rank r trains on GPU r mod (the host's GPUs). */
static int pick_gpu(sharc_comm_t comm) {
#ifdef SHARC_MODELS_CUDA
  int n = 0, r = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n < 1)
    return die("--device cuda: no usable CUDA device (%s)",
               err != cudaSuccess ? cudaGetErrorString(err) : "none found");
  sharc_comm_local_rank(comm, &r);
  err = cudaSetDevice(r % n);
  if (err != cudaSuccess)
    return die("--device cuda: cudaSetDevice(%d): %s", r % n,
               cudaGetErrorString(err));
  return 0;
#else
  (void)comm;
  return die("--device cuda: this build has no GPU models (CMake found no "
             "nvcc or no cuBLAS); rebuild with the CUDA toolkit installed");
#endif
}

int main(int argc, char **argv) {
  opts_t o;
  if (parse(argc, argv, &o) != 0)
    return 2;
  if (o.cfg.offload && o.cfg.device != SHARC_DEVICE_CUDA)
    return die("--offload moves GPU training's slices and optimizer state "
               "to host memory; host training keeps them there already: add "
               "--device cuda or drop --offload");
  sharc_comm_t comm;
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    fprintf(stderr,
            "sharc-train: %s: %s (start it under sharcrun, srun, "
            "mpirun or torchrun-style RANK/WORLD_SIZE/MASTER_ADDR)\n",
            sharc_status_name(st), sharc_last_error());
    return 1;
  }
  int rank, world, local = 1;
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &world);
  sharc_comm_local_size(comm, &local);
  /* ranks of one host share its cores: BLAS threads per rank = cores /
   * ranks here, unless OPENBLAS_NUM_THREADS says otherwise */
  if (!getenv("OPENBLAS_NUM_THREADS")) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int th = (int)(cores / (local > 0 ? local : 1));
    openblas_set_num_threads(th > 0 ? th : 1);
  }
  int cuda = o.cfg.device == SHARC_DEVICE_CUDA;
  int rc = cuda ? pick_gpu(comm) : 0;
  data_t d;
  cnn_t *cnn = NULL;
  gpt_t *gpt = NULL;
  mlp_t *mlp = NULL;
  const sharc_model_t *model = NULL;
  char err[512];
  if (rc == 0)
    rc = data_open(&o, &d, rank) ? 2 : 0;
  if (rc == 0 && cuda && !strcmp(o.model, "mlp"))
    rc = die("--device cuda: the mlp has no GPU version; use --model cnn or "
             "gpt");
  if (rc == 0 && !strcmp(o.model, "cnn")) {
    if (cnn_create(&cnn, o.cfg.seed, o.dropout) != 0)
      rc = die("cannot create the cnn");
    else if (!(model = cuda ? cnn_cuda_model(cnn, err, sizeof err)
                            : cnn_model(cnn)))
      rc = die("--device cuda: %s", err);
  } else if (rc == 0 && !strcmp(o.model, "mlp")) {
    static const int dims[] = {784, 256, 128, 10};
    if (mlp_create(&mlp, dims, 3, err, sizeof err) != 0)
      rc = die("%s", err);
    else
      model = mlp_model(mlp);
  } else if (rc == 0) {
    gpt_config_t gc;
    if (gpt_config_preset(o.gpt_size, &gc) != 0)
      rc = die("--gpt-size '%s': use tiny, small or gpt2", o.gpt_size);
    else if (gpt_create(&gpt, &gc, err, sizeof err) != 0)
      rc = die("%s", err);
    else if (text_holdout(&d.text, o.holdout, gc.ctx, err, sizeof err) != 0 ||
             text_check(&d.text, gc.ctx, err, sizeof err) != 0)
      rc = die("%s", err);
    else if (!(model = cuda ? gpt_cuda_model(gpt, err, sizeof err)
                            : gpt_model(gpt)))
      rc = die("--device cuda: %s", err);
    else {
      d.T = gc.ctx;
      if (rank == 0 && gc.vocab > 256)
        printf("gpt: %s shapes (V %d, T %d, L %d, H %d, C %d) on byte tokens: "
               "only 256 of the %d embedding and output rows are ever used "
               "(sharc has no tokenizer)\n",
               o.gpt_size, gc.vocab, gc.ctx, gc.layers, gc.heads, gc.channels,
               gc.vocab);
      if (rank == 0 && o.holdout > 0)
        printf("gpt: training on the first %zu bytes of %s, the last %zu "
               "held out (--holdout %.3g)\n",
               d.text.train_len, o.data, d.text.len - d.text.train_len,
               o.holdout);
    }
  }
  /* every rank must get this far before any collective */
  int ok = rc == 0, all_ok = 0;
  if (sharc_all_reduce(&ok, &all_ok, 1, SHARC_I32, SHARC_MIN, comm, NULL) !=
          SHARC_OK ||
      !all_ok) {
    sharc_comm_destroy(comm);
    return rc ? rc : 1;
  }
  if (cuda && rank == 0)
    printf("# --device cuda: %s on the GPU%s\n", model->name,
           o.cfg.offload ? "; slices and optimizer state offloaded to pinned "
                           "host memory, the optimizer step on the host"
                         : "");
  sharc_shard_t e = NULL;
  if (check(sharc_shard_create(comm, model, &o.cfg, &e), e, "engine", rank)) {
    sharc_comm_destroy(comm);
    return 1;
  }
  if (o.load && check(sharc_shard_load(e, o.load), e, "--load", rank))
    rc = 1;
  uint64_t start = 0;
  sharc_shard_steps(e, &start);
  long total = o.steps;
  if (o.epochs)
    total = (long)o.epochs * (d.train.n / o.batch);
  size_t in_b = d.is_gpt ? (size_t)d.T * sizeof(int32_t) : 784 * sizeof(float);
  size_t lab_b = d.is_gpt ? (size_t)d.T * sizeof(int32_t) : sizeof(int32_t);
  int per_rank = (o.batch + world - 1) / world;
  int ebuf = per_rank > o.eval_batch ? per_rank : o.eval_batch;
  void *x = calloc((size_t)o.micro * (size_t)ebuf, in_b);
  int32_t *y = calloc((size_t)o.micro * (size_t)ebuf, lab_b);
  sharc_batch_t *mb = calloc((size_t)o.micro, sizeof *mb);
  /* a resumed run appends to its log; a failed load leaves it alone */
  FILE *log =
      rank == 0 && o.log && rc == 0 ? fopen(o.log, o.load ? "a" : "w") : NULL;
  unsigned long long *peaks = calloc((size_t)world, sizeof *peaks);
  if (rc == 0 && (!x || !y || !mb || !peaks || (rank == 0 && o.log && !log)))
    rc = die("out of memory or cannot write --log %s", o.log ? o.log : "");
  if (rc == 0 && (long)start > total && rank == 0)
    printf("# sharc-train: the checkpoint is at step %llu, past the %ld "
           "steps asked for; nothing to train\n",
           (unsigned long long)start, total);
  if (rank == 0 && rc == 0 && (long)start <= total) {
    size_t np = 0, sl = 0;
    for (int u = 0; u < model->nunits; u++) {
      size_t a, b;
      sharc_shard_unit_numel(e, u, &a, &b);
      np += a;
      sl += b;
    }
    printf("# sharc-train: model %s (%zu parameters in %d units), %d ranks, "
           "strategy %s, batch %d x %d micro, %s, %ld steps from step %llu\n",
           model->name, np, model->nunits, world,
           sharc_strategy_name(o.cfg.strategy), o.batch, o.micro,
           o.cfg.optim.kind == SHARC_OPTIM_ADAMW ? "adamw" : "sgd",
           total - (long)start, (unsigned long long)start);
    fflush(stdout);
  }
  double t_run = now_s();
  for (long t = (long)start; t < total && rc == 0; t++) {
    for (int m = 0; m < o.micro; m++)
      make_batch(&o, &d, t, m, world, rank, &mb[m],
                 (char *)x + (size_t)m * (size_t)per_rank * in_b,
                 (int32_t *)((char *)y + (size_t)m * (size_t)per_rank * lab_b));
    sharc_step_stats_t s;
    if (check(sharc_shard_step(e, mb, o.micro, &s), e, "step", rank)) {
      rc = 1;
      break;
    }
    unsigned long long mine = s.peak.total;
    if (sharc_all_gather(&mine, peaks, 1, SHARC_U64, comm, NULL) != SHARC_OK) {
      rc = 1;
      break;
    }
    long step = t + 1;
    if (rank == 0 &&
        (step % o.log_every == 0 || step == total || step == (long)start + 1)) {
      double sps = o.batch / s.t_step;
      unsigned long long top = 0; /* the largest rank's peak */
      for (int r = 0; r < world; r++)
        top = peaks[r] > top ? peaks[r] : top;
      printf("step %6ld  loss %.6f  norm %.4f  time %7.1f ms  %s/s %9.0f  "
             "comm %.1f ms (exposed %.1f%s)  peak %.2f MiB (max over ranks "
             "%.2f; sharded state %.2f%s)\n",
             step, s.loss, s.grad_norm, s.t_step * 1e3,
             d.is_gpt ? "tokens" : "samples", d.is_gpt ? sps * d.T : sps,
             s.t_comm * 1e3, s.t_exposed * 1e3,
             !cuda                  ? ""
             : s.timing_cuda_events ? ", cuda events"
                                    : ", host clock",
             mib(s.peak.total), mib((size_t)top),
             mib(s.now.param_slices + s.now.grad_slices + s.now.optim),
             !cuda          ? ""
             : s.now.device ? ", on the GPU"
                            : ", in host memory");
      fflush(stdout);
    }
    if (log) {
      fprintf(
          log,
          "{\"step\":%ld,\"loss\":%.9g,\"grad_norm\":%.9g,\"time_s\":%.6f,"
          "\"%s_per_s\":%.1f,\"t_compute\":%.6f,\"t_comm\":%.6f,"
          "\"t_exposed\":%.6f,\"timing\":\"%s\",\"ranks\":%d,"
          "\"strategy\":\"%s\",",
          step, s.loss, s.grad_norm, s.t_step, d.is_gpt ? "tokens" : "samples",
          d.is_gpt ? o.batch * d.T / s.t_step : o.batch / s.t_step, s.t_compute,
          s.t_comm, s.t_exposed, s.timing_cuda_events ? "cuda events" : "host",
          world, sharc_strategy_name(o.cfg.strategy));
      json_mem(log, "peak", &s.peak);
      fprintf(log, ",");
      json_mem(log, "now", &s.now);
      fprintf(log, ",\"peak_total_per_rank\":[");
      for (int r = 0; r < world; r++)
        fprintf(log, "%s%llu", r ? "," : "", peaks[r]);
      fprintf(log, "]}\n");
      fflush(log);
    }
    if (o.save && o.save_every && step % o.save_every == 0 &&
        check(sharc_shard_save(e, o.save,
                               o.save_full ? SHARC_CKPT_FULL
                                           : SHARC_CKPT_SHARDED),
              e, "--save", rank))
      rc = 1;
  }
  double t_train = now_s() - t_run;
  uint64_t done = 0; /* the last step is saved, with or without --save-every */
  sharc_shard_steps(e, &done);
  if (rc == 0 && o.save && (!o.save_every || done % (uint64_t)o.save_every) &&
      check(sharc_shard_save(
                e, o.save, o.save_full ? SHARC_CKPT_FULL : SHARC_CKPT_SHARDED),
            e, "--save", rank))
    rc = 1;
  int do_eval = o.eval >= 0 ? o.eval : (!d.is_gpt && o.epochs);
  if (rc == 0 && do_eval && d.is_gpt && eval_count(&o, &d) == 0)
    rc = die("--eval: the held-out text holds no window of context %d", d.T);
  else if (rc == 0 && do_eval && d.is_gpt) {
    double loss, acc;
    long nw = eval_count(&o, &d);
    if (evaluate(&o, &d, e, world, rank, x, y, &loss, &acc) != 0)
      rc = 1;
    else if (rank == 0) {
      printf("eval: loss %.4f  perplexity %.3f  token accuracy %.4f  (%ld "
             "held-out windows of %d tokens, the last %.3g of the text; "
             "training took %.1f s)\n",
             loss, exp(loss), acc, nw, d.T, o.holdout, t_train);
      if (log)
        fprintf(log,
                "{\"eval_loss\":%.9g,\"eval_perplexity\":%.6g,"
                "\"eval_token_accuracy\":%.6f,\"eval_windows\":%ld,"
                "\"train_s\":%.3f}\n",
                loss, exp(loss), acc, nw, t_train);
    }
  } else if (rc == 0 && do_eval) {
    double loss, acc;
    if (evaluate(&o, &d, e, world, rank, x, y, &loss, &acc) != 0)
      rc = 1;
    else if (rank == 0) {
      printf("test: loss %.4f  accuracy %.4f  (%d images; training took "
             "%.1f s)\n",
             loss, acc, d.test.n, t_train);
      if (log)
        fprintf(log,
                "{\"test_loss\":%.9g,\"test_accuracy\":%.6f,\"train_s\":%.3f}"
                "\n",
                loss, acc, t_train);
    }
  }
  if (rc == 0 && o.dump && dump_params(o.dump, e, model, rank) != 0)
    rc = 1;
  if (log)
    fclose(log);
  free(peaks);
  free(x);
  free(y);
  free(mb);
  sharc_shard_destroy(e);
  sharc_comm_destroy(comm);
  cnn_destroy(cnn);
  gpt_destroy(gpt);
  mlp_destroy(mlp);
  data_close(&d);
  return rc;
}

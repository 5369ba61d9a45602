/*
 * gpt.c - the GPT-style decoder as a sharc_model_t (see gpt.h): the model
 * description (units, stages, initialisation), the buffer layouts of each
 * stage, the f32 callbacks and the f64 reference, both instantiated from
 * the one REAL-generic body in gpt_impl.h. The CUDA twin is gpt_cuda.cu;
 * this file creates it on demand (gpt_cuda_model).
 */
#include "gpt.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#ifdef SHARC_MODELS_CUDA
#include "gpt_cuda.h"
#endif

struct gpt {
  gpt_config_t cfg;
  int nunits, nstages; /* L+1 units, L+2 stages */
  sharc_unit_spec_t *units;
  sharc_stage_spec_t *stages;
  char (*names)[24]; /* [unit] */
  size_t numel;
  sharc_model_t model;
  pthread_mutex_t cuda_lock; /* guards the lazy creation of cuda */
  const sharc_model_t *cuda; /* gpt_cuda_model's, or NULL */
};

/* A stage call as the generic body sees it: tensors are REAL (float for
 * the callbacks, double for the reference) behind void pointers. */
typedef struct {
  int stage, n, global_n;
  const int32_t *y;          /* targets (n,T) */
  const void *const *params; /* the unit's tensors, declared order */
  void *const *grads;        /* backward: ADD into these */
  const void *in;            /* stage 0: tokens (n,T); else (n,T,C) */
  void *out;                 /* (n,T,C), or the stats (doubles) */
  const void *dout;          /* backward: (n,T,C); NULL for the head */
  void *din;                 /* backward: (n,T,C); NULL for stage 0 */
  void *saved, *scratch;
} gcall_t;

/* ---- buffer layouts (elements of REAL) ------------------------------------
 */

/* A block's saved tensors, in forward order. */
enum {
  BS_LN1,  /* (N,C) ln1 output */
  BS_M1,   /* (N) ln1 mean */
  BS_R1,   /* (N) ln1 1/std */
  BS_QKV,  /* (N,3C) */
  BS_ATT,  /* (n,H,T,T) attention weights */
  BS_ATTY, /* (N,C) heads' outputs */
  BS_X2,   /* (N,C) residual after attention */
  BS_LN2,  /* (N,C) */
  BS_M2,   /* (N) */
  BS_R2,   /* (N) */
  BS_FCH,  /* (N,4C) MLP pre-activation */
  BS_GEL,  /* (N,4C) GELU output */
  BS_N
};
/* A block's backward scratch. */
enum {
  BK_DBIG,  /* (N,4C) d gel / d fch, then (N,3C) d qkv */
  BK_DLN,   /* (N,C) d ln2, then d ln1 */
  BK_DATTY, /* (N,C) */
  BK_DATT,  /* (T,T) one head's d att */
  BK_N
};
/* The head's saved tensors (its backward scratch is d lnf, (N,C)). */
enum {
  HS_LN,    /* (N,C) lnf output */
  HS_M,     /* (N) */
  HS_R,     /* (N) */
  HS_PROBS, /* (N,V) softmax; the backward turns it into d logits */
  HS_N
};

/* Offsets of consecutive pieces of count[i] elements, each rounded up to
 * 16 elements so every piece of a 64-byte aligned buffer stays aligned.
 * Returns the total. */
static size_t carve(const size_t *count, int k, size_t *off) {
  size_t at = 0;
  for (int i = 0; i < k; i++) {
    off[i] = at;
    at += (count[i] + 15) / 16 * 16;
  }
  return at;
}

static size_t block_saved_layout(const gpt_t *g, int n, size_t off[BS_N]) {
  size_t T = (size_t)g->cfg.ctx, C = (size_t)g->cfg.channels;
  size_t H = (size_t)g->cfg.heads, N = (size_t)n * T;
  size_t count[BS_N] = {[BS_LN1] = N * C,
                        [BS_M1] = N,
                        [BS_R1] = N,
                        [BS_QKV] = N * 3 * C,
                        [BS_ATT] = (size_t)n * H * T * T,
                        [BS_ATTY] = N * C,
                        [BS_X2] = N * C,
                        [BS_LN2] = N * C,
                        [BS_M2] = N,
                        [BS_R2] = N,
                        [BS_FCH] = N * 4 * C,
                        [BS_GEL] = N * 4 * C};
  return carve(count, BS_N, off);
}

static size_t block_scratch_layout(const gpt_t *g, int n, size_t off[BK_N]) {
  size_t T = (size_t)g->cfg.ctx, C = (size_t)g->cfg.channels;
  size_t N = (size_t)n * T;
  size_t count[BK_N] = {[BK_DBIG] = N * 4 * C,
                        [BK_DLN] = N * C,
                        [BK_DATTY] = N * C,
                        [BK_DATT] = T * T};
  return carve(count, BK_N, off);
}

static size_t head_saved_layout(const gpt_t *g, int n, size_t off[HS_N]) {
  size_t C = (size_t)g->cfg.channels, V = (size_t)g->cfg.vocab;
  size_t N = (size_t)n * (size_t)g->cfg.ctx;
  size_t count[HS_N] = {
      [HS_LN] = N * C, [HS_M] = N, [HS_R] = N, [HS_PROBS] = N * V};
  return carve(count, HS_N, off);
}

enum { SZ_OUT, SZ_SAVED, SZ_SCRATCH };

/* Elements of REAL of stage's output, saved tensors or scratch for n
 * sequences (the head's output is its SHARC_STAGE_STATS doubles: not
 * counted here). Nothing at all for n = 0. */
static size_t stage_elems(const gpt_t *g, int stage, int n, int what) {
  size_t N = (size_t)n * (size_t)g->cfg.ctx, C = (size_t)g->cfg.channels;
  size_t bs[BS_N], bk[BK_N], hs[HS_N];
  if (n <= 0 || stage < 0 || stage >= g->nstages)
    return 0;
  switch (g->stages[stage].kind) {
  case GPT_STAGE_EMBED:
    return what == SZ_OUT ? N * C : 0;
  case GPT_STAGE_BLOCK:
    return what == SZ_OUT     ? N * C
           : what == SZ_SAVED ? block_saved_layout(g, n, bs)
                              : block_scratch_layout(g, n, bk);
  default:
    return what == SZ_OUT     ? 0
           : what == SZ_SAVED ? head_saved_layout(g, n, hs)
                              : (N * C + 15) / 16 * 16;
  }
}

/* 1 when some value of the (n,T) tokens is outside [0, V). */
static int tokens_bad(const int32_t *x, int n, int T, int V) {
  if (!x)
    return 1;
  for (size_t i = 0; i < (size_t)n * (size_t)T; i++)
    if (x[i] < 0 || x[i] >= V)
      return 1;
  return 0;
}

/* ---- the two instantiations -----------------------------------------------
 */

#define GLUE_(a, b) a##_##b
#define GLUE(a, b) GLUE_(a, b)
#define FN(name) GLUE(name, SUFFIX)

#define REAL float
#define SUFFIX f32
#define GEMM cblas_sgemm
#include "gpt_impl.h"
#undef REAL
#undef SUFFIX
#undef GEMM

#define REAL double
#define SUFFIX f64
#define GEMM cblas_dgemm
#include "gpt_impl.h"
#undef REAL
#undef SUFFIX
#undef GEMM

/* ---- callbacks ------------------------------------------------------------
 */

static size_t cb_out_bytes(void *ctx, int stage, int n) {
  const gpt_t *g = ctx;
  if (stage == g->nstages - 1)
    return SHARC_STAGE_STATS * sizeof(double);
  return stage_elems(g, stage, n, SZ_OUT) * sizeof(float);
}

static size_t cb_saved_bytes(void *ctx, int stage, int n) {
  return stage_elems(ctx, stage, n, SZ_SAVED) * sizeof(float);
}

static size_t cb_scratch_bytes(void *ctx, int stage, int n) {
  return stage_elems(ctx, stage, n, SZ_SCRATCH) * sizeof(float);
}

/* 1 when n sequences would overflow the int dimensions CBLAS takes. */
static int too_many(const gpt_t *g, int n) {
  return (size_t)n * (size_t)g->cfg.ctx > (size_t)INT_MAX;
}

/* Checks an engine call and restates it as a gcall_t; pp and gp hold the
 * parameter and gradient pointers it refers to. */
static int to_gcall(const gpt_t *g, const sharc_stage_call_t *sc, gcall_t *c,
                    const void **pp, void **gp) {
  if (sc->stage < 0 || sc->stage >= g->nstages || !sc->batch ||
      sc->batch->n < 0 || too_many(g, sc->batch->n) ||
      sc->unit != g->stages[sc->stage].unit)
    return -1;
  for (int k = 0; k < g->units[sc->unit].nparams; k++) {
    pp[k] = sc->params[k];
    gp[k] = sc->grads ? sc->grads[k] : NULL;
  }
  *c = (gcall_t){.stage = sc->stage,
                 .n = sc->batch->n,
                 .global_n = sc->batch->global_n,
                 .y = sc->batch->y,
                 .params = pp,
                 .grads = gp,
                 .in = sc->in,
                 .out = sc->out,
                 .dout = sc->dout,
                 .din = sc->din,
                 .saved = sc->saved,
                 .scratch = sc->scratch};
  return 0;
}

static int cb_forward(void *ctx, const sharc_stage_call_t *sc) {
  const gpt_t *g = ctx;
  const void *pp[SHARC_UNIT_MAX_PARAMS];
  void *gp[SHARC_UNIT_MAX_PARAMS];
  gcall_t c;
  if (to_gcall(g, sc, &c, pp, gp) != 0)
    return -1;
  if (c.n == 0) {
    if (c.stage == g->nstages - 1)
      memset(c.out, 0, SHARC_STAGE_STATS * sizeof(double));
    return 0;
  }
  return stage_forward_f32(g, &c);
}

static int cb_backward(void *ctx, const sharc_stage_call_t *sc) {
  const gpt_t *g = ctx;
  const void *pp[SHARC_UNIT_MAX_PARAMS];
  void *gp[SHARC_UNIT_MAX_PARAMS];
  gcall_t c;
  if (to_gcall(g, sc, &c, pp, gp) != 0)
    return -1;
  return c.n == 0 ? 0 : stage_backward_f32(g, &c);
}

/* ---- the model description ------------------------------------------------
 */

int gpt_config_preset(const char *name, gpt_config_t *cfg) {
  static const struct {
    const char *name;
    gpt_config_t cfg;
  } presets[] = {
      {"tiny", {256, 16, 2, 2, 32}},
      {"small", {256, 64, 4, 4, 128}},
      {"gpt2", {50257, 1024, 12, 12, 768}},
  };
  for (size_t i = 0; name && i < sizeof presets / sizeof presets[0]; i++)
    if (strcmp(name, presets[i].name) == 0) {
      *cfg = presets[i].cfg;
      return 0;
    }
  return -1;
}

/* One tensor: 1-D when d1 is 0. */
static void spec(sharc_unit_spec_t *u, const char *name, size_t d0, size_t d1,
                 sharc_init_t init, double scale, int no_decay) {
  sharc_param_spec_t *p = &u->params[u->nparams++];
  *p = (sharc_param_spec_t){.name = name,
                            .ndim = d1 ? 2 : 1,
                            .shape = {d0, d1},
                            .init = init,
                            .init_scale = scale,
                            .no_decay = no_decay};
}

/* GPT-2's initialisation: weights N(0, 0.02), the projections into the
 * residual stream N(0, 0.02/sqrt(2L)), biases 0, LayerNorm gains 1.
 * Biases and LayerNorm parameters skip weight decay; the matrices and the
 * embeddings do not (nanoGPT's grouping). */
static void describe(gpt_t *g) {
  size_t V = (size_t)g->cfg.vocab, T = (size_t)g->cfg.ctx;
  size_t C = (size_t)g->cfg.channels;
  int L = g->cfg.layers;
  double w = 0.02, wres = 0.02 / sqrt(2.0 * L);
  sharc_unit_spec_t *e = &g->units[0];
  e->name = "embed";
  spec(e, "wte", V, C, SHARC_INIT_NORMAL, w, 0);
  spec(e, "wpe", T, C, SHARC_INIT_NORMAL, w, 0);
  spec(e, "lnf.weight", C, 0, SHARC_INIT_ONES, 0, 1);
  spec(e, "lnf.bias", C, 0, SHARC_INIT_ZEROS, 0, 1);
  g->stages[0] = (sharc_stage_spec_t){0, GPT_STAGE_EMBED};
  for (int l = 0; l < L; l++) {
    sharc_unit_spec_t *u = &g->units[1 + l];
    snprintf(g->names[1 + l], sizeof g->names[0], "block%d", l);
    u->name = g->names[1 + l];
    spec(u, "ln1.weight", C, 0, SHARC_INIT_ONES, 0, 1);
    spec(u, "ln1.bias", C, 0, SHARC_INIT_ZEROS, 0, 1);
    spec(u, "attn.qkv.weight", 3 * C, C, SHARC_INIT_NORMAL, w, 0);
    spec(u, "attn.qkv.bias", 3 * C, 0, SHARC_INIT_ZEROS, 0, 1);
    spec(u, "attn.proj.weight", C, C, SHARC_INIT_NORMAL, wres, 0);
    spec(u, "attn.proj.bias", C, 0, SHARC_INIT_ZEROS, 0, 1);
    spec(u, "ln2.weight", C, 0, SHARC_INIT_ONES, 0, 1);
    spec(u, "ln2.bias", C, 0, SHARC_INIT_ZEROS, 0, 1);
    spec(u, "mlp.fc.weight", 4 * C, C, SHARC_INIT_NORMAL, w, 0);
    spec(u, "mlp.fc.bias", 4 * C, 0, SHARC_INIT_ZEROS, 0, 1);
    spec(u, "mlp.proj.weight", C, 4 * C, SHARC_INIT_NORMAL, wres, 0);
    spec(u, "mlp.proj.bias", C, 0, SHARC_INIT_ZEROS, 0, 1);
    g->stages[1 + l] = (sharc_stage_spec_t){1 + l, GPT_STAGE_BLOCK};
  }
  g->stages[L + 1] = (sharc_stage_spec_t){0, GPT_STAGE_HEAD};
  g->numel = 0;
  for (int u = 0; u < g->nunits; u++)
    for (int k = 0; k < g->units[u].nparams; k++) {
      const sharc_param_spec_t *p = &g->units[u].params[k];
      g->numel += p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
    }
}

/* Refuses a configuration with a message; limits keep every size in
 * size_t and every CBLAS dimension in int. */
static int check_config(const gpt_config_t *c, char *err, size_t errlen) {
  const struct {
    const char *name;
    int value, max;
  } f[] = {{"vocab", c->vocab, 1 << 24},
           {"ctx", c->ctx, 1 << 16},
           {"layers", c->layers, 1 << 12},
           {"heads", c->heads, 1 << 12},
           {"channels", c->channels, 1 << 16}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (f[i].value < 1 || f[i].value > f[i].max) {
      snprintf(err, errlen, "gpt: %s = %d is outside [1, %d]", f[i].name,
               f[i].value, f[i].max);
      return -1;
    }
  if (c->channels % c->heads != 0) {
    snprintf(err, errlen,
             "gpt: channels %d not divisible by heads %d; pick heads that "
             "divide channels",
             c->channels, c->heads);
    return -1;
  }
  return 0;
}

int gpt_create(gpt_t **out, const gpt_config_t *cfg, char *err, size_t errlen) {
  char scratch[8];
  if (!err)
    err = scratch, errlen = sizeof scratch;
  if (!out || !cfg) {
    snprintf(err, errlen, "gpt: create needs an output and a config");
    return -1;
  }
  *out = NULL;
  if (check_config(cfg, err, errlen) != 0)
    return -1;
  gpt_t *g = calloc(1, sizeof *g);
  if (!g)
    goto oom;
  pthread_mutex_init(&g->cuda_lock, NULL);
  g->cfg = *cfg;
  g->nunits = cfg->layers + 1;
  g->nstages = cfg->layers + 2;
  g->units = calloc((size_t)g->nunits, sizeof *g->units);
  g->stages = calloc((size_t)g->nstages, sizeof *g->stages);
  g->names = calloc((size_t)g->nunits, sizeof *g->names);
  if (!g->units || !g->stages || !g->names)
    goto oom;
  describe(g);
  g->model = (sharc_model_t){.name = "gpt",
                             .nunits = g->nunits,
                             .units = g->units,
                             .nstages = g->nstages,
                             .stages = g->stages,
                             .ctx = g,
                             .out_bytes = cb_out_bytes,
                             .saved_bytes = cb_saved_bytes,
                             .scratch_bytes = cb_scratch_bytes,
                             .forward = cb_forward,
                             .backward = cb_backward};
  *out = g;
  return 0;
oom:
  snprintf(err, errlen, "gpt: out of memory describing %d layers", cfg->layers);
  gpt_destroy(g);
  return -1;
}

const sharc_model_t *gpt_model(const gpt_t *g) { return &g->model; }

const gpt_config_t *gpt_config(const gpt_t *g) { return &g->cfg; }

size_t gpt_num_params(const gpt_t *g) { return g->numel; }

const sharc_model_t *gpt_cuda_model(gpt_t *g, char *why, size_t whylen) {
  char scratch[8];
  if (!why || whylen == 0)
    why = scratch, whylen = sizeof scratch;
  why[0] = '\0';
  if (!g) {
    snprintf(why, whylen, "gpt: gpt_cuda_model needs a model");
    return NULL;
  }
#ifdef SHARC_MODELS_CUDA
  pthread_mutex_lock(&g->cuda_lock);
  if (!g->cuda) {
    gpt_cuda_shape_t shape = {g->cfg.vocab, g->cfg.ctx, g->cfg.layers,
                              g->cfg.heads, g->cfg.channels};
    g->cuda = gpt_cuda_create(&g->model, &shape, why, whylen);
  }
  const sharc_model_t *m = g->cuda;
  pthread_mutex_unlock(&g->cuda_lock);
  return m;
#else
  snprintf(why, whylen,
           "gpt: this build has no CUDA models (configure with the CUDA "
           "toolkit and cuBLAS, or -DSHARC_SOFTCUDA=ON)");
  return NULL;
#endif
}

void gpt_destroy(gpt_t *g) {
  if (!g)
    return;
#ifdef SHARC_MODELS_CUDA
  gpt_cuda_destroy(g->cuda);
#endif
  pthread_mutex_destroy(&g->cuda_lock);
  free(g->names);
  free(g->stages);
  free(g->units);
  free(g);
}

/* ---- the f64 reference ----------------------------------------------------
 */

/* Runs every stage forward, then backward when grads is not NULL, in
 * double: the same chain as the engine (and drive.c) run over the f32
 * callbacks. */
int gpt_trace_f64(const gpt_t *g, const double *const *params,
                  double *const *grads, const int32_t *x, const int32_t *y,
                  int n, int global_n, double *const *outs, double *const *dins,
                  double *loss) {
  if (!g || !params || !x || !y || !loss || n < 0 || global_n < 1 ||
      too_many(g, n) || (dins && !grads))
    return -1;
  int ns = g->nstages, rc = -1;
  *loss = 0;
  if (n == 0) {
    if (outs)
      memset(outs[ns - 1], 0, SHARC_STAGE_STATS * sizeof(double));
    return 0;
  }
  size_t act = stage_elems(g, 0, n, SZ_OUT), nscratch = 0;
  double **out = calloc((size_t)ns, sizeof *out);
  double **saved = calloc((size_t)ns, sizeof *saved);
  double *scratch = NULL, *dcur = malloc(act * sizeof(double));
  double *dnext = malloc(act * sizeof(double)), stats[SHARC_STAGE_STATS];
  if (!out || !saved || !dcur || !dnext)
    goto done;
  for (int s = 0; s < ns; s++) {
    size_t o = stage_elems(g, s, n, SZ_OUT),
           sv = stage_elems(g, s, n, SZ_SAVED);
    size_t sc = stage_elems(g, s, n, SZ_SCRATCH);
    nscratch = sc > nscratch ? sc : nscratch;
    out[s] = malloc((s == ns - 1 ? 0 : o) * sizeof(double) + sizeof stats);
    saved[s] = malloc(sv * sizeof(double) + 1);
    if (!out[s] || !saved[s])
      goto done;
  }
  scratch = malloc(nscratch * sizeof(double) + 1);
  if (!scratch)
    goto done;
  for (int pass = 0; pass < (grads ? 2 : 1); pass++)
    for (int i = 0; i < ns; i++) {
      int s = pass ? ns - 1 - i : i, u = g->stages[s].unit;
      const void *pp[SHARC_UNIT_MAX_PARAMS];
      void *gp[SHARC_UNIT_MAX_PARAMS];
      size_t off = 0;
      for (int k = 0; k < g->units[u].nparams; k++) {
        const sharc_param_spec_t *p = &g->units[u].params[k];
        pp[k] = params[u] + off;
        gp[k] = grads ? grads[u] + off : NULL;
        off += p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
      }
      gcall_t c = {.stage = s,
                   .n = n,
                   .global_n = global_n,
                   .y = y,
                   .params = pp,
                   .grads = gp,
                   .in = s ? (const void *)out[s - 1] : (const void *)x,
                   .out = out[s],
                   .dout = s == ns - 1 ? NULL : dcur,
                   .din = s ? dnext : NULL,
                   .saved = saved[s],
                   .scratch = scratch};
      if ((pass ? stage_backward_f64(g, &c) : stage_forward_f64(g, &c)) != 0)
        goto done;
      if (!pass && outs)
        memcpy(outs[s], out[s],
               s == ns - 1 ? sizeof stats : act * sizeof(double));
      if (pass && dins && s)
        memcpy(dins[s], dnext, act * sizeof(double));
      if (pass) { /* this stage's din is the next one's dout */
        double *t = dcur;
        dcur = dnext;
        dnext = t;
      }
    }
  memcpy(stats, out[ns - 1], sizeof stats);
  *loss = stats[0] / global_n;
  rc = 0;
done:
  for (int s = 0; s < ns && out && saved; s++) {
    free(out[s]);
    free(saved[s]);
  }
  free(out);
  free(saved);
  free(scratch);
  free(dcur);
  free(dnext);
  return rc;
}

int gpt_loss_grad_f64(const gpt_t *g, const double *const *params,
                      double *const *grads, const int32_t *x, const int32_t *y,
                      int n, int global_n, double *loss) {
  return gpt_trace_f64(g, params, grads, x, y, n, global_n, NULL, NULL, loss);
}

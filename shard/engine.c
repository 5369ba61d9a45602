/*
 * engine.c - the FSDP engine's life cycle and data movement: creation (the
 * strategy's communicators, layout and deterministic initialisation of the
 * local slices), memory accounting by category, and the per-unit
 * operations the schedule (step.c) is made of: gather, wait, discard,
 * gradient accumulator, reduce. Every collective goes through the public
 * API on the engine's own stream.
 */
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"

/* ---- configuration ---------------------------------------------------- */

void sharc_shard_config_default(sharc_shard_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->strategy = SHARC_FULL_SHARD;
  cfg->param_dtype = SHARC_F32;
  cfg->prefetch = 2;
  cfg->optim.kind = SHARC_OPTIM_ADAMW;
  cfg->optim.lr = 1e-3;
  cfg->optim.beta1 = 0.9;
  cfg->optim.beta2 = 0.999;
  cfg->optim.eps = 1e-8;
}

static const char *const strategy_names[SHARC_STRATEGY_COUNT] = {
    "full", "grad_op", "no_shard", "hybrid", "hybrid_zero2"};

const char *sharc_strategy_name(sharc_strategy_t s) {
  return (unsigned)s < SHARC_STRATEGY_COUNT ? strategy_names[s] : "unknown";
}

sharc_status_t sharc_strategy_parse(const char *name, sharc_strategy_t *s) {
  for (int i = 0; name && i < SHARC_STRATEGY_COUNT; i++)
    if (strcmp(name, strategy_names[i]) == 0) {
      *s = (sharc_strategy_t)i;
      return SHARC_OK;
    }
  return SHARC_ERR_INVALID_ARG;
}

/* ---- errors, time, memory ------------------------------------------------ */

sharc_status_t eng_fail(struct sharc_shard *e, sharc_status_t st,
                        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err, sizeof e->err, fmt, ap);
  va_end(ap);
  return st;
}

/* Adds the communicator's message to a failed collective's status. */
sharc_status_t eng_coll_fail(struct sharc_shard *e, sharc_status_t st,
                             const char *what, int u) {
  /* the message of whichever of the engine's communicators failed */
  const char *why = sharc_comm_last_error(e->shard_comm);
  if (!why[0] && e->rep_comm)
    why = sharc_comm_last_error(e->rep_comm);
  if (!why[0])
    why = sharc_status_string(st);
  if (u < 0)
    return eng_fail(e, st, "shard: %s failed: %s", what, why);
  return eng_fail(e, st, "shard: %s of unit %d ('%s') failed: %s", what, u,
                  e->model->units[u].name, why);
}

sharc_status_t eng_failed_before(struct sharc_shard *e) {
  /* e->err still holds the first failure: keep it, say what to do */
  size_t n = strlen(e->err);
  if (!strstr(e->err, "; destroy the engine"))
    snprintf(e->err + n, sizeof e->err - n,
             "; destroy the engine (an earlier step failed and the ranks "
             "may be out of step)");
  return SHARC_ERR_ABORTED;
}

double eng_now(void) { return trace_now(); }

int eng_fault_kill(const char *point, int rank, uint64_t at,
                   const char *where) {
  static atomic_int fired;
  const char *spec = getenv("SHARC_FAULT");
  if (!spec || !*spec || atomic_load(&fired))
    return 0;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t;
       t = strtok_r(NULL, ",", &sv)) {
    int r = -1, end = -1;
    unsigned long long n = 0;
    char pt[32] = "";
    if (!strcmp(point, "save") && sscanf(t, "save_kill:%d%n", &r, &end) == 1 &&
        t[end] == '\0') {
      /* the older spelling of kill:R:save */
    } else {
      end = -1;
      if (sscanf(t, "kill:%d:%31[a-z]%n", &r, pt, &end) != 2 || end < 0 ||
          strcmp(pt, point) != 0)
        continue;
      const char *rest = t + end; /* "" or ":N" */
      int e2 = -1;
      if (*rest &&
          (sscanf(rest, ":%llu%n", &n, &e2) != 1 || e2 < 0 || rest[e2] != '\0'))
        continue;
    }
    if (r != rank || (n && n != at) || atomic_exchange(&fired, 1))
      continue;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(stderr, "SHARC_FAULT %s: rank %d raising SIGKILL %s at %.3f\n", t,
            rank, where, (double)ts.tv_sec + ts.tv_nsec * 1e-9);
    return 1;
  }
  return 0;
}

sharc_status_t eng_coll_begin(struct sharc_shard *e, const char *name, int u) {
  sharc_status_t st = trace_coll_begin(&e->tr, name, u);
  if (st == SHARC_ERR_NO_MEM)
    return eng_fail(e, st, "shard: out of memory (trace)");
  return st;
}

static size_t round64(size_t b) { return (b + 63) / 64 * 64; }

int eng_at(const struct sharc_shard *e, int cat) {
  if (!e->dev)
    return AT_HOST;
  int state = cat == MEM_PSLICE || cat == MEM_GSLICE || cat == MEM_OPTIM;
  return state && e->cfg.offload ? AT_PINNED : AT_DEV;
}

void *eng_alloc(struct sharc_shard *e, int cat, size_t bytes) {
  size_t r = round64(bytes ? bytes : 1);
  int at = eng_at(e, cat);
  void *p = at == AT_HOST
                ? aligned_alloc(64, r)
                : dev_alloc(&e->dv, at == AT_PINNED, r, cat == MEM_GATHERED);
  if (!p)
    return NULL;
  e->mem_now[cat] += r;
  e->total_now += r;
  if (e->total_now > e->total_peak) {
    e->total_peak = e->total_now;
    memcpy(e->mem_at_peak, e->mem_now, sizeof e->mem_now);
  }
  return p;
}

void *eng_calloc(struct sharc_shard *e, int cat, size_t bytes) {
  void *p = eng_alloc(e, cat, bytes);
  if (p && eng_at(e, cat) != AT_DEV)
    memset(p, 0, round64(bytes ? bytes : 1));
  else if (p && dev_zero(&e->dv, p, round64(bytes ? bytes : 1)) != SHARC_OK) {
    eng_free(e, cat, p, bytes);
    return NULL;
  }
  return p;
}

void eng_free(struct sharc_shard *e, int cat, void *p, size_t bytes) {
  if (!p)
    return;
  size_t r = round64(bytes ? bytes : 1);
  e->mem_now[cat] -= r;
  e->total_now -= r;
  int at = eng_at(e, cat);
  if (at == AT_HOST)
    free(p);
  else
    dev_free(&e->dv, at == AT_PINNED, p, r);
}

sharc_status_t eng_copy(struct sharc_shard *e, void *dst, const void *src,
                        size_t bytes) {
  if (e->dev)
    return dev_copy(&e->dv, dst, src, bytes);
  memcpy(dst, src, bytes);
  return SHARC_OK;
}

void eng_mem_report(const struct sharc_shard *e, const size_t *cats,
                    size_t total, size_t cached, sharc_mem_bytes_t *out) {
  out->param_slices = cats[MEM_PSLICE];
  out->grad_slices = cats[MEM_GSLICE];
  out->optim = cats[MEM_OPTIM];
  out->gathered = cats[MEM_GATHERED];
  out->unsharded_grads = cats[MEM_UGRAD];
  out->activations = cats[MEM_ACT];
  out->total = total;
  out->cached = cached;
  out->device = 0;
  for (int c = 0; c < MEM_NCAT; c++)
    if (eng_at(e, c) == AT_DEV)
      out->device += cats[c];
}

/* ---- gather, wait, discard ------------------------------------------------
 */

static void set_ptrs(struct sharc_shard *e, eunit_t *U) {
  for (int k = 0; k < U->lay.ntensors; k++)
    U->pptr[k] = U->compute + U->lay.off[k];
  (void)e;
}

int eng_gathered_count(const struct sharc_shard *e) {
  int c = 0;
  for (int u = 0; u < e->model->nunits; u++)
    c += e->units[u].state != G_NONE;
  return c;
}

sharc_status_t eng_gather(struct sharc_shard *e, int u) {
  eunit_t *U = &e->units[u];
  if (U->state != G_NONE)
    return SHARC_OK;
  size_t pad = U->lay.padded;
  U->gathered = eng_alloc(e, MEM_GATHERED, pad * e->psize);
  if (!U->gathered)
    return eng_fail(e, SHARC_ERR_NO_MEM,
                    "shard: out of memory gathering unit %d ('%s', %zu "
                    "elements)",
                    u, e->model->units[u].name, pad);
  const void *src = U->master;
  if (e->cfg.param_dtype != SHARC_F32) {
    /* the low-precision copy of the master slice peers gather (GPU
     * training: queued on comm, before the all-gather) */
    sharc_status_t cst =
        eng_at(e, MEM_PSLICE) == AT_DEV
            ? sharc_convert_cuda(U->send_lp, e->cfg.param_dtype, U->master,
                                 SHARC_F32, U->lay.slice, e->dv.comm)
            : sharc_convert(U->send_lp, e->cfg.param_dtype, U->master,
                            SHARC_F32, U->lay.slice);
    if (cst != SHARC_OK) {
      eng_free(e, MEM_GATHERED, U->gathered, pad * e->psize);
      U->gathered = NULL;
      return eng_fail(e, cst, "shard: unit %d: %s parameters: %s", u,
                      sharc_dtype_name(e->cfg.param_dtype), sharc_last_error());
    }
    src = U->send_lp;
  }
  sharc_status_t st = eng_coll_begin(e, "all_gather", u);
  int m0 = dev_time_mark(&e->dv, 1); /* GPU training; else -1 */
  if (st == SHARC_OK)
    st = sharc_all_gather(src, U->gathered, U->lay.slice, e->cfg.param_dtype,
                          e->shard_comm, e->stream);
  if (st == SHARC_OK)
    st = trace_coll_end(&e->tr);
  U->gather_mark = dev_time_mark(&e->dv, 1); /* where gather_cev will be */
  dev_time_span(&e->dv, m0, U->gather_mark, 0);
  if (st == SHARC_OK)
    st = e->dev ? dev_record(&e->dv, U->gather_cev)
                : sharc_event_record(U->gather_ev, e->stream);
  if (st != SHARC_OK) {
    /* the all-gather may be queued already: nothing may free its buffers
     * while it could still run */
    (void)sharc_stream_synchronize(e->stream);
    eng_free(e, MEM_GATHERED, U->gathered, pad * e->psize);
    U->gathered = NULL;
    return eng_coll_fail(e, st, "all-gather", u);
  }
  U->state = G_ISSUED;
  return SHARC_OK;
}

sharc_status_t eng_ready(struct sharc_shard *e, int u) {
  eunit_t *U = &e->units[u];
  if (U->state == G_READY)
    return SHARC_OK;
  if (U->state == G_NONE) {
    sharc_status_t st = eng_gather(e, u);
    if (st != SHARC_OK)
      return st;
  }
  double t0 = eng_now();
  /* GPU training: compute waits for the gather, the host does not; compute
   * stalls from the mark to the gather's (exposed when positive) */
  dev_time_span(&e->dv, dev_time_mark(&e->dv, 0), U->gather_mark, 1);
  sharc_status_t st = e->dev ? dev_wait(&e->dv, U->gather_cev, 0)
                             : sharc_event_synchronize(U->gather_ev);
  double t1 = eng_now();
  e->t_exposed += t1 - t0;
  trace_span(&e->tr, "wait all_gather", u, t0, t1, e->steps);
  if (st != SHARC_OK) /* a CUDA error has its message (device.c) */
    return st == SHARC_ERR_CUDA && e->dev
               ? st
               : eng_coll_fail(e, st, "all-gather", u);
  size_t pad = U->lay.padded;
  if (e->cfg.param_dtype == SHARC_F32) {
    U->compute = U->gathered;
  } else {
    U->compute = eng_alloc(e, MEM_GATHERED, pad * sizeof(float));
    if (!U->compute)
      return eng_fail(e, SHARC_ERR_NO_MEM,
                      "shard: out of memory for unit %d's f32 copy", u);
    st = e->dev ? sharc_convert_cuda(U->compute, SHARC_F32, U->gathered,
                                     e->cfg.param_dtype, pad, e->dv.compute)
                : sharc_convert(U->compute, SHARC_F32, U->gathered,
                                e->cfg.param_dtype, pad);
    if (st != SHARC_OK)
      return eng_fail(e, st, "shard: unit %d: %s parameters to f32: %s", u,
                      sharc_dtype_name(e->cfg.param_dtype),
                      sharc_status_string(st));
    /* the 16-bit copy is not needed once converted */
    eng_free(e, MEM_GATHERED, U->gathered, pad * e->psize);
    U->gathered = NULL;
  }
  set_ptrs(e, U);
  U->state = G_READY;
  return SHARC_OK;
}

void eng_discard(struct sharc_shard *e, int u) {
  eunit_t *U = &e->units[u];
  size_t pad = U->lay.padded;
  if (U->state == G_ISSUED && e->dev) /* never discard what a collective */
    (void)dev_wait(&e->dv, U->gather_cev, 1); /* still writes */
  else if (U->state == G_ISSUED)
    (void)sharc_event_synchronize(U->gather_ev);
  if (e->cfg.param_dtype != SHARC_F32) /* compute is a copy of its own */
    eng_free(e, MEM_GATHERED, U->compute, pad * sizeof(float));
  eng_free(e, MEM_GATHERED, U->gathered, pad * e->psize);
  U->compute = NULL;
  U->gathered = NULL;
  U->state = G_NONE;
}

/* ---- gradients -------------------------------------------------------------
 */

sharc_status_t eng_ugrad(struct sharc_shard *e, int u) {
  eunit_t *U = &e->units[u];
  if (U->ugrad)
    return SHARC_OK;
  U->ugrad = eng_calloc(e, MEM_UGRAD, U->lay.padded * sizeof(float));
  if (!U->ugrad)
    return eng_fail(e, SHARC_ERR_NO_MEM,
                    "shard: out of memory for unit %d's gradients (%zu "
                    "elements)",
                    u, U->lay.padded);
  for (int k = 0; k < U->lay.ntensors; k++)
    U->gptr[k] = U->ugrad + U->lay.off[k];
  return SHARC_OK;
}

sharc_status_t eng_reduce(struct sharc_shard *e, int u) {
  eunit_t *U = &e->units[u];
  sharc_status_t st = e->dev ? dev_grads_ready(&e->dv) : SHARC_OK;
  if (st == SHARC_OK)
    st = eng_coll_begin(e, "reduce_scatter", u);
  /* after comm's wait for the backward: that wait is not communication */
  int m0 = dev_time_mark(&e->dv, 1);
  if (st == SHARC_OK)
    st = sharc_reduce_scatter(U->ugrad, U->grad_slice, U->lay.slice, SHARC_F32,
                              SHARC_SUM, e->shard_comm, e->stream);
  if (st == SHARC_OK)
    st = trace_coll_end(&e->tr);
  if (st == SHARC_OK && e->rep_size > 1) {
    st = eng_coll_begin(e, "all_reduce (replicas)", u);
    if (st == SHARC_OK)
      st = sharc_all_reduce(U->grad_slice, U->grad_slice, U->lay.slice,
                            SHARC_F32, SHARC_SUM, e->rep_comm, e->stream);
    if (st == SHARC_OK)
      st = trace_coll_end(&e->tr);
  }
  dev_time_span(&e->dv, m0, dev_time_mark(&e->dv, 1), 0);
  if (st == SHARC_OK)
    st = e->dev ? dev_record(&e->dv, U->reduce_cev)
                : sharc_event_record(U->reduce_ev, e->stream);
  if (st != SHARC_OK)
    return eng_coll_fail(e, st, "gradient reduction", u);
  U->reducing = 1;
  return SHARC_OK;
}

sharc_status_t eng_reap(struct sharc_shard *e, int wait) {
  sharc_status_t first = SHARC_OK;
  for (int u = 0; u < e->model->nunits; u++) {
    eunit_t *U = &e->units[u];
    if (!U->reducing)
      continue;
    int done = 0;
    sharc_status_t st;
    if (e->dev)
      st = dev_query(&e->dv, U->reduce_cev, wait, &done);
    else if (wait)
      st = sharc_event_synchronize(U->reduce_ev), done = 1;
    else
      st = sharc_event_query(U->reduce_ev, &done);
    if (st != SHARC_OK && first == SHARC_OK)
      first = st == SHARC_ERR_CUDA && e->dev
                  ? st /* its message is set (device.c) */
                  : eng_coll_fail(e, st, "gradient reduction", u);
    if (!done && st == SHARC_OK)
      continue;
    if (st != SHARC_OK) /* the stream is dead: wait it out before freeing */
      (void)sharc_stream_synchronize(e->stream);
    eng_free(e, MEM_UGRAD, U->ugrad, U->lay.padded * sizeof(float));
    U->ugrad = NULL;
    U->reducing = 0;
  }
  return first;
}

/* Waits for the communication stream; the wait counts as exposed. GPU
 * training: compute's next work (the optimizer) is queued after this wait,
 * so compute stalls from where it is now until comm's end. */
sharc_status_t eng_sync(struct sharc_shard *e) {
  dev_time_span(&e->dv, dev_time_mark(&e->dv, 0), dev_time_mark(&e->dv, 1), 1);
  double t0 = eng_now();
  sharc_status_t st = sharc_stream_synchronize(e->stream);
  double t1 = eng_now();
  e->t_exposed += t1 - t0;
  trace_span(&e->tr, "wait stream", -1, t0, t1, e->steps);
  if (st != SHARC_OK)
    return eng_coll_fail(e, st, "communication", -1);
  return SHARC_OK;
}

/* ---- creation
 * ----------------------------------------------------------------- */

static sharc_status_t validate(const sharc_model_t *m,
                               const sharc_shard_config_t *c, char *err,
                               size_t n) {
  if (!m->forward || !m->backward || !m->out_bytes || !m->saved_bytes ||
      !m->scratch_bytes) {
    snprintf(err, n,
             "sharc_shard_create: model '%s' lacks a callback "
             "(forward, backward, out_bytes, saved_bytes, scratch_bytes "
             "are all required)",
             m->name ? m->name : "?");
    return SHARC_ERR_INVALID_ARG;
  }
  if (m->nunits < 1 || !m->units || m->nstages < 1 || !m->stages) {
    snprintf(err, n,
             "sharc_shard_create: model '%s' has %d units and %d "
             "stages; it needs at least one of each",
             m->name ? m->name : "?", m->nunits, m->nstages);
    return SHARC_ERR_INVALID_ARG;
  }
  if (!m->name || !*m->name || strlen(m->name) >= 64 ||
      strpbrk(m->name, " \t\r\n\"\\")) {
    snprintf(err, n,
             "sharc_shard_create: the model's name must be one word "
             "of 1..63 characters without quotes or backslashes (it is "
             "written into checkpoints)");
    return SHARC_ERR_INVALID_ARG;
  }
  for (int u = 0; u < m->nunits; u++) {
    const sharc_unit_spec_t *us = &m->units[u];
    int bad = !us->name || !*us->name || strlen(us->name) >= 64 ||
              strpbrk(us->name, " \t\r\n\"\\");
    for (int k = 0; !bad && k < us->nparams && k < SHARC_UNIT_MAX_PARAMS; k++)
      bad = !us->params[k].name || !*us->params[k].name ||
            strlen(us->params[k].name) >= 64 ||
            strpbrk(us->params[k].name, " \t\r\n\"\\");
    if (bad) {
      snprintf(err, n,
               "sharc_shard_create: unit %d: unit and tensor names "
               "must be one word of 1..63 characters (they are written into "
               "checkpoints)",
               u);
      return SHARC_ERR_INVALID_ARG;
    }
  }
  for (int s = 0; s < m->nstages; s++)
    if (m->stages[s].unit < 0 || m->stages[s].unit >= m->nunits) {
      snprintf(err, n,
               "sharc_shard_create: stage %d uses unit %d; units "
               "are 0..%d",
               s, m->stages[s].unit, m->nunits - 1);
      return SHARC_ERR_INVALID_ARG;
    }
  if ((unsigned)c->strategy >= SHARC_STRATEGY_COUNT) {
    snprintf(err, n,
             "sharc_shard_create: strategy %d is not one of "
             "full, grad_op, no_shard, hybrid, hybrid_zero2",
             (int)c->strategy);
    return SHARC_ERR_INVALID_ARG;
  }
  if (c->param_dtype != SHARC_F32 && c->param_dtype != SHARC_BF16 &&
      c->param_dtype != SHARC_F16) {
    snprintf(err, n,
             "sharc_shard_create: param_dtype %s; use f32, bf16 or "
             "f16",
             sharc_dtype_name(c->param_dtype));
    return SHARC_ERR_INVALID_ARG;
  }
  const sharc_optim_t *o = &c->optim;
  if (!(o->lr >= 0) || !(o->momentum >= 0 && o->momentum < 1) ||
      !(o->weight_decay >= 0) || !(c->clip_norm >= 0) ||
      (o->kind == SHARC_OPTIM_ADAMW &&
       !(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1 &&
         o->eps > 0)) ||
      (o->kind != SHARC_OPTIM_SGD && o->kind != SHARC_OPTIM_ADAMW)) {
    snprintf(err, n,
             "sharc_shard_create: optimizer settings out of range "
             "(lr %g, momentum %g, betas %g %g, eps %g, weight decay %g, "
             "clip %g); lr, decay, clip >= 0, momentum and betas in [0, 1), "
             "eps > 0",
             o->lr, o->momentum, o->beta1, o->beta2, o->eps, o->weight_decay,
             c->clip_norm);
    return SHARC_ERR_INVALID_ARG;
  }
  if (c->device != SHARC_DEVICE_HOST && c->device != SHARC_DEVICE_CUDA) {
    snprintf(err, n,
             "sharc_shard_create: device %d; use SHARC_DEVICE_HOST "
             "or SHARC_DEVICE_CUDA",
             (int)c->device);
    return SHARC_ERR_INVALID_ARG;
  }
  if (m->device != c->device) {
    snprintf(err, n,
             "sharc_shard_create: model '%s' computes on the %s but the "
             "engine was configured for the %s; pass the model's %s version "
             "(cnn_cuda_model, gpt_cuda_model) or set cfg.device to match",
             m->name, m->device == SHARC_DEVICE_CUDA ? "GPU" : "host",
             c->device == SHARC_DEVICE_CUDA ? "GPU" : "host",
             c->device == SHARC_DEVICE_CUDA ? "CUDA" : "host");
    return SHARC_ERR_INVALID_ARG;
  }
#ifndef SHARC_HAVE_CUDA
  if (c->device == SHARC_DEVICE_CUDA) {
    snprintf(err, n,
             "sharc_shard_create: GPU training, but this build of sharc has "
             "no CUDA; rebuild where CMake finds nvcc "
             "(-DSHARC_WITH_CUDA=ON)");
    return SHARC_ERR_UNSUPPORTED;
  }
#endif
  if (c->offload && c->device != SHARC_DEVICE_CUDA) {
    snprintf(err, n,
             "sharc_shard_create: offload moves GPU training's state to the "
             "host; host training keeps it there already: set device to "
             "SHARC_DEVICE_CUDA or drop offload");
    return SHARC_ERR_INVALID_ARG;
  }
  if (c->prefetch < 0 || c->shard_group < 0) {
    snprintf(err, n,
             "sharc_shard_create: prefetch %d and shard_group %d "
             "must be >= 0",
             c->prefetch, c->shard_group);
    return SHARC_ERR_INVALID_ARG;
  }
  return SHARC_OK;
}

static sharc_status_t setup_comms(struct sharc_shard *e, sharc_comm_t comm) {
  int group;
  switch (e->cfg.strategy) {
  case SHARC_NO_SHARD:
    group = 1;
    break;
  case SHARC_HYBRID_SHARD:
  case SHARC_HYBRID_SHARD_ZERO2:
    group = e->cfg.shard_group; /* 0: one shard group per host */
    break;
  default:
    group = e->world;
  }
  sharc_status_t st =
      sharc_comm_split_hsdp(comm, group, &e->shard_comm, &e->rep_comm);
  if (st != SHARC_OK)
    return eng_fail(e, st, "sharc_shard_create: strategy %s: %s",
                    sharc_strategy_name(e->cfg.strategy),
                    sharc_comm_last_error(comm));
  sharc_comm_rank(e->shard_comm, &e->shard_rank);
  sharc_comm_size(e->shard_comm, &e->shards);
  sharc_comm_size(e->rep_comm, &e->rep_size);
  return SHARC_OK;
}

static sharc_status_t setup_unit(struct sharc_shard *e, int u) {
  eunit_t *U = &e->units[u];
  const sharc_unit_spec_t *spec = &e->model->units[u];
  char err[300];
  if (layout_unit(spec, e->shards, &U->lay, err, sizeof err) != 0)
    return eng_fail(e, SHARC_ERR_INVALID_ARG, "sharc_shard_create: %s", err);
  size_t sl = U->lay.slice;
  U->master = eng_alloc(e, MEM_PSLICE, sl * sizeof(float));
  U->grad_slice = eng_calloc(e, MEM_GSLICE, sl * sizeof(float));
  U->opt_a = eng_calloc(e, MEM_OPTIM, sl * sizeof(float));
  if (e->cfg.optim.kind == SHARC_OPTIM_ADAMW)
    U->opt_b = eng_calloc(e, MEM_OPTIM, sl * sizeof(float));
  if (e->cfg.param_dtype != SHARC_F32)
    U->send_lp = eng_alloc(e, MEM_PSLICE, sl * sizeof(uint16_t));
  if (!U->master || !U->grad_slice || !U->opt_a ||
      (e->cfg.optim.kind == SHARC_OPTIM_ADAMW && !U->opt_b) ||
      (e->cfg.param_dtype != SHARC_F32 && !U->send_lp))
    return eng_fail(e, SHARC_ERR_NO_MEM,
                    "sharc_shard_create: out of memory for unit %d ('%s', "
                    "slice of %zu elements)",
                    u, spec->name, sl);
  /* Element g of the flat buffer is element g - off[k] of tensor k; on
   * the device, computed on the host and copied. */
  float *init = U->master;
  if (eng_at(e, MEM_PSLICE) == AT_DEV && !(init = malloc(sl * sizeof *init)))
    return eng_fail(e, SHARC_ERR_NO_MEM, "sharc_shard_create: out of memory");
  size_t lo = (size_t)e->shard_rank * sl;
  for (size_t i = 0; i < sl; i++) {
    size_t g = lo + i;
    float v = 0.0f;
    for (int k = 0; k < U->lay.ntensors && g < U->lay.numel; k++)
      if (g >= U->lay.off[k] && g < U->lay.off[k] + U->lay.count[k]) {
        v = layout_init_value(&spec->params[k], e->cfg.seed, u, k,
                              g - U->lay.off[k]);
        break;
      }
    init[i] = v;
  }
  if (init != U->master) {
    sharc_status_t st = eng_copy(e, U->master, init, sl * sizeof *init);
    free(init);
    if (st != SHARC_OK)
      return st;
  }
  U->first_stage = -1;
  for (int s = 0; s < e->model->nstages; s++)
    if (e->model->stages[s].unit == u) {
      if (U->first_stage < 0)
        U->first_stage = s;
      U->last_stage = s;
    }
  if (sharc_event_create(&U->gather_ev) != SHARC_OK ||
      sharc_event_create(&U->reduce_ev) != SHARC_OK)
    return eng_fail(e, SHARC_ERR_NO_MEM, "sharc_shard_create: no events");
  return e->dev ? dev_events(&e->dv, &U->gather_cev, &U->reduce_cev) : SHARC_OK;
}

sharc_status_t sharc_shard_create(sharc_comm_t comm, const sharc_model_t *model,
                                  const sharc_shard_config_t *cfg,
                                  sharc_shard_t *engine) {
  if (!engine)
    return SHARC_ERR_INVALID_ARG;
  *engine = NULL;
  if (!comm || !model || !cfg)
    return SHARC_ERR_INVALID_ARG;
  struct sharc_shard *e = calloc(1, sizeof *e);
  if (!e)
    return SHARC_ERR_NO_MEM;
  e->model = model;
  e->cfg = *cfg;
  e->t_origin = eng_now();
  sharc_status_t st = validate(model, cfg, e->err, sizeof e->err);
  if (st == SHARC_OK) {
    if (e->cfg.prefetch == 0)
      e->cfg.prefetch = 2;
    e->psize = sharc_dtype_size(cfg->param_dtype);
    e->dev = cfg->device == SHARC_DEVICE_CUDA;
    e->lr = cfg->optim.lr;
    e->keep = cfg->strategy == SHARC_SHARD_GRAD_OP ||
              cfg->strategy == SHARC_HYBRID_SHARD_ZERO2 ||
              cfg->strategy == SHARC_NO_SHARD;
    sharc_comm_rank(comm, &e->world_rank);
    sharc_comm_size(comm, &e->world);
    st = setup_comms(e, comm);
  }
  if (st == SHARC_OK && e->dev) {
    e->dv.err = e->err;
    e->dv.errlen = sizeof e->err;
    st = dev_setup(&e->dv, e->cfg.offload ? 0 : OPTIM_PARTS_BYTES, &e->stream);
  } else if (st == SHARC_OK && sharc_stream_create(&e->stream) != SHARC_OK)
    st = eng_fail(e, SHARC_ERR_SYSTEM, "sharc_shard_create: no stream: %s",
                  sharc_last_error());
  if (st == SHARC_OK) {
    e->units = calloc((size_t)model->nunits, sizeof *e->units);
    e->outs = calloc((size_t)model->nstages, sizeof *e->outs);
    if (!e->units || !e->outs)
      st = eng_fail(e, SHARC_ERR_NO_MEM, "sharc_shard_create: out of memory");
  }
  for (int u = 0; st == SHARC_OK && u < model->nunits; u++)
    st = setup_unit(e, u);
  e->tr.stream = e->stream;
  e->tr.rank = e->world_rank;
  e->tr.model = e->model;
  if (st == SHARC_OK)
    trace_open(&e->tr, e->cfg.trace_dir);
  /* ranks agree that every one of them is ready (and fail together) */
  int ok = st == SHARC_OK, all_ok = 0;
  { /* on the parent comm, which every rank has, whatever failed */
    sharc_status_t s2 =
        sharc_all_reduce(&ok, &all_ok, 1, SHARC_I32, SHARC_MIN, comm, NULL);
    if (st == SHARC_OK && s2 != SHARC_OK)
      st = eng_fail(e, s2, "sharc_shard_create: %s",
                    sharc_comm_last_error(comm));
    else if (st == SHARC_OK && !all_ok)
      st = eng_fail(e, SHARC_ERR_INVALID_ARG,
                    "sharc_shard_create: another rank failed to create its "
                    "engine (see its message)");
  }
  if (st != SHARC_OK) {
    fprintf(stderr, "sharc: %s\n", e->err);
    sharc_shard_destroy(e);
    return st;
  }
  *engine = e;
  return SHARC_OK;
}

sharc_status_t sharc_shard_destroy(sharc_shard_t e) {
  if (!e)
    return SHARC_OK;
  if (e->stream)
    (void)sharc_stream_synchronize(e->stream);
  for (int u = 0; e->units && u < e->model->nunits; u++) {
    eunit_t *U = &e->units[u];
    size_t sl = U->lay.slice;
    if (U->state != G_NONE)
      eng_discard(e, u);
    eng_free(e, MEM_UGRAD, U->ugrad, U->lay.padded * sizeof(float));
    eng_free(e, MEM_PSLICE, U->master, sl * sizeof(float));
    eng_free(e, MEM_PSLICE, U->send_lp, sl * sizeof(uint16_t));
    eng_free(e, MEM_GSLICE, U->grad_slice, sl * sizeof(float));
    eng_free(e, MEM_OPTIM, U->opt_a, sl * sizeof(float));
    eng_free(e, MEM_OPTIM, U->opt_b, sl * sizeof(float));
    if (U->gather_ev)
      sharc_event_destroy(U->gather_ev);
    if (U->reduce_ev)
      sharc_event_destroy(U->reduce_ev);
    dev_events_free(U->gather_cev, U->reduce_cev);
  }
  trace_close(&e->tr);
  if (e->stream)
    sharc_stream_destroy(e->stream);
  if (e->dev)
    dev_teardown(&e->dv);
  sharc_comm_destroy(e->rep_comm);
  sharc_comm_destroy(e->shard_comm);
  free(e->units);
  free(e->outs);
  free(e);
  return SHARC_OK;
}

/* ---- small accessors
 * ------------------------------------------------------------ */

const char *sharc_shard_last_error(sharc_shard_t e) {
  return e ? e->err : "sharc_shard: engine is NULL";
}

sharc_status_t sharc_shard_set_lr(sharc_shard_t e, double lr) {
  if (!e || !(lr >= 0))
    return SHARC_ERR_INVALID_ARG;
  e->lr = lr;
  return SHARC_OK;
}

sharc_status_t sharc_shard_steps(sharc_shard_t e, uint64_t *steps) {
  if (!e || !steps)
    return SHARC_ERR_INVALID_ARG;
  *steps = e->steps;
  return SHARC_OK;
}

sharc_status_t sharc_shard_unit_numel(sharc_shard_t e, int unit, size_t *numel,
                                      size_t *slice) {
  if (!e || unit < 0 || unit >= e->model->nunits)
    return SHARC_ERR_INVALID_ARG;
  if (numel)
    *numel = e->units[unit].lay.numel;
  if (slice)
    *slice = e->units[unit].lay.slice;
  return SHARC_OK;
}

/* Gathers one f32 per-rank slice array (master or optimizer state) of unit
 * u into full (padded elements). Collective over the shard group. */
sharc_status_t eng_gather_f32(struct sharc_shard *e, int u, const float *slice,
                              float *full) {
  sharc_status_t st = sharc_stream_synchronize(e->stream);
  if (st == SHARC_OK)
    st = sharc_all_gather(slice, full, e->units[u].lay.slice, SHARC_F32,
                          e->shard_comm, NULL);
  if (st != SHARC_OK)
    return eng_coll_fail(e, st, "all-gather", u);
  return SHARC_OK;
}

sharc_status_t sharc_shard_unit_params(sharc_shard_t e, int unit, float *out,
                                       size_t numel) {
  if (!e || !out || unit < 0 || unit >= e->model->nunits)
    return SHARC_ERR_INVALID_ARG;
  eunit_t *U = &e->units[unit];
  if (numel != U->lay.numel)
    return eng_fail(e, SHARC_ERR_INVALID_ARG,
                    "sharc_shard_unit_params: unit %d has %zu elements, "
                    "not %zu",
                    unit, U->lay.numel, numel);
  float *full = malloc(U->lay.padded * sizeof(float));
  float *slice = eng_at(e, MEM_PSLICE) == AT_DEV
                     ? malloc((U->lay.slice ? U->lay.slice : 1) * sizeof(float))
                     : U->master;
  sharc_status_t st = SHARC_OK;
  if (!full || !slice)
    st = eng_fail(e, SHARC_ERR_NO_MEM, "sharc_shard_unit_params: no memory");
  if (st == SHARC_OK && slice != U->master)
    st = eng_copy(e, slice, U->master, U->lay.slice * sizeof(float));
  if (st == SHARC_OK)
    st = eng_gather_f32(e, unit, slice, full);
  if (st == SHARC_OK)
    memcpy(out, full, numel * sizeof(float));
  if (slice != U->master)
    free(slice);
  free(full);
  return st;
}

/*
 * calib.c - calibration (sharc_plan.h): link latency and bandwidth fitted
 * to sharc-bench rows through sharc's own cost model, compute rates
 * fitted to a sharc-train log through the planner's own step replay.
 *
 * Both fits rest on the models being linear in their unknowns once the
 * algorithm is fixed: every formula of comm/algo/cost.c is a sum of
 * latency terms and bytes / bandwidth terms, and the replay's compute is
 * FLOPs / FLOP/s plus optimizer bytes / memory rate. So the coefficients
 * are read off the models themselves (the cost at latency 1 and infinite
 * bandwidth, at latency 0 and 1 GB/s) and never restated here: when
 * cost.c changes, the fit inverts the new formulas.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "json.h"
#include "plan.h"

/* A bandwidth at which a bytes term vanishes (1e300 GB/s). */
#define HUGE_GBS 1e300

static sharc_status_t bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static sharc_status_t bad(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return SHARC_ERR_INVALID_ARG;
}

void sharc_plan_runtime_default(sharc_plan_runtime_t *rt) {
  /* comm/core/core.h: SHARC_ALPHA_US, SHARC_BETA_GBS, SHARC_NET_* */
  rt->alpha_us = 4;
  rt->beta_gbs = 5;
  rt->net_alpha_us = 20;
  rt->net_beta_gbs = 1;
}

static const sched_coll_t to_sched[SHARC_PLAN_NCOLL] = {
    SCHED_ALL_GATHER, SCHED_REDUCE_SCATTER, SCHED_ALL_REDUCE};

static int local_of(const sharc_plan_sample_t *s) {
  return (s->ranks + s->nodes - 1) / s->nodes;
}

/* Microseconds of algorithm a for sample s with these links; net_gbs per
 * rank's NIC, the host's link being local of them (plan_comm_make). */
static double cost_us(const sharc_plan_sample_t *s, sched_algo_t a, double lat,
                      double gbs, double net_lat, double net_gbs) {
  int L = local_of(s);
  sched_links_t l = {s->nodes, L, lat, gbs, net_lat, net_gbs * L};
  return sched_cost_links_us(a, to_sched[s->coll], s->ranks, s->bytes, &l);
}

/* The algorithm the runtime picked for s with its parameters rt. */
static sched_algo_t runtime_pick(const sharc_plan_sample_t *s,
                                 const sharc_plan_runtime_t *rt) {
  sched_links_t rl = {s->nodes,     local_of(s),      rt->alpha_us,
                      rt->beta_gbs, rt->net_alpha_us, rt->net_beta_gbs};
  return sched_pick_links(to_sched[s->coll], s->ranks, s->bytes, &rl);
}

static int usable(const sharc_plan_sample_t *s, int inter) {
  return s->bytes > 0 && s->seconds > 0 && s->ranks > 1 && s->nodes >= 1 &&
         s->nodes <= s->ranks && (unsigned)s->coll < SHARC_PLAN_NCOLL &&
         (inter ? s->nodes > 1 : s->nodes == 1);
}

sharc_status_t sharc_plan_fit_link(sharc_plan_sample_t *s, int n, int inter,
                                   const sharc_plan_cluster_t *cl,
                                   const sharc_plan_runtime_t *rt,
                                   sharc_plan_fit_t *out, char *err,
                                   size_t errlen) {
  const char *cls = inter ? "inter-node" : "intra-node";
  memset(out, 0, sizeof *out);
  if (!s || n < 0 || !rt || (inter && !cl))
    return bad(err, errlen,
               "sharc_plan_fit_link: no samples or no runtime "
               "parameters");
  /* Weighted normal equations of t - base = ca * lat + cb * (1 / gbs),
   * weight 1 / t^2: A = sum w ca^2, B = sum w ca cb, C = sum w cb^2,
   * D = sum w ca y, E = sum w cb y. */
  double A = 0, B = 0, C = 0, D = 0, E = 0;
  double lo = INFINITY, hi = 0;
  int used = 0;
  double il = inter ? cl->intra_lat_us : 0, ig = inter ? cl->intra_gbs : 0;
  for (int i = 0; i < n; i++) {
    sharc_plan_sample_t *x = &s[i];
    if (!usable(x, inter))
      continue;
    x->algo = NULL; /* set once the sample is in the fit */
    x->predicted = 0;
    sched_algo_t a = runtime_pick(x, rt);
    double base, ca, cb;
    if (!inter) {
      base = 0;
      ca = cost_us(x, a, 1, HUGE_GBS, 1, HUGE_GBS);
      cb = cost_us(x, a, 0, 1, 0, 1);
    } else {
      base = cost_us(x, a, il, ig, 0, HUGE_GBS);
      ca = cost_us(x, a, il, ig, 1, HUGE_GBS) - base;
      cb = cost_us(x, a, il, ig, 0, 1) - base;
    }
    double t = x->seconds * 1e6, y = t - base, w = 1 / (t * t);
    if (!isfinite(ca) || !isfinite(cb) || !isfinite(base))
      continue;
    x->algo = sched_algo_name(a);
    A += w * ca * ca;
    B += w * ca * cb;
    C += w * cb * cb;
    D += w * ca * y;
    E += w * cb * y;
    lo = fmin(lo, (double)x->bytes);
    hi = fmax(hi, (double)x->bytes);
    used++;
  }
  if (used < 2 || !(hi > lo))
    return bad(err, errlen,
               "calibrate %s link: %d usable samples%s; need rows of at least "
               "two sizes > 0 measured on %s",
               cls, used, used >= 2 ? " all of one size" : "",
               inter ? "several hosts (nhosts > 1)" : "one host");
  double det = A * C - B * B, lat, inv;
  if (det > 1e-12 * A * C) {
    lat = (D * C - B * E) / det;
    inv = (A * E - B * D) / det;
  } else {
    lat = -1; /* collinear: fall back to bandwidth alone */
    inv = 0;
  }
  if (lat < 0) {
    out->lat_clamped = 1;
    lat = 0;
    inv = C > 0 ? E / C : 0;
  }
  if (!(inv > 0) || !isfinite(inv))
    return bad(err, errlen,
               "calibrate %s link: the fit gives no positive bandwidth (1 / "
               "bandwidth = %g); the times do not grow with size, so these "
               "rows cannot calibrate it",
               cls, inv);
  out->lat_us = lat;
  out->gbs = 1 / inv;
  out->used = used;
  double ss = 0;
  for (int i = 0; i < n; i++) {
    sharc_plan_sample_t *x = &s[i];
    if (!usable(x, inter) || !x->algo)
      continue;
    sched_algo_t a = runtime_pick(x, rt);
    x->predicted = 1e-6 * (inter ? cost_us(x, a, il, ig, lat, out->gbs)
                                 : cost_us(x, a, lat, out->gbs, lat, out->gbs));
    double r = (x->predicted - x->seconds) / x->seconds;
    ss += r * r;
    out->max_rel = fmax(out->max_rel, fabs(r));
  }
  out->rms_rel = sqrt(ss / used);
  return SHARC_OK;
}

void sharc_plan_predict_samples(sharc_plan_sample_t *s, int n,
                                const sharc_plan_cluster_t *cl,
                                const sharc_plan_runtime_t *rt,
                                double *rms_rel) {
  double ss = 0;
  int used = 0;
  for (int i = 0; i < n; i++) {
    sharc_plan_sample_t *x = &s[i];
    x->algo = NULL;
    x->predicted = 0;
    if (!usable(x, x->nodes > 1))
      continue;
    sched_algo_t a = runtime_pick(x, rt);
    x->algo = sched_algo_name(a);
    x->predicted = 1e-6 * cost_us(x, a, cl->intra_lat_us, cl->intra_gbs,
                                  cl->inter_lat_us, cl->inter_gbs);
    double r = (x->predicted - x->seconds) / x->seconds;
    ss += r * r;
    used++;
  }
  if (rms_rel)
    *rms_rel = used ? sqrt(ss / used) : 0;
}

/* ---- sharc-bench -J ---- */

static int coll_of(const char *name, sharc_plan_coll_t *c) {
  if (!name)
    return -1;
  if (!strcmp(name, "all_gather"))
    *c = SHARC_PLAN_ALL_GATHER;
  else if (!strcmp(name, "reduce_scatter"))
    *c = SHARC_PLAN_REDUCE_SCATTER;
  else if (!strcmp(name, "all_reduce"))
    *c = SHARC_PLAN_ALL_REDUCE;
  else
    return -1;
  return 0;
}

sharc_status_t sharc_plan_bench_parse(const char *text, size_t len,
                                      sharc_plan_sample_t **out, int *n,
                                      char *err, size_t errlen) {
  *out = NULL;
  *n = 0;
  pj_node_t root;
  char jerr[160];
  if (!text || pj_parse(text, len, &root, jerr, sizeof jerr) != 0) {
    pj_free(&root);
    return bad(err, errlen, "not a sharc-bench -J file: %s",
               text ? jerr : "no text");
  }
  sharc_status_t st = SHARC_OK;
  double nranks, nhosts;
  const pj_node_t *rows = pj_get(&root, "results");
  if (root.type != PJ_OBJ || pj_num(&root, "nranks", &nranks) ||
      pj_num(&root, "nhosts", &nhosts) || !rows || rows->type != PJ_ARR) {
    st = bad(err, errlen,
             "not a sharc-bench -J file: no \"nranks\", \"nhosts\" and "
             "\"results\" at the top level");
    goto done;
  }
  if (!(nranks >= 2 && nranks <= 1 << 24 && nhosts >= 1 && nhosts <= nranks)) {
    st = bad(err, errlen,
             "sharc-bench file: %g ranks on %g hosts; calibration needs at "
             "least 2 ranks",
             nranks, nhosts);
    goto done;
  }
  sharc_plan_sample_t *s = calloc((size_t)rows->n + 1, sizeof *s);
  if (!s) {
    st = bad(err, errlen, "sharc-bench file: out of memory");
    goto done;
  }
  int k = 0, other = 0;
  for (int i = 0; i < rows->n; i++) {
    const pj_node_t *r = &rows->kids[i];
    const char *be = pj_str(r, "backend");
    sharc_plan_coll_t c;
    double size, us, wrong = 0;
    if (be && strcmp(be, "sharc") != 0) {
      other++;
      continue;
    }
    if (coll_of(pj_str(r, "collective"), &c) != 0 || pj_num(r, "size", &size) ||
        pj_num(r, "time_us", &us) || size <= 0 || !(us > 0))
      continue;
    pj_num(r, "wrong", &wrong);
    if (wrong > 0) /* a row whose results were wrong measures nothing */
      continue;
    /* size: the whole buffer (nccl-tests' convention); sharc counts the
     * per-rank block of all-gather and reduce-scatter */
    double b = c == SHARC_PLAN_ALL_REDUCE ? size : size / nranks;
    if (b != floor(b) || b < 1)
      continue;
    s[k].coll = c;
    s[k].ranks = (int)nranks;
    s[k].nodes = (int)nhosts;
    s[k].bytes = (size_t)b;
    s[k].seconds = us * 1e-6;
    k++;
  }
  if (k == 0) {
    free(s);
    st = bad(err, errlen,
             "sharc-bench file: no all_gather, reduce_scatter or all_reduce "
             "row of backend sharc with size > 0 and a time (%d rows, %d of "
             "another backend); run sharc-bench all_gather,reduce_scatter,"
             "all_reduce -J FILE",
             rows->n, other);
    goto done;
  }
  *out = s;
  *n = k;
done:
  pj_free(&root);
  return st;
}

/* ---- sharc-train --log ---- */

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmpd);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

sharc_status_t sharc_plan_train_parse(const char *text, size_t len,
                                      double tokens_per_sample,
                                      sharc_plan_train_log_t *out, char *err,
                                      size_t errlen) {
  memset(out, 0, sizeof *out);
  if (!text)
    return bad(err, errlen, "sharc-train log: no text");
  int cap = 64, k = 0, line = 0;
  double *v = malloc((size_t)cap * 5 * sizeof *v);
  if (!v)
    return bad(err, errlen, "sharc-train log: out of memory");
  sharc_status_t st = SHARC_OK;
  size_t p = 0;
  while (p < len) {
    size_t e = p;
    while (e < len && text[e] != '\n')
      e++;
    line++;
    pj_node_t o;
    char jerr[160];
    double step, ts, tc, tm, tx, rate, ranks;
    int ok = pj_parse(text + p, e - p, &o, jerr, sizeof jerr) == 0;
    size_t start = p;
    p = e + 1;
    if (!ok) {
      pj_free(&o);
      int blank = 1;
      for (size_t i = start; i < e; i++)
        blank &= text[i] == ' ' || text[i] == '\t' || text[i] == '\r';
      if (blank)
        continue;
      st = bad(err, errlen, "sharc-train log line %d: %s", line, jerr);
      break;
    }
    if (pj_num(&o, "step", &step) || pj_num(&o, "time_s", &ts) ||
        pj_num(&o, "t_compute", &tc)) {
      pj_free(&o); /* the end-of-run line and others */
      continue;
    }
    if (pj_num(&o, "t_comm", &tm))
      tm = 0;
    if (pj_num(&o, "t_exposed", &tx))
      tx = 0;
    int gpt = pj_num(&o, "tokens_per_s", &rate) == 0;
    if (!gpt && pj_num(&o, "samples_per_s", &rate))
      rate = 0;
    if (pj_num(&o, "ranks", &ranks) == 0)
      out->ranks = (int)ranks;
    const char *sn = pj_str(&o, "strategy");
    if (sn && sharc_strategy_parse(sn, &out->strategy) != SHARC_OK) {
      st = bad(err, errlen, "sharc-train log line %d: strategy '%s'", line, sn);
      pj_free(&o);
      break;
    }
    out->is_gpt = gpt;
    if (k == cap) {
      double *nv = realloc(v, (size_t)cap * 2 * 5 * sizeof *v);
      if (!nv) {
        pj_free(&o);
        st = bad(err, errlen, "sharc-train log: out of memory");
        break;
      }
      v = nv;
      cap *= 2;
    }
    double batch = rate * ts / (gpt ? tokens_per_sample : 1);
    double *r = &v[5 * k++];
    r[0] = ts, r[1] = tc, r[2] = tm, r[3] = tx, r[4] = batch;
    pj_free(&o);
  }
  if (st == SHARC_OK && k == 0)
    st = bad(err, errlen,
             "sharc-train log: none of its %d lines is a step record "
             "(\"step\", \"time_s\", \"t_compute\"); write one with "
             "sharc-train --log FILE.jsonl --log-every 1",
             line);
  if (st == SHARC_OK && out->ranks < 1)
    st = bad(err, errlen,
             "sharc-train log: its step records name no "
             "\"ranks\"");
  if (st == SHARC_OK && out->is_gpt && !(tokens_per_sample > 0))
    st = bad(err, errlen,
             "sharc-train log: a GPT log (tokens/s) needs the model's "
             "tokens per sample");
  if (st != SHARC_OK) {
    free(v);
    return st;
  }
  out->steps = k;
  int first = k > 1; /* the first step pays for first touches */
  int m = k - first;
  double *col = malloc((size_t)m * sizeof *col);
  if (!col) {
    free(v);
    return bad(err, errlen, "sharc-train log: out of memory");
  }
  double med[5];
  for (int c = 0; c < 5; c++) {
    for (int i = 0; i < m; i++)
      col[i] = v[5 * (i + first) + c];
    med[c] = median(col, m);
  }
  free(col);
  free(v);
  out->t_step = med[0];
  out->t_compute = med[1];
  out->t_comm = med[2];
  out->t_exposed = med[3];
  out->global_batch = (int)lround(med[4]);
  return SHARC_OK;
}

/* ---- compute ---- */

sharc_status_t sharc_plan_fit_compute(const sharc_plan_model_t *model,
                                      const sharc_plan_cluster_t *cl,
                                      const sharc_plan_batch_t *batch,
                                      const sharc_shard_config_t *cfg,
                                      const sharc_plan_train_log_t *log,
                                      double *tflops, double *hbm_gbs,
                                      char *err, size_t errlen) {
  if (!model || !cl || !batch || !cfg || !log || !tflops || !hbm_gbs)
    return bad(err, errlen, "sharc_plan_fit_compute: a NULL argument");
  long world = (long)cl->nodes * cl->gpus_per_node;
  if (world != log->ranks)
    return bad(err, errlen,
               "calibrate compute: the log is of %d ranks, the cluster has "
               "%ld; give --nodes and --gpus-per-node of the run",
               log->ranks, world);
  if (cfg->strategy != log->strategy)
    return bad(err, errlen,
               "calibrate compute: the log ran strategy %s, the "
               "configuration is %s",
               sharc_strategy_name(log->strategy),
               sharc_strategy_name(cfg->strategy));
  if (log->is_gpt != (model->tokens_per_sample > 1))
    return bad(err, errlen,
               "calibrate compute: the log is of a %s (its rate is in %s/s) "
               "but the model is %s; give the run's --model",
               log->is_gpt ? "GPT" : "model of images",
               log->is_gpt ? "tokens" : "samples",
               model->label ? model->label : "another");
  if (cfg->offload)
    return bad(err, errlen,
               "calibrate compute: calibrate from a run without "
               "offload (its optimizer runs at a fixed host "
               "rate)");
  if (!(log->t_compute > 0))
    return bad(err, errlen,
               "calibrate compute: the log's compute time is %g s; nothing "
               "to fit",
               log->t_compute);
  /* t_compute(X TFLOP/s, H GB/s) = F / X + O / H: predict at (1, 1) and
   * (2, 1), so F = 2 (p1 - p2) and O = p1 - F, in seconds at 1 TFLOP/s
   * and 1 GB/s */
  sharc_plan_cluster_t c = *cl;
  sharc_plan_result_t r1, r2;
  c.tflops = 1;
  c.hbm_gbs = 1;
  sharc_status_t st =
      sharc_plan_predict(model, &c, batch, cfg, &r1, err, errlen);
  if (st != SHARC_OK)
    return st;
  c.tflops = 2;
  st = sharc_plan_predict(model, &c, batch, cfg, &r2, err, errlen);
  if (st != SHARC_OK)
    return st;
  double F = 2 * (r1.t_compute - r2.t_compute), O = r1.t_compute - F;
  double rest = log->t_step - log->t_compute - log->t_exposed;
  if (!(F > 0) || !(O > 0) || !(rest > 0))
    return bad(err, errlen,
               "calibrate compute: model FLOPs %g, optimizer bytes %g, rest "
               "of the step %g s (step %g - compute %g - exposed %g); need "
               "all > 0",
               F * 1e12, O * 1e9, rest, log->t_step, log->t_compute,
               log->t_exposed);
  *tflops = F / log->t_compute;
  *hbm_gbs = O / rest;
  return SHARC_OK;
}

/*
 * test_units.c - a model from a unit list (sharc_plan_units_parse) in one
 * process: a small list gives the units, ties, sizes and FLOPs it states;
 * the unit list written from each built-in model (cnn, gpt:tiny, gpt:small,
 * gpt:gpt2-124m), and the committed docs/units/gpt2-124m.units, predict
 * exactly what the built-in model predicts (every memory category, every
 * time, every collective) over a sweep of clusters and configurations; bad
 * lists are refused with the line number and what is wrong.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h" /* tests/unit */
#include "sharc_plan.h"

/* ---- a small list ---- */

static void small_list(void) {
  const char *text = "# a toy model\n"
                     "@tokens 128\n"
                     "embed\t1000 2e3 0 512   # tabs, a comment\n"
                     "\n"
                     "block0 250 1.5e6 4096 512 1024 64\r\n"
                     "head =embed 4000 256\n";
  sharc_plan_units_t *u;
  char err[512];
  sharc_status_t st =
      sharc_plan_units_parse(text, strlen(text), "toy.units", &u, err, 512);
  EXPECT(st == SHARC_OK, "%s", err);
  if (st != SHARC_OK)
    return;
  const sharc_plan_model_t *pm = sharc_plan_units_model(u);
  const sharc_model_t *m = pm->model;
  EXPECT(!strcmp(pm->label, "units:toy.units"), "label %s", pm->label);
  EXPECT(pm->tokens_per_sample == 128, "tokens %g", pm->tokens_per_sample);
  EXPECT(m->nunits == 2 && m->nstages == 3, "%d units, %d stages", m->nunits,
         m->nstages);
  EXPECT(!strcmp(m->units[0].name, "embed") &&
             !strcmp(m->units[1].name, "block0"),
         "names %s %s", m->units[0].name, m->units[1].name);
  EXPECT(m->units[0].nparams == 1 && m->units[0].params[0].shape[0] == 1000 &&
             m->units[1].params[0].shape[0] == 250,
         "params %zu %zu", m->units[0].params[0].shape[0],
         m->units[1].params[0].shape[0]);
  EXPECT(m->stages[0].unit == 0 && m->stages[1].unit == 1 &&
             m->stages[2].unit == 0,
         "stage units %d %d %d", m->stages[0].unit, m->stages[1].unit,
         m->stages[2].unit);
  /* n = 3 samples: per-sample numbers x 3, the fixed scratch once */
  EXPECT(m->out_bytes(m->ctx, 0, 3) == 1536, "embed out %zu",
         m->out_bytes(m->ctx, 0, 3));
  EXPECT(m->saved_bytes(m->ctx, 0, 3) == 0, "embed saved");
  EXPECT(m->saved_bytes(m->ctx, 1, 3) == 12288, "block saved %zu",
         m->saved_bytes(m->ctx, 1, 3));
  EXPECT(m->scratch_bytes(m->ctx, 1, 3) == 3 * 1024 + 64, "block scratch %zu",
         m->scratch_bytes(m->ctx, 1, 3));
  EXPECT(m->scratch_bytes(m->ctx, 1, 0) == 0, "no samples, no scratch");
  EXPECT(m->saved_bytes(m->ctx, 2, 3) == 768, "head saved %zu",
         m->saved_bytes(m->ctx, 2, 3));
  EXPECT(pm->stage_flops(pm->ctx, 1, 3) == 4.5e6, "block flops %g",
         pm->stage_flops(pm->ctx, 1, 3));
  EXPECT(pm->stage_flops(pm->ctx, 0, 2) == 4e3, "embed flops %g",
         pm->stage_flops(pm->ctx, 0, 2));
  /* it plans: 1250 parameters, 2 all-gathers of the tied unit skipped */
  sharc_plan_cluster_t cl;
  sharc_plan_cluster_default(&cl);
  cl.gpus_per_node = 2;
  sharc_plan_batch_t b = {4, 1};
  sharc_shard_config_t cfg;
  sharc_shard_config_default(&cfg);
  cfg.strategy = SHARC_FULL_SHARD;
  sharc_plan_result_t r;
  st = sharc_plan_predict(pm, &cl, &b, &cfg, &r, err, sizeof err);
  EXPECT(st == SHARC_OK, "%s", err);
  EXPECT(r.params == 1250, "params %zu", r.params);
  sharc_plan_units_destroy(u);

  /* sizes saturate at 16 TiB rather than wrap */
  const char *huge = "big 1 1 17592186044416\n";
  EXPECT(sharc_plan_units_parse(huge, strlen(huge), NULL, &u, err, 512) ==
             SHARC_OK,
         "%s", err);
  m = sharc_plan_units_model(u)->model;
  EXPECT(m->saved_bytes(m->ctx, 0, 1 << 30) == (size_t)1 << 44, "%zu",
         m->saved_bytes(m->ctx, 0, 1 << 30));
  EXPECT(!strcmp(sharc_plan_units_model(u)->label, "units:list"), "%s",
         sharc_plan_units_model(u)->label);
  sharc_plan_units_destroy(u);
  /* the label goes into JSON: no quote, backslash or control character */
  EXPECT(sharc_plan_units_parse(huge, strlen(huge), "a\"b\\c\n", &u, err,
                                512) == SHARC_OK,
         "%s", err);
  EXPECT(!strcmp(sharc_plan_units_model(u)->label, "units:a_b_c_"), "%s",
         sharc_plan_units_model(u)->label);
  sharc_plan_units_destroy(u);
}

/* ---- refusals ---- */

static void refuse(const char *text, size_t len, const char *want) {
  sharc_plan_units_t *u = (sharc_plan_units_t *)1;
  char err[512] = "";
  sharc_status_t st = sharc_plan_units_parse(text, len, "x", &u, err, 512);
  EXPECT(st == SHARC_ERR_INVALID_ARG && u == NULL && strstr(err, want),
         "text '%.40s': status %d, message '%s', wanted '%s'", text, (int)st,
         err, want);
  if (st == SHARC_OK)
    sharc_plan_units_destroy(u);
  else
    printf("ok   refused: %s\n", err);
}

static void refusals(void) {
  char name[80];
  memset(name, 'n', 70);
  strcpy(name + 70, " 1 1 1\n");
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"", "no unit in 0 lines"},
      {"# only a comment\n", "no unit in 1 line;"},
      {"a 10 5\n", "line 1: 3 fields"},
      {"\n\na 10 5 0 0 0 0 9\n", "line 3: more than 7 fields"},
      {"a x 5 0\n", "line 1: parameters 'x'"},
      {"a 0 5 0\n", "line 1: parameters '0'"},
      {"a 1099511627777 5 0\n", "line 1: parameters '1099511627777'"},
      {"a = 5 0\n", "line 1: parameters '='"},
      {"# c\na 10 -5 0\n", "line 2: FLOPs '-5'"},
      {"a 10 nan 0\n", "line 1: FLOPs 'nan'"},
      {"a 10 1e25 0\n", "line 1: FLOPs '1e25'"},
      {"a 10 5 1.5\n", "line 1: saved bytes '1.5'"},
      {"a 10 5 17592186044417\n", "line 1: saved bytes '17592186044417'"},
      {"a 10 5 0 x\n", "line 1: output bytes 'x'"},
      {"a 10 5 0 0 -1\n", "line 1: scratch bytes '-1'"},
      {"a 10 5 0 0 0 1k\n", "line 1: fixed scratch bytes '1k'"},
      {"=a 10 5 0\n", "line 1: name '=a' starts with '='"},
      {"a 10 5 0\nb 10 5 0\na 1 1 1\n", "line 3: name 'a' already given on "
                                        "line 1"},
      {"h =e 5 0\ne 10 5 0\n", "line 1: parameters '=e': no unit 'e' on an "
                               "earlier line"},
      {"a 10 5 0\nb =a 1 0\nc =b 1 0\n",
       "line 3: parameters '=b': 'b' (line 2) is itself a tied stage; name "
       "its unit, 'a'"},
      /* of two errors, the earlier line's */
      {"a 1 1 1\nb 1 1 1\na 1 1 1\nc =zz 1 1\n", "line 3: name 'a'"},
      {"a 1 1 1\nc =zz 1 1\na 1 1 1\n", "line 2: parameters '=zz'"},
      {"@tokens 0\na 1 1 1\n", "line 1: @tokens: give one whole number"},
      {"@tokens 5 6\n", "line 1: @tokens: give one whole number"},
      {"@tok 5\n", "line 1: unknown directive '@tok'"},
      {"@tokens 5\n@tokens 6\na 1 1 1\n", "line 2: @tokens given twice "
                                          "(first on line 1)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    refuse(bad[i].text, strlen(bad[i].text), bad[i].want);
  refuse(name, strlen(name), "line 1: name 'nnn");
  refuse("a 1 1 1\nb 1\0 1 1\n", 16, "line 2: a NUL byte");
  sharc_plan_units_t *u;
  EXPECT(sharc_plan_units_parse(NULL, 3, "x", &u, NULL, 0) ==
             SHARC_ERR_INVALID_ARG,
         "NULL text with a length is refused, even without err");
}

/* ---- a built-in model as a unit list ---- */

typedef struct {
  char *buf;
  size_t len, cap;
} text_t;

static void put(text_t *t, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (k >= 0 && (size_t)k < t->cap - t->len) {
      t->len += (size_t)k;
      return;
    }
    t->cap = 2 * t->cap + (size_t)k + 64;
    t->buf = realloc(t->buf, t->cap);
    if (!t->buf)
      abort();
  }
}

/* Writes pm as a unit list: per-sample sizes read off its callbacks at one
 * and two samples (scratch may have a fixed part), checked to be linear
 * at 3, 5 and 8 samples, so the list states the model exactly. */
static char *unit_list(const sharc_plan_model_t *pm) {
  const sharc_model_t *m = pm->model;
  text_t t = {0};
  put(&t, "# %s\n@tokens %.0f\n", pm->label, pm->tokens_per_sample);
  int *seen = calloc((size_t)m->nunits, sizeof *seen);
  for (int s = 0; s < m->nstages; s++) {
    int u = m->stages[s].unit, last = s == m->nstages - 1;
    size_t out = last ? 0 : m->out_bytes(m->ctx, s, 1);
    size_t saved = m->saved_bytes(m->ctx, s, 1);
    size_t sc1 = m->scratch_bytes(m->ctx, s, 1);
    size_t sc2 = m->scratch_bytes(m->ctx, s, 2);
    size_t per = sc2 - sc1, fixed = sc1 - per;
    double fl = pm->stage_flops(pm->ctx, s, 1);
    static const int ns[] = {3, 5, 8};
    for (int k = 0; k < 3; k++) {
      int n = ns[k];
      EXPECT(last || m->out_bytes(m->ctx, s, n) == out * n,
             "%s stage %d: out not linear at %d", pm->label, s, n);
      EXPECT(m->saved_bytes(m->ctx, s, n) == saved * n,
             "%s stage %d: saved not linear at %d", pm->label, s, n);
      EXPECT(m->scratch_bytes(m->ctx, s, n) == per * n + fixed,
             "%s stage %d: scratch not per * n + fixed at %d", pm->label, s, n);
      EXPECT(pm->stage_flops(pm->ctx, s, n) == fl * n,
             "%s stage %d: flops not linear at %d", pm->label, s, n);
    }
    if (seen[u]) {
      put(&t, "stage%d =%s", s, m->units[u].name);
    } else {
      size_t params = 0;
      for (int k = 0; k < m->units[u].nparams; k++) {
        const sharc_param_spec_t *p = &m->units[u].params[k];
        size_t e = 1;
        for (int d = 0; d < p->ndim; d++)
          e *= p->shape[d];
        params += e;
      }
      put(&t, "%s %zu", m->units[u].name, params);
      seen[u] = 1;
    }
    put(&t, " %.17g %zu %zu %zu %zu\n", fl, saved, out, per, fixed);
  }
  free(seen);
  return t.buf;
}

static int same_result(const sharc_plan_result_t *a,
                       const sharc_plan_result_t *b) {
  int ok = !memcmp(&a->mem, &b->mem, sizeof a->mem) && a->params == b->params &&
           a->fits == b->fits && a->micro_n == b->micro_n &&
           a->bytes_intra == b->bytes_intra &&
           a->bytes_inter == b->bytes_inter && a->t_compute == b->t_compute &&
           a->t_comm == b->t_comm && a->t_exposed == b->t_exposed &&
           a->t_step == b->t_step && a->t_optim == b->t_optim &&
           a->t_unit_fwd == b->t_unit_fwd && a->t_unit_bwd == b->t_unit_bwd &&
           a->samples_per_s == b->samples_per_s &&
           a->tokens_per_s == b->tokens_per_s;
  for (int c = 0; c < SHARC_PLAN_NCOLL; c++)
    ok = ok && a->coll[c].calls == b->coll[c].calls &&
         a->coll[c].seconds == b->coll[c].seconds &&
         a->coll[c].largest_us == b->coll[c].largest_us &&
         !strcmp(a->coll[c].algo, b->coll[c].algo);
  return ok;
}

/* Predicts both models over clusters x strategies x dtypes x
 * checkpointing x micro-batches; every result must be equal. Returns the
 * configurations compared. */
static int compare(const sharc_plan_model_t *ref,
                   const sharc_plan_model_t *list) {
  static const int shape[][2] = {{1, 1}, {1, 4}, {2, 4}, {3, 2}};
  static const sharc_dtype_t dts[] = {SHARC_F32, SHARC_BF16};
  int n = 0;
  for (size_t c = 0; c < sizeof shape / sizeof shape[0]; c++)
    for (int s = 0; s < SHARC_STRATEGY_COUNT; s++)
      for (int d = 0; d < 2; d++)
        for (int ck = 0; ck < 2; ck++)
          for (int micro = 1; micro <= 3; micro += 2) {
            sharc_plan_cluster_t cl;
            sharc_plan_cluster_default(&cl);
            cl.nodes = shape[c][0];
            cl.gpus_per_node = shape[c][1];
            int world = cl.nodes * cl.gpus_per_node;
            sharc_plan_batch_t b = {world * 3 + (world > 1), micro};
            sharc_shard_config_t cfg;
            sharc_shard_config_default(&cfg);
            cfg.strategy = (sharc_strategy_t)s;
            cfg.param_dtype = dts[d];
            cfg.checkpoint_activations = ck;
            cfg.optim.kind = SHARC_OPTIM_ADAMW;
            sharc_plan_result_t ra, rb;
            char ea[512], eb[512];
            sharc_status_t sa =
                sharc_plan_predict(ref, &cl, &b, &cfg, &ra, ea, sizeof ea);
            sharc_status_t sb =
                sharc_plan_predict(list, &cl, &b, &cfg, &rb, eb, sizeof eb);
            EXPECT(sa == sb, "%s: status %d vs %d (%s | %s)", ref->label,
                   (int)sa, (int)sb, ea, eb);
            if (sa != SHARC_OK || sb != SHARC_OK)
              continue;
            n++;
            EXPECT(same_result(&ra, &rb),
                   "%s on %dx%d, strategy %d, dtype %d, ckpt %d, micro %d: "
                   "peak %zu vs %zu, step %.17g vs %.17g s",
                   ref->label, cl.nodes, cl.gpus_per_node, s, (int)dts[d], ck,
                   micro, ra.mem.device, rb.mem.device, ra.t_step, rb.t_step);
          }
  return n;
}

static void builtins(void) {
  static const char *const specs[] = {"cnn", "gpt:tiny", "gpt:small",
                                      "gpt:gpt2-124m"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    sharc_plan_builtin_t *b;
    char err[512];
    EXPECT(sharc_plan_builtin_create(specs[i], 0, &b, err, sizeof err) == 0,
           "%s", err);
    const sharc_plan_model_t *ref = sharc_plan_builtin_model(b);
    char *text = unit_list(ref);
    sharc_plan_units_t *u;
    sharc_status_t st = sharc_plan_units_parse(text, strlen(text), specs[i], &u,
                                               err, sizeof err);
    EXPECT(st == SHARC_OK, "%s: %s", specs[i], err);
    if (st == SHARC_OK) {
      int n = compare(ref, sharc_plan_units_model(u));
      printf("ok   %s as a unit list (%d lines): %d configurations predicted "
             "identically\n",
             specs[i], ref->model->nstages, n);
      EXPECT(n >= 100, "%s: only %d configurations compared", specs[i], n);
      sharc_plan_units_destroy(u);
    }
    free(text);
    sharc_plan_builtin_destroy(b);
  }
}

/* The committed example: docs/units/gpt2-124m.units against gpt:gpt2-124m. */
static void example(void) {
  const char *path = SHARC_SRC_DIR "/docs/units/gpt2-124m.units";
  FILE *f = fopen(path, "rb");
  EXPECT(f != NULL, "cannot open %s", path);
  if (!f)
    return;
  static char text[1 << 16];
  size_t len = fread(text, 1, sizeof text, f);
  fclose(f);
  sharc_plan_units_t *u;
  sharc_plan_builtin_t *b;
  char err[512];
  sharc_status_t st =
      sharc_plan_units_parse(text, len, "gpt2-124m.units", &u, err, 512);
  EXPECT(st == SHARC_OK, "%s: %s", path, err);
  if (st != SHARC_OK)
    return;
  EXPECT(sharc_plan_builtin_create("gpt:gpt2-124m", 0, &b, err, 512) == 0, "%s",
         err);
  const sharc_plan_model_t *ref = sharc_plan_builtin_model(b);
  const sharc_plan_model_t *pm = sharc_plan_units_model(u);
  EXPECT(pm->model->nunits == 13 && pm->model->nstages == 14,
         "%d units, %d stages", pm->model->nunits, pm->model->nstages);
  EXPECT(pm->tokens_per_sample == 1024, "tokens %g", pm->tokens_per_sample);
  int n = compare(ref, pm);
  printf("ok   %s: %d configurations predicted as gpt:gpt2-124m predicts "
         "them\n",
         path, n);
  /* one of them printed: FULL_SHARD, 8 GPUs, bf16, batch 8 */
  sharc_plan_cluster_t cl;
  sharc_plan_cluster_default(&cl);
  sharc_plan_batch_t bt = {8, 1};
  sharc_shard_config_t cfg;
  sharc_shard_config_default(&cfg);
  cfg.strategy = SHARC_FULL_SHARD;
  cfg.param_dtype = SHARC_BF16;
  cfg.optim.kind = SHARC_OPTIM_ADAMW;
  sharc_plan_result_t ra, rb;
  if (sharc_plan_predict(ref, &cl, &bt, &cfg, &ra, err, 512) == SHARC_OK &&
      sharc_plan_predict(pm, &cl, &bt, &cfg, &rb, err, 512) == SHARC_OK)
    printf("     full_shard on 8 GPUs, bf16, batch 8: built-in %zu params, "
           "peak %zu B, step %.6f ms; unit list %zu params, peak %zu B, "
           "step %.6f ms\n",
           ra.params, ra.mem.device, ra.t_step * 1e3, rb.params, rb.mem.device,
           rb.t_step * 1e3);
  sharc_plan_builtin_destroy(b);
  sharc_plan_units_destroy(u);
}

int main(void) {
  small_list();
  refusals();
  builtins();
  example();
  printf("test_units: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

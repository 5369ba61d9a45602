/*
 * test_gpt.c - checks the GPT reference model (models/gpt.h) and its
 * byte-token data (models/text.h): the f64 analytic gradients against f64
 * central finite differences, the f32 callbacks run through drive_run
 * against the f64 reference, determinism and micro-batch split invariance,
 * refusal of bad tokens and configurations, and text windows.
 *
 * `test_gpt --bench` times one forward+backward of "tiny" and "small".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "drive.h"
#include "gpt.h"
#include "text.h"
#include "unit/expect.h"

/* ---- helpers ---------------------------------------------------------------
 */

static uint64_t rng_state;

static uint64_t rng(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}

static double unif(void) { return (double)(rng() >> 11) / 9007199254740992.0; }

static gpt_t *make(const gpt_config_t *cfg) {
  gpt_t *g;
  char err[256] = "";
  if (gpt_create(&g, cfg, err, sizeof err) != 0) {
    printf("FAIL gpt_create: %s\n", err);
    exit(1);
  }
  return g;
}

static gpt_config_t preset(const char *name) {
  gpt_config_t c;
  if (gpt_config_preset(name, &c) != 0) {
    printf("FAIL preset %s\n", name);
    exit(1);
  }
  return c;
}

/* Tokens x and targets y, (n,T) each, in [0, V). */
static void random_batch(int32_t *x, int32_t *y, int n, int T, int V) {
  for (int i = 0; i < n * T; i++) {
    x[i] = (int32_t)(rng() % (uint64_t)V);
    y[i] = (int32_t)(rng() % (uint64_t)V);
  }
}

/* Moves every parameter off its initial value (LayerNorm gains 1, biases
 * 0, weak attention) so every path of the backward carries gradient. */
static void perturb(drive_t *d) {
  const sharc_model_t *m = d->m;
  for (int u = 0; u < m->nunits; u++)
    for (int k = 0; k < m->units[u].nparams; k++) {
      const sharc_param_spec_t *p = &m->units[u].params[k];
      size_t cnt = p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
      float amp = p->ndim == 2 ? 0.05f : 0.2f, *t = drive_tensor(d, u, k, 0);
      for (size_t i = 0; i < cnt; i++)
        t[i] += amp * (float)(2 * unif() - 1);
    }
}

static size_t tensor_numel(const sharc_param_spec_t *p) {
  size_t c = 1;
  for (int i = 0; i < p->ndim; i++)
    c *= p->shape[i];
  return c;
}

static size_t tensor_offset(const sharc_unit_spec_t *u, int k) {
  size_t off = 0;
  for (int j = 0; j < k; j++)
    off += tensor_numel(&u->params[j]);
  return off;
}

/* f64 copies of the drive's parameters, and zeroed f64 gradients. */
static void to_f64(drive_t *d, double ***p, double ***gr) {
  int nu = d->m->nunits;
  *p = calloc((size_t)nu, sizeof **p);
  *gr = calloc((size_t)nu, sizeof **gr);
  for (int u = 0; u < nu; u++) {
    (*p)[u] = malloc(d->numel[u] * sizeof(double));
    (*gr)[u] = calloc(d->numel[u], sizeof(double));
    for (size_t i = 0; i < d->numel[u]; i++)
      (*p)[u][i] = d->params[u][i];
  }
}

static void free_f64(int nu, double **p, double **gr) {
  for (int u = 0; u < nu; u++)
    free(p[u]), free(gr[u]);
  free(p), free(gr);
}

/* max |a - b| / max |b| over one tensor (b the reference). */
static double tensor_rel(const float *a, const double *b, size_t cnt) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < cnt; i++) {
    num = fmax(num, fabs((double)a[i] - b[i]));
    den = fmax(den, fabs(b[i]));
  }
  return num / den;
}

static double tensor_rel_f32(const float *a, const float *b, size_t cnt) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < cnt; i++) {
    num = fmax(num, fabs((double)a[i] - (double)b[i]));
    den = fmax(den, fabs((double)b[i]));
  }
  return num / den;
}

/* ---- (1) f64 gradients against finite differences ------------------------ */

/* Samples of every tensor of every unit: the first and last element and
 * random ones, plus (for wte) the rows of tokens that occur in x, which
 * get gradient from both the embedding and the head. */
static void check_fd(const char *label, const gpt_config_t *cfg, int samples) {
  gpt_t *g = make(cfg);
  const sharc_model_t *m = gpt_model(g);
  drive_t d;
  EXPECT(drive_init(&d, m, 7) == 0, "%s: drive_init", label);
  perturb(&d);
  double **p, **gr;
  to_f64(&d, &p, &gr);
  int n = 2, global_n = 3, T = cfg->ctx, C = cfg->channels;
  int32_t *x = malloc(sizeof(int32_t) * (size_t)(n * T));
  int32_t *y = malloc(sizeof(int32_t) * (size_t)(n * T));
  random_batch(x, y, n, T, cfg->vocab);
  double J;
  EXPECT(gpt_loss_grad_f64(g, (const double *const *)p, gr, x, y, n, global_n,
                           &J) == 0,
         "%s: f64 reference", label);
  EXPECT(J > 0 && isfinite(J), "%s: loss %g", label, J);
  const double h = 1e-5, floor_ = 1e-4;
  double worst = 0;
  int checked = 0;
  for (int u = 0; u < m->nunits; u++)
    for (int k = 0; k < m->units[u].nparams; k++) {
      const sharc_param_spec_t *ps = &m->units[u].params[k];
      size_t cnt = tensor_numel(ps), off = tensor_offset(&m->units[u], k);
      int extra = (u == 0 && k == 0) ? 4 : 0; /* wte rows of x's tokens */
      for (int s = 0; s < samples + extra; s++) {
        size_t i = s == 0         ? 0
                   : s == 1       ? cnt - 1
                   : s >= samples ? (size_t)x[s - samples] * (size_t)C +
                                        (size_t)(rng() % (uint64_t)C)
                                  : (size_t)(rng() % cnt);
        double *w = &p[u][off + i], keep = *w, jp, jm;
        *w = keep + h;
        gpt_loss_grad_f64(g, (const double *const *)p, NULL, x, y, n, global_n,
                          &jp);
        *w = keep - h;
        gpt_loss_grad_f64(g, (const double *const *)p, NULL, x, y, n, global_n,
                          &jm);
        *w = keep;
        double fd = (jp - jm) / (2 * h), an = gr[u][off + i];
        double rel = fabs(an - fd) / fmax(fmax(fabs(an), fabs(fd)), floor_);
        worst = fmax(worst, rel);
        checked++;
        EXPECT(rel < 1e-5, "%s: %s.%s[%zu]: analytic %.10g vs fd %.10g", label,
               m->units[u].name, ps->name, i, an, fd);
      }
    }
  printf("%s: %d gradient elements vs finite differences, worst relative "
         "error %.2e (loss %.6f)\n",
         label, checked, worst, J);
  free(x), free(y);
  free_f64(m->nunits, p, gr);
  drive_free(&d);
  gpt_destroy(g);
}

/* ---- (2) f32 callbacks against the f64 reference --------------------------
 */

static void check_f32(const char *label, const gpt_config_t *cfg) {
  gpt_t *g = make(cfg);
  const sharc_model_t *m = gpt_model(g);
  drive_t d;
  EXPECT(drive_init(&d, m, 11) == 0, "%s: drive_init", label);
  perturb(&d);
  double **p, **gr;
  to_f64(&d, &p, &gr);
  int n = 2, global_n = 3, T = cfg->ctx;
  int32_t x[2 * 64], y[2 * 64];
  random_batch(x, y, n, T, cfg->vocab);
  double J, stats[SHARC_STAGE_STATS];
  gpt_loss_grad_f64(g, (const double *const *)p, gr, x, y, n, global_n, &J);
  sharc_batch_t b = {.n = n, .global_n = global_n, .x = x, .y = y};
  EXPECT(drive_run(&d, &b, 1, stats) == 0, "%s: drive_run", label);
  double lrel = fabs(stats[0] / global_n - J) / J;
  EXPECT(lrel < 1e-5, "%s: f32 loss %.9g vs f64 %.9g", label,
         stats[0] / global_n, J);
  EXPECT(stats[1] >= 0 && stats[1] <= n * T && stats[1] == floor(stats[1]),
         "%s: correct count %g", label, stats[1]);
  double worst = 0;
  for (int u = 0; u < m->nunits; u++)
    for (int k = 0; k < m->units[u].nparams; k++) {
      const sharc_param_spec_t *ps = &m->units[u].params[k];
      size_t off = tensor_offset(&m->units[u], k);
      double rel =
          tensor_rel(drive_tensor(&d, u, k, 1), gr[u] + off, tensor_numel(ps));
      worst = fmax(worst, rel);
      EXPECT(rel < 1e-4, "%s: f32 %s.%s gradient off by %.2e", label,
             m->units[u].name, ps->name, rel);
    }
  printf("%s: f32 vs f64: loss %.2e, worst gradient tensor %.2e\n", label, lrel,
         worst);
  free_f64(m->nunits, p, gr);
  drive_free(&d);
  gpt_destroy(g);
}

/* The second statistic, correct predictions: the target that minimises a
 * position's loss is its argmax (y does not reach the activations), so the
 * f64 reference finds each argmax; targets set to half of them must count
 * exactly that many. */
static void check_correct(const char *label, const gpt_config_t *cfg) {
  gpt_t *g = make(cfg);
  const sharc_model_t *m = gpt_model(g);
  drive_t d;
  EXPECT(drive_init(&d, m, 5) == 0, "%s: drive_init", label);
  perturb(&d);
  double **p, **gr;
  to_f64(&d, &p, &gr);
  int T = cfg->ctx, V = cfg->vocab, expect = 0;
  int32_t *x = malloc(sizeof(int32_t) * (size_t)T);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)T);
  random_batch(x, y, 1, T, V);
  for (int t = 0; t < T; t++) {
    double best = INFINITY, J;
    int am = 0;
    for (int v = 0; v < V; v++) {
      y[t] = v;
      gpt_loss_grad_f64(g, (const double *const *)p, NULL, x, y, 1, 1, &J);
      if (J < best)
        best = J, am = v;
    }
    y[t] = t % 2 ? am : (am + 1 + (int)(rng() % (uint64_t)(V - 1))) % V;
    expect += t % 2;
  }
  double st[2];
  sharc_batch_t b = {.n = 1, .global_n = 1, .x = x, .y = y};
  EXPECT(drive_run(&d, &b, 0, st) == 0 && st[1] == expect,
         "%s: %g correct predictions, expected %d", label, st[1], expect);
  free(x), free(y);
  free_f64(m->nunits, p, gr);
  drive_free(&d);
  gpt_destroy(g);
}

/* ---- (3) determinism and micro-batch split ------------------------------- */

static float **snapshot(drive_t *d) {
  float **s = calloc((size_t)d->m->nunits, sizeof *s);
  for (int u = 0; u < d->m->nunits; u++) {
    s[u] = malloc(d->numel[u] * sizeof(float));
    memcpy(s[u], d->grads[u], d->numel[u] * sizeof(float));
  }
  return s;
}

static void free_snapshot(int nu, float **s) {
  for (int u = 0; u < nu; u++)
    free(s[u]);
  free(s);
}

static void check_split(const char *label, const gpt_config_t *cfg) {
  gpt_t *g = make(cfg);
  const sharc_model_t *m = gpt_model(g);
  drive_t d;
  EXPECT(drive_init(&d, m, 3) == 0, "%s: drive_init", label);
  perturb(&d);
  int T = cfg->ctx;
  int32_t *x = malloc(sizeof(int32_t) * (size_t)(4 * T));
  int32_t *y = malloc(sizeof(int32_t) * (size_t)(4 * T));
  random_batch(x, y, 4, T, cfg->vocab);
  double s1[2], s2[2], a[2], c[2];
  sharc_batch_t all = {.n = 4, .global_n = 4, .x = x, .y = y};
  /* twice the same: bit-identical statistics and gradients */
  drive_zero_grads(&d);
  EXPECT(drive_run(&d, &all, 1, s1) == 0, "%s: run", label);
  float **g1 = snapshot(&d);
  drive_zero_grads(&d);
  EXPECT(drive_run(&d, &all, 1, s2) == 0, "%s: run again", label);
  EXPECT(memcmp(s1, s2, sizeof s1) == 0, "%s: stats %.17g vs %.17g", label,
         s1[0], s2[0]);
  int same = 1;
  for (int u = 0; u < m->nunits; u++)
    same &= memcmp(g1[u], d.grads[u], d.numel[u] * sizeof(float)) == 0;
  EXPECT(same, "%s: gradients differ between identical runs", label);
  /* [0,4) against [0,2) + [2,4), accumulated */
  sharc_batch_t lo = {.n = 2, .global_n = 4, .x = x, .y = y};
  sharc_batch_t hi = {.n = 2, .global_n = 4, .x = x + 2 * T, .y = y + 2 * T};
  drive_zero_grads(&d);
  EXPECT(drive_run(&d, &lo, 1, a) == 0, "%s: run [0,2)", label);
  EXPECT(drive_run(&d, &hi, 1, c) == 0, "%s: run [2,4)", label);
  EXPECT(fabs(a[0] + c[0] - s1[0]) <= 1e-6 * s1[0] && a[1] + c[1] == s1[1],
         "%s: split stats %.9g + %.9g vs %.9g", label, a[0], c[0], s1[0]);
  double worst = 0;
  for (int u = 0; u < m->nunits; u++)
    for (int k = 0; k < m->units[u].nparams; k++) {
      size_t off = tensor_offset(&m->units[u], k);
      double rel = tensor_rel_f32(drive_tensor(&d, u, k, 1), g1[u] + off,
                                  tensor_numel(&m->units[u].params[k]));
      worst = fmax(worst, rel);
      EXPECT(rel < 1e-6, "%s: split %s.%s off by %.2e", label, m->units[u].name,
             m->units[u].params[k].name, rel);
    }
  printf("%s: deterministic; split [0,2)+[2,4) vs [0,4): worst %.2e\n", label,
         worst);
  free_snapshot(m->nunits, g1);
  free(x), free(y);
  drive_free(&d);
  gpt_destroy(g);
}

/* ---- (4) bad input and bad configurations -----------------------------------
 */

static void check_refusals(void) {
  gpt_config_t cfg = preset("tiny");
  gpt_t *g = make(&cfg);
  const sharc_model_t *m = gpt_model(g);
  drive_t d;
  EXPECT(drive_init(&d, m, 1) == 0, "drive_init");
  int T = cfg.ctx;
  int32_t x[2 * 16], y[2 * 16];
  double st[2] = {-1, -1}, J;
  random_batch(x, y, 2, T, cfg.vocab);
  sharc_batch_t b = {.n = 2, .global_n = 2, .x = x, .y = y};
  static const int32_t bad[] = {256, -1, INT32_MAX, INT32_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int32_t keep = x[5];
    x[5] = bad[i];
    EXPECT(drive_run(&d, &b, 1, st) != 0, "token %d accepted", bad[i]);
    x[5] = keep;
    keep = y[T + 3];
    y[T + 3] = bad[i];
    EXPECT(drive_run(&d, &b, 1, st) != 0, "target %d accepted", bad[i]);
    y[T + 3] = keep;
  }
  /* the f64 reference refuses them too */
  double **p, **gr;
  to_f64(&d, &p, &gr);
  x[0] = 256;
  EXPECT(gpt_loss_grad_f64(g, (const double *const *)p, gr, x, y, 2, 2, &J) !=
             0,
         "f64: token 256 accepted");
  x[0] = 1;
  EXPECT(gpt_loss_grad_f64(g, NULL, NULL, x, y, 2, 2, &J) != 0,
         "f64: NULL params accepted");
  EXPECT(gpt_loss_grad_f64(g, (const double *const *)p, gr, x, y, 2, 0, &J) !=
             0,
         "f64: global_n 0 accepted");
  EXPECT(gpt_loss_grad_f64(g, (const double *const *)p, gr, x, y, 0, 2, &J) ==
                 0 &&
             J == 0,
         "f64: n = 0");
  free_f64(m->nunits, p, gr);
  /* n = 0: nothing to do, zero statistics */
  sharc_batch_t empty = {.n = 0, .global_n = 4, .x = x, .y = y};
  st[0] = st[1] = -1;
  EXPECT(drive_run(&d, &empty, 1, st) == 0 && st[0] == 0 && st[1] == 0,
         "n = 0: stats %g %g", st[0], st[1]);
  drive_free(&d);
  gpt_destroy(g);

  static const struct {
    gpt_config_t cfg;
    const char *says; /* a word the message must contain */
  } bad_cfg[] = {
      {{256, 16, 2, 3, 32}, "divisible"}, {{0, 16, 2, 2, 32}, "vocab"},
      {{256, 0, 2, 2, 32}, "ctx"},        {{256, 16, -1, 2, 32}, "layers"},
      {{256, 16, 2, 0, 32}, "heads"},     {{256, 16, 2, 2, 0}, "channels"},
      {{256, 1 << 20, 2, 2, 32}, "ctx"},
  };
  for (size_t i = 0; i < sizeof bad_cfg / sizeof bad_cfg[0]; i++) {
    char err[256] = "";
    gpt_t *bg = (gpt_t *)1;
    EXPECT(gpt_create(&bg, &bad_cfg[i].cfg, err, sizeof err) != 0 && bg == NULL,
           "config %zu accepted", i);
    EXPECT(strstr(err, bad_cfg[i].says) != NULL, "config %zu: message '%s'", i,
           err);
  }
  gpt_config_t c;
  EXPECT(gpt_config_preset("huge", &c) == -1, "unknown preset accepted");
  EXPECT(gpt_config_preset(NULL, &c) == -1, "NULL preset accepted");
  EXPECT(gpt_config_preset("gpt2", &c) == 0 && c.vocab == 50257 &&
             c.ctx == 1024 && c.layers == 12 && c.heads == 12 &&
             c.channels == 768,
         "gpt2 preset");
  gpt_t *g2 = make(&c);
  EXPECT(gpt_num_params(g2) == 124439808, "gpt2 has %zu parameters",
         gpt_num_params(g2));
  EXPECT(gpt_model(g2)->nstages == 14 && gpt_model(g2)->nunits == 13 &&
             gpt_model(g2)->stages[13].unit == 0,
         "gpt2 stages");
  /* declared shapes, initialisation and weight-decay groups */
  const sharc_model_t *m2 = gpt_model(g2);
  int specs_ok = 1;
  for (int u = 0; u < m2->nunits; u++)
    for (int k = 0; k < m2->units[u].nparams; k++) {
      const sharc_param_spec_t *ps = &m2->units[u].params[k];
      int is_w = ps->ndim == 2, is_ln = strstr(ps->name, "ln") != NULL;
      specs_ok &= ps->no_decay == !is_w;
      specs_ok &= is_w ? ps->init == SHARC_INIT_NORMAL && ps->init_scale > 0
                  : is_ln && strstr(ps->name, "weight")
                      ? ps->init == SHARC_INIT_ONES
                      : ps->init == SHARC_INIT_ZEROS;
      if (strstr(ps->name, "proj.weight"))
        specs_ok &= fabs(ps->init_scale - 0.02 / sqrt(24.0)) < 1e-12;
    }
  EXPECT(specs_ok, "gpt2: parameter specs");
  EXPECT(m2->out_bytes(m2->ctx, 0, 3) == 3 * 1024 * 768 * sizeof(float) &&
             m2->out_bytes(m2->ctx, 5, 0) == 0 &&
             m2->saved_bytes(m2->ctx, 0, 3) == 0 &&
             m2->saved_bytes(m2->ctx, 13, 1) >=
                 (size_t)1024 * 50257 * sizeof(float),
         "gpt2: buffer sizes");
  gpt_destroy(g2);
}

/* ---- (5) text windows -------------------------------------------------------
 */

static void write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len) {
    printf("FAIL cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

static void check_text(void) {
  char path[] = "/tmp/test_gpt_textXXXXXX";
  int fd = mkstemp(path);
  EXPECT(fd >= 0, "mkstemp");
  if (fd < 0)
    return;
  close(fd);
  enum { LEN = 1000, T = 16 };
  uint8_t buf[LEN];
  for (int i = 0; i < LEN; i++)
    buf[i] = (uint8_t)(rng() >> 56);
  write_file(path, buf, LEN);
  text_t t;
  char err[512] = "";
  EXPECT(text_load(path, &t, err, sizeof err) == 0 && t.len == LEN, "load: %s",
         err);
  EXPECT(memcmp(t.bytes, buf, LEN) == 0, "load: bytes differ");
  EXPECT(text_check(&t, T, err, sizeof err) == 0, "check T=16: %s", err);
  EXPECT(text_windows(&t, T) == LEN - T, "windows %llu",
         (unsigned long long)text_windows(&t, T));
  err[0] = 0;
  EXPECT(text_check(&t, LEN, err, sizeof err) != 0 && strstr(err, path),
         "check T=LEN: '%s'", err);
  EXPECT(text_check(&t, LEN - 1, err, sizeof err) == 0, "check T=LEN-1");

  int32_t x[T], y[T], x2[T], y2[T];
  size_t lo = LEN, hi = 0;
  int ok = 1;
  for (uint64_t i = 0; i < 4000; i++) {
    text_window(&t, T, 42, i, x, y);
    /* the window is the file's bytes at some in-bounds start */
    size_t s = 0;
    while (s + T < LEN &&
           !(x[0] == buf[s] && x[1] == buf[s + 1] &&
             x[T - 1] == buf[s + T - 1] && y[T - 1] == buf[s + T]))
      s++;
    for (int j = 0; j < T && s + T < LEN; j++)
      ok &= x[j] == buf[s + j] && y[j] == buf[s + j + 1];
    ok &= s + T < LEN;
    lo = s < lo ? s : lo, hi = s > hi ? s : hi;
    text_window(&t, T, 42, i, x2, y2);
    ok &= memcmp(x, x2, sizeof x) == 0 && memcmp(y, y2, sizeof y) == 0;
  }
  EXPECT(ok, "windows: out of place or not deterministic");
  EXPECT(lo < LEN / 20 && hi > LEN - T - 1 - LEN / 20,
         "starts span [%zu, %zu] of [0, %d]", lo, hi, LEN - T - 1);
  text_window(&t, T, 42, 7, x, y);
  text_window(&t, T, 43, 7, x2, y2);
  EXPECT(memcmp(x, x2, sizeof x) != 0, "seed does not change the window");
  /* a batch is its windows */
  int32_t bx[3 * T], by[3 * T];
  text_batch(&t, T, 5, 100, 3, bx, by);
  text_window(&t, T, 5, 102, x, y);
  EXPECT(memcmp(bx + 2 * T, x, sizeof x) == 0 &&
             memcmp(by + 2 * T, y, sizeof y) == 0,
         "text_batch sample 2 is not window 102");
  /* one window only: T = LEN-1 starts at 0 */
  int32_t *wx = malloc(sizeof(int32_t) * (LEN - 1));
  int32_t *wy = malloc(sizeof(int32_t) * (LEN - 1));
  text_window(&t, LEN - 1, 9, 12345, wx, wy);
  EXPECT(wx[0] == buf[0] && wy[LEN - 2] == buf[LEN - 1], "single window");
  free(wx), free(wy);
  /* shorter than the window (text_check refused it): wraps around */
  uint8_t five[5] = {1, 2, 3, 4, 5};
  text_t shortt = {.len = 5, .bytes = five};
  int wrap = 1;
  for (uint64_t i = 0; i < 50; i++) {
    text_window(&shortt, T, 1, i, x, y);
    for (int j = 0; j < T; j++)
      wrap &= x[j] >= 1 && x[j] <= 5 && y[j] == x[j] % 5 + 1;
  }
  EXPECT(wrap, "short text does not wrap");
  text_free(&t);
  EXPECT(t.bytes == NULL && t.len == 0 && t.path == NULL, "text_free");

  /* errors name the file */
  err[0] = 0;
  EXPECT(text_load("/nonexistent/sharc.txt", &t, err, sizeof err) != 0 &&
             strstr(err, "/nonexistent/sharc.txt"),
         "missing file: '%s'", err);
  text_free(&t);
  write_file(path, "a", 1);
  err[0] = 0;
  EXPECT(text_load(path, &t, err, sizeof err) != 0 && strstr(err, path),
         "1-byte file: '%s'", err);
  /* the held-out split: training windows never read its bytes, the
   * evaluation windows tile it, each held-out byte predicted once */
  text_free(&t);
  write_file(path, buf, LEN);
  EXPECT(text_load(path, &t, err, sizeof err) == 0, "reload: %s", err);
  EXPECT(text_holdout(&t, 0.1, T, err, sizeof err) == 0 &&
             t.train_len == LEN - LEN / 10,
         "holdout 0.1: train_len %zu: %s", t.train_len, err);
  size_t tl = t.train_len;
  EXPECT(text_windows(&t, T) == tl - T, "training windows %llu",
         (unsigned long long)text_windows(&t, T));
  int leaked = 0;
  for (uint64_t i = 0; i < 2000; i++) {
    int32_t x[T], y[T];
    text_window(&t, T, 7, i, x, y);
    /* the window's bytes are a run of the training part: find it there */
    int found = 0;
    for (size_t at = 0; at + T < tl && !found; at++) {
      int same = 1;
      for (int k = 0; k < T && same; k++)
        same = x[k] == buf[at + k] && y[k] == buf[at + k + 1];
      found = same;
    }
    leaked += !found;
  }
  EXPECT(leaked == 0, "%d of 2000 training windows are not in [0, %zu)", leaked,
         tl);
  uint64_t ne = text_eval_windows(&t, T);
  EXPECT(ne == (LEN - tl - 1) / T, "eval windows %llu", (unsigned long long)ne);
  for (uint64_t i = 0; i < ne; i++) {
    int32_t x[T], y[T];
    text_eval_window(&t, T, i, x, y);
    size_t at = tl + (size_t)i * T;
    for (int k = 0; k < T; k++)
      EXPECT(x[k] == buf[at + k] && y[k] == buf[at + k + 1],
             "eval window %llu token %d", (unsigned long long)i, k);
  }
  EXPECT(text_holdout(&t, 0, T, err, sizeof err) == 0 && t.train_len == LEN,
         "holdout 0 keeps the whole text");
  /* too short for a window on each side: refused, naming the file */
  err[0] = 0;
  EXPECT(text_holdout(&t, 0.99, T, err, sizeof err) != 0 && strstr(err, path),
         "holdout 0.99: '%s'", err);
  text_free(&t);
  write_file(path, "", 0);
  err[0] = 0;
  EXPECT(text_load(path, &t, err, sizeof err) != 0 && strstr(err, path),
         "empty file: '%s'", err);
  text_free(&t);
  unlink(path);
}

/* ---- bench ------------------------------------------------------------------
 */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench(void) {
  static const char *names[] = {"tiny", "small"};
  int n = 8;
  printf("best of >= 5 runs (drive_run: buffers allocated per call)\n");
  printf("%-6s %3s %10s %14s %14s\n", "model", "n", "params", "fwd ms",
         "fwd+bwd ms");
  for (int i = 0; i < 2; i++) {
    gpt_config_t cfg = preset(names[i]);
    gpt_t *g = make(&cfg);
    drive_t d;
    if (drive_init(&d, gpt_model(g), 1) != 0)
      return 1;
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(n * cfg.ctx));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)(n * cfg.ctx));
    random_batch(x, y, n, cfg.ctx, cfg.vocab);
    sharc_batch_t b = {.n = n, .global_n = n, .x = x, .y = y};
    double st[2], t[2];
    for (int bwd = 0; bwd < 2; bwd++) {
      drive_run(&d, &b, bwd, st); /* warm up */
      /* the fastest of at least 5 runs and 1 s: other load only adds */
      double start = now_s(), best = INFINITY;
      for (int it = 0; it < 5 || now_s() - start < 1.0; it++) {
        double t0 = now_s();
        drive_run(&d, &b, bwd, st);
        best = fmin(best, now_s() - t0);
      }
      t[bwd] = best * 1e3;
    }
    printf("%-6s %3d %10zu %14.3f %14.3f\n", names[i], n, gpt_num_params(g),
           t[0], t[1]);
    free(x), free(y);
    drive_free(&d);
    gpt_destroy(g);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--bench") == 0)
    return bench();
  rng_state = 0x9E3779B97F4A7C15ULL;
  gpt_config_t tiny = preset("tiny");
  /* odd sizes: T and C not multiples of 16, three heads, one layer */
  gpt_config_t odd = {
      .vocab = 37, .ctx = 5, .layers = 1, .heads = 3, .channels = 12};
  check_fd("tiny", &tiny, 24);
  check_fd("odd", &odd, 24);
  check_f32("tiny", &tiny);
  check_f32("odd", &odd);
  check_correct("tiny", &tiny);
  check_correct("odd", &odd);
  check_split("tiny", &tiny);
  check_split("odd", &odd);
  check_refusals();
  check_text();
  if (failed) {
    printf("test_gpt: %d of %d checks FAILED\n", failed, passed + failed);
    return 1;
  }
  printf("test_gpt: %d checks passed\n", passed);
  return 0;
}

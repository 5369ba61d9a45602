/*
 * test_cnn.c - checks the reference CNN (models/cnn.c):
 *  1. f64 analytic gradients against f64 central finite differences, for a
 *     sample of elements of every tensor, on a batch of 3 samples of a
 *     global batch of 5 (the 1/global_n normalisation), dropout on and off;
 *     the step is halved until two estimates agree (a ReLU sign or pool
 *     argmax change inside the step makes them differ; elements that never
 *     settle are redrawn and counted); the error is relative to
 *     max(|analytic|, |numeric|, 1e-4), the floor keeping the f64 roundoff
 *     of the difference quotient (~1e-10) below the 1e-5 tolerance;
 *  2. the f32 callbacks run by drive_run against the f64 reference: loss,
 *     statistics and every gradient tensor;
 *  3. statistics: with fc2's weight zeroed the logits are its bias, so the
 *     NLL sum and correct count are known in closed form; n = 0 yields
 *     zeros; a label out of range fails;
 *  4. determinism and split invariance: forward twice is bit-identical,
 *     samples [0,4) as one micro-batch or as [0,2) + [2,4) give the same
 *     masks, statistics and summed gradients; dropout drops about p, scales
 *     by 1/(1-p), changes with the step and is off in evaluation.
 *
 * `test_cnn --bench [n]` times forward + backward of n samples (default
 * 64) in f32 instead (not part of the test).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnn.h"
#include "drive.h"
#include "unit/expect.h"

#define SEED 20240611ull
#define PIX (CNN_IMAGE_H * CNN_IMAGE_W)

static uint64_t rng_state = 0x9b05688c2b3e6c1full;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Random images normalised as Fashion-MNIST's, random labels. */
static void make_batch(float *x, int32_t *y, int n) {
  for (int i = 0; i < n * PIX; i++)
    x[i] = (float)(((double)(rnd() % 256) / 255.0 - 0.2860) / 0.3530);
  for (int i = 0; i < n; i++)
    y[i] = (int32_t)(rnd() % CNN_CLASSES);
}

static double *to_f64(const float *a, size_t n) {
  double *d = malloc(n * sizeof *d);
  for (size_t i = 0; i < n; i++)
    d[i] = a[i];
  return d;
}

/* The f64 copy of a drive's parameters and zeroed f64 gradients. */
typedef struct {
  double *p[CNN_UNITS], *g[CNN_UNITS];
  size_t numel[CNN_UNITS], bias_off[CNN_UNITS];
} ref_t;

static void ref_init(ref_t *r, drive_t *d) {
  for (int u = 0; u < CNN_UNITS; u++) {
    r->numel[u] = d->numel[u];
    r->bias_off[u] = (size_t)(drive_tensor(d, u, 1, 0) - d->params[u]);
    r->p[u] = to_f64(d->params[u], d->numel[u]);
    r->g[u] = calloc(d->numel[u], sizeof(double));
  }
}

static void ref_free(ref_t *r) {
  for (int u = 0; u < CNN_UNITS; u++) {
    free(r->p[u]);
    free(r->g[u]);
  }
}

static const char *tensor_name(const sharc_model_t *m, int u, int k) {
  return m->units[u].params[k].name;
}

/* ---- 1. f64 gradient check ------------------------------------------------
 */

typedef struct {
  const cnn_t *c;
  const float *x;
  const int32_t *y;
  int n, global_n, training;
  uint64_t first, step;
} fd_batch_t;

static double loss_at(const fd_batch_t *b, ref_t *r) {
  return cnn_loss_grad_f64(b->c, (const double *const *)r->p, NULL, b->x, b->y,
                           b->n, b->global_n, b->first, b->step, b->training,
                           NULL);
}

static double central(const fd_batch_t *b, ref_t *r, int u, size_t i,
                      double h) {
  double v = r->p[u][i];
  r->p[u][i] = v + h;
  double lp = loss_at(b, r);
  r->p[u][i] = v - h;
  double lm = loss_at(b, r);
  r->p[u][i] = v;
  return (lp - lm) / (2 * h);
}

static void test_gradcheck(int dropout, int training) {
  enum { N = 3, GLOBAL_N = 5, PER_TENSOR = 7 };
  const double h = 4e-6, tol = 1e-5, floor_abs = 1e-4;
  cnn_t *c;
  drive_t d;
  ref_t r;
  float x[N * PIX];
  int32_t y[N];
  EXPECT(cnn_create(&c, SEED, dropout) == 0, "cnn_create");
  EXPECT(drive_init(&d, cnn_model(c), SEED) == 0, "drive_init");
  ref_init(&r, &d);
  make_batch(x, y, N);
  fd_batch_t b = {c, x, y, N, GLOBAL_N, training, 7, 11};
  double st[SHARC_STAGE_STATS];
  double loss = cnn_loss_grad_f64(c, (const double *const *)r.p, r.g, x, y, N,
                                  GLOBAL_N, b.first, b.step, training, st);
  EXPECT(isfinite(loss) && loss > 0, "loss %g", loss);
  EXPECT(fabs(loss * GLOBAL_N - st[0]) <= 1e-12 * st[0],
         "loss %.17g is not the NLL sum %.17g / %d", loss, st[0], GLOBAL_N);
  int checked = 0, skipped = 0;
  double worst = 0;
  for (int u = 0; u < CNN_UNITS; u++)
    for (int k = 0; k < 2; k++) {
      size_t lo = k ? r.bias_off[u] : 0, hi = k ? r.numel[u] : r.bias_off[u];
      for (int t = 0, tries = 0; t < PER_TENSOR && tries < 4 * PER_TENSOR;
           tries++) {
        size_t i = lo + (tries == 0 ? 0 : rnd() % (hi - lo));
        /* halve the step until two estimates agree: a kink (ReLU sign or
         * pool argmax change) inside the step makes them differ */
        double hs = h, f1 = central(&b, &r, u, i, hs), f2 = 0;
        int stable = 0;
        for (int halving = 0; halving < 3 && !stable; halving++) {
          hs /= 2;
          f2 = central(&b, &r, u, i, hs);
          stable =
              fabs(f1 - f2) <= tol * fmax(fmax(fabs(f1), fabs(f2)), floor_abs);
          f1 = f2;
        }
        if (!stable) {
          skipped++;
          continue;
        }
        double a = r.g[u][i];
        double rel = fabs(a - f2) / fmax(fmax(fabs(a), fabs(f2)), floor_abs);
        if (rel > worst)
          worst = rel;
        EXPECT(rel < tol,
               "dropout %d training %d %s[%zu]: analytic %.12g, finite "
               "difference %.12g (rel %.2g)",
               dropout, training, tensor_name(cnn_model(c), u, k), i - lo, a,
               f2, rel);
        checked++;
        t++;
      }
    }
  EXPECT(skipped <= checked / 4, "%d elements skipped at kinks, %d checked",
         skipped, checked);
  printf("gradcheck dropout %d training %d: %d elements, %d at kinks "
         "redrawn, worst rel error %.2g\n",
         dropout, training, checked, skipped, worst);
  ref_free(&r);
  drive_free(&d);
  cnn_destroy(c);
}

/* ---- 2. f32 callbacks against the f64 reference ----------------------------
 */

static void test_f32_vs_f64(int dropout) {
  enum { N = 3, GLOBAL_N = 5 };
  cnn_t *c;
  drive_t d;
  ref_t r;
  float x[N * PIX];
  int32_t y[N];
  EXPECT(cnn_create(&c, SEED + 1, dropout) == 0, "cnn_create");
  EXPECT(drive_init(&d, cnn_model(c), SEED + 1) == 0, "drive_init");
  ref_init(&r, &d);
  make_batch(x, y, N);
  sharc_batch_t b = {.n = N,
                     .global_n = GLOBAL_N,
                     .x = x,
                     .y = y,
                     .first = 40,
                     .step = 3,
                     .training = 1};
  double s32[SHARC_STAGE_STATS], s64[SHARC_STAGE_STATS];
  EXPECT(drive_run(&d, &b, 1, s32) == 0, "drive_run");
  cnn_loss_grad_f64(c, (const double *const *)r.p, r.g, x, y, N, GLOBAL_N,
                    b.first, b.step, 1, s64);
  EXPECT(fabs(s32[0] - s64[0]) <= 1e-5 * s64[0], "loss sum f32 %.9g f64 %.9g",
         s32[0], s64[0]);
  EXPECT(s32[1] == s64[1], "correct f32 %g f64 %g", s32[1], s64[1]);
  double worst = 0;
  for (int u = 0; u < CNN_UNITS; u++)
    for (int k = 0; k < 2; k++) {
      size_t lo = k ? r.bias_off[u] : 0, hi = k ? r.numel[u] : r.bias_off[u];
      const float *g32 = d.grads[u];
      double num = 0, den = 0, gmax = 0, emax = 0;
      for (size_t i = lo; i < hi; i++) {
        double e = g32[i] - r.g[u][i];
        num += e * e;
        den += r.g[u][i] * r.g[u][i];
        gmax = fmax(gmax, fabs(r.g[u][i]));
        emax = fmax(emax, fabs(e));
      }
      double rel = sqrt(num / den);
      worst = fmax(worst, rel);
      EXPECT(den > 0 && rel < 1e-4, "dropout %d %s: f32 vs f64 rel %.3g",
             dropout, tensor_name(cnn_model(c), u, k), rel);
      EXPECT(emax <= 1e-4 * gmax,
             "dropout %d %s: largest element error %.3g of max %.3g", dropout,
             tensor_name(cnn_model(c), u, k), emax, gmax);
    }
  printf("f32 vs f64 dropout %d: loss sum %.7f vs %.7f, worst tensor rel "
         "error %.2g\n",
         dropout, s32[0], s64[0], worst);
  ref_free(&r);
  drive_free(&d);
  cnn_destroy(c);
}

/* ---- 3. statistics
 * ------------------------------------------------------------ */

static void test_stats(void) {
  enum { N = 6 };
  cnn_t *c;
  drive_t d;
  ref_t r;
  float x[N * PIX];
  int32_t y[N] = {3, 1, 3, 9, 0, 3}, unused[N];
  make_batch(x, unused, N);
  EXPECT(cnn_create(&c, SEED, 1) == 0, "cnn_create");
  EXPECT(drive_init(&d, cnn_model(c), SEED) == 0, "drive_init");
  /* fc2 weight 0: every logit vector is fc2's bias, argmax class 3 */
  float *w = drive_tensor(&d, 3, 0, 0), *bias = drive_tensor(&d, 3, 1, 0);
  memset(w, 0, CNN_CLASSES * 128 * sizeof(float));
  for (int j = 0; j < CNN_CLASSES; j++)
    bias[j] = (float)(0.1 * j - 0.05 * (j % 3));
  bias[3] = 2.0f;
  ref_init(&r, &d);
  double lse = 0;
  for (int j = 0; j < CNN_CLASSES; j++)
    lse += exp((double)bias[j]);
  lse = log(lse);
  double want_loss = 0, want_correct = 0;
  for (int i = 0; i < N; i++) {
    want_loss += lse - (double)bias[y[i]];
    want_correct += y[i] == 3;
  }
  sharc_batch_t b = {.n = N,
                     .global_n = N,
                     .x = x,
                     .y = y,
                     .first = 0,
                     .step = 0,
                     .training = 1};
  double s32[SHARC_STAGE_STATS], s64[SHARC_STAGE_STATS];
  EXPECT(drive_run(&d, &b, 1, s32) == 0, "drive_run");
  double l64 = cnn_loss_grad_f64(c, (const double *const *)r.p, NULL, x, y, N,
                                 N, 0, 0, 1, s64);
  EXPECT(fabs(s32[0] - want_loss) <= 1e-6 * want_loss,
         "f32 loss sum %.9g, closed form %.9g", s32[0], want_loss);
  EXPECT(fabs(s64[0] - want_loss) <= 1e-12 * want_loss,
         "f64 loss sum %.15g, closed form %.15g", s64[0], want_loss);
  EXPECT(fabs(l64 - want_loss / N) <= 1e-12 * want_loss, "f64 mean %.15g", l64);
  EXPECT(s32[1] == want_correct && s64[1] == want_correct,
         "correct f32 %g f64 %g, expected %g", s32[1], s64[1], want_correct);
  /* the bias gradient of the mean NLL is softmax(b) - mean one-hot */
  for (int j = 0; j < CNN_CLASSES; j++) {
    double pj = exp((double)bias[j] - lse), cnt = 0;
    for (int i = 0; i < N; i++)
      cnt += y[i] == j;
    double want = pj - cnt / N, got = drive_tensor(&d, 3, 1, 1)[j];
    EXPECT(fabs(got - want) <= 1e-6, "fc2.bias grad[%d] %.9g, expected %.9g", j,
           got, want);
  }

  /* n = 0: zeros, nothing accumulated */
  drive_zero_grads(&d);
  sharc_batch_t e = b;
  e.n = 0;
  double s0[SHARC_STAGE_STATS] = {-1, -1};
  EXPECT(drive_run(&d, &e, 1, s0) == 0, "drive_run n = 0");
  EXPECT(s0[0] == 0 && s0[1] == 0, "n = 0 stats %g %g", s0[0], s0[1]);
  int nonzero = 0;
  for (int u = 0; u < CNN_UNITS; u++)
    for (size_t i = 0; i < d.numel[u]; i++)
      nonzero += d.grads[u][i] != 0;
  EXPECT(nonzero == 0, "n = 0 wrote %d gradient elements", nonzero);
  EXPECT(cnn_loss_grad_f64(c, (const double *const *)r.p, NULL, x, y, 0, N, 0,
                           0, 1, s64) == 0,
         "f64 n = 0");

  /* a label outside 0..9 fails both */
  int32_t bad[N] = {3, 1, 10, 9, 0, 3};
  b.y = bad;
  EXPECT(drive_run(&d, &b, 0, s32) != 0, "label 10 accepted by the callbacks");
  EXPECT(isnan(cnn_loss_grad_f64(c, (const double *const *)r.p, NULL, x, bad, N,
                                 N, 0, 0, 1, NULL)),
         "label 10 accepted by the f64 reference");
  bad[2] = -1;
  EXPECT(drive_run(&d, &b, 0, s32) != 0, "label -1 accepted");
  ref_free(&r);
  drive_free(&d);
  cnn_destroy(c);
}

/* ---- 4. determinism, split invariance, dropout -----------------------------
 */

/* Every stage's forward with its own 64-byte aligned buffers. */
typedef struct {
  void *out[CNN_STAGES], *saved[CNN_STAGES];
  size_t out_bytes[CNN_STAGES], saved_bytes[CNN_STAGES];
} fwd_t;

static void *alloc64(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  memset(p, 0xa5, (bytes + 63) / 64 * 64 + 64);
  return p;
}

static int run_forward(drive_t *d, const sharc_batch_t *b, fwd_t *f) {
  const sharc_model_t *m = d->m;
  const float *pp[SHARC_UNIT_MAX_PARAMS];
  int rc = 0;
  for (int s = 0; s < CNN_STAGES; s++) {
    f->out_bytes[s] = m->out_bytes(m->ctx, s, b->n);
    f->saved_bytes[s] = m->saved_bytes(m->ctx, s, b->n);
    f->out[s] = alloc64(f->out_bytes[s]);
    f->saved[s] = alloc64(f->saved_bytes[s]);
  }
  for (int s = 0; s < CNN_STAGES && rc == 0; s++) {
    void *scratch = alloc64(m->scratch_bytes(m->ctx, s, b->n));
    for (int k = 0; k < 2; k++)
      pp[k] = drive_tensor(d, s, k, 0);
    sharc_stage_call_t c = {.stage = s,
                            .unit = s,
                            .kind = m->stages[s].kind,
                            .batch = b,
                            .params = pp,
                            .in = s ? f->out[s - 1] : b->x,
                            .out = f->out[s],
                            .saved = f->saved[s],
                            .scratch = scratch};
    rc = m->forward(m->ctx, &c);
    free(scratch);
  }
  return rc;
}

static void fwd_free(fwd_t *f) {
  for (int s = 0; s < CNN_STAGES; s++) {
    free(f->out[s]);
    free(f->saved[s]);
  }
}

static void test_determinism(void) {
  enum { N = 4 };
  cnn_t *c;
  drive_t d;
  float x[N * PIX];
  int32_t y[N];
  make_batch(x, y, N);
  EXPECT(cnn_create(&c, SEED, 1) == 0, "cnn_create");
  EXPECT(drive_init(&d, cnn_model(c), SEED) == 0, "drive_init");
  sharc_batch_t b = {.n = N,
                     .global_n = N,
                     .x = x,
                     .y = y,
                     .first = 1000,
                     .step = 5,
                     .training = 1};

  /* forward twice: bit-identical outputs and saved tensors */
  fwd_t f1, f2;
  EXPECT(run_forward(&d, &b, &f1) == 0 && run_forward(&d, &b, &f2) == 0,
         "forward");
  for (int s = 0; s < CNN_STAGES; s++) {
    EXPECT(memcmp(f1.out[s], f2.out[s], f1.out_bytes[s]) == 0,
           "stage %d output differs between two forwards", s);
    EXPECT(memcmp(f1.saved[s], f2.saved[s], f1.saved_bytes[s]) == 0,
           "stage %d saved tensors differ between two forwards", s);
  }
  /* forward + backward twice: bit-identical gradients */
  double st1[SHARC_STAGE_STATS], st2[SHARC_STAGE_STATS];
  EXPECT(drive_run(&d, &b, 1, st1) == 0, "drive_run");
  float *g1[CNN_UNITS];
  for (int u = 0; u < CNN_UNITS; u++) {
    g1[u] = malloc(d.numel[u] * sizeof(float));
    memcpy(g1[u], d.grads[u], d.numel[u] * sizeof(float));
  }
  drive_zero_grads(&d);
  EXPECT(drive_run(&d, &b, 1, st2) == 0, "drive_run");
  EXPECT(memcmp(st1, st2, sizeof st1) == 0, "stats differ between runs");
  for (int u = 0; u < CNN_UNITS; u++)
    EXPECT(memcmp(g1[u], d.grads[u], d.numel[u] * sizeof(float)) == 0,
           "unit %d gradients differ between runs", u);

  /* [0,2) + [2,4) as two micro-batches of the same global batch */
  drive_zero_grads(&d);
  sharc_batch_t h0 = b, h1 = b;
  h0.n = h1.n = 2;
  h1.x = x + 2 * PIX;
  h1.y = y + 2;
  h1.first = b.first + 2;
  double sh0[SHARC_STAGE_STATS], sh1[SHARC_STAGE_STATS];
  EXPECT(drive_run(&d, &h0, 1, sh0) == 0 && drive_run(&d, &h1, 1, sh1) == 0,
         "drive_run halves");
  EXPECT(fabs(sh0[0] + sh1[0] - st1[0]) <= 1e-6 * st1[0],
         "split loss sum %.9g, whole %.9g", sh0[0] + sh1[0], st1[0]);
  EXPECT(sh0[1] + sh1[1] == st1[1], "split correct %g, whole %g",
         sh0[1] + sh1[1], st1[1]);
  for (int u = 0; u < CNN_UNITS; u++) {
    double gmax = 0, emax = 0;
    for (size_t i = 0; i < d.numel[u]; i++) {
      gmax = fmax(gmax, fabs(g1[u][i]));
      emax = fmax(emax, fabs((double)g1[u][i] - d.grads[u][i]));
    }
    EXPECT(gmax > 0 && emax <= 1e-6 * gmax,
           "unit %d: split gradients differ by %.3g (max %.3g)", u, emax, gmax);
    free(g1[u]);
  }
  /* the same masks: stage 1 per sample is bit-identical, stage 2 has the
   * same zeros */
  fwd_t q0, q1;
  EXPECT(run_forward(&d, &h0, &q0) == 0 && run_forward(&d, &h1, &q1) == 0,
         "forward halves");
  for (int s = 1; s <= 2; s++) {
    size_t half = f1.out_bytes[s] / 2 / sizeof(float);
    const float *w = f1.out[s], *a = q0.out[s], *bb = q1.out[s];
    int same_zeros = 1;
    double emax = 0, wmax = 0;
    for (size_t i = 0; i < 2 * half; i++) {
      float v = i < half ? a[i] : bb[i - half];
      same_zeros &= (v == 0) == (w[i] == 0);
      emax = fmax(emax, fabs((double)v - w[i]));
      wmax = fmax(wmax, fabs(w[i]));
    }
    EXPECT(same_zeros, "stage %d: dropout/ReLU zeros differ after the split",
           s);
    EXPECT(emax <= 1e-6 * wmax,
           "stage %d: split output differs by %.3g of %.3g", s, emax, wmax);
  }
  EXPECT(memcmp(q0.out[1], f1.out[1], f1.out_bytes[1] / 2) == 0 &&
             memcmp(q1.out[1], (char *)f1.out[1] + f1.out_bytes[1] / 2,
                    f1.out_bytes[1] / 2) == 0,
         "stage 1 output not bit-identical after the split");
  fwd_free(&q0);
  fwd_free(&q1);

  /* dropout: evaluation has none; training drops about p and scales */
  sharc_batch_t ev = b;
  ev.training = 0;
  fwd_t fe, fs;
  EXPECT(run_forward(&d, &ev, &fe) == 0, "forward eval");
  const float *tr = f1.out[1], *evo = fe.out[1];
  size_t n1 = f1.out_bytes[1] / sizeof(float), pos = 0, dropped = 0, bad = 0;
  for (size_t i = 0; i < n1; i++) {
    if (evo[i] == 0) {
      bad += tr[i] != 0;
      continue;
    }
    pos++;
    if (tr[i] == 0)
      dropped++;
    else
      bad += fabs(tr[i] - evo[i] / 0.75) > 1e-6 * fabs(evo[i]);
  }
  double frac1 = (double)dropped / (double)pos;
  EXPECT(bad == 0, "stage 1: %zu kept elements not scaled by 1/(1-p)", bad);
  EXPECT(frac1 > 0.22 && frac1 < 0.28, "stage 1 dropped %.3f, p = 0.25", frac1);
  /* stage 2 in training sees stage 1's dropout, so compare the fraction of
   * zeros against a run without dropout only for p's order */
  const float *t2 = f1.out[2];
  size_t n2 = f1.out_bytes[2] / sizeof(float), z2 = 0, ze = 0;
  for (size_t i = 0; i < n2; i++) {
    z2 += t2[i] == 0;
    ze += ((const float *)fe.out[2])[i] == 0;
  }
  double keep_pos = (double)(n2 - z2) / (double)(n2 - ze);
  EXPECT(keep_pos > 0.3 && keep_pos < 0.7,
         "stage 2 nonzeros in training / in evaluation %.3f, expected ~0.5",
         keep_pos);
  /* another step draws other masks */
  sharc_batch_t other = b;
  other.step = b.step + 1;
  EXPECT(run_forward(&d, &other, &fs) == 0, "forward step+1");
  size_t differ = 0;
  for (size_t i = 0; i < n1; i++)
    differ += (((const float *)fs.out[1])[i] == 0) != (tr[i] == 0);
  EXPECT(differ > n1 / 20, "step + 1 changed only %zu of %zu stage-1 zeros",
         differ, n1);
  fwd_free(&fs);
  fwd_free(&fe);
  /* a model built without dropout ignores training */
  cnn_t *c0;
  EXPECT(cnn_create(&c0, SEED, 0) == 0, "cnn_create");
  drive_t d0;
  EXPECT(drive_init(&d0, cnn_model(c0), SEED) == 0, "drive_init");
  fwd_t f0;
  EXPECT(run_forward(&d0, &b, &f0) == 0 && run_forward(&d, &ev, &fe) == 0,
         "forward no dropout");
  for (int s = 0; s < CNN_STAGES; s++)
    EXPECT(memcmp(f0.out[s], fe.out[s], f0.out_bytes[s]) == 0,
           "stage %d: dropout-free model in training differs from eval", s);
  fwd_free(&f0);
  fwd_free(&fe);
  drive_free(&d0);
  cnn_destroy(c0);

  fwd_free(&f1);
  fwd_free(&f2);
  drive_free(&d);
  cnn_destroy(c);
  printf("determinism: stage 1 dropped %.3f (p 0.25), stage 2 kept %.3f of "
         "positives (p 0.5)\n",
         frac1, keep_pos);
}

static void test_model_spec(void) {
  cnn_t *c;
  EXPECT(cnn_create(&c, 1, 1) == 0, "cnn_create");
  const sharc_model_t *m = cnn_model(c);
  static const size_t numel[CNN_UNITS][2] = {
      {288, 32}, {18432, 64}, {1179648, 128}, {1280, 10}};
  static const double fan_in[CNN_UNITS] = {9, 288, 9216, 128};
  EXPECT(m->nunits == CNN_UNITS && m->nstages == CNN_STAGES,
         "%d units %d stages", m->nunits, m->nstages);
  for (int u = 0; u < CNN_UNITS; u++) {
    EXPECT(m->stages[u].unit == u, "stage %d uses unit %d", u,
           m->stages[u].unit);
    EXPECT(m->units[u].nparams == 2, "unit %d nparams %d", u,
           m->units[u].nparams);
    for (int k = 0; k < 2; k++) {
      const sharc_param_spec_t *p = &m->units[u].params[k];
      size_t e = 1;
      for (int j = 0; j < p->ndim; j++)
        e *= p->shape[j];
      EXPECT(e == numel[u][k], "%s numel %zu, expected %zu", p->name, e,
             numel[u][k]);
      EXPECT(p->init == SHARC_INIT_UNIFORM &&
                 fabs(p->init_scale - 1 / sqrt(fan_in[u])) < 1e-15,
             "%s init %d scale %g", p->name, p->init, p->init_scale);
      EXPECT(p->no_decay == k, "%s no_decay %d", p->name, p->no_decay);
    }
  }
  EXPECT(m->out_bytes(m->ctx, 0, 0) == 0 && m->saved_bytes(m->ctx, 1, 0) == 0 &&
             m->scratch_bytes(m->ctx, 1, 0) == 0,
         "n = 0 needs buffers");
  cnn_destroy(c);
}

/* ---- timing
 * ------------------------------------------------------------------- */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* forward + backward of n samples with preallocated buffers, per stage */
static int bench(int n) {
  cnn_t *c;
  drive_t d;
  if (cnn_create(&c, SEED, 1) != 0 || drive_init(&d, cnn_model(c), SEED) != 0)
    return 1;
  const sharc_model_t *m = cnn_model(c);
  float *x = malloc((size_t)n * PIX * sizeof(float));
  int32_t *y = malloc((size_t)n * sizeof(int32_t));
  make_batch(x, y, n);
  sharc_batch_t b = {.n = n, .global_n = n, .x = x, .y = y, .training = 1};
  void *out[CNN_STAGES], *saved[CNN_STAGES], *scr[CNN_STAGES],
      *grad[CNN_STAGES];
  for (int s = 0; s < CNN_STAGES; s++) {
    out[s] = alloc64(m->out_bytes(m->ctx, s, n));
    saved[s] = alloc64(m->saved_bytes(m->ctx, s, n));
    scr[s] = alloc64(m->scratch_bytes(m->ctx, s, n));
    grad[s] = alloc64(m->out_bytes(m->ctx, s, n));
  }
  double tf[CNN_STAGES] = {0}, tb[CNN_STAGES] = {0};
  const int reps = 5;
  for (int rep = -1; rep < reps; rep++) { /* rep -1 warms up */
    const float *pp[2];
    float *gp[2];
    for (int s = 0; s < CNN_STAGES; s++) {
      pp[0] = drive_tensor(&d, s, 0, 0), pp[1] = drive_tensor(&d, s, 1, 0);
      sharc_stage_call_t call = {.stage = s,
                                 .unit = s,
                                 .batch = &b,
                                 .params = pp,
                                 .in = s ? out[s - 1] : x,
                                 .out = out[s],
                                 .saved = saved[s],
                                 .scratch = scr[s]};
      double t0 = now();
      m->forward(m->ctx, &call);
      if (rep >= 0)
        tf[s] += now() - t0;
    }
    for (int s = CNN_STAGES - 1; s >= 0; s--) {
      pp[0] = drive_tensor(&d, s, 0, 0), pp[1] = drive_tensor(&d, s, 1, 0);
      gp[0] = drive_tensor(&d, s, 0, 1), gp[1] = drive_tensor(&d, s, 1, 1);
      sharc_stage_call_t call = {.stage = s,
                                 .unit = s,
                                 .batch = &b,
                                 .params = pp,
                                 .grads = gp,
                                 .in = s ? out[s - 1] : x,
                                 .out = out[s],
                                 .dout = s == CNN_STAGES - 1 ? NULL : grad[s],
                                 .din = s ? grad[s - 1] : NULL,
                                 .saved = saved[s],
                                 .scratch = scr[s]};
      double t0 = now();
      m->backward(m->ctx, &call);
      if (rep >= 0)
        tb[s] += now() - t0;
    }
  }
  double total = 0;
  printf("cnn f32 forward+backward, %d samples, mean of %d:\n", n, reps);
  for (int s = 0; s < CNN_STAGES; s++) {
    printf("  stage %d %-5s forward %8.2f ms  backward %8.2f ms\n", s,
           m->units[s].name, 1e3 * tf[s] / reps, 1e3 * tb[s] / reps);
    total += tf[s] + tb[s];
  }
  printf("  total %.2f ms per step (%.1f samples/s)\n", 1e3 * total / reps,
         n * reps / total);
  for (int s = 0; s < CNN_STAGES; s++) {
    free(out[s]);
    free(saved[s]);
    free(scr[s]);
    free(grad[s]);
  }
  free(x);
  free(y);
  drive_free(&d);
  cnn_destroy(c);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--bench") == 0)
    return bench(argc > 2 ? atoi(argv[2]) : 64);
  test_model_spec();
  test_gradcheck(1, 1);
  test_gradcheck(0, 1);
  test_gradcheck(1, 0);
  test_f32_vs_f64(1);
  test_f32_vs_f64(0);
  test_stats();
  test_determinism();
  printf("test_cnn: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

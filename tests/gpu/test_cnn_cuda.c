/*
 * test_cnn_cuda.c - the CNN's CUDA model (cnn_cuda_model, models/
 * cnn_cuda.cu) against its host f32 model (cnn_model) and a double
 * precision reference of each layer written here:
 *  - the description: same name, units, stages as the host model,
 *    SHARC_DEVICE_CUDA, the same pointer on a second call;
 *  - every stage's forward and backward, each fed the SAME inputs as the
 *    host stage (the host chain's activations and output gradients,
 *    uploaded), the same parameters (the engine's init values) and the same
 *    nonzero starting gradients (backward adds), for n in {0, 1, 3, 8},
 *    dropout on and off, training 0 and 1: outputs, saved flags, din and
 *    every gradient tensor; the statistics (NLL sum within tolerance, the
 *    correct count exactly); a label outside 0..9 fails the call;
 *  - asynchrony: every call goes to a non-blocking stream made here, with
 *    the buffers it writes first filled with NaN on that stream; results
 *    are read only after cudaStreamSynchronize. Unwritten outputs show as
 *    NaN.
 *
 * The tolerance rule, for each element e of each compared tensor: with ref
 * the f64 value of the layer from the same f32 inputs,
 *     |cuda_e - ref_e| <= 2 * max_e' |host_e' - ref_e'| + (K + 2) u S_e
 * where u = 2^-24, K the number of terms the f32 code sums for that
 * element (GEMM depth, plus the bias or the gradient being added to, plus
 * col2im's up to 9 terms) and S_e the sum of the terms' absolute values
 * (sum |a||b| for a GEMM): K u S_e is the classic bound on a float dot
 * product of K terms in any order, which covers cuBLAS's order; the +2 is
 * the rounding of the result and of a dropout scale. The first term covers
 * what both f32 codes share (the f64 softmax rounding to f32 and so on).
 * For the log-probabilities the bound is that of the logit plus that of
 * the log-sum-exp; the output gradient of fc2 adds that bound's effect
 * through exp.
 *
 * Discrete decisions (ReLU signs and pool argmaxes in the saved flags) must
 * be equal, except where the f64 reference shows a near tie inside the
 * bound (counted and printed); the dropout bit always. The backward calls
 * then run on the host's flags so that both take the same branches.
 *
 *   test_cnn_cuda    the test (exit 77 and one SKIP line without a usable
 *                    CUDA device or a CUDA build)
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnn.h"
#include "cnn_defs.h"
#include "cuda_ok.h"

#define SEED 20240611ull
#define U 0x1p-24

static int passed, failed;
static double worst_ratio; /* largest |cuda - ref| / tolerance seen */
static int near_ties;

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double uni(double lo, double hi) {
  return lo + (hi - lo) * (double)(rnd() >> 11) * 0x1p-53;
}

static char tag[128]; /* the configuration, for messages */

/* |cuda - ref| <= 2 max|host - ref| + bnd, element by element. */
static void compare(const char *what, const float *dev, const float *host,
                    const double *ref, const double *bnd, size_t count) {
  double mh = 0;
  for (size_t e = 0; e < count; e++) {
    double d = fabs((double)host[e] - ref[e]);
    mh = d > mh || d != d ? d : mh;
  }
  size_t bad = 0, first = 0;
  for (size_t e = 0; e < count; e++) {
    double err = fabs((double)dev[e] - ref[e]), tol = 2 * mh + bnd[e];
    if (!(err <= tol)) {
      if (!bad++)
        first = e;
    } else if (tol > 0 && err / tol > worst_ratio) {
      worst_ratio = err / tol;
    }
  }
  CHECK(bad == 0,
        "%s %s: %zu of %zu elements beyond tolerance; first %zu: cuda %.9g "
        "host %.9g f64 %.9g tolerance %.3g (max|host-f64| %.3g)",
        tag, what, bad, count, first, bad ? dev[first] : 0.0,
        bad ? host[first] : 0.0, bad ? ref[first] : 0.0,
        bad ? 2 * mh + bnd[first] : 0.0, mh);
}

static double *dzalloc(size_t count) {
  double *p = calloc(count ? count : 1, sizeof *p);
  if (!p) {
    fprintf(stderr, "FAIL: out of memory\n");
    exit(1);
  }
  return p;
}

/* ---- f64 references of the layers ----------------------------------------
 * Each fills ref and bnd (the (K + 2) u S term) of the tensors it checks. */

/* conv1 + ReLU: a1 (n,32,26,26). */
static void ref_conv1_fwd(const float *w, const float *b, const float *x, int n,
                          double *ref, double *bnd) {
  for (int i = 0; i < n; i++)
    for (int co = 0; co < C1; co++)
      for (int oy = 0; oy < H1; oy++)
        for (int ox = 0; ox < H1; ox++) {
          double v = b[co], s = fabs(v);
          for (int k = 0; k < 9; k++) {
            double t =
                (double)w[co * 9 + k] *
                x[(size_t)i * IMG_PIX + (oy + k / 3) * IMG_HW + ox + k % 3];
            v += t;
            s += fabs(t);
          }
          size_t e = (((size_t)i * C1 + co) * H1 + oy) * H1 + ox;
          ref[e] = v > 0 ? v : 0;
          bnd[e] = (10 + 2) * U * s;
        }
}

/* conv1 backward: gw (32,9), gb (32) from their start g0w, g0b. */
static void ref_conv1_bwd(const float *x, const float *a1, const float *da1,
                          int n, const float *g0w, const float *g0b, double *rw,
                          double *bw, double *rb, double *bb) {
  double kk = (double)n * P1 + 1 + 2;
  for (int co = 0; co < C1; co++) {
    double sb = g0b[co], ab = fabs(sb);
    double sw[9], aw[9];
    for (int k = 0; k < 9; k++) {
      sw[k] = g0w[co * 9 + k];
      aw[k] = fabs(sw[k]);
    }
    for (int i = 0; i < n; i++)
      for (int p = 0; p < P1; p++) {
        size_t e = ((size_t)i * C1 + co) * P1 + p;
        double d = a1[e] > 0 ? da1[e] : 0;
        sb += d;
        ab += fabs(d);
        int oy = p / H1, ox = p % H1;
        for (int k = 0; k < 9; k++) {
          double t =
              d * x[(size_t)i * IMG_PIX + (oy + k / 3) * IMG_HW + ox + k % 3];
          sw[k] += t;
          aw[k] += fabs(t);
        }
      }
    rb[co] = sb;
    bb[co] = kk * U * ab;
    for (int k = 0; k < 9; k++) {
      rw[co * 9 + k] = sw[k];
      bw[co * 9 + k] = kk * U * aw[k];
    }
  }
}

/* conv2's pre-activations (64, n, 576) and their sums of |terms|. */
static void ref_conv2_pre(const float *w, const float *b, const float *a1,
                          int n, double *pre, double *abs_) {
  for (int c = 0; c < C2; c++)
    for (int i = 0; i < n; i++)
      for (int y = 0; y < H2; y++)
        for (int x = 0; x < H2; x++) {
          double v = b[c], s = fabs(v);
          for (int ch = 0; ch < C1; ch++) {
            const float *in = a1 + ((size_t)i * C1 + ch) * P1;
            const float *wr = w + ((size_t)c * C1 + ch) * 9;
            for (int k = 0; k < 9; k++) {
              double t = (double)wr[k] * in[(y + k / 3) * H1 + x + k % 3];
              v += t;
              s += fabs(t);
            }
          }
          size_t e = ((size_t)c * n + i) * P2 + y * H2 + x;
          pre[e] = v;
          abs_[e] = s;
        }
}

/* conv2 + ReLU + pool + dropout: a2 (n, 9216) and the flags check. kept
 * bits come from the host's flags (the masks themselves are compared
 * exactly). */
static void ref_conv2_fwd(const double *pre, const double *abs_, int n,
                          const uint8_t *hflags, const uint8_t *dflags,
                          double scale, double *ref, double *bnd) {
  size_t bad = 0, badm = 0;
  double kk = 288 + 1 + 2;
  for (int i = 0; i < n; i++)
    for (int e = 0; e < FLAT; e++) {
      int c = e / (HP * HP), py = e / HP % HP, px = e % HP;
      size_t q = ((size_t)c * n + i) * P2 + 2 * py * H2 + 2 * px;
      size_t at[4] = {q, q + 1, q + H2, q + H2 + 1};
      double m = pre[at[0]], smax = 0;
      for (int t = 0; t < 4; t++) {
        m = pre[at[t]] > m ? pre[at[t]] : m;
        smax = abs_[at[t]] > smax ? abs_[at[t]] : smax;
      }
      size_t o = (size_t)i * FLAT + e;
      int kept = hflags[o] >> 3 & 1;
      ref[o] = m > 0 && kept ? m * scale : 0;
      double b = kk * U * smax;
      bnd[o] = b * scale;
      uint8_t hf = hflags[o], df = dflags[o];
      if ((hf ^ df) & 8)
        badm++;
      else if (hf != df) {
        int tie = 1;
        if ((hf ^ df) & 4)
          tie &= fabs(m) <= b;
        if ((hf ^ df) & 3)
          tie &= fabs(pre[at[hf & 3]] - pre[at[df & 3]]) <= 2 * b;
        near_ties += tie;
        bad += !tie;
      }
    }
  CHECK(badm == 0, "%s conv2 flags: %zu dropout bits differ", tag, badm);
  CHECK(bad == 0, "%s conv2 flags: %zu ReLU/argmax bits differ beyond ties",
        tag, bad);
}

/* conv2 backward on the host's flags: gw (64,288), gb (64), din
 * (n,32,26,26). */
static void ref_conv2_bwd(const float *w, const float *a1, const uint8_t *flags,
                          const float *da2, int n, double scale,
                          const float *g0w, const float *g0b, double *rw,
                          double *bw, double *rb, double *bb, double *rd,
                          double *bd) {
  size_t np = (size_t)C2 * n * P2;
  double *dpre = dzalloc(np);
  for (int i = 0; i < n; i++)
    for (int e = 0; e < FLAT; e++) {
      uint8_t f = flags[(size_t)i * FLAT + e];
      if ((f & 12) != 12)
        continue;
      int c = e / (HP * HP), py = e / HP % HP, px = e % HP, k = f & 3;
      dpre[((size_t)c * n + i) * P2 + (2 * py + k / 2) * H2 + 2 * px + k % 2] =
          (double)da2[(size_t)i * FLAT + e] * scale;
    }
  double kk = (double)n * P2 + 1 + 2;
  for (int c = 0; c < C2; c++) {
    double sb = g0b[c], ab = fabs(sb);
    for (size_t t = (size_t)c * n * P2; t < (size_t)(c + 1) * n * P2; t++) {
      sb += dpre[t];
      ab += fabs(dpre[t]);
    }
    rb[c] = sb;
    bb[c] = kk * U * ab;
    for (int r = 0; r < C1 * 9; r++) {
      int ch = r / 9, ky = r % 9 / 3, kx = r % 3;
      double s = g0w[c * C1 * 9 + r], a = fabs(s);
      for (int i = 0; i < n; i++) {
        const double *d = dpre + ((size_t)c * n + i) * P2;
        const float *in = a1 + ((size_t)i * C1 + ch) * P1;
        for (int y = 0; y < H2; y++)
          for (int x = 0; x < H2; x++) {
            double t = d[y * H2 + x] * in[(y + ky) * H1 + x + kx];
            s += t;
            a += fabs(t);
          }
      }
      rw[c * C1 * 9 + r] = s;
      bw[c * C1 * 9 + r] = kk * U * a;
    }
  }
  for (int i = 0; i < n; i++)
    for (int ch = 0; ch < C1; ch++)
      for (int y = 0; y < H1; y++)
        for (int x = 0; x < H1; x++) {
          double s = 0, a = 0;
          for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
              int oy = y - ky, ox = x - kx;
              if (oy < 0 || oy >= H2 || ox < 0 || ox >= H2)
                continue;
              for (int c = 0; c < C2; c++) {
                double t = (double)w[(c * C1 + ch) * 9 + ky * 3 + kx] *
                           dpre[((size_t)c * n + i) * P2 + oy * H2 + ox];
                s += t;
                a += fabs(t);
              }
            }
          size_t e = (((size_t)i * C1 + ch) * H1 + y) * H1 + x;
          rd[e] = s;
          bd[e] = (64 + 9 + 2) * U * a;
        }
  free(dpre);
}

/* fc1 + ReLU + dropout: a3 (n,128), flags check (kept from the host). */
static void ref_fc1_fwd(const float *w, const float *b, const float *a2, int n,
                        const uint8_t *hflags, const uint8_t *dflags,
                        double scale, double *ref, double *bnd) {
  size_t bad = 0, badm = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < F1; j++) {
      double v = b[j], s = fabs(v);
      for (int k = 0; k < FLAT; k++) {
        double t = (double)a2[(size_t)i * FLAT + k] * w[(size_t)j * FLAT + k];
        v += t;
        s += fabs(t);
      }
      size_t o = (size_t)i * F1 + j;
      int kept = hflags[o] >> 1 & 1;
      double bb = (FLAT + 1 + 2) * U * s;
      ref[o] = v > 0 && kept ? v * scale : 0;
      bnd[o] = bb * scale;
      if ((hflags[o] ^ dflags[o]) & 2)
        badm++;
      else if (hflags[o] != dflags[o]) {
        int tie = fabs(v) <= bb;
        near_ties += tie;
        bad += !tie;
      }
    }
  CHECK(badm == 0, "%s fc1 flags: %zu dropout bits differ", tag, badm);
  CHECK(bad == 0, "%s fc1 flags: %zu ReLU bits differ beyond ties", tag, bad);
}

/* Backward of a fully connected layer y = x w^T (+ b) from its
 * pre-activation gradient d (n, m) (exact in f64), x (n, k), w (m, k):
 * gw (m,k) = g0w + d^T x, gb (m) = g0b + column sums of d, din (n,k) =
 * d w. ed (n, m), if not NULL, bounds the error of the f32 codes' own d,
 * and propagates into the bounds. */
static void ref_fc_bwd(const double *d, const double *ed, const float *x,
                       const float *w, int n, int m, int k, const float *g0w,
                       const float *g0b, double *rw, double *bw, double *rb,
                       double *bb, double *rd, double *bd) {
  for (int j = 0; j < m; j++) {
    double s = g0b[j], a = fabs(s), p = 0;
    for (int i = 0; i < n; i++) {
      s += d[(size_t)i * m + j];
      a += fabs(d[(size_t)i * m + j]);
      p += ed ? ed[(size_t)i * m + j] : 0;
    }
    rb[j] = s;
    bb[j] = (n + 1 + 2) * U * a + p;
    for (int c = 0; c < k; c++) {
      double sw = g0w[(size_t)j * k + c], aw = fabs(sw), pw = 0;
      for (int i = 0; i < n; i++) {
        double xv = x[(size_t)i * k + c], t = d[(size_t)i * m + j] * xv;
        sw += t;
        aw += fabs(t);
        pw += ed ? ed[(size_t)i * m + j] * fabs(xv) : 0;
      }
      rw[(size_t)j * k + c] = sw;
      bw[(size_t)j * k + c] = (n + 1 + 2) * U * aw + pw;
    }
  }
  for (int i = 0; i < n; i++)
    for (int c = 0; c < k; c++) {
      double s = 0, a = 0, p = 0;
      for (int j = 0; j < m; j++) {
        double wv = w[(size_t)j * k + c], t = d[(size_t)i * m + j] * wv;
        s += t;
        a += fabs(t);
        p += ed ? ed[(size_t)i * m + j] * fabs(wv) : 0;
      }
      rd[(size_t)i * k + c] = s;
      bd[(size_t)i * k + c] = (m + 2) * U * a + p;
    }
}

/* fc2 + log-softmax: lp (n,10) and its bound; nll (the NLL sum) and its
 * bound. */
static void ref_fc2_fwd(const float *w, const float *b, const float *a3,
                        const int32_t *y, int n, double *lp, double *blp,
                        double *nll, double *bnll) {
  *nll = *bnll = 0;
  for (int i = 0; i < n; i++) {
    double z[NCLS], s[NCLS], smax = 0, m = -INFINITY;
    for (int j = 0; j < NCLS; j++) {
      z[j] = b[j];
      s[j] = fabs(z[j]);
      for (int k = 0; k < F1; k++) {
        double t = (double)a3[(size_t)i * F1 + k] * w[j * F1 + k];
        z[j] += t;
        s[j] += fabs(t);
      }
      smax = s[j] > smax ? s[j] : smax;
      m = z[j] > m ? z[j] : m;
    }
    double se = 0;
    for (int j = 0; j < NCLS; j++)
      se += exp(z[j] - m);
    double lse = m + log(se);
    for (int j = 0; j < NCLS; j++) {
      size_t o = (size_t)i * NCLS + j;
      lp[o] = z[j] - lse;
      /* the logit's error plus the log-sum-exp's (at most the largest
       * logit error), then the rounding of lp to f32 */
      blp[o] = (F1 + 1 + 2) * U * (s[j] + smax) + 2 * U * fabs(lp[o]);
    }
    *nll -= lp[(size_t)i * NCLS + y[i]];
    *bnll += blp[(size_t)i * NCLS + y[i]];
  }
}

/* ---- one configuration ----------------------------------------------------
 */

typedef struct {
  void *p[64];
  int n;
} dlist_t;

static void *dalloc(dlist_t *l, size_t bytes) {
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, bytes + 256));
  l->p[l->n++] = p;
  return p;
}

/* Device copy of host memory, queued on s (h must live until s passes). */
static void *dcopy(dlist_t *l, const void *h, size_t bytes, cudaStream_t s) {
  void *p = dalloc(l, bytes);
  if (bytes)
    CUDA_OK(cudaMemcpyAsync(p, h, bytes, cudaMemcpyHostToDevice, s));
  return p;
}

/* Device buffer filled with 0xff bytes (NaN floats) on s. */
static void *dnan(dlist_t *l, size_t bytes, cudaStream_t s) {
  void *p = dalloc(l, bytes);
  CUDA_OK(cudaMemsetAsync(p, 0xff, bytes + 256, s));
  return p;
}

static void *hmal(size_t bytes) {
  void *p = malloc(bytes + 64);
  if (!p) {
    fprintf(stderr, "FAIL: out of memory\n");
    exit(1);
  }
  memset(p, 0xff, bytes + 64);
  return p;
}

static void down(void *h, const void *d, size_t bytes) {
  if (bytes)
    CUDA_OK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

static size_t numel(const sharc_param_spec_t *p) {
  return sharc_param_numel(p);
}

static void run_config(cnn_t *c, int n, int dropout, int training,
                       cudaStream_t st) {
  const sharc_model_t *hm = cnn_model(c), *dm = cnn_cuda_model(c, NULL, 0);
  snprintf(tag, sizeof tag, "[n=%d dropout=%d training=%d]", n, dropout,
           training);
  int gn = 2 * n + 3;
  sharc_batch_t b = {.n = n,
                     .global_n = gn,
                     .first = 1000 + rnd() % 1000,
                     .step = 7 + rnd() % 5,
                     .training = training};
  float *x = hmal((size_t)n * IMG_PIX * sizeof(float));
  int32_t *y = hmal((size_t)n * sizeof(int32_t));
  for (size_t i = 0; i < (size_t)n * IMG_PIX; i++)
    x[i] = (float)uni(-0.8, 2.0);
  for (int i = 0; i < n; i++)
    y[i] = (int32_t)(rnd() % NCLS);
  b.x = x;
  b.y = y;

  dlist_t dl = {.n = 0};
  /* parameters (the engine's init) and starting gradients, per unit */
  float *P[CNN_UNITS], *G0[CNN_UNITS], *GH[CNN_UNITS], *GD[CNN_UNITS];
  float *dP[CNN_UNITS], *dG[CNN_UNITS];
  size_t wn[CNN_UNITS], un[CNN_UNITS];
  for (int u = 0; u < CNN_UNITS; u++) {
    const sharc_unit_spec_t *us = &hm->units[u];
    wn[u] = numel(&us->params[0]);
    un[u] = wn[u] + numel(&us->params[1]);
    P[u] = hmal(un[u] * sizeof(float));
    G0[u] = hmal(un[u] * sizeof(float));
    GH[u] = hmal(un[u] * sizeof(float));
    GD[u] = hmal(un[u] * sizeof(float));
    for (size_t i = 0; i < un[u]; i++) {
      int t = i >= wn[u];
      P[u][i] =
          sharc_param_init_value(&us->params[t], SEED, u, t, t ? i - wn[u] : i);
      G0[u][i] = (float)uni(-0.01, 0.01);
    }
    memcpy(GH[u], G0[u], un[u] * sizeof(float));
    dP[u] = dcopy(&dl, P[u], un[u] * sizeof(float), st);
    dG[u] = dcopy(&dl, G0[u], un[u] * sizeof(float), st);
  }

  /* the host chain: forward 0..3, backward 3..0 */
  void *hout[CNN_STAGES], *hsaved[CNN_STAGES], *hdin[CNN_STAGES];
  void *hscr =
      hmal(hm->scratch_bytes(hm->ctx, 0, n) + hm->scratch_bytes(hm->ctx, 1, n) +
           hm->scratch_bytes(hm->ctx, 2, n) + hm->scratch_bytes(hm->ctx, 3, n));
  for (int s = 0; s < CNN_STAGES; s++) {
    hout[s] = hmal(hm->out_bytes(hm->ctx, s, n));
    hsaved[s] = hmal(hm->saved_bytes(hm->ctx, s, n));
    hdin[s] = s ? hmal(hm->out_bytes(hm->ctx, s - 1, n)) : NULL;
    CHECK(dm->out_bytes(dm->ctx, s, n) == hm->out_bytes(hm->ctx, s, n),
          "%s stage %d: out_bytes %zu, host %zu", tag, s,
          dm->out_bytes(dm->ctx, s, n), hm->out_bytes(hm->ctx, s, n));
  }
  for (int s = 0; s < CNN_STAGES; s++) {
    const float *pp[2] = {P[s], P[s] + wn[s]};
    sharc_stage_call_t call = {.stage = s,
                               .unit = s,
                               .kind = s,
                               .batch = &b,
                               .params = pp,
                               .in = s ? hout[s - 1] : x,
                               .out = hout[s],
                               .saved = hsaved[s],
                               .scratch = hscr};
    CHECK(hm->forward(hm->ctx, &call) == 0, "%s host forward %d", tag, s);
  }
  for (int s = CNN_STAGES - 1; s >= 0; s--) {
    const float *pp[2] = {P[s], P[s] + wn[s]};
    float *gg[2] = {GH[s], GH[s] + wn[s]};
    sharc_stage_call_t call = {.stage = s,
                               .unit = s,
                               .kind = s,
                               .batch = &b,
                               .params = pp,
                               .grads = gg,
                               .in = s ? hout[s - 1] : x,
                               .out = hout[s],
                               .dout = s < CNN_STAGES - 1 ? hdin[s + 1] : NULL,
                               .din = hdin[s],
                               .saved = hsaved[s],
                               .scratch = hscr};
    CHECK(hm->backward(hm->ctx, &call) == 0, "%s host backward %d", tag, s);
  }

  /* the device, stage by stage on the host chain's inputs; every call
   * queued on st, read after one synchronize per phase */
  void *din_[CNN_STAGES], *dout_[CNN_STAGES], *dsaved[CNN_STAGES];
  void *dscr[CNN_STAGES], *dgrad_out[CNN_STAGES], *da1 = NULL;
  for (int s = 0; s < CNN_STAGES; s++) {
    din_[s] = s ? dcopy(&dl, hout[s - 1], hm->out_bytes(hm->ctx, s - 1, n), st)
                : NULL;
    dout_[s] = dnan(&dl, dm->out_bytes(dm->ctx, s, n), st);
    dsaved[s] = dnan(&dl, dm->saved_bytes(dm->ctx, s, n), st);
    dscr[s] = dnan(&dl, dm->scratch_bytes(dm->ctx, s, n), st);
    dgrad_out[s] = s < CNN_STAGES - 1 ? dcopy(&dl, hdin[s + 1],
                                              hm->out_bytes(hm->ctx, s, n), st)
                                      : NULL;
  }
  da1 = dcopy(&dl, hout[0], hm->out_bytes(hm->ctx, 0, n), st);
  for (int s = 0; s < CNN_STAGES; s++) {
    const float *pp[2] = {dP[s], dP[s] + wn[s]};
    sharc_stage_call_t call = {.stage = s,
                               .unit = s,
                               .kind = s,
                               .batch = &b,
                               .params = pp,
                               .in = s ? din_[s] : x,
                               .out = dout_[s],
                               .saved = dsaved[s],
                               .scratch = dscr[s],
                               .cuda_stream = st};
    CHECK(dm->forward(dm->ctx, &call) == 0, "%s cuda forward %d", tag, s);
  }
  CUDA_OK(cudaStreamSynchronize(st));

  /* forward results */
  size_t na1 = (size_t)n * A1_NUMEL, na2 = (size_t)n * FLAT,
         na3 = (size_t)n * F1, nlp = (size_t)n * NCLS;
  float *o0 = hmal(na1 * 4), *o1 = hmal(na2 * 4), *o2 = hmal(na3 * 4);
  float *lp = hmal(nlp * 4);
  uint8_t *f1 = hmal(na2), *f2 = hmal(na3);
  double st_dev[2];
  down(o0, dout_[0], na1 * 4);
  down(o1, dout_[1], na2 * 4);
  down(o2, dout_[2], na3 * 4);
  down(f1, dsaved[1], na2);
  down(f2, dsaved[2], na3);
  down(lp, dsaved[3], nlp * 4);
  down(st_dev, dout_[3], sizeof st_dev);
  double scale1 =
      dropout && training ? (double)(float)(1.0 / (1.0 - DROP1_P)) : 1.0;
  double scale2 =
      dropout && training ? (double)(float)(1.0 / (1.0 - DROP2_P)) : 1.0;
  size_t big = na1 > (size_t)C2 * n * P2 ? na1 : (size_t)C2 * n * P2;
  double *ref = dzalloc(big), *bnd = dzalloc(big);
  double *pre = dzalloc((size_t)C2 * n * P2), *pabs = dzalloc(C2 * n * P2);
  ref_conv1_fwd(P[0], P[0] + wn[0], x, n, ref, bnd);
  compare("conv1 out", o0, hout[0], ref, bnd, na1);
  ref_conv2_pre(P[1], P[1] + wn[1], hout[0], n, pre, pabs);
  ref_conv2_fwd(pre, pabs, n, hsaved[1], f1, scale1, ref, bnd);
  compare("conv2 out", o1, hout[1], ref, bnd, na2);
  ref_fc1_fwd(P[2], P[2] + wn[2], hout[1], n, hsaved[2], f2, scale2, ref, bnd);
  compare("fc1 out", o2, hout[2], ref, bnd, na3);
  double *lp64 = dzalloc(nlp), *blp = dzalloc(nlp), nll, bnll;
  ref_fc2_fwd(P[3], P[3] + wn[3], hout[2], y, n, lp64, blp, &nll, &bnll);
  compare("fc2 log-probabilities", lp, hsaved[3], lp64, blp, nlp);
  const double *hst = hout[3];
  CHECK(fabs(st_dev[0] - nll) <= 2 * fabs(hst[0] - nll) + bnll,
        "%s NLL sum: cuda %.17g host %.17g f64 %.17g bound %.3g", tag,
        st_dev[0], hst[0], nll, bnll);
  CHECK(st_dev[1] == hst[1], "%s correct: cuda %.17g host %.17g", tag,
        st_dev[1], hst[1]);

  /* the backward on the host's flags (equal but for counted near ties) */
  if (memcmp(f1, hsaved[1], na2))
    CUDA_OK(
        cudaMemcpyAsync(dsaved[1], hsaved[1], na2, cudaMemcpyHostToDevice, st));
  if (memcmp(f2, hsaved[2], na3))
    CUDA_OK(
        cudaMemcpyAsync(dsaved[2], hsaved[2], na3, cudaMemcpyHostToDevice, st));
  void *ddin[CNN_STAGES];
  for (int s = CNN_STAGES - 1; s >= 0; s--) {
    const float *pp[2] = {dP[s], dP[s] + wn[s]};
    float *gg[2] = {dG[s], dG[s] + wn[s]};
    ddin[s] = s ? dnan(&dl, hm->out_bytes(hm->ctx, s - 1, n), st) : NULL;
    sharc_stage_call_t call = {.stage = s,
                               .unit = s,
                               .kind = s,
                               .batch = &b,
                               .params = pp,
                               .grads = gg,
                               .in = s ? din_[s] : x,
                               .out = s ? dout_[s] : da1,
                               .dout = dgrad_out[s],
                               .din = ddin[s],
                               .saved = dsaved[s],
                               .scratch = dscr[s],
                               .cuda_stream = st};
    CHECK(dm->backward(dm->ctx, &call) == 0, "%s cuda backward %d", tag, s);
  }
  CUDA_OK(cudaStreamSynchronize(st));
  for (int u = 0; u < CNN_UNITS; u++)
    down(GD[u], dG[u], un[u] * sizeof(float));
  float *d0 = hmal(na1 * 4), *d1 = hmal(na2 * 4), *d2 = hmal(na3 * 4);
  down(d0, ddin[1], na1 * 4);
  down(d1, ddin[2], na2 * 4);
  down(d2, ddin[3], na3 * 4);

  size_t gmax = un[2] > na1 ? un[2] : na1;
  double *rw = dzalloc(gmax), *bw = dzalloc(gmax), *rb = dzalloc(F1),
         *bb = dzalloc(F1), *rd = dzalloc(gmax), *bd = dzalloc(gmax);
  /* stage 3: dlogits from the f64 lp, with the lp bound carried */
  double *dz = dzalloc(nlp), *edz = dzalloc(nlp);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < NCLS; j++) {
      size_t t = (size_t)i * NCLS + j;
      double pj = exp(lp64[t]);
      dz[t] = (pj - (j == y[i])) / gn;
      edz[t] = (pj * blp[t] * 1.01 + 2 * U * fabs(pj - (j == y[i]))) / gn;
    }
  ref_fc_bwd(dz, edz, hout[2], P[3], n, NCLS, F1, G0[3], G0[3] + wn[3], rw, bw,
             rb, bb, rd, bd);
  compare("fc2 grad weight", GD[3], GH[3], rw, bw, wn[3]);
  compare("fc2 grad bias", GD[3] + wn[3], GH[3] + wn[3], rb, bb, NCLS);
  compare("fc2 din", d2, hdin[3], rd, bd, na3);
  /* stage 2 */
  double *dpre = dzalloc(na3);
  const uint8_t *hf2 = hsaved[2];
  const float *g3 = hdin[3];
  for (size_t t = 0; t < na3; t++)
    dpre[t] = hf2[t] == 3 ? (double)g3[t] * scale2 : 0;
  ref_fc_bwd(dpre, NULL, hout[1], P[2], n, F1, FLAT, G0[2], G0[2] + wn[2], rw,
             bw, rb, bb, rd, bd);
  compare("fc1 grad weight", GD[2], GH[2], rw, bw, wn[2]);
  compare("fc1 grad bias", GD[2] + wn[2], GH[2] + wn[2], rb, bb, F1);
  compare("fc1 din", d1, hdin[2], rd, bd, na2);
  /* stage 1 */
  ref_conv2_bwd(P[1], hout[0], hsaved[1], hdin[2], n, scale1, G0[1],
                G0[1] + wn[1], rw, bw, rb, bb, rd, bd);
  compare("conv2 grad weight", GD[1], GH[1], rw, bw, wn[1]);
  compare("conv2 grad bias", GD[1] + wn[1], GH[1] + wn[1], rb, bb, C2);
  compare("conv2 din", d0, hdin[1], rd, bd, na1);
  /* stage 0 */
  ref_conv1_bwd(x, hout[0], hdin[1], n, G0[0], G0[0] + wn[0], rw, bw, rb, bb);
  compare("conv1 grad weight", GD[0], GH[0], rw, bw, wn[0]);
  compare("conv1 grad bias", GD[0] + wn[0], GH[0] + wn[0], rb, bb, C1);

  free(dpre);
  free(dz);
  free(edz);
  free(rw);
  free(bw);
  free(rb);
  free(bb);
  free(rd);
  free(bd);
  free(lp64);
  free(blp);
  free(ref);
  free(bnd);
  free(pre);
  free(pabs);
  void *hf[] = {o0, o1, o2, lp, f1, f2, d0, d1, d2, x, y, hscr};
  for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++)
    free(hf[i]);
  for (int s = 0; s < CNN_STAGES; s++) {
    free(hout[s]);
    free(hsaved[s]);
    free(hdin[s]);
  }
  for (int u = 0; u < CNN_UNITS; u++) {
    free(P[u]);
    free(G0[u]);
    free(GH[u]);
    free(GD[u]);
  }
  for (int i = 0; i < dl.n; i++)
    CUDA_OK(cudaFree(dl.p[i]));
}

/* The description matches the host model's; a second call returns it. */
static void test_description(cnn_t *c) {
  const sharc_model_t *hm = cnn_model(c), *dm = cnn_cuda_model(c, NULL, 0);
  CHECK(dm && dm == cnn_cuda_model(c, NULL, 0), "second call: a new model");
  CHECK(dm->device == SHARC_DEVICE_CUDA && hm->device == SHARC_DEVICE_HOST,
        "devices %d %d", (int)dm->device, (int)hm->device);
  CHECK(strcmp(dm->name, hm->name) == 0, "name %s", dm->name);
  CHECK(dm->nunits == hm->nunits && dm->nstages == hm->nstages,
        "units %d stages %d", dm->nunits, dm->nstages);
  CHECK(memcmp(dm->units, hm->units, sizeof *hm->units * hm->nunits) == 0 &&
            memcmp(dm->stages, hm->stages, sizeof *hm->stages * hm->nstages) ==
                0,
        "units or stages differ from the host model's");
}

/* A label outside 0..9 fails stage 3's forward (before queueing). */
static void test_bad_label(cnn_t *c, cudaStream_t st) {
  const sharc_model_t *dm = cnn_cuda_model(c, NULL, 0);
  dlist_t dl = {.n = 0};
  float a3[3 * F1] = {0};
  int32_t y[3] = {1, 2, 3};
  float *w = dalloc(&dl, (NCLS * F1 + NCLS) * 4);
  CUDA_OK(cudaMemsetAsync(w, 0, (NCLS * F1 + NCLS) * 4, st));
  const float *pp[2] = {w, w + NCLS * F1};
  void *in = dcopy(&dl, a3, sizeof a3, st);
  sharc_batch_t b = {.n = 3, .global_n = 3, .x = NULL, .y = y, .training = 0};
  void *out = dnan(&dl, 16, st);
  void *saved = dnan(&dl, dm->saved_bytes(dm->ctx, 3, 3), st);
  void *scr = dnan(&dl, dm->scratch_bytes(dm->ctx, 3, 3), st);
  sharc_stage_call_t call = {.stage = 3,
                             .unit = 3,
                             .kind = 3,
                             .batch = &b,
                             .params = pp,
                             .in = in,
                             .out = out,
                             .saved = saved,
                             .scratch = scr,
                             .cuda_stream = st};
  CHECK(dm->forward(dm->ctx, &call) == 0, "good labels fail");
  CUDA_OK(cudaStreamSynchronize(st));
  double stats[2];
  down(stats, out, sizeof stats);
  /* zero logits: each sample's NLL is log 10; argmax 0 is never the label */
  CHECK(fabs(stats[0] - 3 * log(10.0)) < 1e-5 && stats[1] == 0,
        "zero logits: stats %.17g %.17g", stats[0], stats[1]);
  y[1] = 10;
  printf("test_cnn_cuda: two bad labels, expect two lines from cnn_cuda:\n");
  fflush(stdout);
  CHECK(dm->forward(dm->ctx, &call) != 0, "label 10 accepted");
  y[1] = -1;
  CHECK(dm->forward(dm->ctx, &call) != 0, "label -1 accepted");
  CUDA_OK(cudaStreamSynchronize(st));
  for (int i = 0; i < dl.n; i++)
    CUDA_OK(cudaFree(dl.p[i]));
}

int main(void) {
  cnn_t *c[2];
  char why[256];
  for (int d = 0; d < 2; d++)
    if (cnn_create(&c[d], SEED, d) != 0) {
      fprintf(stderr, "FAIL: cnn_create: out of memory\n");
      return 1;
    }
  if (!cnn_cuda_model(c[0], why, sizeof why)) {
    printf("SKIP: %s\n", why);
    cnn_destroy(c[0]);
    cnn_destroy(c[1]);
    return 77;
  }
  if (!cnn_cuda_model(c[1], why, sizeof why)) {
    printf("FAIL: second model: %s\n", why);
    return 1;
  }
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  test_description(c[0]);
  test_bad_label(c[0], st);
  static const int ns[] = {0, 1, 3, 8};
  clock_t t0 = clock();
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
    for (int d = 0; d < 2; d++)
      for (int tr = 0; tr < 2; tr++)
        run_config(c[d], ns[k], d, tr, st);
  CUDA_OK(cudaStreamDestroy(st));
  cnn_destroy(c[0]);
  cnn_destroy(c[1]);
  printf("test_cnn_cuda: %d passed, %d failed; worst |cuda - f64| / "
         "tolerance %.3f, %d near-tie flags; %.1f s CPU\n",
         passed, failed, worst_ratio, near_ties,
         (double)(clock() - t0) / CLOCKS_PER_SEC);
  return failed ? 1 : 0;
}

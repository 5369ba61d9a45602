/*
 * cnn_impl.h - the CNN's layer math written once over a scalar type REAL.
 * cnn.c includes it twice: REAL float with GEMM cblas_sgemm (the stage
 * callbacks) and REAL double with cblas_dgemm (the f64 reference of the
 * gradient check). Define REAL, SFX (the name suffix) and GEMM before
 * including; they are undefined at the end. No include guard: it is meant
 * to be included more than once. The shape constants, drop_t and the
 * dropout hash come from cnn_defs.h (shared with cnn_cuda.cu).
 *
 * Per sample, row-major NCHW:
 *   x  (1,28,28) f32 -conv1,ReLU-> a1 (32,26,26)
 *   a1 -conv2-> pre (64,24,24) -ReLU,pool 2,dropout-> a2 (64,12,12) = 9216
 *   a2 -fc1,ReLU,dropout-> a3 (128) -fc2-> logits (10) -log-softmax-> lp
 * Convolutions are im2col + one GEMM per sample: col (c*9, oh*ow) holds
 * in (c, oy+ky, ox+kx) at row c*9+ky*3+kx, column oy*ow+ox, so
 * out (cout, oh*ow) = w (cout, c*9) @ col.
 */

#define CNN_CAT_(a, b) a##b
#define CNN_CAT(a, b) CNN_CAT_(a, b)
#define FN(name) CNN_CAT(name, SFX)

/* col (c*9, (h-2)*(w-2)) from in (c, h, w): 3x3 kernel, stride 1. */
static void FN(im2col)(const REAL *in, int c, int h, int w, REAL *col) {
  int oh = h - 2, ow = w - 2;
  for (int ch = 0; ch < c; ch++)
    for (int ky = 0; ky < 3; ky++)
      for (int kx = 0; kx < 3; kx++) {
        REAL *dst = col + (size_t)((ch * 3 + ky) * 3 + kx) * oh * ow;
        const REAL *src = in + ((size_t)ch * h + ky) * w + kx;
        for (int oy = 0; oy < oh; oy++)
          memcpy(dst + (size_t)oy * ow, src + (size_t)oy * w,
                 (size_t)ow * sizeof(REAL));
      }
}

/* The adjoint of im2col: in (c, h, w) = sum of the col entries that copied
 * each element (in is overwritten). */
static void FN(col2im)(const REAL *col, int c, int h, int w, REAL *in) {
  int oh = h - 2, ow = w - 2;
  memset(in, 0, (size_t)c * h * w * sizeof(REAL));
  for (int ch = 0; ch < c; ch++)
    for (int ky = 0; ky < 3; ky++)
      for (int kx = 0; kx < 3; kx++) {
        const REAL *src = col + (size_t)((ch * 3 + ky) * 3 + kx) * oh * ow;
        REAL *dst = in + ((size_t)ch * h + ky) * w + kx;
        for (int oy = 0; oy < oh; oy++)
          for (int ox = 0; ox < ow; ox++)
            dst[(size_t)oy * w + ox] += src[(size_t)oy * ow + ox];
      }
}

/* out (rows, cols) = bias broadcast along each row. */
static void FN(fill_rows)(REAL *out, const REAL *b, int rows, int cols) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++)
      out[(size_t)r * cols + j] = b[r];
}

/* gb (rows) += row sums of d (rows, cols). Eight partial sums per row let
 * the compiler vectorise the loop (a single running sum is a serial chain
 * of dependent adds); the order is fixed, so the result is deterministic. */
static void FN(add_row_sums)(REAL *gb, const REAL *d, int rows, int cols) {
  for (int r = 0; r < rows; r++) {
    const REAL *row = d + (size_t)r * cols;
    REAL acc[8] = {0}, s = 0;
    int j = 0;
    for (; j + 8 <= cols; j += 8)
      for (int k = 0; k < 8; k++)
        acc[k] += row[j + k];
    for (; j < cols; j++)
      s += row[j];
    for (int k = 0; k < 8; k++)
      s += acc[k];
    gb[r] += s;
  }
}

/* gb (cols) += column sums of d (rows, cols). */
static void FN(add_col_sums)(REAL *gb, const REAL *d, int rows, int cols) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++)
      gb[j] += d[(size_t)r * cols + j];
}

/* ---- stage 0: conv1 + ReLU ------------------------------------------------
 * x (n,1,28,28) f32 -> a1 (n,32,26,26); w (32,9), b (32).
 * scratch: xs (784) + col (9,676). */
static void FN(conv1_fwd)(const REAL *w, const REAL *b, const float *x, int n,
                          REAL *a1, REAL *scr) {
  REAL *xs = scr, *col = scr + IMG_PIX;
  for (int i = 0; i < n; i++) {
    REAL *o = a1 + (size_t)i * A1_NUMEL;
    for (int j = 0; j < IMG_PIX; j++)
      xs[j] = (REAL)x[(size_t)i * IMG_PIX + j];
    FN(im2col)(xs, 1, IMG_HW, IMG_HW, col);
    FN(fill_rows)(o, b, C1, P1);
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, C1, P1, 9, 1, w, 9, col, P1,
         1, o, P1);
    for (int j = 0; j < A1_NUMEL; j++)
      o[j] = o[j] > 0 ? o[j] : 0;
  }
}

/* da1 (n,32,26,26) -> gw (32,9) +=, gb (32) +=. ReLU passes where a1 > 0.
 * scratch: xs (784) + col (9,676) + dpre (32,676). */
static void FN(conv1_bwd)(const float *x, const REAL *a1, const REAL *da1,
                          int n, REAL *gw, REAL *gb, REAL *scr) {
  REAL *xs = scr, *col = scr + IMG_PIX, *dpre = col + 9 * P1;
  for (int i = 0; i < n; i++) {
    const REAL *o = a1 + (size_t)i * A1_NUMEL, *d = da1 + (size_t)i * A1_NUMEL;
    for (int j = 0; j < A1_NUMEL; j++) { /* unconditional load: a select */
      REAL g = d[j];
      dpre[j] = o[j] > 0 ? g : 0;
    }
    FN(add_row_sums)(gb, dpre, C1, P1);
    for (int j = 0; j < IMG_PIX; j++)
      xs[j] = (REAL)x[(size_t)i * IMG_PIX + j];
    FN(im2col)(xs, 1, IMG_HW, IMG_HW, col);
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, C1, 9, P1, 1, dpre, P1, col,
         P1, 1, gw, 9);
  }
}

/* ---- stage 1: conv2 + ReLU + max-pool 2 + dropout -------------------------
 * a1 (n,32,26,26) -> a2 (n,64,12,12); w (64,288), b (64). flags (n,9216)
 * per pooled element: bits 0-1 the window position of the max (dy*2+dx),
 * bit 2 max > 0 (ReLU passes), bit 3 kept by dropout.
 * scratch: col (288,576) + pre (64,576). */
static void FN(conv2_fwd)(const drop_t *d, const REAL *w, const REAL *b,
                          const REAL *a1, int n, REAL *a2, uint8_t *flags,
                          REAL *scr) {
  REAL *col = scr, *pre = scr + (size_t)C1 * 9 * P2;
  REAL scale = d->on ? (REAL)(1.0 / (1.0 - DROP1_P)) : 1;
  for (int i = 0; i < n; i++) {
    REAL *o = a2 + (size_t)i * FLAT;
    uint8_t *f = flags + (size_t)i * FLAT;
    uint64_t key = drop_key(d, 1, d->first + (uint64_t)i);
    FN(im2col)(a1 + (size_t)i * A1_NUMEL, C1, H1, H1, col);
    FN(fill_rows)(pre, b, C2, P2);
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, C2, P2, C1 * 9, 1, w,
         C1 * 9, col, P2, 1, pre, P2);
    for (int c = 0; c < C2; c++)
      for (int py = 0; py < HP; py++)
        for (int px = 0; px < HP; px++) {
          const REAL *q = pre + (size_t)c * P2 + 2 * py * H2 + 2 * px;
          REAL v[4] = {q[0], q[1], q[H2], q[H2 + 1]}, m = v[0];
          int k = 0;
          for (int t = 1; t < 4; t++) { /* first maximum; selects, no jumps */
            int gt = v[t] > m;
            k = gt ? t : k;
            m = gt ? v[t] : m;
          }
          int e = (c * HP + py) * HP + px;
          int pos = m > 0;
          int kept = !d->on || drop_keep(key, (uint64_t)e, DROP1_THR);
          o[e] = pos && kept ? m * scale : 0;
          f[e] = (uint8_t)(k | pos << 2 | kept << 3);
        }
  }
}

/* da2 (n,9216) -> gw (64,288) +=, gb (64) +=, da1 (n,32,26,26) (skipped
 * when NULL). scratch: col (288,576) + dpre (64,576); col is reused for
 * the gradient of col. */
static void FN(conv2_bwd)(const drop_t *d, const REAL *w, const REAL *a1,
                          const uint8_t *flags, const REAL *da2, int n,
                          REAL *gw, REAL *gb, REAL *da1, REAL *scr) {
  REAL *col = scr, *dpre = scr + (size_t)C1 * 9 * P2;
  REAL scale = d->on ? (REAL)(1.0 / (1.0 - DROP1_P)) : 1;
  for (int i = 0; i < n; i++) {
    const REAL *g = da2 + (size_t)i * FLAT;
    const uint8_t *f = flags + (size_t)i * FLAT;
    memset(dpre, 0, (size_t)C2 * P2 * sizeof(REAL));
    for (int c = 0; c < C2; c++)
      for (int py = 0; py < HP; py++)
        for (int px = 0; px < HP; px++) {
          int e = (c * HP + py) * HP + px;
          if ((f[e] & 12) != 12)
            continue;
          int k = f[e] & 3;
          dpre[(size_t)c * P2 + (2 * py + k / 2) * H2 + 2 * px + k % 2] =
              g[e] * scale;
        }
    FN(add_row_sums)(gb, dpre, C2, P2);
    FN(im2col)(a1 + (size_t)i * A1_NUMEL, C1, H1, H1, col);
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, C2, C1 * 9, P2, 1, dpre, P2,
         col, P2, 1, gw, C1 * 9);
    if (!da1)
      continue;
    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, C1 * 9, P2, C2, 1, w, C1 * 9,
         dpre, P2, 0, col, P2);
    FN(col2im)(col, C1, H1, H1, da1 + (size_t)i * A1_NUMEL);
  }
}

/* ---- stage 2: fc1 + ReLU + dropout -----------------------------------------
 * a2 (n,9216) -> a3 (n,128); w (128,9216), b (128). flags (n,128): bit 0
 * ReLU passes, bit 1 kept by dropout. No scratch. */
static void FN(fc1_fwd)(const drop_t *d, const REAL *w, const REAL *b,
                        const REAL *a2, int n, REAL *a3, uint8_t *flags) {
  REAL scale = d->on ? (REAL)(1.0 / (1.0 - DROP2_P)) : 1;
  GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, n, F1, FLAT, 1, a2, FLAT, w,
       FLAT, 0, a3, F1);
  for (int i = 0; i < n; i++) {
    uint64_t key = drop_key(d, 2, d->first + (uint64_t)i);
    for (int j = 0; j < F1; j++) {
      REAL v = a3[(size_t)i * F1 + j] + b[j];
      int pos = v > 0;
      int kept = !d->on || drop_keep(key, (uint64_t)j, DROP2_THR);
      a3[(size_t)i * F1 + j] = pos && kept ? v * scale : 0;
      flags[(size_t)i * F1 + j] = (uint8_t)(pos | kept << 1);
    }
  }
}

/* da3 (n,128) -> gw (128,9216) +=, gb (128) +=, da2 (n,9216) (skipped when
 * NULL). scratch: dpre (n,128). */
static void FN(fc1_bwd)(const drop_t *d, const REAL *w, const REAL *a2,
                        const uint8_t *flags, const REAL *da3, int n, REAL *gw,
                        REAL *gb, REAL *da2, REAL *dpre) {
  REAL scale = d->on ? (REAL)(1.0 / (1.0 - DROP2_P)) : 1;
  for (size_t j = 0; j < (size_t)n * F1; j++) {
    REAL g = da3[j] * scale;
    dpre[j] = flags[j] == 3 ? g : 0;
  }
  FN(add_col_sums)(gb, dpre, n, F1);
  GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, F1, FLAT, n, 1, dpre, F1, a2,
       FLAT, 1, gw, FLAT);
  if (da2)
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, FLAT, F1, 1, dpre, F1, w,
         FLAT, 0, da2, FLAT);
}

/* ---- stage 3: fc2 + log-softmax + NLL --------------------------------------
 * a3 (n,128) -> lp (n,10) log-probabilities (saved); w (10,128), b (10).
 * stats: NLL sum, correct predictions (first maximal logit == label).
 * Returns -1 for a label outside 0..9. The softmax runs in double for
 * either REAL. */
static int FN(fc2_fwd)(const REAL *w, const REAL *b, const REAL *a3,
                       const int32_t *y, int n, REAL *lp,
                       double stats[SHARC_STAGE_STATS]) {
  GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, n, NCLS, F1, 1, a3, F1, w, F1,
       0, lp, NCLS);
  double loss = 0, correct = 0;
  for (int i = 0; i < n; i++) {
    REAL *z = lp + (size_t)i * NCLS;
    if (y[i] < 0 || y[i] >= NCLS)
      return -1;
    int arg = 0;
    for (int j = 0; j < NCLS; j++) {
      z[j] += b[j];
      if (z[j] > z[arg])
        arg = j;
    }
    double m = (double)z[arg], s = 0;
    for (int j = 0; j < NCLS; j++)
      s += exp((double)z[j] - m);
    double lse = m + log(s);
    for (int j = 0; j < NCLS; j++)
      z[j] = (REAL)((double)z[j] - lse);
    loss -= (double)z[y[i]];
    correct += arg == y[i];
  }
  stats[0] = loss;
  stats[1] = correct;
  return 0;
}

/* d(loss sum / global_n) -> gw (10,128) +=, gb (10) +=, da3 (n,128)
 * (skipped when NULL). scratch: dlogits (n,10). */
static void FN(fc2_bwd)(const REAL *w, const REAL *a3, const REAL *lp,
                        const int32_t *y, int n, int global_n, REAL *gw,
                        REAL *gb, REAL *da3, REAL *dz) {
  double inv = 1.0 / global_n;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < NCLS; j++) {
      size_t t = (size_t)i * NCLS + j;
      dz[t] = (REAL)((exp((double)lp[t]) - (j == y[i])) * inv);
    }
  FN(add_col_sums)(gb, dz, n, NCLS);
  GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, NCLS, F1, n, 1, dz, NCLS, a3,
       F1, 1, gw, F1);
  if (da3)
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, F1, NCLS, 1, dz, NCLS, w,
         F1, 0, da3, F1);
}

#undef FN
#undef REAL
#undef SFX
#undef GEMM

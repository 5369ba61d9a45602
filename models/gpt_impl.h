/*
 * gpt_impl.h - the GPT layer math written once, generic over REAL. gpt.c
 * includes it twice: with REAL float and GEMM cblas_sgemm for the engine
 * callbacks, and with REAL double and GEMM cblas_dgemm for the f64
 * reference of the gradient check. FN(name) names the instantiation
 * (name_f32, name_f64). The math functions come from <tgmath.h>, so exp,
 * log and sqrt take the precision of their REAL argument.
 *
 * Not a header to include anywhere else: it relies on gpt.c's gpt_t,
 * gcall_t and the buffer layouts (block_saved_layout and friends).
 */

/* ---- building blocks ----------------------------------------------------- */

/* Row-major C (M,N) = alpha * op(A) @ op(B) + beta * C. */
static void FN(gemm)(int ta, int tb, size_t M, size_t N, size_t K, REAL alpha,
                     const REAL *A, size_t lda, const REAL *B, size_t ldb,
                     REAL beta, REAL *Cm, size_t ldc) {
  GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
       tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A,
       (int)lda, B, (int)ldb, beta, Cm, (int)ldc);
}

/* out (N,OC) = in (N,IC) @ w^T + b; w is (OC,IC), b (OC) or NULL. */
static void FN(linear_fwd)(REAL *out, const REAL *in, const REAL *w,
                           const REAL *b, size_t N, size_t IC, size_t OC) {
  for (size_t i = 0; i < N; i++)
    for (size_t o = 0; o < OC; o++)
      out[i * OC + o] = b ? b[o] : 0;
  FN(gemm)(0, 1, N, OC, IC, 1, in, IC, w, IC, 1, out, OC);
}

/* din (N,IC) = dout (N,OC) @ w (overwritten; skipped when NULL);
 * dw (OC,IC) += dout^T @ in; db (OC) += column sums of dout (when db is
 * not NULL). */
static void FN(linear_bwd)(REAL *din, REAL *dw, REAL *db, const REAL *dout,
                           const REAL *in, const REAL *w, size_t N, size_t IC,
                           size_t OC) {
  if (din)
    FN(gemm)(0, 0, N, IC, OC, 1, dout, OC, w, IC, 0, din, IC);
  FN(gemm)(1, 0, OC, IC, N, 1, dout, OC, in, IC, 1, dw, IC);
  for (size_t i = 0; db && i < N; i++)
    for (size_t o = 0; o < OC; o++)
      db[o] += dout[i * OC + o];
}

/* LayerNorm over the last axis: out (N,C) = (in - mean) * rstd * w + b,
 * with mean (N) and rstd (N) kept for the backward. */
static void FN(layernorm_fwd)(REAL *out, REAL *mean, REAL *rstd, const REAL *in,
                              const REAL *w, const REAL *b, size_t N,
                              size_t C) {
  const REAL eps = (REAL)1e-5;
  for (size_t i = 0; i < N; i++) {
    const REAL *x = in + i * C;
    REAL m = 0, v = 0;
    for (size_t c = 0; c < C; c++)
      m += x[c];
    m /= (REAL)C;
    for (size_t c = 0; c < C; c++)
      v += (x[c] - m) * (x[c] - m);
    v /= (REAL)C;
    REAL r = 1 / sqrt(v + eps);
    for (size_t c = 0; c < C; c++)
      out[i * C + c] = (x[c] - m) * r * w[c] + b[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

/* din (N,C) += the LayerNorm input gradient for dout (N,C); dw, db (C)
 * += the gain and bias gradients. */
static void FN(layernorm_bwd)(REAL *din, REAL *dw, REAL *db, const REAL *dout,
                              const REAL *in, const REAL *mean,
                              const REAL *rstd, const REAL *w, size_t N,
                              size_t C) {
  for (size_t i = 0; i < N; i++) {
    const REAL *x = in + i * C, *dy = dout + i * C;
    REAL m = mean[i], r = rstd[i];
    /* the input gradient needs the means of dnorm and dnorm * norm */
    REAL sd = 0, sdn = 0;
    for (size_t c = 0; c < C; c++) {
      REAL nrm = (x[c] - m) * r, dn = dy[c] * w[c];
      sd += dn;
      sdn += dn * nrm;
    }
    sd /= (REAL)C;
    sdn /= (REAL)C;
    for (size_t c = 0; c < C; c++) {
      REAL nrm = (x[c] - m) * r, dn = dy[c] * w[c];
      db[c] += dy[c];
      dw[c] += nrm * dy[c];
      din[i * C + c] += r * (dn - sd - nrm * sdn);
    }
  }
}

/* tanh(u) = 1 - 2 / (1 + e^(2u)): one exp instead of libm's tanh, which
 * was a third of the f32 model's time; exact at both tails (e^(2u) going
 * to 0 or infinity), and near 0 its absolute error stays at the rounding
 * of 1, which is all GELU's 1 + tanh can see. */
static REAL FN(fast_tanh)(REAL u) { return 1 - 2 / (1 + exp(2 * u)); }

/* GELU, tanh approximation: out = x/2 (1 + tanh(k (x + 0.044715 x^3))),
 * k = sqrt(2/pi); count elements. */
static void FN(gelu_fwd)(REAL *out, const REAL *in, size_t count) {
  const REAL k = (REAL)0.7978845608028654, a = (REAL)0.044715;
  for (size_t i = 0; i < count; i++) {
    REAL x = in[i];
    out[i] = (REAL)0.5 * x * (1 + FN(fast_tanh)(k * (x + a * x * x * x)));
  }
}

/* d (count) *= GELU'(in), in place. */
static void FN(gelu_bwd)(REAL *d, const REAL *in, size_t count) {
  const REAL k = (REAL)0.7978845608028654, a = (REAL)0.044715;
  for (size_t i = 0; i < count; i++) {
    REAL x = in[i], th = FN(fast_tanh)(k * (x + a * x * x * x));
    REAL dth = (1 - th * th) * k * (1 + 3 * a * x * x);
    d[i] *= (REAL)0.5 * (1 + th) + (REAL)0.5 * x * dth;
  }
}

/* Causal self-attention. qkv is (n,T,3C) with q, k, v side by side on the
 * last axis, head h at channels [h*hs, (h+1)*hs) of each; att (n,H,T,T)
 * gets the softmax weights (zero above the diagonal); atty (n,T,C) the
 * heads' outputs side by side. */
static void FN(attention_fwd)(REAL *atty, REAL *att, const REAL *qkv, int n,
                              size_t T, size_t C, size_t H) {
  size_t hs = C / H;
  REAL scale = 1 / sqrt((REAL)hs);
  for (int b = 0; b < n; b++)
    for (size_t h = 0; h < H; h++) {
      const REAL *q = qkv + (size_t)b * T * 3 * C + h * hs;
      const REAL *k = q + C, *v = q + 2 * C;
      REAL *a = att + ((size_t)b * H + h) * T * T;
      // a (T,T) = scale * q (T,hs) @ k^T; the upper triangle is discarded
      FN(gemm)(0, 1, T, T, hs, scale, q, 3 * C, k, 3 * C, 0, a, T);
      for (size_t i = 0; i < T; i++) {
        REAL *row = a + i * T, mx = row[0], sum = 0;
        for (size_t j = 1; j <= i; j++)
          mx = row[j] > mx ? row[j] : mx;
        for (size_t j = 0; j <= i; j++)
          sum += row[j] = exp(row[j] - mx);
        for (size_t j = 0; j <= i; j++)
          row[j] /= sum;
        for (size_t j = i + 1; j < T; j++)
          row[j] = 0;
      }
      // y (T,hs) = a (T,T) @ v (T,hs), into columns h*hs of atty
      REAL *y = atty + (size_t)b * T * C + h * hs;
      FN(gemm)(0, 0, T, hs, T, 1, a, T, v, 3 * C, 0, y, C);
    }
}

/* The attention backward: dqkv (n,T,3C) = the gradient of qkv for datty
 * (n,T,C) (overwritten); datt is (T,T) scratch. */
static void FN(attention_bwd)(REAL *dqkv, REAL *datt, const REAL *datty,
                              const REAL *att, const REAL *qkv, int n, size_t T,
                              size_t C, size_t H) {
  size_t hs = C / H;
  REAL scale = 1 / sqrt((REAL)hs);
  for (int b = 0; b < n; b++)
    for (size_t h = 0; h < H; h++) {
      size_t o = (size_t)b * T * 3 * C + h * hs;
      const REAL *q = qkv + o, *k = q + C, *v = q + 2 * C;
      REAL *dq = dqkv + o, *dk = dq + C, *dv = dq + 2 * C;
      const REAL *a = att + ((size_t)b * H + h) * T * T;
      const REAL *dy = datty + (size_t)b * T * C + h * hs;
      // datt (T,T) = dy (T,hs) @ v^T; dv (T,hs) = a^T @ dy
      FN(gemm)(0, 1, T, T, hs, 1, dy, C, v, 3 * C, 0, datt, T);
      FN(gemm)(1, 0, T, hs, T, 1, a, T, dy, C, 0, dv, 3 * C);
      // through the softmax, and the score scale, in place
      for (size_t i = 0; i < T; i++) {
        const REAL *ar = a + i * T;
        REAL *dr = datt + i * T, dot = 0;
        for (size_t j = 0; j <= i; j++)
          dot += ar[j] * dr[j];
        for (size_t j = 0; j <= i; j++)
          dr[j] = scale * ar[j] * (dr[j] - dot);
        for (size_t j = i + 1; j < T; j++)
          dr[j] = 0;
      }
      // dq (T,hs) = datt @ k; dk (T,hs) = datt^T @ q
      FN(gemm)(0, 0, T, hs, T, 1, datt, T, k, 3 * C, 0, dq, 3 * C);
      FN(gemm)(1, 0, T, hs, T, 1, datt, T, q, 3 * C, 0, dk, 3 * C);
    }
}

/* ---- stages -------------------------------------------------------------- */

#define P(k) ((const REAL *)c->params[k])
#define G(k) ((REAL *)c->grads[k])

/* Stage 0: out (n,T,C) = wte[x] + wpe. Tokens are checked before use. */
static int FN(embed_fwd)(const gpt_t *g, const gcall_t *c) {
  size_t T = (size_t)g->cfg.ctx, C = (size_t)g->cfg.channels;
  const int32_t *x = c->in;
  REAL *out = c->out;
  if (tokens_bad(x, c->n, g->cfg.ctx, g->cfg.vocab))
    return -1;
  for (size_t i = 0; i < (size_t)c->n * T; i++) {
    const REAL *e = P(0) + (size_t)x[i] * C, *p = P(1) + (i % T) * C;
    for (size_t k = 0; k < C; k++)
      out[i * C + k] = e[k] + p[k];
  }
  return 0;
}

static int FN(embed_bwd)(const gpt_t *g, const gcall_t *c) {
  size_t T = (size_t)g->cfg.ctx, C = (size_t)g->cfg.channels;
  const int32_t *x = c->in;
  const REAL *dout = c->dout;
  if (tokens_bad(x, c->n, g->cfg.ctx, g->cfg.vocab))
    return -1;
  for (size_t i = 0; i < (size_t)c->n * T; i++) {
    REAL *de = G(0) + (size_t)x[i] * C, *dp = G(1) + (i % T) * C;
    for (size_t k = 0; k < C; k++) {
      de[k] += dout[i * C + k];
      dp[k] += dout[i * C + k];
    }
  }
  return 0;
}

/* A block: out (n,T,C) = x2 + mlp(ln2(x2)), x2 = x + attn(ln1(x)). saved
 * keeps what the backward reads (block_saved_layout). */
static int FN(block_fwd)(const gpt_t *g, const gcall_t *c) {
  size_t T = (size_t)g->cfg.ctx, C = (size_t)g->cfg.channels;
  size_t H = (size_t)g->cfg.heads, N = (size_t)c->n * T, off[BS_N];
  block_saved_layout(g, c->n, off);
  REAL *s = c->saved, *out = c->out;
  const REAL *x = c->in;
  REAL *ln1 = s + off[BS_LN1], *qkv = s + off[BS_QKV], *att = s + off[BS_ATT];
  REAL *atty = s + off[BS_ATTY], *x2 = s + off[BS_X2], *ln2 = s + off[BS_LN2];
  REAL *fch = s + off[BS_FCH], *gel = s + off[BS_GEL];
  FN(layernorm_fwd)(ln1, s + off[BS_M1], s + off[BS_R1], x, P(0), P(1), N, C);
  FN(linear_fwd)(qkv, ln1, P(2), P(3), N, C, 3 * C); // qkv is (N,3C)
  FN(attention_fwd)(atty, att, qkv, c->n, T, C, H);
  FN(linear_fwd)(x2, atty, P(4), P(5), N, C, C);
  for (size_t i = 0; i < N * C; i++)
    x2[i] += x[i];
  FN(layernorm_fwd)(ln2, s + off[BS_M2], s + off[BS_R2], x2, P(6), P(7), N, C);
  FN(linear_fwd)(fch, ln2, P(8), P(9), N, C, 4 * C); // fch is (N,4C)
  FN(gelu_fwd)(gel, fch, N * 4 * C);
  FN(linear_fwd)(out, gel, P(10), P(11), N, 4 * C, C);
  for (size_t i = 0; i < N * C; i++)
    out[i] += x2[i];
  return 0;
}

/* din accumulates the residual stream's gradient: dout, then the MLP
 * branch (that sum is the gradient of x2), then the attention branch. */
static int FN(block_bwd)(const gpt_t *g, const gcall_t *c) {
  size_t T = (size_t)g->cfg.ctx, C = (size_t)g->cfg.channels;
  size_t H = (size_t)g->cfg.heads, N = (size_t)c->n * T, off[BS_N], sc[BK_N];
  block_saved_layout(g, c->n, off);
  block_scratch_layout(g, c->n, sc);
  const REAL *s = c->saved, *x = c->in, *dout = c->dout;
  const REAL *x2 = s + off[BS_X2], *att = s + off[BS_ATT];
  const REAL *m1 = s + off[BS_M1], *r1 = s + off[BS_R1];
  const REAL *m2 = s + off[BS_M2], *r2 = s + off[BS_R2];
  REAL *din = c->din, *w = c->scratch;
  REAL *dbig = w + sc[BK_DBIG], *dln = w + sc[BK_DLN];
  REAL *datty = w + sc[BK_DATTY], *datt = w + sc[BK_DATT];
  if (din != dout) /* dout is not read after din is first changed */
    memcpy(din, dout, N * C * sizeof(REAL));
  // MLP: dbig (N,4C) = d gel, then d fch
  FN(linear_bwd)(dbig, G(10), G(11), dout, s + off[BS_GEL], P(10), N, 4 * C, C);
  FN(gelu_bwd)(dbig, s + off[BS_FCH], N * 4 * C);
  FN(linear_bwd)(dln, G(8), G(9), dbig, s + off[BS_LN2], P(8), N, C, 4 * C);
  FN(layernorm_bwd)(din, G(6), G(7), dln, x2, m2, r2, P(6), N, C);
  // attention: din now holds d x2; dbig (N,3C) becomes d qkv
  FN(linear_bwd)(datty, G(4), G(5), din, s + off[BS_ATTY], P(4), N, C, C);
  FN(attention_bwd)(dbig, datt, datty, att, s + off[BS_QKV], c->n, T, C, H);
  FN(linear_bwd)(dln, G(2), G(3), dbig, s + off[BS_LN1], P(2), N, C, 3 * C);
  FN(layernorm_bwd)(din, G(0), G(1), dln, x, m1, r1, P(0), N, C);
  return 0;
}

/* The last stage: lnf, logits (N,V) = lnf @ wte^T, softmax cross-entropy.
 * saved keeps lnf and the probabilities (head_saved_layout); out gets the
 * SHARC_STAGE_STATS doubles. */
static int FN(head_fwd)(const gpt_t *g, const gcall_t *c) {
  size_t T = (size_t)g->cfg.ctx, C = (size_t)g->cfg.channels;
  size_t V = (size_t)g->cfg.vocab, N = (size_t)c->n * T, off[HS_N];
  double *stats = c->out;
  if (tokens_bad(c->y, c->n, g->cfg.ctx, g->cfg.vocab))
    return -1;
  head_saved_layout(g, c->n, off);
  REAL *s = c->saved, *ln = s + off[HS_LN], *probs = s + off[HS_PROBS];
  FN(layernorm_fwd)(ln, s + off[HS_M], s + off[HS_R], c->in, P(2), P(3), N, C);
  FN(linear_fwd)(probs, ln, P(0), NULL, N, C, V); // logits (N,V)
  double loss = 0, correct = 0;
  for (int b = 0; b < c->n; b++) {
    double seq = 0; // this sequence's summed token loss
    for (size_t t = 0; t < T; t++) {
      size_t i = (size_t)b * T + t, am = 0, tgt = (size_t)c->y[i];
      REAL *row = probs + i * V, mx = row[0], sum = 0, lt = row[tgt];
      for (size_t v = 1; v < V; v++)
        if (row[v] > mx)
          mx = row[v], am = v;
      for (size_t v = 0; v < V; v++)
        sum += row[v] = exp(row[v] - mx);
      for (size_t v = 0; v < V; v++)
        row[v] /= sum;
      // -log softmax(target), from the logits so it cannot overflow
      seq += (double)(log(sum) + mx - lt);
      correct += am == tgt;
    }
    loss += seq / (double)T;
  }
  stats[0] = loss;
  stats[1] = correct;
  return 0;
}

/* Starts the backward chain: d logits = (probs - onehot(y)) / (global_n T),
 * written over the saved probabilities (the head's backward is their last
 * reader). */
static int FN(head_bwd)(const gpt_t *g, const gcall_t *c) {
  size_t T = (size_t)g->cfg.ctx, C = (size_t)g->cfg.channels;
  size_t V = (size_t)g->cfg.vocab, N = (size_t)c->n * T, off[HS_N];
  if (tokens_bad(c->y, c->n, g->cfg.ctx, g->cfg.vocab) || c->global_n < 1)
    return -1;
  head_saved_layout(g, c->n, off);
  REAL *s = c->saved, *dlog = s + off[HS_PROBS], *dln = c->scratch;
  const REAL *m = s + off[HS_M], *r = s + off[HS_R];
  REAL scale = (REAL)(1.0 / ((double)c->global_n * (double)T));
  for (size_t i = 0; i < N; i++) {
    REAL *row = dlog + i * V;
    for (size_t v = 0; v < V; v++)
      row[v] *= scale;
    row[c->y[i]] -= scale;
  }
  // dln (N,C) = dlog @ wte; d wte (V,C) += dlog^T @ lnf
  FN(linear_bwd)(dln, G(0), NULL, dlog, s + off[HS_LN], P(0), N, C, V);
  memset(c->din, 0, N * C * sizeof(REAL));
  FN(layernorm_bwd)(c->din, G(2), G(3), dln, c->in, m, r, P(2), N, C);
  return 0;
}

#undef P
#undef G

static int FN(stage_forward)(const gpt_t *g, const gcall_t *c) {
  switch (g->stages[c->stage].kind) {
  case GPT_STAGE_EMBED:
    return FN(embed_fwd)(g, c);
  case GPT_STAGE_BLOCK:
    return FN(block_fwd)(g, c);
  default:
    return FN(head_fwd)(g, c);
  }
}

static int FN(stage_backward)(const gpt_t *g, const gcall_t *c) {
  switch (g->stages[c->stage].kind) {
  case GPT_STAGE_EMBED:
    return FN(embed_bwd)(g, c);
  case GPT_STAGE_BLOCK:
    return FN(block_bwd)(g, c);
  default:
    return FN(head_bwd)(g, c);
  }
}

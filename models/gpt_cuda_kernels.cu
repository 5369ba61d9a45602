/*
 * gpt_cuda_kernels.cu - the device kernels of the GPT decoder's CUDA twin
 * (gpt_cuda.cu holds the model: the launches, the cuBLAS GEMMs, the buffer
 * layouts, the stages and the callbacks; gpt_cuda_kernels.cuh declares
 * these for it). Each kernel redoes gpt_impl.h's arithmetic with a fixed
 * summation order and no atomics, so that a run is deterministic and
 * every kernel runs unchanged on softcuda: one thread per output element
 * (grid-stride); a block per row where a row is reduced (LayerNorm, the
 * softmaxes, the loss: block_reduce's tree in shared memory,
 * models/cuda_block.cuh, on softcuda's cooperative blocks); blocks of
 * kColX x kColY threads for column sums over the rows (the LayerNorm and
 * bias gradients). gpt_cuda.cu's header says where the results differ
 * from the host's.
 *
 * Compiled by nvcc with --fmad=false --prec-div=true --ftz=false, or on
 * softcuda as host C++ with -ffp-contract=off (cmake/sharc_cuda.cmake):
 * IEEE arithmetic as on the host (expf and logf: CUDA's on a GPU, within
 * 2 ulp of glibc's).
 */
#include "gpt_cuda_kernels.cuh"

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda_block.cuh"

namespace gpt_kernels {

/* Every index a thread owns: i, i + all threads, ... below n. */
#define FOR_EACH(i, n)                                                         \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);      \
       i += (size_t)gridDim.x * blockDim.x)

/* Every row a block owns: r, r + all blocks, ... below n. The threads of
 * the block share the row (row kernels: launch_rows). */
#define FOR_EACH_ROW(r, n) for (size_t r = blockIdx.x; r < (n); r += gridDim.x)

/* Each thread's elements of a row of n: j, j + blockDim.x, ... */
#define FOR_ROW_PART(j, n)                                                     \
  for (size_t j = threadIdx.x; j < (n); j += blockDim.x)

/* ---- kernels: shapes as in gpt_impl.h, N = n*T rows ---------------------- */

/* out (N,C) = wte[tok] + wpe[t]. */
__global__ void embed_fwd_k(float *out, const int32_t *tok, const float *wte,
                            const float *wpe, size_t N, size_t T, size_t C) {
  FOR_EACH(e, N * C) {
    size_t i = e / C, k = e % C;
    out[e] = wte[(size_t)tok[i] * C + k] + wpe[(i % T) * C + k];
  }
}

/* nxt[i] = the next position with tok[i]'s token (-1: none); lead[i] = 1
 * when i is that token's first position. */
__global__ void token_chain_k(int32_t *nxt, int32_t *lead, const int32_t *tok,
                              size_t N) {
  FOR_EACH(i, N) {
    int32_t v = tok[i], nx = -1, first = 1;
    for (size_t j = 0; j < i && first; j++)
      first = tok[j] != v;
    for (size_t j = i + 1; j < N && nx < 0; j++)
      if (tok[j] == v)
        nx = (int32_t)j;
    nxt[i] = nx;
    lead[i] = first;
  }
}

/* dwte (V,C) += dout (N,C) scattered by token: one thread per (leading
 * position, channel) adds its token's positions in increasing order. */
__global__ void embed_wte_bwd_k(float *dwte, const float *dout,
                                const int32_t *tok, const int32_t *nxt,
                                const int32_t *lead, size_t N, size_t C) {
  FOR_EACH(e, N * C) {
    size_t i = e / C, k = e % C;
    if (!lead[i])
      continue;
    float *d = dwte + (size_t)tok[i] * C + k, acc = *d;
    for (int32_t j = (int32_t)i; j >= 0; j = nxt[j])
      acc += dout[(size_t)j * C + k];
    *d = acc;
  }
}

/* dwpe (T,C) += dout (n,T,C) summed over the n sequences in order. */
__global__ void embed_wpe_bwd_k(float *dwpe, const float *dout, size_t n,
                                size_t T, size_t C) {
  FOR_EACH(e, T * C) {
    float acc = dwpe[e];
    for (size_t b = 0; b < n; b++)
      acc += dout[b * T * C + e];
    dwpe[e] = acc;
  }
}

/* LayerNorm, a block per row: out (N,C), mean (N), rstd (N). */
__global__ void layernorm_fwd_k(float *out, float *mean, float *rstd,
                                const float *in, const float *w, const float *b,
                                size_t N, size_t C) {
  SHARC_DYNAMIC_SHARED(float, s);
  const float eps = 1e-5f;
  FOR_EACH_ROW(i, N) {
    const float *x = in + i * C;
    float m = 0, v = 0;
    FOR_ROW_PART(c, C) m += x[c];
    m = block_sum(m, s) / (float)C;
    FOR_ROW_PART(c, C) v += (x[c] - m) * (x[c] - m);
    v = block_sum(v, s) / (float)C;
    float r = 1 / sqrtf(v + eps);
    FOR_ROW_PART(c, C) out[i * C + c] = (x[c] - m) * r * w[c] + b[c];
    if (threadIdx.x == 0) {
      mean[i] = m;
      rstd[i] = r;
    }
  }
}

/* din (N,C) += the LayerNorm input gradient, a block per row. */
__global__ void layernorm_bwd_in_k(float *din, const float *dout,
                                   const float *in, const float *mean,
                                   const float *rstd, const float *w, size_t N,
                                   size_t C) {
  SHARC_DYNAMIC_SHARED(float, s);
  FOR_EACH_ROW(i, N) {
    const float *x = in + i * C, *dy = dout + i * C;
    float m = mean[i], r = rstd[i], sd = 0, sdn = 0;
    FOR_ROW_PART(c, C) {
      float nrm = (x[c] - m) * r, dn = dy[c] * w[c];
      sd += dn;
      sdn += dn * nrm;
    }
    sd = block_sum(sd, s) / (float)C;
    sdn = block_sum(sdn, s) / (float)C;
    FOR_ROW_PART(c, C) {
      float nrm = (x[c] - m) * r, dn = dy[c] * w[c];
      din[i * C + c] += r * (dn - sd - nrm * sdn);
    }
  }
}

/* Column sums over rows, shared by the parameter gradients below: a block
 * of kColX x kColY threads (gpt_cuda_kernels.cuh) owns kColX columns at a
 * time; thread (x, y) sums rows y, y + kColY, ... of column x, then a tree
 * over y (fixed order) adds the kColY partial sums. */

/* s (2 kColX kColY floats): partial sums a, b of this thread; returns, to
 * the threads of row y 0, the column's totals in *a, *b. */
static __device__ void col_sums2(float *a, float *b, float *s) {
  unsigned x = threadIdx.x, y = threadIdx.y, k = y * kColX + x;
  float *sa = s, *sb = s + kColX * kColY;
  sa[k] = *a;
  sb[k] = *b;
  __syncthreads();
  for (unsigned h = kColY / 2; h > 0; h /= 2) {
    if (y < h) {
      sa[k] += sa[k + h * kColX];
      sb[k] += sb[k + h * kColX];
    }
    __syncthreads();
  }
  *a = sa[x];
  *b = sb[x];
  __syncthreads();
}

/* dw, db (C) += the gain and bias gradients (column sums over the N rows;
 * blocks of kColX x kColY threads). */
__global__ void layernorm_bwd_par_k(float *dw, float *db, const float *dout,
                                    const float *in, const float *mean,
                                    const float *rstd, size_t N, size_t C) {
  SHARC_DYNAMIC_SHARED(float, s);
  for (size_t c0 = (size_t)blockIdx.x * kColX; c0 < C;
       c0 += (size_t)gridDim.x * kColX) {
    size_t c = c0 + threadIdx.x;
    float aw = 0, ab = 0;
    for (size_t i = threadIdx.y; c < C && i < N; i += kColY) {
      float nrm = (in[i * C + c] - mean[i]) * rstd[i], dy = dout[i * C + c];
      ab += dy;
      aw += nrm * dy;
    }
    col_sums2(&aw, &ab, s);
    if (threadIdx.y == 0 && c < C) {
      dw[c] += aw;
      db[c] += ab;
    }
  }
}

/* out (N,OC) = b broadcast over the rows. */
__global__ void bias_fill_k(float *out, const float *b, size_t N, size_t OC) {
  FOR_EACH(e, N * OC) out[e] = b[e % OC];
}

/* db (OC) += column sums of dout (N,OC) (blocks of kColX x kColY). */
__global__ void bias_bwd_k(float *db, const float *dout, size_t N, size_t OC) {
  SHARC_DYNAMIC_SHARED(float, s);
  for (size_t o0 = (size_t)blockIdx.x * kColX; o0 < OC;
       o0 += (size_t)gridDim.x * kColX) {
    size_t o = o0 + threadIdx.x;
    float acc = 0, none = 0;
    for (size_t i = threadIdx.y; o < OC && i < N; i += kColY)
      acc += dout[i * OC + o];
    col_sums2(&acc, &none, s);
    if (threadIdx.y == 0 && o < OC)
      db[o] += acc;
  }
}

/* a (count) += b. */
__global__ void add_k(float *a, const float *b, size_t count) {
  FOR_EACH(i, count) a[i] += b[i];
}

/* gpt_impl.h's tanh: 1 - 2 / (1 + e^(2u)). */
static __device__ __forceinline__ float fast_tanh(float u) {
  return 1 - 2 / (1 + expf(2 * u));
}

/* GELU, tanh approximation, as gpt_impl.h. */
__global__ void gelu_fwd_k(float *out, const float *in, size_t count) {
  const float k = 0.7978845608028654f, a = 0.044715f;
  FOR_EACH(i, count) {
    float x = in[i];
    out[i] = 0.5f * x * (1 + fast_tanh(k * (x + a * x * x * x)));
  }
}

/* d (count) *= GELU'(in). */
__global__ void gelu_bwd_k(float *d, const float *in, size_t count) {
  const float k = 0.7978845608028654f, a = 0.044715f;
  FOR_EACH(i, count) {
    float x = in[i], th = fast_tanh(k * (x + a * x * x * x));
    float dth = (1 - th * th) * k * (1 + 3 * a * x * x);
    d[i] *= 0.5f * (1 + th) + 0.5f * x * dth;
  }
}

/* The causal softmax of att (rows of T; row r is query r % T) in place,
 * zero above the diagonal; a block per row. */
__global__ void softmax_fwd_k(float *att, size_t rows, size_t T) {
  SHARC_DYNAMIC_SHARED(float, s);
  FOR_EACH_ROW(r, rows) {
    size_t n = r % T + 1; /* the row's unmasked entries */
    float *row = att + r * T, mx = -INFINITY, sum = 0;
    FOR_ROW_PART(j, n) mx = row[j] > mx ? row[j] : mx;
    mx = block_max(mx, s);
    FOR_ROW_PART(j, n) sum += row[j] = expf(row[j] - mx);
    sum = block_sum(sum, s);
    FOR_ROW_PART(j, n) row[j] /= sum;
    for (size_t j = n + threadIdx.x; j < T; j += blockDim.x)
      row[j] = 0;
  }
}

/* datt = scale * att * (datt - <att, datt>) per row, in place; a block per
 * row. */
__global__ void softmax_bwd_k(float *datt, const float *att, size_t rows,
                              size_t T, float scale) {
  SHARC_DYNAMIC_SHARED(float, s);
  FOR_EACH_ROW(r, rows) {
    size_t n = r % T + 1;
    const float *ar = att + r * T;
    float *dr = datt + r * T, dot = 0;
    FOR_ROW_PART(j, n) dot += ar[j] * dr[j];
    dot = block_sum(dot, s);
    FOR_ROW_PART(j, n) dr[j] = scale * ar[j] * (dr[j] - dot);
    for (size_t j = n + threadIdx.x; j < T; j += blockDim.x)
      dr[j] = 0;
  }
}

/* Softmax cross-entropy, a block per row of logits (N,V): the row becomes
 * probabilities; loss[i] its token loss, ok[i] 1 when the argmax (the
 * first maximum: ties go to the lower index) is the target. Shared:
 * blockDim.x floats, then blockDim.x size_t. */
__global__ void xent_fwd_k(float *logits, double *loss, double *ok,
                           const int32_t *tgt, size_t N, size_t V) {
  SHARC_DYNAMIC_SHARED(float, s);
  size_t *si = reinterpret_cast<size_t *>(s + blockDim.x);
  unsigned t = threadIdx.x;
  FOR_EACH_ROW(i, N) {
    size_t am = V, tg = (size_t)tgt[i];
    float *row = logits + i * V, mx = -INFINITY, sum = 0, lt = row[tg];
    FOR_ROW_PART(v, V) {
      if (am == V || row[v] > mx)
        mx = row[v], am = v;
    }
    s[t] = mx;
    si[t] = am;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
      if (t < h && si[t + h] < V &&
          (si[t] == V || s[t + h] > s[t] ||
           (s[t + h] == s[t] && si[t + h] < si[t]))) {
        s[t] = s[t + h];
        si[t] = si[t + h];
      }
      __syncthreads();
    }
    mx = s[0];
    am = si[0];
    __syncthreads();
    FOR_ROW_PART(v, V) sum += row[v] = expf(row[v] - mx);
    sum = block_sum(sum, s);
    FOR_ROW_PART(v, V) row[v] /= sum;
    if (t == 0) {
      loss[i] = (double)(logf(sum) + mx - lt);
      ok[i] = am == tg;
    }
  }
}

/* stats[0] = sum over the n sequences of their mean token loss, stats[1]
 * the correct tokens: one thread, the host's order. */
__global__ void xent_stats_k(double *stats, const double *loss,
                             const double *ok, size_t n, size_t T) {
  FOR_EACH(one, 1) {
    double sum = 0, correct = 0;
    for (size_t b = 0; b < n; b++) {
      double seq = 0;
      for (size_t t = 0; t < T; t++) {
        seq += loss[b * T + t];
        correct += ok[b * T + t];
      }
      sum += seq / (double)T;
    }
    stats[0] = sum;
    stats[1] = correct;
  }
}

/* d logits (N,V) = (probs - onehot(tgt)) * scale, over the probs. */
__global__ void xent_bwd_k(float *dlog, const int32_t *tgt, size_t N, size_t V,
                           float scale) {
  FOR_EACH(e, N * V) {
    float d = dlog[e] * scale;
    if ((size_t)tgt[e / V] == e % V)
      d -= scale;
    dlog[e] = d;
  }
}

} /* namespace gpt_kernels */

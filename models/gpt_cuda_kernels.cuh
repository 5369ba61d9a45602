/*
 * gpt_cuda_kernels.cuh - between gpt_cuda.cu and gpt_cuda_kernels.cu, not
 * part of the models' API: the GPT's device kernels (defined, with what
 * each computes, in gpt_cuda_kernels.cu) and the column-sum block shape
 * that both the kernels and their launches (gpt_cuda.cu) use. Launching
 * needs only these declarations (the host-side stubs): no relocatable
 * device code. __global__ comes from nvcc, or on softcuda from
 * tests/softcuda/cuda_host.h.
 *
 * Shapes as in gpt_impl.h, N = n*T rows. Grouped by how gpt_cuda.cu
 * launches them.
 */
#ifndef SHARC_MODELS_GPT_CUDA_KERNELS_CUH
#define SHARC_MODELS_GPT_CUDA_KERNELS_CUH

#include <cstddef>
#include <cstdint>

namespace gpt_kernels {

/* Column-sum kernels run blocks of kColX x kColY threads, each block
 * kColX columns at a time, with 2 kColX kColY floats of dynamic shared
 * memory. */
constexpr unsigned kColX = 32, kColY = 8;

/* Grid-stride, one thread per output element (launch; xent_stats_k is one
 * thread in all). */
__global__ void embed_fwd_k(float *out, const int32_t *tok, const float *wte,
                            const float *wpe, size_t N, size_t T, size_t C);
__global__ void token_chain_k(int32_t *nxt, int32_t *lead, const int32_t *tok,
                              size_t N);
__global__ void embed_wte_bwd_k(float *dwte, const float *dout,
                                const int32_t *tok, const int32_t *nxt,
                                const int32_t *lead, size_t N, size_t C);
__global__ void embed_wpe_bwd_k(float *dwpe, const float *dout, size_t n,
                                size_t T, size_t C);
__global__ void bias_fill_k(float *out, const float *b, size_t N, size_t OC);
__global__ void add_k(float *a, const float *b, size_t count);
__global__ void gelu_fwd_k(float *out, const float *in, size_t count);
__global__ void gelu_bwd_k(float *d, const float *in, size_t count);
__global__ void xent_stats_k(double *stats, const double *loss,
                             const double *ok, size_t n, size_t T);
__global__ void xent_bwd_k(float *dlog, const int32_t *tgt, size_t N, size_t V,
                           float scale);

/* A block per row (launch_rows): blockDim.x a power of two from 32, a
 * float of dynamic shared memory per thread (xent_fwd_k: a float and a
 * size_t). */
__global__ void layernorm_fwd_k(float *out, float *mean, float *rstd,
                                const float *in, const float *w, const float *b,
                                size_t N, size_t C);
__global__ void layernorm_bwd_in_k(float *din, const float *dout,
                                   const float *in, const float *mean,
                                   const float *rstd, const float *w, size_t N,
                                   size_t C);
__global__ void softmax_fwd_k(float *att, size_t rows, size_t T);
__global__ void softmax_bwd_k(float *datt, const float *att, size_t rows,
                              size_t T, float scale);
__global__ void xent_fwd_k(float *logits, double *loss, double *ok,
                           const int32_t *tgt, size_t N, size_t V);

/* Column sums over the rows (launch_cols: kColX x kColY blocks). */
__global__ void layernorm_bwd_par_k(float *dw, float *db, const float *dout,
                                    const float *in, const float *mean,
                                    const float *rstd, size_t N, size_t C);
__global__ void bias_bwd_k(float *db, const float *dout, size_t N, size_t OC);

} /* namespace gpt_kernels */

#endif /* SHARC_MODELS_GPT_CUDA_KERNELS_CUH */

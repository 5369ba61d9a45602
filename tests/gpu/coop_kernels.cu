/*
 * coop_kernels.cu - kernels whose threads cooperate through dynamic shared
 * memory and __syncthreads, for test_coop.c: the patterns the models'
 * per-row kernels use (a block-wide tree reduction, a neighbour's value
 * read across a barrier), and two mistakes softcuda must refuse (a
 * divergent barrier, a barrier in a launch without shared memory).
 * Compiled by nvcc, or on softcuda as host C++ (cmake/sharc_cuda.cmake).
 */
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "models/cuda_block.cuh"

namespace {

/* out[b] = the sum of in[b*n ... b*n + n): a block-wide tree reduction
 * (any blockDim.x, not only powers of two). */
__global__ void block_sum_k(int64_t *out, const int64_t *in, size_t n) {
  SHARC_DYNAMIC_SHARED(int64_t, s);
  unsigned t = threadIdx.x, nt = blockDim.x;
  int64_t acc = 0;
  for (size_t i = t; i < n; i += nt)
    acc += in[blockIdx.x * n + i];
  s[t] = acc;
  __syncthreads();
  unsigned width = 1;
  while (width < nt)
    width *= 2;
  for (unsigned h = width / 2; h > 0; h /= 2) {
    if (t < h && t + h < nt)
      s[t] += s[t + h];
    __syncthreads();
  }
  if (t == 0)
    out[blockIdx.x] = s[0];
}

/* out[b*nt + t] = the value thread t+1 (mod nt) wrote before the barrier,
 * then, after a second barrier, the value thread t-1 wrote after the
 * first: each read sees what the other thread wrote, whichever runs
 * first. */
__global__ void neighbour_k(int32_t *out) {
  SHARC_DYNAMIC_SHARED(int32_t, s);
  unsigned t = threadIdx.x, nt = blockDim.x;
  s[t] = (int32_t)(blockIdx.x * 1000 + t);
  __syncthreads();
  int32_t got = s[(t + 1) % nt];
  __syncthreads();
  s[t] = got * 2;
  __syncthreads();
  out[blockIdx.x * nt + t] = s[(t + nt - 1) % nt];
}

/* Thread 0 returns before the barrier the others wait at. */
__global__ void divergent_k(int32_t *out) {
  SHARC_DYNAMIC_SHARED(int32_t, s);
  if (threadIdx.x == 0)
    return;
  s[threadIdx.x] = 1;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

/* A barrier in a kernel that is launched without shared memory. */
__global__ void barrier_only_k(int32_t *out) {
  out[threadIdx.x] = 1;
  __syncthreads();
}

} // namespace

extern "C" {

cudaError_t coop_block_sum(int64_t *out, const int64_t *in, size_t n,
                           unsigned blocks, unsigned threads, cudaStream_t st) {
  void *args[] = {&out, &in, &n};
  return cudaLaunchKernel(block_sum_k, dim3(blocks), dim3(threads), args,
                          threads * sizeof(int64_t), st);
}

cudaError_t coop_neighbour(int32_t *out, unsigned blocks, unsigned threads,
                           cudaStream_t st) {
  void *args[] = {&out};
  return cudaLaunchKernel(neighbour_k, dim3(blocks), dim3(threads), args,
                          threads * sizeof(int32_t), st);
}

cudaError_t coop_divergent(int32_t *out, unsigned threads, cudaStream_t st) {
  void *args[] = {&out};
  return cudaLaunchKernel(divergent_k, dim3(1), dim3(threads), args,
                          threads * sizeof(int32_t), st);
}

cudaError_t coop_barrier_unshared(int32_t *out, unsigned threads,
                                  cudaStream_t st) {
  void *args[] = {&out};
  return cudaLaunchKernel(barrier_only_k, dim3(1), dim3(threads), args, 0, st);
}

} // extern "C"

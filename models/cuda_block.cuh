/*
 * cuda_block.cuh - dynamic shared memory, declared the same way for nvcc and
 * for softcuda: SHARC_DYNAMIC_SHARED(T, name) makes `name` a T * to the
 * launch's dynamic shared memory (its sharedMem bytes, 16-byte aligned).
 * softcuda's cuda_host.h defines it first (its cooperative blocks give
 * each block that memory); under nvcc it is the usual extern array.
 * Static __shared__ arrays are not used: their size would not reach the
 * launch, and softcuda runs barriers only for launches that ask for shared
 * memory.
 *
 * Also here: block_sum and block_max, the block-wide reductions the
 * models' row kernels share (blockDim.x a power of two from 32, blockDim.x
 * floats of that memory).
 */
#ifndef SHARC_MODELS_CUDA_BLOCK_CUH
#define SHARC_MODELS_CUDA_BLOCK_CUH

#ifndef SHARC_DYNAMIC_SHARED
#define SHARC_DYNAMIC_SHARED(T, name)                                          \
  extern __shared__ __align__(16) unsigned char sharc_dynamic_shared_[];       \
  T *name = reinterpret_cast<T *>(sharc_dynamic_shared_)
#endif

/* Block-wide reductions of every thread's v, the result returned to every
 * thread, over shared memory s (blockDim.x floats; blockDim.x a power of
 * two from 32): a tree halves the partial values down to 32, then every
 * thread combines those 32 in index order. The same order every run
 * (deterministic, no atomics), and 2 + log2(blockDim.x / 32) barriers:
 * each costs a fiber switch per thread on softcuda. */
template <class F>
static __device__ __forceinline__ float block_reduce(float v, float *s, F f) {
  unsigned t = threadIdx.x;
  s[t] = v;
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h >= 32; h /= 2) {
    if (t < h)
      s[t] = f(s[t], s[t + h]);
    __syncthreads();
  }
  float r = s[0];
  for (unsigned k = 1; k < 32; k++)
    r = f(r, s[k]);
  __syncthreads(); /* s is free again */
  return r;
}

struct sharc_add_op {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct sharc_max_op {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

static __device__ __forceinline__ float block_sum(float v, float *s) {
  return block_reduce(v, s, sharc_add_op());
}
static __device__ __forceinline__ float block_max(float v, float *s) {
  return block_reduce(v, s, sharc_max_op());
}

#endif /* SHARC_MODELS_CUDA_BLOCK_CUH */

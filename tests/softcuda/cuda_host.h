/*
 * cuda_host.h - CUDA device code compiled as host C++ for softcuda, so that
 * the softcuda build runs the project's own kernels (the .cu files of
 * kernels/), not a host stand-in. The build force-includes it (-include)
 * before a .cu file compiled by g++ or clang++ as C++17.
 *
 * What it provides, over the toolkit's own cuda_runtime.h (which, compiled
 * without nvcc, declares dim3, uint4 and the runtime API):
 *  - __global__, __device__ and __host__ as nothing, __forceinline__ as
 *    the host compiler's always_inline, __launch_bounds__ as nothing;
 *  - threadIdx, blockIdx, blockDim and gridDim as thread-local variables
 *    that the launcher sets for each (block, thread) it runs;
 *  - the intrinsics the kernels use, with the same results: the bit casts,
 *    __fadd_rn and __fmul_rn (IEEE single precision, round to nearest
 *    even: what SSE arithmetic does), CUDA's integer min and max;
 *  - cudaLaunchKernel for a typed kernel pointer (nvcc accepts the same
 *    call through the runtime's template): it copies the arguments, as a
 *    launch does, and queues the whole grid on the stream through
 *    softcuda_launch (softcuda_launch.h).
 *
 *  - __syncthreads and dynamic shared memory (SHARC_DYNAMIC_SHARED(T, name)
 *    declares it, here and under nvcc: models/cuda_block.cuh) for kernels
 *    launched with sharedMem > 0: those run one block at a time, every
 *    thread on a fiber of its own (softcuda_block.c), so barriers hold as
 *    on a GPU, and a divergent barrier fails the context.
 *
 * What it refuses: static __shared__ is a compile error (its size would
 * not reach the launch; use the dynamic kind). A kernel launched without
 * shared memory runs serially, one thread to its end before the next
 * starts: __syncthreads there fails the context, saying so. Grid-stride
 * kernels, where each element belongs to one thread, run that way
 * faithfully, in either grid order.
 */
#ifndef SHARC_SOFTCUDA_CUDA_HOST_H
#define SHARC_SOFTCUDA_CUDA_HOST_H

#ifdef __CUDACC__
#error "cuda_host.h is for compiling device code with a host compiler"
#endif

/* Before cuda_runtime.h: its host_defines.h leaves them alone when set. */
#define __global__
#define __device__
#define __host__
#define __shared__ __shared___memory_cannot_run_on_softcuda
#define __launch_bounds__(...)

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include "softcuda_launch.h"

/* Set by the launcher for the (block, thread) it runs (plain data: no
 * thread-local constructors). */
/* initial-exec: a plain %fs-relative access, not a __tls_get_addr call
 * (which ASan intercepts) on every use in a kernel. */
#define SOFTCUDA_TLS __attribute__((tls_model("initial-exec")))
inline thread_local uint3 threadIdx SOFTCUDA_TLS, blockIdx SOFTCUDA_TLS,
    blockDim SOFTCUDA_TLS, gridDim SOFTCUDA_TLS;

static __forceinline__ float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
static __forceinline__ uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
/* x86-64 float arithmetic is IEEE single precision, round to nearest even,
 * without contraction (the build passes -ffp-contract=off). */
static __forceinline__ float __fadd_rn(float a, float b) { return a + b; }
static __forceinline__ float __fmul_rn(float a, float b) { return a * b; }
/* The block's barrier: a fiber switch (softcuda_block.c); the thread-local
 * indices are this thread's again after it. */
static __forceinline__ void __syncthreads() {
  uint3 t = threadIdx, b = blockIdx;
  softcuda_syncthreads();
  threadIdx = t;
  blockIdx = b;
}
/* The launch's dynamic shared memory, as T name[] (models/cuda_block.cuh). */
#define SHARC_DYNAMIC_SHARED(T, name)                                          \
  T *name = static_cast<T *>(softcuda_shared())
static __forceinline__ int min(int a, int b) { return a < b ? a : b; }
static __forceinline__ int max(int a, int b) { return a > b ? a : b; }

namespace softcuda_host {

template <class... A> struct launch {
  void (*fn)(A...);
  std::tuple<std::decay_t<A>...> args; /* copied at launch, as CUDA does */
  dim3 grid, block;
  std::size_t shared; /* dynamic shared memory: cooperative blocks */
};

template <class... A, std::size_t... I>
std::tuple<std::decay_t<A>...> load(void **args, std::index_sequence<I...>) {
  return std::tuple<std::decay_t<A>...>(
      *static_cast<std::decay_t<A> *>(args[I])...);
}

inline uint3 index_of(std::size_t i, dim3 d) {
  return uint3{(unsigned)(i % d.x), (unsigned)(i / d.x % d.y),
               (unsigned)(i / ((std::size_t)d.x * d.y))};
}

/* One thread of a cooperative block, on its fiber (softcuda_block.c). */
template <class... A>
void coop_thread(void *ctx, std::size_t b, std::size_t t) {
  auto *l = static_cast<launch<A...> *>(ctx);
  blockIdx = index_of(b, l->grid);
  threadIdx = index_of(t, l->block);
  std::apply(l->fn, l->args);
}

/* The stream's worker: every block, every thread of it. */
template <class... A> void run(void *ctx, int reverse) {
  auto *l = static_cast<launch<A...> *>(ctx);
  gridDim = uint3{l->grid.x, l->grid.y, l->grid.z};
  blockDim = uint3{l->block.x, l->block.y, l->block.z};
  const std::size_t nb = (std::size_t)l->grid.x * l->grid.y * l->grid.z;
  const std::size_t nt = (std::size_t)l->block.x * l->block.y * l->block.z;
  if (l->shared) {
    softcuda_grid_run_coop(nb, nt, reverse, l->shared, coop_thread<A...>, l);
    return;
  }
  for (std::size_t i = 0; i < nb; i++) {
    blockIdx = index_of(reverse ? nb - 1 - i : i, l->grid);
    for (std::size_t j = 0; j < nt; j++) {
      threadIdx = index_of(reverse ? nt - 1 - j : j, l->block);
      std::apply(l->fn, l->args);
    }
  }
}

template <class... A> void release(void *ctx) {
  auto *l = static_cast<launch<A...> *>(ctx);
  l->~launch();
  std::free(ctx);
}

/* The pointer arguments among args, for softcuda's checks. */
template <class T> void pointer_of(const T &v, const void **out, int *n) {
  if constexpr (std::is_pointer_v<T>)
    out[(*n)++] = static_cast<const void *>(v);
}

} /* namespace softcuda_host */

/* A kernel launch (the runtime's own overloads take `const T *` or
 * `const void *`; this one, more specialised, keeps the argument types). */
template <class... A>
static inline cudaError_t
cudaLaunchKernel(void (*fn)(A...), dim3 grid, dim3 block, void **args,
                 std::size_t shared_mem = 0, cudaStream_t stream = 0) {
  using L = softcuda_host::launch<A...>;
  void *mem = std::malloc(sizeof(L));
  if (mem == nullptr)
    return cudaErrorMemoryAllocation;
  L *l = new (mem)
      L{fn, softcuda_host::load<A...>(args, std::index_sequence_for<A...>{}),
        grid, block, shared_mem};
  const void *ptrs[sizeof...(A) + 1] = {nullptr};
  int nptrs = 0;
  std::apply(
      [&](const auto &...v) {
        (softcuda_host::pointer_of(v, ptrs, &nptrs), ...);
      },
      l->args);
  return softcuda_launch(reinterpret_cast<const void *>(fn), grid, block,
                         shared_mem, stream, softcuda_host::run<A...>,
                         softcuda_host::release<A...>, l, ptrs, nptrs);
}

#endif /* SHARC_SOFTCUDA_CUDA_HOST_H */

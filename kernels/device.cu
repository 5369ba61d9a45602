/*
 * device.cu - CUDA kernels for the GPU data path: dst = a OP b and the AVG
 * finish step buf /= divisor for every sharc dtype (see device.h), with the
 * host kernels of reduce.c as the reference they must match bit for bit
 * (tests/gpu/test_dev_kernels.c checks it).
 *
 * One kernel template, elementwise<dtype, op>, covers all 10 dtypes x 5
 * operations (sum, prod, min, max, div; AVG reduces as sum): 50
 * instantiations; the dtype table (dtypes.h, shared with reduce.c) is the
 * only per-type code.
 * Each thread moves 16 bytes per step where dst, a and b share their
 * offset modulo 16 (a scalar head brings them to a 16-byte boundary, a
 * scalar tail finishes), one element per step otherwise. Grid-stride loops
 * over size_t indices, so n is not limited to 2^31; the grid is sized from
 * the device's multiprocessor count (cached per device) so that every block
 * is resident at once.
 *
 * Built with --ftz=false --prec-div=true --fmad=false
 * (cmake/sharc_cuda.cmake): IEEE rounding as on the host.
 */
#include "device.h"
#include "dtypes.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>

#ifndef SHARC_CUDA_ARCHS
#define SHARC_CUDA_ARCHS "?"
#endif

namespace {

constexpr int kThreads = 256;
/* 4 x 256 threads per SM fit on every sm_80+ part at <= 64 registers each
 * (__launch_bounds__ enforces it), and keep 32 KiB of loads in flight per
 * SM: enough to saturate HBM for a streaming kernel. */
constexpr int kBlocksPerSm = 4;
constexpr int kMaxDevices = 64;

/* ---- f16 / bf16 <-> f32, the same results as reduce.c ----------------------
 * reduce.c's versions are shaped for gcc's vectoriser; these are shaped for
 * the GPU (branches are cheap, integer selects are free) but must give the
 * same bits for every input. f32_to_f16 and the bf16 pair are the same
 * integer recipe. f16_to_f32 differs in form: reduce.c decodes with one
 * float subtraction, which on x86 quiets a signalling NaN and keeps its
 * payload, whereas a GPU float operation may return its canonical NaN; so
 * here NaNs are decoded in integer code (payload kept, quiet bit set), and
 * only subnormals use the (exact) float multiply. */

__device__ __forceinline__ uint32_t neg_mask(uint32_t v) {
  return 0u - (v >> 31);
}

/* binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; exact. */
__device__ __forceinline__ float f16_to_f32(uint16_t h) {
  const uint32_t x = h;
  const uint32_t em = x & 0x7fffu;
  const uint32_t sign = (x & 0x8000u) << 16;
  uint32_t r;
  if (em < 0x0400u) /* zero or subnormal: em * 2^-24, exact in f32 */
    r = __float_as_uint(__fmul_rn((float)em, 0x1p-24f));
  else if (em < 0x7c00u) /* normal: rebias the exponent 15 -> 127 */
    r = (em << 13) + ((127u - 15u) << 23);
  else /* inf or NaN: exponent 255; a NaN is quieted */
    r = ((em << 13) + ((255u - 31u) << 23)) | (em > 0x7c00u ? 0x00400000u : 0u);
  return __uint_as_float(r | sign);
}

/* f32 -> binary16, round to nearest even: reduce.c's recipe (one float
 * addition rounds |f| onto the f16 grid; see the comment there). Both
 * addends are finite and non-negative, so the GPU's NaN rules never apply. */
__device__ __forceinline__ uint16_t f32_to_f16(float f) {
  const uint32_t x = __float_as_uint(f);
  const int32_t ax = (int32_t)(x & 0x7fffffffu);
  const uint32_t nan = neg_mask(0x7f800000u - (uint32_t)ax) &
                       ((0x200u << 13) | ((uint32_t)ax & (0x1ffu << 13)));
  const int32_t in = min(ax, 0x47800000);             /* <= 2^16 */
  const int32_t e = max(in & 0x7f800000, 0x38800000); /* 2^E, E >= -14 */
  const int32_t m = e + (13 << 23);                   /* M = 2^(E+13) */
  const uint32_t ulps =
      __float_as_uint(__fadd_rn(__uint_as_float((uint32_t)in),
                                __uint_as_float((uint32_t)m))) -
      (uint32_t)m;
  uint32_t r = ((uint32_t)e - 0x38800000u) + (ulps << 13);
  r |= ((x >> 3) & 0x10000000u) | nan;
  return (uint16_t)(r >> 13);
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* The dtype table, SHARC_KERNEL_DTYPES, is in dtypes.h (shared with
 * reduce.c). */

template <sharc_dtype_t DT> struct dtype_traits;

#define DEV_TRAITS(DT, T_, C_, U_, LD, ST)                                     \
  template <> struct dtype_traits<SHARC_##DT> {                                \
    using T = T_;                                                              \
    using C = C_;                                                              \
    using U = U_;                                                              \
    static __device__ __forceinline__ C ld(T v) { return LD(C, v); }           \
    static __device__ __forceinline__ T st(C v) { return ST(T, v); }           \
  };
SHARC_KERNEL_DTYPES(DEV_TRAITS)
#undef DEV_TRAITS

/* The five element operations; SHARC_AVG maps to OP_SUM. */
enum { OP_SUM, OP_PROD, OP_MIN, OP_MAX, OP_DIV, OP_COUNT };

/* One element: a OP b, or a / d for OP_DIV (b unused). The expressions are
 * reduce.c's OP_* and DIV_FN: min/max are plain comparisons (a NaN operand
 * yields the second operand, and min(-0, +0) is +0), never fmin/fmax. */
template <class D, int OP>
__device__ __forceinline__ typename D::T apply(typename D::T a, typename D::T b,
                                               typename D::C d) {
  using C = typename D::C;
  using U = typename D::U;
  const C x = D::ld(a);
  if constexpr (OP == OP_DIV) {
    return D::st((C)(x / d));
  } else {
    const C y = D::ld(b);
    if constexpr (OP == OP_SUM)
      return D::st((C)((U)x + (U)y));
    else if constexpr (OP == OP_PROD)
      return D::st((C)((U)x * (U)y));
    else if constexpr (OP == OP_MIN)
      return D::st(x < y ? x : y);
    else
      return D::st(x > y ? x : y);
  }
}

/* 16 bytes <-> a register array of elements. p is 16-byte aligned. */
template <class T>
__device__ __forceinline__ void load16(T (&v)[16 / sizeof(T)], const T *p) {
  const uint4 u = *reinterpret_cast<const uint4 *>(p);
  memcpy(v, &u, sizeof u);
}

template <class T>
__device__ __forceinline__ void store16(T *p, const T (&v)[16 / sizeof(T)]) {
  uint4 u;
  memcpy(&u, v, sizeof u);
  *reinterpret_cast<uint4 *>(p) = u;
}

/* dst = a OP b (or a / divisor) over n elements, laid out as
 *   [0, head)                      scalar: up to the first 16-byte boundary
 *   [head, head + nvec * V)        nvec 16-byte vectors of V elements
 *   [head + nvec * V, n)           scalar tail, < V elements
 * where the host chose head and nvec (head = n, nvec = 0: all scalar). The
 * scalar elements (head + tail of them) form one grid-stride range. No
 * __restrict__ and no read-only (ld.global.nc) loads: dst may be a or b.
 * Each element is read and written by the same thread, so in place is
 * safe. */
template <sharc_dtype_t DT, int OP>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    elementwise(void *dst_, const void *a_, const void *b_, size_t n,
                size_t head, size_t nvec, int divisor) {
  using D = dtype_traits<DT>;
  using T = typename D::T;
  using C = typename D::C;
  constexpr size_t V = 16 / sizeof(T);
  T *dst = static_cast<T *>(dst_);
  const T *a = static_cast<const T *>(a_);
  const T *b = static_cast<const T *>(b_);
  const C d = (C)divisor;
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t nthreads = (size_t)gridDim.x * blockDim.x;

  for (size_t i = tid; i < nvec; i += nthreads) {
    const size_t e = head + i * V;
    T x[V];
    load16(x, a + e);
    if constexpr (OP == OP_DIV) {
#pragma unroll
      for (size_t k = 0; k < V; k++)
        x[k] = apply<D, OP>(x[k], x[k], d);
    } else {
      T y[V];
      load16(y, b + e);
#pragma unroll
      for (size_t k = 0; k < V; k++)
        x[k] = apply<D, OP>(x[k], y[k], d);
    }
    store16(dst + e, x);
  }

  const size_t body_end = head + nvec * V;
  const size_t nscalar = n - nvec * V; /* head + tail */
  for (size_t s = tid; s < nscalar; s += nthreads) {
    const size_t e = s < head ? s : body_end + (s - head);
    dst[e] = apply<D, OP>(a[e], OP == OP_DIV ? a[e] : b[e], d);
  }
}

using kernel_fn = void (*)(void *, const void *, const void *, size_t, size_t,
                           size_t, int);

struct kernel_pick {
  kernel_fn fn;
  size_t esize; /* bytes per element */
};

template <sharc_dtype_t DT> kernel_pick pick_op(int op) {
  const size_t es = sizeof(typename dtype_traits<DT>::T);
  switch (op) {
  case OP_SUM:
    return {elementwise<DT, OP_SUM>, es};
  case OP_PROD:
    return {elementwise<DT, OP_PROD>, es};
  case OP_MIN:
    return {elementwise<DT, OP_MIN>, es};
  case OP_MAX:
    return {elementwise<DT, OP_MAX>, es};
  default:
    return {elementwise<DT, OP_DIV>, es};
  }
}

/* dtype and op already validated. */
kernel_pick pick(sharc_dtype_t dtype, int op) {
  switch (dtype) {
#define PICK_CASE(DT, ...)                                                     \
  case SHARC_##DT:                                                             \
    return pick_op<SHARC_##DT>(op);
    SHARC_KERNEL_DTYPES(PICK_CASE)
#undef PICK_CASE
  default:
    return {nullptr, 0};
  }
}

/* Multiprocessor count of the current device, queried once per device. */
std::atomic<int> sm_cache[kMaxDevices];

cudaError_t current_sm_count(int *out) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess)
    return err;
  const bool cached = dev >= 0 && dev < kMaxDevices;
  int sms = cached ? sm_cache[dev].load(std::memory_order_relaxed) : 0;
  if (sms <= 0) {
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess)
      return err;
    if (cached)
      sm_cache[dev].store(sms, std::memory_order_relaxed);
  }
  *out = sms > 0 ? sms : 1;
  return cudaSuccess;
}

/* Blocks of kThreads for work steps: one per kThreads steps, at most
 * kBlocksPerSm per multiprocessor (grid-stride loops do the rest). */
cudaError_t grid_blocks(size_t work, size_t *blocks) {
  int sms = 1;
  cudaError_t err = current_sm_count(&sms);
  if (err != cudaSuccess)
    return err;
  *blocks = (work + kThreads - 1) / kThreads;
  if (*blocks > (size_t)sms * kBlocksPerSm)
    *blocks = (size_t)sms * kBlocksPerSm;
  return cudaSuccess;
}

/* The element operation of a sharc_op_t (SHARC_AVG sums). */
int kernel_op(sharc_op_t op) {
  switch (op) {
  case SHARC_PROD:
    return OP_PROD;
  case SHARC_MIN:
    return OP_MIN;
  case SHARC_MAX:
    return OP_MAX;
  default:
    return OP_SUM;
  }
}

/* Splits [0, n) into head / vectors / tail (see elementwise) and launches.
 * Pointers were checked non-NULL; for OP_DIV, b == a. */
int launch(sharc_dtype_t dtype, int op, void *dst, const void *a, const void *b,
           size_t n, int divisor, void *stream) {
  const kernel_pick k = pick(dtype, op);
  const uintptr_t pd = (uintptr_t)dst, pa = (uintptr_t)a, pb = (uintptr_t)b;
  if (k.fn == nullptr || (pd | pa | pb) % k.esize != 0)
    return (int)cudaErrorInvalidValue; /* misaligned elements would fault */
  const size_t per_vec = 16 / k.esize;
  size_t head = n, nvec = 0;
  const uintptr_t mis = pa & 15u;
  if ((pd & 15u) == mis && (pb & 15u) == mis) {
    head = ((16u - mis) & 15u) / k.esize;
    if (head > n)
      head = n;
    nvec = (n - head) / per_vec;
  }
  const size_t nscalar = n - nvec * per_vec;
  const size_t work = nvec > nscalar ? nvec : nscalar; /* steps, > 0 */

  size_t blocks = 0;
  cudaError_t err = grid_blocks(work, &blocks);
  if (err != cudaSuccess)
    return (int)err;

  void *args[] = {&dst, &a, &b, &n, &head, &nvec, &divisor};
  /* The typed pointer (the runtime's template overload): softcuda's
   * launcher (tests/softcuda/cuda_host.h) needs the argument types. */
  err = cudaLaunchKernel(k.fn, dim3((unsigned)blocks), dim3(kThreads), args, 0,
                         static_cast<cudaStream_t>(stream));
  return (int)err;
}

/* ---- the n-ary reduction ----------------------------------------------- */

constexpr int kMaxSrcs = 8; /* sources one reduce_n kernel reads */

/* x OP y in the compute type: apply()'s expressions without the store. */
template <class D, int OP>
__device__ __forceinline__ typename D::C combine(typename D::C x,
                                                 typename D::C y) {
  using C = typename D::C;
  using U = typename D::U;
  if constexpr (OP == OP_SUM)
    return (C)((U)x + (U)y);
  else if constexpr (OP == OP_PROD)
    return (C)((U)x * (U)y);
  else if constexpr (OP == OP_MIN)
    return x < y ? x : y;
  else
    return x > y ? x : y;
}

/* dst[i] = s0[i] OP s1[i] OP ... (nsrc of them, in that order), in the
 * compute type, stored once; divisor > 1 divides first (AVG). The 16-bit
 * floats accumulate in f32 and round once; every other type gives the bits
 * of the pairwise kernels (integers wrap alike whether truncated at each
 * step or at the end; f32 and f64 compute in their own type), and their
 * AVG divides the stored sum, as kernel_div does. The sources are named
 * one by one (not an array) so that softcuda checks each pointer. dst may
 * be one of them exactly: each element is read and written by one
 * thread. */
template <sharc_dtype_t DT, int OP>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    reduce_n(void *dst_, const void *s0, const void *s1, const void *s2,
             const void *s3, const void *s4, const void *s5, const void *s6,
             const void *s7, int nsrc, size_t n, int divisor) {
  using D = dtype_traits<DT>;
  using T = typename D::T;
  using C = typename D::C;
  const T *s[kMaxSrcs] = {
      static_cast<const T *>(s0), static_cast<const T *>(s1),
      static_cast<const T *>(s2), static_cast<const T *>(s3),
      static_cast<const T *>(s4), static_cast<const T *>(s5),
      static_cast<const T *>(s6), static_cast<const T *>(s7)};
  T *dst = static_cast<T *>(dst_);
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    C acc = D::ld(s[0][i]);
    for (int k = 1; k < nsrc; k++)
      acc = combine<D, OP>(acc, D::ld(s[k][i]));
    if (divisor > 1) {
      if constexpr (DT == SHARC_F16 || DT == SHARC_BF16)
        acc = acc / (C)divisor; /* one rounding, below */
      else
        acc = (C)(D::ld(D::st(acc)) / (C)divisor);
    }
    dst[i] = D::st(acc);
  }
}

using reduce_n_fn = void (*)(void *, const void *, const void *, const void *,
                             const void *, const void *, const void *,
                             const void *, const void *, int, size_t, int);

template <sharc_dtype_t DT> reduce_n_fn pick_n(int op) {
  switch (op) {
  case OP_SUM:
    return reduce_n<DT, OP_SUM>;
  case OP_PROD:
    return reduce_n<DT, OP_PROD>;
  case OP_MIN:
    return reduce_n<DT, OP_MIN>;
  default:
    return reduce_n<DT, OP_MAX>;
  }
}

reduce_n_fn pick_reduce_n(sharc_dtype_t dtype, int op) {
  switch (dtype) {
#define PICK_N_CASE(DT, ...)                                                   \
  case SHARC_##DT:                                                             \
    return pick_n<SHARC_##DT>(op);
    SHARC_KERNEL_DTYPES(PICK_N_CASE)
#undef PICK_N_CASE
  default:
    return nullptr;
  }
}

/* dst[i] = src[i] from type S to type D (f32, f16 or bf16; not equal),
 * through f32 with the conversions above. */
template <sharc_dtype_t D, sharc_dtype_t S>
__global__ void __launch_bounds__(kThreads)
    convert_kernel(void *dst, const void *src, size_t n) {
  using TD = typename dtype_traits<D>::T;
  using TS = typename dtype_traits<S>::T;
  TD *d = static_cast<TD *>(dst);
  const TS *s = static_cast<const TS *>(src);
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    d[i] = dtype_traits<D>::st((float)dtype_traits<S>::ld(s[i]));
}

using convert_fn = void (*)(void *, const void *, size_t);

template <sharc_dtype_t D> convert_fn convert_from(sharc_dtype_t s) {
  switch (s) {
  case SHARC_F32:
    return D == SHARC_F32 ? nullptr : convert_kernel<D, SHARC_F32>;
  case SHARC_F16:
    return D == SHARC_F16 ? nullptr : convert_kernel<D, SHARC_F16>;
  case SHARC_BF16:
    return D == SHARC_BF16 ? nullptr : convert_kernel<D, SHARC_BF16>;
  default:
    return nullptr;
  }
}

void say(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void say(char *why, size_t whylen, const char *fmt, ...) {
  if (why == nullptr || whylen == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
}

} /* namespace */

extern "C" {

int kernel_dev_reduce(sharc_dtype_t dtype, sharc_op_t op, void *dst,
                      const void *a, const void *b, size_t n,
                      void *cuda_stream) {
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT || (unsigned)op >= SHARC_OP_COUNT)
    return (int)cudaErrorInvalidValue;
  if (n == 0)
    return 0;
  if (dst == nullptr || a == nullptr || b == nullptr)
    return (int)cudaErrorInvalidValue;
  return launch(dtype, kernel_op(op), dst, a, b, n, 1, cuda_stream);
}

int kernel_dev_div(sharc_dtype_t dtype, void *buf, size_t n, int divisor,
                   void *cuda_stream) {
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT || divisor <= 0)
    return (int)cudaErrorInvalidValue;
  if (n == 0 || divisor == 1)
    return 0; /* x / 1 == x in every type */
  if (buf == nullptr)
    return (int)cudaErrorInvalidValue;
  return launch(dtype, OP_DIV, buf, buf, buf, n, divisor, cuda_stream);
}

int kernel_dev_reduce_n(sharc_dtype_t dtype, sharc_op_t op, void *dst,
                        const void *const *srcs, int nsrc, size_t n,
                        void *cuda_stream) {
  if ((unsigned)dtype >= SHARC_DTYPE_COUNT || (unsigned)op >= SHARC_OP_COUNT ||
      nsrc < 1 || srcs == nullptr)
    return (int)cudaErrorInvalidValue;
  if (n == 0)
    return 0;
  if (dst == nullptr)
    return (int)cudaErrorInvalidValue;
  size_t es = 1;
  switch (dtype) {
#define ESIZE_CASE(DT, T, ...)                                                 \
  case SHARC_##DT:                                                             \
    es = sizeof(T);                                                            \
    break;
    SHARC_KERNEL_DTYPES(ESIZE_CASE)
#undef ESIZE_CASE
  default:
    break;
  }
  for (int k = 0; k < nsrc; k++)
    if (srcs[k] == nullptr || (uintptr_t)srcs[k] % es != 0)
      return (int)cudaErrorInvalidValue;
  if ((uintptr_t)dst % es != 0)
    return (int)cudaErrorInvalidValue;
  const reduce_n_fn fn = pick_reduce_n(dtype, kernel_op(op));
  size_t blocks = 0;
  cudaError_t err = grid_blocks(n, &blocks);
  if (err != cudaSuccess)
    return (int)err;
  /* kMaxSrcs at a time; later kernels start from dst */
  for (int done = 0; done < nsrc;) {
    const void *s[kMaxSrcs] = {nullptr};
    int m = 0;
    if (done > 0)
      s[m++] = dst;
    while (m < kMaxSrcs && done < nsrc)
      s[m++] = srcs[done++];
    int divisor = op == SHARC_AVG && done == nsrc ? nsrc : 1;
    void *args[] = {&dst,  &s[0], &s[1], &s[2], &s[3], &s[4],
                    &s[5], &s[6], &s[7], &m,    &n,    &divisor};
    err = cudaLaunchKernel(fn, dim3((unsigned)blocks), dim3(kThreads), args, 0,
                           static_cast<cudaStream_t>(cuda_stream));
    if (err != cudaSuccess)
      return (int)err;
  }
  return 0;
}

int kernel_dev_convert(void *dst, sharc_dtype_t dst_type, const void *src,
                       sharc_dtype_t src_type, size_t n, void *cuda_stream) {
  convert_fn fn = nullptr;
  if (dst_type == SHARC_F32)
    fn = convert_from<SHARC_F32>(src_type);
  else if (dst_type == SHARC_F16)
    fn = convert_from<SHARC_F16>(src_type);
  else if (dst_type == SHARC_BF16)
    fn = convert_from<SHARC_BF16>(src_type);
  if (dst_type == src_type && (dst_type == SHARC_F32 || dst_type == SHARC_F16 ||
                               dst_type == SHARC_BF16))
    return kernel_dev_copy(dst, src, n * (dst_type == SHARC_F32 ? 4 : 2),
                           cuda_stream);
  if (fn == nullptr || (n > 0 && (dst == nullptr || src == nullptr)))
    return (int)cudaErrorInvalidValue;
  if (n == 0)
    return 0;
  size_t blocks = 0;
  cudaError_t err = grid_blocks(n, &blocks);
  if (err != cudaSuccess)
    return (int)err;
  void *args[] = {&dst, &src, &n};
  return (int)cudaLaunchKernel(fn, dim3((unsigned)blocks), dim3(kThreads), args,
                               0, static_cast<cudaStream_t>(cuda_stream));
}

/* Loads one kernel into the current device's context (cudaFuncGetAttributes
 * does, under lazy loading); the first error is kept in *err. */
static void preload_one(const void *fn, cudaError_t *err) {
  if (fn == nullptr || *err != cudaSuccess)
    return;
  cudaFuncAttributes attr;
  *err = cudaFuncGetAttributes(&attr, fn);
}

/* Devices whose context has every kernel loaded (kernel_dev_preload). */
static std::atomic<bool> preloaded[kMaxDevices];

int kernel_dev_preload(void) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess)
    return (int)err;
  const bool cached = dev >= 0 && dev < kMaxDevices;
  if (cached && preloaded[dev].load(std::memory_order_acquire))
    return 0;
  static const sharc_op_t ops[] = {SHARC_SUM, SHARC_PROD, SHARC_MIN, SHARC_MAX};
  static const sharc_dtype_t floats[] = {SHARC_F32, SHARC_F16, SHARC_BF16};
  for (unsigned d = 0; d < SHARC_DTYPE_COUNT && err == cudaSuccess; d++) {
    const sharc_dtype_t dt = static_cast<sharc_dtype_t>(d);
    if (pick_reduce_n(dt, OP_SUM) == nullptr)
      continue; /* not a kernel dtype */
    for (sharc_op_t op : ops) {
      preload_one(reinterpret_cast<const void *>(pick(dt, kernel_op(op)).fn),
                  &err);
      preload_one(
          reinterpret_cast<const void *>(pick_reduce_n(dt, kernel_op(op))),
          &err);
    }
    preload_one(reinterpret_cast<const void *>(pick(dt, OP_DIV).fn), &err);
  }
  for (sharc_dtype_t to : floats)
    for (sharc_dtype_t from : floats) {
      convert_fn fn = to == SHARC_F32   ? convert_from<SHARC_F32>(from)
                      : to == SHARC_F16 ? convert_from<SHARC_F16>(from)
                                        : convert_from<SHARC_BF16>(from);
      preload_one(reinterpret_cast<const void *>(fn), &err);
    }
  if (err != cudaSuccess)
    return (int)err;
  if (cached)
    preloaded[dev].store(true, std::memory_order_release);
  return 0;
}

int kernel_dev_copy(void *dst, const void *src, size_t bytes,
                    void *cuda_stream) {
  if (bytes == 0 || dst == src)
    return 0;
  if (dst == nullptr || src == nullptr)
    return (int)cudaErrorInvalidValue;
  return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                              static_cast<cudaStream_t>(cuda_stream));
}

void kernel_dev_versions(char *buf, size_t len) {
  int drv = 0, rt = 0;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  (void)cudaGetLastError();
  if (drv == 0)
    snprintf(buf, len, "no NVIDIA driver (libcuda.so.1) found");
  else
    snprintf(buf, len, "driver supports CUDA %d.%d, runtime is %d.%d",
             drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
}

int kernel_dev_available(int *ndev, char *why, size_t whylen) {
  int count = 0;
  if (ndev != nullptr)
    *ndev = 0;
  say(why, whylen, "%s", "");
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    /* Without any NVIDIA driver the runtime says "insufficient driver";
     * name the versions so that the two cases read differently. */
    char ver[96];
    kernel_dev_versions(ver, sizeof ver);
    say(why, whylen, "cudaGetDeviceCount: %s: %s; %s", cudaGetErrorName(err),
        cudaGetErrorString(err), ver);
    (void)cudaGetLastError(); /* the probe's error is not the caller's */
    return 0;
  }
  if (count <= 0) {
    say(why, whylen, "cudaGetDeviceCount: %d devices", count);
    return 0;
  }
  if (ndev != nullptr)
    *ndev = count;
  /* Loading one kernel proves the fat binary has code this device runs
   * (SASS for its architecture or PTX it can JIT). */
  int dev = 0, major = 0, minor = 0;
  cudaFuncAttributes attr;
  err = cudaGetDevice(&dev);
  if (err == cudaSuccess)
    err = cudaFuncGetAttributes(
        &attr, reinterpret_cast<const void *>(elementwise<SHARC_F32, OP_SUM>));
  if (err != cudaSuccess) {
    (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                 dev);
    (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                                 dev);
    say(why, whylen,
        "device %d (sm_%d%d) cannot run sharc's kernels: %s: %s; rebuild "
        "with -DCMAKE_CUDA_ARCHITECTURES=%d%d (this build: %s)",
        dev, major, minor, cudaGetErrorName(err), cudaGetErrorString(err),
        major, minor, SHARC_CUDA_ARCHS);
    (void)cudaGetLastError();
    return 0;
  }
  return 1;
}

const char *kernel_dev_error_string(int err) {
  static thread_local char buf[192];
  const cudaError_t e = static_cast<cudaError_t>(err);
  snprintf(buf, sizeof buf, "%s: %s", cudaGetErrorName(e),
           cudaGetErrorString(e));
  return buf;
}

} /* extern "C" */

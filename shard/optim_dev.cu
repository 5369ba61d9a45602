/*
 * optim_dev.cu - the optimizers and the gradient norm on device memory, for
 * GPU training (cfg.device SHARC_DEVICE_CUDA without offload): the same
 * element updates as optim.c's sgd_run and adamw_run, written in the same
 * order with the same float operations, so that (built without
 * contraction: --fmad=false) a slice steps to the same bits on the device
 * as on the host. Grid-stride kernels, each element owned by one thread.
 *
 * The sum of squares is the one reduction: optim_dev_sumsq adds each
 * thread's strided share, in double, into its own partial sum
 * (OPTIM_DEV_PARTS of them), and the host adds the partials in order:
 * deterministic, and no shared memory or atomics. Its order differs from
 * the host loop's, so the norm may differ from a host run's in the last
 * bits (the clipping factor with it).
 */
#include <cuda_runtime.h>
#include <math.h>

#include "optim_dev.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

unsigned blocks_for(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  return (unsigned)(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

__global__ void sgd_kernel(float *master, const float *grad, float *buf,
                           size_t n, float sc, float wd, float mom, float lr,
                           int first) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float g = grad[i] * sc + wd * master[i];
    if (mom > 0.0f) { /* PyTorch: the first step's buffer is g */
      buf[i] = first ? g : mom * buf[i] + g;
      g = buf[i];
    }
    master[i] -= lr * g;
  }
}

__global__ void adamw_kernel(float *master, const float *grad, float *ma,
                             float *mb, size_t n, float sc, float b1, float b2,
                             float eps, float lr, float decay, float bc1,
                             float bc2) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float g = grad[i] * sc;
    float m = b1 * ma[i] + (1.0f - b1) * g;
    float v = b2 * mb[i] + (1.0f - b2) * g * g;
    ma[i] = m;
    mb[i] = v;
    float mhat = m / bc1, vhat = v / bc2;
    master[i] = master[i] * decay - lr * mhat / (sqrtf(vhat) + eps);
  }
}

/* partial[t] += sum of g[i]^2 over i = t, t + PARTS, ... */
__global__ void sumsq_kernel(const float *g, size_t n, double *partial) {
  size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= OPTIM_DEV_PARTS)
    return;
  double acc = 0;
  for (size_t i = t; i < n; i += OPTIM_DEV_PARTS)
    acc += (double)g[i] * g[i];
  partial[t] += acc;
}

} /* namespace */

extern "C" int optim_dev_sgd(float *master, const float *grad, float *buf,
                             size_t n, float scale, float wd, float momentum,
                             float lr, int first, void *stream) {
  if (n == 0)
    return 0;
  void *args[] = {&master, &grad,     &buf, &n,    &scale,
                  &wd,     &momentum, &lr,  &first};
  return (int)cudaLaunchKernel(sgd_kernel, dim3(blocks_for(n)), dim3(kThreads),
                               args, 0, (cudaStream_t)stream);
}

extern "C" int optim_dev_adamw(float *master, const float *grad, float *ma,
                               float *mb, size_t n, float scale, float b1,
                               float b2, float eps, float lr, float decay,
                               float bc1, float bc2, void *stream) {
  if (n == 0)
    return 0;
  void *args[] = {&master, &grad, &ma, &mb,    &n,   &scale, &b1,
                  &b2,     &eps,  &lr, &decay, &bc1, &bc2};
  return (int)cudaLaunchKernel(adamw_kernel, dim3(blocks_for(n)),
                               dim3(kThreads), args, 0, (cudaStream_t)stream);
}

extern "C" int optim_dev_sumsq(const float *g, size_t n, double *partial,
                               void *stream) {
  if (n == 0)
    return 0;
  void *args[] = {&g, &n, &partial};
  return (int)cudaLaunchKernel(
      sumsq_kernel, dim3((OPTIM_DEV_PARTS + kThreads - 1) / kThreads),
      dim3(kThreads), args, 0, (cudaStream_t)stream);
}

/*
 * optim_dev.h - the optimizer kernels of GPU training (optim_dev.cu),
 * callable from C. Pointers are device memory of the current device; work
 * is queued on stream (a cudaStream_t) and the calls return at once with 0
 * or a cudaError_t value. n == 0 queues nothing.
 */
#ifndef SHARC_SHARD_OPTIM_DEV_H
#define SHARC_SHARD_OPTIM_DEV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Partial sums optim_dev_sumsq writes: a buffer of this many doubles. */
#define OPTIM_DEV_PARTS 4096

/* optim.c's sgd_run over n elements: buf is the momentum buffer. */
int optim_dev_sgd(float *master, const float *grad, float *buf, size_t n,
                  float scale, float wd, float momentum, float lr, int first,
                  void *stream);
/* optim.c's adamw_run over n elements. */
int optim_dev_adamw(float *master, const float *grad, float *ma, float *mb,
                    size_t n, float scale, float b1, float b2, float eps,
                    float lr, float decay, float bc1, float bc2, void *stream);
/* partial[t] += the sum of g[i]^2 over i = t mod OPTIM_DEV_PARTS, in
 * double; partial holds OPTIM_DEV_PARTS doubles. */
int optim_dev_sumsq(const float *g, size_t n, double *partial, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_SHARD_OPTIM_DEV_H */

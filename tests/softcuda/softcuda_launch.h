/*
 * softcuda_launch.h - how device code compiled as host C++ (cuda_host.h)
 * reaches softcuda: a kernel launch becomes one operation on the stream,
 * which runs every (block, thread) of the grid in turn on the stream's
 * worker thread.
 */
#ifndef SHARC_SOFTCUDA_LAUNCH_H
#define SHARC_SOFTCUDA_LAUNCH_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Queues a kernel of grid x block threads on stream, the launch refused as
 * a GPU refuses it (a grid or block past the device's limits, a stream of
 * another device, a pointer argument the device cannot reach: pageable
 * host memory, freed memory; the error is returned and recorded as the
 * runtime's last error). The stream's worker then calls run(ctx, reverse)
 * once, which runs the grid: every block, and in it every thread, in
 * forward order, or in reverse order where SOFTCUDA_GRID_ORDER=reverse;
 * then release(ctx), also when the launch is refused. ptrs: the kernel's
 * pointer arguments (NULL ones are not checked). */
cudaError_t softcuda_launch(const void *func, dim3 grid, dim3 block,
                            size_t shared_mem, cudaStream_t stream,
                            void (*run)(void *ctx, int reverse),
                            void (*release)(void *ctx), void *ctx,
                            const void *const *ptrs, int nptrs);

/* Cooperative blocks (softcuda_block.c): runs a grid of nblocks x nthreads
 * one block at a time, every thread of the block on a fiber of its own,
 * body(arg, block, thread) being one thread's whole run (linear indices;
 * reverse: both orders reversed). A launch with dynamic shared memory runs
 * this way (cuda_host.h). Within it softcuda_syncthreads is the block's
 * barrier and softcuda_shared its shared_bytes of dynamic shared memory,
 * filled with 0xff bytes before each block; outside it softcuda_shared is
 * NULL and softcuda_syncthreads fails the context (cudaErrorLaunchFailure,
 * said on stderr), as does a barrier that some threads of the block return
 * without reaching. */
void softcuda_grid_run_coop(
    size_t nblocks, size_t nthreads, int reverse, size_t shared_bytes,
    void (*body)(void *arg, size_t block, size_t thread), void *arg);
void softcuda_syncthreads(void);
void *softcuda_shared(void);

/* Kernels queued so far in this process, for tests that check a path
 * launches none; they find it with dlsym (a real CUDA runtime has no such
 * symbol, and then the check is skipped). */
__attribute__((visibility("default"))) unsigned long long
softcuda_kernel_launches(void);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_SOFTCUDA_LAUNCH_H */

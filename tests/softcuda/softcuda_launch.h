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

/* Kernels queued so far in this process, for tests that check a path
 * launches none; they find it with dlsym (a real CUDA runtime has no such
 * symbol, and then the check is skipped). */
__attribute__((visibility("default"))) unsigned long long
softcuda_kernel_launches(void);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_SOFTCUDA_LAUNCH_H */

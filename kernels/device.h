/*
 * device.h - device (CUDA) reduction, AVG-finish and copy kernels: the GPU
 * twins of kernel_reduce / kernel_div in reduce.h, callable from plain C.
 *
 * Built only when SHARC_HAVE_CUDA is defined (SHARC_WITH_CUDA, see
 * cmake/sharc_cuda.cmake); in a CPU-only build these symbols do not exist,
 * so callers guard their use with #ifdef SHARC_HAVE_CUDA.
 *
 * The header needs no CUDA header: streams are passed as `void *` (a
 * cudaStream_t; NULL is the legacy default stream) and errors come back as
 * the int value of a cudaError_t. Conventions shared by every call:
 *  - Asynchronous: work is queued on the stream and the call returns; read
 *    results after the stream (or an event on it) has completed. Errors of
 *    the kernel itself surface at that synchronisation, not here.
 *  - Returns 0 (cudaSuccess) or a cudaError_t value > 0; nothing aborts and
 *    nothing is logged (the caller knows the collective and the rank, and
 *    reports). kernel_dev_error_string names the value. Invalid arguments
 *    give cudaErrorInvalidValue and queue nothing.
 *  - Pointers are device memory (or anything the device can address:
 *    mapped, managed, IPC-mapped) on the current device, which must be the
 *    stream's device. They must be aligned to the element size (cudaMalloc
 *    plus whole-element offsets always is).
 *  - Sizes are in elements unless the name says bytes.
 *  - Thread safety: any thread may call; the only shared state is a
 *    per-device cache of the multiprocessor count, filled once.
 *
 * Results equal the host kernels' bit for bit: same conversions (f16/bf16
 * accumulate in f32, round to nearest even), same wrapping integer
 * arithmetic, truncating integer division, min/max as plain comparisons
 * (with a NaN operand the second operand is the result). The one exception
 * is which NaN an arithmetic operation (sum, prod, the AVG division)
 * returns: IEEE 754 leaves payload and sign unspecified, x86 and the GPU
 * differ, and both sides still give a NaN in exactly the same places.
 */
#ifndef SHARC_KERNELS_DEVICE_H
#define SHARC_KERNELS_DEVICE_H

#include <stddef.h>

#include "sharc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = a[i] OP b[i] for i in [0, n) elements, queued on cuda_stream.
 * dst may equal a or b exactly (in place), never overlap them partially.
 * SHARC_AVG reduces as SHARC_SUM; kernel_dev_div finishes it. n == 0 queues
 * nothing. Uses 16-byte loads and stores for the part of the arrays where
 * dst, a and b share the same offset modulo 16 bytes, element loads
 * elsewhere. */
int kernel_dev_reduce(sharc_dtype_t dtype, sharc_op_t op, void *dst,
                      const void *a, const void *b, size_t n,
                      void *cuda_stream);

/* dst[i] = srcs[0][i] OP srcs[1][i] OP ... OP srcs[nsrc-1][i] for i in
 * [0, n), in that order, in one kernel for up to 8 sources (more: one
 * kernel per further 7, each starting from dst): the reduction of one
 * step of a collective over every rank's buffer. SHARC_AVG divides by
 * nsrc. f16 and bf16 accumulate in f32 and round once (per kernel), so
 * they are more exact than the pairwise kernel_dev_reduce chain; every
 * other type gives exactly that chain's bits (AVG: kernel_dev_div's).
 * dst may equal a source exactly, never overlap one partially. nsrc >= 1;
 * n == 0 queues nothing. */
int kernel_dev_reduce_n(sharc_dtype_t dtype, sharc_op_t op, void *dst,
                        const void *const *srcs, int nsrc, size_t n,
                        void *cuda_stream);

/* buf[i] /= divisor for i in [0, n) elements, in place, queued on
 * cuda_stream (the AVG finish step, exactly as kernel_div: integers truncate
 * toward zero; f16/bf16 divide in f32 and round to nearest even). divisor
 * must be > 0; 1 and n == 0 queue nothing. */
int kernel_dev_div(sharc_dtype_t dtype, void *buf, size_t n, int divisor,
                   void *cuda_stream);

/* dst[i] = src[i] converted from src_type to dst_type for i in [0, n)
 * elements, queued on cuda_stream, rounding exactly as sharc_convert
 * (f32, f16 and bf16, any to any; the same type copies). dst and src must
 * not overlap. */
int kernel_dev_convert(void *dst, sharc_dtype_t dst_type, const void *src,
                       sharc_dtype_t src_type, size_t n, void *cuda_stream);

/* Copies `bytes` bytes from src to dst with cudaMemcpyAsync (direction
 * cudaMemcpyDefault): a copy engine moves the data and no SM is used.
 * Regions must not overlap; dst == src and bytes == 0 queue nothing. Host
 * pointers are allowed where the runtime allows them (pinned memory keeps
 * the copy asynchronous). */
int kernel_dev_copy(void *dst, const void *src, size_t bytes,
                    void *cuda_stream);

/* Loads every kernel of this file into the current device's context, once
 * per device and process; returns 0 or the cudaError_t. Under lazy loading
 * (CUDA's default since 12.2) a kernel is otherwise loaded at its first
 * launch, and loading may synchronize the context: a first launch while a
 * stream of the device waits for the launching thread, or for a thread
 * that waits for it (sharc's worker, a stream waiting for a collective's
 * release), would deadlock. So whatever queues such waits calls this
 * first, while nothing of its own is queued. Blocking; thread-safe. */
int kernel_dev_preload(void);

/* Whether a CUDA device this build can run its kernels on exists: returns 1
 * and sets *ndev to the device count if so; returns 0, *ndev = 0 (or the
 * count, when only the kernel image is missing) and writes the reason to
 * why (NUL-terminated, truncated to whylen bytes) if not, e.g.
 * "cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is
 * detected". Checks the current device for a usable kernel image (the
 * build's CMAKE_CUDA_ARCHITECTURES). ndev and why may be NULL. Initialises
 * the CUDA runtime; blocking; thread-safe. */
int kernel_dev_available(int *ndev, char *why, size_t whylen);

/* The driver's and the runtime's CUDA versions, as "driver supports CUDA
 * 13.0, runtime is 13.0", or "no NVIDIA driver (libcuda.so.1) found",
 * into buf (NUL-terminated, truncated to len bytes): why no device could be
 * used reads differently for a missing and an old driver. */
void kernel_dev_versions(char *buf, size_t len);

/* "cudaErrorInvalidValue: invalid argument" for a value returned above.
 * The string lives in a thread-local buffer, valid until this thread's next
 * call; never NULL. */
const char *kernel_dev_error_string(int err);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_KERNELS_DEVICE_H */

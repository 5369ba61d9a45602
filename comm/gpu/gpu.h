/*
 * gpu.h - the GPU layer as the layers above see it: a sharc stream bound to
 * a cudaStream_t (sharc_stream_create_cuda) and what sharc_mem_register and
 * the argument checks ask of device memory. Nothing above this header
 * knows how a call on device memory is carried out.
 *
 * A collective enqueued on a CUDA-bound stream takes one of the GPU paths,
 * the first of this table that takes it (SHARC_CUDA_PATH, docs/gpu.md):
 *
 *   direct  path_direct.c: one host, ordered on the CUDA stream itself: the
 *           ranks' device staging shared through CUDA IPC, copy engines
 *           and reduction kernels, flags written and waited on by stream
 *           memory operations; no host thread inside a call
 *   ipc     path_ipc.c: zero copy between the GPUs of one host through
 *           CUDA IPC, the copies and reductions on the device
 *   staged  path_staged.c: copies into pinned host staging, the host
 *           collective there, the result copied back (pipelined per round
 *           for large calls, devpipe.h); every collective, every topology
 *
 * The binding (cuda_stream.c) queues on the CUDA stream, per call, what the
 * path needs (its copies), an event E_k "the call's input is ready" and a
 * wait for release k; the stream's worker waits for E_k (before), the
 * call runs in its turn (the path's run, or the host collective on the
 * buffers the path pointed the call to), and the worker stores release k
 * (after), whatever happened, so the CUDA stream never waits forever.
 * gpu_impl.h has the interface a path implements.
 *
 * The header needs no CUDA header and exists in every build: without CUDA
 * (SHARC_HAVE_CUDA undefined) gpu_stream_open returns
 * SHARC_ERR_UNSUPPORTED and dev_is_device_ptr returns 0. The device
 * kernels are in kernels/device.h.
 */
#ifndef SHARC_COMM_GPU_H
#define SHARC_COMM_GPU_H

#include <stddef.h>

#include "call.h"
#include "devptr.h"
#include "mem.h"

/* How the generic stream drives a CUDA-bound one (call.h). */
extern const stream_binding_t gpu_stream_binding;

/* The state of gpu_stream_binding for cuda_stream (a cudaStream_t; NULL:
 * the legacy default stream) on that stream's device. Fails with
 * SHARC_ERR_CUDA (no usable device, CUDA errors), SHARC_ERR_INVALID_ARG
 * (SHARC_CUDA_PATH names no path) or SHARC_ERR_UNSUPPORTED (built without
 * CUDA; a path's requirement unmet), the message naming the reason. */
sharc_status_t gpu_stream_open(void **dev, void *cuda_stream);

/* For sharc_mem_register on device memory: the allocation holding
 * [p, p + bytes) and what the IPC path needs to share it.
 * SHARC_ERR_INVALID_ARG when the range leaves its cudaMalloc allocation or
 * CUDA IPC cannot share it (managed memory, cudaMallocAsync pools), the
 * message saying which. */
sharc_status_t gpu_mem_describe(const void *p, size_t bytes, mem_dev_t *out);

/* comm is being freed: the direct path's state of it (device staging and
 * flags, peers' mappings) goes once the device work using it is done. */
void gpu_comm_release(struct sharc_comm *comm);

#endif /* SHARC_COMM_GPU_H */

/*
 * devipc.h - collectives on device memory between the GPU ranks of one
 * host through CUDA IPC (docs/design.md, decision 8): zero copy, the data
 * moved by copy engines (cudaMemcpyAsync on IPC-mapped pointers) and the
 * reductions by kernel_dev_reduce, no kernel waiting for another process.
 *
 * Chosen per call by dev_stage (devstream.c) when SHARC_CUDA_PATH=ipc, all
 * ranks are on one host and the call is not a barrier: the CUDA stream gets
 * the event E_k and the release wait of the staged path but no copies, and
 * the worker, in the call's turn (coll.c run_call), runs devipc_run:
 *
 *   1. all-gather of one descriptor per rank (IPC handle and offset of its
 *      send and receive buffers, or why they cannot be shared), over the
 *      host transport: after it every rank's stream has reached the call;
 *   2. each rank maps its peers' buffers (cached per allocation) and pulls
 *      what it needs on an internal CUDA stream: all-gather and broadcast
 *      copy, reduce-scatter reduces its own block from every rank's send
 *      buffer, all-reduce does that for its block, agrees, then gathers the
 *      other blocks from their owners' receive buffers;
 *   3. the worker sleeps until the internal stream is done, then the ranks
 *      agree on the outcome (an all-gather of one status each), so a rank
 *      whose copies failed fails the call on every rank alike and nobody
 *      reuses a buffer a peer may still read; then the usual release.
 *
 * A buffer in host memory, or device memory the legacy IPC API cannot share
 * (cudaMallocAsync pools, cuMemCreate), fails the call on every rank with
 * SHARC_ERR_INVALID_ARG naming the rank and the buffer.
 *
 * Compiled in every build; without CUDA devipc_wanted is 0.
 */
#ifndef SHARC_COMM_DEVIPC_H
#define SHARC_COMM_DEVIPC_H

#include "call.h"
#include "mem.h"

/* A CUDA stream's IPC-path context (devstream.c makes it with the first
 * call that takes the path; coll_call_t.ipc points to it): the stream's
 * device, the internal CUDA stream the copies run on and the
 * blocking-sync event to wait on it. */
typedef struct {
  int device;
  void *stream; /* cudaStream_t */
  void *event;  /* cudaEvent_t */
} devipc_ctx_t;

/* 1 if comm's collectives on CUDA streams take the IPC path: SHARC_CUDA_PATH
 * is ipc and all of comm's ranks are on one host. */
int devipc_wanted(const struct sharc_comm *comm);

/* SHARC_ERR_INVALID_ARG for a SHARC_CUDA_PATH other than staged or ipc,
 * SHARC_ERR_UNSUPPORTED for ipc with CUDA_DEVICE_MAX_CONNECTIONS=1 (the
 * internal stream would queue behind the caller's waiting stream); fn names
 * the caller in the message (sharc_stream_create_cuda). */
sharc_status_t devipc_check_env(const char *fn);

/* Closes the mappings of peers' buffers no call is using (process-wide);
 * from sharc_stream_synchronize, never inside a call. Mappings of buffers
 * their owners registered (sharc_mem_register) stay until the owner has
 * deregistered device memory since. */
void devipc_trim(void);

/* For sharc_mem_register on device memory: the allocation holding
 * [p, p + bytes) and its CUDA IPC handle. SHARC_ERR_INVALID_ARG when the
 * range leaves its cudaMalloc allocation or CUDA IPC cannot share it
 * (managed memory, cudaMallocAsync pools), the message saying which. */
sharc_status_t devipc_describe(const void *p, size_t bytes, mem_dev_t *out);

/* Runs call (call->ipc set by dev_stage) on the worker, in call's turn; the
 * CUDA stream of call->ipc has reached the call. Runs host collectives of
 * its own on the communicator through run (coll.c's run_step: no recorder
 * entries of their own, so the flight recorder shows the user's call and
 * the rank its steps wait on). */
sharc_status_t devipc_run(coll_call_t *call,
                          sharc_status_t (*run)(coll_call_t *));

#endif /* SHARC_COMM_DEVIPC_H */

/*
 * path_ipc_p2p.h - send/recv batches on the CUDA IPC path
 * (path_ipc_p2p.c), for path_ipc.c.
 */
#ifndef SHARC_COMM_GPU_PATH_IPC_P2P_H
#define SHARC_COMM_GPU_PATH_IPC_P2P_H

#include "ipc_map.h"

#ifdef SHARC_HAVE_CUDA

/* Runs the batch call->p2p in its turn (the worker, call_path_t.run), its
 * copies on ctx's internal stream: only the batch's peers take part. */
sharc_status_t ipc_run_p2p(coll_call_t *call, const ipc_ctx_t *ctx);

#endif /* SHARC_HAVE_CUDA */

#endif /* SHARC_COMM_GPU_PATH_IPC_P2P_H */

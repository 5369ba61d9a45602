/*
 * staged_reduce.h - reduce-scatter and all-reduce on the staged GPU path
 * with the reduction on the GPU (staged_reduce.c): what path_staged.c asks.
 */
#ifndef SHARC_COMM_GPU_STAGED_REDUCE_H
#define SHARC_COMM_GPU_STAGED_REDUCE_H

#include "gpu_impl.h"

/* SHARC_CUDA_STAGED_REDUCE is auto, gpu or host. */
sharc_status_t sr_check_env(const char *fn);

#ifdef SHARC_HAVE_CUDA

/* 1 if call reduces on the GPU (SHARC_CUDA_STAGED_REDUCE; auto: where the
 * communicator spans hosts); the same answer on every rank. */
int sr_takes(const coll_call_t *call);

/* gpu_path_t.stage for such a call. */
sharc_status_t sr_stage(dev_stream_t *ds, coll_call_t *call, dev_work_t *w,
                        const char *fn);

#endif /* SHARC_HAVE_CUDA */

#endif /* SHARC_COMM_GPU_STAGED_REDUCE_H */

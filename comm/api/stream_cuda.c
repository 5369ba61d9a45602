/*
 * stream_cuda.c - sharc_stream_create_cuda: a host stream (stream.c) bound
 * to a cudaStream_t through the GPU layer (gpu.h), which carries out the
 * collectives enqueued on it on device memory.
 */
#include "gpu.h"
#include "stream.h"

sharc_status_t sharc_stream_create_cuda(sharc_stream_t *stream,
                                        void *cuda_stream) {
  if (!stream)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_stream_create_cuda: stream is NULL");
  void *dev = NULL;
  CHECK(gpu_stream_open(&dev, cuda_stream));
  return stream_new(stream, &gpu_stream_binding, dev,
                    "sharc_stream_create_cuda");
}

/*
 * devptr.h - what the CUDA driver and runtime say about memory (devptr.c):
 * whether a pointer is device memory, without initialising CUDA in a
 * process that has not used it, and the driver's entry points. The lowest
 * file of the GPU layer: the paths above it ask it, it asks nothing of
 * them.
 */
#ifndef SHARC_COMM_DEVPTR_H
#define SHARC_COMM_DEVPTR_H

#include <stddef.h>
#include <stdint.h>

/* 1 in a build with CUDA, else 0. */
int dev_have_cuda(void);

/* A CUDA driver API entry point (nothing links libcuda), in the ABI of CUDA
 * 12.0 (the _v2 flavours); flags: cudaEnableDefault or
 * cudaEnableLegacyStream. NULL with the reason in why when the driver lacks
 * it. */
void *dev_driver_entry(const char *sym, unsigned long long flags, char *why,
                       size_t n);

/* 1 if p points into device (or managed) memory, 0 for host memory, NULL,
 * or anything CUDA does not know. Never initialises CUDA in a process that
 * has not used it (it then returns 0 at the cost of one dynamic-loader
 * lookup); no CUDA device at all is remembered. 0 in CPU-only builds.
 * Thread safe. */
int dev_is_device_ptr(const void *p);

/* 1 if a is device memory, else 2 if b is, else 0; as dev_is_device_ptr,
 * with one check of CUDA's state for both (the collectives' argument check
 * on host paths, once per call). */
int dev_first_device_ptr(const void *a, const void *b);
/* The same, given the coarse clock's time now (time_coarse_ns), which a
 * caller that reads it anyway passes instead of a second read. */
int dev_first_device_ptr_at(const void *a, const void *b, uint64_t now);

#endif /* SHARC_COMM_DEVPTR_H */

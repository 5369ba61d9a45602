/*
 * shared.cuh - dynamic shared memory, declared the same way for nvcc and
 * for softcuda: SHARC_DYNAMIC_SHARED(T, name) makes `name` a T * to the
 * launch's dynamic shared memory (its sharedMem bytes, 16-byte aligned).
 * softcuda's cuda_host.h defines it first (its cooperative blocks give
 * each block that memory); under nvcc it is the usual extern array.
 * Static __shared__ arrays are not used: their size would not reach the
 * launch, and softcuda runs barriers only for launches that ask for shared
 * memory.
 */
#ifndef SHARC_KERNELS_SHARED_CUH
#define SHARC_KERNELS_SHARED_CUH

#ifndef SHARC_DYNAMIC_SHARED
#define SHARC_DYNAMIC_SHARED(T, name)                                          \
  extern __shared__ __align__(16) unsigned char sharc_dynamic_shared_[];       \
  T *name = reinterpret_cast<T *>(sharc_dynamic_shared_)
#endif

#endif /* SHARC_KERNELS_SHARED_CUH */

/*
 * softcuda_driver.c - the stand-in for the CUDA driver library: built with
 * the soname libcuda.so.1 and loaded by softcuda on its first API call, as
 * the real runtime loads the driver. Nothing is called here; sharc only
 * asks the loader whether "libcuda.so.1" is loaded (comm/gpu/devptr.c
 * cuda_in_use: dlopen RTLD_NOLOAD), to tell a process that uses CUDA from
 * one that never did.
 */
__attribute__((visibility("default"))) int softcuda_driver_loaded(void) {
  return 1;
}

/*
 * bench_nccl.c - the NCCL backend of sharc-bench: NCCL and the CUDA driver
 * are loaded at run time (dlopen), so the bench builds and runs without
 * them. NCCL works on device memory only (--mem cuda), which sharc-bench
 * cannot allocate until sharc has its device-memory path; until then this
 * file says precisely what is missing and returns an error.
 */
#include <dlfcn.h>
#include <stdio.h>

#include "bench.h"

/* Number of CUDA devices through the driver API (libcuda.so.1), -1 when
 * there is no driver. */
static int cuda_devices(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return -1;
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
  int n = -1;
  if (init && count && init(0) == 0 && count(&n) != 0)
    n = -1;
  dlclose(h);
  return n;
}

int bench_nccl_init(backend_t *b, const opts_t *o) {
  (void)b;
  if (!o->cuda) {
    fprintf(stderr, "sharc-bench: --backend/--compare nccl measures device "
                    "memory: pass --mem cuda (needs a GPU)\n");
    return -1;
  }
  int ndev = cuda_devices();
  if (ndev <= 0) {
    fprintf(stderr,
            "sharc-bench: no CUDA device (%s): --backend nccl and --mem cuda "
            "need a GPU\n",
            ndev < 0 ? "libcuda.so.1 not loadable" : "driver reports 0");
    return -1;
  }
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "sharc-bench: cannot load libnccl.so.2: %s\n", dlerror());
    return -1;
  }
  dlclose(h);
  fprintf(stderr,
          "sharc-bench: %d CUDA device(s) and NCCL found, but "
          "--mem cuda is not implemented yet (sharc has no device "
          "memory path)\n",
          ndev);
  return -1;
}

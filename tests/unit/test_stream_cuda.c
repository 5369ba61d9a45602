/*
 * test_stream_cuda.c - sharc_stream_create_cuda on the machine at hand, in
 * one process, so every build checks the API's answers:
 *  - CPU-only build: SHARC_ERR_UNSUPPORTED, the message naming the missing
 *    CUDA;
 *  - CUDA build without a usable device or driver (CI): SHARC_ERR_CUDA with
 *    a message that says why, no crash, *stream untouched;
 *  - CUDA build with a device: a stream on the legacy default stream that
 *    synchronizes and is destroyed (tests/mp coll_check --mem cuda runs
 *    collectives on it).
 * Also: a NULL stream argument is SHARC_ERR_INVALID_ARG, and
 * dev_is_device_ptr answers 0 for host memory and NULL without loading the
 * CUDA driver into a process that never used CUDA.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "gpu.h" /* dev_is_device_ptr, dev_have_cuda */
#include "sharc.h"

static int driver_loaded(void) {
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h)
    dlclose(h);
  return h != NULL;
}

/* --bad-path, run with SHARC_CUDA_PATH=zerocopy: refused by name before
 * anything else is checked (CUDA builds; CPU-only builds refuse CUDA). */
static int bad_path(void) {
  sharc_stream_t s = NULL;
  sharc_status_t st = sharc_stream_create_cuda(&s, NULL);
  const char *msg = sharc_last_error();
  printf("SHARC_CUDA_PATH=%s: %s: %s\n", getenv("SHARC_CUDA_PATH"),
         sharc_status_name(st), msg);
  if (!dev_have_cuda()) {
    EXPECT(st == SHARC_ERR_UNSUPPORTED, "got %s", sharc_status_name(st));
  } else {
    EXPECT(st == SHARC_ERR_INVALID_ARG, "got %s", sharc_status_name(st));
    EXPECT(strstr(msg, "SHARC_CUDA_PATH=zerocopy") &&
               strstr(msg, "auto, direct, staged or ipc"),
           "message does not name the value and the choices: %s", msg);
  }
  EXPECT(s == NULL, "*stream was written");
  printf("test_stream_cuda --bad-path: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--bad-path"))
    return bad_path();
  /* before anything touches CUDA */
  int loaded_before = driver_loaded();
  char host[64];
  EXPECT(dev_is_device_ptr(host) == 0, "stack memory taken for device memory");
  EXPECT(dev_is_device_ptr(NULL) == 0, "NULL taken for device memory");
  void *heap = malloc(4096);
  EXPECT(dev_is_device_ptr(heap) == 0, "heap memory taken for device memory");
  EXPECT(dev_first_device_ptr(host, heap) == 0 &&
             dev_first_device_ptr(NULL, heap) == 0 &&
             dev_first_device_ptr(NULL, NULL) == 0,
         "host memory taken for device memory (pairs)");
  free(heap);
  EXPECT(loaded_before || !driver_loaded(),
         "dev_is_device_ptr loaded libcuda.so.1 into a process without CUDA");

  EXPECT(sharc_stream_create_cuda(NULL, NULL) == SHARC_ERR_INVALID_ARG,
         "a NULL stream argument");

  sharc_stream_t s = (sharc_stream_t)(uintptr_t)0x5a5a;
  sharc_status_t st = sharc_stream_create_cuda(&s, NULL);
  const char *msg = sharc_last_error();
  if (!dev_have_cuda()) {
    printf("CPU-only build: %s: %s\n", sharc_status_name(st), msg);
    EXPECT(st == SHARC_ERR_UNSUPPORTED, "got %s", sharc_status_name(st));
    EXPECT(strstr(msg, "without CUDA") != NULL, "message: %s", msg);
    EXPECT(s == (sharc_stream_t)(uintptr_t)0x5a5a, "*stream was written");
  } else if (st != SHARC_OK) {
    printf("CUDA build, no usable device: %s: %s\n", sharc_status_name(st),
           msg);
    EXPECT(st == SHARC_ERR_CUDA, "got %s", sharc_status_name(st));
    EXPECT(strstr(msg, "sharc_stream_create_cuda") != NULL &&
               strstr(msg, "CUDA device") != NULL,
           "message does not say what failed: %s", msg);
    EXPECT(s == (sharc_stream_t)(uintptr_t)0x5a5a, "*stream was written");
    /* asking again gives the same answer (nothing half-initialised) */
    sharc_stream_t s2 = NULL;
    EXPECT(sharc_stream_create_cuda(&s2, NULL) == st && s2 == NULL,
           "second call differs");
  } else {
    printf("CUDA build with a device: stream created on the legacy default "
           "stream\n");
    EXPECT(s != NULL && s != (sharc_stream_t)(uintptr_t)0x5a5a,
           "no stream returned");
    EXPECT(sharc_stream_synchronize(s) == SHARC_OK, "synchronize: %s",
           sharc_last_error());
    EXPECT(sharc_stream_destroy(s) == SHARC_OK, "destroy: %s",
           sharc_last_error());
  }
  printf("test_stream_cuda: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

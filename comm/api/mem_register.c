/*
 * mem_register.c - sharc_mem_register: checks the range, asks the GPU layer
 * whether it is device memory (its allocation and CUDA IPC handle, asked of
 * CUDA once), and adds it to the memory registry (state/mem.c).
 */
#include <stdint.h>
#include <unistd.h>

#include "core.h"
#include "gpu.h"
#include "mem.h"

sharc_status_t sharc_mem_register(void *ptr, size_t bytes) {
  if (!ptr || bytes == 0)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_mem_register: %s",
                   !ptr ? "ptr is NULL" : "bytes is 0");
  uintptr_t a = (uintptr_t)ptr;
  if (bytes > UINTPTR_MAX - a)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_mem_register: %zu bytes at %p wrap the address space",
                   bytes, ptr);
  mem_dev_t dev = {.device = -1};
  if (dev_is_device_ptr(ptr))
    CHECK(gpu_mem_describe(ptr, bytes, &dev));
  sharc_status_t s = mem_add_region(ptr, bytes, &dev);
  if (s != SHARC_OK && dev.device >= 0 && dev.has_dmabuf)
    close(dev.dmabuf_fd); /* the registry did not take it */
  return s;
}

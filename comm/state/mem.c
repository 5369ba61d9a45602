/*
 * mem.c - the process's memory registry: sharc_mem_alloc / sharc_mem_free
 * (host memory backed by a memfd, so same-host peers can map it through
 * /proc/<pid>/fd), the regions sharc_mem_register adds (memory the caller
 * owns, which peers read with process_vm_readv; api/mem_register.c asks
 * the GPU layer first whether it is device memory) and
 * sharc_mem_deregister. The transports consult it to send in place (shm,
 * ib); registered device memory keeps its allocation's CUDA IPC handle here
 * for the IPC path (gpu/path_ipc.c). Calls nothing above it.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core.h"
#include "mem.h"

typedef struct mem_region {
  struct mem_region *next;
  void *ptr;
  size_t bytes;
  int fd; /* -1 for registered (caller-owned) memory */
  uint64_t id;
  mem_dev_t dev; /* registered device memory (dev.device >= 0) */
} mem_region_t;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_region_t *mem_regions;
static uint64_t mem_next_id = 1;
static _Atomic uint64_t dev_epoch; /* device deregistrations */
static _Atomic int dev_regions;    /* device regions registered now */

sharc_status_t sharc_mem_alloc(void **ptr, size_t bytes) {
  if (!ptr)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_mem_alloc: ptr is NULL");
  *ptr = NULL;
  if (bytes == 0)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_mem_alloc: bytes is 0");
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (bytes > SIZE_MAX - page)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_mem_alloc: %zu bytes is too large", bytes);
  size_t len = (bytes + page - 1) / page * page;
  mem_region_t *r = calloc(1, sizeof *r);
  if (!r)
    return err_set(SHARC_ERR_NO_MEM, "sharc_mem_alloc: out of memory");
  r->fd = memfd_create("sharc-mem", MFD_CLOEXEC);
  if (r->fd < 0) {
    free(r);
    return err_set(SHARC_ERR_SYSTEM, "sharc_mem_alloc: memfd_create: %s",
                   strerror(errno));
  }
  if (ftruncate(r->fd, (off_t)len) != 0) {
    int e = errno;
    close(r->fd);
    free(r);
    return err_set(SHARC_ERR_NO_MEM, "sharc_mem_alloc: %zu bytes: %s", bytes,
                   strerror(e));
  }
  r->ptr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (r->ptr == MAP_FAILED) {
    int e = errno;
    close(r->fd);
    free(r);
    return err_set(SHARC_ERR_NO_MEM, "sharc_mem_alloc: mapping %zu bytes: %s",
                   bytes, strerror(e));
  }
  r->bytes = len;
  r->dev.device = -1;
  pthread_mutex_lock(&mem_lock);
  r->id = mem_next_id++;
  r->next = mem_regions;
  mem_regions = r;
  pthread_mutex_unlock(&mem_lock);
  *ptr = r->ptr;
  return SHARC_OK;
}

sharc_status_t sharc_mem_free(void *ptr) {
  if (!ptr)
    return SHARC_OK;
  pthread_mutex_lock(&mem_lock);
  mem_region_t **pp = &mem_regions;
  while (*pp && (*pp)->ptr != ptr)
    pp = &(*pp)->next;
  mem_region_t *r = *pp;
  if (r)
    *pp = r->next;
  pthread_mutex_unlock(&mem_lock);
  if (!r)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_mem_free: %p was not returned by sharc_mem_alloc",
                   ptr);
  if (r->fd < 0) {
    pthread_mutex_lock(&mem_lock); /* registered, not allocated: put back */
    r->next = mem_regions;
    mem_regions = r;
    pthread_mutex_unlock(&mem_lock);
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_mem_free: %p was registered, not allocated; use "
                   "sharc_mem_deregister",
                   ptr);
  }
  munmap(r->ptr, r->bytes);
  close(r->fd);
  free(r);
  return SHARC_OK;
}

sharc_status_t mem_add_region(void *ptr, size_t bytes, const mem_dev_t *dev) {
  uintptr_t a = (uintptr_t)ptr;
  mem_region_t *r = calloc(1, sizeof *r);
  if (!r)
    return err_set(SHARC_ERR_NO_MEM, "sharc_mem_register: out of memory");
  pthread_mutex_lock(&mem_lock);
  for (mem_region_t *q = mem_regions; q; q = q->next) {
    uintptr_t b = (uintptr_t)q->ptr;
    if (a < b + q->bytes && b < a + bytes) {
      pthread_mutex_unlock(&mem_lock);
      free(r);
      return err_set(SHARC_ERR_INVALID_ARG,
                     "sharc_mem_register: [%p, +%zu) overlaps the region at %p "
                     "(%zu bytes) already known to sharc",
                     ptr, bytes, q->ptr, q->bytes);
    }
  }
  *r = (mem_region_t){mem_regions, ptr, bytes, -1, mem_next_id++, *dev};
  mem_regions = r;
  if (dev->device >= 0)
    atomic_fetch_add(&dev_regions, 1);
  pthread_mutex_unlock(&mem_lock);
  return SHARC_OK;
}

sharc_status_t sharc_mem_deregister(void *ptr) {
  pthread_mutex_lock(&mem_lock);
  mem_region_t **pp = &mem_regions;
  while (*pp && !((*pp)->ptr == ptr && (*pp)->fd < 0))
    pp = &(*pp)->next;
  mem_region_t *r = *pp;
  if (r)
    *pp = r->next;
  /* under the lock: a descriptor reads the epoch before the registry */
  if (r && r->dev.device >= 0) {
    atomic_fetch_add(&dev_epoch, 1);
    atomic_fetch_sub(&dev_regions, 1);
  }
  pthread_mutex_unlock(&mem_lock);
  if (!r)
    return err_set(
        SHARC_ERR_INVALID_ARG,
        "sharc_mem_deregister: %p was not registered with sharc_mem_register",
        ptr);
  if (r->dev.device >= 0 && r->dev.has_dmabuf)
    close(r->dev.dmabuf_fd);
  free(r);
  return SHARC_OK;
}

int mem_find_device(const void *p, size_t len, mem_dev_t *out) {
  uintptr_t a = (uintptr_t)p;
  int found = 0;
  pthread_mutex_lock(&mem_lock);
  for (mem_region_t *r = mem_regions; r && !found; r = r->next) {
    uintptr_t b = (uintptr_t)r->ptr;
    if (r->dev.device >= 0 && a >= b && a - b <= r->bytes &&
        len <= r->bytes - (a - b)) {
      *out = r->dev;
      out->region = r->ptr;
      out->region_bytes = r->bytes;
      out->region_id = r->id;
      found = 1;
    }
  }
  pthread_mutex_unlock(&mem_lock);
  return found;
}

uint64_t mem_dev_epoch(void) { return atomic_load(&dev_epoch); }

int mem_have_device(void) {
  return atomic_load_explicit(&dev_regions, memory_order_relaxed) > 0;
}

int mem_dmabuf_dup(const void *p, size_t len) {
  uintptr_t a = (uintptr_t)p;
  int fd = -1;
  pthread_mutex_lock(&mem_lock);
  for (mem_region_t *r = mem_regions; r; r = r->next) {
    uintptr_t b = (uintptr_t)r->ptr;
    if (r->dev.device >= 0 && a >= b && a - b <= r->bytes &&
        len <= r->bytes - (a - b)) {
      if (r->dev.has_dmabuf)
        fd = fcntl(r->dev.dmabuf_fd, F_DUPFD_CLOEXEC, 0);
      break;
    }
  }
  pthread_mutex_unlock(&mem_lock);
  return fd;
}

int mem_find(const void *p, size_t len, mem_ref_t *out) {
  uintptr_t a = (uintptr_t)p;
  int found = 0;
  pthread_mutex_lock(&mem_lock);
  for (mem_region_t *r = mem_regions; r; r = r->next) {
    uintptr_t b = (uintptr_t)r->ptr;
    if (r->dev.device < 0 && a >= b && a - b <= r->bytes &&
        len <= r->bytes - (a - b)) {
      *out = (mem_ref_t){r->fd >= 0 ? MEM_ALLOCATED : MEM_REGISTERED, r->id,
                         r->fd, a - b, r->bytes};
      found = 1;
      break;
    }
  }
  pthread_mutex_unlock(&mem_lock);
  return found;
}

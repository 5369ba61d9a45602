/*
 * softcuda_mem.c - softcuda's memory (see softcuda.c): the process-wide
 * table of allocations that every copy, memset, kernel argument and stream
 * memory operation is checked on; cudaMalloc (a memfd, so that another
 * process can map it), pinned host memory, pointer attributes and
 * cuMemGetAddressRange; copies and memsets (operations on the legacy or a
 * given stream); CUDA IPC handles and their mappings.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "softcuda_impl.h"

#define IPC_MAGIC "softcuda"

/* What a cudaIpcMemHandle_t holds (zero-padded to 64 bytes). */
typedef struct {
  char magic[8];
  int64_t pid;
  int32_t fd;
  int32_t device;
  uint64_t id, size, ino;
} ipc_handle_t;

_Static_assert(sizeof(ipc_handle_t) <= sizeof(cudaIpcMemHandle_t),
               "ipc handle does not fit");

/* ---- the allocation table (lock held) ----------------------------------- */

/* Adds r to the table; new_id: give it a fresh allocation id. */
static void range_add(range_t *r, int new_id) {
  pthread_mutex_lock(&sc_state.lock);
  if (new_id)
    r->id = ++sc_state.next_id;
  r->next = sc_state.ranges;
  sc_state.ranges = r;
  pthread_mutex_unlock(&sc_state.lock);
}

static range_t *range_find(const void *p) {
  uintptr_t a = (uintptr_t)p;
  for (range_t *r = sc_state.ranges; r; r = r->next)
    if (a >= r->base && a - r->base < (r->size ? r->size : 1))
      return r;
  return NULL;
}

static void range_unlink(range_t *r) {
  for (range_t **pp = &sc_state.ranges; *pp; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      return;
    }
}

/* What [p, p + n) is; M_OVERRUN: it starts in an allocation and runs past
 * its end. */
int sc_mem_kind(const void *p, size_t n) {
  range_t *r = range_find(p);
  if (!r)
    return M_UNREG;
  if (n > r->size - ((uintptr_t)p - r->base))
    return M_OVERRUN;
  return r->kind == R_HOST ? M_HOST : M_DEVICE;
}

int sc_mem_still(const void *p, size_t n, int k) {
  return (k != M_DEVICE && k != M_HOST) || sc_mem_kind(p, n) == k;
}

const char *sc_mem_name(int k) {
  static const char *const names[] = {"unregistered host memory",
                                      "device memory", "pinned host memory",
                                      "past the end of its allocation"};
  return names[k];
}

/* A pointer the device side of an operation may use: device memory, or
 * pinned (mapped) host memory, [p, p + n) inside its allocation. */
cudaError_t sc_check_dev_side(const char *fn, const char *what, const void *p,
                              size_t n) {
  int k = sc_mem_kind(p, n);
  if (k == M_DEVICE || k == M_HOST)
    return cudaSuccess;
  REFUSE(cudaErrorInvalidValue, "%s: %s [%p, +%zu bytes) is %s", fn, what, p, n,
         sc_mem_name(k));
}

/* A pointer that may be anything but must not overrun an allocation. */
static cudaError_t check_any(const char *fn, const char *what, const void *p,
                             size_t n) {
  if (sc_mem_kind(p, n) != M_OVERRUN)
    return cudaSuccess;
  REFUSE(cudaErrorInvalidValue, "%s: %s [%p, +%zu bytes) is %s", fn, what, p, n,
         sc_mem_name(M_OVERRUN));
}

/* ---- memory ------------------------------------------------------------- */

static size_t page_round(size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (n + pg - 1) / pg * pg;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  ENTER_DEV();
  UNSAFE_IN_CAPTURE();
  if (!devPtr)
    return sc_fail(cudaErrorInvalidValue);
  *devPtr = NULL;
  if (size == 0)
    return cudaSuccess;
  range_t *r = calloc(1, sizeof *r);
  if (!r)
    return sc_fail(cudaErrorMemoryAllocation);
  r->map_size = page_round(size);
  r->fd = memfd_create("softcuda", MFD_CLOEXEC);
  struct stat st;
  void *p = MAP_FAILED;
  if (r->fd >= 0 && ftruncate(r->fd, (off_t)r->map_size) == 0 &&
      fstat(r->fd, &st) == 0)
    p = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    if (r->fd >= 0)
      close(r->fd);
    free(r);
    REFUSE(cudaErrorMemoryAllocation, "cudaMalloc(%zu): %s", size,
           strerror(err));
  }
  r->base = (uintptr_t)p;
  r->size = size;
  r->kind = R_DEVICE;
  r->device = sc_cur_dev;
  r->ino = (uint64_t)st.st_ino;
  range_add(r, 1);
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr) {
  ENTER();
  if (!devPtr)
    return cudaSuccess;
  UNSAFE_IN_CAPTURE();
  pthread_mutex_lock(&sc_state.lock);
  sc_wait_all(-1); /* cudaFree synchronizes */
  range_t *r = range_find(devPtr);
  if (!r || r->kind != R_DEVICE || r->base != (uintptr_t)devPtr) {
    pthread_mutex_unlock(&sc_state.lock);
    REFUSE(cudaErrorInvalidValue, "cudaFree(%p): not a cudaMalloc allocation",
           devPtr);
  }
  range_unlink(r);
  pthread_mutex_unlock(&sc_state.lock);
  munmap((void *)r->base, r->map_size);
  close(r->fd);
  free(r);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  ENTER_DEV();
  UNSAFE_IN_CAPTURE();
  if (!pHost ||
      (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped |
                           cudaHostAllocWriteCombined)))
    return sc_fail(cudaErrorInvalidValue);
  *pHost = NULL;
  if (size == 0)
    return cudaSuccess;
  range_t *r = calloc(1, sizeof *r);
  if (!r)
    return sc_fail(cudaErrorMemoryAllocation);
  r->map_size = page_round(size);
  void *p = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    free(r);
    return sc_fail(cudaErrorMemoryAllocation);
  }
  r->base = (uintptr_t)p;
  r->size = size;
  r->kind = R_HOST;
  r->device = sc_cur_dev;
  r->fd = -1;
  range_add(r, 0);
  *pHost = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void *ptr) {
  ENTER();
  if (!ptr)
    return cudaSuccess;
  UNSAFE_IN_CAPTURE();
  pthread_mutex_lock(&sc_state.lock);
  sc_wait_all(-1); /* like cudaFree, it synchronizes */
  range_t *r = range_find(ptr);
  if (!r || r->kind != R_HOST || r->base != (uintptr_t)ptr) {
    pthread_mutex_unlock(&sc_state.lock);
    REFUSE(cudaErrorInvalidValue,
           "cudaFreeHost(%p): not a cudaHostAlloc allocation", ptr);
  }
  range_unlink(r);
  pthread_mutex_unlock(&sc_state.lock);
  munmap((void *)r->base, r->map_size);
  free(r);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost,
                                     unsigned int flags) {
  ENTER_DEV();
  if (!pDevice || flags)
    return sc_fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&sc_state.lock);
  range_t *r = range_find(pHost);
  int ok = r && r->kind == R_HOST;
  pthread_mutex_unlock(&sc_state.lock);
  if (!ok)
    REFUSE(cudaErrorInvalidValue,
           "cudaHostGetDevicePointer(%p): not pinned host memory", pHost);
  *pDevice = pHost; /* identity: unified addressing */
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a,
                                     const void *ptr) {
  ENTER();
  if (!a)
    return sc_fail(cudaErrorInvalidValue);
  memset(a, 0, sizeof *a);
  pthread_mutex_lock(&sc_state.lock);
  range_t *r = range_find(ptr);
  if (!r) {
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
    a->hostPointer = (void *)(uintptr_t)ptr;
  } else if (r->kind == R_HOST) {
    a->type = cudaMemoryTypeHost;
    a->device = r->device;
    a->hostPointer = a->devicePointer = (void *)(uintptr_t)ptr;
  } else {
    a->type = cudaMemoryTypeDevice;
    a->device = r->device;
    a->devicePointer = (void *)(uintptr_t)ptr;
  }
  pthread_mutex_unlock(&sc_state.lock);
  return cudaSuccess;
}

CUresult sc_pointer_get_attribute(void *data, CUpointer_attribute attribute,
                                  CUdeviceptr ptr) {
  if (sc_enter(__func__) != cudaSuccess)
    return CUDA_ERROR_NOT_PERMITTED;
  if (!data)
    return CUDA_ERROR_INVALID_VALUE;
  if (attribute != CU_POINTER_ATTRIBUTE_BUFFER_ID) {
    if (sc_debug_on())
      sc_say("cuPointerGetAttribute: attribute %d not modelled",
             (int)attribute);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  pthread_mutex_lock(&sc_state.lock);
  range_t *r = range_find((const void *)(uintptr_t)ptr);
  /* device allocations: their id, unique in this process and never
   * reused (as CUDA's); other ranges: an id apart from those */
  unsigned long long id = !r ? 0
                          : r->kind == R_DEVICE
                              ? r->id
                              : (1ull << 63) | (unsigned long long)(uintptr_t)r;
  pthread_mutex_unlock(&sc_state.lock);
  if (!r)
    return CUDA_ERROR_INVALID_VALUE;
  *(unsigned long long *)data = id;
  return CUDA_SUCCESS;
}

/* The device allocation holding p has CU_POINTER_ATTRIBUTE_SYNC_MEMOPS set
 * (lock held). */
static int sync_memops_at(const void *p) {
  range_t *r = range_find(p);
  return r && r->kind == R_DEVICE && r->sync_memops;
}

/* Lock held: a synchronous copy or memset into dst was just queued on the
 * current device's legacy stream and returns before it ran; remember it,
 * so that setting SYNC_MEMOPS on the allocation can wait for it. */
static void note_pending(const void *dst) {
  range_t *r = range_find(dst);
  stream_t *s = NULL;
  if (r && r->kind == R_DEVICE && sc_resolve(NULL, &s) == cudaSuccess)
    r->pend[s->device] = s->queued;
}

CUresult sc_pointer_set_attribute(const void *value,
                                  CUpointer_attribute attribute,
                                  CUdeviceptr ptr) {
  if (sc_enter(__func__) != cudaSuccess)
    return CUDA_ERROR_NOT_PERMITTED;
  if (!value)
    return CUDA_ERROR_INVALID_VALUE;
  if (attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) {
    if (sc_debug_on())
      sc_say("cuPointerSetAttribute: attribute %d not modelled",
             (int)attribute);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  pthread_mutex_lock(&sc_state.lock);
  range_t *r = range_find((const void *)(uintptr_t)ptr);
  if (!r || r->kind != R_DEVICE) {
    pthread_mutex_unlock(&sc_state.lock);
    if (sc_debug_on())
      sc_say("cuPointerSetAttribute: 0x%llx is not device memory this "
             "process allocated",
             (unsigned long long)ptr);
    return CUDA_ERROR_INVALID_VALUE;
  }
  r->sync_memops = *(const unsigned *)value != 0;
  if (r->sync_memops) {
    /* "does not return until those memory operations are complete"; the
     * range may go while this waits: its numbers are copied first */
    uint64_t pend[MAX_DEVICES];
    memcpy(pend, r->pend, sizeof pend);
    memset(r->pend, 0, sizeof r->pend);
    for (int d = 0; d < MAX_DEVICES; d++)
      if (pend[d] && sc_state.legacy[d])
        sc_wait_seq(sc_state.legacy[d]->id, pend[d]);
  }
  pthread_mutex_unlock(&sc_state.lock);
  return CUDA_SUCCESS;
}

/* cuMemGetAddressRange, through the entry point table. */
CUresult sc_mem_get_address_range(CUdeviceptr *pbase, size_t *psize,
                                  CUdeviceptr dptr) {
  if (sc_enter(__func__) != cudaSuccess)
    return CUDA_ERROR_NOT_PERMITTED;
  pthread_mutex_lock(&sc_state.lock);
  range_t *r = range_find((const void *)(uintptr_t)dptr);
  uintptr_t base = r ? r->base : 0;
  size_t size = r ? r->size : 0;
  pthread_mutex_unlock(&sc_state.lock);
  if (!r)
    return CUDA_ERROR_NOT_FOUND;
  if (pbase)
    *pbase = (CUdeviceptr)base;
  if (psize)
    *psize = size;
  return CUDA_SUCCESS;
}

/* ---- dma-buf export (GPUDirect RDMA) ------------------------------------
 * cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD) hands
 * out a file descriptor for a page-aligned stretch of one allocation, which
 * an RDMA driver imports (ibv_reg_dmabuf_mr) and maps page by page. Here the
 * descriptor is a new open of the allocation's memfd, its own open file
 * description; the stretch's offset in that file, which a real dma-buf
 * implies (its offset 0 is dptr), is the description's file position (so
 * every dup of the descriptor carries it), and its length is kept in a
 * table by (inode, offset). softcuda_dmabuf_info answers from them for the
 * test HCA (tests/unit/mock_verbs.c) that stands in for the importer.
 * SOFTCUDA_NO_DMABUF=1 models a device or driver without dma-buf
 * (CUDA_ERROR_NOT_SUPPORTED). */

#define SC_DMABUF_MAX 256
static struct {
  uint64_t ino, off;
  size_t len;
} sc_dmabufs[SC_DMABUF_MAX];
static int sc_dmabuf_next;

int sc_dmabuf_supported(void) {
  const char *v = getenv("SOFTCUDA_NO_DMABUF");
  return !(v && v[0] && strcmp(v, "0"));
}

CUresult sc_mem_get_handle_for_range(void *handle, CUdeviceptr dptr,
                                     size_t size, CUmemRangeHandleType type,
                                     unsigned long long flags) {
  if (sc_enter(__func__) != cudaSuccess)
    return CUDA_ERROR_NOT_PERMITTED;
  long page = sysconf(_SC_PAGESIZE);
  if (!handle || type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD ||
      (flags &
       ~(unsigned long long)CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE)) {
    if (sc_debug_on())
      sc_say("cuMemGetHandleForAddressRange: handle %p, type %d, flags "
             "0x%llx: invalid",
             handle, (int)type, flags);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!sc_dmabuf_supported() ||
      (flags & CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE))
    return CUDA_ERROR_NOT_SUPPORTED; /* no BAR1 mapping modelled */
  if (size == 0 || dptr % (CUdeviceptr)page || size % (size_t)page) {
    if (sc_debug_on())
      sc_say("cuMemGetHandleForAddressRange(0x%llx, %zu): the address and "
             "size must be aligned to the host page size (%ld)",
             (unsigned long long)dptr, size, page);
    return CUDA_ERROR_INVALID_VALUE;
  }
  pthread_mutex_lock(&sc_state.lock);
  range_t *r = range_find((const void *)(uintptr_t)dptr);
  int ok = r && r->kind == R_DEVICE && dptr - r->base <= r->map_size &&
           size <= r->map_size - (size_t)(dptr - r->base);
  char path[64];
  uint64_t off = ok ? (uint64_t)(dptr - r->base) : 0, ino = ok ? r->ino : 0;
  if (ok)
    snprintf(path, sizeof path, "/proc/self/fd/%d", r->fd);
  pthread_mutex_unlock(&sc_state.lock);
  if (!ok) {
    if (sc_debug_on())
      sc_say("cuMemGetHandleForAddressRange(0x%llx, %zu): not inside one "
             "device allocation",
             (unsigned long long)dptr, size);
    return CUDA_ERROR_INVALID_VALUE;
  }
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  if (lseek(fd, (off_t)off, SEEK_SET) != (off_t)off) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_mutex_lock(&sc_state.lock);
  int slot = -1;
  for (int i = 0; i < SC_DMABUF_MAX && slot < 0; i++)
    if (sc_dmabufs[i].len == 0 ||
        (sc_dmabufs[i].ino == ino && sc_dmabufs[i].off == off))
      slot = i;
  if (slot < 0) /* full: the oldest entries go round-robin */
    slot = sc_dmabuf_next++ % SC_DMABUF_MAX;
  sc_dmabufs[slot].ino = ino;
  sc_dmabufs[slot].off = off;
  if (sc_dmabufs[slot].len < size)
    sc_dmabufs[slot].len = size;
  pthread_mutex_unlock(&sc_state.lock);
  *(int *)handle = fd;
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) int
softcuda_dmabuf_info(int fd, uint64_t *file_off, size_t *len) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0)
    return -1;
  off_t pos = lseek(fd, 0, SEEK_CUR);
  int found = 0;
  pthread_mutex_lock(&sc_state.lock);
  for (int i = 0; i < SC_DMABUF_MAX && !found && pos >= 0; i++)
    if (sc_dmabufs[i].len && sc_dmabufs[i].ino == (uint64_t)st.st_ino &&
        sc_dmabufs[i].off == (uint64_t)pos) {
      *file_off = sc_dmabufs[i].off;
      *len = sc_dmabufs[i].len;
      found = 1;
    }
  pthread_mutex_unlock(&sc_state.lock);
  return found ? 0 : -1;
}

/* ---- copies and memsets ------------------------------------------------- */

/* Checks a copy of rows (extent: bytes from the first to the last byte
 * touched) against kind; lock held. */
static cudaError_t check_copy(const char *fn, void *dst, size_t dext,
                              const void *src, size_t sext,
                              enum cudaMemcpyKind kind) {
  cudaError_t e = cudaSuccess;
  switch (kind) {
  case cudaMemcpyHostToHost:
  case cudaMemcpyDefault:
    if ((e = check_any(fn, "dst", dst, dext)) == cudaSuccess)
      e = check_any(fn, "src", src, sext);
    break;
  case cudaMemcpyHostToDevice:
    if ((e = sc_check_dev_side(fn, "dst", dst, dext)) == cudaSuccess)
      e = check_any(fn, "src", src, sext);
    break;
  case cudaMemcpyDeviceToHost:
    if ((e = check_any(fn, "dst", dst, dext)) == cudaSuccess)
      e = sc_check_dev_side(fn, "src", src, sext);
    break;
  case cudaMemcpyDeviceToDevice:
    if ((e = sc_check_dev_side(fn, "dst", dst, dext)) == cudaSuccess)
      e = sc_check_dev_side(fn, "src", src, sext);
    break;
  default:
    REFUSE(cudaErrorInvalidMemcpyDirection, "%s: kind %d", fn, (int)kind);
  }
  if (e == cudaSuccess && dext && sext &&
      (uintptr_t)dst < (uintptr_t)src + sext &&
      (uintptr_t)src < (uintptr_t)dst + dext)
    sc_say("%s: dst [%p, +%zu) and src [%p, +%zu) overlap (undefined in CUDA)",
           fn, dst, dext, src, sext);
  return e;
}

/* How a copy or memset is queued (queue_checked). */
enum {
  Q_ASYNC,  /* on the given stream; returns at once */
  Q_SYNC,   /* on the legacy stream, then waits for it */
  Q_STAGED, /* on the legacy stream after waiting for what is queued on it
             * already; returns before the copy ran (the op holds its
             * source) */
};

/* Lock held: queues op (how: Q_*) unless the argument check failed. */
static cudaError_t queue_checked(cudaError_t check, op_t *op,
                                 cudaStream_t stream, int how) {
  if (check != cudaSuccess) {
    sc_op_free(op);
    return check;
  }
  stream_t *s = NULL;
  if (how == Q_STAGED) { /* "a stream sync is performed before the copy" */
    cudaError_t e = sc_resolve(NULL, &s);
    if (e != cudaSuccess) {
      sc_op_free(op);
      return e;
    }
    sc_wait_stream(s);
    return sc_sticky_or(sc_submit(s, op));
  }
  cudaError_t e = sc_enqueue(how == Q_SYNC ? NULL : stream, op, &s);
  if (e == cudaSuccess && how == Q_SYNC) {
    sc_wait_stream(s);
    e = sc_sticky_or(e);
  }
  return e;
}

static cudaError_t copy_2d(const char *fn, void *dst, size_t dpitch,
                           const void *src, size_t spitch, size_t width,
                           size_t height, enum cudaMemcpyKind kind,
                           cudaStream_t stream, int sync) {
  cudaError_t e = sc_enter_dev(fn);
  if (e == cudaSuccess && sync)
    e = sc_capture_unsafe(fn);
  if (e != cudaSuccess)
    return sc_fail(e);
  if (width > dpitch || width > spitch)
    REFUSE(cudaErrorInvalidPitchValue, "%s: width %zu, pitches %zu and %zu", fn,
           width, dpitch, spitch);
  if (width && height && (!dst || !src))
    return sc_fail(cudaErrorInvalidValue);
  size_t dext = width && height ? dpitch * (height - 1) + width : 0;
  size_t sext = width && height ? spitch * (height - 1) + width : 0;
  op_t *op = sc_op_new(OP_COPY);
  if (!op)
    return sc_fail(cudaErrorMemoryAllocation);
  op->u.copy.dst = dst;
  op->u.copy.src = src;
  op->u.copy.width = width;
  op->u.copy.height = width ? height : 0;
  op->u.copy.dpitch = dpitch;
  op->u.copy.spitch = spitch;
  pthread_mutex_lock(&sc_state.lock);
  op->u.copy.dk = sc_mem_kind(dst, dext);
  op->u.copy.sk = sc_mem_kind(src, sext);
  e = check_copy(fn, dst, dext, src, sext, kind);
  int how = sync ? Q_SYNC : Q_ASYNC;
  /* A synchronous copy from pageable host memory to device memory returns
   * once the driver copied the source to its staging memory; the DMA to
   * the destination may not have completed (CUDA's "API synchronization
   * behavior"), and only the legacy stream and the blocking streams are
   * ordered behind it: work on a cudaStreamNonBlocking stream may run
   * before it lands. So here too: the source is copied now, the copy runs
   * on the legacy stream's worker later. */
  int sync_dst = sync && sync_memops_at(dst); /* always synchronous */
  if (e == cudaSuccess && sync && !sync_dst && sext &&
      op->u.copy.sk == M_UNREG && op->u.copy.dk == M_DEVICE &&
      (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDefault)) {
    pthread_mutex_unlock(&sc_state.lock);
    op->owned = malloc(sext);
    if (op->owned) {
      memcpy(op->owned, src, sext);
      op->u.copy.src = op->owned; /* M_UNREG as src was */
      how = Q_STAGED;
    }
    pthread_mutex_lock(&sc_state.lock);
  }
  /* Device to device, CUDA performs no host-side synchronisation: the
   * copy is queued on the legacy stream and the call returns. */
  if (sync && !sync_dst && op->u.copy.sk == M_DEVICE &&
      op->u.copy.dk == M_DEVICE)
    how = Q_ASYNC; /* stream is NULL: the legacy stream */
  e = queue_checked(e, op, stream, how);
  if (e == cudaSuccess && sync && how != Q_SYNC)
    note_pending(dst);
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream) {
  return copy_2d(__func__, dst, count, src, count, count, 1, kind, stream, 0);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                       enum cudaMemcpyKind kind) {
  return copy_2d(__func__, dst, count, src, count, count, 1, kind, NULL, 1);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                              size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream) {
  return copy_2d(__func__, dst, dpitch, src, spitch, width, height, kind,
                 stream, 0);
}

static cudaError_t memset_op(const char *fn, void *dst, int value, size_t count,
                             cudaStream_t stream, int sync) {
  cudaError_t e = sc_enter_dev(fn);
  if (e == cudaSuccess && sync)
    e = sc_capture_unsafe(fn);
  if (e != cudaSuccess)
    return sc_fail(e);
  if (count == 0)
    return cudaSuccess;
  op_t *op = sc_op_new(OP_SET);
  if (!op)
    return sc_fail(cudaErrorMemoryAllocation);
  op->u.set.dst = dst;
  op->u.set.value = value;
  op->u.set.bytes = count;
  pthread_mutex_lock(&sc_state.lock);
  /* cudaMemset of device memory is asynchronous to the host (CUDA's "API
   * synchronization behavior"): queued on the legacy stream, it may land
   * after work a cudaStreamNonBlocking stream or another process did */
  int how = sync && (sc_mem_kind(dst, count) != M_DEVICE || sync_memops_at(dst))
                ? Q_SYNC
                : Q_ASYNC;
  e = queue_checked(sc_check_dev_side(fn, "dst", dst, count), op, stream, how);
  if (e == cudaSuccess && sync && how != Q_SYNC)
    note_pending(dst);
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                            cudaStream_t stream) {
  return memset_op(__func__, devPtr, value, count, stream, 0);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  return memset_op(__func__, devPtr, value, count, NULL, 1);
}

/* ---- CUDA IPC ----------------------------------------------------------- */

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
  ENTER_DEV();
  if (!handle)
    return sc_fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&sc_state.lock);
  range_t *r = range_find(devPtr);
  ipc_handle_t h;
  memset(&h, 0, sizeof h);
  int ok = r && r->kind == R_DEVICE;
  if (ok) {
    memcpy(h.magic, IPC_MAGIC, sizeof h.magic);
    h.pid = (int64_t)getpid();
    h.fd = r->fd;
    h.device = r->device;
    h.id = r->id;
    h.size = r->size;
    h.ino = r->ino;
  }
  pthread_mutex_unlock(&sc_state.lock);
  if (!ok)
    REFUSE(cudaErrorInvalidValue,
           "cudaIpcGetMemHandle(%p): not in a cudaMalloc allocation of this "
           "process",
           devPtr);
  memset(handle, 0, sizeof *handle);
  memcpy(handle, &h, sizeof h);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle,
                                 unsigned int flags) {
  ENTER_DEV();
  ipc_handle_t h;
  memcpy(&h, &handle, sizeof h);
  if (!devPtr || memcmp(h.magic, IPC_MAGIC, sizeof h.magic) ||
      (flags & ~(unsigned)cudaIpcMemLazyEnablePeerAccess))
    return sc_fail(cudaErrorInvalidValue);
  if (h.pid == (int64_t)getpid())
    REFUSE(cudaErrorDeviceUninitialized,
           "cudaIpcOpenMemHandle: the handle was made by this process (CUDA "
           "refuses that too)");
  pthread_mutex_lock(&sc_state.lock);
  for (range_t *r = sc_state.ranges; r; r = r->next)
    if (r->kind == R_IPC && r->creator == h.pid && r->id == h.id) {
      r->refs++;
      *devPtr = (void *)r->base;
      pthread_mutex_unlock(&sc_state.lock);
      return cudaSuccess;
    }
  pthread_mutex_unlock(&sc_state.lock);
  char path[64];
  snprintf(path, sizeof path, "/proc/%lld/fd/%d", (long long)h.pid, h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || (uint64_t)st.st_ino != h.ino) {
    int err = fd < 0 ? errno : ESTALE;
    if (fd >= 0)
      close(fd);
    REFUSE(cudaErrorMapBufferObjectFailed,
           "cudaIpcOpenMemHandle: %s: %s (the allocation or its process is "
           "gone)",
           path, strerror(err));
  }
  range_t *r = calloc(1, sizeof *r);
  void *p = MAP_FAILED;
  size_t map_size = page_round(h.size);
  if (r)
    p = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    free(r);
    return sc_fail(cudaErrorMapBufferObjectFailed);
  }
  r->base = (uintptr_t)p;
  r->size = h.size;
  r->map_size = map_size;
  r->kind = R_IPC;
  r->device = sc_cur_dev;
  r->fd = -1;
  r->id = h.id;
  r->creator = h.pid;
  r->refs = 1;
  range_add(r, 0);
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *devPtr) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  range_t *r = range_find(devPtr);
  if (!r || r->kind != R_IPC || r->base != (uintptr_t)devPtr) {
    pthread_mutex_unlock(&sc_state.lock);
    REFUSE(cudaErrorInvalidValue,
           "cudaIpcCloseMemHandle(%p): not an opened IPC mapping", devPtr);
  }
  if (--r->refs > 0) {
    pthread_mutex_unlock(&sc_state.lock);
    return cudaSuccess;
  }
  range_unlink(r);
  /* Work queued earlier that uses the mapping faults when it runs (its
   * memory check); work running now finishes before the unmap. */
  while (sc_state.running)
    pthread_cond_wait(&sc_state.done, &sc_state.lock);
  pthread_mutex_unlock(&sc_state.lock);
  munmap((void *)r->base, r->map_size);
  free(r);
  return cudaSuccess;
}

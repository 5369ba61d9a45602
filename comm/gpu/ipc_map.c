/*
 * ipc_map.c - what the CUDA IPC path (path_ipc.c, path_ipc_p2p.c) shares
 * between its calls: how a rank describes its buffers to its peers, and the
 * process-wide cache of peers' allocations mapped here (ipc_map.h).
 */
#include "ipc_map.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SHARC_HAVE_CUDA

#include <cuda.h>

#include "devptr.h"

typedef CUresult (*get_range_fn)(CUdeviceptr *base, size_t *size,
                                 CUdeviceptr dptr);
typedef CUresult (*get_attr_fn)(void *data, CUpointer_attribute attribute,
                                CUdeviceptr ptr);

/* cuMemGetAddressRange through the runtime (nothing links libcuda). */
static get_range_fn find_get_range(void) {
  static _Atomic(get_range_fn) fn;
  get_range_fn f = atomic_load(&fn);
  if (!f) {
    char why[128];
    f = (get_range_fn)dev_driver_entry("cuMemGetAddressRange",
                                       cudaEnableDefault, why, sizeof why);
    atomic_store(&fn, f);
  }
  return f;
}

typedef CUresult (*get_handle_fn)(void *handle, CUdeviceptr dptr, size_t size,
                                  CUmemRangeHandleType type,
                                  unsigned long long flags);

/* GPUDirect RDMA: a dma-buf of the page-aligned span covering
 * [p, p + bytes) into out (has_dmabuf), or the reason there is none. The
 * span may reach past the allocation's asked-for size into its last page,
 * which CUDA maps whole (as NCCL registers). */
static void export_dmabuf(const void *p, size_t bytes, mem_dev_t *out) {
  static _Atomic(get_handle_fn) fn;
  char fn_why[96] = "";
  get_handle_fn f = atomic_load(&fn);
  if (!f) {
    f = (get_handle_fn)dev_driver_entry("cuMemGetHandleForAddressRange",
                                        cudaEnableDefault, fn_why,
                                        sizeof fn_why);
    atomic_store(&fn, f);
  }
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t lo = (uint64_t)(uintptr_t)p & ~(page - 1);
  uint64_t hi = ((uint64_t)(uintptr_t)p + bytes + page - 1) & ~(page - 1);
  int fd = -1;
  CUresult r = f ? f(&fd, (CUdeviceptr)lo, (size_t)(hi - lo),
                     CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)
                 : CUDA_ERROR_NOT_SUPPORTED;
  if (r == CUDA_SUCCESS && fd >= 0) {
    out->has_dmabuf = 1;
    out->dmabuf_fd = fd;
    out->dmabuf_addr = lo;
    out->dmabuf_len = (size_t)(hi - lo);
    return;
  }
  if (!f)
    snprintf(out->dmabuf_why, sizeof out->dmabuf_why,
             "the CUDA driver has no cuMemGetHandleForAddressRange (%s)",
             fn_why);
  else
    snprintf(out->dmabuf_why, sizeof out->dmabuf_why,
             "cuMemGetHandleForAddressRange refused a dma-buf of "
             "[0x%llx, +%llu) (CUresult %d: %s)",
             (unsigned long long)lo, (unsigned long long)(hi - lo), (int)r,
             r == CUDA_ERROR_NOT_SUPPORTED
                 ? "this GPU or driver exports no dma-buf; a kernel 5.12+ and "
                   "the open GPU kernel modules have it"
                 : "see the CUDA driver API documentation");
}

typedef CUresult (*set_attr_fn)(const void *value,
                                CUpointer_attribute attribute, CUdeviceptr ptr);

/* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS on the allocation at base, as GPUDirect
 * RDMA asks of memory a NIC reads: a cudaMemcpy from pageable memory (or a
 * cudaMemset, a device-to-device cudaMemcpy) into it returns only once the
 * bytes landed, and setting it waits for such copies still in flight. The
 * NIC reads outside every stream, so without it a send right after a
 * cudaMemcpy could carry the old bytes. 0, or -1 with why. */
static int set_sync_memops(uint64_t base, char *why, size_t n) {
  static _Atomic(set_attr_fn) fn;
  set_attr_fn f = atomic_load(&fn);
  if (!f) {
    f = (set_attr_fn)dev_driver_entry("cuPointerSetAttribute",
                                      cudaEnableDefault, why, n);
    atomic_store(&fn, f);
    if (!f)
      return -1;
  }
  unsigned one = 1;
  CUresult r = f(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)base);
  if (r == CUDA_SUCCESS)
    return 0;
  snprintf(why, n, "cuPointerSetAttribute(SYNC_MEMOPS) returned CUresult %d",
           (int)r);
  return -1;
}

/* The allocation id of device pointer p (CU_POINTER_ATTRIBUTE_BUFFER_ID),
 * or 0 when the driver cannot tell. */
static uint64_t buffer_id(const void *p) {
  static _Atomic(get_attr_fn) fn;
  get_attr_fn f = atomic_load(&fn);
  if (!f) {
    char why[128];
    f = (get_attr_fn)dev_driver_entry("cuPointerGetAttribute",
                                      cudaEnableDefault, why, sizeof why);
    atomic_store(&fn, f);
  }
  unsigned long long id = 0;
  if (!f || f(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)p) !=
                CUDA_SUCCESS)
    return 0;
  return id;
}

/* ipc_map.h */
int ipc_peers_read(const coll_call_t *call, int b, int rank) {
  switch (call->coll) {
  case SCHED_ALL_REDUCE:
    return 1;
  case SCHED_BROADCAST:
    return b == BUF_SEND && rank == call->root;
  default:
    return b == BUF_SEND;
  }
}

ipc_sig_t ipc_signature(const coll_call_t *call) {
  ipc_sig_t g = {.coll = (int32_t)call->coll,
                 .dtype = (int32_t)call->dtype,
                 .op = (int32_t)call->op,
                 .root = call->coll == SCHED_BROADCAST ? call->root : 0,
                 .count = call->count};
  if (call->coll == SCHED_ALL_GATHER || call->coll == SCHED_BROADCAST)
    g.op = 0; /* not read */
  return g;
}

/* Fills b for buffer p (len bytes) of this rank; shared: peers read it. */
void ipc_share(const void *p, size_t len, int shared, ipc_buf_t *b) {
  memset(b, 0, sizeof *b);
  mem_dev_t reg;
  /* Registered: CUDA was asked then; one cheap query says the allocation
   * is still the one registered (freed without sharc_mem_deregister, a new
   * one may sit at the same address). */
  if (p && mem_find_device(p, len, &reg)) {
    if (reg.buffer_id && buffer_id(p) == reg.buffer_id) {
      b->state = shared ? BS_OK : BS_LOCAL;
      memcpy(&b->handle, reg.handle, sizeof b->handle);
      b->base = reg.base;
      b->off = (uint64_t)((uintptr_t)p - (uintptr_t)reg.base);
      b->reg = 1;
      return;
    }
    WARN(SUB_CUDA,
         "CUDA IPC: device buffer %p is in a registered region whose "
         "allocation was freed (or cannot be checked); treating it as "
         "unregistered: call sharc_mem_deregister before cudaFree",
         p);
  }
  struct cudaPointerAttributes a;
  if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess ||
      (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)) {
    (void)cudaGetLastError();
    b->state = BS_HOST;
    return;
  }
  if (a.type == cudaMemoryTypeManaged) {
    b->state = BS_MANAGED;
    return;
  }
  if (!shared) {
    b->state = BS_LOCAL;
    return;
  }
  get_range_fn range = find_get_range();
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!range ||
      range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS ||
      cudaIpcGetMemHandle(&b->handle, (void *)(uintptr_t)base) != cudaSuccess) {
    (void)cudaGetLastError();
    b->state = BS_NOSHARE;
    return;
  }
  b->base = (uint64_t)base;
  b->off = (uint64_t)((uintptr_t)p - (uintptr_t)base);
  b->state = BS_OK;
}

sharc_status_t gpu_mem_describe(const void *p, size_t bytes, mem_dev_t *out) {
  static const char fn[] = "sharc_mem_register";
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return err_set(SHARC_ERR_INVALID_ARG, "%s: CUDA does not know %p", fn, p);
  }
  if (a.type == cudaMemoryTypeManaged)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%s: %p is managed memory, which CUDA IPC cannot share; "
                   "register cudaMalloc memory (managed memory works "
                   "unregistered on the staged path)",
                   fn, p);
  get_range_fn range = find_get_range();
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!range || range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
    return err_set(SHARC_ERR_CUDA,
                   "%s: cuMemGetAddressRange cannot find the allocation of "
                   "device pointer %p",
                   fn, p);
  size_t off = (size_t)((uintptr_t)p - (uintptr_t)base);
  if (bytes > size - off)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%s: [%p, +%zu) runs %zu bytes past the end of its "
                   "allocation (%p, %zu bytes); register within one "
                   "cudaMalloc allocation",
                   fn, p, bytes, bytes - (size - off), (void *)(uintptr_t)base,
                   size);
  cudaIpcMemHandle_t h;
  cudaError_t e = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%s: %p cannot be shared through CUDA IPC "
                   "(cudaIpcGetMemHandle: %s; cudaMallocAsync pools and "
                   "cuMemCreate memory cannot be): leave it unregistered",
                   fn, p, cudaGetErrorName(e));
  }
  out->device = a.device;
  out->base = (uint64_t)base;
  out->buffer_id = buffer_id((void *)(uintptr_t)base);
  memcpy(out->handle, &h, sizeof h);
  export_dmabuf(p, bytes, out);
  char why[160] = "";
  if (set_sync_memops(out->base, why, sizeof why) != 0)
    WARN(SUB_CUDA,
         "%s: %p: %s; a GPUDirect RDMA send right after a cudaMemcpy into "
         "it may carry old bytes (synchronize the device first)",
         fn, p, why);
  return SHARC_OK;
}

/* ---- mappings of peers' allocations (process-wide) ----------------------
 * cudaIpcOpenMemHandle maps an allocation once per process; the cache keeps
 * the mapping for the later calls on the same buffers. A call holds the
 * slots it uses (inuse) until its copies finished. Mappings are closed only
 * by ipc_trim, from sharc_stream_synchronize, never inside a call:
 * cudaIpcCloseMemHandle may synchronize the device, and inside a call this
 * rank's CUDA stream waits for the worker doing it. A peer that frees a
 * buffer and allocates another gets a new handle, so a mapping is never
 * reused for different memory; its old mapping keeps the freed memory
 * until the next trim. Buffers their owner registered (sharc_mem_register)
 * are kept (slot.keep) across trims until a descriptor from that
 * owner carries a later deregistration epoch: then they close at the next
 * trim like the others. */

/* Kept mappings at most: past that, the trim closes the least recently
 * used, so registrations never fill the table. */
#define MAP_KEEP_MAX (MAP_SLOTS / 2)

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(((mem_dev_t *)0)->handle),
               "mem_dev_t.handle holds a cudaIpcMemHandle_t");

static struct {
  pthread_mutex_t lock;
  map_slot_t slot[MAP_SLOTS];
  uint64_t clock;
} maps = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The owner o deregistered device memory since its kept mappings were
 * seen: they become ordinary ones (closed by the next trim), as a region
 * deregistered may be freed. */
void ipc_map_expire(const ipc_desc_t *o) {
  pthread_mutex_lock(&maps.lock);
  for (int i = 0; i < MAP_SLOTS; i++) {
    map_slot_t *s = &maps.slot[i];
    if (s->ptr && s->keep && s->owner == o->pid && s->nonce == o->nonce &&
        s->epoch < o->epoch)
      s->keep = 0;
  }
  pthread_mutex_unlock(&maps.lock);
}

/* The local address of a peer's allocation, held until ipc_map_put; NULL with
 * the reason in why. keep: the owner (pid, at epoch) registered it. */
map_slot_t *ipc_map_get(const cudaIpcMemHandle_t *h, int device, int keep,
                        const ipc_desc_t *owner, char *why, size_t n) {
  pthread_mutex_lock(&maps.lock);
  map_slot_t *hit = NULL, *empty = NULL;
  for (int i = 0; i < MAP_SLOTS && !hit; i++) {
    map_slot_t *s = &maps.slot[i];
    if (s->ptr && s->device == device && !memcmp(&s->handle, h, sizeof *h))
      hit = s;
    else if (!s->ptr && !empty)
      empty = s;
  }
  if (!hit && !empty)
    snprintf(why, n,
             "%d peer allocations mapped (registered ones until their owner "
             "deregisters, the others until the next "
             "sharc_stream_synchronize); synchronize more often or register "
             "fewer buffers",
             MAP_SLOTS);
  if (!hit && empty) {
    void *ptr = NULL;
    cudaError_t e =
        cudaIpcOpenMemHandle(&ptr, *h, cudaIpcMemLazyEnablePeerAccess);
    if (e == cudaSuccess) {
      empty->handle = *h;
      empty->device = device;
      empty->ptr = ptr;
      hit = empty;
      TRACE(SUB_CUDA, "CUDA IPC: mapped a peer allocation (%s)",
            keep ? "registered: kept until its owner deregisters"
                 : "until the next synchronize");
    } else {
      (void)cudaGetLastError();
      snprintf(why, n,
               "cudaIpcOpenMemHandle: %s: %s (ranks in separate containers "
               "or without peer access cannot share device memory; "
               "SHARC_CUDA_PATH=staged works there)",
               cudaGetErrorName(e), cudaGetErrorString(e));
    }
  }
  if (hit) {
    hit->inuse++;
    hit->used = ++maps.clock;
    if (keep) {
      hit->keep = 1;
      hit->owner = owner->pid;
      hit->nonce = owner->nonce;
      hit->epoch = owner->epoch;
    }
  }
  pthread_mutex_unlock(&maps.lock);
  return hit;
}

void ipc_map_put(map_slot_t *s) {
  pthread_mutex_lock(&maps.lock);
  s->inuse--;
  pthread_mutex_unlock(&maps.lock);
}

/* Closes the mappings of peers' buffers no call is using (process-wide),
 * when a CUDA stream that took this path is idle (gpu_path_t.synced),
 * never inside a call. Mappings of buffers their owners registered
 * (sharc_mem_register) stay until the owner has deregistered device memory
 * since. */
void ipc_map_trim(void) {
  pthread_mutex_lock(&maps.lock);
  /* Past MAP_KEEP_MAX kept mappings, the least recently used idle ones
   * close too (their owners may be gone for good). */
  for (;;) {
    int kept = 0;
    map_slot_t *oldest = NULL;
    for (int i = 0; i < MAP_SLOTS; i++) {
      map_slot_t *s = &maps.slot[i];
      if (!s->ptr || !s->keep)
        continue;
      kept++;
      if (!s->inuse && (!oldest || s->used < oldest->used))
        oldest = s;
    }
    if (kept <= MAP_KEEP_MAX || !oldest)
      break;
    oldest->keep = 0;
  }
  for (int i = 0; i < MAP_SLOTS; i++) {
    map_slot_t *s = &maps.slot[i];
    if (s->ptr && !s->inuse && !s->keep) {
      TRACE(SUB_CUDA, "CUDA IPC: closed a peer allocation's mapping");
      int prev = -1;
      if (cudaGetDevice(&prev) == cudaSuccess && prev != s->device)
        (void)cudaSetDevice(s->device);
      (void)cudaIpcCloseMemHandle(s->ptr);
      if (prev >= 0 && prev != s->device)
        (void)cudaSetDevice(prev);
      (void)cudaGetLastError();
      memset(s, 0, sizeof *s);
    }
  }
  pthread_mutex_unlock(&maps.lock);
}

#else /* !SHARC_HAVE_CUDA */

sharc_status_t gpu_mem_describe(const void *p, size_t bytes, mem_dev_t *out) {
  (void)p;
  (void)bytes;
  (void)out;
  return err_set(SHARC_ERR_UNSUPPORTED,
                 "sharc_mem_register: device memory in a build without CUDA");
}

#endif /* SHARC_HAVE_CUDA */

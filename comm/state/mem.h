/*
 * mem.h - the registry of sharc_mem_alloc and sharc_mem_register regions, so
 * the shm transport can let same-host peers read host regions in place and
 * the CUDA IPC path can share registered device regions.
 */
#ifndef SHARC_MEM_H
#define SHARC_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

typedef enum {
  MEM_ALLOCATED = 1, /* sharc_mem_alloc: memfd peers can map */
  MEM_REGISTERED = 2 /* sharc_mem_register: peers read it with
                        process_vm_readv */
} mem_kind_t;

typedef struct {
  mem_kind_t kind;
  uint64_t id;   /* unique within this process, never reused */
  int fd;        /* memfd holding the region (MEM_ALLOCATED), else -1 */
  size_t offset; /* of the looked-up pointer from the region start */
  size_t size;   /* bytes of the whole region */
} mem_ref_t;

/* 1 and *out filled if [p, p+len) lies inside one sharc_mem_alloc region
 * or registered host region, else 0 (registered device memory included).
 * Thread safe. */
int mem_find(const void *p, size_t len, mem_ref_t *out);

/* Device memory registered with sharc_mem_register (CUDA builds): what the
 * CUDA IPC path (gpu/path_ipc.c) shares with peers without asking CUDA per
 * call, and lets them keep mapped across synchronizes. */
typedef struct mem_dev {
  int device;               /* -1: not device memory */
  uint64_t base;            /* the cudaMalloc allocation holding it */
  uint64_t buffer_id;       /* its CU_POINTER_ATTRIBUTE_BUFFER_ID (0: none):
                               a later allocation at the same address has
                               another, so a freed registration shows */
  unsigned char handle[64]; /* that allocation's cudaIpcMemHandle_t */
  /* GPUDirect RDMA: a dma-buf of the page-aligned span
   * [dmabuf_addr, +dmabuf_len) that covers the region, exported by CUDA at
   * registration for an RDMA driver to import (ibv_reg_dmabuf_mr); owned by
   * the registry, closed at deregistration. has_dmabuf 0: none, with the
   * reason in dmabuf_why. */
  int has_dmabuf, dmabuf_fd;
  uint64_t dmabuf_addr;
  size_t dmabuf_len;
  char dmabuf_why[256];
  /* Filled by mem_find_device (ignored by mem_add_region): the registered
   * region that holds the pointer and its registry id. */
  void *region;
  size_t region_bytes;
  uint64_t region_id;
} mem_dev_t;

/* 1 and *out filled if [p, p + len) lies inside one registered device
 * region, else 0. Thread safe. */
int mem_find_device(const void *p, size_t len, mem_dev_t *out);

/* 1 while any device region is registered (one atomic load: transports ask
 * before they look a pointer up). */
int mem_have_device(void);

/* A dup() of the dma-buf of the device region holding [p, p + len), taken
 * under the registry's lock (so a concurrent sharc_mem_deregister cannot
 * close it under the caller); -1 when there is none. The caller closes it. */
int mem_dmabuf_dup(const void *p, size_t len);

/* How many device regions this process has deregistered so far: a peer
 * keeps its mappings of this process's registered regions until the number
 * it sees moves. */
uint64_t mem_dev_epoch(void);

/* Adds [ptr, ptr + bytes), memory the caller owns, as sharc_mem_register
 * does once it has asked whether it is device memory (dev->device >= 0,
 * with its allocation and IPC handle) or not (dev->device = -1).
 * SHARC_ERR_INVALID_ARG when it overlaps a region already known. */
sharc_status_t mem_add_region(void *ptr, size_t bytes, const mem_dev_t *dev);

#endif /* SHARC_MEM_H */

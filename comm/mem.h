/*
 * mem.h - the registry of sharc_mem_alloc regions, so the shm transport can
 * let same-host peers read them in place.
 */
#ifndef SHARC_MEM_H
#define SHARC_MEM_H

#include <stddef.h>
#include <stdint.h>

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

/* 1 and *out filled if [p, p+len) lies inside one sharc_mem_alloc region,
 * else 0. Thread safe. */
int mem_find(const void *p, size_t len, mem_ref_t *out);

#endif /* SHARC_MEM_H */

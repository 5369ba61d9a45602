/*
 * ipc_map.h - inside the CUDA IPC path: what path_ipc.c (collectives) and
 * path_ipc_p2p.c (send/recv batches) share. A buffer as its owner describes
 * it to its peers (ipc_buf_t, ipc_desc_t), and the process-wide cache of
 * peers' allocations mapped with cudaIpcOpenMemHandle (ipc_map.c).
 */
#ifndef SHARC_COMM_GPU_IPC_MAP_H
#define SHARC_COMM_GPU_IPC_MAP_H

#include "gpu_impl.h"

#ifdef SHARC_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <stdint.h>

/* ---- descriptors -------------------------------------------------------- */

enum { BUF_SEND, BUF_RECV, NBUF };

/* One buffer as its owner shares it. */
typedef struct {
  cudaIpcMemHandle_t handle; /* of the allocation holding the buffer */
  uint64_t base;             /* the allocation's address in the owner */
  uint64_t off;              /* the buffer's offset in it */
  int32_t state;             /* BS_* */
  int32_t reg;               /* registered: peers keep the mapping */
} ipc_buf_t;

enum {
  BS_UNUSED = 0, /* the call does not use it (broadcast's sendbuf off root) */
  BS_OK,         /* device memory, shared (peers read it) */
  BS_LOCAL,      /* device memory only this rank touches */
  BS_HOST,       /* host memory */
  BS_MANAGED,    /* managed memory: not shareable through CUDA IPC */
  BS_NOSHARE     /* device memory cudaIpcGetMemHandle refused */
};

/* What every rank must agree on, beside the buffers: a mismatch here would
 * make a rank read past a peer's allocation. */
typedef struct {
  int32_t coll, dtype, op, root;
  uint64_t count;
} ipc_sig_t;

typedef struct {
  ipc_buf_t buf[NBUF];
  ipc_sig_t sig;
  int64_t pid;    /* with nonce, the owner process (a rank of this */
  uint64_t nonce; /* process is reached without CUDA IPC) */
  uint64_t epoch; /* the owner's mem_dev_epoch: its deregistrations */
} ipc_desc_t;

#define MAP_SLOTS 256

typedef struct map_slot {
  cudaIpcMemHandle_t handle;
  int device;
  int inuse;
  void *ptr;      /* NULL: empty */
  int keep;       /* registered by its owner: not closed by ipc_trim */
  int64_t owner;  /* the owner (pid, nonce), and its mem_dev_epoch when */
  uint64_t nonce; /* seen registered (a later epoch ends keep) */
  uint64_t epoch;
  uint64_t used; /* the cache clock at the last map_get */
} map_slot_t;

/* A CUDA stream's state of this path (ds->path_state[IPC_SLOT], made by
 * its first call on the path): the internal CUDA stream the copies and
 * reductions run on and the blocking-sync event the worker waits on. */
typedef struct {
  int device;
  cudaStream_t cs;
  cudaEvent_t ev;
} ipc_ctx_t;

/* Whether peers read buffer b (BUF_*) of rank in call, on the paths that
 * read peers' buffers in place (ipc, direct): all-reduce both, broadcast
 * the root's send, all-gather and reduce-scatter the send. */
int ipc_peers_read(const coll_call_t *call, int b, int rank);

/* What every rank's call must agree on before it reads a peer's buffer. */
ipc_sig_t ipc_signature(const coll_call_t *call);

/* Fills b for buffer p (len bytes) of this rank; shared: peers read it. */
void ipc_share(const void *p, size_t len, int shared, ipc_buf_t *b);

/* The owner o deregistered device memory since its kept mappings were
 * seen: they become ordinary ones (closed by the next trim). */
void ipc_map_expire(const ipc_desc_t *o);

/* The slot mapping a peer's allocation h here (its local address in ->ptr),
 * held until ipc_map_put; NULL with the reason in why. keep: the owner
 * registered it (kept across trims until owner's next deregistration). */
map_slot_t *ipc_map_get(const cudaIpcMemHandle_t *h, int device, int keep,
                        const ipc_desc_t *owner, char *why, size_t n);
void ipc_map_put(map_slot_t *s);

/* Closes the mappings no call holds, except kept ones (up to half the
 * table); never inside a call (cudaIpcCloseMemHandle may synchronize). */
void ipc_map_trim(void);

#endif /* SHARC_HAVE_CUDA */

#endif /* SHARC_COMM_GPU_IPC_MAP_H */

/*
 * nccl.h - NCCL's C API on sharc (libsharc_nccl.so, also built under the
 * name libnccl.so.2 for programs linked against NVIDIA's library: put its
 * folder first in LD_LIBRARY_PATH). Written for sharc from NCCL's
 * documented API; it claims NCCL 2.19 (NCCL_VERSION_CODE), the API level it
 * implements: communicators (unique id, init by rank, init of all devices
 * of a process, config, split, finalize, destroy, abort, async error),
 * every collective, send/recv, group calls, NCCL's memory allocator and
 * buffer registration, versions and error strings.
 *
 * sharc's extension: every call that NCCL requires device memory for also
 * accepts host memory (the data moves through sharc's host transports), so
 * an NCCL program runs unchanged on a cluster without GPUs given a CUDA
 * runtime that runs there (softcuda, in sharc's tests). The stream argument
 * orders the call as in NCCL: it is queued on the cudaStream_t and the
 * call returns at once.
 *
 * Not available: ncclRedOpCreatePreMulSum returns ncclInvalidUsage (use
 * ncclSum and scale the result, or ncclAvg). Non-blocking communicators
 * (config.blocking = 0) are accepted; their calls complete before they
 * return, so ncclInProgress is never returned.
 *
 * Compile NCCL programs with -I <sharc>/include/nccl and link with
 * -lsharc_nccl (or -lnccl, finding libnccl.so.2 in sharc's build folder).
 */
#ifndef SHARC_NCCL_H
#define SHARC_NCCL_H

#include <cuda_runtime.h>
#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 19
#define NCCL_PATCH 0
#define NCCL_SUFFIX "-sharc"
/* Version codes: 2.8 and before X*1000 + Y*100 + Z, later X*10000 + Y*100 +
 * Z (so that the minor version may exceed 9). */
#define NCCL_VERSION(X, Y, Z)                                                  \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z)                           \
                          : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator: one rank of a clique of ranks. */
typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

/* The opaque id the ranks of one communicator share (made by one rank with
 * ncclGetUniqueId, passed to the others out of band). */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1, /* a CUDA call failed */
  ncclSystemError = 2,        /* a system call or allocation failed */
  ncclInternalError = 3,      /* a bug in the library */
  ncclInvalidArgument = 4,    /* a bad argument */
  ncclInvalidUsage = 5,       /* a call not allowed in this state */
  ncclRemoteError = 6,        /* a peer failed or the network did */
  ncclInProgress = 7,         /* a non-blocking call still runs */
  ncclNumResults = 8
} ncclResult_t;

/* Options of ncclCommInitRankConfig / ncclCommSplit. Start from
 * NCCL_CONFIG_INITIALIZER and set what you need; sharc reads `blocking`
 * only (every other field is accepted and ignored). */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
typedef struct ncclConfig_v21700 {
  size_t size;          /* sizeof(ncclConfig_t) */
  unsigned int magic;   /* 0xcafebeef */
  unsigned int version; /* NCCL_VERSION_CODE of the header */
  int blocking;         /* 0: non-blocking communicator */
  int cgaClusterSize;   /* GPU kernel launch hints: ignored */
  int minCTAs, maxCTAs; /* ignored */
  const char *netName;  /* ignored */
  int splitShare;       /* ignored */
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER                                                \
  {                                                                            \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE,                       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,   \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT    \
  }

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclNumTypes = 10
} ncclDataType_t;

typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff /* keeps the enum an int */
} ncclRedOp_t;

typedef enum {
  ncclScalarDevice = 0,
  ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

/* ---- versions and errors ---- */
ncclResult_t ncclGetVersion(int *version);
const char *ncclGetErrorString(ncclResult_t result);
/* The message of the last error on comm (NULL: of this thread). */
const char *ncclGetLastError(ncclComm_t comm);

/* ---- communicators ---- */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
/* Collective over the nranks ranks sharing commId; uses the current CUDA
 * device. Inside a group it returns at once and completes at the group's
 * end, so one thread may create the ranks of several devices. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                              int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                    ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
/* One process, ndev devices (devlist, or 0..ndev-1 when NULL): one
 * communicator per device, comm[i] of rank i. */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
/* Collective over comm: ranks with the same color form *newcomm, ordered
 * by key; NCCL_SPLIT_NOCOLOR gives NULL. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *config);
/* Finishes the work queued on comm; ncclCommDestroy then frees it. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
/* Stops comm at once (pending work fails, peers are told) and frees it. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
/* ncclSuccess while comm is healthy, else the error that broke it. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);

/* ---- memory ---- */
/* Device memory for communication buffers (cudaMalloc). */
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);
/* Registers a buffer with comm (sharc_mem_register); *handle for
 * ncclCommDeregister. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                              void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);

/* ---- reductions ---- */
/* Not available in sharc: returns ncclInvalidUsage. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                      ncclDataType_t datatype,
                                      ncclScalarResidence_t residence,
                                      ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- collectives (counts in elements; in place as in NCCL) ---- */
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream);
/* In place broadcast of buff (the older form of ncclBroadcast). */
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype,
                       int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                               size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
                           size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);

/* ---- point to point ---- */
ncclResult_t ncclSend(const void *sendbuff, size_t count,
                      ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t stream);

/* ---- groups ---- */
/* Calls between them are issued together at the outermost end: sends and
 * receives progress at once, collectives on several communicators (one
 * thread driving several devices) do not wait on each other. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_NCCL_H */

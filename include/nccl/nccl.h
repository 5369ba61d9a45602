/*
 * nccl.h - NCCL's C API on sharc (libsharc_nccl.so, also built under the
 * name libnccl.so.2 for programs linked against NVIDIA's library: put its
 * folder first in LD_LIBRARY_PATH). Written for sharc from NCCL's
 * documented API; it claims NCCL 2.28 (NCCL_VERSION_CODE), the API level
 * whose every entry point it exports: communicators (unique id, init by
 * rank, scalable init, init of all devices of a process, config, split,
 * shrink, finalize, destroy, abort, revoke, async error), every collective
 * (all-to-all, gather and scatter included), send/recv, group calls and
 * their simulation, NCCL's memory allocator, buffer and window
 * registration, versions and error strings. The types keep NCCL 2.28's
 * layouts and values (ncclConfig_t, ncclSimInfo_t, the enums), so binaries
 * compiled against NVIDIA's header run on this library.
 *
 * sharc's extension: every call that NCCL requires device memory for also
 * accepts host memory (the data moves through sharc's host transports), so
 * an NCCL program runs unchanged on a cluster without GPUs given a CUDA
 * runtime that runs there (softcuda, in sharc's tests). The stream argument
 * orders the call as in NCCL: it is queued on the cudaStream_t and the
 * call returns at once.
 *
 * Exported but refused (ncclInvalidUsage, the reason in ncclGetLastError):
 * ncclRedOpCreatePreMulSum (use ncclSum and scale the result, or ncclAvg),
 * ncclCommRevoke (sharc cannot stop a communicator's work and keep it;
 * use ncclCommAbort), ncclGroupSimulateEnd (no estimate: the group is
 * closed unissued). The fp8 types move data (all-gather, broadcast,
 * all-to-all, gather, scatter, send/recv) but are refused by reductions:
 * sharc has no fp8 arithmetic. Non-blocking communicators (config.blocking
 * = 0) are accepted; their calls complete before they return, so
 * ncclInProgress is never returned.
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
#define NCCL_MINOR 28
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
/* A buffer registered as a window (ncclCommWindowRegister). */
typedef struct ncclWindow *ncclWindow_t;

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

/* Options of ncclCommInitRankConfig, ncclCommInitRankScalable,
 * ncclCommSplit and ncclCommShrink. Start from NCCL_CONFIG_INITIALIZER
 * and set what you need. sharc checks `magic` and reads nothing else: the
 * other fields are tuning hints for NCCL's GPU kernels and network, and
 * are accepted and ignored (a struct of an older NCCL, smaller `size`, is
 * accepted too). The layout is NCCL 2.28's: fields are only ever added at
 * the end. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_UNDEF_FLOAT -1.0f
#define NCCL_SPLIT_NOCOLOR -1
/* CTAPolicy values (ignored by sharc). */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02
typedef struct ncclConfig_v22800 {
  size_t size;             /* sizeof(ncclConfig_t) */
  unsigned int magic;      /* 0xcafebeef */
  unsigned int version;    /* NCCL_VERSION_CODE of the header */
  int blocking;            /* 0: non-blocking communicator */
  int cgaClusterSize;      /* GPU kernel launch hints: ignored */
  int minCTAs, maxCTAs;    /* ignored */
  const char *netName;     /* ignored */
  int splitShare;          /* ignored */
  int trafficClass;        /* ignored */
  const char *commName;    /* ignored */
  int collnetEnable;       /* ignored */
  int CTAPolicy;           /* NCCL_CTA_POLICY_*: ignored */
  int shrinkShare;         /* ignored */
  int nvlsCTAs;            /* ignored */
  int nChannelsPerNetPeer; /* ignored */
  int nvlinkCentricSched;  /* ignored */
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER                                                \
  {                                                                            \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE,                       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,   \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,   \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,   \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,   \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                           \
  }

/* What ncclGroupSimulateEnd reports. Start from NCCL_SIM_INFO_INITIALIZER
 * (its magic is checked). estimatedTime: sharc has no estimate and leaves
 * NCCL_UNDEF_FLOAT there. */
typedef struct ncclSimInfo_v22200 {
  size_t size;          /* sizeof(ncclSimInfo_t) */
  unsigned int magic;   /* 0x74685283 */
  unsigned int version; /* NCCL_VERSION_CODE of the header */
  float estimatedTime;  /* the group's predicted time */
} ncclSimInfo_t;
#define NCCL_SIM_INFO_INITIALIZER                                              \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT }

/* ncclCommShrink's shrinkFlags. */
#define NCCL_SHRINK_DEFAULT 0x00 /* the parent is healthy */
#define NCCL_SHRINK_ABORT 0x01   /* the parent may have failed */
/* ncclCommRevoke's revokeFlags: 0 is the only value. */
#define NCCL_REVOKE_DEFAULT 0x00
/* ncclCommWindowRegister's winFlags, and the alignment NCCL asks of a
 * symmetric window (sharc needs none). */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

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
  ncclFloat8e4m3 = 10, /* fp8: data movement only on sharc */
  ncclFloat8e5m2 = 11, /* fp8: data movement only on sharc */
  ncclNumTypes = 12
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
/* Deprecated in NCCL and outside its API; kept so that binaries calling it
 * load. Does nothing: sharc reads SHARC_DEBUG once, at its first use. */
void ncclResetDebugInit(void);

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
/* ncclCommInitRankConfig given nId ids (1 <= nId <= nranks; every rank
 * passes the same ids in the same order). NCCL spreads its rendezvous over
 * the ids; sharc's needs one, so it joins through commIds[0] only (the
 * process that made it hosts the rendezvous, as for ncclCommInitRank) and
 * never contacts the others: their makers keep an idle listener. Inside a
 * group it completes at the group's end, as ncclCommInitRank does. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks,
                                      int myrank, int nId,
                                      ncclUniqueId *commIds,
                                      ncclConfig_t *config);
/* One process, ndev devices (devlist, or 0..ndev-1 when NULL): one
 * communicator per device, comm[i] of rank i. */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
/* Collective over comm: ranks with the same color form *newcomm, ordered
 * by key; NCCL_SPLIT_NOCOLOR gives NULL. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *config);
/* A new communicator of comm's ranks less the excludeRanksCount ranks
 * listed in excludeRanksList; the others keep their order (new rank = old
 * rank less the excluded ranks below it). Called by every rank that stays,
 * never by an excluded one (which may be dead), outside a group; blocks
 * until the new communicator is up. sharc builds it afresh: the lowest
 * remaining rank makes a unique id and sends it to the others over comm
 * (point to point, so the excluded ranks take no part), then they join.
 * comm stays valid and is destroyed separately. NCCL_SHRINK_ABORT: sharc
 * cannot cancel comm's queued work without freeing comm, so the shrink
 * runs after that work as NCCL_SHRINK_DEFAULT does while comm is healthy;
 * once comm has failed it is refused (ncclInvalidUsage): make the new
 * communicator with ncclGetUniqueId and ncclCommInitRank instead. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                            int excludeRanksCount, ncclComm_t *newcomm,
                            ncclConfig_t *config, int shrinkFlags);
/* Finishes the work queued on comm; ncclCommDestroy then frees it. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
/* Stops comm at once (pending work fails, peers are told) and frees it. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
/* Not available in sharc: returns ncclInvalidUsage. NCCL stops comm's
 * work but keeps comm for destroy, split and shrink; sharc can stop a
 * communicator's work only by freeing it (ncclCommAbort). */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
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
/* Registers [buff, buff + size) (bytes) as a window of comm: a buffer
 * registration as ncclCommRegister makes, under a handle of its own.
 * winFlags: NCCL_WIN_DEFAULT or NCCL_WIN_COLL_SYMMETRIC; sharc has no
 * symmetric kernels, so the flag changes nothing, and the call does not
 * wait for the other ranks. Free *win with ncclCommWindowDeregister before
 * the memory. */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                    ncclWindow_t *win, int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

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
/* sendbuff and recvbuff hold nranks*count elements: block j of sendbuff
 * goes to rank j, block i of recvbuff comes from rank i. In place when
 * sendbuff == recvbuff (sharc accepts it; NCCL does not document it). */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm,
                          cudaStream_t stream);
/* Root's recvbuff receives nranks*count elements, block i from rank i's
 * sendbuff (count elements); recvbuff is not used off the root (may be
 * NULL). In place on the root when sendbuff == recvbuff + root*count. */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream);
/* Root's sendbuff holds nranks*count elements; block i goes to rank i's
 * recvbuff (count elements); sendbuff is not used off the root (may be
 * NULL). In place on the root when recvbuff == sendbuff + root*count. */
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream);

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
/* Ends the group as ncclGroupEnd would, but NCCL only predicts the time of
 * its calls (simInfo->estimatedTime) and issues none. sharc's cost model
 * is internal to libsharc, so no estimate is made: estimatedTime is set to
 * NCCL_UNDEF_FLOAT, the group's calls are dropped unissued (communicators
 * created in it are still initialised) and ncclInvalidUsage is returned,
 * saying so in ncclGetLastError (sharc_group_cancel drops them). Run the
 * calls with ncclGroupEnd. Inside
 * a nested group it closes that level only, as ncclGroupEnd does (the
 * outermost end issues). A bad simInfo (NULL, or not made from
 * NCCL_SIM_INFO_INITIALIZER) returns ncclInvalidArgument and leaves the
 * group open. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_NCCL_H */

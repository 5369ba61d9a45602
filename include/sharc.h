/*
 * sharc.h - public C API of the sharc collective communication runtime.
 *
 * N processes ("ranks") form a communicator and run collectives on it:
 * all-gather, reduce-scatter, all-reduce, broadcast and barrier, with NCCL's
 * argument conventions. Every call returns a sharc_status_t; outputs go
 * through pointer arguments. Valid C99, includable from C++.
 *
 * Threading: a communicator may be used from one thread at a time for
 * enqueueing collectives (as with NCCL); streams and events are thread safe.
 * Every rank of a communicator must issue the same collectives in the same
 * order with matching arguments.
 */
#ifndef SHARC_H
#define SHARC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define SHARC_API
#else
#define SHARC_API __attribute__((visibility("default")))
#endif

#define SHARC_VERSION_MAJOR 0
#define SHARC_VERSION_MINOR 1
#define SHARC_VERSION_PATCH 0

/* Status codes: listed once here; sharc_status_name() and
 * sharc_status_string() are generated from the same list. */
#define SHARC_STATUS_LIST(X)                                                   \
  X(SHARC_OK, 0, "success")                                                    \
  X(SHARC_ERR_INVALID_ARG, -1, "invalid argument")                             \
  X(SHARC_ERR_NO_MEM, -2, "out of memory")                                     \
  X(SHARC_ERR_SYSTEM, -3, "system call failed")                                \
  X(SHARC_ERR_CUDA, -4, "CUDA error")                                          \
  X(SHARC_ERR_NET, -5, "network error")                                        \
  X(SHARC_ERR_TIMEOUT, -6, "timed out")                                        \
  X(SHARC_ERR_PEER_LOST, -7, "peer process lost")                              \
  X(SHARC_ERR_MISMATCH, -8, "collective mismatch between ranks")               \
  X(SHARC_ERR_ABORTED, -9, "communicator aborted")                             \
  X(SHARC_ERR_UNSUPPORTED, -10, "unsupported")                                 \
  X(SHARC_ERR_INTERNAL, -11, "internal error")

typedef enum {
#define SHARC_STATUS_ENUM_(name, value, msg) name = value,
  SHARC_STATUS_LIST(SHARC_STATUS_ENUM_)
#undef SHARC_STATUS_ENUM_
} sharc_status_t;

/* Element types. f16 is IEEE binary16, bf16 is bfloat16; both are stored as
 * uint16_t and reduced in f32 with round-to-nearest-even. */
typedef enum {
  SHARC_F32 = 0,
  SHARC_F64,
  SHARC_F16,
  SHARC_BF16,
  SHARC_I8,
  SHARC_U8,
  SHARC_I32,
  SHARC_U32,
  SHARC_I64,
  SHARC_U64,
  SHARC_DTYPE_COUNT
} sharc_dtype_t;

/* Reductions. SHARC_AVG is the sum divided by the number of ranks (integer
 * division, truncating toward zero, for integer types). */
typedef enum {
  SHARC_SUM = 0,
  SHARC_PROD,
  SHARC_MIN,
  SHARC_MAX,
  SHARC_AVG,
  SHARC_OP_COUNT
} sharc_op_t;

typedef struct sharc_comm *sharc_comm_t;
typedef struct sharc_stream *sharc_stream_t;
typedef struct sharc_event *sharc_event_t;

/* Opaque rendezvous id (root address and job secret); copy it by value to
 * every rank through your own channel. */
#define SHARC_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[SHARC_UNIQUE_ID_BYTES];
} sharc_unique_id_t;

/* ---- status ------------------------------------------------------------ */

/* "SHARC_ERR_TIMEOUT" for SHARC_ERR_TIMEOUT; "SHARC_ERR_UNKNOWN" otherwise. */
SHARC_API const char *sharc_status_name(sharc_status_t st);
/* A short sentence for the code ("timed out"). */
SHARC_API const char *sharc_status_string(sharc_status_t st);
/* Size in bytes of one element, 0 for an unknown type. */
SHARC_API size_t sharc_dtype_size(sharc_dtype_t dtype);
SHARC_API const char *sharc_dtype_name(sharc_dtype_t dtype);
SHARC_API const char *sharc_op_name(sharc_op_t op);
/* Converts count elements of src, of type src_type, into dst as dst_type,
 * on the host, rounding as the collectives do (to nearest even; NaN stays
 * NaN, overflow goes to infinity). Types: SHARC_F32, SHARC_F16 and
 * SHARC_BF16, any to any (the same type copies). dst and src must not
 * overlap, unless they are the same pointer and both types have the same
 * size. For mixed precision around the collectives (a bf16 copy of f32
 * weights to all-gather, and back). Host memory only; blocking; thread
 * safe. SHARC_ERR_INVALID_ARG for a NULL buffer with count > 0,
 * SHARC_ERR_UNSUPPORTED for another type. */
SHARC_API sharc_status_t sharc_convert(void *dst, sharc_dtype_t dst_type,
                                       const void *src, sharc_dtype_t src_type,
                                       size_t count);
/* The same on device memory (CUDA builds): queued on cuda_stream (a
 * cudaStream_t; NULL is the legacy default stream) of the current device,
 * with the same results bit for bit; returns once queued. Buffers must be
 * memory the device can address, not overlapping. SHARC_ERR_CUDA (with the
 * runtime's message) when the kernel cannot be queued or the build has no
 * CUDA. */
SHARC_API sharc_status_t sharc_convert_cuda(void *dst, sharc_dtype_t dst_type,
                                            const void *src,
                                            sharc_dtype_t src_type,
                                            size_t count, void *cuda_stream);
/* "0.1.0" */
SHARC_API const char *sharc_version(void);

/* ---- communicators ------------------------------------------------------ */

/* Creates the world communicator from the launcher's environment, looked up
 * in this order: SHARC_RANK/SHARC_WORLD_SIZE/SHARC_ADDR (host:port);
 * torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT); Slurm
 * (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, first host of
 * SLURM_STEP_NODELIST/SLURM_JOB_NODELIST, port SHARC_PORT or derived from
 * the job id); Open MPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK, rendezvous at
 * SHARC_ADDR or MASTER_ADDR); MPICH's Hydra (PMI_RANK, PMI_SIZE,
 * MPI_LOCALRANKID, MPI_LOCALNRANKS, likewise). Blocks until every rank
 * arrived or SHARC_TIMEOUT seconds passed (SHARC_ERR_TIMEOUT, naming the
 * missing ranks).
 * A misconfigured environment returns SHARC_ERR_INVALID_ARG naming the
 * variable; the message is in sharc_last_error(). */
SHARC_API sharc_status_t sharc_comm_init_env(sharc_comm_t *comm);

/* Creates a unique id on the process that will host the rendezvous (any one
 * process; usually rank 0): it starts a listener on this host and embeds its
 * address and a random secret token. Pass the id to every rank, then each
 * calls sharc_comm_init_rank(). */
SHARC_API sharc_status_t sharc_get_unique_id(sharc_unique_id_t *id);

/* Joins the communicator of nranks ranks identified by id as rank `rank`.
 * Collective over all nranks processes; blocks as sharc_comm_init_env. */
SHARC_API sharc_status_t sharc_comm_init_rank(sharc_comm_t *comm, int nranks,
                                              const sharc_unique_id_t *id,
                                              int rank);

/* Splits comm: ranks passing the same color form a new communicator,
 * ordered by key, then by rank in comm. color < 0 (SHARC_SPLIT_NOCOLOR)
 * returns *newcomm = NULL. Collective over comm; blocking. */
#define SHARC_SPLIT_NOCOLOR (-1)
SHARC_API sharc_status_t sharc_comm_split(sharc_comm_t comm, int color, int key,
                                          sharc_comm_t *newcomm);

/* Hybrid sharding (HSDP) groups: splits comm into shard groups and
 * replicate groups. group_size > 0: shard groups are consecutive blocks of
 * group_size ranks (it must divide the communicator's size); group_size 0:
 * one shard group per host (every host must hold the same number of
 * ranks). *shard holds this rank's shard group (rank = position in the
 * group); *replicate holds the ranks at the same position of every shard
 * group (rank = group index). Collective over comm; every rank must pass
 * the same group_size. SHARC_ERR_INVALID_ARG says what does not fit. */
SHARC_API sharc_status_t sharc_comm_split_hsdp(sharc_comm_t comm,
                                               int group_size,
                                               sharc_comm_t *shard,
                                               sharc_comm_t *replicate);

/* Waits for outstanding work on comm, then frees it. Not collective, but
 * destroying a communicator that peers still use makes them fail with
 * SHARC_ERR_PEER_LOST. NULL is accepted. */
SHARC_API sharc_status_t sharc_comm_destroy(sharc_comm_t comm);

/* Stops comm at once: pending and later collectives on it fail with
 * SHARC_ERR_ABORTED, peers are told, and its resources are freed. Returns
 * within a bounded time even when peers are dead. */
SHARC_API sharc_status_t sharc_comm_abort(sharc_comm_t comm);

SHARC_API sharc_status_t sharc_comm_rank(sharc_comm_t comm, int *rank);
SHARC_API sharc_status_t sharc_comm_size(sharc_comm_t comm, int *size);
/* Rank among the ranks of this communicator on the same host, and their
 * number. */
SHARC_API sharc_status_t sharc_comm_local_rank(sharc_comm_t comm, int *rank);
SHARC_API sharc_status_t sharc_comm_local_size(sharc_comm_t comm, int *size);
/* Number of distinct hosts in the communicator. */
SHARC_API sharc_status_t sharc_comm_nhosts(sharc_comm_t comm, int *nhosts);

/* The message of the last error on comm (empty string when none). Valid
 * until the next call on comm. With comm NULL: the last error of this
 * thread (for failures that have no communicator, such as init). */
SHARC_API const char *sharc_comm_last_error(sharc_comm_t comm);
/* SHARC_OK while comm is usable; once it failed (a lost peer, a timeout, an
 * abort, a SHARC_CHECK mismatch; also one met by work still queued on a
 * stream), the status that failed it, the reason in
 * sharc_comm_last_error. Does not block (NCCL's ncclCommGetAsyncError). */
SHARC_API sharc_status_t sharc_comm_status(sharc_comm_t comm);
SHARC_API const char *sharc_last_error(void);

/* ---- streams and events (host work queues) ------------------------------ */

/* A stream is an in-order host work queue served by its own thread.
 * Collectives enqueued on it return at once; their buffers must stay valid
 * and unmodified until an event recorded after them completes. Passing
 * stream NULL to a collective makes it blocking. */
SHARC_API sharc_status_t sharc_stream_create(sharc_stream_t *stream);
/* Waits for the stream's work, then frees it. */
SHARC_API sharc_status_t sharc_stream_destroy(sharc_stream_t stream);
/* Waits until everything enqueued on stream is done. Returns the first
 * error of that work (sticky: later calls return it too). */
SHARC_API sharc_status_t sharc_stream_synchronize(sharc_stream_t stream);

/* A stream whose collectives are ordered on a CUDA stream (NCCL semantics):
 * cuda_stream is a cudaStream_t passed as void * (NULL: the legacy default
 * stream) on the device it belongs to. A collective enqueued on it returns
 * at once; it starts after the work queued on cuda_stream before it, and
 * work queued on cuda_stream after it sees its results. Buffers may be
 * device memory (cudaMalloc, managed) or host memory, each on its own; the
 * in-place layouts are those of host memory. Buffers must stay valid and
 * unmodified until cuda_stream passed the collective. How the data moves
 * (SHARC_CUDA_PATH, docs/gpu.md): with every rank of the communicator on
 * one host, by default the whole call is queued on cuda_stream (copies
 * through device staging the ranks share by CUDA IPC, reductions on the
 * device, no host thread; the communicator's first such call sets that up
 * with its peers and blocks until its earlier calls ran); elsewhere, or
 * where that setup fails on some rank, through pinned host staging owned by
 * the stream (grown to the largest call, freed by sharc_stream_destroy),
 * reduced on the host by the stream's thread, which sleeps while it waits
 * for the device. Blocking: on one host, an enqueue waits until the
 * communicator's earlier calls that run on the host (host streams, the
 * staged path) have run; its first device call also sets up with its
 * peers, and with SHARC_CHECK=1 every call agrees with them first.
 * Elsewhere none.
 * sharc_stream_synchronize waits for the host-side work, then for cuda_stream,
 * and returns the first error (a failed collective is still completed on
 * cuda_stream, with undefined results, so nothing there waits forever);
 * sharc_stream_destroy waits likewise, then frees. Events record host-side
 * completion. cuda_stream stays the caller's; destroy the sharc stream first.
 * Thread safe. Errors: SHARC_ERR_CUDA when no usable device or driver exists
 * (the message says why), SHARC_ERR_UNSUPPORTED when sharc was built without
 * CUDA. A collective enqueued while cuda_stream is being captured into a
 * CUDA graph fails with SHARC_ERR_UNSUPPORTED. */
SHARC_API sharc_status_t sharc_stream_create_cuda(sharc_stream_t *stream,
                                                  void *cuda_stream);

/* Enqueues fn(arg) on stream: it runs on the stream's thread after the
 * work enqueued before it and before the work enqueued after it (as
 * cudaLaunchHostFunc), also after an earlier error. fn must not call sharc
 * on this stream. Thread safe. */
SHARC_API sharc_status_t sharc_stream_launch_host_func(sharc_stream_t stream,
                                                       void (*fn)(void *),
                                                       void *arg);

SHARC_API sharc_status_t sharc_event_create(sharc_event_t *event);
SHARC_API sharc_status_t sharc_event_destroy(sharc_event_t event);
/* Captures the work enqueued on stream so far; the event completes when it
 * is done. Re-recording replaces the previous capture. */
SHARC_API sharc_status_t sharc_event_record(sharc_event_t event,
                                            sharc_stream_t stream);
/* Blocks until the event completes; returns the error of the captured work
 * if any failed. */
SHARC_API sharc_status_t sharc_event_synchronize(sharc_event_t event);
/* *done = 1 when complete (or never recorded), else 0. Non-blocking. */
SHARC_API sharc_status_t sharc_event_query(sharc_event_t event, int *done);

/* ---- memory -------------------------------------------------------------- */

/* Allocates bytes of host memory that same-host peers can map directly, so
 * collectives on it move each byte once (no staging copy). Free with
 * sharc_mem_free. */
SHARC_API sharc_status_t sharc_mem_alloc(void **ptr, size_t bytes);
SHARC_API sharc_status_t sharc_mem_free(void *ptr);

/* Registers [ptr, ptr + bytes) of existing host memory so same-host peers
 * copy from it directly (cross-memory attach: one copy per byte, no staging)
 * when it is the source of a transfer. The memory stays the caller's;
 * deregister before freeing it. Overlapping registrations are refused.
 * Where the kernel forbids cross-process reads (ptrace restrictions), the
 * data goes through the FIFOs as for unregistered memory. Thread safe.
 *
 * Device memory (cudaMalloc; CUDA builds): the range must lie inside one
 * allocation that CUDA IPC can share (not managed memory, not a
 * cudaMallocAsync pool), else SHARC_ERR_INVALID_ARG says which. On the
 * direct path (the default on one host), peers then read it in place in
 * calls of at least SHARC_CUDA_INPLACE_BYTES instead of through the
 * path's staging; there and with SHARC_CUDA_PATH=ipc they map it once and
 * keep the mapping across sharc_stream_synchronize until this process
 * deregisters device memory. Across hosts over InfiniBand (the staged
 * path), a registered sendbuf's blocks go from the GPU to the NIC
 * (GPUDirect RDMA, SHARC_IB_GDR) where the stack allows it. Registration
 * sets CU_POINTER_ATTRIBUTE_SYNC_MEMOPS on the allocation, as GPUDirect
 * RDMA needs: a cudaMemcpy or cudaMemset into it returns only once the
 * bytes are there. */
SHARC_API sharc_status_t sharc_mem_register(void *ptr, size_t bytes);
SHARC_API sharc_status_t sharc_mem_deregister(void *ptr);

/* ---- collectives --------------------------------------------------------- */
/*
 * All take a stream (NULL: blocking) and follow NCCL's conventions:
 *  - counts are in elements;
 *  - all-gather: sendbuf holds sendcount elements, recvbuf
 *    nranks*sendcount; in place when sendbuf == recvbuf + rank*sendcount;
 *  - reduce-scatter: sendbuf holds nranks*recvcount, recvbuf recvcount; in
 *    place when recvbuf == sendbuf + rank*recvcount;
 *  - all-reduce: in place when sendbuf == recvbuf;
 *  - broadcast: sendbuf is read on root only (may be NULL elsewhere); in
 *    place when sendbuf == recvbuf;
 *  - reduce: every rank's count elements reduced into root's recvbuf
 *    (written on root only; may be NULL elsewhere); in place on root when
 *    sendbuf == recvbuf;
 *  - gather: root's recvbuf receives nranks*count elements, block r from
 *    rank r's sendbuf (recvbuf may be NULL off root); in place on root when
 *    sendbuf == recvbuf + root*count;
 *  - scatter: root's sendbuf holds nranks*count elements, block r goes to
 *    rank r's recvbuf (sendbuf may be NULL off root); in place on root
 *    when recvbuf == sendbuf + root*count;
 *  - all-to-all: sendbuf and recvbuf hold nranks*count elements; block p
 *    of sendbuf goes to rank p, block p of recvbuf comes from rank p; in
 *    place when sendbuf == recvbuf.
 * A count of 0 returns SHARC_OK at once and moves nothing.
 * Errors: SHARC_ERR_INVALID_ARG for bad arguments (the message says which),
 * SHARC_ERR_PEER_LOST when a peer died (naming it), SHARC_ERR_TIMEOUT when
 * a peer made no progress for SHARC_TIMEOUT seconds, SHARC_ERR_ABORTED after
 * sharc_comm_abort. After a transport error the communicator is unusable.
 * The algorithm is picked by a cost model; SHARC_ALGO=ring|tree|hier forces
 * one (hier: two levels across hosts, for all-gather, reduce-scatter and
 * all-reduce; gather and scatter have one algorithm, direct: every block
 * straight between its rank and the root; all-to-all's direct one is a
 * pairwise exchange). Across hosts, rings run in a
 * topology order that visits each host's ranks consecutively.
 */
SHARC_API sharc_status_t sharc_all_gather(const void *sendbuf, void *recvbuf,
                                          size_t sendcount, sharc_dtype_t dtype,
                                          sharc_comm_t comm,
                                          sharc_stream_t stream);
SHARC_API sharc_status_t sharc_reduce_scatter(const void *sendbuf,
                                              void *recvbuf, size_t recvcount,
                                              sharc_dtype_t dtype,
                                              sharc_op_t op, sharc_comm_t comm,
                                              sharc_stream_t stream);
SHARC_API sharc_status_t sharc_all_reduce(const void *sendbuf, void *recvbuf,
                                          size_t count, sharc_dtype_t dtype,
                                          sharc_op_t op, sharc_comm_t comm,
                                          sharc_stream_t stream);
SHARC_API sharc_status_t sharc_broadcast(const void *sendbuf, void *recvbuf,
                                         size_t count, sharc_dtype_t dtype,
                                         int root, sharc_comm_t comm,
                                         sharc_stream_t stream);
SHARC_API sharc_status_t sharc_reduce(const void *sendbuf, void *recvbuf,
                                      size_t count, sharc_dtype_t dtype,
                                      sharc_op_t op, int root,
                                      sharc_comm_t comm, sharc_stream_t stream);
SHARC_API sharc_status_t sharc_gather(const void *sendbuf, void *recvbuf,
                                      size_t count, sharc_dtype_t dtype,
                                      int root, sharc_comm_t comm,
                                      sharc_stream_t stream);
SHARC_API sharc_status_t sharc_scatter(const void *sendbuf, void *recvbuf,
                                       size_t count, sharc_dtype_t dtype,
                                       int root, sharc_comm_t comm,
                                       sharc_stream_t stream);
/* count: elements per peer (each buffer holds nranks*count). */
SHARC_API sharc_status_t sharc_all_to_all(const void *sendbuf, void *recvbuf,
                                          size_t count, sharc_dtype_t dtype,
                                          sharc_comm_t comm,
                                          sharc_stream_t stream);
/* Returns (or, on a stream, completes) once every rank has entered it. */
SHARC_API sharc_status_t sharc_barrier(sharc_comm_t comm,
                                       sharc_stream_t stream);

/* ---- point to point and groups --------------------------------------------
 */
/*
 * sharc_send sends count elements of buf to rank peer; sharc_recv receives
 * count elements from rank peer into buf. Only the two ranks take part.
 * The k-th send from A to B carries the data of the k-th receive on B from
 * A (per communicator, in each rank's issue order); both must pass the same
 * count and dtype (SHARC_CHECK=1 names a rank whose send and receive
 * disagree). A send may complete before its receive is posted (a small one
 * is buffered, as MPI_Send may be); a large one waits for it. Outside a
 * group each call runs alone in its stream's order, so two ranks that both
 * send to each other first may wait forever on large messages: post such
 * exchanges inside a group. A rank may send to itself only inside a group
 * that also holds the matching receive from itself. Device buffers go on a
 * stream made by sharc_stream_create_cuda, as for the collectives: staged
 * through pinned host memory, or with SHARC_CUDA_PATH=ipc (ranks of one
 * host) copied by each receiver straight from its sender's buffer through
 * CUDA IPC (cudaMalloc memory on both sides).
 *
 * sharc_group_start / sharc_group_end (NCCL's ncclGroupStart/End): calls
 * made between them on this thread are only checked and recorded; group
 * end issues them. Per communicator and stream, all sends and receives of
 * the group form one operation in which every transfer progresses at once
 * (any posting order, any number of peers); the group's collectives are
 * issued before them, in posting order. Blocking calls (stream NULL) and
 * calls on CUDA-bound streams of several communicators are issued
 * concurrently, one thread per communicator, so a group spanning
 * communicators does not deadlock whatever order each rank posts them in,
 * nor when one thread drives several ranks (one per device); group end
 * returns when all are done (blocking) or enqueued. Groups nest (only
 * the outermost end issues). An error of a call inside the group is
 * returned by that call and again by sharc_group_end, which then issues
 * nothing; an empty group is a no-op. sharc_group_cancel closes every open
 * level of this thread's group and drops its calls unissued (an error when
 * none is open).
 */
SHARC_API sharc_status_t sharc_send(const void *buf, size_t count,
                                    sharc_dtype_t dtype, int peer,
                                    sharc_comm_t comm, sharc_stream_t stream);
SHARC_API sharc_status_t sharc_recv(void *buf, size_t count,
                                    sharc_dtype_t dtype, int peer,
                                    sharc_comm_t comm, sharc_stream_t stream);
/* All-to-all with per-peer counts (MPI_Alltoallv, what MoE layers use):
 * rank r sends sendcounts[p] elements from sendbuf + sdispls[p] (elements)
 * to rank p, which receives them at recvbuf + rdispls[r] and must pass
 * recvcounts[r] == this sendcounts[p]. Every transfer of the call
 * progresses at once (a send/recv batch, as a group would issue it). The
 * arrays hold nranks entries and are read during the call only. Not in
 * place: the send and receive regions must not overlap. SHARC_CHECK=1
 * names a pair whose counts disagree. */
SHARC_API sharc_status_t sharc_all_to_allv(
    const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
    void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
    sharc_dtype_t dtype, sharc_comm_t comm, sharc_stream_t stream);
SHARC_API sharc_status_t sharc_group_start(void);
SHARC_API sharc_status_t sharc_group_end(void);
SHARC_API sharc_status_t sharc_group_cancel(void);

#ifdef __cplusplus
}
#endif

#endif /* SHARC_H */

/*
 * core.h - internal basics shared by every sharc source file: check macros,
 * logging, tunables (the parameter registry), clocks and error messages.
 */
#ifndef SHARC_CORE_H
#define SHARC_CORE_H

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sharc.h"

#define SHARC_INTERNAL __attribute__((visibility("hidden")))

/* ---- logging ------------------------------------------------------------ */

typedef enum {
  LOG_NONE = 0,
  LOG_WARN = 1,
  LOG_INFO = 2,
  LOG_TRACE = 3
} log_level_t;

/* One bit per subsystem, for SHARC_DEBUG_SUBSYS=INIT,COMM,... */
typedef enum {
  SUB_INIT = 1 << 0,
  SUB_COMM = 1 << 1,
  SUB_NET = 1 << 2,
  SUB_SHM = 1 << 3,
  SUB_CUDA = 1 << 4,
  SUB_TOPO = 1 << 5,
  SUB_SHARD = 1 << 6,
  SUB_ALL = 0x7f
} log_subsys_t;

/* Lines look like "host:pid [rank] SUBSYS message". The rank shown is the
 * one set by log_set_rank (-1 before init: shown as "[?]"). */
void log_msg(log_level_t lvl, log_subsys_t sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int log_enabled(log_level_t lvl, log_subsys_t sub);
void log_set_rank(int rank);

#define WARN(sub, ...) log_msg(LOG_WARN, sub, __VA_ARGS__)
#define INFO(sub, ...)                                                         \
  do {                                                                         \
    if (log_enabled(LOG_INFO, sub))                                            \
      log_msg(LOG_INFO, sub, __VA_ARGS__);                                     \
  } while (0)
/* 0 once the log level is known to be below TRACE: TRACE's test without a
 * call where it sits on every collective's path. */
extern _Atomic int log_trace_maybe;
#define TRACE(sub, ...)                                                        \
  do {                                                                         \
    if (atomic_load_explicit(&log_trace_maybe, memory_order_relaxed) &&        \
        log_enabled(LOG_TRACE, sub))                                           \
      log_msg(LOG_TRACE, sub, __VA_ARGS__);                                    \
  } while (0)

/* sharc_dtype_size inline, for the per-call path (the exported function is
 * a call through the PLT). */
extern const size_t dtype_sizes[SHARC_DTYPE_COUNT];
static inline size_t dtype_bytes(sharc_dtype_t dtype) {
  return (unsigned)dtype < SHARC_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}

/* ---- errors ------------------------------------------------------------- */

/* Records msg as this thread's last error (sharc_last_error) and returns st.
 * Also logged at WARN. Use where the error starts; callers propagate st. */
sharc_status_t err_set(sharc_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* As err_set, without logging: for passing on an error already reported
 * where it started. */
sharc_status_t err_record(sharc_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The thread's last error message (never NULL). */
const char *err_last(void);

#define CHECK(call)                                                            \
  do {                                                                         \
    sharc_status_t st_ = (call);                                               \
    if (st_ != SHARC_OK) {                                                     \
      TRACE(SUB_ALL, "%s:%d -> %s", __FILE__, __LINE__,                        \
            sharc_status_name(st_));                                           \
      return st_;                                                              \
    }                                                                          \
  } while (0)

#define CHECK_GOTO(call, st, label)                                            \
  do {                                                                         \
    (st) = (call);                                                             \
    if ((st) != SHARC_OK) {                                                    \
      TRACE(SUB_ALL, "%s:%d -> %s", __FILE__, __LINE__,                        \
            sharc_status_name(st));                                            \
      goto label;                                                              \
    }                                                                          \
  } while (0)

/* Retries EINTR; on failure records errno with the call's text. */
#define SYS_CHECK(call, what)                                                  \
  do {                                                                         \
    int rc_;                                                                   \
    do {                                                                       \
      rc_ = (int)(call);                                                       \
    } while (rc_ == -1 && errno == EINTR);                                     \
    if (rc_ == -1)                                                             \
      return err_set(SHARC_ERR_SYSTEM, "%s: %s", what, strerror(errno));       \
  } while (0)

/* ---- tunables -------------------------------------------------------------
 * One line each: name, environment variable, default, help. Values are read
 * once from the environment and cached. sharc-info prints them all. */
#define SHARC_PARAM_LIST(X)                                                    \
  X(TIMEOUT, "SHARC_TIMEOUT", "120",                                           \
    "seconds a rank waits for a peer (rendezvous, connect, data) before "      \
    "failing with SHARC_ERR_TIMEOUT")                                          \
  X(ALGO, "SHARC_ALGO", "auto",                                                \
    "collective algorithm: auto (cost model), ring, tree, rabenseifner, "      \
    "dbtree (these two: all-reduce only), hier (two levels across hosts; "     \
    "all-gather, reduce-scatter, all-reduce), direct (gather, scatter, "       \
    "all-to-all) or bruck (all-to-all)")                                       \
  X(TRANSPORT, "SHARC_TRANSPORT", "auto",                                      \
    "auto (shm on one host, SHARC_NET between hosts), tcp (tcp everywhere) "   \
    "or ib (InfiniBand/RoCE verbs everywhere, through the NIC's loopback on "  \
    "one host)")                                                               \
  X(NET, "SHARC_NET", "tcp",                                                   \
    "transport between hosts when SHARC_TRANSPORT=auto: tcp or ib")            \
  X(SHM_FIFO_BYTES, "SHARC_SHM_FIFO_BYTES", "1048576",                         \
    "bytes of each shared-memory FIFO per peer and channel")                   \
  X(SHM_DIRECT, "SHARC_SHM_DIRECT", "1",                                       \
    "1: same-host peers read sharc_mem_alloc and sharc_mem_register buffers "  \
    "in place (one copy); 0: always copy through the FIFO")                    \
  X(SHM_DIRECT_FRESH_BYTES, "SHARC_SHM_DIRECT_FRESH_BYTES", "262144",          \
    "messages of data the sender has just written (all-reduce's) are read "    \
    "in place by same-host peers only from this many bytes; smaller ones "     \
    "are copied through the FIFO, faster while the data sits in the "          \
    "sender's cache (0: in place from any size)")                              \
  X(SHM_DIRECT_MIN_BYTES, "SHARC_SHM_DIRECT_MIN_BYTES", "2048",                \
    "same-host peers read a registered buffer in place only from this many "   \
    "bytes; smaller messages are copied through the FIFO, where the wait for " \
    "the reader's acknowledgement costs more than the copy (0: in place from " \
    "any size)")                                                               \
  X(SHM_DIRECT_SHARED_BYTES, "SHARC_SHM_DIRECT_SHARED_BYTES", "65536",         \
    "where a host has more ranks than cores, same-host peers read a "          \
    "registered buffer in place only from this many bytes (instead of "        \
    "SHARC_SHM_DIRECT_MIN_BYTES): below it, waiting for the reader's "         \
    "acknowledgement, the reader needing a core first, costs more than the "   \
    "copy it saves (0: SHARC_SHM_DIRECT_MIN_BYTES applies)")                   \
  X(TCP_FIFO_BYTES, "SHARC_TCP_FIFO_BYTES", "4194304",                         \
    "bytes of each TCP staging FIFO per peer and channel")                     \
  X(TCP_DIRECT_BYTES, "SHARC_TCP_DIRECT_BYTES", "262144",                      \
    "tcp messages of at least this many bytes skip the staging FIFOs: sent "   \
    "from and received into the user buffer (0: always stage)")                \
  X(CUDA_RELEASE, "SHARC_CUDA_RELEASE", "auto",                                \
    "how a CUDA stream waits for a staged collective: auto "                   \
    "(cuStreamWaitValue32 where the driver has it) or hostfn (a blocking "     \
    "cudaLaunchHostFunc; for testing that fallback)")                          \
  X(CUDA_PATH, "SHARC_CUDA_PATH", "auto",                                      \
    "device memory on CUDA streams: auto (direct where all ranks are on one "  \
    "host and its setup works, else staged), direct (one host: ordered on "    \
    "the CUDA stream, device staging shared by CUDA IPC, copy engines, "       \
    "device reductions and stream memory operations), staged (through "        \
    "pinned host buffers and the host transports) or ipc (one host: CUDA "     \
    "IPC, zero copy, orchestrated by the stream's host thread); direct and "   \
    "ipc not yet run on a GPU")                                                \
  X(CUDA_SLOT_BYTES, "SHARC_CUDA_SLOT_BYTES", "2097152",                       \
    "direct path: bytes of each of the two device staging slots per rank "     \
    "(a call moves through them in pieces of at most this size)")              \
  X(CUDA_INPLACE_BYTES, "SHARC_CUDA_INPLACE_BYTES", "262144",                  \
    "direct path: all-gather, broadcast, reduce-scatter and all-reduce of at " \
    "least this many bytes exchange their buffers' CUDA IPC handles as they "  \
    "are enqueued (the enqueue waits for the peers') and, where every buffer " \
    "the peers read is registered device memory (sharc_mem_register), read "   \
    "them in place instead of through the slots; -1: never in place")          \
  X(CUDA_INPLACE_UNREG_BYTES, "SHARC_CUDA_INPLACE_UNREG_BYTES", "4194304",     \
    "direct path: such calls of at least this many bytes also read "           \
    "unregistered cudaMalloc buffers in place, through a mapping cached "      \
    "until the next sharc_stream_synchronize; -1: never")                      \
  X(CUDA_STAGED_REDUCE, "SHARC_CUDA_STAGED_REDUCE", "auto",                    \
    "staged path: where reduce-scatter and all-reduce reduce: gpu (an "        \
    "all-to-all over the host transports, then one reduction kernel per "      \
    "chunk reading the pinned staging), host (the host collective reduces "    \
    "the staging), auto (gpu from 64 KiB where the communicator spans "        \
    "hosts); the same on every rank, every rank on a CUDA stream")             \
  X(CUDA_PIPE_BYTES, "SHARC_CUDA_PIPE_BYTES", "1048576",                       \
    "staged path: the copies between device and staging go in pieces of at "   \
    "least this many bytes, each just before the round that needs it or "      \
    "just after the round that wrote it last, overlapping the transfers "      \
    "(comm/gpu/devpipe.h); 0: one copy each way around the whole collective; " \
    "where the GPU reduces (SHARC_CUDA_STAGED_REDUCE) the chunks are at most " \
    "this size and it must be the same on every rank")                         \
  X(IB_HCA, "SHARC_IB_HCA", "",                                                \
    "RDMA devices/ports to use, NCCL_IB_HCA syntax: mlx5_0:1,mlx5_1 "          \
    "(prefixes), =name (exact), ^name (exclude); empty: the active port "      \
    "nearest the rank's NUMA node")                                            \
  X(IB_GID_INDEX, "SHARC_IB_GID_INDEX", "-1",                                  \
    "RoCE GID index (show_gids); -1: the RoCE v2 IPv4-mapped GID")             \
  X(IB_QPS_PER_PEER, "SHARC_IB_QPS_PER_PEER", "1",                             \
    "RC queue pairs per peer and channel (1..16); writes go round-robin")      \
  X(IB_TIMEOUT, "SHARC_IB_TIMEOUT", "18",                                      \
    "QP ack timeout exponent: 4.096 us x 2^N per retry (1..31)")               \
  X(IB_RETRY_CNT, "SHARC_IB_RETRY_CNT", "7",                                   \
    "QP transport retries before a write fails (0..7)")                        \
  X(IB_SL, "SHARC_IB_SL", "0", "InfiniBand service level of the QPs (0..15)")  \
  X(IB_TC, "SHARC_IB_TC", "0",                                                 \
    "RoCE traffic class of the QPs (0..255; DSCP << 2)")                       \
  X(IB_FIFO_BYTES, "SHARC_IB_FIFO_BYTES", "4194304",                           \
    "bytes of each registered ib staging ring per peer and channel")           \
  X(IB_ZCOPY_BYTES, "SHARC_IB_ZCOPY_BYTES", "65536",                           \
    "ib sends of at least this many bytes from sharc_mem_alloc / "             \
    "sharc_mem_register buffers are written from the buffer itself "           \
    "(registered once, cached); 0: always copy")                               \
  X(IB_GDR, "SHARC_IB_GDR", "auto",                                            \
    "GPUDirect RDMA for sends from registered device memory: auto (a "         \
    "dma-buf, else nvidia-peermem where loaded), dmabuf, peermem or off "      \
    "(stage through host memory)")                                             \
  X(NCHANNELS, "SHARC_NCHANNELS", "2",                                         \
    "parallel channels (FIFOs, TCP sockets) per peer for large messages")      \
  X(SLICE_BYTES, "SHARC_SLICE_BYTES", "262144",                                \
    "bytes moved per step before the executor turns to the next operation")    \
  X(SPIN, "SHARC_SPIN", "100",                                                 \
    "polls without progress before a waiting rank blocks in the kernel")       \
  X(TREE_MAX_BYTES, "SHARC_TREE_MAX_BYTES", "0",                               \
    "if > 0, messages up to this size use tree algorithms, larger use ring "   \
    "(overrides the cost model)")                                              \
  X(ALPHA_US, "SHARC_ALPHA_US", "4",                                           \
    "cost model: latency of one message step, microseconds")                   \
  X(BETA_GBS, "SHARC_BETA_GBS", "5", "cost model: per-link bandwidth, GB/s")   \
  X(NET_ALPHA_US, "SHARC_NET_ALPHA_US", "20",                                  \
    "cost model: latency of one message between hosts, microseconds")          \
  X(NET_BETA_GBS, "SHARC_NET_BETA_GBS", "1",                                   \
    "cost model: network bandwidth of one host, GB/s")                         \
  X(SOCKET_IFNAME, "SHARC_SOCKET_IFNAME", "",                                  \
    "network interface whose address ranks register (default: the route to "   \
    "the rendezvous)")                                                         \
  X(PORT, "SHARC_PORT", "0",                                                   \
    "rendezvous port for Slurm, Open MPI and Hydra launches (0: 29500 + job "  \
    "id mod 1000 under Slurm; from hydra_pmi_proxy's pid under Hydra)")        \
  X(HOSTID, "SHARC_HOSTID", "",                                                \
    "override the host identity (ranks with equal ids use shared memory)")     \
  X(TOPO_FILE, "SHARC_TOPO_FILE", "",                                          \
    "hwloc XML export to use instead of discovering this machine")             \
  X(CHECK, "SHARC_CHECK", "0",                                                 \
    "1: before each collective the ranks compare its signature (call, "        \
    "count, type, root, reduction) and fail with SHARC_ERR_MISMATCH, naming "  \
    "the ranks, instead of hanging or corrupting; costs one small exchange")   \
  X(FAULT, "SHARC_FAULT", "",                                                  \
    "TESTS ONLY: inject faults, e.g. kill:2:send:1M, drop:1:send, "            \
    "delay:1:500, corrupt:1:header, save_kill:2 (comm/fault/fault.h); unset "  \
    "in "                                                                      \
    "production")                                                              \
  X(DEBUG, "SHARC_DEBUG", "WARN", "log level: NONE, WARN, INFO or TRACE")      \
  X(DEBUG_SUBSYS, "SHARC_DEBUG_SUBSYS", "ALL",                                 \
    "comma-separated subsystems to log: INIT,COMM,NET,SHM,CUDA,TOPO,SHARD "    \
    "or ALL")                                                                  \
  X(DEBUG_FILE, "SHARC_DEBUG_FILE", "",                                        \
    "log to this file instead of stderr (%h: host, %p: pid)")

typedef enum {
#define SHARC_PARAM_ENUM_(name, env, def, help) PARAM_##name,
  SHARC_PARAM_LIST(SHARC_PARAM_ENUM_)
#undef SHARC_PARAM_ENUM_
      PARAM_COUNT
} param_id_t;

/* Raw string value (environment or default). */
const char *param_str(param_id_t id);
/* Integer value; a malformed value is reported once and the default used. */
int64_t param_int(param_id_t id);
const char *param_env_name(param_id_t id);
const char *param_default(param_id_t id);
const char *param_help(param_id_t id);

/* ---- time ---------------------------------------------------------------- */

/* Monotonic clock, nanoseconds. */
uint64_t time_ns(void);
/* The same clock as of its last tick (CLOCK_MONOTONIC_COARSE: never ahead
 * of time_ns, behind it by up to time_coarse_res_ns), for timestamps on
 * the small-message path: about 5 ns a read where time_ns costs 23 on the
 * development VM. */
uint64_t time_coarse_ns(void);
/* Its resolution (the tick, e.g. 4 ms); 1 where the fine clock stands in. */
uint64_t time_coarse_res_ns(void);
/* SHARC_TIMEOUT in nanoseconds. */
uint64_t timeout_ns(void);

/* ---- misc ------------------------------------------------------------------
 */

/* Fills buf with len bytes from getrandom(); falls back to /dev/urandom. */
sharc_status_t random_bytes(void *buf, size_t len);
/* 64-bit FNV-1a over n bytes, continuing from h (start with HASH_BASIS). */
#define HASH_BASIS 0xcbf29ce484222325ull
uint64_t hash_bytes(uint64_t h, const void *p, size_t n);
/* The host name (cached). */
const char *host_name(void);

#define SHARC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SHARC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SHARC_DIV_UP(a, b) (((a) + (b)-1) / (b))

#endif /* SHARC_CORE_H */

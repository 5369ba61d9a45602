/*
 * ib.h - internals of the InfiniBand / RoCE transport, split along its seams
 * so that everything without verbs runs in unit tests on any machine:
 *
 *   ib_dev.c    which device, port and GID a rank uses: SHARC_IB_HCA lists
 *               (NCCL's syntax), nearness from topo, the GID table (pure),
 *               then opening the device (verbs)
 *   ib_track.c  the order of completions across several QPs and the
 *               registration cache for user buffers (pure)
 *   ib_ctrl.c   out-of-band control sockets between ranks: QP information,
 *               goodbye, abort notices, peer loss (sockets, no verbs)
 *   ib_qp.c     a pair's verbs resources and QP state machine (verbs)
 *   ib.c        the data path, the progress thread and the vtable (verbs)
 *   ib_cq.c     completions and async events, for the progress thread (verbs)
 *   ib_none.c   without libibverbs: a vtable that refuses with a reason
 *
 * Everything here is internal to libsharc.
 */
#ifndef SHARC_TRANSPORT_IB_H
#define SHARC_TRANSPORT_IB_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "topo.h"

struct sharc_comm;

#define IB_NAME_MAX 64  /* device name ("mlx5_0") with its NUL */
#define IB_HCA_MAX 32   /* entries of one SHARC_IB_HCA list */
#define IB_MAX_QPS 16   /* SHARC_IB_QPS_PER_PEER limit */
#define IB_QP_WRITES 32 /* data writes in flight per QP and direction */

/* ---- SHARC_IB_HCA (ib_dev.c, pure) ----------------------------------------
 * NCCL_IB_HCA's syntax: comma-separated device names, each optionally
 * ":port". Names are prefixes ("mlx5" selects mlx5_0, mlx5_1, ...) unless
 * the list starts with "=" (exact names); a leading "^" (before "=") turns
 * the list into the devices to leave out. Empty: every device. */
typedef struct {
  char name[IB_NAME_MAX];
  int port; /* 0: every port */
} ib_hca_entry_t;

typedef struct {
  int n;       /* 0: no filter */
  int exclude; /* "^": the entries are excluded */
  int exact;   /* "=": names match whole, not as prefixes */
  ib_hca_entry_t e[IB_HCA_MAX];
} ib_hca_list_t;

/* Parses spec (NULL or "" gives an empty list). SHARC_ERR_INVALID_ARG with
 * the reason in why for an empty entry, a name too long, a port that is not
 * 1..255 or too many entries. */
sharc_status_t ib_hca_parse(const char *spec, ib_hca_list_t *out, char *why,
                            size_t why_len);
/* 1 if port `port` of device `dev` may be used under list l. */
int ib_hca_match(const ib_hca_list_t *l, const char *dev, int port);

/* ---- choosing a port (ib_dev.c, pure) ------------------------------------ */

/* An active port that passed SHARC_IB_HCA. */
typedef struct {
  char dev[IB_NAME_MAX];
  int port;
  int near;    /* from ib_dev_near: lower is nearer this rank */
  double gbps; /* link speed x width, 0 unknown */
} ib_port_cand_t;

/* How near RDMA device `dev` is to this rank's CPU `cpu` in machine m:
 * 0 same NUMA node, 1 same package, 2 elsewhere, 3 unknown (no topology,
 * the device or the CPU not found). */
int ib_dev_near(const topo_machine_t *m, const char *dev, int cpu);
/* The candidate for this rank: the nearest ones, then the fastest of those,
 * then local_rank spreads ranks of one host round-robin over what is left
 * (as NCCL spreads ranks over rails). -1 when n is 0. */
int ib_pick_port(const ib_port_cand_t *c, int n, int local_rank);

/* ---- choosing a GID (ib_dev.c, pure) --------------------------------------
 * A RoCE port has a table of GIDs (one per IP address and RoCE version); an
 * InfiniBand port routes by LID and uses GID 0 only across subnets. */
enum { IB_GID_TYPE_IB = 0, IB_GID_TYPE_ROCE_V1 = 1, IB_GID_TYPE_ROCE_V2 = 2 };

typedef struct {
  uint8_t raw[16];
  int type; /* IB_GID_TYPE_* */
  int index;
} ib_gid_t;

/* The GID index to use among the port's n valid entries: want >= 0 (from
 * SHARC_IB_GID_INDEX) must be one of them; else on Ethernet the lowest
 * RoCE v2 IPv4-mapped GID (::ffff:a.b.c.d), then RoCE v2 global IPv6, then
 * any RoCE v2, then RoCE v1; on InfiniBand 0. -1 with why when none fits. */
int ib_pick_gid(const ib_gid_t *g, int n, int want, int ethernet, char *why,
                size_t why_len);
/* "10.0.0.1" for an IPv4-mapped GID, else the IPv6 text. */
const char *ib_gid_str(const uint8_t raw[16], char *buf, size_t len);
/* 1 if raw is ::ffff:a.b.c.d. */
int ib_gid_is_v4(const uint8_t raw[16]);

/* 1 when nvidia-peermem (or the older nv_peer_mem) is loaded under root
 * ("" for this machine; tests pass a fake /sys tree). */
int ib_peermem_loaded(const char *root);

/* ---- order of completions across QPs (ib_track.c, pure) -------------------
 * A pair stripes its RDMA writes round-robin over nqp QPs: write k goes to
 * QP k % nqp. Each QP completes in order, QPs not with each other, so a
 * stream offset is complete only when every earlier write is. The tracker
 * turns per-QP completions into the complete prefix of the stream. The
 * sender uses one for its local completions, the receiver one for arrivals
 * (where `end` comes with the immediate). */
typedef struct {
  int nqp, window; /* window: writes tracked at once, multiple of nqp */
  uint64_t *end;   /* [window]: end offset of write k at k % window */
  uint64_t *count; /* [nqp]: writes completed per QP */
  uint64_t next;   /* first write not in the prefix */
  uint64_t prefix; /* stream bytes complete (end of write next - 1) */
} ib_order_t;

/* window = IB_QP_WRITES * nqp. SHARC_ERR_NO_MEM or OK. */
sharc_status_t ib_order_init(ib_order_t *o, int nqp);
void ib_order_free(ib_order_t *o);
/* Sender: records the end offset of write k before posting it. */
void ib_order_post(ib_order_t *o, uint64_t k, uint64_t end);
/* Sender: the next write posted on QP q completed. Returns the prefix. */
uint64_t ib_order_done(ib_order_t *o, int q);
/* Receiver: the next write on QP q arrived, ending at `end`. Returns the
 * prefix, or UINT64_MAX when the peer overran the window (protocol error). */
uint64_t ib_order_arrive(ib_order_t *o, int q, uint64_t end);
/* End offset recorded for write k (valid for k in [next, posted)). */
uint64_t ib_order_end(const ib_order_t *o, uint64_t k);

/* ---- registration cache (ib_track.c, pure) --------------------------------
 * Maps sharc_mem_alloc / sharc_mem_register regions (mem.h ids, never
 * reused) to memory registrations. A region freed by the user has a dead
 * id: its entry is dropped at the next miss (registering is the slow path
 * anyway), so freed memory stays pinned at most until then. Entries in use
 * by a send in flight are never evicted. Not thread safe: the caller locks.
 * The callbacks do the verbs work (tests pass fakes). */
typedef struct {
  uint64_t id;
  uintptr_t base;
  size_t len;
  void *handle; /* struct ibv_mr * */
  uint32_t lkey;
  int inuse;
  uint64_t last_use;
} ib_reg_entry_t;

typedef struct {
  /* 0 or an errno value. */
  int (*reg)(void *arg, void *base, size_t len, void **handle, uint32_t *lkey);
  void (*dereg)(void *arg, void *handle);
  /* 1 while region id still covers [base, base+len). */
  int (*alive)(void *arg, uint64_t id, uintptr_t base, size_t len);
  void *arg;
} ib_reg_ops_t;

typedef struct {
  ib_reg_ops_t ops;
  int cap, n;
  ib_reg_entry_t *e;
  uint64_t clock;
  uint64_t hits, misses, evictions;
} ib_regcache_t;

sharc_status_t ib_regcache_init(ib_regcache_t *c, int cap,
                                const ib_reg_ops_t *ops);
/* The entry covering region id (base, len: the whole region), registered on
 * a miss; its inuse count is raised (ib_regcache_put lowers it). NULL with
 * *err (an errno value; ENOSPC: every entry in use) when it cannot. */
ib_reg_entry_t *ib_regcache_get(ib_regcache_t *c, uint64_t id, void *base,
                                size_t len, int *err);
void ib_regcache_put(ib_regcache_t *c, ib_reg_entry_t *e);
/* Deregisters everything (also entries in use: only at teardown). */
void ib_regcache_free(ib_regcache_t *c);

/* ---- control sockets (ib_ctrl.c) ------------------------------------------
 * One TCP socket per pair of ranks, from the lower rank to the higher
 * rank's data listener (comm->listen_fd, whose address the bootstrap put in
 * the rank table), opened with a hello that carries the job token; frames
 * of fixed size. The ib transport sends its QP information over it, and it
 * tells ranks apart that left cleanly (goodbye) from ranks that died (the
 * socket ends without one). The owner's progress thread polls the fds
 * ibc_pollset returns and hands the events to ibc_handle. */
#define IBC_BODY 232 /* payload bytes of one frame */

enum {
  IBC_PEER_NONE = 0, /* no socket yet */
  IBC_PEER_UP,       /* connected */
  IBC_PEER_BYE,      /* said goodbye: left cleanly */
  IBC_PEER_LOST      /* the socket ended without a goodbye */
};

typedef struct ibc ibc_t;

typedef struct {
  /* A frame of type >= IBC_USER from peer (progress thread). */
  void (*on_msg)(void *arg, int peer, int type, const void *body, size_t len);
  /* peer's socket ended without a goodbye (err: errno, 0 for EOF). */
  void (*on_lost)(void *arg, int peer, int err);
  /* peer reports the job failing because of failed_rank (-1 unknown). */
  void (*on_abort)(void *arg, int peer, int failed_rank, sharc_status_t st);
  /* The set of fds to poll changed: wake the progress thread. */
  void (*kick)(void *arg);
  void *arg;
} ibc_ops_t;

#define IBC_USER 16 /* first type handed to on_msg */

/* Uses comm->listen_fd, rank, nranks, peers, uid and token. */
sharc_status_t ibc_create(struct sharc_comm *comm, const ibc_ops_t *ops,
                          ibc_t **out);
/* Makes sure a socket to peer exists or will: a lower rank dials (blocking
 * at most until deadline_ns), a higher rank waits for the dial. */
sharc_status_t ibc_connect(ibc_t *c, int peer, uint64_t deadline_ns);
/* Queues one frame (len <= IBC_BODY) and sends what it can without
 * blocking; frames queued before the socket exists leave when it does.
 * Thread safe. SHARC_ERR_PEER_LOST when the peer is gone. */
sharc_status_t ibc_send(ibc_t *c, int peer, int type, const void *body,
                        size_t len);
/* Best-effort abort notice to every connected peer. Never blocks. */
void ibc_abort_all(ibc_t *c, int failed_rank, sharc_status_t st);
/* Goodbye to every connected peer (clean teardown). */
void ibc_bye_all(ibc_t *c);
int ibc_peer_state(ibc_t *c, int peer);
/* Fills the poll set: the first `reserve` entries are the caller's, the rest
 * ibc's; returns the total and sets *timeout_ms (-1: none). NULL when out
 * of memory. Progress thread only. */
struct pollfd *ibc_pollset(ibc_t *c, size_t reserve, size_t *n,
                           int *timeout_ms);
/* Handles the events of ibc's entries (pfd[reserve..n)). */
void ibc_handle(ibc_t *c, size_t reserve, size_t n);
/* Closes every socket; call after the progress thread stopped. */
void ibc_destroy(ibc_t *c);

/* ---- for tests (ib.c) -----------------------------------------------------
 */

/* Number of RDMA devices with an active port; 0 with the reason in why
 * (no device, none active, or a build without libibverbs). */
int ib_probe(char *why, size_t why_len);

typedef struct {
  char dev[IB_NAME_MAX];
  int port, gid_index, nqp;
  uint64_t reg_hits, reg_misses, reg_evictions; /* registration cache */
  uint64_t zcopy_sends, want_msgs, wake_msgs, credit_writes;
} ib_stats_t;

/* SHARC_ERR_INVALID_ARG when comm has no ib state. */
sharc_status_t ib_stats(struct sharc_comm *comm, ib_stats_t *out);

#endif /* SHARC_TRANSPORT_IB_H */

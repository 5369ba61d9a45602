/*
 * ib_dev.h - which device, port and GID a rank uses (ib_dev.c): SHARC_IB_HCA
 * lists, nearness from the topology, the GID table (pure), and, with
 * libibverbs, opening the device.
 */
#ifndef SHARC_TRANSPORT_IB_DEV_H
#define SHARC_TRANSPORT_IB_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "topo.h"

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

/* ---- GPUDirect RDMA: how device memory is registered (ib_dev.c, pure) ---
 * A send straight from device memory needs the NIC to reach the GPU's
 * pages: either a dma-buf that CUDA exported for them, imported with
 * ibv_reg_dmabuf_mr (kernel 5.12+, rdma-core 34+, the open GPU modules), or
 * ibv_reg_mr on the device pointer itself, which only works while the
 * nvidia-peermem module is loaded. */
enum { IB_GDR_NONE = 0, IB_GDR_DMABUF = 1, IB_GDR_PEERMEM = 2 };

/* The methods to try, in order, into out[0..1]; returns how many (0: the
 * memory must be staged, the reason in why). mode is SHARC_IB_GDR: auto
 * tries the region's dma-buf (has_dmabuf) and then nvidia-peermem if
 * peermem (loaded); dmabuf and peermem only that one, peermem whether or
 * not the module shows; off none. -1 with why for any other mode. */
int ib_gdr_plan(const char *mode, int has_dmabuf, const char *dmabuf_why,
                int peermem, int out[2], char *why, size_t why_len);
/* "dma-buf", "nvidia-peermem" or "none". */
const char *ib_gdr_name(int method);

#ifdef SHARC_HAVE_IBVERBS
#include <infiniband/verbs.h>

struct sharc_comm;

typedef struct {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  char name[IB_NAME_MAX];
  int port;
  int ethernet; /* RoCE: route by GID; else InfiniBand: by LID */
  int global;   /* address with a GRH (RoCE, or SHARC_IB_GID_INDEX set) */
  uint16_t lid;
  int gid_index, gid_type;
  uint8_t gid[16];
  enum ibv_mtu mtu; /* the port's active MTU */
  double gbps;
  int ncand, near; /* how many ports could be used; nearness of this one */
} ib_dev_t;

/* Enumerates, filters by SHARC_IB_HCA, picks (ib_pick_port), opens the
 * device, allocates its PD and chooses the GID. Errors name what was seen
 * and what to do. */
sharc_status_t ib_dev_open(struct sharc_comm *comm, ib_dev_t *d);
/* PD, then context. Safe on a partly opened d. */
void ib_dev_close(ib_dev_t *d);

#endif /* SHARC_HAVE_IBVERBS */

#endif /* SHARC_TRANSPORT_IB_DEV_H */

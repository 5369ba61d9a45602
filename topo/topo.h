/*
 * topo.h - the hardware of one machine as sharc sees it: packages, NUMA
 * nodes, cores, GPUs, NICs, PCI switches, NVSwitches and GPU links, with the
 * place of every device in the PCI tree; and the choices made from it (the
 * NIC nearest a GPU, the GPU ring order).
 *
 * A topo_machine_t is filled by hwloc (this machine, or an hwloc XML export
 * named by SHARC_TOPO_FILE or passed in: topo.c) or, in a build without
 * hwloc, from /sys (topo_sys.c). After loading, everything is a pure
 * function of the model: no hwloc, no I/O. tests/unit/test_topo.c checks
 * the model against real machines' exports (tests/topo/xml/).
 *
 * Indices: packages and NUMA nodes are numbered 0..n-1 in hwloc's logical
 * order (os_index keeps the kernel's number); GPUs are ordered by PCI bus
 * id, as nvidia-smi and CUDA_DEVICE_ORDER=PCI_BUS_ID number them. -1 means
 * unknown everywhere.
 */
#ifndef SHARC_TOPO_TOPO_H
#define SHARC_TOPO_TOPO_H

#include <stddef.h>
#include <stdint.h>

#include "place.h"
#include "sharc.h"

#define TOPO_BUSID_MAX 24 /* "0000:34:00.0"; host bridges "0000:[2b-3b]" */
#define TOPO_NAME_MAX 64

typedef enum { TOPO_PCI_HOSTBRIDGE = 0, TOPO_PCI_BRIDGE = 1 } topo_pci_kind_t;

/* One bridge of the PCI tree. PCIe alternates its port levels under a root
 * port, so a bridge at even depth >= 2 is a switch's upstream port (the
 * switch itself) and one at odd depth >= 3 one of its downstream ports. */
typedef struct {
  char busid[TOPO_BUSID_MAX];
  topo_pci_kind_t kind;
  int parent;     /* index in topo_machine_t.pci; -1 for a host bridge */
  int depth;      /* 0 host bridge, 1 root port, 2 switch upstream port... */
  int hostbridge; /* index of the host bridge above (itself for one) */
  int sw;         /* PCI switch this bridge is a port of; -1: none */
} topo_pci_t;

/* Where a PCI device (GPU, NIC, NVSwitch) hangs. */
typedef struct {
  char busid[TOPO_BUSID_MAX]; /* "0000:84:00.0"; "" when not on PCI */
  int bridge;                 /* index in .pci of the bridge just above */
  int hostbridge;             /* index in .pci of its host bridge */
  int pcisw;                  /* nearest PCI switch above (index), -1: none */
  int numa, package;          /* the CPU side it is attached to */
} topo_pciloc_t;

typedef struct {
  int os_index;
  int ncores, npus;
  char model[TOPO_NAME_MAX]; /* "Intel(R) Xeon(R) Platinum 8174 ..." */
} topo_package_t;

typedef struct {
  int os_index;
  int package;
  int ncores, npus;
  uint64_t bytes; /* local memory */
} topo_numa_t;

/* One hardware thread; cores are counted, not listed. */
typedef struct {
  int os_index; /* the CPU number sched_getcpu() returns */
  int core;     /* 0..ncores-1 */
  int numa, package;
} topo_pu_t;

typedef struct {
  topo_pciloc_t pci;
  char model[TOPO_NAME_MAX];  /* "Tesla V100-SXM3-32GB-H" */
  char osdevs[TOPO_NAME_MAX]; /* hwloc OS devices, "cuda0 nvml0" */
  double link_gbs;            /* PCI link bandwidth, GB/s one way (0 unknown) */
} topo_gpu_t;

/* A network adapter: one PCI device, with its RDMA device and interfaces
 * merged ("mlx4_0" with "ib0 eth2"). */
typedef struct {
  topo_pciloc_t pci;
  char name[TOPO_NAME_MAX];    /* RDMA device if any ("mlx5_0"), else ifname */
  char netdevs[TOPO_NAME_MAX]; /* interfaces, "ib0 eth2" */
  char model[TOPO_NAME_MAX];
  int rdma;        /* has an RDMA (OpenFabrics / verbs) device */
  double link_gbs; /* PCI link bandwidth, GB/s (0 unknown) */
} topo_nic_t;

typedef struct {
  topo_pciloc_t pci;
} topo_nvswitch_t;

/* A link between two devices from a distance matrix of the export (for
 * instance NVLinkBandwidth, MB/s). Ends are typed indices. */
typedef enum {
  TOPO_END_GPU = 0,
  TOPO_END_NVSWITCH,
  TOPO_END_PACKAGE,
  TOPO_END_NIC
} topo_end_kind_t;

typedef struct {
  topo_end_kind_t akind, bkind;
  int a, b;
  uint64_t value;
  char matrix[32]; /* the matrix's name, "NVLinkBandwidth" */
} topo_link_t;

typedef struct topo_machine {
  char source[512];            /* "this machine (hwloc 2.9.0)" or the file */
  int from_file;               /* 1: an XML export, not the live machine */
  char product[TOPO_NAME_MAX]; /* DMI product name ("NVIDIA DGX-2H") */
  char exported_host[TOPO_NAME_MAX]; /* HostName recorded in the export */
  int npackages, nnuma, ncores, npus;
  topo_package_t *packages;
  topo_numa_t *numa;
  topo_pu_t *pus;
  int npci;
  topo_pci_t *pci;
  int nswitches; /* PCI switches (numbered by .pci[].sw) */
  int ngpus;
  topo_gpu_t *gpus;
  int nnics;
  topo_nic_t *nics;
  int nnvswitches;
  topo_nvswitch_t *nvswitches;
  int nlinks;
  topo_link_t *links;
} topo_machine_t;

/* ---- loading ---- */

/* Loads a machine: from the hwloc XML export at xml_path if not NULL or
 * empty, else from SHARC_TOPO_FILE if set, else by discovering this
 * machine. *out is the caller's (topo_machine_free). Errors:
 * SHARC_ERR_INVALID_ARG for a missing, unreadable or non-hwloc file;
 * SHARC_ERR_UNSUPPORTED for an XML file in a build without hwloc;
 * SHARC_ERR_SYSTEM when discovery fails. The message says what to do.
 * Thread safe (each call has its own hwloc topology). */
sharc_status_t topo_machine_load(const char *xml_path, topo_machine_t **out);
void topo_machine_free(topo_machine_t *m);

/* 1 when this build discovers with hwloc, 0 with /sys only. */
int topo_have_hwloc(void);

/* ---- queries (pure) ---- */

/* How near two PCI devices are, in nvidia-smi topo's words, plus PKG (NUMA
 * nodes of one package) between NODE and SYS. */
typedef enum {
  TOPO_NEAR_PIX = 0, /* through one PCI switch (or one bridge) */
  TOPO_NEAR_PXB,     /* through several switches, under one host bridge */
  TOPO_NEAR_PHB,     /* through the host bridge (the CPU's PCI root) */
  TOPO_NEAR_NODE,    /* different host bridges of one NUMA node */
  TOPO_NEAR_PKG,     /* different NUMA nodes of one package */
  TOPO_NEAR_SYS      /* across packages (or locality unknown) */
} topo_near_t;

/* "PIX", "PXB", "PHB", "NODE", "PKG", "SYS". */
const char *topo_near_name(topo_near_t n);
/* A short phrase: "same PCI switch", ... */
const char *topo_near_help(topo_near_t n);

/* Nearness of two PCI locations; *common_depth (may be NULL) gets the depth
 * of their deepest common bridge (-1 when none): larger is nearer. */
topo_near_t topo_pci_near(const topo_machine_t *m, const topo_pciloc_t *a,
                          const topo_pciloc_t *b, int *common_depth);

/* The NIC for GPU `gpu`: nearest by PCI path (same switch or bridge first,
 * then the deepest common bridge), then same host bridge, NUMA node,
 * package, then any. Ties go to RDMA-capable NICs, then to the faster PCI
 * link, then to the lower index. Returns the NIC index (-1 when the machine
 * has no NIC or gpu is out of range); *near (may be NULL) gets how near. */
int topo_gpu_nearest_nic(const topo_machine_t *m, int gpu, topo_near_t *near);

/* The NIC nearest a CPU-side place (NUMA node and package, -1 unknown):
 * same NUMA node, then package, then any; same tie rules. */
int topo_cpu_nearest_nic(const topo_machine_t *m, int numa, int package,
                         topo_near_t *near);

/* Group number for topo_loc_t.pcisw: the device's PCI switch, else its
 * host bridge (numbered after the switches), else -1. */
int topo_pci_group(const topo_machine_t *m, const topo_pciloc_t *p);

/* The PU with OS number cpu (sched_getcpu()), or NULL. */
const topo_pu_t *topo_cpu(const topo_machine_t *m, int cpu);

/* loc[g] for every GPU g: host 0, its package, NUMA node, PCI group and
 * index. loc holds m->ngpus entries. */
void topo_gpu_locs(const topo_machine_t *m, topo_loc_t *loc);

/* GPU ring for one machine: order[i] is the GPU at ring position i
 * (place_ring_order over topo_gpu_locs). order holds m->ngpus entries. */
void topo_gpu_ring(const topo_machine_t *m, int *order);

/* Ring edges (with the wrap-around) joining GPUs of different packages. */
int topo_ring_package_changes(const topo_machine_t *m, const int *order);

/* ---- for the discovery backends (topo.c, topo_sys.c) ---- */

/* Appends one zeroed element of `elem` bytes to *arr (*n elements), growing
 * it; returns the element, or NULL when out of memory. */
void *topo_push(void **arr, int *n, size_t elem);
/* Unknown bridge, switch and locality (-1), empty bus id. */
void topo_pciloc_init(topo_pciloc_t *p);
/* Adds a PCI bridge under `parent` (-1: a host bridge); returns its index or
 * -1 when out of memory. Parents must be added before their children. */
int topo_pci_add(topo_machine_t *m, const char *busid, int parent);
/* After a backend filled packages, NUMA nodes, PUs, .pci and the devices
 * (with .pci.bridge, .numa, .package): numbers the PCI switches and fills
 * every device's switch and host bridge. */
void topo_finish(topo_machine_t *m);
/* Copies src into dst[len], cut to fit. */
void topo_copy(char *dst, size_t len, const char *src);
/* Bus id order ("" last). */
int topo_busid_cmp(const char *a, const char *b);
/* Appends word to the space-separated list (dropped if it does not fit). */
void topo_words_add(char *list, size_t len, const char *word);
/* The NVIDIA driver's name of the GPU at busid ("NVIDIA H100 80GB HBM3"),
 * from /proc/driver/nvidia; out is left alone when there is none. */
void topo_nvidia_model(const char *busid, char *out, size_t len);
/* Fills m from /sys and /proc (topo_sys.c); GPUs in bus order. */
sharc_status_t topo_sys_discover(topo_machine_t *m);

#endif /* SHARC_TOPO_TOPO_H */

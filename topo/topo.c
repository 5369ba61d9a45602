/*
 * topo.c - the machine model (topo.h): loading it with hwloc, from this
 * machine or from an hwloc XML export, and the pure queries on it (PCI
 * nearness, the NIC nearest a GPU, the GPU ring).
 *
 * Without hwloc (SHARC_HAVE_HWLOC undefined) this machine is read from /sys
 * by topo_sys.c and XML exports are refused with a message saying so.
 */
#include "topo.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"

#ifdef SHARC_HAVE_HWLOC
#include <hwloc.h>
#endif

/* ---- model building, shared with topo_sys.c ---- */

void *topo_push(void **arr, int *n, size_t elem) {
  /* Capacity is implicit: 4, then doubled whenever n reaches a power of 2. */
  int k = *n;
  if (k == 0 || (k >= 4 && (k & (k - 1)) == 0)) {
    size_t cap = k == 0 ? 4 : (size_t)k * 2;
    void *p = realloc(*arr, cap * elem);
    if (!p)
      return NULL;
    *arr = p;
  }
  char *e = (char *)*arr + (size_t)k * elem;
  memset(e, 0, elem);
  *n = k + 1;
  return e;
}

void topo_pciloc_init(topo_pciloc_t *p) {
  memset(p, 0, sizeof *p);
  p->bridge = p->hostbridge = p->pcisw = -1;
  p->numa = p->package = -1;
}

int topo_pci_add(topo_machine_t *m, const char *busid, int parent) {
  topo_pci_t *b = topo_push((void **)&m->pci, &m->npci, sizeof *b);
  if (!b)
    return -1;
  snprintf(b->busid, sizeof b->busid, "%s", busid);
  b->parent = parent;
  b->kind = parent < 0 ? TOPO_PCI_HOSTBRIDGE : TOPO_PCI_BRIDGE;
  b->sw = -1;
  return m->npci - 1;
}

static void fill_pciloc(const topo_machine_t *m, topo_pciloc_t *p) {
  p->hostbridge = p->pcisw = -1;
  if (p->bridge < 0 || p->bridge >= m->npci)
    return;
  p->hostbridge = m->pci[p->bridge].hostbridge;
  for (int b = p->bridge; b >= 0 && p->pcisw < 0; b = m->pci[b].parent)
    p->pcisw = m->pci[b].sw;
}

void topo_finish(topo_machine_t *m) {
  /* Parents come before children in .pci (both backends add top-down). */
  m->nswitches = 0;
  for (int i = 0; i < m->npci; i++) {
    topo_pci_t *b = &m->pci[i];
    int par = b->parent;
    b->depth = par >= 0 ? m->pci[par].depth + 1 : 0;
    b->hostbridge = par >= 0 ? m->pci[par].hostbridge : i;
    b->sw = -1;
    if (b->kind == TOPO_PCI_BRIDGE && b->depth >= 2 && b->depth % 2 == 0)
      b->sw = m->nswitches++; /* upstream port: the switch itself */
    else if (b->kind == TOPO_PCI_BRIDGE && b->depth >= 3)
      b->sw = m->pci[par].sw; /* downstream port of the parent's switch */
  }
  for (int i = 0; i < m->ngpus; i++)
    fill_pciloc(m, &m->gpus[i].pci);
  for (int i = 0; i < m->nnics; i++)
    fill_pciloc(m, &m->nics[i].pci);
  for (int i = 0; i < m->nnvswitches; i++)
    fill_pciloc(m, &m->nvswitches[i].pci);
  /* On a machine with one NUMA node or package every device is on it. */
  for (int i = 0; i < m->ngpus + m->nnics + m->nnvswitches; i++) {
    topo_pciloc_t *p = i < m->ngpus ? &m->gpus[i].pci
                       : i < m->ngpus + m->nnics
                           ? &m->nics[i - m->ngpus].pci
                           : &m->nvswitches[i - m->ngpus - m->nnics].pci;
    if (p->numa < 0 && m->nnuma == 1)
      p->numa = 0;
    if (p->package < 0 && p->numa >= 0 && p->numa < m->nnuma)
      p->package = m->numa[p->numa].package;
    if (p->package < 0 && m->npackages == 1)
      p->package = 0;
  }
}

void topo_copy(char *dst, size_t len, const char *src) {
  size_t n = strnlen(src, len - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

int topo_busid_cmp(const char *a, const char *b) {
  /* Fixed-width lower-case hex: string order is bus order; "" sorts last. */
  if (!*a || !*b)
    return (*a == '\0') - (*b == '\0');
  return strcmp(a, b);
}

void topo_words_add(char *list, size_t len, const char *word) {
  size_t n = strlen(list);
  if (n + strlen(word) + 2 > len)
    return;
  snprintf(list + n, len - n, "%s%s", n ? " " : "", word);
}

void topo_nvidia_model(const char *busid, char *out, size_t len) {
  char path[256], line[256];
  snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/information", busid);
  FILE *f = fopen(path, "re");
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Model:", 6)) {
      char *v = line + 6 + strspn(line + 6, " \t");
      v[strcspn(v, "\n")] = '\0';
      topo_copy(out, len, v);
      break;
    }
  if (f)
    fclose(f);
}

void topo_machine_free(topo_machine_t *m) {
  if (!m)
    return;
  free(m->packages);
  free(m->numa);
  free(m->pus);
  free(m->pci);
  free(m->gpus);
  free(m->nics);
  free(m->nvswitches);
  free(m->links);
  free(m);
}

/* ---- hwloc discovery ---- */

#ifdef SHARC_HAVE_HWLOC

/* hwloc 3 writes OS device types as flags (GPU 4, COPROC 8, NETWORK 16,
 * OPENFABRICS 32); an export converted to format 2.0 by changing its
 * version (as the DGX-2 file) keeps those numbers, so accept both. */
static int osdev_is_net(hwloc_obj_t o) {
  unsigned t = (unsigned)o->attr->osdev.type;
  return t == HWLOC_OBJ_OSDEV_NETWORK || t == 16;
}
static int osdev_is_rdma(hwloc_obj_t o) {
  unsigned t = (unsigned)o->attr->osdev.type;
  return t == HWLOC_OBJ_OSDEV_OPENFABRICS || t == 32;
}
/* CUDA and NVML devices ("cuda0", "nvml3"); OpenCL and others are not
 * sharc's GPUs. */
static int osdev_is_gpu(hwloc_obj_t o) {
  const char *n = o->name ? o->name : "";
  const char *digits =
      !strncmp(n, "cuda", 4) || !strncmp(n, "nvml", 4) ? n + 4 : NULL;
  return digits && *digits >= '0' && *digits <= '9';
}

static int pcidev_is_nvidia_gpu(hwloc_obj_t o) {
  unsigned cls = o->attr->pcidev.class_id;
  return o->attr->pcidev.vendor_id == 0x10de &&
         (cls == 0x0302 || cls == 0x0300);
}

static int pcidev_is_nvswitch(hwloc_obj_t o) {
  const char *dev = hwloc_obj_get_info_by_name(o, "PCIDevice");
  return (o->subtype && !strcmp(o->subtype, "NVSwitch")) ||
         (dev && strstr(dev, "NVSwitch")) ||
         (o->attr->pcidev.vendor_id == 0x10de &&
          o->attr->pcidev.class_id == 0x0680);
}

static void pci_busid(hwloc_obj_t o, char *out, size_t len) {
  const struct hwloc_pcidev_attr_s *a = o->type == HWLOC_OBJ_BRIDGE
                                            ? &o->attr->bridge.upstream.pci
                                            : &o->attr->pcidev;
  snprintf(out, len, "%04x:%02x:%02x.%01x", (unsigned)a->domain,
           (unsigned)a->bus, (unsigned)a->dev, (unsigned)a->func);
}

/* Discovery state: the hwloc object behind each GPU, NIC and NVSwitch of
 * the model (parallel arrays), to attach OS devices and links to them. */
typedef struct {
  hwloc_topology_t topo;
  topo_machine_t *m;
  hwloc_obj_t *gpu_key, *nic_key, *nvs_key;
  int ngpu_key, nnic_key, nnvs_key;
} hw_ctx_t;

static int numa_index_of(hw_ctx_t *c, hwloc_const_nodeset_t ns) {
  if (hwloc_bitmap_weight(ns) != 1)
    return -1;
  hwloc_obj_t n = hwloc_get_numanode_obj_by_os_index(
      c->topo, (unsigned)hwloc_bitmap_first(ns));
  return n ? (int)n->logical_index : -1;
}

/* The NUMA node and package an I/O object is attached to. */
static void io_locality(hw_ctx_t *c, hwloc_obj_t o, topo_pciloc_t *p) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(c->topo, o);
  if (!anc)
    return;
  p->numa = anc->nodeset ? numa_index_of(c, anc->nodeset) : -1;
  hwloc_obj_t pkg =
      anc->type == HWLOC_OBJ_PACKAGE
          ? anc
          : hwloc_get_ancestor_obj_by_type(c->topo, HWLOC_OBJ_PACKAGE, anc);
  p->package = pkg ? (int)pkg->logical_index : -1;
}

static int key_index(hwloc_obj_t *keys, int n, hwloc_obj_t o) {
  for (int i = 0; i < n; i++)
    if (keys[i] == o)
      return i;
  return -1;
}

static sharc_status_t no_mem(void) {
  return err_set(SHARC_ERR_NO_MEM, "topo: out of memory building the model");
}

static sharc_status_t add_gpu(hw_ctx_t *c, hwloc_obj_t key, int bridge,
                              int *index) {
  topo_gpu_t *g = topo_push((void **)&c->m->gpus, &c->m->ngpus, sizeof *g);
  hwloc_obj_t *k =
      g ? topo_push((void **)&c->gpu_key, &c->ngpu_key, sizeof *k) : NULL;
  if (!k)
    return no_mem();
  *k = key;
  topo_pciloc_init(&g->pci);
  g->pci.bridge = bridge;
  io_locality(c, key, &g->pci);
  if (key->type == HWLOC_OBJ_PCI_DEVICE) {
    pci_busid(key, g->pci.busid, sizeof g->pci.busid);
    g->link_gbs = key->attr->pcidev.linkspeed;
    const char *dev = hwloc_obj_get_info_by_name(key, "PCIDevice");
    if (dev)
      snprintf(g->model, sizeof g->model, "%s", dev);
    else
      snprintf(g->model, sizeof g->model, "NVIDIA [10de:%04x]",
               (unsigned)key->attr->pcidev.device_id);
  }
  *index = c->m->ngpus - 1;
  return SHARC_OK;
}

static sharc_status_t on_osdev(hw_ctx_t *c, hwloc_obj_t o, int bridge) {
  hwloc_obj_t pci =
      o->parent && o->parent->type == HWLOC_OBJ_PCI_DEVICE ? o->parent : NULL;
  hwloc_obj_t key = pci ? pci : o;
  if (osdev_is_gpu(o)) {
    int g = key_index(c->gpu_key, c->ngpu_key, key);
    if (g < 0)
      CHECK(add_gpu(c, key, bridge, &g));
    topo_gpu_t *gpu = &c->m->gpus[g];
    topo_words_add(gpu->osdevs, sizeof gpu->osdevs, o->name);
    const char *model = hwloc_obj_get_info_by_name(o, "GPUModel");
    if (model) /* the driver's name beats the PCI database's */
      snprintf(gpu->model, sizeof gpu->model, "%s", model);
    return SHARC_OK;
  }
  if (!osdev_is_net(o) && !osdev_is_rdma(o))
    return SHARC_OK;
  int i = key_index(c->nic_key, c->nnic_key, key);
  if (i < 0) {
    topo_nic_t *n = topo_push((void **)&c->m->nics, &c->m->nnics, sizeof *n);
    hwloc_obj_t *k =
        n ? topo_push((void **)&c->nic_key, &c->nnic_key, sizeof *k) : NULL;
    if (!k)
      return no_mem();
    *k = key;
    topo_pciloc_init(&n->pci);
    n->pci.bridge = bridge;
    io_locality(c, key, &n->pci);
    if (pci) {
      pci_busid(pci, n->pci.busid, sizeof n->pci.busid);
      const char *dev = hwloc_obj_get_info_by_name(pci, "PCIDevice");
      snprintf(n->model, sizeof n->model, "%s", dev ? dev : "");
      n->link_gbs = pci->attr->pcidev.linkspeed;
    }
    i = c->m->nnics - 1;
  }
  topo_nic_t *n = &c->m->nics[i];
  if (osdev_is_rdma(o)) {
    if (!n->rdma) /* the RDMA device names the NIC */
      snprintf(n->name, sizeof n->name, "%s", o->name);
    n->rdma = 1;
  } else {
    topo_words_add(n->netdevs, sizeof n->netdevs, o->name);
    if (!n->name[0])
      snprintf(n->name, sizeof n->name, "%s", o->name);
  }
  return SHARC_OK;
}

/* Depth-first over the whole tree; `bridge` is the nearest PCI bridge (an
 * index in m->pci) above o. */
static sharc_status_t walk(hw_ctx_t *c, hwloc_obj_t o, int bridge) {
  topo_machine_t *m = c->m;
  if (o->type == HWLOC_OBJ_BRIDGE) {
    char id[TOPO_BUSID_MAX];
    if (o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST)
      snprintf(id, sizeof id, "%04x:[%02x-%02x]",
               (unsigned)o->attr->bridge.downstream.pci.domain,
               (unsigned)o->attr->bridge.downstream.pci.secondary_bus,
               (unsigned)o->attr->bridge.downstream.pci.subordinate_bus);
    else
      pci_busid(o, id, sizeof id);
    /* A host bridge starts a tree even if hwloc nests it somewhere odd. */
    int parent =
        o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST ? -1 : bridge;
    bridge = topo_pci_add(m, id, parent);
    if (bridge < 0)
      return no_mem();
  } else if (o->type == HWLOC_OBJ_PCI_DEVICE) {
    if (pcidev_is_nvidia_gpu(o) && key_index(c->gpu_key, c->ngpu_key, o) < 0) {
      int g;
      CHECK(add_gpu(c, o, bridge, &g));
    } else if (pcidev_is_nvswitch(o)) {
      topo_nvswitch_t *s =
          topo_push((void **)&m->nvswitches, &m->nnvswitches, sizeof *s);
      hwloc_obj_t *k =
          s ? topo_push((void **)&c->nvs_key, &c->nnvs_key, sizeof *k) : NULL;
      if (!k)
        return no_mem();
      *k = o;
      topo_pciloc_init(&s->pci);
      s->pci.bridge = bridge;
      pci_busid(o, s->pci.busid, sizeof s->pci.busid);
      io_locality(c, o, &s->pci);
    }
  } else if (o->type == HWLOC_OBJ_OS_DEVICE) {
    CHECK(on_osdev(c, o, bridge));
  }
  for (hwloc_obj_t ch = o->first_child; ch; ch = ch->next_sibling)
    CHECK(walk(c, ch, bridge));
  for (hwloc_obj_t ch = o->io_first_child; ch; ch = ch->next_sibling)
    CHECK(walk(c, ch, bridge));
  return SHARC_OK;
}

static sharc_status_t hw_cpus(hw_ctx_t *c) {
  hwloc_topology_t t = c->topo;
  topo_machine_t *m = c->m;
  int np = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
  int nn = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  int npu = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  /* -1: objects of that type at several levels (hwloc's
   * HWLOC_TYPE_DEPTH_MULTIPLE), which no machine has; a hand-edited or
   * damaged export can */
  if (np < 0 || nn < 0 || npu < 0)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "topo: the topology has %s at several levels of its "
                   "tree, which no machine has; is the XML export damaged "
                   "or hand-edited? Export it again with lstopo --of xml",
                   np < 0   ? "packages"
                   : nn < 0 ? "NUMA nodes"
                            : "PUs");
  m->npackages = np > 0 ? np : 1; /* a machine without packages has one */
  m->nnuma = nn > 0 ? nn : 1;
  m->npus = npu;
  m->packages = calloc((size_t)m->npackages, sizeof *m->packages);
  m->numa = calloc((size_t)m->nnuma, sizeof *m->numa);
  m->pus = calloc((size_t)(npu > 0 ? npu : 1), sizeof *m->pus);
  if (!m->packages || !m->numa || !m->pus)
    return no_mem();
  for (int p = 0; p < m->npackages; p++) {
    hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, (unsigned)p);
    const char *model = o ? hwloc_obj_get_info_by_name(o, "CPUModel") : NULL;
    m->packages[p].os_index = o ? (int)o->os_index : 0;
    snprintf(m->packages[p].model, sizeof m->packages[p].model, "%s",
             model ? model : "");
  }
  for (int n = 0; n < m->nnuma; n++) {
    hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)n);
    hwloc_obj_t pkg =
        o ? hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, o) : NULL;
    m->numa[n].os_index = o ? (int)o->os_index : 0;
    m->numa[n].package = pkg                 ? (int)pkg->logical_index
                         : m->npackages == 1 ? 0
                                             : -1;
    m->numa[n].bytes = o ? o->attr->numanode.local_memory : 0;
  }
  /* Each PU: its core, NUMA node (the one whose cpuset holds it) and
   * package; cores are counted where their first PU lies. */
  int ncore_obj = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
  for (int i = 0; i < npu; i++) {
    hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, (unsigned)i);
    topo_pu_t *pu = &m->pus[i];
    hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, o);
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, o);
    pu->os_index = (int)o->os_index;
    pu->core = core ? (int)core->logical_index : ncore_obj + i;
    pu->package = pkg && (int)pkg->logical_index < m->npackages
                      ? (int)pkg->logical_index
                      : 0;
    pu->numa = -1;
    for (int n = 0; n < nn && pu->numa < 0; n++) {
      hwloc_obj_t no =
          hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)n);
      if (hwloc_bitmap_isset(no->cpuset, o->os_index))
        pu->numa = n;
    }
    if (pu->numa < 0 && m->nnuma == 1)
      pu->numa = 0;
    m->packages[pu->package].npus++;
    if (pu->numa >= 0)
      m->numa[pu->numa].npus++;
    int first_of_core =
        !core || (int)hwloc_bitmap_first(core->cpuset) == (int)o->os_index;
    if (first_of_core) {
      m->ncores++;
      m->packages[pu->package].ncores++;
      if (pu->numa >= 0)
        m->numa[pu->numa].ncores++;
    }
  }
  return SHARC_OK;
}

/* The model end of a distance-matrix object, or -1. */
static int link_end(hw_ctx_t *c, hwloc_obj_t o, topo_end_kind_t *kind) {
  hwloc_obj_t key = o->type == HWLOC_OBJ_OS_DEVICE && o->parent &&
                            o->parent->type == HWLOC_OBJ_PCI_DEVICE
                        ? o->parent
                        : o;
  int i;
  if ((i = key_index(c->gpu_key, c->ngpu_key, key)) >= 0 ||
      (i = key_index(c->gpu_key, c->ngpu_key, o)) >= 0) {
    *kind = TOPO_END_GPU;
    return i;
  }
  if ((i = key_index(c->nvs_key, c->nnvs_key, o)) >= 0) {
    *kind = TOPO_END_NVSWITCH;
    return i;
  }
  if ((i = key_index(c->nic_key, c->nnic_key, key)) >= 0) {
    *kind = TOPO_END_NIC;
    return i;
  }
  if (o->type == HWLOC_OBJ_PACKAGE) {
    *kind = TOPO_END_PACKAGE;
    return (int)o->logical_index;
  }
  return -1;
}

/* Links from the export's distance matrices that touch a GPU (NVLink
 * bandwidth between GPUs, to NVSwitches or to CPUs). */
static sharc_status_t hw_links(hw_ctx_t *c) {
  unsigned nr = 0;
  if (hwloc_distances_get(c->topo, &nr, NULL, 0, 0) != 0 || nr == 0)
    return SHARC_OK;
  struct hwloc_distances_s **d = calloc(nr, sizeof *d);
  if (!d)
    return no_mem();
  sharc_status_t st = SHARC_OK;
  if (hwloc_distances_get(c->topo, &nr, d, 0, 0) != 0)
    nr = 0;
  for (unsigned k = 0; k < nr; k++) {
    const char *name = hwloc_distances_get_name(c->topo, d[k]);
    unsigned n = d[k]->nbobjs;
    for (unsigned i = 0; i < n && st == SHARC_OK; i++)
      for (unsigned j = i + 1; j < n && st == SHARC_OK; j++) {
        uint64_t v = d[k]->values[i * n + j];
        if (!v)
          v = d[k]->values[j * n + i];
        topo_end_kind_t ka, kb;
        int a = link_end(c, d[k]->objs[i], &ka);
        int b = link_end(c, d[k]->objs[j], &kb);
        if (!v || a < 0 || b < 0 ||
            (ka != TOPO_END_GPU && kb != TOPO_END_GPU) || (ka == kb && a == b))
          continue;
        topo_link_t *l =
            topo_push((void **)&c->m->links, &c->m->nlinks, sizeof *l);
        if (!l) {
          st = no_mem();
          break;
        }
        *l = (topo_link_t){ka, kb, a, b, v, ""};
        snprintf(l->matrix, sizeof l->matrix, "%s", name ? name : "distance");
      }
    hwloc_distances_release(c->topo, d[k]);
  }
  free(d);
  return st;
}

/* GPUs in bus order (keys follow), so numbering matches nvidia-smi. */
static void sort_gpus(hw_ctx_t *c) {
  topo_gpu_t *g = c->m->gpus;
  for (int i = 1; i < c->m->ngpus; i++)
    for (int j = i;
         j > 0 && topo_busid_cmp(g[j - 1].pci.busid, g[j].pci.busid) > 0; j--) {
      topo_gpu_t tg = g[j];
      g[j] = g[j - 1];
      g[j - 1] = tg;
      hwloc_obj_t tk = c->gpu_key[j];
      c->gpu_key[j] = c->gpu_key[j - 1];
      c->gpu_key[j - 1] = tk;
    }
}

/* What hwloc may allocate to read an export before it is refused: real
 * exports of the largest machines take a few MiB; malformed ones make
 * hwloc grow bitmaps to an index near 2^32 (a PU without os_index: 1 GiB
 * for one, regress/fuzz_topo_xml/hwloc-1gib-pu-without-os-index.xml),
 * enough to take a process's memory (the fuzzer's 2 GiB limit in CI). */
#define HW_PROBE_MAX_KIB (256L * 1024)
#define HW_PROBE_TOO_BIG 3 /* the child's exit status when it grew more */

static long max_rss_kib(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
}

/* hwloc 2.9 itself crashes on some malformed exports (an object without
 * complete_cpuset: lstopo dies on them too) and allocates without bound on
 * others, so an export is first loaded in a child process; only one that
 * hwloc survives within HW_PROBE_MAX_KIB is loaded here. */
static sharc_status_t hw_probe_xml(const char *xml) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    return SHARC_OK; /* cannot check: load it as before */
  if (pid == 0) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL; /* die quietly, without a sanitizer report */
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL, SIGALRM};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
      sigaction(sigs[i], &dfl, NULL);
    alarm(30);
    long before = max_rss_kib();
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) == 0) {
      hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
      if (hwloc_topology_set_xml(t, xml) == 0)
        hwloc_topology_load(t);
      hwloc_topology_destroy(t);
    }
    _exit(max_rss_kib() - before > HW_PROBE_MAX_KIB ? HW_PROBE_TOO_BIG : 0);
  }
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0)
    if (errno != EINTR)
      return SHARC_OK;
  if (WIFSIGNALED(ws))
    return err_set(SHARC_ERR_INVALID_ARG,
                   "topo: hwloc crashed (signal %d) reading %s: the export is "
                   "malformed; make a new one with lstopo --of xml FILE",
                   WTERMSIG(ws), xml);
  if (WIFEXITED(ws) && WEXITSTATUS(ws) == HW_PROBE_TOO_BIG)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "topo: hwloc needed more than %ld MiB to read %s: the "
                   "export is malformed (a PU without os_index, or an index "
                   "near 2^32?); make a new one with lstopo --of xml FILE",
                   HW_PROBE_MAX_KIB / 1024, xml);
  return SHARC_OK;
}

static sharc_status_t hw_load(const char *xml, topo_machine_t *m) {
  if (xml)
    CHECK(hw_probe_xml(xml));
  hw_ctx_t c = {0};
  c.m = m;
  sharc_status_t st = SHARC_OK;
  if (hwloc_topology_init(&c.topo) != 0)
    return err_set(SHARC_ERR_SYSTEM, "topo: hwloc_topology_init failed: %s",
                   strerror(errno));
  /* Keep every PCI bridge and device: switches, NVSwitches (class 0680 or
   * none) and NICs all matter here. */
  hwloc_topology_set_io_types_filter(c.topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  /* This machine's PCI tree comes from the linux component (sysfs): the
   * libpciaccess plugin adds only device names and leaks at unload, which
   * fails every sanitizer run. */
  if (!xml)
    hwloc_topology_set_components(
        c.topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  if (xml && hwloc_topology_set_xml(c.topo, xml) != 0) {
    st = err_set(SHARC_ERR_INVALID_ARG,
                 "topo: hwloc cannot read %s as an XML export (%s); make one "
                 "with lstopo --of xml FILE",
                 xml, strerror(errno));
    goto out;
  }
  if (hwloc_topology_load(c.topo) != 0) {
    st = xml ? err_set(SHARC_ERR_INVALID_ARG,
                       "topo: hwloc cannot load %s (%s); is it an hwloc XML "
                       "export (lstopo --of xml FILE)?",
                       xml, strerror(errno))
             : err_set(SHARC_ERR_SYSTEM,
                       "topo: hwloc could not discover this machine (%s); "
                       "try SHARC_TOPO_FILE with an export of it",
                       strerror(errno));
    goto out;
  }
  hwloc_obj_t root = hwloc_get_root_obj(c.topo);
  const char *v = hwloc_obj_get_info_by_name(root, "DMIProductName");
  snprintf(m->product, sizeof m->product, "%s", v ? v : "");
  v = hwloc_obj_get_info_by_name(root, "HostName");
  snprintf(m->exported_host, sizeof m->exported_host, "%s", v ? v : "");
  CHECK_GOTO(hw_cpus(&c), st, out);
  CHECK_GOTO(walk(&c, root, -1), st, out);
  for (int g = 0; !xml && g < m->ngpus; g++) /* names from the driver */
    if (!strncmp(m->gpus[g].model, "NVIDIA [", 8))
      topo_nvidia_model(m->gpus[g].pci.busid, m->gpus[g].model,
                        sizeof m->gpus[g].model);
  sort_gpus(&c);
  CHECK_GOTO(hw_links(&c), st, out);
  topo_finish(m);
out:
  free(c.gpu_key);
  free(c.nic_key);
  free(c.nvs_key);
  hwloc_topology_destroy(c.topo);
  return st;
}

int topo_have_hwloc(void) { return 1; }

#else /* !SHARC_HAVE_HWLOC */

int topo_have_hwloc(void) { return 0; }

#endif

/* Refuses what is not an hwloc XML export before hwloc sees it, so the
 * message can say what the file is not. `env` names the variable the path
 * came from ("" for an argument). */
static sharc_status_t check_xml_file(const char *path, const char *env) {
  const char *todo = *env ? "; set it to an hwloc XML export (lstopo --of "
                            "xml FILE) or unset it to discover this machine"
                          : "; pass an hwloc XML export (make one with "
                            "lstopo --of xml FILE)";
  struct stat sb;
  if (stat(path, &sb) != 0)
    return err_set(SHARC_ERR_INVALID_ARG, "topo: cannot open %s%s (%s)%s", env,
                   path, strerror(errno), todo);
  if (S_ISDIR(sb.st_mode))
    return err_set(SHARC_ERR_INVALID_ARG, "topo: %s%s is a directory%s", env,
                   path, todo);
  FILE *f = fopen(path, "rb");
  if (!f)
    return err_set(SHARC_ERR_INVALID_ARG, "topo: cannot open %s%s (%s)%s", env,
                   path, strerror(errno), todo);
  char head[4096];
  size_t n = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  head[n] = '\0';
  if (!strstr(head, "<topology"))
    return err_set(SHARC_ERR_INVALID_ARG,
                   "topo: %s%s is not an hwloc XML export (no <topology> "
                   "element in its first %zu bytes)%s",
                   env, path, n, todo);
  return SHARC_OK;
}

sharc_status_t topo_machine_load(const char *xml_path, topo_machine_t **out) {
  *out = NULL;
  const char *env = "";
  if (!xml_path || !*xml_path) {
    xml_path = param_str(PARAM_TOPO_FILE);
    env = "SHARC_TOPO_FILE=";
  }
  int from_file = xml_path && *xml_path;
  if (from_file) {
    CHECK(check_xml_file(xml_path, env));
#ifndef SHARC_HAVE_HWLOC
    return err_set(SHARC_ERR_UNSUPPORTED,
                   "topo: cannot load %s%s: sharc was built without hwloc; "
                   "install libhwloc-dev and rebuild (cmake "
                   "-DSHARC_WITH_HWLOC=ON)",
                   env, xml_path);
#endif
  }
  topo_machine_t *m = calloc(1, sizeof *m);
  if (!m)
    return err_set(SHARC_ERR_NO_MEM, "topo: out of memory");
  m->from_file = from_file;
  sharc_status_t st;
#ifdef SHARC_HAVE_HWLOC
  if (from_file)
    snprintf(m->source, sizeof m->source, "%s (hwloc XML)", xml_path);
  else
    snprintf(m->source, sizeof m->source, "this machine (hwloc %s)",
             HWLOC_VERSION);
  st = hw_load(from_file ? xml_path : NULL, m);
#else
  snprintf(m->source, sizeof m->source, "this machine (/sys, no hwloc)");
  st = topo_sys_discover(m);
  if (st == SHARC_OK)
    topo_finish(m);
#endif
  if (st != SHARC_OK) {
    topo_machine_free(m);
    return st;
  }
  INFO(SUB_TOPO,
       "topo: %s: %d packages, %d NUMA nodes, %d cores, %d GPUs, %d NICs",
       m->source, m->npackages, m->nnuma, m->ncores, m->ngpus, m->nnics);
  *out = m;
  return SHARC_OK;
}

/* ---- queries ---- */

static const char *const near_names[] = {"PIX",  "PXB", "PHB",
                                         "NODE", "PKG", "SYS"};
static const char *const near_helps[] = {
    "same PCI switch or bridge",     "several PCI switches, one host bridge",
    "through the host bridge",       "other host bridge, same NUMA node",
    "other NUMA node, same package", "across packages"};

const char *topo_near_name(topo_near_t n) {
  return (unsigned)n <= TOPO_NEAR_SYS ? near_names[n] : "?";
}
const char *topo_near_help(topo_near_t n) {
  return (unsigned)n <= TOPO_NEAR_SYS ? near_helps[n] : "?";
}

/* A bridge's switch, or the bridge itself when it is no switch's port
 * (negative, so the two never collide). */
static int sw_key(const topo_machine_t *m, int b) {
  return m->pci[b].sw >= 0 ? m->pci[b].sw : -2 - b;
}

#define TOPO_MAX_PCI_DEPTH 64

topo_near_t topo_pci_near(const topo_machine_t *m, const topo_pciloc_t *a,
                          const topo_pciloc_t *b, int *common_depth) {
  if (common_depth)
    *common_depth = -1;
  if (a->bridge >= 0 && b->bridge >= 0 && a->bridge < m->npci &&
      b->bridge < m->npci &&
      m->pci[a->bridge].hostbridge == m->pci[b->bridge].hostbridge) {
    /* Deepest common bridge; then the switches both paths go through. */
    int pa[TOPO_MAX_PCI_DEPTH], na = 0;
    for (int x = a->bridge; x >= 0 && na < TOPO_MAX_PCI_DEPTH;
         x = m->pci[x].parent)
      pa[na++] = x;
    int common = -1, nb = 0, pb[TOPO_MAX_PCI_DEPTH];
    for (int x = b->bridge; x >= 0 && common < 0 && nb < TOPO_MAX_PCI_DEPTH;
         x = m->pci[x].parent) {
      pb[nb++] = x;
      for (int i = 0; i < na; i++)
        if (pa[i] == x)
          common = x;
    }
    if (common >= 0) {
      if (common_depth)
        *common_depth = m->pci[common].depth;
      if (m->pci[common].kind == TOPO_PCI_HOSTBRIDGE)
        return TOPO_NEAR_PHB;
      int keys[2 * TOPO_MAX_PCI_DEPTH], nk = 0;
      for (int pass = 0; pass < 2; pass++) {
        const int *p = pass ? pb : pa;
        int np = pass ? nb : na;
        for (int i = 0; i < np; i++) {
          int k = sw_key(m, p[i]), seen = 0;
          for (int j = 0; j < nk; j++)
            seen |= keys[j] == k;
          if (!seen)
            keys[nk++] = k;
          if (p[i] == common)
            break;
        }
      }
      return nk <= 1 ? TOPO_NEAR_PIX : TOPO_NEAR_PXB;
    }
  }
  if (a->numa >= 0 && a->numa == b->numa)
    return TOPO_NEAR_NODE;
  if (a->package >= 0 && a->package == b->package)
    return TOPO_NEAR_PKG;
  return TOPO_NEAR_SYS;
}

/* 1 when NIC i (at nearness ni, common depth di) beats NIC j. */
static int nic_better(const topo_machine_t *m, int i, topo_near_t ni, int di,
                      int j, topo_near_t nj, int dj) {
  if (ni != nj)
    return ni < nj;
  if (di != dj)
    return di > dj;
  if (m->nics[i].rdma != m->nics[j].rdma)
    return m->nics[i].rdma > m->nics[j].rdma;
  if (m->nics[i].link_gbs != m->nics[j].link_gbs)
    return m->nics[i].link_gbs > m->nics[j].link_gbs;
  return i < j;
}

int topo_gpu_nearest_nic(const topo_machine_t *m, int gpu, topo_near_t *near) {
  if (gpu < 0 || gpu >= m->ngpus)
    return -1;
  int best = -1, best_d = -1;
  topo_near_t best_n = TOPO_NEAR_SYS;
  for (int i = 0; i < m->nnics; i++) {
    int d;
    topo_near_t n = topo_pci_near(m, &m->gpus[gpu].pci, &m->nics[i].pci, &d);
    if (best < 0 || nic_better(m, i, n, d, best, best_n, best_d)) {
      best = i;
      best_n = n;
      best_d = d;
    }
  }
  if (near && best >= 0)
    *near = best_n;
  return best;
}

int topo_cpu_nearest_nic(const topo_machine_t *m, int numa, int package,
                         topo_near_t *near) {
  int best = -1;
  topo_near_t best_n = TOPO_NEAR_SYS;
  for (int i = 0; i < m->nnics; i++) {
    const topo_pciloc_t *p = &m->nics[i].pci;
    topo_near_t n = numa >= 0 && p->numa == numa            ? TOPO_NEAR_NODE
                    : package >= 0 && p->package == package ? TOPO_NEAR_PKG
                                                            : TOPO_NEAR_SYS;
    if (best < 0 || nic_better(m, i, n, 0, best, best_n, 0)) {
      best = i;
      best_n = n;
    }
  }
  if (near && best >= 0)
    *near = best_n;
  return best;
}

int topo_pci_group(const topo_machine_t *m, const topo_pciloc_t *p) {
  if (p->pcisw >= 0)
    return p->pcisw;
  return p->hostbridge >= 0 ? m->nswitches + p->hostbridge : -1;
}

const topo_pu_t *topo_cpu(const topo_machine_t *m, int cpu) {
  for (int i = 0; i < m->npus; i++)
    if (m->pus[i].os_index == cpu)
      return &m->pus[i];
  return NULL;
}

void topo_gpu_locs(const topo_machine_t *m, topo_loc_t *loc) {
  for (int g = 0; g < m->ngpus; g++) {
    const topo_pciloc_t *p = &m->gpus[g].pci;
    loc[g] = (topo_loc_t){0, p->package, p->numa, topo_pci_group(m, p), g};
  }
}

void topo_gpu_ring(const topo_machine_t *m, int *order) {
  if (m->ngpus <= 0)
    return;
  topo_loc_t *loc = malloc((size_t)m->ngpus * sizeof *loc);
  if (!loc) { /* the identity is a valid, if unaware, ring */
    for (int g = 0; g < m->ngpus; g++)
      order[g] = g;
    return;
  }
  topo_gpu_locs(m, loc);
  place_ring_order(m->ngpus, loc, order);
  free(loc);
}

int topo_ring_package_changes(const topo_machine_t *m, const int *order) {
  int n = m->ngpus, x = 0;
  if (n < 2)
    return 0;
  for (int i = 0; i < n; i++)
    if (m->gpus[order[i]].pci.package !=
        m->gpus[order[(i + 1) % n]].pci.package)
      x++;
  return x;
}

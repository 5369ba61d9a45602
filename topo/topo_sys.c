/*
 * topo_sys.c - this machine's model from /sys and /proc, for builds without
 * hwloc: CPUs (packages, cores, NUMA nodes), the PCI bridges above each
 * GPU, NIC and NVSwitch (from the device's path under /sys/devices), and
 * their NUMA nodes. Less than hwloc knows (no GPU links, no PCI link
 * speeds), but the same model, so every query works on it.
 */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "topo.h"

#define SYS_CPU "/sys/devices/system/cpu"
#define SYS_NODE "/sys/devices/system/node"
#define SYS_PCI "/sys/bus/pci/devices"

static int read_line(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  char *ok = fgets(buf, (int)len, f);
  fclose(f);
  if (!ok)
    return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

/* An integer file ("0", "0x10de"); dflt when missing or malformed. */
static long read_long(const char *path, long dflt) {
  char buf[64];
  if (read_line(path, buf, sizeof buf) != 0)
    return dflt;
  char *end;
  long v = strtol(buf, &end, 0);
  return end == buf ? dflt : v;
}

/* Expands a kernel CPU list ("0-3,8,10-11") into *cpus. */
static sharc_status_t cpulist(const char *s, int **cpus, int *n) {
  while (*s) {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s)
      break;
    if (*end == '-')
      b = strtol(end + 1, &end, 10);
    for (long c = a; c <= b; c++) {
      int *p = topo_push((void **)cpus, n, sizeof *p);
      if (!p)
        return err_set(SHARC_ERR_NO_MEM, "topo: out of memory");
      *p = (int)c;
    }
    s = *end == ',' ? end + 1 : end;
    if (*end != ',')
      break;
  }
  return SHARC_OK;
}

static int numa_dir_filter(const struct dirent *d) {
  return !strncmp(d->d_name, "node", 4) && isdigit((unsigned char)d->d_name[4]);
}
static int numa_dir_cmp(const struct dirent **a, const struct dirent **b) {
  return atoi((*a)->d_name + 4) - atoi((*b)->d_name + 4);
}

static int numa_of_os(const topo_machine_t *m, long os) {
  for (int i = 0; i < m->nnuma; i++)
    if (m->numa[i].os_index == os)
      return i;
  return -1;
}

static sharc_status_t sys_cpus(topo_machine_t *m) {
  char line[4096], path[PATH_MAX];
  int *cpus = NULL, ncpu = 0;
  sharc_status_t st = SHARC_OK;
  if (read_line(SYS_CPU "/online", line, sizeof line) != 0)
    snprintf(line, sizeof line, "0-%ld", sysconf(_SC_NPROCESSORS_ONLN) - 1);
  CHECK_GOTO(cpulist(line, &cpus, &ncpu), st, out);
  if (ncpu == 0) {
    st = err_set(SHARC_ERR_SYSTEM, "topo: no online CPU in %s/online", SYS_CPU);
    goto out;
  }
  /* Packages are numbered in order of their kernel id, cores in order of
   * first appearance; pkgid/coreid hold the kernel's ids per PU. */
  m->pus = calloc((size_t)ncpu, sizeof *m->pus);
  long *pkgid = calloc((size_t)ncpu, sizeof *pkgid);
  long *coreid = calloc((size_t)ncpu, sizeof *coreid);
  long *pkgs = calloc((size_t)ncpu, sizeof *pkgs);
  if (!m->pus || !pkgid || !coreid || !pkgs) {
    free(pkgid);
    free(coreid);
    free(pkgs);
    st = err_set(SHARC_ERR_NO_MEM, "topo: out of memory");
    goto out;
  }
  m->npus = ncpu;
  int npkg = 0;
  for (int i = 0; i < ncpu; i++) {
    snprintf(path, sizeof path, SYS_CPU "/cpu%d/topology/physical_package_id",
             cpus[i]);
    pkgid[i] = read_long(path, 0);
    snprintf(path, sizeof path, SYS_CPU "/cpu%d/topology/core_id", cpus[i]);
    coreid[i] = read_long(path, cpus[i]);
    int k = 0;
    while (k < npkg && pkgs[k] != pkgid[i])
      k++;
    if (k == npkg)
      pkgs[npkg++] = pkgid[i];
  }
  for (int i = 1; i < npkg; i++) /* sort the few package ids */
    for (int j = i; j > 0 && pkgs[j - 1] > pkgs[j]; j--) {
      long t = pkgs[j];
      pkgs[j] = pkgs[j - 1];
      pkgs[j - 1] = t;
    }
  m->npackages = npkg;
  m->packages = calloc((size_t)npkg, sizeof *m->packages);
  if (!m->packages) {
    st = err_set(SHARC_ERR_NO_MEM, "topo: out of memory");
  } else {
    char model[TOPO_NAME_MAX] = "";
    FILE *f = fopen("/proc/cpuinfo", "re");
    while (f && fgets(line, sizeof line, f))
      if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
        char *v = strchr(line, ':') + 1;
        v += strspn(v, " \t");
        v[strcspn(v, "\n")] = '\0';
        snprintf(model, sizeof model, "%s", v);
        break;
      }
    if (f)
      fclose(f);
    for (int p = 0; p < npkg; p++) {
      m->packages[p].os_index = (int)pkgs[p];
      snprintf(m->packages[p].model, sizeof m->packages[p].model, "%s", model);
    }
    for (int i = 0; i < ncpu; i++) {
      topo_pu_t *pu = &m->pus[i];
      pu->os_index = cpus[i];
      pu->numa = -1;
      for (int p = 0; p < npkg; p++)
        if (pkgs[p] == pkgid[i])
          pu->package = p;
      pu->core = -1;
      for (int j = 0; j < i && pu->core < 0; j++)
        if (pkgid[j] == pkgid[i] && coreid[j] == coreid[i])
          pu->core = m->pus[j].core;
      if (pu->core < 0) {
        pu->core = m->ncores++;
        m->packages[pu->package].ncores++;
      }
      m->packages[pu->package].npus++;
    }
  }
  free(pkgid);
  free(coreid);
  free(pkgs);
out:
  free(cpus);
  return st;
}

/* NUMA nodes from /sys/devices/system/node; one node holding everything
 * when the kernel has no NUMA support. */
static sharc_status_t sys_numa(topo_machine_t *m) {
  struct dirent **ents = NULL;
  int nd = scandir(SYS_NODE, &ents, numa_dir_filter, numa_dir_cmp);
  char path[PATH_MAX], line[4096];
  sharc_status_t st = SHARC_OK;
  m->nnuma = nd > 0 ? nd : 1;
  m->numa = calloc((size_t)m->nnuma, sizeof *m->numa);
  if (!m->numa) {
    st = err_set(SHARC_ERR_NO_MEM, "topo: out of memory");
    goto out;
  }
  for (int n = 0; n < m->nnuma; n++) {
    topo_numa_t *nu = &m->numa[n];
    nu->os_index = nd > 0 ? atoi(ents[n]->d_name + 4) : 0;
    nu->package = -1;
    int *cpus = NULL, ncpu = 0;
    if (nd > 0) {
      snprintf(path, sizeof path, SYS_NODE "/node%d/cpulist", nu->os_index);
      if (read_line(path, line, sizeof line) == 0)
        CHECK_GOTO(cpulist(line, &cpus, &ncpu), st, out);
    }
    for (int i = 0; i < m->npus; i++) {
      int in = nd <= 0;
      for (int c = 0; c < ncpu && !in; c++)
        in = cpus[c] == m->pus[i].os_index;
      if (!in)
        continue;
      m->pus[i].numa = n;
      nu->npus++;
      if (nu->package < 0)
        nu->package = m->pus[i].package;
      int first = 1; /* count a core at its first PU */
      for (int j = 0; j < i; j++)
        first &= !(m->pus[j].core == m->pus[i].core && m->pus[j].numa == n);
      nu->ncores += first;
    }
    free(cpus);
    /* "Node 0 MemTotal:  14510284 kB" (per node) or /proc/meminfo. */
    if (nd > 0)
      snprintf(path, sizeof path, SYS_NODE "/node%d/meminfo", nu->os_index);
    FILE *f = fopen(nd > 0 ? path : "/proc/meminfo", "re");
    while (f && fgets(line, sizeof line, f)) {
      char *p = strstr(line, "MemTotal:");
      if (p) {
        nu->bytes = strtoull(p + 9, NULL, 10) * 1024ull;
        break;
      }
    }
    if (f)
      fclose(f);
  }
out:
  for (int i = 0; i < nd; i++)
    free(ents[i]);
  free(ents);
  return st;
}

static int is_busid(const char *s) {
  unsigned d, b, v, f;
  char tail;
  return sscanf(s, "%x:%x:%x.%x%c", &d, &b, &v, &f, &tail) == 4;
}

static long pci_attr(const char *busid, const char *attr) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, SYS_PCI "/%s/%s", busid, attr);
  return read_long(path, -1);
}

/* The bridge busid under parent, added if new; -2 when out of memory. */
static int bridge_node(topo_machine_t *m, const char *busid, int parent) {
  for (int i = 0; i < m->npci; i++)
    if (m->pci[i].parent == parent && !strcmp(m->pci[i].busid, busid))
      return i;
  int i = topo_pci_add(m, busid, parent);
  return i < 0 ? -2 : i;
}

/* Walks a device path (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0
 * [/virtio0]), adding the host bridge and the bridges above the device.
 * *dev gets the device's bus id (the last PCI component); returns the index
 * of the nearest bridge above it, -1 when the path is not on PCI, -2 when
 * out of memory. */
static int pci_place(topo_machine_t *m, const char *path, char *dev,
                     size_t devlen) {
  const char *root = strstr(path, "/pci");
  if (!root)
    return -1;
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", root + 4); /* "0000:00/0000:00:01.0/..." */
  char *save = NULL, *c = strtok_r(buf, "/", &save);
  if (!c)
    return -1;
  int cur = -1;
  for (int i = 0; i < m->npci && cur < 0; i++)
    if (m->pci[i].kind == TOPO_PCI_HOSTBRIDGE && !strcmp(m->pci[i].busid, c))
      cur = i;
  if (cur < 0 && (cur = topo_pci_add(m, c, -1)) < 0)
    return -2;
  char prev[TOPO_BUSID_MAX] = "";
  for (c = strtok_r(NULL, "/", &save); c && is_busid(c);
       c = strtok_r(NULL, "/", &save)) {
    if (prev[0] && (pci_attr(prev, "class") >> 8) == 0x0604 &&
        (cur = bridge_node(m, prev, cur)) < 0)
      return -2;
    snprintf(prev, sizeof prev, "%s", c);
  }
  snprintf(dev, devlen, "%s", prev);
  return prev[0] ? cur : -1;
}

static void sys_locality(topo_machine_t *m, const char *busid,
                         topo_pciloc_t *p) {
  p->numa = numa_of_os(m, pci_attr(busid, "numa_node"));
  if (p->numa >= 0)
    p->package = m->numa[p->numa].package;
}

static sharc_status_t sys_pci(topo_machine_t *m) {
  struct dirent **ents = NULL;
  int nd = scandir(SYS_PCI, &ents, NULL, alphasort);
  sharc_status_t st = SHARC_OK;
  char path[PATH_MAX], real[PATH_MAX], dev[TOPO_BUSID_MAX];
  for (int i = 0; i < nd && st == SHARC_OK; i++) {
    const char *id = ents[i]->d_name;
    if (!is_busid(id))
      continue;
    snprintf(path, sizeof path, SYS_PCI "/%s", id);
    if (!realpath(path, real))
      continue;
    int bridge = pci_place(m, real, dev, sizeof dev);
    if (bridge == -2) {
      st = err_set(SHARC_ERR_NO_MEM, "topo: out of memory");
      break;
    }
    long cls = pci_attr(id, "class") >> 8, vendor = pci_attr(id, "vendor");
    if (cls == 0x0604 && bridge >= 0 && bridge_node(m, id, bridge) < 0) {
      st = err_set(SHARC_ERR_NO_MEM, "topo: out of memory");
      break;
    }
    if (vendor != 0x10de)
      continue;
    topo_pciloc_t *p = NULL;
    if (cls == 0x0302 || cls == 0x0300) {
      topo_gpu_t *g = topo_push((void **)&m->gpus, &m->ngpus, sizeof *g);
      if (g) {
        p = &g->pci;
        snprintf(g->model, sizeof g->model, "NVIDIA [10de:%04lx]",
                 pci_attr(id, "device") & 0xffff);
        topo_nvidia_model(id, g->model, sizeof g->model);
      }
    } else if (cls == 0x0680) {
      topo_nvswitch_t *s =
          topo_push((void **)&m->nvswitches, &m->nnvswitches, sizeof *s);
      p = s ? &s->pci : NULL;
    } else {
      continue;
    }
    if (!p) {
      st = err_set(SHARC_ERR_NO_MEM, "topo: out of memory");
      break;
    }
    topo_pciloc_init(p);
    topo_copy(p->busid, sizeof p->busid, id);
    p->bridge = bridge;
    sys_locality(m, id, p);
  }
  for (int i = 0; i < nd; i++)
    free(ents[i]);
  free(ents);
  return st;
}

/* Network interfaces and RDMA devices on PCI, merged per PCI device. */
static sharc_status_t sys_nics(topo_machine_t *m, const char *cls_dir,
                               int rdma) {
  struct dirent **ents = NULL;
  int nd = scandir(cls_dir, &ents, NULL, alphasort);
  sharc_status_t st = SHARC_OK;
  char path[PATH_MAX], real[PATH_MAX], dev[TOPO_BUSID_MAX];
  for (int i = 0; i < nd && st == SHARC_OK; i++) {
    const char *name = ents[i]->d_name;
    snprintf(path, sizeof path, "%s/%s/device", cls_dir, name);
    if (name[0] == '.' || !realpath(path, real))
      continue; /* virtual: lo, veth, bridges */
    int bridge = pci_place(m, real, dev, sizeof dev);
    if (bridge == -2) {
      st = err_set(SHARC_ERR_NO_MEM, "topo: out of memory");
      break;
    }
    if (bridge < 0)
      continue;
    topo_nic_t *n = NULL;
    for (int k = 0; k < m->nnics && !n; k++)
      if (!strcmp(m->nics[k].pci.busid, dev))
        n = &m->nics[k];
    if (!n) {
      n = topo_push((void **)&m->nics, &m->nnics, sizeof *n);
      if (!n) {
        st = err_set(SHARC_ERR_NO_MEM, "topo: out of memory");
        break;
      }
      topo_pciloc_init(&n->pci);
      snprintf(n->pci.busid, sizeof n->pci.busid, "%s", dev);
      n->pci.bridge = bridge;
      sys_locality(m, dev, &n->pci);
      snprintf(n->model, sizeof n->model, "[%04lx:%04lx]",
               pci_attr(dev, "vendor") & 0xffff,
               pci_attr(dev, "device") & 0xffff);
    }
    if (rdma) {
      if (!n->rdma)
        topo_copy(n->name, sizeof n->name, name);
      n->rdma = 1;
    } else {
      topo_words_add(n->netdevs, sizeof n->netdevs, name);
      if (!n->name[0])
        topo_copy(n->name, sizeof n->name, name);
    }
  }
  for (int i = 0; i < nd; i++)
    free(ents[i]);
  free(ents);
  return st;
}

sharc_status_t topo_sys_discover(topo_machine_t *m) {
  CHECK(sys_cpus(m));
  CHECK(sys_numa(m));
  CHECK(sys_pci(m));
  CHECK(sys_nics(m, "/sys/class/infiniband", 1));
  CHECK(sys_nics(m, "/sys/class/net", 0));
  return SHARC_OK;
}

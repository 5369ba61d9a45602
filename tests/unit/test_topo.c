/*
 * test_topo.c - the machine model of topo/topo.h on real machines' hwloc
 * exports (tests/topo/xml/): what a person reading `lstopo --input FILE`
 * concludes (GPUs, NUMA nodes, NICs, switches) and the choices sharc makes
 * from it (nearest NIC, GPU ring); this machine's discovery; errors for
 * missing and foreign files; and the pure nearness rules on a model built
 * by hand. In a build without hwloc the XML part cannot run: the test then
 * exits 77 (skipped) after the rest passed.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "expect.h"
#include "topo.h"

#ifndef SHARC_TOPO_XML_DIR
#error "SHARC_TOPO_XML_DIR (tests/topo/xml) must be defined by the build"
#endif

static void xml_path(const char *name, char *out, size_t len) {
  snprintf(out, len, "%s/%s", SHARC_TOPO_XML_DIR, name);
}

static topo_machine_t *load(const char *name) {
  char path[1024];
  xml_path(name, path, sizeof path);
  topo_machine_t *m = NULL;
  sharc_status_t st = topo_machine_load(path, &m);
  EXPECT(st == SHARC_OK && m, "%s: %s (%s)", name, err_last(),
         sharc_status_name(st));
  return st == SHARC_OK ? m : NULL;
}

static int gpu_at(const topo_machine_t *m, const char *busid) {
  for (int g = 0; g < m->ngpus; g++)
    if (!strcmp(m->gpus[g].pci.busid, busid))
      return g;
  return -1;
}

static int nic_named(const topo_machine_t *m, const char *name) {
  for (int i = 0; i < m->nnics; i++)
    if (!strcmp(m->nics[i].name, name))
      return i;
  return -1;
}

static int is_permutation(int n, const int *order) {
  int seen[64] = {0};
  for (int i = 0; i < n; i++) {
    if (order[i] < 0 || order[i] >= n || seen[order[i]])
      return 0;
    seen[order[i]] = 1;
  }
  return 1;
}

/* Links of GPU g to devices of kind k. */
static int links_of(const topo_machine_t *m, int g, topo_end_kind_t k) {
  int n = 0;
  for (int i = 0; i < m->nlinks; i++) {
    const topo_link_t *l = &m->links[i];
    n += (l->akind == TOPO_END_GPU && l->a == g && l->bkind == k) ||
         (l->bkind == TOPO_END_GPU && l->b == g && l->akind == k);
  }
  return n;
}

static uint64_t gpu_link(const topo_machine_t *m, int a, int b) {
  for (int i = 0; i < m->nlinks; i++) {
    const topo_link_t *l = &m->links[i];
    if (l->akind == TOPO_END_GPU && l->bkind == TOPO_END_GPU &&
        ((l->a == a && l->b == b) || (l->a == b && l->b == a)))
      return l->value;
  }
  return 0;
}

static void test_dgx2(void) {
  topo_machine_t *m = load("nvidia-dgx2-16gpu.xml");
  if (!m)
    return;
  EXPECT(m->ngpus == 16, "%d GPUs", m->ngpus);
  EXPECT(m->npackages == 2, "%d packages", m->npackages);
  EXPECT(m->nnuma == 2, "%d NUMA nodes", m->nnuma);
  EXPECT(m->nnvswitches == 12, "%d NVSwitches", m->nnvswitches);
  EXPECT(m->nnics == 0, "%d NICs", m->nnics);
  /* Two levels of PLX switches: one upstream port per 4 GPUs (and one per
   * NVSwitch tray) plus one per GPU pair and per NVSwitch group. */
  EXPECT(m->nswitches == 14, "%d PCI switches", m->nswitches);
  EXPECT(!strcmp(m->product, "NVIDIA DGX-2H"), "product '%s'", m->product);
  EXPECT(m->ngpus > 0 && !strcmp(m->gpus[0].pci.busid, "0000:34:00.0"),
         "gpu0 at %s", m->ngpus ? m->gpus[0].pci.busid : "-");
  EXPECT(m->ngpus > 0 && strstr(m->gpus[0].model, "V100"), "gpu0 is '%s'",
         m->ngpus ? m->gpus[0].model : "-");
  EXPECT(m->ngpus > 0 && !strcmp(m->gpus[0].osdevs, "nvml0"), "osdevs '%s'",
         m->ngpus ? m->gpus[0].osdevs : "-");
  int per_numa[2] = {0, 0};
  for (int g = 0; g < m->ngpus; g++) {
    int n = m->gpus[g].pci.numa;
    EXPECT(n == (g < 8 ? 0 : 1), "gpu%d on NUMA %d", g, n);
    EXPECT(m->gpus[g].pci.package == n, "gpu%d package %d", g,
           m->gpus[g].pci.package);
    EXPECT(m->gpus[g].pci.pcisw >= 0, "gpu%d has no PCI switch", g);
    EXPECT(links_of(m, g, TOPO_END_NVSWITCH) == 6, "gpu%d: %d NVSwitch links",
           g, links_of(m, g, TOPO_END_NVSWITCH));
    EXPECT(topo_gpu_nearest_nic(m, g, NULL) == -1, "gpu%d has a NIC", g);
    if (n == 0 || n == 1)
      per_numa[n]++;
  }
  EXPECT(per_numa[0] == 8 && per_numa[1] == 8, "GPUs per NUMA %d/%d",
         per_numa[0], per_numa[1]);
  for (int s = 0; s < m->nnvswitches; s++)
    EXPECT(m->nvswitches[s].pci.numa == (s < 6 ? 0 : 1),
           "NVSwitch %s on NUMA %d", m->nvswitches[s].pci.busid,
           m->nvswitches[s].pci.numa);
  /* PCI nearness as nvidia-smi topo -m would put it. */
  const topo_pciloc_t *g0 = &m->gpus[0].pci;
  EXPECT(topo_pci_near(m, g0, &m->gpus[1].pci, NULL) == TOPO_NEAR_PIX, "0-1");
  EXPECT(topo_pci_near(m, g0, &m->gpus[2].pci, NULL) == TOPO_NEAR_PXB, "0-2");
  EXPECT(topo_pci_near(m, g0, &m->gpus[4].pci, NULL) == TOPO_NEAR_NODE, "0-4");
  EXPECT(topo_pci_near(m, g0, &m->gpus[8].pci, NULL) == TOPO_NEAR_SYS, "0-8");
  /* The ring visits each socket's 8 GPUs consecutively. */
  int order[16];
  topo_gpu_ring(m, order);
  EXPECT(is_permutation(16, order), "ring is not a permutation");
  EXPECT(topo_ring_package_changes(m, order) == 2, "%d socket changes",
         topo_ring_package_changes(m, order));
  EXPECT(order[0] == 0, "ring starts at gpu%d", order[0]);
  for (int i = 0; i + 1 < 16; i += 2) /* GPU pairs of a switch adjacent */
    EXPECT(m->gpus[order[i]].pci.pcisw == m->gpus[order[i + 1]].pci.pcisw,
           "ring positions %d,%d on switches %d,%d", i, i + 1,
           m->gpus[order[i]].pci.pcisw, m->gpus[order[i + 1]].pci.pcisw);
  topo_machine_free(m);
}

static void test_24em64t(void) {
  topo_machine_t *m = load("24em64t-2n6c2t-pci.xml");
  if (!m)
    return;
  EXPECT(m->nnuma == 2 && m->npackages == 2, "%d NUMA nodes, %d packages",
         m->nnuma, m->npackages);
  EXPECT(m->ncores == 12 && m->npus == 24, "%d cores, %d PUs", m->ncores,
         m->npus);
  EXPECT(m->ngpus == 3, "%d GPUs (the ATI VGA is not one)", m->ngpus);
  EXPECT(m->nnics == 3, "%d NICs (eth0, eth1, mlx4_0)", m->nnics);
  int ib = nic_named(m, "mlx4_0");
  EXPECT(ib >= 0, "no mlx4_0");
  if (ib >= 0) {
    const topo_nic_t *n = &m->nics[ib];
    EXPECT(n->rdma, "mlx4_0 not RDMA");
    EXPECT(strstr(n->netdevs, "ib0") && strstr(n->netdevs, "eth2"),
           "mlx4_0 interfaces '%s'", n->netdevs);
    EXPECT(n->pci.numa == 0, "mlx4_0 on NUMA %d", n->pci.numa);
    EXPECT(!strcmp(n->pci.busid, "0000:05:00.0"), "mlx4_0 at %s", n->pci.busid);
  }
  int g6 = gpu_at(m, "0000:06:00.0"), g11 = gpu_at(m, "0000:11:00.0"),
      g14 = gpu_at(m, "0000:14:00.0");
  EXPECT(g6 >= 0 && g11 >= 0 && g14 >= 0, "GPUs %d %d %d", g6, g11, g14);
  if (g6 >= 0 && g11 >= 0 && g14 >= 0 && ib >= 0) {
    EXPECT(m->gpus[g6].pci.numa == 0, "06:00.0 on NUMA %d",
           m->gpus[g6].pci.numa);
    EXPECT(m->gpus[g11].pci.numa == 1 && m->gpus[g14].pci.numa == 1,
           "11:00.0 on NUMA %d, 14:00.0 on NUMA %d", m->gpus[g11].pci.numa,
           m->gpus[g14].pci.numa);
    topo_near_t near;
    /* The Ethernet ports share the host bridge too: RDMA wins the tie. */
    EXPECT(topo_gpu_nearest_nic(m, g6, &near) == ib && near == TOPO_NEAR_PHB,
           "06:00.0 -> nic %d (%s)", topo_gpu_nearest_nic(m, g6, NULL),
           topo_near_name(near));
    EXPECT(topo_gpu_nearest_nic(m, g11, &near) == ib && near == TOPO_NEAR_SYS,
           "11:00.0 -> nic %d (%s)", topo_gpu_nearest_nic(m, g11, NULL),
           topo_near_name(near));
  }
  int order[3];
  topo_gpu_ring(m, order);
  EXPECT(is_permutation(3, order) && topo_ring_package_changes(m, order) == 2,
         "ring %d %d %d", order[0], order[1], order[2]);
  topo_machine_free(m);
}

static void test_32em64t(void) {
  topo_machine_t *m = load("32em64t-2n8c2t-pci-normalio.xml");
  if (!m)
    return;
  EXPECT(m->nnuma == 2, "%d NUMA nodes", m->nnuma);
  EXPECT(m->ngpus == 3, "%d GPUs (the AMD VGA at 84:00.1 is not one)",
         m->ngpus);
  int ib = nic_named(m, "mlx5_0");
  int g3 = gpu_at(m, "0000:03:00.0"), g83 = gpu_at(m, "0000:83:00.0"),
      g84 = gpu_at(m, "0000:84:00.0");
  EXPECT(ib >= 0 && g3 >= 0 && g83 >= 0 && g84 >= 0, "nic %d, GPUs %d %d %d",
         ib, g3, g83, g84);
  if (ib < 0 || g3 < 0 || g83 < 0 || g84 < 0) {
    topo_machine_free(m);
    return;
  }
  EXPECT(m->nics[ib].pci.numa == 1 && !strcmp(m->nics[ib].netdevs, "ib0"),
         "mlx5_0 on NUMA %d with '%s'", m->nics[ib].pci.numa,
         m->nics[ib].netdevs);
  EXPECT(!strcmp(m->gpus[g84].osdevs, "cuda0") &&
             !strcmp(m->gpus[g84].model, "Tesla K40m"),
         "84:00.0 is '%s' (%s)", m->gpus[g84].model, m->gpus[g84].osdevs);
  EXPECT(m->gpus[g3].pci.numa == 0 && m->gpus[g83].pci.numa == 1 &&
             m->gpus[g84].pci.numa == 1,
         "NUMA %d %d %d", m->gpus[g3].pci.numa, m->gpus[g83].pci.numa,
         m->gpus[g84].pci.numa);
  topo_near_t near;
  EXPECT(topo_gpu_nearest_nic(m, g84, &near) == ib && near == TOPO_NEAR_PIX,
         "84:00.0 -> %s", topo_near_name(near));
  EXPECT(topo_gpu_nearest_nic(m, g83, &near) == ib && near == TOPO_NEAR_PHB,
         "83:00.0 -> %s", topo_near_name(near));
  EXPECT(topo_gpu_nearest_nic(m, g3, &near) == ib && near == TOPO_NEAR_SYS,
         "03:00.0 -> %s", topo_near_name(near));
  /* A CPU rank on NUMA 0 gets it too, only across the sockets. */
  EXPECT(topo_cpu_nearest_nic(m, 0, 0, &near) == ib && near == TOPO_NEAR_SYS,
         "NUMA 0 -> %s", topo_near_name(near));
  EXPECT(topo_cpu_nearest_nic(m, 1, 1, &near) == ib && near == TOPO_NEAR_NODE,
         "NUMA 1 -> %s", topo_near_name(near));
  topo_machine_free(m);
}

static void test_power8(void) {
  topo_machine_t *m = load("power8gpudistances.xml");
  if (!m)
    return;
  EXPECT(m->ngpus == 4 && m->nnuma == 2 && m->npackages == 2,
         "%d GPUs, %d NUMA, %d packages", m->ngpus, m->nnuma, m->npackages);
  for (int g = 0; g < m->ngpus; g++)
    EXPECT(m->gpus[g].pci.package == g / 2, "gpu%d in package %d", g,
           m->gpus[g].pci.package);
  EXPECT(m->ngpus == 4 && !strcmp(m->gpus[2].pci.busid, "000a:01:00.0"),
         "gpu2 at %s", m->ngpus == 4 ? m->gpus[2].pci.busid : "-");
  EXPECT(m->ngpus == 4 && !strcmp(m->gpus[0].osdevs, "cuda0 nvml0"),
         "gpu0 osdevs '%s'", m->ngpus ? m->gpus[0].osdevs : "-");
  /* NVLink pairs within a socket, and each GPU to its CPU. */
  EXPECT(gpu_link(m, 0, 1) == 40000 && gpu_link(m, 2, 3) == 40000,
         "pair links %llu %llu", (unsigned long long)gpu_link(m, 0, 1),
         (unsigned long long)gpu_link(m, 2, 3));
  EXPECT(gpu_link(m, 0, 2) == 0 && gpu_link(m, 1, 3) == 0,
         "no link across sockets");
  for (int g = 0; g < m->ngpus; g++)
    EXPECT(links_of(m, g, TOPO_END_PACKAGE) == 1, "gpu%d CPU links %d", g,
           links_of(m, g, TOPO_END_PACKAGE));
  int order[4], pos[4];
  topo_gpu_ring(m, order);
  EXPECT(is_permutation(4, order), "ring");
  for (int i = 0; i < 4; i++)
    pos[order[i] & 3] = i;
  int d01 = (pos[0] - pos[1] + 4) % 4, d23 = (pos[2] - pos[3] + 4) % 4;
  EXPECT((d01 == 1 || d01 == 3) && (d23 == 1 || d23 == 3),
         "socket pairs not adjacent: %d %d %d %d", order[0], order[1], order[2],
         order[3]);
  EXPECT(topo_ring_package_changes(m, order) == 2, "%d socket changes",
         topo_ring_package_changes(m, order));
  topo_machine_free(m);
}

/* SHARC_TOPO_FILE stands in for this machine when no path is given. */
static void test_env_file(void) {
  char path[1024];
  xml_path("power8gpudistances.xml", path, sizeof path);
  setenv("SHARC_TOPO_FILE", path, 1);
  topo_machine_t *m = NULL;
  sharc_status_t st = topo_machine_load(NULL, &m);
  EXPECT(st == SHARC_OK && m && m->from_file && m->ngpus == 4,
         "SHARC_TOPO_FILE: %s", err_last());
  topo_machine_free(m);
  setenv("SHARC_TOPO_FILE", "/nonexistent/topo.xml", 1);
  st = topo_machine_load(NULL, &m);
  EXPECT(st == SHARC_ERR_INVALID_ARG && !m &&
             strstr(err_last(), "SHARC_TOPO_FILE=/nonexistent/topo.xml"),
         "bad SHARC_TOPO_FILE: %s", err_last());
  unsetenv("SHARC_TOPO_FILE");
}

/* A truncated export: looks like hwloc XML, hwloc refuses it. */
static void test_truncated(void) {
  char src[1024], tmp[] = "/tmp/test_topo_XXXXXX";
  xml_path("nvidia-dgx2-16gpu.xml", src, sizeof src);
  int fd = mkstemp(tmp);
  FILE *in = fopen(src, "r");
  EXPECT(fd >= 0 && in, "temp file");
  if (fd >= 0 && in) {
    char buf[3000];
    size_t n = fread(buf, 1, sizeof buf, in);
    EXPECT(write(fd, buf, n) == (ssize_t)n, "write");
    close(fd);
    topo_machine_t *m = NULL;
    sharc_status_t st = topo_machine_load(tmp, &m);
    EXPECT(st == SHARC_ERR_INVALID_ARG && !m && strstr(err_last(), tmp),
           "truncated export: %s (%s)", err_last(), sharc_status_name(st));
  }
  if (in)
    fclose(in);
  unlink(tmp);
}

static void test_live(void) {
  unsetenv("SHARC_TOPO_FILE");
  topo_machine_t *m = NULL;
  sharc_status_t st = topo_machine_load(NULL, &m);
  EXPECT(st == SHARC_OK && m, "this machine: %s", err_last());
  if (!m)
    return;
  printf("this machine: %s: %d packages, %d NUMA nodes, %d cores, %d PUs, "
         "%d GPUs, %d NICs\n",
         m->source, m->npackages, m->nnuma, m->ncores, m->npus, m->ngpus,
         m->nnics);
  EXPECT(!m->from_file, "from_file");
  EXPECT(m->npackages >= 1 && m->nnuma >= 1 && m->ncores >= 1 &&
             m->npus >= m->ncores,
         "%d packages, %d NUMA, %d cores, %d PUs", m->npackages, m->nnuma,
         m->ncores, m->npus);
  int cores = 0, pus = 0;
  for (int n = 0; n < m->nnuma; n++) {
    cores += m->numa[n].ncores;
    pus += m->numa[n].npus;
  }
  EXPECT(cores == m->ncores && pus == m->npus, "NUMA nodes hold %d/%d", cores,
         pus);
  const topo_pu_t *pu = topo_cpu(m, sched_getcpu());
  EXPECT(pu && pu->numa >= 0 && pu->package >= 0, "CPU %d not in the model",
         sched_getcpu());
  for (int g = 0; g < m->ngpus; g++)
    EXPECT(m->gpus[g].pci.busid[0], "gpu%d without bus id", g);
  /* /sys alone (the no-hwloc path) agrees where it must. */
  topo_machine_t *s = calloc(1, sizeof *s);
  EXPECT(s && topo_sys_discover(s) == SHARC_OK, "/sys: %s", err_last());
  if (s) {
    topo_finish(s);
    EXPECT(s->npus >= 1 && s->ncores >= 1 && s->nnuma >= 1 &&
               s->npackages >= 1 && s->npus >= m->npus,
           "/sys: %d packages, %d NUMA, %d cores, %d PUs", s->npackages,
           s->nnuma, s->ncores, s->npus);
    EXPECT(s->ngpus == m->ngpus, "/sys finds %d GPUs, discovery %d", s->ngpus,
           m->ngpus);
    topo_machine_free(s);
  }
  topo_machine_free(m);
}

static void test_errors(void) {
  topo_machine_t *m = (topo_machine_t *)1;
  sharc_status_t st = topo_machine_load("/nonexistent/machine.xml", &m);
  EXPECT(st == SHARC_ERR_INVALID_ARG && m == NULL, "missing: %s",
         sharc_status_name(st));
  EXPECT(strstr(err_last(), "/nonexistent/machine.xml") &&
             strstr(err_last(), "lstopo"),
         "message '%s'", err_last());
  char tmp[] = "/tmp/test_topo_XXXXXX";
  int fd = mkstemp(tmp);
  EXPECT(fd >= 0, "mkstemp");
  if (fd >= 0) {
    const char junk[] = "this is not XML at all\n\x01\x02\xff";
    EXPECT(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk, "write");
    close(fd);
    st = topo_machine_load(tmp, &m);
    EXPECT(st == SHARC_ERR_INVALID_ARG && m == NULL, "garbage: %s",
           sharc_status_name(st));
    EXPECT(strstr(err_last(), "not an hwloc XML export"), "message '%s'",
           err_last());
    unlink(tmp);
  }
  /* A directory. */
  st = topo_machine_load("/", &m);
  EXPECT(st == SHARC_ERR_INVALID_ARG && m == NULL, "directory: %s (%s)",
         sharc_status_name(st), err_last());
  /* Exports the fuzzer found that hwloc 2.9 cannot take: refused with a
   * message, and this process lives on. One crashes hwloc itself; hwloc
   * reads the other only by growing bitmaps by a GiB (a PU without
   * os_index; found by running the fuzzer out of memory). */
  static const char *const bad[][2] = {
      {"hwloc-crash-no-complete-cpuset.xml", "hwloc crashed"},
      {"hwloc-1gib-pu-without-os-index.xml", "hwloc needed more than 256 MiB"},
  };
  for (size_t i = 0; topo_have_hwloc() && i < sizeof bad / sizeof *bad; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/../../fuzz/regress/fuzz_topo_xml/%s",
             SHARC_TOPO_XML_DIR, bad[i][0]);
    st = topo_machine_load(path, &m);
    EXPECT(st == SHARC_ERR_INVALID_ARG && m == NULL &&
               strstr(err_last(), bad[i][1]),
           "%s: %s (%s)", bad[i][0], sharc_status_name(st), err_last());
  }
}

/* A model built by hand: host bridge 0 with a root port (1) holding a
 * switch (2: upstream port, 3 and 4: downstream ports); host bridge 5 with
 * root port 6; another package's host bridge 7 with root port 8.
 *
 *   gpu0 under 3, gpu1 under 3, gpu2 under 4, nic0 (eth, fast) under 4,
 *   nic1 (rdma, slow) under 6, nic2 (rdma) under 8, gpu3 under 8. */
static void test_pure(void) {
  topo_machine_t *m = calloc(1, sizeof *m);
  if (!m)
    return;
  m->npackages = 2;
  m->nnuma = 2;
  m->numa = calloc(2, sizeof *m->numa);
  m->numa[0].package = 0;
  m->numa[1].package = 1;
  int hb0 = topo_pci_add(m, "0000:[00-3f]", -1);
  int rp1 = topo_pci_add(m, "0000:00:01.0", hb0);
  int up = topo_pci_add(m, "0000:01:00.0", rp1);
  int dn3 = topo_pci_add(m, "0000:02:00.0", up);
  int dn4 = topo_pci_add(m, "0000:02:01.0", up);
  int hb5 = topo_pci_add(m, "0000:[40-7f]", -1);
  int rp6 = topo_pci_add(m, "0000:40:01.0", hb5);
  int hb7 = topo_pci_add(m, "0000:[80-ff]", -1);
  int rp8 = topo_pci_add(m, "0000:80:01.0", hb7);
  struct {
    int bridge, numa;
  } gpus[] = {{dn3, 0}, {dn3, 0}, {dn4, 0}, {rp8, 1}},
    nics[] = {{dn4, 0}, {rp6, 0}, {rp8, 1}};
  for (int i = 0; i < 4; i++) {
    topo_gpu_t *g = topo_push((void **)&m->gpus, &m->ngpus, sizeof *g);
    topo_pciloc_init(&g->pci);
    snprintf(g->pci.busid, sizeof g->pci.busid, "0000:%02x:00.0", 0x10 + i);
    g->pci.bridge = gpus[i].bridge;
    g->pci.numa = gpus[i].numa;
  }
  for (int i = 0; i < 3; i++) {
    topo_nic_t *n = topo_push((void **)&m->nics, &m->nnics, sizeof *n);
    topo_pciloc_init(&n->pci);
    n->pci.bridge = nics[i].bridge;
    n->pci.numa = nics[i].numa;
    n->rdma = i > 0;
    n->link_gbs = i == 0 ? 25 : 4;
    snprintf(n->name, sizeof n->name, "nic%d", i);
  }
  topo_finish(m);
  EXPECT(m->nswitches == 1, "%d switches", m->nswitches);
  EXPECT(m->pci[up].sw == 0 && m->pci[dn3].sw == 0 && m->pci[dn4].sw == 0 &&
             m->pci[rp1].sw == -1,
         "switch ports %d %d %d %d", m->pci[up].sw, m->pci[dn3].sw,
         m->pci[dn4].sw, m->pci[rp1].sw);
  EXPECT(m->gpus[0].pci.package == 0 && m->gpus[3].pci.package == 1,
         "packages from NUMA");
  EXPECT(m->gpus[0].pci.hostbridge == hb0 && m->gpus[3].pci.pcisw == -1,
         "hostbridge %d, pcisw %d", m->gpus[0].pci.hostbridge,
         m->gpus[3].pci.pcisw);
  const topo_pciloc_t *g = &m->gpus[0].pci;
  EXPECT(topo_pci_near(m, g, &m->gpus[1].pci, NULL) == TOPO_NEAR_PIX, "0-1");
  EXPECT(topo_pci_near(m, g, &m->gpus[2].pci, NULL) == TOPO_NEAR_PIX,
         "0-2: ports of one switch");
  EXPECT(topo_pci_near(m, g, &m->nics[1].pci, NULL) == TOPO_NEAR_NODE, "0-n1");
  EXPECT(topo_pci_near(m, g, &m->gpus[3].pci, NULL) == TOPO_NEAR_SYS, "0-3");
  topo_near_t near;
  /* Same switch beats the RDMA NIC further away. */
  EXPECT(topo_gpu_nearest_nic(m, 0, &near) == 0 && near == TOPO_NEAR_PIX,
         "gpu0 -> nic%d", topo_gpu_nearest_nic(m, 0, NULL));
  EXPECT(topo_gpu_nearest_nic(m, 3, &near) == 2 && near == TOPO_NEAR_PIX,
         "gpu3 -> nic%d", topo_gpu_nearest_nic(m, 3, NULL));
  /* Equal nearness (NODE): RDMA beats the faster Ethernet. */
  EXPECT(topo_cpu_nearest_nic(m, 0, 0, &near) == 1 && near == TOPO_NEAR_NODE,
         "NUMA 0 -> nic%d", topo_cpu_nearest_nic(m, 0, 0, NULL));
  EXPECT(topo_gpu_nearest_nic(m, 9, NULL) == -1, "gpu out of range");
  int order[4];
  topo_gpu_ring(m, order);
  EXPECT(is_permutation(4, order) && order[3] == 3, "ring ends at gpu%d",
         order[3]);
  EXPECT(!strcmp(topo_near_name(TOPO_NEAR_PXB), "PXB") &&
             !strcmp(topo_near_name((topo_near_t)42), "?"),
         "names");
  m->ngpus = 0;
  EXPECT(topo_gpu_nearest_nic(m, 0, NULL) == -1, "no GPU");
  topo_machine_free(m);
}

int main(void) {
  test_pure();
  test_live();
  test_errors();
  if (!topo_have_hwloc()) {
    /* XML exports need hwloc: they are refused with a clear error. */
    char path[1024];
    xml_path("power8gpudistances.xml", path, sizeof path);
    topo_machine_t *m = NULL;
    sharc_status_t st = topo_machine_load(path, &m);
    EXPECT(st == SHARC_ERR_UNSUPPORTED && !m &&
               strstr(err_last(), "without hwloc"),
           "no-hwloc XML: %s", err_last());
    printf("test_topo: %d passed, %d failed\n", passed, failed);
    if (failed)
      return 1;
    printf("SKIP: the hwloc XML tests need hwloc (this build has "
           "SHARC_WITH_HWLOC=OFF or no libhwloc-dev)\n");
    return 77;
  }
  test_dgx2();
  test_24em64t();
  test_32em64t();
  test_power8();
  test_env_file();
  test_truncated();
  printf("test_topo: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

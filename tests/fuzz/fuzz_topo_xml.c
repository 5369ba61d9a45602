/*
 * fuzz_topo_xml.c - libFuzzer target for the topology path from an hwloc
 * XML export (SHARC_TOPO_FILE, sharc-topo --xml) to the machine model and
 * the queries on it.
 *
 * Each input is written to one temporary file and loaded with
 * topo_machine_load, the loader users reach; a model that loads is then
 * walked by every query (GPU ring, nearest NICs, PCI nearness, CPU
 * lookup). hwloc parses the XML (it is not built with the sanitizers);
 * sharc's own code on what hwloc returns is what is checked here.
 *
 * hwloc itself crashes on some malformed exports (hwloc 2.9.0: an object
 * without complete_cpuset makes hwloc_topology_load read a NULL bitmap;
 * lstopo crashes the same way; regress/fuzz_topo_xml/ keeps such an
 * input). topo_machine_load itself first loads an export with hwloc alone
 * in a child process and refuses one that kills the child, so such inputs
 * end as an error here (see tests/fuzz/README.md).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hwloc.h>

#include "topo.h"

static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void cleanup(void) {
  if (path[0])
    unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  setenv("SHARC_DEBUG", "NONE", 1);
  setenv("HWLOC_HIDE_ERRORS", "2", 1); /* hwloc's own complaints */
  /* hwloc's own XML reader rather than its libxml2 plugin: the plugin's
   * leaks on bad input come from a library unloaded before LeakSanitizer
   * can name it (so lsan.supp cannot tell them from sharc's), and hwloc
   * reads the same exports either way. */
  setenv("HWLOC_LIBXML_IMPORT", "0", 1);
  unsetenv("SHARC_TOPO_FILE");
  snprintf(path, sizeof path, "/tmp/fuzz_topo_xml.%d.xml", (int)getpid());
  atexit(cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f)
    abort();
  if (size && fwrite(data, 1, size, f) != size)
    abort();
  fclose(f);
  /* topo_machine_load screens exports that crash hwloc itself (in a
   * child process) and refuses them. */
  topo_machine_t *m = NULL;
  if (topo_machine_load(path, &m) != SHARC_OK)
    return 0;
  if (!m || m->ngpus < 0 || m->nnics < 0)
    abort();
  if (m->ngpus > 0) {
    int *order = malloc((size_t)m->ngpus * sizeof *order);
    topo_loc_t *loc = malloc((size_t)m->ngpus * sizeof *loc);
    if (order && loc) {
      topo_gpu_ring(m, order);
      topo_ring_package_changes(m, order);
      topo_gpu_locs(m, loc);
    }
    free(order);
    free(loc);
  }
  for (int g = 0; g < m->ngpus; g++) {
    topo_near_t nr;
    int nic = topo_gpu_nearest_nic(m, g, &nr);
    if (nic >= m->nnics || (m->nnics > 0 && nic < 0))
      abort();
    topo_near_name(nr);
    topo_pci_group(m, &m->gpus[g].pci);
    for (int h = 0; h < m->ngpus; h++)
      topo_pci_near(m, &m->gpus[g].pci, &m->gpus[h].pci, NULL);
  }
  for (int i = 0; i < m->nnics; i++)
    topo_pci_group(m, &m->nics[i].pci);
  for (int n = -1; n < m->nnuma && n < 8; n++)
    topo_cpu_nearest_nic(m, n, -1, NULL);
  for (int p = -1; p < m->npackages && p < 8; p++)
    topo_cpu_nearest_nic(m, -1, p, NULL);
  for (int cpu = 0; cpu < m->npus && cpu < 512; cpu++)
    topo_cpu(m, cpu);
  topo_machine_free(m);
  return 0;
}

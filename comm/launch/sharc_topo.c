/*
 * sharc-topo: what sharc sees of a machine and of a job.
 *
 *   sharc-topo [--xml FILE] [--dot]
 *
 * Prints the machine (this one, SHARC_TOPO_FILE's or FILE's hwloc XML
 * export): packages, NUMA nodes, GPUs with their nearest NIC, NICs, PCI
 * switches, NVSwitches, GPU links, then the GPU ring and tree sharc builds.
 * --dot writes the same as a Graphviz graph. Under a launcher with more
 * than one rank (sharcrun -n 4 sharc-topo) every rank also describes where
 * it runs, the ranks all-gather those records, and rank 0 prints the rank
 * layout, the ring order and the tree over ranks.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "core.h"
#include "place.h"
#include "topo.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: sharc-topo [--xml FILE] [--dot] [--help]\n"
          "Prints the machine as sharc sees it: packages, NUMA nodes, GPUs "
          "and their\nnearest NIC, NICs, PCI switches, NVSwitches, links, "
          "and the GPU ring and tree.\n"
          "  --xml FILE  read an hwloc XML export (lstopo --of xml FILE) "
          "instead of\n"
          "              this machine (default: SHARC_TOPO_FILE if set)\n"
          "  --dot       write a Graphviz graph instead (sharc-topo --dot | "
          "dot -Tpng -o t.png)\n"
          "  --help      this text\n"
          "Under a launcher with several ranks (sharcrun -n 4 sharc-topo) "
          "rank 0 also\nprints each rank's place (host, NUMA node, GPU, NIC), "
          "the ring and the tree.\n");
}

/* ---- text summary ---- */

static const char *dash(int v, char *buf, size_t len) {
  if (v < 0)
    return "-";
  snprintf(buf, len, "%d", v);
  return buf;
}

/* Whether PCI switch sw is above bridge b. */
static int below_switch(const topo_machine_t *m, int b, int sw) {
  for (; b >= 0; b = m->pci[b].parent)
    if (m->pci[b].sw == sw)
      return 1;
  return 0;
}

/* Prints the subtree of r, one node a line, indented by depth; kids[]
 * and next[] list each node's children in ring order. */
static void print_subtree(int r, int depth, const int *kids, const int *next,
                          const char *prefix) {
  printf("  %*s%s%d\n", 2 * depth, "", prefix, r);
  for (int c = kids[r]; c >= 0; c = next[c])
    print_subtree(c, depth + 1, kids, next, prefix);
}

static void print_ring_tree(int n, const topo_loc_t *loc, const char *what,
                            const char *prefix) {
  int *order = malloc((size_t)n * 4 * sizeof *order);
  if (!order)
    return;
  int *parent = order + n, *kids = order + 2 * n, *next = order + 3 * n;
  place_ring_order(n, loc, order);
  int pkg_changes = 0;
  for (int i = 0; i < n; i++) {
    const topo_loc_t *a = &loc[order[i]], *b = &loc[order[(i + 1) % n]];
    pkg_changes += n > 1 && (a->host != b->host || a->package != b->package);
  }
  int nh = place_nhosts(n, loc);
  printf("\n%s ring (place_ring_order: by host, package, NUMA node, PCI "
         "switch; ",
         what);
  if (nh > 1)
    printf("%d host crossings, ", place_ring_host_crossings(n, loc, order));
  printf("%d package crossings)\n ", pkg_changes);
  for (int i = 0; i < n; i++)
    printf(" %s%d", prefix, order[i]);
  printf("\n");
  int depth = place_tree(n, loc, 0, parent);
  printf("\n%s tree (place_tree, root %s0, depth %d)\n", what, prefix, depth);
  if (depth >= 0) {
    for (int r = 0; r < n; r++)
      kids[r] = next[r] = -1;
    for (int i = n - 1; i >= 0; i--) { /* prepend: lists end in ring order */
      int r = order[i], p = parent[r];
      if (p >= 0) {
        next[r] = kids[p];
        kids[p] = r;
      }
    }
    print_subtree(0, 0, kids, next, prefix);
  }
  free(order);
}

static void print_links(const topo_machine_t *m) {
  if (m->nlinks == 0)
    return;
  for (int k = 0; k < m->nlinks; k++) {
    const char *mx = m->links[k].matrix;
    int first = 1;
    for (int j = 0; j < k && first; j++)
      first = strcmp(m->links[j].matrix, mx) != 0;
    if (!first)
      continue;
    printf("\nlinks (the export's %s matrix, values as given)\n", mx);
    for (int g = 0; g < m->ngpus; g++) {
      char line[1024] = "";
      size_t o = 0;
      int nvs = 0;
      uint64_t nvs_sum = 0;
      for (int i = 0; i < m->nlinks; i++) {
        const topo_link_t *l = &m->links[i];
        if (strcmp(l->matrix, mx))
          continue;
        topo_end_kind_t pk;
        int peer;
        if (l->akind == TOPO_END_GPU && l->a == g)
          pk = l->bkind, peer = l->b;
        else if (l->bkind == TOPO_END_GPU && l->b == g)
          pk = l->akind, peer = l->a;
        else
          continue;
        if (pk == TOPO_END_NVSWITCH) {
          nvs++;
          nvs_sum += l->value;
          continue;
        }
        const char *kn = pk == TOPO_END_GPU       ? "gpu"
                         : pk == TOPO_END_PACKAGE ? "package"
                                                  : "nic";
        if (o < sizeof line - 64)
          o += (size_t)snprintf(line + o, sizeof line - o, " %s%d:%llu", kn,
                                peer, (unsigned long long)l->value);
      }
      if (nvs && o < sizeof line - 64)
        o += (size_t)snprintf(line + o, sizeof line - o,
                              " %d NVSwitches:%llu in all", nvs,
                              (unsigned long long)nvs_sum);
      if (o)
        printf("  gpu%-3d%s\n", g, line);
    }
  }
}

static void print_summary(const topo_machine_t *m) {
  char b1[16], b2[16], b3[16];
  printf("sharc-topo: %s%s%s\n", m->source, m->product[0] ? ", " : "",
         m->product);
  printf("host: %s, identity %016llx%s%s%s\n", host_name(),
         (unsigned long long)host_identity(),
         m->from_file ? " (this host; the export is from " : "",
         m->from_file
             ? (m->exported_host[0] ? m->exported_host : "an unnamed host")
             : "",
         m->from_file ? ")" : "");
  printf("machine: %d package%s, %d NUMA node%s, %d cores, %d PUs, %d GPU%s, "
         "%d NIC%s, %d PCI switch%s, %d NVSwitch%s\n",
         m->npackages, m->npackages == 1 ? "" : "s", m->nnuma,
         m->nnuma == 1 ? "" : "s", m->ncores, m->npus, m->ngpus,
         m->ngpus == 1 ? "" : "s", m->nnics, m->nnics == 1 ? "" : "s",
         m->nswitches, m->nswitches == 1 ? "" : "es", m->nnvswitches,
         m->nnvswitches == 1 ? "" : "es");

  printf("\npackages\n");
  for (int p = 0; p < m->npackages; p++)
    printf("  package %d: %d cores, %d PUs%s%s\n", p, m->packages[p].ncores,
           m->packages[p].npus, m->packages[p].model[0] ? ", " : "",
           m->packages[p].model);
  printf("\nNUMA nodes\n");
  for (int n = 0; n < m->nnuma; n++)
    printf("  NUMA %d (os %d): package %s, %d cores, %d PUs, %.1f GiB\n", n,
           m->numa[n].os_index, dash(m->numa[n].package, b1, sizeof b1),
           m->numa[n].ncores, m->numa[n].npus,
           (double)m->numa[n].bytes / (1024.0 * 1024 * 1024));

  /* "16 GPUs on 2 NUMA nodes (NUMA 0: 8, NUMA 1: 8)": the line a person
   * looks for first. */
  int gpu_numas = 0, unplaced = 0;
  for (int n = 0; n < m->nnuma; n++) {
    int k = 0;
    for (int g = 0; g < m->ngpus; g++)
      k += m->gpus[g].pci.numa == n;
    gpu_numas += k > 0;
  }
  for (int g = 0; g < m->ngpus; g++)
    unplaced += m->gpus[g].pci.numa < 0;
  printf("\nGPUs (%d)\n", m->ngpus);
  if (m->ngpus) {
    printf("  %d GPUs on %d NUMA node%s (", m->ngpus, gpu_numas,
           gpu_numas == 1 ? "" : "s");
    const char *sep = "";
    for (int n = 0; n < m->nnuma; n++) {
      int k = 0;
      for (int g = 0; g < m->ngpus; g++)
        k += m->gpus[g].pci.numa == n;
      if (k) {
        printf("%sNUMA %d: %d", sep, n, k);
        sep = ", ";
      }
    }
    if (unplaced)
      printf("%s%d on no known NUMA node", sep, unplaced);
    printf(")\n");
  }
  if (m->ngpus)
    printf("  %-4s %-13s %-4s %-4s %-6s %-24s %s\n", "gpu", "bus id", "numa",
           "pkg", "switch", "model", "nearest NIC");
  for (int g = 0; g < m->ngpus; g++) {
    const topo_gpu_t *gp = &m->gpus[g];
    topo_near_t near;
    int nic = topo_gpu_nearest_nic(m, g, &near);
    char nicbuf[128] = "-";
    if (nic >= 0)
      snprintf(nicbuf, sizeof nicbuf, "%s (%s: %s)", m->nics[nic].name,
               topo_near_name(near), topo_near_help(near));
    printf("  %-4d %-13s %-4s %-4s %-6s %-24.24s %s\n", g, gp->pci.busid,
           dash(gp->pci.numa, b1, sizeof b1),
           dash(gp->pci.package, b2, sizeof b2),
           dash(gp->pci.pcisw, b3, sizeof b3), gp->model, nicbuf);
  }

  printf("\nNICs (%d)\n", m->nnics);
  if (m->nnics)
    printf("  %-4s %-10s %-12s %-13s %-4s %-4s %-4s %s\n", "nic", "name",
           "interfaces", "bus id", "numa", "pkg", "rdma", "model");
  for (int i = 0; i < m->nnics; i++) {
    const topo_nic_t *n = &m->nics[i];
    printf(
        "  %-4d %-10s %-12s %-13s %-4s %-4s %-4s %s\n", i, n->name,
        n->netdevs[0] ? n->netdevs : "-", n->pci.busid[0] ? n->pci.busid : "-",
        dash(n->pci.numa, b1, sizeof b1), dash(n->pci.package, b2, sizeof b2),
        n->rdma ? "yes" : "no", n->model);
  }

  printf("\nPCI switches (%d)\n", m->nswitches);
  for (int i = 0; i < m->npci; i++) {
    const topo_pci_t *b = &m->pci[i];
    if (b->kind != TOPO_PCI_BRIDGE || b->depth < 2 || b->depth % 2)
      continue;
    char below[512] = "";
    for (int g = 0; g < m->ngpus; g++)
      if (below_switch(m, m->gpus[g].pci.bridge, b->sw)) {
        char w[16];
        snprintf(w, sizeof w, "gpu%d", g);
        topo_words_add(below, sizeof below, w);
      }
    for (int k = 0; k < m->nnics; k++)
      if (below_switch(m, m->nics[k].pci.bridge, b->sw))
        topo_words_add(below, sizeof below, m->nics[k].name);
    int nvs = 0;
    for (int k = 0; k < m->nnvswitches; k++)
      nvs += below_switch(m, m->nvswitches[k].pci.bridge, b->sw);
    if (nvs) {
      char w[32];
      snprintf(w, sizeof w, "%d NVSwitches", nvs);
      topo_words_add(below, sizeof below, w);
    }
    printf("  switch %-3d %s%s%s\n", b->sw, b->busid, below[0] ? ": " : "",
           below);
  }

  printf("\nNVSwitches (%d)\n", m->nnvswitches);
  for (int i = 0; i < m->nnvswitches; i++)
    printf("%s%s%s", i % 6 == 0 ? "  " : " ", m->nvswitches[i].pci.busid,
           i % 6 == 5 || i == m->nnvswitches - 1 ? "\n" : "");

  print_links(m);

  if (m->ngpus > 0) {
    topo_loc_t *loc = malloc((size_t)m->ngpus * sizeof *loc);
    if (loc) {
      topo_gpu_locs(m, loc);
      print_ring_tree(m->ngpus, loc, "GPU", "gpu");
      free(loc);
    }
  }
}

/* ---- Graphviz ---- */

/* NUMA node of the first device below switch sw (-1: none). */
static int switch_numa(const topo_machine_t *m, int sw) {
  for (int g = 0; g < m->ngpus; g++)
    if (below_switch(m, m->gpus[g].pci.bridge, sw))
      return m->gpus[g].pci.numa;
  for (int k = 0; k < m->nnics; k++)
    if (below_switch(m, m->nics[k].pci.bridge, sw))
      return m->nics[k].pci.numa;
  for (int k = 0; k < m->nnvswitches; k++)
    if (below_switch(m, m->nvswitches[k].pci.bridge, sw))
      return m->nvswitches[k].pci.numa;
  return -2;
}

/* "\n6 NVSwitches" for a switch whose devices are only NVSwitches. */
static const char *nvswitch_note(const topo_machine_t *m, int sw) {
  static char note[32];
  int nvs = 0, other = 0;
  for (int k = 0; k < m->nnvswitches; k++)
    nvs += below_switch(m, m->nvswitches[k].pci.bridge, sw);
  for (int g = 0; g < m->ngpus; g++)
    other += below_switch(m, m->gpus[g].pci.bridge, sw);
  for (int k = 0; k < m->nnics; k++)
    other += below_switch(m, m->nics[k].pci.bridge, sw);
  if (!nvs || other)
    return "";
  snprintf(note, sizeof note, "\\n%d NVSwitches", nvs);
  return note;
}

/* The PCI switch above switch sw's upstream port (bridge b), or -1. */
static int parent_switch(const topo_machine_t *m, int b, int sw) {
  for (b = m->pci[b].parent; b >= 0; b = m->pci[b].parent)
    if (m->pci[b].sw >= 0 && m->pci[b].sw != sw)
      return m->pci[b].sw;
  return -1;
}

/* "34:00.0" for "0000:34:00.0": the domain is nearly always 0. */
static const char *short_busid(const char *id) {
  return strncmp(id, "0000:", 5) ? id : id + 5;
}

/* Edge from a device (PCI location p) to its switch, else its NUMA node. */
static void dot_attach(const topo_pciloc_t *p, const char *node) {
  if (p->pcisw >= 0)
    printf("  sw%d -- %s;\n", p->pcisw, node);
  else if (p->numa >= 0)
    printf("  numa%d -- %s;\n", p->numa, node);
}

static void print_dot(const topo_machine_t *m) {
  printf("graph topo {\n"
         "  graph [fontname=Helvetica, fontsize=12, labelloc=t, "
         "nodesep=0.12, ranksep=0.3, compound=true, ordering=out,\n"
         "         splines=ortho,\n"
         "         label=\"%s%s: %d packages, %d NUMA nodes, %d GPUs, %d "
         "NICs, %d NVSwitches%s\"];\n"
         "  node [fontname=Helvetica, fontsize=10, shape=box, style=filled, "
         "fillcolor=white, height=0.3];\n"
         "  edge [color=gray50, fontname=Helvetica, fontsize=9];\n",
         m->product[0] ? m->product : "machine", m->from_file ? " (XML)" : "",
         m->npackages, m->nnuma, m->ngpus, m->nnics, m->nnvswitches,
         m->ngpus > 1 ? "; red arrows: the GPU ring" : "");
  int *sw_bridge = calloc((size_t)(m->nswitches + 1), sizeof *sw_bridge);
  for (int i = 0; sw_bridge && i < m->npci; i++)
    if (m->pci[i].kind == TOPO_PCI_BRIDGE && m->pci[i].depth >= 2 &&
        m->pci[i].depth % 2 == 0)
      sw_bridge[m->pci[i].sw] = i;
  for (int p = -1; p < m->npackages; p++) {
    /* Package clusters hold their NUMA clusters; p = -1 collects NUMA
     * nodes whose package is unknown. */
    int any = 0;
    for (int n = 0; n < m->nnuma; n++)
      any |= m->numa[n].package == p;
    if (!any)
      continue;
    if (p >= 0)
      printf("  subgraph cluster_pkg%d {\n    label=\"package %d\"; "
             "style=rounded; color=gray40;\n",
             p, p);
    for (int n = 0; n < m->nnuma; n++) {
      if (m->numa[n].package != p)
        continue;
      printf("    subgraph cluster_numa%d {\n      label=\"\"; "
             "style=\"rounded,filled\"; fillcolor=gray95; color=gray70;\n"
             "      numa%d [label=\"NUMA %d\\n%d cores, %.0f GiB\", "
             "shape=ellipse, fillcolor=lightyellow];\n",
             n, n, n, m->numa[n].ncores,
             (double)m->numa[n].bytes / (1024.0 * 1024 * 1024));
      for (int s = 0; sw_bridge && s < m->nswitches; s++)
        if (switch_numa(m, s) == n)
          printf("      sw%d [label=\"PCIe switch\\n%s%s\", fontsize=8, "
                 "fillcolor=gray85];\n",
                 s, short_busid(m->pci[sw_bridge[s]].busid),
                 nvswitch_note(m, s));
      for (int g = 0; g < m->ngpus; g++)
        if (m->gpus[g].pci.numa == n)
          printf("      gpu%d [label=\"GPU %d\\n%s\", fillcolor=palegreen];\n",
                 g, g, short_busid(m->gpus[g].pci.busid));
      for (int k = 0; k < m->nnics; k++)
        if (m->nics[k].pci.numa == n)
          printf("      nic%d [label=\"%s%s%s\", fillcolor=lightblue];\n", k,
                 m->nics[k].name,
                 strcmp(m->nics[k].name, m->nics[k].netdevs) ? "\\n" : "",
                 strcmp(m->nics[k].name, m->nics[k].netdevs)
                     ? m->nics[k].netdevs
                     : "");
      printf("    }\n");
    }
    if (p >= 0)
      printf("  }\n");
  }
  /* Devices of no known NUMA node sit outside the clusters. */
  for (int s = 0; sw_bridge && s < m->nswitches; s++)
    if (switch_numa(m, s) == -1)
      printf("  sw%d [label=\"PCIe switch\\n%s\", fontsize=8];\n", s,
             short_busid(m->pci[sw_bridge[s]].busid));
  for (int g = 0; g < m->ngpus; g++)
    if (m->gpus[g].pci.numa < 0)
      printf("  gpu%d [label=\"GPU %d\", fillcolor=palegreen];\n", g, g);
  for (int k = 0; k < m->nnics; k++)
    if (m->nics[k].pci.numa < 0)
      printf("  nic%d [label=\"%s\", fillcolor=lightblue];\n", k,
             m->nics[k].name);
  /* PCI tree: switch to the switch above (or its NUMA node), device to its
   * switch (or NUMA node). */
  for (int s = 0; sw_bridge && s < m->nswitches; s++) {
    int sn = switch_numa(m, s);
    if (sn == -2)
      continue;
    int ps = parent_switch(m, sw_bridge[s], s);
    if (ps >= 0)
      printf("  sw%d -- sw%d;\n", ps, s);
    else if (sn >= 0)
      printf("  numa%d -- sw%d;\n", sn, s);
  }
  for (int g = 0; g < m->ngpus; g++) {
    char node[16];
    snprintf(node, sizeof node, "gpu%d", g);
    dot_attach(&m->gpus[g].pci, node);
  }
  for (int k = 0; k < m->nnics; k++) {
    char node[16];
    snprintf(node, sizeof node, "nic%d", k);
    dot_attach(&m->nics[k].pci, node);
  }
  /* NVLink: GPU pairs directly; NVSwitches drawn as one fabric node. */
  int nvs_links = 0;
  for (int i = 0; i < m->nlinks; i++)
    nvs_links |= m->links[i].akind == TOPO_END_NVSWITCH ||
                 m->links[i].bkind == TOPO_END_NVSWITCH;
  if (m->nnvswitches > 0)
    printf("  nvswitch [label=\"NVSwitch fabric\\n%d NVSwitches\", "
           "shape=box3d, fillcolor=lightpink];\n",
           m->nnvswitches);
  /* One edge per NUMA cluster, ending at its border: per-GPU edges to the
   * fabric would hide everything else. */
  for (int n = 0; n < m->nnuma && nvs_links; n++) {
    int links = 0, gpus = 0, any = -1;
    for (int g = 0; g < m->ngpus; g++) {
      int k = 0;
      for (int i = 0; i < m->nlinks; i++) {
        const topo_link_t *l = &m->links[i];
        k += (l->akind == TOPO_END_GPU && l->a == g &&
              l->bkind == TOPO_END_NVSWITCH) ||
             (l->bkind == TOPO_END_GPU && l->b == g &&
              l->akind == TOPO_END_NVSWITCH);
      }
      if (k && m->gpus[g].pci.numa == n) {
        links += k;
        gpus++;
        any = any < 0 ? g : any;
      }
    }
    if (any >= 0)
      printf("  nvswitch -- gpu%d [lhead=cluster_numa%d, color=green4, "
             "penwidth=3, constraint=false, xlabel=\"NVLink: %d GPUs, %d "
             "links\", fontcolor=green4];\n",
             any, n, gpus, links);
  }
  for (int i = 0; i < m->nlinks; i++) {
    const topo_link_t *l = &m->links[i];
    if (l->akind == TOPO_END_GPU && l->bkind == TOPO_END_GPU)
      printf("  gpu%d -- gpu%d [color=green4, penwidth=2, xlabel=\"%llu\", "
             "fontsize=8, constraint=false];\n",
             l->a, l->b, (unsigned long long)l->value);
  }
  if (m->ngpus > 1) {
    int *order = malloc((size_t)m->ngpus * sizeof *order);
    if (order) {
      topo_gpu_ring(m, order);
      for (int i = 0; i < m->ngpus; i++)
        printf("  gpu%d -- gpu%d [color=red, penwidth=1.5, dir=forward, "
               "arrowsize=0.5, constraint=false];\n",
               order[i], order[(i + 1) % m->ngpus]);
      free(order);
    }
  }
  printf("}\n");
  free(sw_bridge);
}

/* ---- a job: every rank's place ---- */

/* What one rank tells the others; fixed size, all-gathered as bytes. */
typedef struct {
  uint64_t host_id;
  char host[SHARC_HOSTNAME_MAX];
  int32_t rank, pid, cpu, numa, package; /* the CPU it runs on */
  int32_t gpu, gpu_numa, gpu_package, pcisw, near;
  char gpu_busid[TOPO_BUSID_MAX];
  char nic[32];
} rank_rec_t;

/* World size from the launcher's environment (0: not launched). */
static int launched_size(void) {
  static const char *const vars[][2] = {
      {"SHARC_RANK", "SHARC_WORLD_SIZE"},
      {"RANK", "WORLD_SIZE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *r = getenv(vars[i][0]), *s = getenv(vars[i][1]);
    if (r && *r && s && *s)
      return atoi(s);
  }
  return 0;
}

static void describe_rank(const topo_machine_t *m, int rank, int local,
                          rank_rec_t *rec) {
  memset(rec, 0, sizeof *rec);
  rec->host_id = host_identity();
  snprintf(rec->host, sizeof rec->host, "%s", host_name());
  rec->rank = rank;
  rec->pid = (int32_t)getpid();
  rec->cpu = sched_getcpu();
  /* An export's CPUs are not the ones this process runs on. */
  const topo_pu_t *pu = m->from_file ? NULL : topo_cpu(m, rec->cpu);
  rec->numa = pu ? pu->numa : -1;
  rec->package = pu ? pu->package : -1;
  rec->gpu = m->ngpus > 0 && local >= 0 ? local % m->ngpus : -1;
  rec->pcisw = rec->gpu_numa = rec->gpu_package = -1;
  topo_near_t near = TOPO_NEAR_SYS;
  int nic;
  if (rec->gpu >= 0) {
    const topo_pciloc_t *p = &m->gpus[rec->gpu].pci;
    snprintf(rec->gpu_busid, sizeof rec->gpu_busid, "%s", p->busid);
    rec->pcisw = topo_pci_group(m, p);
    rec->gpu_numa = p->numa;
    rec->gpu_package = p->package;
    nic = topo_gpu_nearest_nic(m, rec->gpu, &near);
  } else {
    nic = topo_cpu_nearest_nic(m, rec->numa, rec->package, &near);
  }
  topo_copy(rec->nic, sizeof rec->nic, nic >= 0 ? m->nics[nic].name : "");
  rec->near = nic >= 0 ? (int32_t)near : -1;
}

static void print_layout(int n, const rank_rec_t *all) {
  topo_loc_t *loc = malloc((size_t)n * sizeof *loc);
  uint64_t *hosts = malloc((size_t)n * sizeof *hosts);
  if (!loc || !hosts) {
    free(loc);
    free(hosts);
    return;
  }
  int nh = 0;
  for (int r = 0; r < n; r++) {
    const rank_rec_t *a = &all[r];
    int h = 0;
    while (h < nh && hosts[h] != a->host_id)
      h++;
    if (h == nh)
      hosts[nh++] = a->host_id;
    /* A rank driving a GPU is placed by its GPU, else by its CPU. */
    loc[r] = a->gpu >= 0 ? (topo_loc_t){h, a->gpu_package, a->gpu_numa,
                                        a->pcisw, a->gpu}
                         : (topo_loc_t){h, a->package, a->numa, -1, -1};
  }
  char b1[16], b2[16], b3[16], b4[16], b5[16];
  printf("\nranks (%d on %d host%s; numa and pkg: where the rank's CPU is)\n",
         n, nh, nh == 1 ? "" : "s");
  printf("  %-5s %-5s %-16s %-8s %-4s %-4s %-4s %-4s %-13s %-8s %-10s %s\n",
         "rank", "host", "name", "pid", "cpu", "numa", "pkg", "gpu",
         "gpu bus id", "gpu numa", "nic", "near");
  for (int r = 0; r < n; r++) {
    const rank_rec_t *a = &all[r];
    printf("  %-5d %-5d %-16.16s %-8d %-4s %-4s %-4s %-4s %-13s %-8s %-10s "
           "%s\n",
           r, loc[r].host, a->host, a->pid, dash(a->cpu, b1, sizeof b1),
           dash(a->numa, b2, sizeof b2), dash(a->package, b3, sizeof b3),
           dash(a->gpu, b4, sizeof b4), a->gpu_busid[0] ? a->gpu_busid : "-",
           dash(a->gpu_numa, b5, sizeof b5), a->nic[0] ? a->nic : "-",
           a->near >= 0 ? topo_near_name((topo_near_t)a->near) : "-");
  }
  print_ring_tree(n, loc, "rank", "");
  free(loc);
  free(hosts);
}

static int run_job(const topo_machine_t *m, int dot) {
  sharc_comm_t comm;
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    fprintf(stderr, "sharc-topo: joining the job failed: %s (%s)\n",
            sharc_last_error(), sharc_status_name(st));
    return 1;
  }
  int rank = 0, size = 1, local = -1;
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &size);
  sharc_comm_local_rank(comm, &local);
  rank_rec_t mine, *all = calloc((size_t)size, sizeof *all);
  if (!all) {
    fprintf(stderr, "sharc-topo: out of memory for %d rank records\n", size);
    sharc_comm_abort(comm);
    return 1;
  }
  describe_rank(m, rank, local, &mine);
  st = sharc_all_gather(&mine, all, sizeof mine, SHARC_U8, comm, NULL);
  if (st != SHARC_OK) {
    fprintf(stderr, "sharc-topo: all-gather of rank records failed: %s\n",
            sharc_comm_last_error(comm));
    free(all);
    sharc_comm_abort(comm);
    return 1;
  }
  if (rank == 0) {
    if (dot) {
      print_dot(m);
    } else {
      print_summary(m);
      print_layout(size, all);
    }
    fflush(stdout);
  }
  free(all);
  st = sharc_comm_destroy(comm);
  return st == SHARC_OK ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *xml = NULL;
  int dot = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--dot")) {
      dot = 1;
    } else if (!strcmp(argv[i], "--xml") && i + 1 < argc) {
      xml = argv[++i];
    } else if (!strncmp(argv[i], "--xml=", 6) && argv[i][6]) {
      xml = argv[i] + 6;
    } else {
      fprintf(stderr, "sharc-topo: %s '%s'\n",
              !strcmp(argv[i], "--xml") ? "missing FILE after"
                                        : "unknown argument",
              argv[i]);
      usage(stderr);
      return 2;
    }
  }
  int job = launched_size() > 1;
  /* Alone, errors are printed once below; the library's WARN copy of them
   * would only repeat it (SHARC_DEBUG set by the user still wins). */
  if (!job)
    setenv("SHARC_DEBUG", "NONE", 0);
  topo_machine_t *m;
  sharc_status_t st = topo_machine_load(xml, &m);
  if (st != SHARC_OK) {
    fprintf(stderr, "sharc-topo: %s\n", err_last());
    return 1;
  }
  int rc = 0;
  if (job) {
    rc = run_job(m, dot);
  } else if (dot) {
    print_dot(m);
  } else {
    print_summary(m);
  }
  topo_machine_free(m);
  return rc;
}

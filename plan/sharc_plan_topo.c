/*
 * sharc_plan_topo.c - sharc-plan --topology FILE: what one node's hwloc XML
 * export says about the planner's numbers. The export is read with topo/'s
 * machine model (the one sharc-topo prints), then:
 *
 *   GPUs per node   the machine's GPUs
 *   intra link      the slowest edge of sharc's GPU ring: NVLink bandwidth
 *                   from the export's NVLinkBandwidth matrix (to an
 *                   NVSwitch, or between the pair), else through the host
 *                   (a GPU's NVLink to its CPU, else its PCIe link)
 *   inter link      NICs x rate / GPUs (RDMA NICs only when there are any)
 *   memory, FLOP/s  a table of known GPU models, else the defaults
 *
 * Flags given on the command line win over all of it. Every source is
 * printed with the number it gave; docs/plan.md lists them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sharc_plan_topo.h"
#include "topo.h"

/* Defaults where the export says nothing (docs/plan.md): */
#define NVLINK_GBS 450.0  /* the default node's NVLink 4, per GPU */
#define PCIE_GBS 31.5     /* PCIe 4.0 x16: 16 GT/s x 16 x 128/130 / 8 */
#define INTRA_LAT_US 3.0  /* the default's assumption, NVLink or PCIe */
#define RDMA_NIC_GBS 50.0 /* NDR InfiniBand, 400 Gb/s a port */
#define RDMA_LAT_US 5.0   /* the default inter-node latency */
#define ETH_NIC_GBS 12.5  /* 100 Gb Ethernet */
#define ETH_LAT_US 20.0   /* sharc's TCP latency (SHARC_NET_ALPHA_US) */

/* GPUs whose numbers sharc-plan knows: vendors' datasheets (memory, HBM
 * bandwidth, dense 16-bit tensor peak; FP32 where the GPU has no faster
 * 16-bit path), sustained FLOP/s about 40% of that peak as for the default
 * H100. key: the model name upper-cased with everything but letters and
 * digits dropped, as a substring; the more specific keys first. */
static const struct gpu_spec {
  const char *key, *name;
  double mem_gib, hbm_gbs, peak_tflops, tflops;
} known[] = {
    {"H100PCIE", "H100 PCIe 80GB", 80, 2000, 756, 300},
    {"H10080GBHBM3", "H100 SXM 80GB", 80, 3350, 989, 400},
    {"H100SXM", "H100 SXM 80GB", 80, 3350, 989, 400},
    {"A100SXM480GB", "A100 SXM4 80GB", 80, 2039, 312, 125},
    {"A100SXM440GB", "A100 SXM4 40GB", 40, 1555, 312, 125},
    {"V100SXM332GBH", "V100 SXM3 32GB, DGX-2H", 32, 900, 131.25, 52.5},
    {"V100SXM332GB", "V100 SXM3 32GB", 32, 900, 125, 50},
    {"V100SXM232GB", "V100 SXM2 32GB", 32, 900, 125, 50},
    {"V100SXM216GB", "V100 SXM2 16GB", 16, 900, 125, 50},
    {"P100SXM216GB", "P100 SXM2 16GB", 16, 732, 21.2, 8.5},
    {"K40M", "K40m (FP32 peak)", 12, 288, 4.29, 1.7},
};

static void normalise(const char *s, char *out, size_t len) {
  size_t k = 0;
  for (; *s && k + 1 < len; s++) {
    char c = *s;
    if (c >= 'a' && c <= 'z')
      c = (char)(c - 'a' + 'A');
    if ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
      out[k++] = c;
  }
  out[k] = '\0';
}

static const struct gpu_spec *lookup(const char *model) {
  char n[TOPO_NAME_MAX];
  normalise(model, n, sizeof n);
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strstr(n, known[i].key))
      return &known[i];
  return NULL;
}

static int die(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int die(const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "sharc-plan: --topology %s: ", path);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return 2;
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s && s[1] ? s + 1 : p;
}

/* ---- the intra-node link ---- */

enum { ONE_GPU, NVSWITCH, NVLINK, PCIE };
static const char *const class_name[] = {"one GPU", "NVSwitch", "NVLink",
                                         "PCIe"};

typedef struct {
  int cls;
  double gbs;
  /* ring edges by what carries them; the host's by their GPU ends */
  int edges, e_nvs, e_pair, e_host;
  int end_cpu, end_pcie, end_pcie_default;
  int nvl_links; /* NVLink matrix entries that touch a GPU */
} intra_t;

/* NVLink bandwidth in GB/s one way per GPU: to NVSwitches and to CPU
 * packages summed, and per GPU pair (g * n + h), from every matrix whose
 * name says NVLink (hwloc's NVLinkBandwidth, MB/s). */
static int nvlink_tables(const topo_machine_t *m, double *to_nvs,
                         double *to_cpu, double *pair) {
  int n = m->ngpus, links = 0;
  for (int i = 0; i < m->nlinks; i++) {
    const topo_link_t *l = &m->links[i];
    if (!strstr(l->matrix, "NVLink"))
      continue;
    double gbs = (double)l->value / 1000.0;
    int g = l->akind == TOPO_END_GPU ? l->a : l->b;
    topo_end_kind_t other = l->akind == TOPO_END_GPU ? l->bkind : l->akind;
    int o = l->akind == TOPO_END_GPU ? l->b : l->a;
    if (g < 0 || g >= n)
      continue;
    links++;
    if (l->akind == TOPO_END_GPU && l->bkind == TOPO_END_GPU) {
      if (o >= 0 && o < n) {
        pair[(size_t)g * n + o] += gbs;
        pair[(size_t)o * n + g] += gbs;
      }
    } else if (other == TOPO_END_NVSWITCH) {
      to_nvs[g] += gbs;
    } else if (other == TOPO_END_PACKAGE) {
      to_cpu[g] += gbs;
    }
  }
  return links;
}

/* The intra link: the slowest edge of sharc's GPU ring (topo_gpu_ring),
 * each edge carried by the pair's NVLink, else both GPUs' NVSwitch links,
 * else the host (the slower GPU's NVLink to its CPU or its PCIe link). */
static int intra_link(const topo_machine_t *m, intra_t *out) {
  int n = m->ngpus;
  memset(out, 0, sizeof *out);
  if (n == 1) {
    out->cls = ONE_GPU;
    return 0;
  }
  double *to_nvs = calloc((size_t)n * (2 + (size_t)n), sizeof(double));
  int *order = malloc((size_t)n * sizeof *order);
  if (!to_nvs || !order) {
    free(to_nvs);
    free(order);
    return -1;
  }
  double *to_cpu = to_nvs + n, *pair = to_nvs + 2 * n;
  out->nvl_links = nvlink_tables(m, to_nvs, to_cpu, pair);
  int any_pair = 0;
  for (size_t i = 0; i < (size_t)n * n; i++)
    any_pair |= pair[i] > 0;
  int any_nvs = 0;
  for (int g = 0; g < n; g++)
    any_nvs |= to_nvs[g] > 0;
  out->cls = m->nnvswitches > 0 || any_nvs ? NVSWITCH
             : any_pair                    ? NVLINK
                                           : PCIE;
  if (out->cls == NVSWITCH && !any_nvs && !any_pair) {
    out->gbs = NVLINK_GBS; /* NVSwitches but no matrix: NVLink's default */
    free(to_nvs);
    free(order);
    return 0;
  }
  topo_gpu_ring(m, order);
  out->edges = n == 2 ? 1 : n;
  out->gbs = -1;
  for (int i = 0; i < out->edges; i++) {
    int a = order[i], b = order[(i + 1) % n];
    double bw;
    if (pair[(size_t)a * n + b] > 0) {
      bw = pair[(size_t)a * n + b];
      out->e_pair++;
    } else if (to_nvs[a] > 0 && to_nvs[b] > 0) {
      bw = to_nvs[a] < to_nvs[b] ? to_nvs[a] : to_nvs[b];
      out->e_nvs++;
    } else {
      bw = -1;
      out->e_host++;
      int ends[2] = {a, b};
      for (int k = 0; k < 2; k++) {
        int g = ends[k];
        double h = to_cpu[g];
        if (h > 0) {
          out->end_cpu++;
        } else if (m->gpus[g].link_gbs > 0) {
          h = m->gpus[g].link_gbs;
          out->end_pcie++;
        } else {
          h = PCIE_GBS;
          out->end_pcie_default++;
        }
        if (bw < 0 || h < bw)
          bw = h;
      }
    }
    if (out->gbs < 0 || bw < out->gbs)
      out->gbs = bw;
  }
  free(to_nvs);
  free(order);
  return 0;
}

/* Prints where the intra bandwidth came from. */
static void intra_source(FILE *f, const intra_t *x) {
  if (x->cls == NVSWITCH && !x->edges) {
    fprintf(f,
            "NVSwitches but no NVLinkBandwidth matrix in the export: the "
            "NVLink default (%g GB/s, H100's NVLink 4)",
            NVLINK_GBS);
    return;
  }
  fprintf(f, "the slowest of the GPU ring's %d edge%s:", x->edges,
          x->edges == 1 ? "" : "s");
  const char *sep = " ";
  if (x->e_nvs) {
    fprintf(f,
            "%s%d through NVSwitches (each GPU's NVLinks to them, "
            "summed)",
            sep, x->e_nvs);
    sep = ", ";
  }
  if (x->e_pair) {
    fprintf(f, "%s%d over the pair's NVLinks", sep, x->e_pair);
    sep = ", ";
  }
  if (x->e_host) {
    fprintf(f,
            "%s%d through the host at the slower GPU's link (GPU ends: ", sep,
            x->e_host);
    sep = "";
    if (x->end_cpu) {
      fprintf(f, "%d on NVLink to their CPU", x->end_cpu);
      sep = ", ";
    }
    if (x->end_pcie) {
      fprintf(f, "%s%d on the PCIe link hwloc records", sep, x->end_pcie);
      sep = ", ";
    }
    if (x->end_pcie_default)
      fprintf(f,
              "%s%d on PCIe with no speed recorded: PCIe 4.0 x16's %g "
              "GB/s assumed",
              sep, x->end_pcie_default, PCIE_GBS);
    fprintf(f, ")");
  }
  if (x->nvl_links)
    fprintf(f, "; NVLink numbers from the export's NVLinkBandwidth matrix "
               "(MB/s)");
}

/* ---- the GPUs' own numbers ---- */

/* Distinct GPU models of the machine (at most cap), with their counts. */
static int models(const topo_machine_t *m, const char **name, int *count,
                  int cap) {
  int k = 0;
  for (int g = 0; g < m->ngpus; g++) {
    const char *mod = m->gpus[g].model[0] ? m->gpus[g].model : "unnamed";
    int j = 0;
    while (j < k && strcmp(name[j], mod))
      j++;
    if (j == k) {
      if (k == cap)
        continue;
      name[k] = mod;
      count[k++] = 0;
    }
    count[j]++;
  }
  return k;
}

static void print_models(FILE *f, const char **name, const int *count, int k,
                         int all) {
  for (int j = 0; j < k; j++) {
    if (k == 1 && count[j] == all)
      fprintf(f, "%s", name[j]);
    else
      fprintf(f, "%s%d %s", j ? ", " : "", count[j], name[j]);
  }
}

/* ---- the whole node ---- */

int plan_topo_apply(const char *path, const plan_topo_given_t *given,
                    sharc_plan_cluster_t *cl, FILE *info) {
  if (!path || !*path)
    return die("''", "give the path of an hwloc XML export of one node "
                     "(lstopo --of xml node.xml on it)");
  /* the error is printed once below, not also as the library's WARN */
  setenv("SHARC_DEBUG", "NONE", 0);
  topo_machine_t *m;
  if (topo_machine_load(path, &m) != SHARC_OK) {
    const char *msg = sharc_last_error();
    if (!strncmp(msg, "topo: ", 6))
      msg += 6;
    return die(path, "%s", msg);
  }
  int rc = 0;
  intra_t in;
  const char *mname[8];
  int mcount[8];
  int nmod = 0;
  if (m->ngpus < 1) {
    rc = die(path, "the export has no GPU (hwloc recorded no NVIDIA PCI device "
                   "and no cuda or nvml device); export a GPU node with lstopo "
                   "--of xml while its NVIDIA driver is loaded, or leave out "
                   "--topology and give --gpus-per-node");
    goto out;
  }
  if (m->ngpus > 1024) {
    rc = die(path, "%d GPUs in one node; sharc-plan takes at most 1024",
             m->ngpus);
    goto out;
  }
  if (intra_link(m, &in) != 0) {
    rc = die(path, "out of memory");
    goto out;
  }
  nmod = models(m, mname, mcount, 8);

  /* GPUs per node */
  if (!given->gpus_per_node)
    cl->gpus_per_node = m->ngpus;
  int G = cl->gpus_per_node;

  /* NICs: the RDMA ones when there are any (the compute fabric; the
   * Ethernet ports beside them are for management), else every one */
  int rdma = 0;
  for (int i = 0; i < m->nnics; i++)
    rdma += m->nics[i].rdma;
  int use_rdma = rdma > 0, nused = 0, capped = 0;
  double rate = given->nic_gbs > 0 ? given->nic_gbs
                : use_rdma         ? RDMA_NIC_GBS
                                   : ETH_NIC_GBS;
  double node_gbs = 0;
  char nic_names[256] = "";
  for (int i = 0; i < m->nnics; i++) {
    const topo_nic_t *n = &m->nics[i];
    if (use_rdma && !n->rdma)
      continue;
    nused++;
    double r = rate;
    if (given->nic_gbs <= 0 && n->link_gbs > 0 && n->link_gbs < r) {
      r = n->link_gbs; /* a NIC sends no faster than its PCI link */
      capped++;
    }
    node_gbs += r;
    topo_words_add(nic_names, sizeof nic_names, n->name);
  }
  double inter_gbs = nused ? node_gbs / G : 0;
  if (nused && !given->inter) {
    cl->inter_gbs = inter_gbs;
    cl->inter_lat_us = use_rdma ? RDMA_LAT_US : ETH_LAT_US;
  }

  /* intra link */
  if (in.cls != ONE_GPU && !given->intra) {
    cl->intra_gbs = in.gbs;
    cl->intra_lat_us = INTRA_LAT_US;
  }

  /* GPU model: known ones set memory, FLOP/s and HBM (the smallest and
   * slowest of several models: the slowest rank paces the step) */
  const struct gpu_spec *spec[8];
  int nknown = 0;
  double mem = 0, tf = 0, hbm = 0;
  for (int j = 0; j < nmod; j++) {
    spec[j] = lookup(mname[j]);
    if (!spec[j])
      continue;
    if (!nknown || spec[j]->mem_gib < mem)
      mem = spec[j]->mem_gib;
    if (!nknown || spec[j]->tflops < tf)
      tf = spec[j]->tflops;
    if (!nknown || spec[j]->hbm_gbs < hbm)
      hbm = spec[j]->hbm_gbs;
    nknown++;
  }
  int counted = 0; /* GPUs of the models listed (8 at most) */
  for (int j = 0; j < nmod; j++)
    counted += mcount[j];
  int all_known = nknown == nmod && counted == m->ngpus;
  if (all_known) {
    if (!given->gpu_mem)
      cl->gpu_mem_gib = mem;
    if (!given->flops)
      cl->tflops = tf;
    if (!given->hbm)
      cl->hbm_gbs = hbm;
  }

  /* what was taken, in one line, then each source */
  fprintf(info, "# topology: %s: %d GPU%s (", base_name(path), m->ngpus,
          m->ngpus == 1 ? "" : "s");
  print_models(info, mname, mcount, nmod, m->ngpus);
  fprintf(info, "), %s, ", class_name[in.cls]);
  if (!nused)
    fprintf(info, "0 NICs: inter link from --link or the default\n");
  else {
    fprintf(info, "%d %sNIC%s (%s", nused, use_rdma ? "RDMA " : "",
            nused == 1 ? "" : "s", nic_names);
    if (use_rdma && m->nnics > rdma)
      fprintf(info, "; %d without RDMA left out", m->nnics - rdma);
    fprintf(info, ")%s: ", use_rdma ? "" : " without RDMA");
    if (given->inter)
      fprintf(info, "inter link from --link\n");
    else
      fprintf(info, "inter %.4g GB/s per GPU\n", inter_gbs);
  }
  fprintf(info, "#   GPUs per node: %d", G);
  if (given->gpus_per_node && G != m->ngpus)
    fprintf(info, " (--gpus-per-node; the export has %d)", m->ngpus);
  fprintf(info, "\n#   intra: ");
  if (in.cls == ONE_GPU) {
    fprintf(info, "one GPU, no link within the node");
  } else {
    fprintf(info, "%s, %g GB/s per GPU one way, ", class_name[in.cls], in.gbs);
    intra_source(info, &in);
    if (given->intra)
      fprintf(info, "; --link intra given: %g us, %g GB/s kept",
              cl->intra_lat_us, cl->intra_gbs);
    else
      fprintf(info, "; latency %g us (assumed, as the default)", INTRA_LAT_US);
  }
  fprintf(info, "\n#   inter: ");
  if (!nused) {
    fprintf(info, "the export has no NIC%s: %g us, %g GB/s per GPU from %s",
            given->nic_gbs > 0 ? " (--nic-gbps unused)" : "", cl->inter_lat_us,
            cl->inter_gbs, given->inter ? "--link inter" : "the default");
  } else {
    fprintf(info, "%d NIC%s at %g GB/s each one way (%s)", nused,
            nused == 1 ? "" : "s", rate,
            given->nic_gbs > 0 ? "--nic-gbps"
            : use_rdma         ? "default: NDR InfiniBand, 400 Gb/s"
                               : "default: 100 Gb Ethernet");
    if (capped)
      fprintf(info, ", %d capped at the PCI link hwloc records", capped);
    fprintf(info, ": %g GB/s for the node / %d GPUs = %.4g GB/s per GPU",
            node_gbs, G, inter_gbs);
    if (given->inter)
      fprintf(info, "; --link inter given: %g us, %g GB/s kept",
              cl->inter_lat_us, cl->inter_gbs);
    else
      fprintf(info, ", latency %g us (%s)", cl->inter_lat_us,
              use_rdma ? "assumed, as the default"
                       : "sharc's TCP default, SHARC_NET_ALPHA_US");
  }
  fprintf(info, "\n#   GPU: ");
  if (all_known) {
    for (int j = 0; j < nmod; j++)
      fprintf(info, "%s%s is the %s (%g GiB, %g GB/s, %g TFLOP/s peak)",
              j ? "; " : "", mname[j], spec[j]->name, spec[j]->mem_gib,
              spec[j]->hbm_gbs, spec[j]->peak_tflops);
    fprintf(info,
            ": %s%g GiB, %g TFLOP/s sustained (about 40%% of the "
            "peak), %g GB/s HBM",
            nmod > 1 ? "the smallest and slowest, " : "", mem, tf, hbm);
  } else {
    fprintf(info, "not in sharc-plan's table (");
    for (int j = 0, k = 0; j < nmod; j++)
      if (!spec[j])
        fprintf(info, "%s%s", k++ ? ", " : "", mname[j]);
    fprintf(info, "): memory, FLOP/s and HBM keep the defaults");
  }
  if (given->gpu_mem || given->flops || given->hbm || !all_known)
    fprintf(info, "; used: %g GiB%s, %g TFLOP/s%s, %g GB/s%s", cl->gpu_mem_gib,
            given->gpu_mem ? " (--gpu-mem)" : "", cl->tflops,
            given->flops ? " (--flops)" : "", cl->hbm_gbs,
            given->hbm ? " (--hbm)" : "");
  fprintf(info, "\n");
out:
  topo_machine_free(m);
  return rc;
}

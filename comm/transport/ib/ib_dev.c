/*
 * ib_dev.c - which RDMA device, port and GID a rank uses.
 *
 * The choice is made of pure parts, tested on machines without RDMA:
 * SHARC_IB_HCA parsing and matching (NCCL_IB_HCA's syntax), the port among
 * the active candidates (nearest this rank's NUMA node from topo, then the
 * fastest, then ranks of a host spread round-robin), and the GID for RoCE
 * (SHARC_IB_GID_INDEX, else the RoCE v2 IPv4-mapped GID). ib_dev_open puts
 * them together with verbs: enumerate, filter, pick, open, query.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib_dev.h"

/* ---- SHARC_IB_HCA ---------------------------------------------------------
 */

sharc_status_t ib_hca_parse(const char *spec, ib_hca_list_t *out, char *why,
                            size_t why_len) {
  memset(out, 0, sizeof *out);
  if (!spec)
    return SHARC_OK;
  const char *p = spec;
  while (isspace((unsigned char)*p))
    p++;
  if (!*p)
    return SHARC_OK;
  if (*p == '^') {
    out->exclude = 1;
    p++;
  }
  if (*p == '=') {
    out->exact = 1;
    p++;
  }
  for (int idx = 1;; idx++) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    while (len && isspace((unsigned char)*p)) {
      p++;
      len--;
    }
    while (len && isspace((unsigned char)p[len - 1]))
      len--;
    const char *colon = memchr(p, ':', len);
    size_t nlen = colon ? (size_t)(colon - p) : len;
    if (nlen == 0) {
      snprintf(why, why_len, "entry %d is empty (format: name[:port],...)",
               idx);
      return SHARC_ERR_INVALID_ARG;
    }
    if (nlen >= IB_NAME_MAX) {
      snprintf(why, why_len,
               "entry %d: a device name of %zu characters "
               "(at most %d)",
               idx, nlen, IB_NAME_MAX - 1);
      return SHARC_ERR_INVALID_ARG;
    }
    if (out->n == IB_HCA_MAX) {
      snprintf(why, why_len, "more than %d entries", IB_HCA_MAX);
      return SHARC_ERR_INVALID_ARG;
    }
    ib_hca_entry_t *e = &out->e[out->n];
    memcpy(e->name, p, nlen);
    e->name[nlen] = '\0';
    for (size_t i = 0; i < nlen; i++)
      if (isspace((unsigned char)e->name[i]) || e->name[i] == '^' ||
          e->name[i] == '=') {
        snprintf(why, why_len, "entry %d ('%s'): '%c' inside a device name",
                 idx, e->name, e->name[i]);
        return SHARC_ERR_INVALID_ARG;
      }
    e->port = 0;
    if (colon) {
      size_t plen = len - nlen - 1;
      char num[8];
      int ok = plen > 0 && plen < sizeof num;
      if (ok) {
        memcpy(num, colon + 1, plen);
        num[plen] = '\0';
        for (size_t i = 0; i < plen; i++)
          ok &= isdigit((unsigned char)num[i]) != 0;
      }
      long v = ok ? strtol(num, NULL, 10) : 0;
      if (!ok || v < 1 || v > 255) {
        snprintf(why, why_len,
                 "entry %d ('%.*s'): the port after ':' must be 1..255", idx,
                 (int)len, p);
        return SHARC_ERR_INVALID_ARG;
      }
      e->port = (int)v;
    }
    out->n++;
    if (!end)
      break;
    p = end + 1;
  }
  return SHARC_OK;
}

int ib_hca_match(const ib_hca_list_t *l, const char *dev, int port) {
  if (l->n == 0)
    return 1;
  int hit = 0;
  for (int i = 0; i < l->n && !hit; i++) {
    const ib_hca_entry_t *e = &l->e[i];
    int name_ok = l->exact ? !strcmp(e->name, dev)
                           : !strncmp(e->name, dev, strlen(e->name));
    hit = name_ok && (e->port == 0 || e->port == port);
  }
  return l->exclude ? !hit : hit;
}

/* ---- port choice --------------------------------------------------------- */

int ib_dev_near(const topo_machine_t *m, const char *dev, int cpu) {
  if (!m || cpu < 0)
    return 3;
  const topo_pu_t *pu = topo_cpu(m, cpu);
  const topo_nic_t *nic = NULL;
  for (int i = 0; i < m->nnics && !nic; i++)
    if (m->nics[i].rdma && !strcmp(m->nics[i].name, dev))
      nic = &m->nics[i];
  if (!pu || !nic || nic->pci.numa < 0)
    return 3;
  if (nic->pci.numa == pu->numa)
    return 0;
  if (nic->pci.package >= 0 && nic->pci.package == pu->package)
    return 1;
  return 2;
}

int ib_pick_port(const ib_port_cand_t *c, int n, int local_rank) {
  if (n <= 0)
    return -1;
  int best_near = c[0].near;
  for (int i = 1; i < n; i++)
    best_near = SHARC_MIN(best_near, c[i].near);
  double best_gbps = 0;
  for (int i = 0; i < n; i++)
    if (c[i].near == best_near && c[i].gbps > best_gbps)
      best_gbps = c[i].gbps;
  int count = 0;
  for (int i = 0; i < n; i++)
    count += c[i].near == best_near && c[i].gbps >= best_gbps;
  int want = (local_rank < 0 ? 0 : local_rank) % count;
  for (int i = 0; i < n; i++)
    if (c[i].near == best_near && c[i].gbps >= best_gbps && want-- == 0)
      return i;
  return -1; /* not reached */
}

/* ---- GIDs -----------------------------------------------------------------
 */

int ib_gid_is_v4(const uint8_t raw[16]) {
  static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return !memcmp(raw, pre, sizeof pre);
}

static int gid_zero(const uint8_t raw[16]) {
  for (int i = 0; i < 16; i++)
    if (raw[i])
      return 0;
  return 1;
}

static int gid_link_local(const uint8_t raw[16]) {
  return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80;
}

const char *ib_gid_str(const uint8_t raw[16], char *buf, size_t len) {
  if (ib_gid_is_v4(raw)) {
    snprintf(buf, len, "%u.%u.%u.%u", raw[12], raw[13], raw[14], raw[15]);
    return buf;
  }
  char tmp[INET6_ADDRSTRLEN];
  if (!inet_ntop(AF_INET6, raw, tmp, sizeof tmp))
    snprintf(tmp, sizeof tmp, "?");
  snprintf(buf, len, "%s", tmp);
  return buf;
}

int ib_pick_gid(const ib_gid_t *g, int n, int want, int ethernet, char *why,
                size_t why_len) {
  if (want >= 0) {
    for (int i = 0; i < n; i++)
      if (g[i].index == want && !gid_zero(g[i].raw))
        return want;
    char list[160] = "";
    size_t o = 0;
    for (int i = 0; i < n && o + 8 < sizeof list; i++)
      if (!gid_zero(g[i].raw))
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", o ? "," : "",
                              g[i].index);
    snprintf(why, why_len,
             "SHARC_IB_GID_INDEX=%d is not a valid GID of this port "
             "(valid: %s); see show_gids or ibv_devinfo -v",
             want, o ? list : "none");
    return -1;
  }
  if (!ethernet)
    return 0;
  /* Ranked preferences, best first; the lowest index wins within a rank. */
  int best = -1, best_rank = 5;
  for (int i = 0; i < n; i++) {
    const ib_gid_t *e = &g[i];
    if (gid_zero(e->raw))
      continue;
    int rank = 5;
    if (e->type == IB_GID_TYPE_ROCE_V2 && ib_gid_is_v4(e->raw))
      rank = 0;
    else if (e->type == IB_GID_TYPE_ROCE_V2 && !gid_link_local(e->raw))
      rank = 1;
    else if (e->type == IB_GID_TYPE_ROCE_V2)
      rank = 2;
    else if (e->type == IB_GID_TYPE_ROCE_V1)
      rank = 3;
    if (rank < best_rank || (rank == best_rank && e->index < best)) {
      best = e->index;
      best_rank = rank;
    }
  }
  if (best < 0)
    snprintf(why, why_len,
             "the RoCE port has no usable GID (%d entries, none RoCE v1/v2 "
             "with an address): give its interface an IP address, or set "
             "SHARC_IB_GID_INDEX",
             n);
  return best;
}

int ib_peermem_loaded(const char *root) {
  static const char *const paths[] = {
      "/sys/module/nvidia_peermem",
      "/sys/kernel/mm/memory_peers/nv_mem/version"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    char p[512];
    snprintf(p, sizeof p, "%s%s", root ? root : "", paths[i]);
    if (access(p, F_OK) == 0)
      return 1;
  }
  return 0;
}

int ib_gdr_plan(const char *mode, int has_dmabuf, const char *dmabuf_why,
                int peermem, int out[2], char *why, size_t why_len) {
  const char *dw = dmabuf_why && dmabuf_why[0] ? dmabuf_why : "none exported";
  why[0] = '\0';
  if (!strcmp(mode, "off")) {
    snprintf(why, why_len, "SHARC_IB_GDR=off");
    return 0;
  }
  if (!strcmp(mode, "dmabuf")) {
    if (has_dmabuf) {
      out[0] = IB_GDR_DMABUF;
      return 1;
    }
    snprintf(why, why_len,
             "SHARC_IB_GDR=dmabuf, but the region has no dma-buf: %s", dw);
    return 0;
  }
  if (!strcmp(mode, "peermem")) {
    out[0] = IB_GDR_PEERMEM;
    return 1;
  }
  if (strcmp(mode, "auto")) {
    snprintf(why, why_len, "SHARC_IB_GDR=%s: use auto, dmabuf, peermem or off",
             mode);
    return -1;
  }
  int n = 0;
  if (has_dmabuf)
    out[n++] = IB_GDR_DMABUF;
  if (peermem)
    out[n++] = IB_GDR_PEERMEM;
  if (n == 0)
    snprintf(why, why_len,
             "no dma-buf (%s) and nvidia-peermem is not loaded "
             "(modprobe nvidia-peermem)",
             dw);
  return n;
}

const char *ib_gdr_name(int method) {
  return method == IB_GDR_DMABUF    ? "dma-buf"
         : method == IB_GDR_PEERMEM ? "nvidia-peermem"
                                    : "none";
}

/* ---- opening the device (verbs) ------------------------------------------ */

#ifdef SHARC_HAVE_IBVERBS
#include "state.h"

/* Gb/s of one lane (IBTA encoding of active_speed) times the lanes. */
static double port_gbps(const struct ibv_port_attr *a) {
  double lane = a->active_speed == 1     ? 2.5
                : a->active_speed == 2   ? 5.0
                : a->active_speed == 4   ? 10.0
                : a->active_speed == 8   ? 10.3125
                : a->active_speed == 16  ? 14.0625
                : a->active_speed == 32  ? 25.78125
                : a->active_speed == 64  ? 50.0
                : a->active_speed == 128 ? 100.0
                                         : 0;
  int lanes = a->active_width == 1    ? 1
              : a->active_width == 2  ? 4
              : a->active_width == 4  ? 8
              : a->active_width == 8  ? 12
              : a->active_width == 16 ? 2
                                      : 0;
  return lane * lanes;
}

static const char *port_state_name(enum ibv_port_state s) {
  return s == IBV_PORT_DOWN           ? "DOWN"
         : s == IBV_PORT_INIT         ? "INIT (no subnet manager?)"
         : s == IBV_PORT_ARMED        ? "ARMED"
         : s == IBV_PORT_ACTIVE       ? "ACTIVE"
         : s == IBV_PORT_ACTIVE_DEFER ? "ACTIVE_DEFER"
                                      : "unknown";
}

/* Buffers the NIC reads or writes must survive a fork() of this process
 * (data-loader workers, system(), topo's hwloc probe): rdma-core's fork
 * support (as RDMAV_FORK_SAFE=1) must be asked for before any other verbs
 * call. Where it cannot be had, say so once. */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_init(void) {
  int rc = ibv_fork_init();
  if (rc)
    WARN(SUB_NET,
         "ib: ibv_fork_init: %s; a fork() while transfers are in flight may "
         "corrupt them",
         strerror(rc < 0 ? -rc : rc));
}

int ib_probe(char *why, size_t why_len) {
  int n = 0, active = 0;
  pthread_once(&fork_once, fork_init);
  struct ibv_device **list = ibv_get_device_list(&n);
  if (!list) {
    snprintf(why, why_len,
             "no RDMA device: ibv_get_device_list failed (%s; the kernel "
             "has no InfiniBand/RoCE support or /dev/infiniband is missing)",
             strerror(errno));
    return 0;
  }
  for (int i = 0; i < n; i++) {
    struct ibv_context *ctx = ibv_open_device(list[i]);
    struct ibv_device_attr da;
    if (!ctx)
      continue;
    if (ibv_query_device(ctx, &da) == 0)
      for (int p = 1; p <= da.phys_port_cnt; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, (uint8_t)p, &pa) == 0 &&
            pa.state == IBV_PORT_ACTIVE)
          active++;
      }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (n == 0)
    snprintf(why, why_len,
             "no RDMA device: ibv_get_device_list found none (the kernel "
             "has no InfiniBand/RoCE driver or RXE device; see ibv_devinfo)");
  else if (!active)
    snprintf(why, why_len,
             "%d RDMA device(s) but no ACTIVE port (see ibv_devinfo)", n);
  return active;
}

/* Reads the port's GID table (n entries at most) into g. */
static int read_gids(struct ibv_context *ctx, int port, int tbl_len,
                     ib_gid_t *g, int max) {
  int n = 0;
  for (int i = 0; i < tbl_len && n < max; i++) {
    struct ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx, (uint32_t)port, (uint32_t)i, &e, 0) != 0)
      continue; /* ENODATA: an empty slot */
    memcpy(g[n].raw, e.gid.raw, 16);
    g[n].type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? IB_GID_TYPE_ROCE_V2
                : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? IB_GID_TYPE_ROCE_V1
                                                     : IB_GID_TYPE_IB;
    g[n].index = i;
    n++;
  }
  return n;
}

/* Appends to a list of what was seen, cut when full. */
static void seen_add(char *buf, size_t len, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void seen_add(char *buf, size_t len, size_t *off, const char *fmt, ...) {
  if (*off + 1 >= len)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *off, len - *off, fmt, ap);
  va_end(ap);
  if (n > 0)
    *off = SHARC_MIN(*off + (size_t)n, len - 1);
}

/* Finishes d (context open, port chosen): PD, port attributes, GID. */
static sharc_status_t dev_finish(struct sharc_comm *comm, ib_dev_t *d) {
  struct ibv_port_attr pa;
  if (ibv_query_port(d->ctx, (uint8_t)d->port, &pa) != 0)
    return comm_error(comm, SHARC_ERR_NET, "ib: %s port %d: query failed: %s",
                      d->name, d->port, strerror(errno));
  d->ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  d->lid = pa.lid;
  d->mtu = pa.active_mtu;
  d->gbps = port_gbps(&pa);
  int want = (int)param_int(PARAM_IB_GID_INDEX);
  char why[300];
  ib_gid_t *g = calloc((size_t)SHARC_MAX(pa.gid_tbl_len, 1), sizeof *g);
  if (!g)
    return comm_error(comm, SHARC_ERR_NO_MEM, "ib: out of memory");
  int n = read_gids(d->ctx, d->port, pa.gid_tbl_len, g, pa.gid_tbl_len);
  d->gid_index = ib_pick_gid(g, n, want, d->ethernet, why, sizeof why);
  for (int i = 0; i < n && d->gid_index >= 0; i++)
    if (g[i].index == d->gid_index) {
      memcpy(d->gid, g[i].raw, 16);
      d->gid_type = g[i].type;
    }
  free(g);
  if (d->gid_index < 0)
    return comm_error(comm, SHARC_ERR_NET, "ib: %s port %d: %s", d->name,
                      d->port, why);
  /* InfiniBand routes by LID; a GID index asked for means "use the GRH". */
  d->global = d->ethernet || want >= 0;
  if (!d->ethernet && d->lid == 0)
    return comm_error(comm, SHARC_ERR_NET,
                      "ib: %s port %d has no LID: is a subnet manager "
                      "running on the fabric? (sminfo, ibstat)",
                      d->name, d->port);
  d->pd = ibv_alloc_pd(d->ctx);
  if (!d->pd)
    return comm_error(comm, SHARC_ERR_NET,
                      "ib: %s: cannot allocate a protection domain: %s",
                      d->name, strerror(errno));
  return SHARC_OK;
}

sharc_status_t ib_dev_open(struct sharc_comm *comm, ib_dev_t *d) {
  memset(d, 0, sizeof *d);
  ib_hca_list_t hca;
  char why[300];
  const char *spec = param_str(PARAM_IB_HCA);
  if (ib_hca_parse(spec, &hca, why, sizeof why) != SHARC_OK)
    return comm_error(comm, SHARC_ERR_INVALID_ARG, "ib: SHARC_IB_HCA=%s: %s",
                      spec, why);
  int ndev = 0;
  pthread_once(&fork_once, fork_init);
  struct ibv_device **list = ibv_get_device_list(&ndev);
  if (!list || ndev == 0) {
    if (list)
      ibv_free_device_list(list);
    ib_probe(why, sizeof why);
    return comm_error(comm, SHARC_ERR_UNSUPPORTED,
                      "ib: %s; use SHARC_TRANSPORT=tcp, or load the driver "
                      "(check with ibv_devinfo)",
                      why);
  }
  ib_port_cand_t *cand = calloc((size_t)ndev * 8, sizeof *cand);
  int ncand = 0;
  char seen[400] = "";
  size_t so = 0;
  sharc_status_t st = SHARC_OK;
  if (!cand) {
    ibv_free_device_list(list);
    return comm_error(comm, SHARC_ERR_NO_MEM, "ib: out of memory");
  }
  for (int i = 0; i < ndev; i++) {
    const char *name = ibv_get_device_name(list[i]);
    struct ibv_context *ctx = ibv_open_device(list[i]);
    struct ibv_device_attr da;
    if (!ctx || ibv_query_device(ctx, &da) != 0) {
      seen_add(seen, sizeof seen, &so, "%s%s (cannot open: %s)", so ? ", " : "",
               name, strerror(errno));
      if (ctx)
        ibv_close_device(ctx);
      continue;
    }
    for (int p = 1; p <= da.phys_port_cnt && p <= 8; p++) {
      struct ibv_port_attr pa;
      const char *skip = NULL;
      if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0)
        skip = "query failed";
      else if (!ib_hca_match(&hca, name, p))
        skip = "not in SHARC_IB_HCA";
      else if (pa.state != IBV_PORT_ACTIVE)
        skip = port_state_name(pa.state);
      if (skip) {
        seen_add(seen, sizeof seen, &so, "%s%s:%d (%s)", so ? ", " : "", name,
                 p, skip);
        continue;
      }
      ib_port_cand_t *c = &cand[ncand++];
      topo_copy(c->dev, sizeof c->dev, name);
      c->port = p;
      c->near = 3;
      c->gbps = port_gbps(&pa);
    }
    ibv_close_device(ctx);
  }
  if (ncand == 0) {
    st = comm_error(comm, SHARC_ERR_NET,
                    "ib: no usable RDMA port among %d device(s): %s; check "
                    "ibv_devinfo and SHARC_IB_HCA (now '%s')",
                    ndev, seen, spec);
    goto done;
  }
  if (ncand > 1) { /* nearness only matters when there is a choice */
    topo_machine_t *m = NULL;
    if (topo_machine_load(NULL, &m) == SHARC_OK) {
      int cpu = sched_getcpu();
      for (int i = 0; i < ncand; i++)
        cand[i].near = ib_dev_near(m, cand[i].dev, cpu);
      topo_machine_free(m);
    }
  }
  /* Ranks of this host, counted whatever transport carries them. */
  int local = comm->local_rank;
  if (comm->host_of) {
    local = 0;
    for (int r = 0; r < comm->rank; r++)
      local += comm->host_of[r] == comm->host_of[comm->rank];
  }
  int pick = ib_pick_port(cand, ncand, local);
  for (int i = 0; i < ndev && !d->ctx; i++)
    if (!strcmp(ibv_get_device_name(list[i]), cand[pick].dev))
      d->ctx = ibv_open_device(list[i]);
  if (!d->ctx) {
    st = comm_error(comm, SHARC_ERR_NET, "ib: cannot open %s: %s",
                    cand[pick].dev, strerror(errno));
    goto done;
  }
  topo_copy(d->name, sizeof d->name, cand[pick].dev);
  d->port = cand[pick].port;
  d->ncand = ncand;
  d->near = cand[pick].near;
  st = dev_finish(comm, d);
done:
  free(cand);
  ibv_free_device_list(list);
  if (st != SHARC_OK)
    ib_dev_close(d);
  return st;
}

void ib_dev_close(ib_dev_t *d) {
  if (d->pd)
    ibv_dealloc_pd(d->pd);
  if (d->ctx)
    ibv_close_device(d->ctx);
  d->pd = NULL;
  d->ctx = NULL;
}

#else /* !SHARC_HAVE_IBVERBS */

int ib_probe(char *why, size_t why_len) {
  snprintf(why, why_len,
           "sharc was built without libibverbs: install libibverbs-dev "
           "(rdma-core) and rebuild");
  return 0;
}

#endif

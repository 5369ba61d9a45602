/*
 * test_ib_dev.c - the ib transport's pure parts, which run on any machine:
 * SHARC_IB_HCA parsing and matching (NCCL_IB_HCA's syntax), the port a rank
 * picks (nearness from a hand-built machine, speed, spreading), the GID
 * choice for RoCE, the nvidia-peermem check, the order of completions
 * across QPs, and the registration cache with fake registrations.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrl.h"
#include "ib.h"
#include "ib_dev.h"
#include "ib_track.h"
#include "unit/expect.h"

/* ---- SHARC_IB_HCA ---------------------------------------------------------
 */

static ib_hca_list_t parse_ok(const char *spec) {
  ib_hca_list_t l;
  char why[200] = "";
  sharc_status_t st = ib_hca_parse(spec, &l, why, sizeof why);
  EXPECT(st == SHARC_OK, "'%s': %s", spec, why);
  return l;
}

static void parse_bad(const char *spec, const char *needle) {
  ib_hca_list_t l;
  char why[200] = "";
  sharc_status_t st = ib_hca_parse(spec, &l, why, sizeof why);
  EXPECT(st == SHARC_ERR_INVALID_ARG, "'%s' accepted", spec);
  EXPECT(strstr(why, needle), "'%s': reason '%s' lacks '%s'", spec, why,
         needle);
}

static void test_hca(void) {
  ib_hca_list_t l = parse_ok(NULL);
  EXPECT(l.n == 0 && ib_hca_match(&l, "mlx5_0", 1), "NULL: everything");
  l = parse_ok("  ");
  EXPECT(l.n == 0 && ib_hca_match(&l, "bnxt_re0", 2), "blank: everything");

  l = parse_ok("mlx5");
  EXPECT(l.n == 1 && !l.exclude && !l.exact && l.e[0].port == 0, "mlx5");
  EXPECT(ib_hca_match(&l, "mlx5_0", 1) && ib_hca_match(&l, "mlx5_11", 2),
         "prefix mlx5 must select mlx5_0 and mlx5_11");
  EXPECT(!ib_hca_match(&l, "mlx4_0", 1), "mlx5 selected mlx4_0");

  l = parse_ok("mlx5_0:1, mlx5_1:2");
  EXPECT(l.n == 2 && l.e[1].port == 2 && !strcmp(l.e[1].name, "mlx5_1"),
         "two entries with ports (spaces trimmed)");
  EXPECT(ib_hca_match(&l, "mlx5_0", 1) && !ib_hca_match(&l, "mlx5_0", 2),
         "port 1 only on mlx5_0");
  EXPECT(ib_hca_match(&l, "mlx5_1", 2) && !ib_hca_match(&l, "mlx5_1", 1),
         "port 2 only on mlx5_1");
  /* Prefixes: NCCL's "mlx5_1" also selects mlx5_10..mlx5_19. */
  EXPECT(ib_hca_match(&l, "mlx5_10", 2) && !ib_hca_match(&l, "mlx5_10", 1),
         "prefix mlx5_1:2 selects port 2 of mlx5_10");

  l = parse_ok("=mlx5_1");
  EXPECT(l.exact && ib_hca_match(&l, "mlx5_1", 1) &&
             !ib_hca_match(&l, "mlx5_10", 1),
         "= means the exact name");

  l = parse_ok("^mlx5_1:1");
  EXPECT(l.exclude && !l.exact, "^ excludes");
  EXPECT(!ib_hca_match(&l, "mlx5_1", 1) && ib_hca_match(&l, "mlx5_1", 2) &&
             ib_hca_match(&l, "mlx5_0", 1) && !ib_hca_match(&l, "mlx5_12", 1),
         "^mlx5_1:1 leaves out port 1 of mlx5_1 (and of its prefix matches)");

  l = parse_ok("^=mlx5_1");
  EXPECT(l.exclude && l.exact && ib_hca_match(&l, "mlx5_12", 1) &&
             !ib_hca_match(&l, "mlx5_1", 1),
         "^= excludes one exact name");

  parse_bad("mlx5_0,", "entry 2 is empty");
  parse_bad(",mlx5_0", "entry 1 is empty");
  parse_bad("mlx5_0:", "port");
  parse_bad("mlx5_0:0", "1..255");
  parse_bad("mlx5_0:256", "1..255");
  parse_bad("mlx5_0:1x", "port");
  parse_bad(":1", "empty");
  parse_bad("mlx5 0", "inside a device name");
  parse_bad("mlx5_0,^mlx5_1", "inside a device name");
  char big[200];
  memset(big, 'a', 100);
  big[100] = 0;
  parse_bad(big, "at most 63");
  char many[400] = "";
  for (int i = 0; i < IB_HCA_MAX + 1; i++)
    snprintf(many + strlen(many), sizeof many - strlen(many), "%sd%d",
             i ? "," : "", i);
  parse_bad(many, "more than 32");
  l = parse_ok("mlx5_0:255");
  EXPECT(l.e[0].port == 255, "port 255");
}

/* ---- port choice --------------------------------------------------------- */

static topo_machine_t *machine(void) {
  topo_machine_t *m = calloc(1, sizeof *m);
  /* CPUs 0 (NUMA 0, package 0), 1 (NUMA 1, package 0), 2 (NUMA 2,
   * package 1). NICs mlx5_0 on NUMA 0, mlx5_1 on NUMA 1, mlx5_2 on NUMA 2,
   * an Ethernet-only eth0 on NUMA 0, and mlx5_9 whose locality is unknown. */
  static const int pu_numa[3] = {0, 1, 2}, pu_pkg[3] = {0, 0, 1};
  for (int i = 0; i < 3; i++) {
    topo_pu_t *pu = topo_push((void **)&m->pus, &m->npus, sizeof *pu);
    *pu = (topo_pu_t){i, i, pu_numa[i], pu_pkg[i]};
  }
  static const struct {
    const char *name;
    int numa, pkg, rdma;
  } nics[] = {{"mlx5_0", 0, 0, 1},
              {"mlx5_1", 1, 0, 1},
              {"mlx5_2", 2, 1, 1},
              {"eth0", 0, 0, 0},
              {"mlx5_9", -1, -1, 1}};
  for (size_t i = 0; i < sizeof nics / sizeof nics[0]; i++) {
    topo_nic_t *n = topo_push((void **)&m->nics, &m->nnics, sizeof *n);
    topo_pciloc_init(&n->pci);
    topo_copy(n->name, sizeof n->name, nics[i].name);
    n->pci.numa = nics[i].numa;
    n->pci.package = nics[i].pkg;
    n->rdma = nics[i].rdma;
  }
  return m;
}

static void test_pick(void) {
  topo_machine_t *m = machine();
  EXPECT(ib_dev_near(m, "mlx5_0", 0) == 0, "same NUMA node");
  EXPECT(ib_dev_near(m, "mlx5_1", 0) == 1, "same package");
  EXPECT(ib_dev_near(m, "mlx5_2", 0) == 2, "other package");
  EXPECT(ib_dev_near(m, "mlx5_2", 2) == 0, "CPU 2 is next to mlx5_2");
  EXPECT(ib_dev_near(m, "eth0", 0) == 3, "not an RDMA device: unknown");
  EXPECT(ib_dev_near(m, "mlx5_9", 0) == 3, "unknown locality");
  EXPECT(ib_dev_near(m, "mlx5_7", 0) == 3, "absent device");
  EXPECT(ib_dev_near(m, "mlx5_0", 17) == 3, "absent CPU");
  EXPECT(ib_dev_near(NULL, "mlx5_0", 0) == 3, "no topology");
  EXPECT(ib_dev_near(m, "mlx5_0", -1) == 3, "no CPU");
  free(m->pus);
  free(m->nics);
  free(m);

  EXPECT(ib_pick_port(NULL, 0, 0) == -1, "no candidate");
  ib_port_cand_t c[4] = {{"mlx5_0", 1, 2, 100},
                         {"mlx5_1", 1, 0, 100},
                         {"mlx5_2", 1, 0, 200},
                         {"mlx5_3", 1, 0, 200}};
  /* Nearest first, then the fastest of those, then spread by local rank. */
  EXPECT(ib_pick_port(c, 4, 0) == 2, "rank 0 -> %d", ib_pick_port(c, 4, 0));
  EXPECT(ib_pick_port(c, 4, 1) == 3, "rank 1 -> %d", ib_pick_port(c, 4, 1));
  EXPECT(ib_pick_port(c, 4, 2) == 2, "rank 2 -> %d", ib_pick_port(c, 4, 2));
  EXPECT(ib_pick_port(c, 4, -1) == 2, "unknown local rank -> first");
  c[1].gbps = 400;
  EXPECT(ib_pick_port(c, 4, 1) == 1, "a faster near port wins");
  for (int i = 0; i < 4; i++)
    c[i] = (ib_port_cand_t){"x", 1, 3, 0}; /* nothing known: spread all */
  EXPECT(ib_pick_port(c, 4, 5) == 1, "rank 5 of 4 equal ports -> 1");
}

/* ---- GIDs -----------------------------------------------------------------
 */

static ib_gid_t gid_v4(int index, int type, int a, int b, int c, int d) {
  ib_gid_t g = {{0}, type, index};
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = (uint8_t)a;
  g.raw[13] = (uint8_t)b;
  g.raw[14] = (uint8_t)c;
  g.raw[15] = (uint8_t)d;
  return g;
}

static ib_gid_t gid_v6(int index, int type, int link_local) {
  ib_gid_t g = {{0}, type, index};
  g.raw[0] = link_local ? 0xfe : 0x20;
  g.raw[1] = link_local ? 0x80 : 0x01;
  g.raw[15] = 7;
  return g;
}

static void test_gid(void) {
  char why[300], buf[64];
  /* A typical RoCE table: per address a v1 and a v2 entry. */
  ib_gid_t t[6] = {gid_v6(0, IB_GID_TYPE_ROCE_V1, 1),
                   gid_v6(1, IB_GID_TYPE_ROCE_V2, 1),
                   gid_v4(2, IB_GID_TYPE_ROCE_V1, 10, 0, 0, 5),
                   gid_v4(3, IB_GID_TYPE_ROCE_V2, 10, 0, 0, 5),
                   gid_v6(4, IB_GID_TYPE_ROCE_V1, 0),
                   gid_v6(5, IB_GID_TYPE_ROCE_V2, 0)};
  EXPECT(ib_pick_gid(t, 6, -1, 1, why, sizeof why) == 3,
         "RoCE v2 IPv4-mapped first: got %d",
         ib_pick_gid(t, 6, -1, 1, why, sizeof why));
  EXPECT(ib_pick_gid(t, 3, -1, 1, why, sizeof why) == 1,
         "without v2 global addresses: v2 link-local");
  ib_gid_t t2[3] = {t[0], t[4], t[5]};
  EXPECT(ib_pick_gid(t2, 3, -1, 1, why, sizeof why) == 5,
         "global IPv6 v2 before v1");
  ib_gid_t t3[2] = {t[2], t[0]};
  EXPECT(ib_pick_gid(t3, 2, -1, 1, why, sizeof why) == 0,
         "v1 only: the lowest index");
  EXPECT(ib_pick_gid(t, 6, 4, 1, why, sizeof why) == 4, "explicit index");
  EXPECT(ib_pick_gid(t, 6, 9, 1, why, sizeof why) == -1 &&
             strstr(why, "SHARC_IB_GID_INDEX=9") &&
             strstr(why, "valid: 0,1,2,3,4,5"),
         "a missing explicit index is refused: %s", why);
  ib_gid_t zero = {{0}, IB_GID_TYPE_ROCE_V2, 0};
  EXPECT(ib_pick_gid(&zero, 1, -1, 1, why, sizeof why) == -1 &&
             strstr(why, "no usable GID"),
         "an empty table: %s", why);
  EXPECT(ib_pick_gid(&zero, 1, -1, 0, why, sizeof why) == 0,
         "InfiniBand: GID 0 (routing by LID)");
  EXPECT(ib_gid_is_v4(t[3].raw) && !ib_gid_is_v4(t[5].raw), "v4 mapping");
  EXPECT(!strcmp(ib_gid_str(t[3].raw, buf, sizeof buf), "10.0.0.5"), "%s", buf);
  EXPECT(!strcmp(ib_gid_str(t[1].raw, buf, sizeof buf), "fe80::7"), "%s", buf);
}

static void test_peermem(void) {
  char root[] = "/tmp/sharc-ib-XXXXXX", path[256];
  EXPECT(mkdtemp(root) != NULL, "mkdtemp: %s", strerror(errno));
  EXPECT(!ib_peermem_loaded(root), "an empty tree has no peermem");
  snprintf(path, sizeof path, "%s/sys", root);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/sys/module", root);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/sys/module/nvidia_peermem", root);
  mkdir(path, 0700);
  EXPECT(ib_peermem_loaded(root), "nvidia_peermem in /sys/module");
  rmdir(path);
  snprintf(path, sizeof path, "%s/sys/module", root);
  rmdir(path);
  snprintf(path, sizeof path, "%s/sys", root);
  rmdir(path);
  rmdir(root);
  printf("test_ib_dev: nvidia-peermem on this machine: %s\n",
         ib_peermem_loaded("") ? "loaded" : "not loaded");
}

/* SHARC_IB_GDR: which registrations of device memory are tried, in which
 * order, and why none. */
static void test_gdr_plan(void) {
  int m[2] = {-1, -1};
  char why[300];
  EXPECT(ib_gdr_plan("auto", 1, NULL, 1, m, why, sizeof why) == 2 &&
             m[0] == IB_GDR_DMABUF && m[1] == IB_GDR_PEERMEM,
         "auto with both: dma-buf first, then peermem");
  EXPECT(ib_gdr_plan("auto", 0, "no export", 1, m, why, sizeof why) == 1 &&
             m[0] == IB_GDR_PEERMEM,
         "auto without a dma-buf: peermem");
  EXPECT(ib_gdr_plan("auto", 1, NULL, 0, m, why, sizeof why) == 1 &&
             m[0] == IB_GDR_DMABUF,
         "auto without peermem: dma-buf");
  EXPECT(ib_gdr_plan("auto", 0, "CUresult 801", 0, m, why, sizeof why) == 0 &&
             strstr(why, "CUresult 801") && strstr(why, "nvidia-peermem"),
         "auto with neither: none, naming both (%s)", why);
  EXPECT(ib_gdr_plan("dmabuf", 1, NULL, 1, m, why, sizeof why) == 1 &&
             m[0] == IB_GDR_DMABUF,
         "dmabuf: only dma-buf");
  EXPECT(ib_gdr_plan("dmabuf", 0, "no export", 1, m, why, sizeof why) == 0 &&
             strstr(why, "no export"),
         "dmabuf without one: none (%s)", why);
  EXPECT(ib_gdr_plan("peermem", 1, NULL, 0, m, why, sizeof why) == 1 &&
             m[0] == IB_GDR_PEERMEM,
         "peermem: tried even where the module does not show");
  EXPECT(ib_gdr_plan("off", 1, NULL, 1, m, why, sizeof why) == 0 &&
             strstr(why, "off"),
         "off: none");
  EXPECT(ib_gdr_plan("yes", 1, NULL, 1, m, why, sizeof why) == -1 &&
             strstr(why, "SHARC_IB_GDR=yes"),
         "a bad mode is refused, named (%s)", why);
  EXPECT(!strcmp(ib_gdr_name(IB_GDR_DMABUF), "dma-buf") &&
             !strcmp(ib_gdr_name(IB_GDR_NONE), "none"),
         "names");
}

/* ---- order of completions ------------------------------------------------ */

static void test_order(void) {
  ib_order_t tx, rx;
  EXPECT(ib_order_init(&tx, 3) == SHARC_OK && ib_order_init(&rx, 3) == SHARC_OK,
         "init");
  EXPECT(tx.window == 3 * IB_QP_WRITES, "window %d", tx.window);
  /* Writes 0..5 of 100 bytes each; QPs 0,1,2,0,1,2. */
  for (uint64_t k = 0; k < 6; k++)
    ib_order_post(&tx, k, 100 * (k + 1));
  EXPECT(ib_order_done(&tx, 1) == 0, "write 1 done, 0 not: prefix 0");
  EXPECT(ib_order_done(&tx, 2) == 0, "write 2 done: still 0");
  EXPECT(ib_order_done(&tx, 0) == 300, "write 0 done: 0..2 complete");
  EXPECT(ib_order_done(&tx, 2) == 300, "write 5 done alone");
  EXPECT(ib_order_done(&tx, 0) == 400, "write 3");
  EXPECT(ib_order_done(&tx, 1) == 600, "write 4 closes the gap");
  EXPECT(ib_order_end(&tx, 5) == 600, "end of write 5");

  /* Receiver: arrivals out of order across QPs, zero-length writes too. */
  EXPECT(ib_order_arrive(&rx, 2, 30) == 0, "write 2 first");
  EXPECT(ib_order_arrive(&rx, 0, 10) == 10, "write 0");
  EXPECT(ib_order_arrive(&rx, 1, 30) == 30, "write 1 (zero bytes)");
  EXPECT(ib_order_arrive(&rx, 0, 50) == 50, "write 3");
  EXPECT(ib_order_arrive(&rx, 3, 60) == UINT64_MAX, "QP 3 of 3 refused");
  EXPECT(ib_order_arrive(&rx, 1, 40) == UINT64_MAX,
         "an end behind the prefix is refused");
  /* Overrunning the window: QP 2 runs ahead while write 4 (QP 1) is
   * missing; write k is refused once k - 4 reaches the window (96). */
  int refused_at = -1;
  for (int i = 0; i <= IB_QP_WRITES && refused_at < 0; i++)
    if (ib_order_arrive(&rx, 2, 1000 + (uint64_t)i) == UINT64_MAX)
      refused_at = i;
  EXPECT(refused_at == IB_QP_WRITES, "refused at write %d of QP 2", refused_at);
  ib_order_free(&tx);
  ib_order_free(&rx);

  /* Random interleavings with one QP per stream position, checked
   * against the obvious answer. */
  unsigned seed = 7;
  for (int trial = 0; trial < 200; trial++) {
    int nqp = 1 + trial % 4;
    ib_order_t o;
    ib_order_init(&o, nqp);
    int n = 1 + (int)(seed % 50);
    uint64_t end[64], pre = 0;
    int arrived[64] = {0}, next_of_qp[4] = {0};
    for (int k = 0; k < n; k++) {
      seed = seed * 1103515245u + 12345u;
      end[k] = (k ? end[k - 1] : 0) + (seed >> 16) % 5;
    }
    int ok = 1, left = n;
    while (left) {
      seed = seed * 1103515245u + 12345u;
      int q = (int)((seed >> 16) % (unsigned)nqp);
      int k = next_of_qp[q] * nqp + q;
      if (k >= n)
        continue;
      next_of_qp[q]++;
      arrived[k] = 1;
      left--;
      uint64_t got = ib_order_arrive(&o, q, end[k]);
      int j = 0;
      while (j < n && arrived[j])
        j++;
      pre = j ? end[j - 1] : 0;
      ok &= got == pre;
    }
    EXPECT(ok, "trial %d (%d QPs, %d writes): prefix wrong", trial, nqp, n);
    ib_order_free(&o);
  }
}

/* ---- registration cache ---------------------------------------------------
 */

typedef struct {
  int regs, deregs, fail_next;
  uint64_t dead_id; /* alive() says no for this id */
} fake_t;

static int fake_reg(void *arg, void *base, size_t len, void **handle,
                    uint32_t *lkey) {
  fake_t *f = arg;
  if (f->fail_next) {
    f->fail_next = 0;
    return ENOMEM;
  }
  f->regs++;
  *handle = malloc(1);
  *lkey = (uint32_t)(uintptr_t)base ^ (uint32_t)len;
  return 0;
}

static void fake_dereg(void *arg, void *handle) {
  ((fake_t *)arg)->deregs++;
  free(handle);
}

static int fake_alive(void *arg, uint64_t id, uintptr_t base, size_t len) {
  return id != ((fake_t *)arg)->dead_id;
}

static void test_regcache(void) {
  fake_t f = {0, 0, 0, 0};
  ib_reg_ops_t ops = {fake_reg, fake_dereg, fake_alive, &f};
  ib_regcache_t c;
  EXPECT(ib_regcache_init(&c, 3, &ops) == SHARC_OK, "init");
  static char a[4096], b[4096], d[4096], e[4096];
  int err = 0;
  ib_reg_entry_t *ea = ib_regcache_get(&c, 1, a, sizeof a, &err);
  EXPECT(ea && f.regs == 1 && c.misses == 1, "first use registers");
  ib_regcache_put(&c, ea);
  ib_reg_entry_t *ea2 = ib_regcache_get(&c, 1, a, sizeof a, &err);
  EXPECT(ea2 == ea && f.regs == 1 && c.hits == 1, "second use hits");
  ib_regcache_put(&c, ea2);
  /* Same address, new region id (freed and allocated again): a miss. */
  ib_reg_entry_t *ea3 = ib_regcache_get(&c, 5, a, sizeof a, &err);
  EXPECT(ea3 && ea3 != ea && f.regs == 2, "a new id is a new registration");
  ib_regcache_put(&c, ea3);
  ib_reg_entry_t *eb = ib_regcache_get(&c, 2, b, sizeof b, &err);
  EXPECT(eb && c.n == 3, "3 entries");
  /* eb stays in use; the cache is full: the LRU idle entry (id 1) goes. */
  ib_reg_entry_t *ed = ib_regcache_get(&c, 3, d, sizeof d, &err);
  EXPECT(ed && f.deregs == 1 && c.evictions == 1, "LRU eviction");
  EXPECT(eb->id == 2 && eb->inuse == 1, "an entry in use does not move");
  /* Everything in use: no room, no eviction. */
  ib_reg_entry_t *all[3];
  int k = 0;
  for (int i = 0; i < c.cap; i++)
    if (c.e[i].handle && !c.e[i].inuse)
      all[k++] = &c.e[i], c.e[i].inuse++;
  EXPECT(ib_regcache_get(&c, 4, e, sizeof e, &err) == NULL && err == ENOSPC,
         "full of entries in use: ENOSPC (err %d)", err);
  for (int i = 0; i < k; i++)
    ib_regcache_put(&c, all[i]);
  /* A region freed by the user is dropped at the next miss. */
  f.dead_id = 3;
  int deregs = f.deregs;
  ib_regcache_put(&c, ed);
  ib_reg_entry_t *ee = ib_regcache_get(&c, 4, e, sizeof e, &err);
  EXPECT(ee && f.deregs >= deregs + 1, "dead region 3 dropped");
  for (int i = 0; i < c.cap; i++)
    EXPECT(!c.e[i].handle || c.e[i].id != 3, "id 3 still cached");
  ib_regcache_put(&c, ee);
  /* A failed registration is reported, nothing cached. */
  f.fail_next = 1;
  int before = c.n;
  EXPECT(ib_regcache_get(&c, 9, e, 100, &err) == NULL && err == ENOMEM,
         "registration failure: err %d", err);
  EXPECT(c.n <= before, "nothing added");
  ib_regcache_put(&c, eb);
  ib_regcache_free(&c);
  EXPECT(f.regs == f.deregs, "%d registrations, %d deregistrations", f.regs,
         f.deregs);
}

int main(void) {
  test_hca();
  test_pick();
  test_gid();
  test_peermem();
  test_gdr_plan();
  test_order();
  test_regcache();
  printf("test_ib_dev: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

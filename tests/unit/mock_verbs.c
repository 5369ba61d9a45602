/*
 * mock_verbs.c - the software RC HCA of mock_verbs.h. Everything runs under
 * one lock; the wire thread carries work requests. Only what the ib
 * transport calls is implemented, with the checks a verbs reviewer makes.
 */
#include "mock_verbs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#undef ibv_query_port /* the compat entry points are what we define */
#undef ibv_reg_mr

#define PORT_MTU IBV_MTU_1024
#define NGID 4

typedef struct mctx {
  struct ibv_context c;
  int apipe[2];
  int refs; /* PDs and channels */
  struct mctx *next;
} mctx_t;

typedef struct {
  struct ibv_pd pd;
  int refs; /* MRs and QPs */
} mpd_t;

typedef struct mmr {
  struct ibv_mr mr;
  int access;
  /* a dma-buf MR: the importer's own mapping of the dma-buf's pages, at
   * map + (address - mr.addr) for each address of the MR (mr.addr is the
   * iova) */
  uint8_t *map, *map_base;
  size_t map_len;
  struct mmr *next;
} mmr_t;

typedef struct {
  struct ibv_comp_channel ch;
  int pipe[2]; /* carries the mcq_t pointer of each event */
  int ncq;
} mchan_t;

typedef struct {
  struct ibv_cq cq;
  struct ibv_wc *ring;
  int cap, head, n;
  int armed, unacked, nqp;
} mcq_t;

typedef struct {
  uint64_t wr_id, laddr, raddr;
  uint32_t len, lkey, rkey, imm;
  int with_imm, signaled;
} mwr_t;

typedef struct mqp {
  struct ibv_qp qp;
  int max_send, max_recv;
  mwr_t *sq; /* posted, not carried yet */
  int sq_head, sq_n, outstanding;
  uint64_t *rq;
  int rq_head, rq_n;
  uint32_t dest_qpn, rq_psn, sq_psn;
  struct mqp *next;
} mqp_t;

/* softcuda's dma-buf table (tests/softcuda/softcuda_mem.c), when the test
 * program runs on softcuda: the file offset and length a dma-buf stands
 * for. */
int softcuda_dmabuf_info(int fd, uint64_t *file_off, size_t *len)
    __attribute__((weak));

static int gdr_dmabuf, gdr_peermem;
static int (*gdr_is_device)(const void *p);

static pthread_mutex_t M = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wire_cv = PTHREAD_COND_INITIALIZER;
static int wire_started, fail_next;
static mctx_t *ctxs;
static mmr_t *mrs;
static mqp_t *qps;
static uint32_t next_key = 0x100, next_qpn = 0x40;
static mock_report_t R;
static struct ibv_device dev0 = {.name = "mock0", .dev_name = "uverbs0"};

static void bad(int *counter, const char *fmt, ...) {
  (*counter)++;
  if (R.first[0])
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(R.first, sizeof R.first, fmt, ap);
  va_end(ap);
}

void mock_report(mock_report_t *out) {
  pthread_mutex_lock(&M);
  *out = R;
  pthread_mutex_unlock(&M);
}

void mock_fail_next_data_write(void) {
  pthread_mutex_lock(&M);
  fail_next = 1;
  pthread_mutex_unlock(&M);
}

void mock_port_down(void) {
  pthread_mutex_lock(&M);
  for (mctx_t *x = ctxs; x; x = x->next) {
    int ev[2] = {IBV_EVENT_PORT_ERR, 1};
    ssize_t r = write(x->apipe[1], ev, sizeof ev);
    (void)r;
  }
  pthread_mutex_unlock(&M);
}

/* ---- completions ---------------------------------------------------------
 */

static void cq_push(mcq_t *q, const struct ibv_wc *wc) {
  if (q->n == q->cap) {
    bad(&R.cq_over, "CQ of %d entries overflowed", q->cap);
    return;
  }
  q->ring[(q->head + q->n) % q->cap] = *wc;
  q->n++;
  if (q->armed && q->cq.channel) { /* one event per arming */
    q->armed = 0;
    mchan_t *ch = (mchan_t *)q->cq.channel;
    ssize_t r = write(ch->pipe[1], &q, sizeof q);
    (void)r;
  }
}

static mqp_t *qp_by_num(uint32_t n) {
  for (mqp_t *q = qps; q; q = q->next)
    if (q->qp.qp_num == n)
      return q;
  return NULL;
}

static mmr_t *mr_covering(uint32_t key, int remote, uint64_t a, uint32_t len) {
  for (mmr_t *m = mrs; m; m = m->next) {
    uint64_t b = (uint64_t)(uintptr_t)m->mr.addr;
    if ((remote ? m->mr.rkey : m->mr.lkey) == key && a >= b &&
        a + len <= b + m->mr.length)
      return m;
  }
  return NULL;
}

/* The QP failed: flush what it still holds (as hardware does). */
static void qp_error(mqp_t *q) {
  q->qp.state = IBV_QPS_ERR;
  while (q->sq_n) {
    mwr_t *w = &q->sq[q->sq_head];
    struct ibv_wc wc = {.wr_id = w->wr_id,
                        .status = IBV_WC_WR_FLUSH_ERR,
                        .qp_num = q->qp.qp_num};
    q->sq_head = (q->sq_head + 1) % q->max_send;
    q->sq_n--;
    q->outstanding--;
    cq_push((mcq_t *)q->qp.send_cq, &wc);
  }
  while (q->rq_n) {
    struct ibv_wc wc = {.wr_id = q->rq[q->rq_head],
                        .status = IBV_WC_WR_FLUSH_ERR,
                        .qp_num = q->qp.qp_num};
    q->rq_head = (q->rq_head + 1) % q->max_recv;
    q->rq_n--;
    cq_push((mcq_t *)q->qp.recv_cq, &wc);
  }
}

/* Carries the first posted request of q. Returns 0 when it must wait (the
 * receiver had no receive posted: RNR, retried later). */
static int carry(mqp_t *q) {
  mwr_t w = q->sq[q->sq_head];
  enum ibv_wc_status st = IBV_WC_SUCCESS;
  mqp_t *d = qp_by_num(q->dest_qpn);
  if (fail_next && w.len > 0) {
    fail_next = 0;
    st = IBV_WC_RETRY_EXC_ERR;
  } else if (!d || (d->qp.state != IBV_QPS_RTR && d->qp.state != IBV_QPS_RTS)) {
    st = IBV_WC_RETRY_EXC_ERR; /* nobody answers */
  } else {
    if (d->rq_psn != q->sq_psn || d->dest_qpn != q->qp.qp_num)
      bad(&R.psn,
          "QP 0x%x -> 0x%x: sq_psn 0x%x, peer's rq_psn 0x%x, peer "
          "points at 0x%x",
          q->qp.qp_num, d->qp.qp_num, q->sq_psn, d->rq_psn, d->dest_qpn);
    mmr_t *l = w.len ? mr_covering(w.lkey, 0, w.laddr, w.len) : NULL;
    mmr_t *r = w.len ? mr_covering(w.rkey, 1, w.raddr, w.len) : NULL;
    if (w.len && (!l || l->mr.pd != q->qp.pd)) {
      bad(&R.access,
          "write of %u bytes from 0x%llx: lkey 0x%x does not "
          "cover it",
          w.len, (unsigned long long)w.laddr, w.lkey);
      st = IBV_WC_LOC_PROT_ERR;
    } else if (w.len && (!r || !(r->access & IBV_ACCESS_REMOTE_WRITE) ||
                         r->mr.pd != d->qp.pd)) {
      bad(&R.access,
          "write of %u bytes to 0x%llx: rkey 0x%x does not "
          "allow it",
          w.len, (unsigned long long)w.raddr, w.rkey);
      st = IBV_WC_REM_ACCESS_ERR;
    } else if (w.with_imm && d->rq_n == 0) {
      bad(&R.rnr, "immediate to QP 0x%x with no receive posted", d->qp.qp_num);
      return 0;
    } else {
      /* a dma-buf MR is read through the importer's mapping, never
       * through the address the sender names */
      const void *from =
          l && l->map ? l->map + (w.laddr - (uint64_t)(uintptr_t)l->mr.addr)
                      : (const void *)(uintptr_t)w.laddr;
      if (w.len)
        memcpy((void *)(uintptr_t)w.raddr, from, w.len);
      R.writes++;
      if (w.with_imm) {
        struct ibv_wc wc = {.wr_id = d->rq[d->rq_head],
                            .status = IBV_WC_SUCCESS,
                            .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
                            .byte_len = w.len,
                            .imm_data = w.imm,
                            .qp_num = d->qp.qp_num,
                            .src_qp = q->qp.qp_num,
                            .wc_flags = IBV_WC_WITH_IMM};
        d->rq_head = (d->rq_head + 1) % d->max_recv;
        d->rq_n--;
        R.imms++;
        cq_push((mcq_t *)d->qp.recv_cq, &wc);
      }
    }
  }
  q->sq_head = (q->sq_head + 1) % q->max_send;
  q->sq_n--;
  q->outstanding--;
  if (w.signaled || st != IBV_WC_SUCCESS) {
    struct ibv_wc wc = {.wr_id = w.wr_id,
                        .status = st,
                        .opcode = IBV_WC_RDMA_WRITE,
                        .vendor_err = st ? 0x81 : 0,
                        .qp_num = q->qp.qp_num};
    cq_push((mcq_t *)q->qp.send_cq, &wc);
  }
  if (st != IBV_WC_SUCCESS)
    qp_error(q);
  return 1;
}

static void *wire_main(void *arg) {
  unsigned seed = 1;
  pthread_mutex_lock(&M);
  for (;;) {
    int n = 0;
    for (mqp_t *q = qps; q; q = q->next)
      n += q->sq_n > 0 && q->qp.state == IBV_QPS_RTS;
    if (!n) {
      pthread_cond_wait(&wire_cv, &M);
      continue;
    }
    seed = seed * 1103515245u + 12345u; /* QPs in random order */
    int pick = (int)((seed >> 16) % (unsigned)n);
    mqp_t *q = qps;
    for (; q; q = q->next)
      if (q->sq_n > 0 && q->qp.state == IBV_QPS_RTS && pick-- == 0)
        break;
    int moved = carry(q);
    if (!moved || (seed >> 8) % 64 == 0) { /* let the others run */
      pthread_mutex_unlock(&M);
      if (moved)
        sched_yield();
      else
        usleep(1000);
      pthread_mutex_lock(&M);
    }
  }
  return NULL;
}

/* ---- data path (the context's ops) ----------------------------------------
 */

static int m_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
                       struct ibv_send_wr **badwr) {
  mqp_t *q = (mqp_t *)ibqp;
  int rc = 0;
  pthread_mutex_lock(&M);
  for (; wr && !rc; wr = wr->next) {
    if (q->qp.state != IBV_QPS_RTS) {
      bad(&R.mask, "post_send on QP 0x%x in state %d", q->qp.qp_num,
          q->qp.state);
      rc = EINVAL;
    } else if (q->outstanding == q->max_send) {
      bad(&R.sq_full, "post_send beyond %d entries on QP 0x%x", q->max_send,
          q->qp.qp_num);
      rc = ENOMEM;
    } else if (wr->num_sge > 1 || (wr->opcode != IBV_WR_RDMA_WRITE &&
                                   wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)) {
      rc = EINVAL;
    }
    if (rc) {
      *badwr = wr;
      break;
    }
    mwr_t *w = &q->sq[(q->sq_head + q->sq_n) % q->max_send];
    *w = (mwr_t){wr->wr_id,
                 wr->num_sge ? wr->sg_list[0].addr : 0,
                 wr->wr.rdma.remote_addr,
                 wr->num_sge ? wr->sg_list[0].length : 0,
                 wr->num_sge ? wr->sg_list[0].lkey : 0,
                 wr->wr.rdma.rkey,
                 wr->imm_data,
                 wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM,
                 (wr->send_flags & IBV_SEND_SIGNALED) != 0};
    q->sq_n++;
    q->outstanding++;
  }
  pthread_cond_signal(&wire_cv);
  pthread_mutex_unlock(&M);
  return rc;
}

static int m_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
                       struct ibv_recv_wr **badwr) {
  mqp_t *q = (mqp_t *)ibqp;
  int rc = 0;
  pthread_mutex_lock(&M);
  for (; wr && !rc; wr = wr->next) {
    if (q->qp.state == IBV_QPS_RESET || q->qp.state == IBV_QPS_ERR)
      rc = EINVAL;
    else if (q->rq_n == q->max_recv) {
      bad(&R.sq_full, "post_recv beyond %d entries", q->max_recv);
      rc = ENOMEM;
    }
    if (rc) {
      *badwr = wr;
      break;
    }
    q->rq[(q->rq_head + q->rq_n) % q->max_recv] = wr->wr_id;
    q->rq_n++;
  }
  pthread_mutex_unlock(&M);
  return rc;
}

static int m_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc) {
  mcq_t *q = (mcq_t *)ibcq;
  int k = 0;
  pthread_mutex_lock(&M);
  while (k < n && q->n) {
    wc[k++] = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
  }
  pthread_mutex_unlock(&M);
  return k;
}

static int m_req_notify(struct ibv_cq *ibcq, int solicited) {
  pthread_mutex_lock(&M);
  ((mcq_t *)ibcq)->armed = 1;
  pthread_mutex_unlock(&M);
  return 0;
}

/* ---- device, port, GIDs ----------------------------------------------------
 */

int ibv_fork_init(void) { return 0; }

struct ibv_device **ibv_get_device_list(int *num) {
  struct ibv_device **l = calloc(2, sizeof *l);
  l[0] = &dev0;
  if (num)
    *num = 1;
  return l;
}

void ibv_free_device_list(struct ibv_device **list) { free(list); }

const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

struct ibv_context *ibv_open_device(struct ibv_device *d) {
  mctx_t *x = calloc(1, sizeof *x);
  x->c.device = d;
  x->c.ops.poll_cq = m_poll_cq;
  x->c.ops.req_notify_cq = m_req_notify;
  x->c.ops.post_send = m_post_send;
  x->c.ops.post_recv = m_post_recv;
  x->c.cmd_fd = -1;
  if (pipe2(x->apipe, O_CLOEXEC)) {
    free(x);
    return NULL;
  }
  x->c.async_fd = x->apipe[0];
  pthread_mutex_lock(&M);
  x->next = ctxs;
  ctxs = x;
  R.contexts++;
  if (!wire_started) {
    pthread_t t;
    pthread_create(&t, NULL, wire_main, NULL);
    pthread_detach(t);
    wire_started = 1;
  }
  pthread_mutex_unlock(&M);
  return &x->c;
}

int ibv_close_device(struct ibv_context *c) {
  mctx_t *x = (mctx_t *)c;
  pthread_mutex_lock(&M);
  if (x->refs)
    bad(&R.order, "device closed with %d PDs/channels open", x->refs);
  for (mctx_t **pp = &ctxs; *pp; pp = &(*pp)->next)
    if (*pp == x) {
      *pp = x->next;
      break;
    }
  R.contexts--;
  pthread_mutex_unlock(&M);
  close(x->apipe[0]);
  close(x->apipe[1]);
  free(x);
  return 0;
}

int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
  memset(a, 0, sizeof *a);
  a->phys_port_cnt = 1;
  a->max_qp_wr = 16384;
  a->max_cqe = 65536;
  return 0;
}

int ibv_query_port(struct ibv_context *c, uint8_t port,
                   struct _compat_ibv_port_attr *compat) {
  struct ibv_port_attr *a = (struct ibv_port_attr *)compat;
  if (port != 1)
    return EINVAL;
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = PORT_MTU;
  a->gid_tbl_len = NGID;
  a->lid = 0;
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  a->active_speed = 32; /* EDR */
  a->active_width = 2;  /* 4x */
  return 0;
}

int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
                      struct ibv_gid_entry *e, uint32_t flags, size_t size) {
  if (port != 1 || index >= NGID)
    return ENODATA;
  memset(e, 0, sizeof *e);
  if (index < 2) { /* fe80::1, RoCE v1 and v2 */
    e->gid.raw[0] = 0xfe;
    e->gid.raw[1] = 0x80;
    e->gid.raw[15] = 1;
  } else { /* ::ffff:10.0.0.9 */
    e->gid.raw[10] = e->gid.raw[11] = 0xff;
    e->gid.raw[12] = 10;
    e->gid.raw[15] = 9;
  }
  e->gid_index = index;
  e->port_num = port;
  e->gid_type = index % 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
  return 0;
}

/* ---- objects ---------------------------------------------------------------
 */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) {
  mpd_t *p = calloc(1, sizeof *p);
  p->pd.context = c;
  pthread_mutex_lock(&M);
  ((mctx_t *)c)->refs++;
  R.pds++;
  pthread_mutex_unlock(&M);
  return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd) {
  mpd_t *p = (mpd_t *)pd;
  pthread_mutex_lock(&M);
  if (p->refs) {
    bad(&R.order, "PD deallocated with %d MRs/QPs", p->refs);
    pthread_mutex_unlock(&M);
    return EBUSY;
  }
  ((mctx_t *)pd->context)->refs--;
  R.pds--;
  pthread_mutex_unlock(&M);
  free(p);
  return 0;
}

/* Gives m (access and mapping filled in) its keys and puts it on the list. */
static struct ibv_mr *mr_add(struct ibv_pd *pd, mmr_t *m, void *addr,
                             size_t len) {
  pthread_mutex_lock(&M);
  m->mr = (struct ibv_mr){pd->context, pd, addr, len, 0, next_key, next_key};
  next_key += 0x10;
  m->next = mrs;
  mrs = m;
  ((mpd_t *)pd)->refs++;
  R.mrs++;
  pthread_mutex_unlock(&M);
  return &m->mr;
}

void mock_set_gdr(int dmabuf, int peermem, int (*is_device)(const void *p)) {
  pthread_mutex_lock(&M);
  gdr_dmabuf = dmabuf;
  gdr_peermem = peermem;
  gdr_is_device = is_device;
  pthread_mutex_unlock(&M);
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
                          int access) {
  if ((access & IBV_ACCESS_REMOTE_WRITE) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL; /* verbs requires local write with remote write */
    return NULL;
  }
  pthread_mutex_lock(&M);
  int refuse = gdr_is_device && !gdr_peermem && gdr_is_device(addr);
  pthread_mutex_unlock(&M);
  if (refuse) {
    errno = EFAULT; /* pinning device memory needs nvidia-peermem */
    return NULL;
  }
  mmr_t *m = calloc(1, sizeof *m);
  m->access = access;
  return mr_add(pd, m, addr, len);
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
                                 size_t length, uint64_t iova, int fd,
                                 int access) {
  uint64_t foff = 0;
  size_t flen = 0;
  pthread_mutex_lock(&M);
  int on = gdr_dmabuf;
  pthread_mutex_unlock(&M);
  if (!on || !softcuda_dmabuf_info) {
    errno = EOPNOTSUPP; /* a kernel or driver without dma-buf import */
    return NULL;
  }
  if ((access & IBV_ACCESS_REMOTE_WRITE) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return NULL;
  }
  if (softcuda_dmabuf_info(fd, &foff, &flen) != 0 || length == 0 ||
      offset > flen || length > flen - offset) {
    errno = EINVAL; /* not a dma-buf, or the MR runs past its end */
    return NULL;
  }
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t lead = (size_t)(offset % page);
  size_t maplen = (lead + length + page - 1) / page * page;
  void *map = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   (off_t)(foff + offset - lead));
  if (map == MAP_FAILED)
    return NULL;
  mmr_t *m = calloc(1, sizeof *m);
  m->access = access;
  m->map_base = map;
  m->map = (uint8_t *)map + lead;
  m->map_len = maplen;
  pthread_mutex_lock(&M);
  R.dmabuf_mrs++;
  pthread_mutex_unlock(&M);
  return mr_add(pd, m, (void *)(uintptr_t)iova, length);
}

int ibv_dereg_mr(struct ibv_mr *mr) {
  pthread_mutex_lock(&M);
  for (mmr_t **pp = &mrs; *pp; pp = &(*pp)->next)
    if (&(*pp)->mr == mr) {
      mmr_t *m = *pp;
      *pp = m->next;
      ((mpd_t *)mr->pd)->refs--;
      R.mrs--;
      if (m->map_base)
        munmap(m->map_base, m->map_len);
      free(m);
      break;
    }
  pthread_mutex_unlock(&M);
  return 0;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c) {
  mchan_t *ch = calloc(1, sizeof *ch);
  if (pipe2(ch->pipe, O_CLOEXEC)) {
    free(ch);
    return NULL;
  }
  ch->ch.context = c;
  ch->ch.fd = ch->pipe[0];
  pthread_mutex_lock(&M);
  ((mctx_t *)c)->refs++;
  R.channels++;
  pthread_mutex_unlock(&M);
  return &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *c) {
  mchan_t *ch = (mchan_t *)c;
  pthread_mutex_lock(&M);
  if (ch->ncq) {
    bad(&R.order, "channel destroyed with %d CQs", ch->ncq);
    pthread_mutex_unlock(&M);
    return EBUSY;
  }
  ((mctx_t *)c->context)->refs--;
  R.channels--;
  pthread_mutex_unlock(&M);
  close(ch->pipe[0]);
  close(ch->pipe[1]);
  free(ch);
  return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int vector) {
  mcq_t *q = calloc(1, sizeof *q);
  q->ring = calloc((size_t)cqe, sizeof *q->ring);
  q->cap = cqe;
  q->cq.context = c;
  q->cq.channel = channel;
  q->cq.cq_context = cq_context;
  q->cq.cqe = cqe;
  pthread_mutex_lock(&M);
  if (channel)
    ((mchan_t *)channel)->ncq++;
  R.cqs++;
  pthread_mutex_unlock(&M);
  return &q->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq) {
  mcq_t *q = (mcq_t *)cq;
  pthread_mutex_lock(&M);
  if (q->nqp || q->unacked) {
    bad(&R.order, "CQ destroyed with %d QPs and %d unacknowledged events",
        q->nqp, q->unacked);
    pthread_mutex_unlock(&M);
    return EBUSY;
  }
  if (cq->channel) { /* events not read yet die with the CQ */
    mchan_t *ch = (mchan_t *)cq->channel;
    mcq_t *keep[256], *e;
    int n = 0;
    int fl = fcntl(ch->pipe[0], F_GETFL);
    fcntl(ch->pipe[0], F_SETFL, fl | O_NONBLOCK);
    while (read(ch->pipe[0], &e, sizeof e) == (ssize_t)sizeof e)
      if (e != q && n < 256)
        keep[n++] = e;
    fcntl(ch->pipe[0], F_SETFL, fl);
    for (int i = 0; i < n; i++) {
      ssize_t r = write(ch->pipe[1], &keep[i], sizeof keep[i]);
      (void)r;
    }
    ch->ncq--;
  }
  R.cqs--;
  pthread_mutex_unlock(&M);
  free(q->ring);
  free(q);
  return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *c, struct ibv_cq **cq,
                     void **ctx) {
  mcq_t *q;
  pthread_mutex_lock(&M);
  ssize_t r = read(((mchan_t *)c)->pipe[0], &q, sizeof q);
  if (r != (ssize_t)sizeof q) {
    pthread_mutex_unlock(&M);
    return -1;
  }
  q->unacked++;
  *cq = &q->cq;
  *ctx = q->cq.cq_context;
  pthread_mutex_unlock(&M);
  return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) {
  pthread_mutex_lock(&M);
  mcq_t *q = (mcq_t *)cq;
  if ((unsigned)q->unacked < n)
    bad(&R.order, "%u events acknowledged, %d received", n, q->unacked);
  q->unacked -= (int)n;
  pthread_mutex_unlock(&M);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
  if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq ||
      !a->cap.max_send_wr || !a->cap.max_recv_wr) {
    errno = EINVAL;
    return NULL;
  }
  mqp_t *q = calloc(1, sizeof *q);
  q->max_send = (int)a->cap.max_send_wr;
  q->max_recv = (int)a->cap.max_recv_wr;
  q->sq = calloc((size_t)q->max_send, sizeof *q->sq);
  q->rq = calloc((size_t)q->max_recv, sizeof *q->rq);
  q->qp.context = pd->context;
  q->qp.qp_context = a->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = a->send_cq;
  q->qp.recv_cq = a->recv_cq;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  pthread_mutex_lock(&M);
  q->qp.qp_num = next_qpn++;
  ((mcq_t *)a->send_cq)->nqp++;
  ((mcq_t *)a->recv_cq)->nqp++;
  ((mpd_t *)pd)->refs++;
  q->next = qps;
  qps = q;
  R.qps++;
  pthread_mutex_unlock(&M);
  return &q->qp;
}

int ibv_destroy_qp(struct ibv_qp *qp) {
  mqp_t *q = (mqp_t *)qp;
  pthread_mutex_lock(&M);
  for (mqp_t **pp = &qps; *pp; pp = &(*pp)->next)
    if (*pp == q) {
      *pp = q->next;
      break;
    }
  ((mcq_t *)qp->send_cq)->nqp--;
  ((mcq_t *)qp->recv_cq)->nqp--;
  ((mpd_t *)qp->pd)->refs--;
  R.qps--;
  pthread_mutex_unlock(&M);
  free(q->sq);
  free(q->rq);
  free(q);
  return 0;
}

/* Required and optional attributes of each RC transition (IBA 11.2.4.2). */
static int mask_ok(int from, int to, int mask, int *req_out) {
  int req = 0, opt = 0;
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT)
    req = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    req = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
  } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    req = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
          IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
  } else if (to == IBV_QPS_ERR || to == IBV_QPS_RESET)
    req = IBV_QP_STATE;
  else
    return 0;
  *req_out = req;
  return (mask & req) == req && (mask & ~(req | opt)) == 0;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  mqp_t *q = (mqp_t *)qp;
  int req = 0, rc = 0;
  pthread_mutex_lock(&M);
  int from = (int)qp->state;
  int to = (mask & IBV_QP_STATE) ? (int)a->qp_state : from;
  if (!mask_ok(from, to, mask, &req)) {
    bad(&R.mask, "QP 0x%x: %d -> %d with mask 0x%x (required 0x%x)", qp->qp_num,
        from, to, mask, req);
    rc = EINVAL;
  } else if (to == IBV_QPS_INIT && a->port_num != 1) {
    rc = EINVAL;
  } else if (to == IBV_QPS_RTR &&
             (!a->ah_attr.is_global || a->ah_attr.grh.sgid_index >= NGID ||
              a->ah_attr.port_num != 1 || a->path_mtu > PORT_MTU ||
              a->path_mtu < IBV_MTU_256)) {
    bad(&R.mask,
        "QP 0x%x: RTR path on RoCE needs a GRH with a valid GID "
        "and the port's MTU at most (global %d, sgid %d, port %d, mtu %d)",
        qp->qp_num, a->ah_attr.is_global, a->ah_attr.grh.sgid_index,
        a->ah_attr.port_num, a->path_mtu);
    rc = EINVAL;
  } else if (to == IBV_QPS_RTS && (a->timeout < 1 || a->timeout > 31 ||
                                   a->retry_cnt > 7 || a->rnr_retry > 7)) {
    rc = EINVAL;
  }
  if (!rc) {
    if (to == IBV_QPS_RTR) {
      q->dest_qpn = a->dest_qp_num;
      q->rq_psn = a->rq_psn;
    }
    if (to == IBV_QPS_RTS)
      q->sq_psn = a->sq_psn;
    if (to == IBV_QPS_ERR)
      qp_error(q);
    qp->state = to;
  }
  pthread_cond_signal(&wire_cv);
  pthread_mutex_unlock(&M);
  return rc;
}

/* ---- async events and names ------------------------------------------------
 */

int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev) {
  int e[2];
  if (read(c->async_fd, e, sizeof e) != (ssize_t)sizeof e)
    return -1;
  memset(ev, 0, sizeof *ev);
  ev->event_type = (enum ibv_event_type)e[0];
  ev->element.port_num = e[1];
  return 0;
}

void ibv_ack_async_event(struct ibv_async_event *ev) { (void)ev; }

const char *ibv_event_type_str(enum ibv_event_type t) {
  return t == IBV_EVENT_PORT_ERR ? "port error" : "async event";
}

const char *ibv_wc_status_str(enum ibv_wc_status s) {
  return s == IBV_WC_SUCCESS          ? "success"
         : s == IBV_WC_RETRY_EXC_ERR  ? "transport retry counter exceeded"
         : s == IBV_WC_WR_FLUSH_ERR   ? "Work Request Flushed Error"
         : s == IBV_WC_REM_ACCESS_ERR ? "remote access error"
                                      : "error";
}

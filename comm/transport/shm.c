/*
 * shm.c - the shared-memory transport between ranks of one host.
 *
 * Every rank owns one POSIX shared-memory segment holding its wake word,
 * a failure notice, and its inbound FIFOs: one per (local sender, channel).
 * A sender writes straight into the receiver's FIFO and bumps a head
 * counter; the receiver reads (copies or reduces) in place and bumps the
 * tail. Both ring the other's doorbell, which costs a system call only when
 * the other side is asleep. Pages are touched only for FIFOs in use, so the
 * full mesh costs address space, not memory.
 *
 * Segments are named /sharc-<comm uid>-<rank>, created 0600, and unlinked
 * as soon as every local peer has mapped them, so nothing is left in
 * /dev/shm when a process dies later. Liveness: each rank holds a shared
 * flock on its own segment for its whole life; a peer that can take an
 * exclusive lock on it knows the owner is gone (the kernel drops the lock
 * when the process dies, however it dies).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm.h"
#include "exec.h"
#include "mem.h"

#define SHM_MAGIC 0x53484152434d454dull /* "SHARCMEM" */

typedef struct {
  _Alignas(64) _Atomic uint64_t head; /* bytes written by the sender */
  _Alignas(64) _Atomic uint64_t tail; /* bytes consumed by the receiver */
  _Alignas(64) _Atomic uint64_t acks; /* in-place reads finished */
} shm_fifo_ctrl_t;

/* Every message starts with this 64-byte header in the FIFO: either its
 * bytes follow inline, or the receiver reads them in place from the
 * sender's sharc_mem_alloc region (memfd `fd` of the sender, opened through
 * /proc/<pid>/fd) and acknowledges. */
#define SHM_MSG_INLINE 0x314c4e49u /* "INL1" */
#define SHM_MSG_DIRECT 0x31524944u /* "DIR1" */
#define SHM_MSG_CMA 0x31414d43u    /* "CMA1": offset is the sender's address */
typedef struct {
  uint32_t kind;
  int32_t fd;
  uint64_t bytes;
  uint64_t region_id;
  uint64_t offset;
  uint64_t region_size;
  uint8_t pad[24];
} shm_msg_t;
_Static_assert(sizeof(shm_msg_t) == 64, "shm_msg_t is one FIFO unit");

#define DIRECT_MEMFD 1u
#define DIRECT_CMA 2u
#define DIRECT_PROBED 0x80u
#define SHM_MAP_CACHE 16    /* mapped peer regions kept per peer */
#define SHM_MAX_DIRECT 3584 /* local ranks whose direct_ok fits the header */

typedef struct {
  _Atomic uint64_t magic; /* set last: the segment is ready */
  int32_t pid;
  int32_t rank;
  _Atomic uint32_t mapped;    /* local peers that have mapped this segment */
  int32_t seg_fd;             /* owner's descriptor of this segment */
  _Atomic uint64_t entered;   /* collectives the owner has entered */
  _Atomic uint64_t completed; /* ... and completed */
  uint64_t self_addr;         /* where the owner mapped this header */
  _Alignas(64) wake_word_t wake;
  _Alignas(64) fail_word_t fail;
  /* direct_ok[i]: what the owner can read of local rank i in place:
   * DIRECT_PROBED | DIRECT_MEMFD (open its descriptors through /proc) |
   * DIRECT_CMA (process_vm_readv); 0: not probed yet. */
  _Alignas(64) _Atomic uint8_t direct_ok[SHM_MAX_DIRECT];
} shm_header_t;
_Static_assert(sizeof(shm_header_t) <= 4096, "shm header fits its page");

typedef struct {
  transport_conn_t base;
  shm_fifo_ctrl_t *ctrl;
  uint8_t *data;
  size_t cap;
  wake_word_t *other_wake; /* whom to ring after commit/release */
  int local;               /* peer's local index */
  struct sharc_comm *comm;
  uint64_t direct_posted; /* sender: in-place messages posted */
  uint64_t cma_addr;      /* receiver: sender's address of the message */
} shm_conn_t;

typedef struct {
  uint64_t id;
  uint8_t *base;
  size_t size;
  uint64_t used; /* for eviction: last use tick */
} shm_map_t;

typedef struct {
  uint8_t *base;
  size_t size;
  int fd; /* kept open for the liveness lock test */
} shm_seg_t;

struct shm_state {
  int nlocal, me; /* me: this rank's local index */
  size_t fifo_bytes, stride, hdr_bytes, seg_bytes;
  int nchan;
  shm_seg_t *segs;    /* [nlocal] (segs[me] is ours) */
  int *local_of;      /* [nranks] local index or -1 */
  shm_conn_t **conns; /* [nranks * nchan * 2] lazily created */
  char name[64];
  int unlinked;
  int direct;      /* SHARC_SHM_DIRECT */
  shm_map_t *maps; /* [nlocal * SHM_MAP_CACHE] peer regions mapped */
  uint64_t map_tick;
};

static shm_header_t *seg_hdr(struct shm_state *s, int local) {
  return (shm_header_t *)s->segs[local].base;
}

static shm_fifo_ctrl_t *fifo_ctrl(struct shm_state *s, int owner, int sender,
                                  int chan) {
  uint8_t *p = s->segs[owner].base + s->hdr_bytes +
               ((size_t)sender * (size_t)s->nchan + (size_t)chan) * s->stride;
  return (shm_fifo_ctrl_t *)p;
}

static void seg_name(char *out, size_t len, uint64_t uid, int rank) {
  snprintf(out, len, "/sharc-%016llx-%d", (unsigned long long)uid, rank);
}

static sharc_status_t map_peer(struct sharc_comm *comm, struct shm_state *s,
                               int local, uint64_t deadline) {
  int rank = comm->local_ranks[local];
  char name[64];
  seg_name(name, sizeof name, comm->uid, rank);
  unsigned backoff_us = 100;
  for (;;) {
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
      struct stat sb;
      if (fstat(fd, &sb) == 0 && (size_t)sb.st_size == s->seg_bytes) {
        void *p =
            mmap(NULL, s->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
          close(fd);
          return comm_error(comm, SHARC_ERR_SYSTEM,
                            "shm: mapping %s of rank %d failed: %s", name, rank,
                            strerror(errno));
        }
        shm_header_t *h = p;
        if (atomic_load(&h->magic) == SHM_MAGIC) {
          s->segs[local] = (shm_seg_t){p, s->seg_bytes, fd};
          atomic_fetch_add(&h->mapped, 1);
          return SHARC_OK;
        }
        munmap(p, s->seg_bytes);
      }
      close(fd);
    }
    if (time_ns() > deadline)
      return comm_error(comm, SHARC_ERR_TIMEOUT,
                        "shm: segment %s of local rank %d (pid %d) not ready "
                        "after %s s (SHARC_TIMEOUT)",
                        name, rank, comm->peers[rank].pid,
                        param_str(PARAM_TIMEOUT));
    usleep(backoff_us);
    if (backoff_us < 20000)
      backoff_us *= 2;
  }
}

/* Can this process open each local peer's descriptors through /proc? Tried
 * on the peer's segment descriptor; the answer goes into our header, where
 * the peer looks before sending in place. */
static void probe_direct(struct sharc_comm *comm, struct shm_state *s) {
  shm_header_t *me = seg_hdr(s, s->me);
  for (int i = 0; i < s->nlocal; i++) {
    if (i == s->me || i >= SHM_MAX_DIRECT)
      continue;
    shm_header_t *ph = seg_hdr(s, i);
    unsigned ok = DIRECT_PROBED;
    if (s->direct) {
      char path[64];
      snprintf(path, sizeof path, "/proc/%d/fd/%d", ph->pid, ph->seg_fd);
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        struct stat a, b;
        if (fstat(fd, &a) == 0 && fstat(s->segs[i].fd, &b) == 0 &&
            a.st_ino == b.st_ino && a.st_dev == b.st_dev)
          ok |= DIRECT_MEMFD;
        close(fd);
      }
      /* Cross-memory attach: read the peer's own copy of its magic. */
      uint64_t magic = 0;
      struct iovec l = {&magic, sizeof magic};
      struct iovec r = {(void *)(uintptr_t)ph->self_addr, sizeof magic};
      if (process_vm_readv(ph->pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof magic &&
          magic == SHM_MAGIC)
        ok |= DIRECT_CMA;
      if (ok != (DIRECT_PROBED | DIRECT_MEMFD | DIRECT_CMA))
        INFO(SUB_SHM, "shm: rank %d's buffers: %s, %s", comm->local_ranks[i],
             ok & DIRECT_MEMFD ? "mapped in place" : "no /proc fd access",
             ok & DIRECT_CMA ? "cross-memory attach"
                             : "no cross-memory attach");
    }
    atomic_store(&me->direct_ok[i], (uint8_t)ok);
  }
}

static sharc_status_t shm_setup(struct sharc_comm *comm) {
  struct shm_state *s = calloc(1, sizeof *s);
  if (!s)
    return comm_error(comm, SHARC_ERR_NO_MEM, "shm: out of memory");
  comm->shm = s;
  s->nlocal = comm->local_size;
  s->me = comm->local_rank;
  s->nchan = comm->nchan;
  size_t fb = (size_t)SHARC_MAX(param_int(PARAM_SHM_FIFO_BYTES), 4096);
  s->fifo_bytes = (fb + 4095) & ~(size_t)4095;
  s->stride = 4096 + s->fifo_bytes; /* ctrl page + data */
  s->hdr_bytes = 4096;
  s->seg_bytes =
      s->hdr_bytes + (size_t)s->nlocal * (size_t)s->nchan * s->stride;
  s->segs = calloc((size_t)s->nlocal, sizeof *s->segs);
  s->local_of = malloc((size_t)comm->nranks * sizeof *s->local_of);
  s->conns =
      calloc((size_t)comm->nranks * (size_t)s->nchan * 2, sizeof *s->conns);
  s->maps = calloc((size_t)s->nlocal * SHM_MAP_CACHE, sizeof *s->maps);
  s->direct = param_int(PARAM_SHM_DIRECT) != 0 && s->nlocal <= SHM_MAX_DIRECT;
  if (!s->segs || !s->local_of || !s->conns || !s->maps)
    return comm_error(comm, SHARC_ERR_NO_MEM, "shm: out of memory");
  for (int i = 0; i < s->nlocal; i++)
    s->segs[i].fd = -1;
  for (int r = 0; r < comm->nranks; r++)
    s->local_of[r] = -1;
  for (int i = 0; i < s->nlocal; i++)
    s->local_of[comm->local_ranks[i]] = i;

  /* Our own segment. */
  seg_name(s->name, sizeof s->name, comm->uid, comm->rank);
  int fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) { /* stale, from a dead job with our uid */
    shm_unlink(s->name);
    fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0)
    return comm_error(comm, SHARC_ERR_SYSTEM, "shm: creating %s failed: %s",
                      s->name, strerror(errno));
  if (ftruncate(fd, (off_t)s->seg_bytes) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(s->name);
    return comm_error(comm, SHARC_ERR_SYSTEM,
                      "shm: sizing %s to %zu bytes failed: %s (is /dev/shm "
                      "large enough? lower SHARC_SHM_FIFO_BYTES)",
                      s->name, s->seg_bytes, strerror(e));
  }
  void *p = mmap(NULL, s->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    shm_unlink(s->name);
    return comm_error(comm, SHARC_ERR_SYSTEM, "shm: mapping %s failed: %s",
                      s->name, strerror(e));
  }
  flock(fd, LOCK_SH); /* held for life: our liveness signal */
  s->segs[s->me] = (shm_seg_t){p, s->seg_bytes, fd};
  shm_header_t *h = p;
  h->pid = (int32_t)getpid();
  h->rank = comm->rank;
  h->seg_fd = fd;
  h->self_addr = (uint64_t)(uintptr_t)h;
  /* The wake word moves into shared memory so local peers can ring it. */
  comm->wake = &h->wake;
  atomic_store(&h->magic, SHM_MAGIC);

  uint64_t deadline = time_ns() + timeout_ns();
  for (int i = 0; i < s->nlocal; i++) {
    if (i == s->me)
      continue;
    CHECK(map_peer(comm, s, i, deadline));
  }
  probe_direct(comm, s);
  /* Unlink once every local peer has mapped us. */
  unsigned backoff_us = 100;
  while ((int)atomic_load(&h->mapped) < s->nlocal - 1) {
    if (time_ns() > deadline)
      return comm_error(comm, SHARC_ERR_TIMEOUT,
                        "shm: only %u of %d local peers mapped %s after %s s",
                        atomic_load(&h->mapped), s->nlocal - 1, s->name,
                        param_str(PARAM_TIMEOUT));
    usleep(backoff_us);
    if (backoff_us < 20000)
      backoff_us *= 2;
  }
  shm_unlink(s->name);
  s->unlinked = 1;
  INFO(SUB_SHM, "shm: %d local ranks, %d channels, %zu-byte FIFOs", s->nlocal,
       s->nchan, s->fifo_bytes);
  return SHARC_OK;
}

static sharc_status_t shm_connect(struct sharc_comm *comm, int peer, int chan,
                                  int is_send, uint64_t deadline,
                                  transport_conn_t **out) {
  struct shm_state *s = comm->shm;
  size_t idx =
      ((size_t)peer * (size_t)s->nchan + (size_t)chan) * 2 + (is_send ? 1 : 0);
  if (!s->conns[idx]) {
    int pl = s->local_of[peer];
    if (pl < 0 || chan >= s->nchan)
      return comm_error(comm, SHARC_ERR_INTERNAL,
                        "shm: rank %d is not on this host (channel %d)", peer,
                        chan);
    shm_conn_t *c = calloc(1, sizeof *c);
    if (!c)
      return comm_error(comm, SHARC_ERR_NO_MEM, "shm: out of memory");
    c->base = (transport_conn_t){&transport_shm, peer, chan, is_send};
    c->local = pl;
    c->comm = comm;
    /* The FIFO lives in the receiver's segment, indexed by the sender. */
    int owner = is_send ? pl : s->me, sender = is_send ? s->me : pl;
    c->ctrl = fifo_ctrl(s, owner, sender, chan);
    c->data = (uint8_t *)c->ctrl + 4096;
    c->cap = s->fifo_bytes;
    c->other_wake = &seg_hdr(s, pl)->wake;
    s->conns[idx] = c;
  }
  *out = &s->conns[idx]->base;
  return SHARC_OK;
}

static size_t shm_send_space(transport_conn_t *tc, void **ptr) {
  shm_conn_t *c = (shm_conn_t *)tc;
  uint64_t head = atomic_load_explicit(&c->ctrl->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&c->ctrl->tail, memory_order_acquire);
  size_t off = (size_t)(head % c->cap);
  size_t space = c->cap - (size_t)(head - tail);
  *ptr = c->data + off;
  return SHARC_MIN(space, c->cap - off);
}

static void shm_send_commit(transport_conn_t *tc, size_t bytes) {
  shm_conn_t *c = (shm_conn_t *)tc;
  atomic_fetch_add_explicit(&c->ctrl->head, bytes, memory_order_seq_cst);
  comm_wake_word(c->other_wake);
}

static size_t shm_recv_avail(transport_conn_t *tc, const void **ptr) {
  shm_conn_t *c = (shm_conn_t *)tc;
  uint64_t tail = atomic_load_explicit(&c->ctrl->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&c->ctrl->head, memory_order_acquire);
  size_t off = (size_t)(tail % c->cap);
  *ptr = c->data + off;
  return SHARC_MIN((size_t)(head - tail), c->cap - off);
}

static void shm_recv_release(transport_conn_t *tc, size_t bytes) {
  shm_conn_t *c = (shm_conn_t *)tc;
  atomic_fetch_add_explicit(&c->ctrl->tail, bytes, memory_order_seq_cst);
  comm_wake_word(c->other_wake);
}

static int shm_send_begin(transport_conn_t *tc, const void *src, size_t bytes) {
  shm_conn_t *c = (shm_conn_t *)tc;
  struct shm_state *s = c->comm->shm;
  void *p;
  if (shm_send_space(tc, &p) < sizeof(shm_msg_t))
    return -1;
  shm_msg_t m = {.kind = SHM_MSG_INLINE, .fd = -1, .bytes = bytes};
  mem_ref_t ref;
  unsigned ok =
      s->direct ? atomic_load(&seg_hdr(s, c->local)->direct_ok[s->me]) : 0;
  if ((ok & (DIRECT_MEMFD | DIRECT_CMA)) && mem_find(src, bytes, &ref)) {
    if (ref.kind == MEM_ALLOCATED && (ok & DIRECT_MEMFD)) {
      m.kind = SHM_MSG_DIRECT;
      m.fd = ref.fd;
      m.region_id = ref.id;
      m.offset = ref.offset;
      m.region_size = ref.size;
    } else if (ok & DIRECT_CMA) {
      m.kind = SHM_MSG_CMA;
      m.offset = (uint64_t)(uintptr_t)src;
    }
  }
  if (m.kind != SHM_MSG_INLINE)
    c->direct_posted++;
  memcpy(p, &m, sizeof m);
  shm_send_commit(tc, sizeof m);
  return m.kind != SHM_MSG_INLINE;
}

static int shm_send_done(transport_conn_t *tc) {
  shm_conn_t *c = (shm_conn_t *)tc;
  return atomic_load_explicit(&c->ctrl->acks, memory_order_acquire) >=
         c->direct_posted;
}

/* Maps (or finds mapped) the sender's region; NULL with the comm failed. */
static const uint8_t *map_region(shm_conn_t *c, const shm_msg_t *m) {
  struct sharc_comm *comm = c->comm;
  struct shm_state *s = comm->shm;
  shm_map_t *cache = &s->maps[(size_t)c->local * SHM_MAP_CACHE],
            *victim = cache;
  s->map_tick++;
  for (int i = 0; i < SHM_MAP_CACHE; i++) {
    if (cache[i].base && cache[i].id == m->region_id &&
        cache[i].size == m->region_size) {
      cache[i].used = s->map_tick;
      return cache[i].base;
    }
    if (!cache[i].base || cache[i].used < victim->used)
      victim = &cache[i];
  }
  char path[64], why[256];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", comm->peers[c->base.peer].pid,
           m->fd);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  void *p = MAP_FAILED;
  if (fd >= 0) {
    p = mmap(NULL, m->region_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
  }
  if (p == MAP_FAILED) {
    snprintf(why, sizeof why,
             "shm: cannot map %s (%zu bytes) of rank %d: %s; "
             "set SHARC_SHM_DIRECT=0",
             path, (size_t)m->region_size, c->base.peer, strerror(errno));
    comm_fail(comm, -1, SHARC_ERR_SYSTEM, why);
    return NULL;
  }
  if (victim->base)
    munmap(victim->base, victim->size);
  *victim = (shm_map_t){m->region_id, p, m->region_size, s->map_tick};
  return p;
}

static int shm_recv_begin(transport_conn_t *tc, size_t bytes,
                          const void **direct) {
  shm_conn_t *c = (shm_conn_t *)tc;
  const void *p;
  if (shm_recv_avail(tc, &p) < sizeof(shm_msg_t))
    return -1;
  shm_msg_t m;
  memcpy(&m, p, sizeof m);
  struct sharc_comm *comm = c->comm;
  if ((m.kind != SHM_MSG_INLINE && m.kind != SHM_MSG_DIRECT &&
       m.kind != SHM_MSG_CMA) ||
      m.bytes != bytes) {
    char why[320];
    snprintf(
        why, sizeof why,
        "rank %d sent a %llu-byte message where this rank expected %zu bytes: "
        "the ranks called different collectives, counts or types",
        tc->peer, (unsigned long long)m.bytes, bytes);
    comm_fail(comm, -1, SHARC_ERR_MISMATCH, why);
    return -1;
  }
  shm_recv_release(tc, sizeof m);
  if (m.kind == SHM_MSG_INLINE)
    return 0;
  if (m.kind == SHM_MSG_CMA) {
    c->cma_addr = m.offset;
    return 2;
  }
  const uint8_t *base = map_region(c, &m);
  if (!base)
    return -1;
  *direct = base + m.offset;
  return 1;
}

static sharc_status_t shm_recv_copy(transport_conn_t *tc, void *dst, size_t off,
                                    size_t n) {
  shm_conn_t *c = (shm_conn_t *)tc;
  struct sharc_comm *comm = c->comm;
  size_t got = 0;
  while (got < n) {
    struct iovec l = {(uint8_t *)dst + got, n - got};
    struct iovec r = {(void *)(uintptr_t)(c->cma_addr + off + got), n - got};
    ssize_t k = process_vm_readv(comm->peers[tc->peer].pid, &l, 1, &r, 1, 0);
    if (k <= 0) {
      char why[256];
      snprintf(
          why, sizeof why,
          "shm: reading %zu bytes of rank %d (pid %d) in place failed: %s%s",
          n - got, tc->peer, comm->peers[tc->peer].pid,
          k < 0 ? strerror(errno) : "short read",
          k < 0 && errno == ESRCH ? " (the process is gone)" : "");
      comm_fail(comm, tc->peer,
                k < 0 && errno == ESRCH ? SHARC_ERR_PEER_LOST
                                        : SHARC_ERR_SYSTEM,
                why);
      return comm_record(comm, SHARC_ERR_SYSTEM, "%s", why);
    }
    got += (size_t)k;
  }
  return SHARC_OK;
}

static void shm_recv_done(transport_conn_t *tc) {
  shm_conn_t *c = (shm_conn_t *)tc;
  atomic_fetch_add_explicit(&c->ctrl->acks, 1, memory_order_seq_cst);
  comm_wake_word(c->other_wake);
}

/* 1 if the owner of segment `local` has died (its flock is gone). */
static int peer_dead(struct shm_state *s, int local) {
  int fd = s->segs[local].fd;
  if (fd < 0)
    return 0;
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
    flock(fd, LOCK_UN);
    return 1;
  }
  return 0;
}

/* Imports a failure notice a local peer left in our segment. */
static void import_notice(struct sharc_comm *comm) {
  shm_header_t *h = seg_hdr(comm->shm, comm->shm->me);
  if (atomic_load(&h->fail.failed) != 1 || atomic_load(&comm->fail.failed))
    return;
  int r = atomic_load(&h->fail.failed_rank);
  sharc_status_t st = (sharc_status_t)atomic_load(&h->fail.status);
  int by = atomic_load(&h->fail.reporter);
  char why[320];
  if (st == SHARC_ERR_PEER_LOST && r >= 0 && r < comm->nranks)
    snprintf(why, sizeof why,
             "rank %d (host %s, pid %d) was lost (reported by rank %d)", r,
             comm->peers[r].host, comm->peers[r].pid, by);
  else if (r >= 0 && r < comm->nranks)
    snprintf(why, sizeof why, "rank %d (host %s): %s (reported by rank %d)", r,
             comm->peers[r].host, sharc_status_string(st), by);
  else
    snprintf(why, sizeof why, "rank %d reported a failure: %s", by,
             sharc_status_string(st));
  comm_fail(comm, r, st, why);
}

void shm_publish_progress(struct sharc_comm *comm, uint64_t entered,
                          uint64_t completed) {
  struct shm_state *s = comm->shm;
  if (!s || !s->segs)
    return;
  shm_header_t *h = seg_hdr(s, s->me);
  atomic_store_explicit(&h->entered, entered, memory_order_relaxed);
  atomic_store_explicit(&h->completed, completed, memory_order_relaxed);
}

uint64_t shm_peer_entered(struct sharc_comm *comm, int rank) {
  struct shm_state *s = comm->shm;
  if (!s || !s->segs || rank < 0 || rank >= comm->nranks ||
      s->local_of[rank] < 0)
    return UINT64_MAX;
  return atomic_load_explicit(&seg_hdr(s, s->local_of[rank])->entered,
                              memory_order_relaxed);
}

void shm_poll_notice(struct sharc_comm *comm) {
  if (comm->shm && comm->shm->segs)
    import_notice(comm);
}

/* Liveness of the peer this connection waits on. Only awaited peers are
 * checked: a peer that finished its part and left is not an error unless we
 * still need something from it. */
static sharc_status_t shm_check(transport_conn_t *tc) {
  shm_conn_t *c = (shm_conn_t *)tc;
  struct sharc_comm *comm = c->comm;
  import_notice(comm);
  if (!peer_dead(comm->shm, c->local))
    return SHARC_OK;
  int r = tc->peer;
  char why[256];
  snprintf(why, sizeof why,
           "rank %d (host %s, pid %d) died or left the communicator", r,
           comm->peers[r].host, comm->peers[r].pid);
  comm_fail(comm, r, SHARC_ERR_PEER_LOST, why);
  return comm_record(comm, SHARC_ERR_PEER_LOST, "%s", why);
}

static void shm_notify_abort(struct sharc_comm *comm, int failed_rank,
                             sharc_status_t st) {
  struct shm_state *s = comm->shm;
  if (!s || !s->segs)
    return;
  for (int i = 0; i < s->nlocal; i++) {
    if (i == s->me || !s->segs[i].base)
      continue;
    shm_header_t *h = seg_hdr(s, i);
    int32_t expect = 0;
    if (atomic_compare_exchange_strong(&h->fail.failed, &expect, 2)) {
      atomic_store(&h->fail.failed_rank, failed_rank);
      atomic_store(&h->fail.status, (int32_t)st);
      atomic_store(&h->fail.reporter, comm->rank);
      atomic_store(&h->fail.failed, 1);
    }
    comm_wake_word(&h->wake);
  }
}

static void shm_teardown(struct sharc_comm *comm, uint64_t deadline) {
  struct shm_state *s = comm->shm;
  if (!s)
    return;
  if (comm->wake != &comm->wake_private) {
    /* Keep the wake word valid for anyone still holding the comm. */
    comm->wake = &comm->wake_private;
  }
  if (s->conns) {
    for (size_t i = 0; i < (size_t)comm->nranks * (size_t)s->nchan * 2; i++)
      free(s->conns[i]);
    free(s->conns);
  }
  if (s->segs) {
    for (int i = 0; i < s->nlocal; i++) {
      if (s->segs[i].base)
        munmap(s->segs[i].base, s->segs[i].size);
      if (s->segs[i].fd >= 0)
        close(s->segs[i].fd); /* drops our flock */
    }
    free(s->segs);
  }
  if (s->maps) {
    for (int i = 0; i < s->nlocal * SHM_MAP_CACHE; i++)
      if (s->maps[i].base)
        munmap(s->maps[i].base, s->maps[i].size);
    free(s->maps);
  }
  if (!s->unlinked && s->name[0])
    shm_unlink(s->name);
  free(s->local_of);
  free(s);
  comm->shm = NULL;
}

const transport_t transport_shm = {
    .name = "shm",
    .setup = shm_setup,
    .connect = shm_connect,
    .send_space = shm_send_space,
    .send_commit = shm_send_commit,
    .recv_avail = shm_recv_avail,
    .recv_release = shm_recv_release,
    .send_begin = shm_send_begin,
    .send_done = shm_send_done,
    .recv_begin = shm_recv_begin,
    .recv_done = shm_recv_done,
    .recv_copy = shm_recv_copy,
    .check = shm_check,
    .notify_abort = shm_notify_abort,
    .teardown = shm_teardown,
};

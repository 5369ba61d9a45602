/*
 * shm.c - the shared-memory transport between ranks of one host.
 *
 * Every rank owns one POSIX shared-memory segment holding its wake word,
 * a failure notice, and its inbound FIFOs: one per (local sender, channel).
 * A sender writes straight into the receiver's FIFO and posts a message
 * header; the receiver reads (copies or reduces) in place and releases
 * what it consumed. Both ring the other's doorbell, which costs a system
 * call only when the other side is asleep. Pages are touched only for FIFOs in
 * use (each made resident when its connection is first used, on hosts of up to
 * 8 ranks: prefault), so the full mesh costs address space, not memory.
 *
 * The segments themselves (setup, liveness, failure notices, teardown)
 * are shm_seg.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "mem.h"
#include "shm_impl.h"

/* Every message has a 64-byte header, in a ring of SHM_HDR_SLOTS slots in
 * the FIFO's control page, apart from the data: its bytes follow in the
 * data FIFO (INL1, streamed as the FIFO has room), or lie there whole
 * already (WHL1, at `offset`), or the receiver reads them in place from the
 * sender's sharc_mem_alloc region (memfd `fd` of the sender, opened through
 * /proc/<pid>/fd) and acknowledges, or (SML1) they are small enough to
 * travel in the header itself, in place of the region fields.
 *
 * The receiver learns that a header is there from the header alone: its
 * first word, written last, holds the kind and a tag (the header's number
 * plus one, mod 2^32), which tells it from the header a lap before in the
 * same slot. The ring only ever holds headers, so no stale payload can
 * pass for one. Polling the slot instead of the sender's head counter
 * saves a message one cache miss on the receiver's critical path (the
 * counter, then the header) and keeps the counter's line with the sender;
 * an 8-byte all-reduce at 2 ranks took 200 ns a call before, 140 after
 * (docs/benchmarks.md).
 *
 * SML1 and WHL1 are read by the receiver straight out of the FIFO, which
 * it releases when done, so to the executor they are in-place messages
 * (send_begin and recv_begin return 1; the sender is done at once, the
 * receiver's recv_done releases them): one header, one release, and no
 * read of the head counter. WHL1 takes messages up to SHM_WHOLE_MAX that
 * fit the data FIFO in one piece now. Neither under SHARC_FAULT, whose
 * hooks count and corrupt the bytes that go through the FIFO payload
 * path. */
#define SHM_MSG_INLINE 0x314c4e49u /* "INL1" */
#define SHM_MSG_DIRECT 0x31524944u /* "DIR1" */
#define SHM_MSG_CMA 0x31414d43u    /* "CMA1": offset is the sender's address */
#define SHM_MSG_SMALL 0x314c4d53u  /* "SML1": the bytes from region_id on */
#define SHM_MSG_WHOLE 0x314c4857u  /* "WHL1": data FIFO bytes at offset */
#define SHM_WHOLE_MAX 8192
/* SHR1: the bytes lie in slot `offset` of the sender's outbox, sent to
 * several local peers at once (transport_conn_t.share). The sender copies
 * them there once, where it would write one copy into each receiver's FIFO
 * (a broadcast's root: n-1 copies), and is done at once as for WHL1; each
 * receiver reads them in the slot and releases it in recv_done. The
 * sender refills a slot only when no reader still holds it, and sends
 * through the FIFOs while the next slot is held: it never waits on a
 * reader. Between SHM_SMALL_MAX and SHM_OUT_SLOT_BYTES (WHL1's range)
 * only: smaller messages travel in their headers, and at 16-32 KiB the
 * slots measured slower than the FIFOs (a 4-rank broadcast at 32 KiB 7 GB/s
 * against 31; bench/results/shm_outbox_slots/). */
#define SHM_MSG_SHARED 0x31524853u /* "SHR1": sender's outbox slot offset */
/* SLT1: SML1 for SHM_SMALL_MAX < bytes <= SHM_SLOTS_MAX, the bytes running on
 * from the header's payload into the next slots of the ring (contiguous:
 * only where they do not wrap), read there by the receiver like SML1's.
 * One more line per 64 bytes next to the header, where WHL1 puts them in
 * the data FIFO, a second miss the receiver can only take once it has read
 * the header (a 2-rank all-gather of 56-256 bytes a rank took 20-30 ns a
 * call more than of 48; bench/results/shm_slots/). Before releasing them
 * the receiver marks each continuation slot with a first word no header
 * of that slot can have (its tag one below the slot's), so a later lap
 * never takes the sender's stale payload for a header. */
#define SHM_MSG_SLOTS 0x31544c53u /* "SLT1" */
#define SHM_SLOTS_EXTRA 4         /* continuation slots at most */
typedef struct {
  uint32_t kind; /* with tag: the first word, written last */
  uint32_t tag;
  uint64_t bytes;
  uint64_t region_id;
  uint64_t offset;
  uint64_t region_size;
  int32_t fd;
  uint8_t pad[20];
} shm_msg_t;
_Static_assert(sizeof(shm_msg_t) == 64, "shm_msg_t is one header slot");
/* SML1 payload: bytes [16, 64) of the header, 16-byte aligned in the FIFO */
#define SHM_SMALL_OFF offsetof(shm_msg_t, region_id)
#define SHM_SMALL_MAX (sizeof(shm_msg_t) - SHM_SMALL_OFF)
#define SHM_SLOTS_MAX (SHM_SMALL_MAX + SHM_SLOTS_EXTRA * sizeof(shm_msg_t))
_Static_assert(SHM_SMALL_OFF == 16, "SML1 payload is 16-byte aligned");

/* Faults in the first SHM_PREFAULT_BYTES of a FIFO's data for this
 * process (each side maps the FIFO and faults on its own), once per
 * connection, on hosts of at most SHM_PREFAULT_RANKS ranks. The first pass
 * through a FIFO otherwise takes a page fault on each side per 4 KiB: a
 * 4 KiB broadcast at 4 ranks on 2 cores took 10-11 us a call until a
 * megabyte had gone through, 1.6-1.8 us with this, 0.8-0.9 us after
 * (bench/results/shm_prefault/). It makes a FIFO resident once its
 * connection is first used (at 8 ranks, a full mesh of both channels is
 * 112 MiB of the host's memory per communicator); on larger hosts the
 * mesh would cost too much up front, and traffic faults the pages in. */
#define SHM_PREFAULT_BYTES ((size_t)1 << 20)
#define SHM_PREFAULT_RANKS 8
static void prefault(const struct shm_state *s, uint8_t *p, size_t n) {
  if (s->nlocal > SHM_PREFAULT_RANKS)
    return;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(page - 1);
  size_t len = SHARC_MIN(n, SHM_PREFAULT_BYTES) + ((uintptr_t)p - lo);
#ifdef MADV_POPULATE_WRITE
  /* shared and writable on both sides: populated for writing, the pages
   * need no second fault when this side writes them */
  if (madvise((void *)lo, len, MADV_POPULATE_WRITE) == 0)
    return;
#endif
  for (size_t off = 0; off < len; off += page) /* older kernels */
    (void)*(volatile uint8_t *)(lo + off);
}

static sharc_status_t shm_connect(struct sharc_comm *comm, int peer, int chan,
                                  int is_send, uint64_t deadline,
                                  transport_conn_t **out) {
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
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
    c->base = (transport_conn_t){
        .tp = &transport_shm, .peer = peer, .chan = chan, .is_send = is_send};
    c->local = pl;
    c->comm = comm;
    /* The FIFO lives in the receiver's segment, indexed by the sender. */
    int owner = is_send ? pl : s->me, sender = is_send ? s->me : pl;
    c->ctrl = fifo_ctrl(s, owner, sender, chan);
    c->data = (uint8_t *)c->ctrl + 4096;
    c->ring = (uint8_t *)c->ctrl + SHM_HDR_RING_OFF;
    c->cap = s->fifo_bytes;
    prefault(s, c->data, c->cap);
    c->tail_seen = atomic_load_explicit(&c->ctrl->tail, memory_order_acquire);
    c->other_wake = &seg_hdr(s, pl)->wake;
    s->conns[idx] = c;
  }
  *out = &s->conns[idx]->base;
  return SHARC_OK;
}

/* Free bytes of the data FIFO with the sender at head. The sender rereads
 * the receiver's tail only when the tail it saw last leaves less than half
 * the FIFO (or less than `need` bytes) free: a small message then costs no
 * read of the line the receiver writes on every release (a cache miss on
 * each side), and the receiver's next release finds that line still its
 * own. An old tail only understates the space. */
static size_t data_free(shm_conn_t *c, uint64_t head, size_t need) {
  size_t space = c->cap - (size_t)(head - c->tail_seen);
  if (space < c->cap / 2 || space < need) {
    c->tail_seen = atomic_load_explicit(&c->ctrl->tail, memory_order_acquire);
    space = c->cap - (size_t)(head - c->tail_seen);
  }
  return space;
}

static size_t shm_send_space(transport_conn_t *tc, void **ptr) {
  shm_conn_t *c = (shm_conn_t *)tc;
  uint64_t head = atomic_load_explicit(&c->ctrl->head, memory_order_relaxed);
  size_t off = (size_t)(head % c->cap);
  size_t space = data_free(c, head, 0);
  *ptr = c->data + off;
  return SHARC_MIN(space, c->cap - off);
}

/* head, tail and acks each have one writer (the sender, the receiver, the
 * receiver), so a plain store advances them; the doorbell's read-modify-
 * write in comm_wake_word right after is the one full barrier a message
 * needs: it publishes the store to whoever reads the doorbell, and orders
 * it before the read of the peer's sleeping flag (state.c). A locked add
 * on the counter as well cost a second barrier per message on each side. */
static void shm_send_commit(transport_conn_t *tc, size_t bytes) {
  shm_conn_t *c = (shm_conn_t *)tc;
  uint64_t head = atomic_load_explicit(&c->ctrl->head, memory_order_relaxed);
  atomic_store_explicit(&c->ctrl->head, head + bytes, memory_order_release);
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
  uint64_t tail = atomic_load_explicit(&c->ctrl->tail, memory_order_relaxed);
  atomic_store_explicit(&c->ctrl->tail, tail + bytes, memory_order_release);
  comm_wake_word(c->other_wake);
}

static inline uint8_t *hdr_slot(const shm_conn_t *c, uint64_t n) {
  return c->ring + (size_t)(n % SHM_HDR_SLOTS) * sizeof(shm_msg_t);
}

/* The first word of header number n, of kind `kind`. */
static inline uint64_t hdr_word(uint32_t kind, uint64_t n) {
  return kind | (uint64_t)(uint32_t)(n + 1) << 32;
}

/* Whether the sender has `need` free header slots; like the data's tail,
 * the receiver's htail is reread only when half the ring seems in use. */
static int hdr_room(shm_conn_t *c, uint64_t need) {
  uint64_t last = c->hdr_next + need - 1; /* the last slot it would take */
  if (last - c->htail_seen >= SHM_HDR_SLOTS / 2)
    c->htail_seen = atomic_load_explicit(&c->ctrl->htail, memory_order_acquire);
  return last - c->htail_seen < SHM_HDR_SLOTS;
}

/* Publishes the header in the next slot, whose other words are written, as
 * `kind` with the first word, and rings the receiver; the release store
 * orders the data and the header (and the slots after it that the message
 * takes, `nslots` in all) before the word the receiver polls. */
static void hdr_publish(shm_conn_t *c, uint32_t kind, uint64_t nslots) {
  atomic_store_explicit((_Atomic uint64_t *)hdr_slot(c, c->hdr_next),
                        hdr_word(kind, c->hdr_next), memory_order_release);
  c->hdr_next += nslots;
  comm_wake_word(c->other_wake);
}

/* Writes header m into the next slot, its first word last. */
static void hdr_post(shm_conn_t *c, const shm_msg_t *m) {
  memcpy(hdr_slot(c, c->hdr_next) + 8, (const uint8_t *)m + 8, sizeof *m - 8);
  hdr_publish(c, m->kind, 1);
}

/* The continuation slots an SLT1 message of `bytes` needs after its
 * header. */
static inline uint64_t slots_extra(size_t bytes) {
  return (bytes - SHM_SMALL_MAX + sizeof(shm_msg_t) - 1) / sizeof(shm_msg_t);
}

/* Posts an SLT1 message if its slots are free and do not wrap; 0: not. */
static int slots_post(shm_conn_t *c, const void *src, size_t bytes) {
  uint64_t k = slots_extra(bytes);
  if (c->hdr_next % SHM_HDR_SLOTS + k >= SHM_HDR_SLOTS || !hdr_room(c, k + 1))
    return 0; /* would wrap, or no room */
  uint8_t *slot = hdr_slot(c, c->hdr_next);
  memcpy(slot + SHM_SMALL_OFF, src, bytes);
  uint64_t len = bytes;
  memcpy(slot + offsetof(shm_msg_t, bytes), &len, sizeof len);
  hdr_publish(c, SHM_MSG_SLOTS, k + 1);
  return 1;
}

/* The receiver's release of the header it read last (and of what it
 * stored before), rung to the sender, which may wait for a slot. */
static void hdr_release(shm_conn_t *c) {
  atomic_store_explicit(&c->ctrl->htail, ++c->hdr_next, memory_order_release);
  comm_wake_word(c->other_wake);
}

/* WHL1: copies the message into the data FIFO in one piece (from its start
 * when it would wrap) and sets *at to where; 0: no room now (the message is
 * streamed instead). */
static int whole_put(shm_conn_t *c, const void *src, size_t bytes,
                     uint64_t *at) {
  size_t wire = transport_wire_bytes(bytes);
  uint64_t head = atomic_load_explicit(&c->ctrl->head, memory_order_relaxed);
  size_t off = (size_t)(head % c->cap);
  size_t need = (c->cap - off < wire ? c->cap - off : 0) + wire;
  if (data_free(c, head, need) < need)
    return 0;
  *at = head + need - wire;
  memcpy(c->data + (size_t)(*at % c->cap), src, bytes);
  atomic_store_explicit(&c->ctrl->head, head + need, memory_order_relaxed);
  return 1;
}

static inline _Atomic uint32_t *out_left(uint8_t *box, uint64_t slot) {
  return (_Atomic uint32_t *)(box + (size_t)slot * 64);
}

static inline uint8_t *out_slot(uint8_t *box, uint64_t slot) {
  return box + 4096 + (size_t)slot * SHM_OUT_SLOT_BYTES;
}

/* The outbox slot of tc's group of sends (transport_conn_t.share), filled
 * with src by the group's first send (a key names one group, whose sends
 * all carry the same bytes); -1: none was free. */
static int out_claim(struct shm_state *s, const transport_conn_t *tc,
                     const void *src, size_t bytes) {
  if (tc->share_key == s->share_key)
    return s->share_slot;
  s->share_key = tc->share_key;
  s->share_slot = -1;
  uint8_t *box = outbox(s, s->me);
  uint64_t k = s->out_next % SHM_OUT_SLOTS;
  /* acquire: the readers' loads from the slot are done before we write */
  if (atomic_load_explicit(out_left(box, k), memory_order_acquire) != 0)
    return -1;
  memcpy(out_slot(box, k), src, bytes);
  s->out_next++;
  s->share_slot = (int)k;
  return s->share_slot;
}

static int shm_send_begin(transport_conn_t *tc, const void *src, size_t bytes) {
  shm_conn_t *c = (shm_conn_t *)tc;
  struct shm_state *s = c->comm->tp_state[TRANSPORT_SHM];
  if (!hdr_room(c, 1))
    return -1;
  if (bytes <= SHM_SMALL_MAX && !tc->framed_only) {
    shm_msg_t sm = {.kind = SHM_MSG_SMALL, .bytes = bytes};
    memcpy((uint8_t *)&sm + SHM_SMALL_OFF, src, bytes);
    hdr_post(c, &sm);
    return 1; /* done: send_done holds no acknowledgement back for it */
  }
  shm_msg_t m = {.kind = SHM_MSG_INLINE, .fd = -1, .bytes = bytes};
  mem_ref_t ref;
  unsigned ok =
      s->direct ? atomic_load(&seg_hdr(s, c->local)->direct_ok[s->me]) : 0;
  /* Below inplace_min the sender's wait for the reader's acknowledgement
   * costs more than the copy through the FIFO, the more where ranks share
   * cores and the reader needs a core first (bench/results/shm_direct_min/).
   * Data the sender has just written sits in its core's cache: below
   * fresh_min the peer copies it faster out of the FIFO than it reads it
   * in place (bench/results/peers/registered_allreduce.md). */
  if ((ok & (DIRECT_MEMFD | DIRECT_CMA)) && !tc->framed_only &&
      bytes >= s->inplace_min && !(tc->fresh && bytes < s->fresh_min) &&
      mem_find(src, bytes, &ref)) {
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
  int inplace = m.kind != SHM_MSG_INLINE;
  int k;
  if (inplace) {
    c->direct_posted++;
  } else if (tc->share > 1 && bytes <= SHM_OUT_SLOT_BYTES && !tc->framed_only &&
             (k = out_claim(s, tc, src, bytes)) >= 0) {
    m.kind = SHM_MSG_SHARED; /* done, as SML1 */
    m.offset = (uint64_t)k;
    /* one more reader to release the slot; the header's release store
     * publishes the count with it */
    atomic_fetch_add_explicit(out_left(outbox(s, s->me), (uint64_t)k), 1,
                              memory_order_relaxed);
  } else if (bytes <= SHM_SLOTS_MAX && !tc->framed_only &&
             slots_post(c, src, bytes)) {
    return 1; /* done, as SML1 */
  } else if (bytes <= SHM_WHOLE_MAX && !tc->framed_only &&
             whole_put(c, src, bytes, &m.offset))
    m.kind = SHM_MSG_WHOLE; /* done, as SML1 */
  transport_header_sent(tc->peer, &m, sizeof m, "message header");
  hdr_post(c, &m);
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
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
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

/* Fails the comm on a header whose bytes would lie outside where its kind
 * may put them; -1, for shm_recv_begin. */
static int hdr_corrupt(shm_conn_t *c, size_t bytes, const char *where,
                       const char *what) {
  struct sharc_comm *comm = c->comm;
  int peer = c->base.peer;
  char why[256];
  snprintf(why, sizeof why,
           "rank %d (host %s) sent a message header placing %zu bytes %s: "
           "the shared-memory %s holds corrupt bytes",
           peer, comm->peers[peer].host, bytes, where, what);
  comm_fail(comm, peer, SHARC_ERR_MISMATCH, why);
  return -1;
}

static int shm_recv_begin(transport_conn_t *tc, size_t bytes,
                          const void **direct) {
  shm_conn_t *c = (shm_conn_t *)tc;
  const uint8_t *slot = hdr_slot(c, c->hdr_next);
  uint64_t w = atomic_load_explicit((const _Atomic uint64_t *)slot,
                                    memory_order_acquire);
  if ((uint32_t)(w >> 32) != (uint32_t)(c->hdr_next + 1))
    return -1; /* not posted yet */
  shm_msg_t m;
  memcpy((uint8_t *)&m + 8, slot + 8, sizeof m - 8);
  m.kind = (uint32_t)w;
  struct sharc_comm *comm = c->comm;
  if (m.kind != SHM_MSG_INLINE && m.kind != SHM_MSG_DIRECT &&
      m.kind != SHM_MSG_CMA && m.kind != SHM_MSG_SMALL &&
      m.kind != SHM_MSG_WHOLE && m.kind != SHM_MSG_SHARED &&
      m.kind != SHM_MSG_SLOTS) {
    /* Every message starts with a header; anything else is garbage in the
     * FIFO (memory corruption, or a sender out of step with the stream). */
    char why[320];
    snprintf(why, sizeof why,
             "rank %d (host %s) sent a message header of unknown kind 0x%08x "
             "(%llu bytes; this rank expected %zu): the shared-memory FIFO "
             "holds corrupt bytes, or the ranks called different collectives",
             tc->peer, comm->peers[tc->peer].host, m.kind,
             (unsigned long long)m.bytes, bytes);
    comm_fail(comm, tc->peer, SHARC_ERR_MISMATCH, why);
    return -1;
  }
  if (m.bytes != bytes) {
    char why[320];
    snprintf(
        why, sizeof why,
        "rank %d sent a %llu-byte message where this rank expected %zu bytes: "
        "the ranks called different collectives, counts or types",
        tc->peer, (unsigned long long)m.bytes, bytes);
    comm_fail(comm, -1, SHARC_ERR_MISMATCH, why);
    return -1;
  }
  if (m.kind == SHM_MSG_SMALL) { /* read in the slot; recv_done releases */
    c->held = 1;
    *direct = slot + SHM_SMALL_OFF;
    return 1;
  }
  if (m.kind == SHM_MSG_SLOTS) { /* read in the ring; recv_done releases */
    uint64_t k = bytes > SHM_SMALL_MAX && bytes <= SHM_SLOTS_MAX
                     ? slots_extra(bytes)
                     : SHM_HDR_SLOTS;
    if (c->hdr_next % SHM_HDR_SLOTS + k >= SHM_HDR_SLOTS)
      return hdr_corrupt(c, bytes, "in header slots past the ring's end",
                         "header ring");
    c->held = 4;
    c->held_tail = k;
    *direct = slot + SHM_SMALL_OFF;
    return 1;
  }
  if (m.kind == SHM_MSG_WHOLE) { /* read in the data FIFO; recv_done too */
    size_t off = (size_t)(m.offset % c->cap);
    if (bytes > c->cap - off)
      return hdr_corrupt(c, bytes, "past the end of the FIFO", "FIFO");
    c->held = 2;
    c->held_tail = m.offset + transport_wire_bytes(bytes);
    *direct = c->data + off;
    return 1;
  }
  if (m.kind == SHM_MSG_SHARED) { /* read in the sender's outbox */
    if (m.offset >= SHM_OUT_SLOTS || bytes > SHM_OUT_SLOT_BYTES)
      return hdr_corrupt(c, bytes, "outside its outbox", "header ring");
    struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
    c->held = 3;
    c->held_tail = m.offset;
    *direct = out_slot(outbox(s, c->local), m.offset);
    return 1;
  }
  hdr_release(c);
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
  if (c->held) {
    if (c->held == 2)
      atomic_store_explicit(&c->ctrl->tail, c->held_tail, memory_order_release);
    if (c->held == 3) { /* release: our reads of the slot come before */
      struct shm_state *s = c->comm->tp_state[TRANSPORT_SHM];
      atomic_fetch_sub_explicit(out_left(outbox(s, c->local), c->held_tail), 1,
                                memory_order_release);
    }
    if (c->held == 4) { /* SLT1: mark the continuation slots, skip them */
      for (uint64_t j = 1; j <= c->held_tail; j++)
        atomic_store_explicit((_Atomic uint64_t *)hdr_slot(c, c->hdr_next + j),
                              (uint64_t)(uint32_t)(c->hdr_next + j) << 32,
                              memory_order_relaxed);
      c->hdr_next += c->held_tail;
    }
    c->held = 0;
    hdr_release(c);
    return;
  }
  uint64_t acks = atomic_load_explicit(&c->ctrl->acks, memory_order_relaxed);
  atomic_store_explicit(&c->ctrl->acks, acks + 1, memory_order_release);
  comm_wake_word(c->other_wake);
}

const transport_t transport_shm = {
    .name = "shm",
    .id = TRANSPORT_SHM,
    .scope = TRANSPORT_LOCAL,
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
    .publish_wait = shm_publish_wait,
    .publish_cpu = shm_publish_cpu,
    .peer_cpu = shm_peer_cpu,
    .peer_entered = shm_peer_entered,
    .peer_waiting = shm_peer_waiting,
    .poll_notice = shm_poll_notice,
};

/*
 * shm_impl.h - what shm.c (the FIFOs and their messages) and shm_seg.c (the
 * segments: setup, liveness, failure notices, teardown) share: the
 * transport's state and the functions of shm_seg.c in the transport's
 * table. Private to comm/transport/shm/.
 */
#ifndef SHARC_SHM_IMPL_H
#define SHARC_SHM_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "state.h"
#include "transport.h"

#define SHM_MAGIC 0x53484152434d454dull /* "SHARCMEM" */
#define SHM_DIR "/dev/shm"

/* A FIFO's control page: its counters, then the ring of message headers
 * (shm.c); the data follows the page. */
typedef struct {
  _Alignas(64) _Atomic uint64_t head;  /* data bytes written by the sender */
  _Alignas(64) _Atomic uint64_t tail;  /* data bytes consumed by the receiver */
  _Alignas(64) _Atomic uint64_t acks;  /* in-place reads finished */
  _Alignas(64) _Atomic uint64_t htail; /* headers consumed by the receiver */
} shm_fifo_ctrl_t;
#define SHM_HDR_RING_OFF 2048 /* the header ring's offset in the page */
#define SHM_HDR_SLOTS 32      /* 64-byte header slots in the ring */
_Static_assert(sizeof(shm_fifo_ctrl_t) <= SHM_HDR_RING_OFF &&
                   SHM_HDR_RING_OFF + SHM_HDR_SLOTS * 64 <= 4096,
               "the counters and the header ring fit the control page");

/* Each rank's outbox, after its FIFOs in its own segment: a control page
 * of SHM_OUT_SLOTS counters (one 64-byte line each: the readers of the
 * slot's bytes that have not released it yet), then SHM_OUT_SLOTS slots of
 * SHM_OUT_SLOT_BYTES. A send of the same bytes to several local peers
 * (shm.c: SHR1) copies them into a slot once and posts each peer a header
 * naming it. */
#define SHM_OUT_SLOTS 16
#define SHM_OUT_SLOT_BYTES 8192 /* SHM_WHOLE_MAX */
#define SHM_OUT_BYTES (4096 + (size_t)SHM_OUT_SLOTS * SHM_OUT_SLOT_BYTES)
_Static_assert(SHM_OUT_SLOTS * 64 <= 4096, "outbox counters fit a page");

#define DIRECT_MEMFD 1u
#define DIRECT_CMA 2u
#define DIRECT_PROBED 0x80u
#define SHM_MAP_CACHE 16    /* mapped peer regions kept per peer */
#define SHM_MAX_DIRECT 3584 /* local ranks whose direct_ok fits the header */

typedef struct {
  _Atomic uint64_t magic; /* set last: the segment is ready */
  int32_t pid;
  int32_t rank;
  _Atomic uint32_t mapped;      /* local peers that have mapped this segment */
  _Atomic uint32_t mapped_all;  /* the owner has mapped every local peer's */
  int32_t seg_fd;               /* owner's descriptor of this segment */
  _Atomic uint64_t progress[2]; /* collectives the owner has entered,
                                   completed (comm->progress) */
  uint64_t self_addr;           /* where the owner mapped this header */
  _Atomic int32_t waiting_on;   /* rank the owner's executor sleeps on, -1 */
  /* The CPU the owner's executor last yielded on, -1: none yet. A line of
   * its own: peers read it in their waits, the owner writes progress per
   * call. */
  _Alignas(64) _Atomic int32_t cpu;
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
  uint8_t *ring;          /* the header ring (SHM_HDR_SLOTS slots) */
  uint64_t hdr_next;      /* sender: headers posted; receiver: consumed */
  uint64_t htail_seen;    /* sender: ctrl->htail when last read (<= it) */
  uint64_t direct_posted; /* sender: in-place messages posted */
  uint64_t cma_addr;      /* receiver: sender's address of the message */
  int held;               /* receiver: 1 an SML1 header not yet released,
                             2 a WHL1 header and its data up to held_tail,
                             3 an SHR1 header and outbox slot held_tail,
                             4 an SLT1 header and held_tail slots after */
  uint64_t held_tail;
  uint64_t tail_seen; /* sender: ctrl->tail when last read (<= it) */
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
  int fd; /* kept open: ours holds the liveness lock, a peer's is tested */
} shm_seg_t;

struct shm_state {
  int nlocal, me; /* me: this rank's local index */
  size_t fifo_bytes, stride, hdr_bytes, seg_bytes;
  int nchan;
  shm_seg_t *segs;    /* [nlocal] (segs[me] is ours) */
  int *local_of;      /* [nranks] local index or -1 */
  shm_conn_t **conns; /* [nranks * nchan * 2] lazily created */
  char path[96];      /* our segment */
  int named;          /* path names it: unlink in teardown */
  int direct;         /* SHARC_SHM_DIRECT */
  size_t fresh_min;   /* SHARC_SHM_DIRECT_FRESH_BYTES */
  size_t inplace_min; /* the least bytes read in place:
                         SHARC_SHM_DIRECT_MIN_BYTES, or where ranks share
                         cores (comm->oversubscribed) the larger
                         SHARC_SHM_DIRECT_SHARED_BYTES */
  shm_map_t *maps;    /* [nlocal * SHM_MAP_CACHE] peer regions mapped */
  uint64_t map_tick;
  size_t out_off;    /* the outbox's offset in every segment */
  uint64_t out_next; /* outbox slots filled so far */
  /* the group of sends last given an outbox slot (transport_conn_t.share):
   * its key and slot (-1: no slot was free, its sends go through the
   * FIFOs) */
  uint64_t share_key;
  int share_slot;
};

/* Local rank `local`'s outbox. */
static inline uint8_t *outbox(struct shm_state *s, int local) {
  return s->segs[local].base + s->out_off;
}

static inline shm_header_t *seg_hdr(struct shm_state *s, int local) {
  return (shm_header_t *)s->segs[local].base;
}

/* The FIFO from local rank `sender` on `chan` in local rank `owner`'s
 * segment (the receiver's). */
static inline shm_fifo_ctrl_t *fifo_ctrl(struct shm_state *s, int owner,
                                         int sender, int chan) {
  uint8_t *p = s->segs[owner].base + s->hdr_bytes +
               ((size_t)sender * (size_t)s->nchan + (size_t)chan) * s->stride;
  return (shm_fifo_ctrl_t *)p;
}

/* shm_seg.c: the transport's entries that concern segments and ranks */
sharc_status_t shm_setup(struct sharc_comm *comm);
sharc_status_t shm_check(transport_conn_t *tc);
void shm_notify_abort(struct sharc_comm *comm, int failed_rank,
                      sharc_status_t st);
void shm_teardown(struct sharc_comm *comm, uint64_t deadline);
void shm_publish_wait(struct sharc_comm *comm, int peer);
int shm_peer_waiting(struct sharc_comm *comm, int rank);
void shm_publish_cpu(struct sharc_comm *comm, int cpu);
int shm_peer_cpu(struct sharc_comm *comm, int rank);
uint64_t shm_peer_entered(struct sharc_comm *comm, int rank);
void shm_poll_notice(struct sharc_comm *comm);

#endif /* SHARC_SHM_IMPL_H */

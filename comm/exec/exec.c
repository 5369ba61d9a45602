/*
 * exec.c - the host-memory executor: runs one rank's schedule (schedule.h)
 * over the transports' FIFOs.
 *
 * Rounds run one after another; within a round every operation advances as
 * far as its FIFO allows, at most one slice (SHARC_SLICE_BYTES) per visit,
 * so a send, a receive and a reduction of the same round overlap. When no
 * operation can move, the rank polls a few times with a CPU pause (where
 * every rank has a core, adaptively), then SHARC_SPIN times with yields,
 * then sleeps on its doorbell (wake.c); every 100 ms asleep it asks the
 * transports whether the awaited peers are alive, and after SHARC_TIMEOUT
 * seconds without any progress it fails with SHARC_ERR_TIMEOUT naming them.
 * The clock is read at most once per round and then only while idle: the
 * hot path of a small collective makes no system call and no clock read.
 */
#include "exec.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reduce.h"
#include "registry.h"

typedef struct {
  const sched_op_t *op;
  transport_conn_t *conn; /* NULL for COPY */
  size_t bytes;           /* payload bytes */
  size_t wire;            /* payload + alignment padding */
  size_t done;            /* bytes of wire moved */
  int begun;              /* framing header sent/parsed (transports with one) */
  int direct;             /* the peer reads our buffer / we read the peer's */
  const uint8_t *dsrc;    /* receive in place: the sender's bytes */
  int fresh;              /* a SEND of bytes this rank has just written */
  int share;              /* transport_conn_t.share, share_key */
  uint64_t share_key;
  size_t piece; /* SEND: bytes per publication (EXEC_SEND_PIECE or a slice) */
} op_state_t;

#define EXEC_CHECK_INTERVAL_NS 100000000ull /* liveness check period */

/* A round in which this rank only sends (a broadcast's or a scatter's root,
 * a reduce's or a gather's leaves) publishes each FIFO copy in pieces of
 * EXEC_SEND_PIECE bytes instead of a whole slice: its receivers, idle until
 * the first byte comes, start copying out while it copies in. Only for
 * messages of up to EXEC_PIECE_SLICES slices: a longer one keeps the two
 * copies overlapped slice by slice anyway, and there the extra
 * publications cost more than the shorter start (a 32 MiB broadcast 11%).
 * Where the rank also receives in the round (all-gather, all-reduce,
 * reduce-scatter) the peers are busy with their own sends and each
 * publication costs them a cache line; whole slices stay there. Measured
 * at 2 ranks: in-place broadcast 128 KiB-1 MiB +15-21%; all-gather and
 * all-reduce up to 9% slower had they used pieces too
 * (bench/results/send_pieces/). */
#define EXEC_SEND_PIECE 32768
#define EXEC_PIECE_SLICES 4

/* Polls with a CPU pause before the first sched_yield, when the host has
 * a core for every rank: a peer running on another core answers within
 * about a microsecond, and a pause-poll (about 40 ns on the development
 * VM) sees that without entering the kernel, where a sched_yield costs
 * 1.2 us even when nothing else is runnable. With more ranks than cores
 * the peer may be waiting for this core, so the rank yields at once
 * (docs/design.md, decision 7). The pauses come on top of SHARC_SPIN's polls
 * (none when SHARC_SPIN is 0: block at once).
 *
 * The budget adapts per thread, for what the core count cannot tell: other
 * programs on the cores, or a whole job pinned to fewer cores than ranks.
 * There the peer runs only after this rank yields, so pausing only delays
 * it. At its first yield a wait publishes the CPU it runs on and reads the
 * one its peer last yielded on (shares_cpu): a wait that outlasted its
 * pauses halves the next waits' budget when the peer shares this CPU, one
 * that ends within them or waited on a peer elsewhere restores the full
 * budget, and while the budget is cut every EXEC_PAUSE_PROBE-th wait tries
 * it whole again. Where the peer's CPU is not known (not on shared
 * memory, or it has not yielded yet), a wait that ended within its first
 * EXEC_PAUSE_SHORT yields (the peer ran while this rank yielded) halves
 * the budget and a longer one leaves it. Before, every wait past the
 * pauses halved it: the waits of a 32 MiB call left none, and the small
 * calls after it yielded (1.2 us each) until probes restored it, a slow
 * first size after each large one in every pass of a sweep
 * (bench/results/pause_budget/). */
#define EXEC_PAUSE_POLLS 32
#define EXEC_PAUSE_PROBE 16
#define EXEC_PAUSE_SHORT 2

typedef struct {
  int64_t budget;    /* pause polls of the next wait */
  uint32_t probes;   /* waits since the last full-budget probe */
  int shared;        /* shares_cpu() of the current wait, -1: none */
  uint32_t together; /* looks in a row that found the peer on this CPU */
  uint64_t moved_ns; /* when move_off last moved this thread */
} pause_state_t;
static _Thread_local pause_state_t pause_tl = {EXEC_PAUSE_POLLS, 0, -1, 0, 0};

/* Two ranks that hand one CPU to each other while another CPU of theirs
 * idles stay so for 2-8 ms on Linux (its balancer leaves tasks that ran in
 * the last half millisecond where they are), at 5 us a small call instead
 * of 0.6; one short 2-rank launch in five to ten on the 2-core VM started
 * so (bench/results/peers/binding_place/). After EXEC_MOVE_AFTER looks in a
 * row find the awaited peer on this CPU, the higher rank of the two moves
 * itself off it (move_off), at most once per EXEC_MOVE_GAP_NS. */
#define EXEC_MOVE_AFTER 2
#define EXEC_MOVE_GAP_NS 100000000ull

/* Pause polls for a wait that starts now. */
static int64_t pause_next(void) {
  pause_state_t *p = &pause_tl;
  p->shared = -1;
  if (p->budget < EXEC_PAUSE_POLLS && ++p->probes >= EXEC_PAUSE_PROBE) {
    p->probes = 0;
    return EXEC_PAUSE_POLLS;
  }
  return p->budget;
}

/* A wait given `pauses` pause polls ended after `polls` failed polls. */
static void pause_learn(int64_t pauses, int64_t polls) {
  pause_state_t *p = &pause_tl;
  if (polls <= pauses || p->shared == 0)
    p->budget = EXEC_PAUSE_POLLS;
  else if (p->shared == 1 || polls <= pauses + EXEC_PAUSE_SHORT)
    p->budget /= 2;
}

/* The peer the first unfinished transfer of the round waits on, -1. */
static int awaited_peer(const op_state_t *sts, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (sts[i].conn && sts[i].done < sts[i].wire)
      return sts[i].conn->peer;
  return -1;
}

/* Moves this thread off `cpu`, which it shares with the rank `peer` it
 * waits on, when the CPUs it may use number at least the host's ranks and
 * another is among them: narrowed to the others, Linux moves it at once;
 * widened back, it stays where it is. */
static void move_off(struct sharc_comm *comm, int cpu, int peer) {
  pause_state_t *p = &pause_tl;
  uint64_t now = time_ns();
  if (p->moved_ns && now - p->moved_ns < EXEC_MOVE_GAP_NS)
    return;
  p->moved_ns = now;
  cpu_set_t all, others;
  if (sched_getaffinity(0, sizeof all, &all) != 0 || !CPU_ISSET(cpu, &all) ||
      CPU_COUNT(&all) < SHARC_MAX(comm->local_max, 2))
    return;
  others = all;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof others, &others) != 0)
    return;
  int to = sched_getcpu();
  sched_setaffinity(0, sizeof all, &all);
  transport_publish_cpu(comm, to);
  INFO(SUB_COMM,
       "rank %d shared CPU %d with rank %d, which it waited on: moved to CPU "
       "%d",
       comm->rank, cpu, peer, to);
}

/* At a wait's first yield: publishes this rank's CPU and compares it with
 * the one the awaited peer last yielded on, into pause_tl.shared: 1 the
 * same CPU (the peer runs only when this rank yields), 0 another, -1 not
 * known. Out of line: the poll loop around it stays as small. */
static __attribute__((noinline)) void
shares_cpu(struct sharc_comm *comm, const op_state_t *sts, size_t n) {
  pause_state_t *p = &pause_tl;
  int cpu = sched_getcpu();
  if (cpu < 0)
    return;
  transport_publish_cpu(comm, cpu);
  int on = awaited_peer(sts, n);
  int theirs = on >= 0 ? transport_peer_cpu(comm, on) : -1;
  p->shared = theirs < 0 ? -1 : theirs == cpu;
  p->together = p->shared == 1 ? p->together + 1 : 0;
  if (p->together >= EXEC_MOVE_AFTER && comm->rank > on) {
    p->together = 0;
    move_off(comm, cpu, on);
  }
}

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Cores the ranks of this host can share, read once: the CPUs this
 * process may run on (a cpuset or taskset of the job), except that a
 * process bound to a single CPU was most likely bound by its launcher, one
 * core per rank (mpirun --bind-to core, srun --cpu-bind): then the host's
 * online CPUs. A job squeezed onto one CPU is left to the adaptive budget. */
int exec_host_cpus(void) {
  static _Atomic int cached;
  int n = atomic_load_explicit(&cached, memory_order_relaxed);
  if (n > 0)
    return n;
  cpu_set_t set;
  n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (n <= 1)
    n = (int)sysconf(_SC_NPROCESSORS_ONLN);
  n = n > 0 ? n : 1;
  atomic_store_explicit(&cached, n, memory_order_relaxed);
  return n;
}

static inline uint8_t *buf_at(void *const bufs[3], int which, size_t off,
                              size_t esize) {
  return (uint8_t *)bufs[which] + off * esize;
}

/* Consumes n incoming bytes at p for a RECV / RECV_REDUCE at offset done. */
static void consume(const op_state_t *st, void *const bufs[3], size_t esize,
                    sharc_dtype_t dtype, sharc_op_t op, const void *p,
                    size_t n) {
  const sched_op_t *o = st->op;
  uint8_t *dst = buf_at(bufs, o->dst_buf, o->dst_off, esize) + st->done;
  if (o->kind == SCHED_RECV_REDUCE)
    kernel_reduce(dtype, op, dst, p,
                  buf_at(bufs, o->src_buf, o->src_off, esize) + st->done,
                  n / esize);
  else
    memcpy(dst, p, n);
}

/* Starts the transport's framing for an op (shm: a header that says
 * whether the bytes come inline or are read in place). 0: try later. */
static int begin(op_state_t *st, void *const bufs[3], size_t esize) {
  transport_conn_t *c = st->conn;
  const sched_op_t *o = st->op;
  int r;
  if (o->kind == SCHED_SEND) {
    c->fresh = st->fresh;
    c->share = st->share;
    c->share_key = st->share_key;
    r = c->tp->send_begin(c, buf_at(bufs, o->src_buf, o->src_off, esize),
                          st->bytes);
  } else {
    r = c->tp->recv_begin(c, st->bytes, (const void **)&st->dsrc);
  }
  if (r < 0)
    return 0;
  st->begun = 1;
  st->direct = r;
  return 1;
}

/* Moves what can be moved for one op now; returns bytes moved (a started
 * header or a finished in-place send count as 1). */
static size_t advance(op_state_t *st, void *const bufs[3], size_t esize,
                      sharc_dtype_t dtype, sharc_op_t op, size_t slice,
                      uint8_t **bounce) {
  const sched_op_t *o = st->op;
  transport_conn_t *c = st->conn;
  size_t moved = 0;
  if (!st->begun && c->tp->send_begin) {
    if (!begin(st, bufs, esize))
      return 0;
    moved = 1;
  }
  if (st->direct) {
    if (o->kind == SCHED_SEND) {
      if (!c->tp->send_done(c))
        return moved;
      st->done = st->wire;
      return moved + 1;
    }
    /* Read the sender's memory in place, a slice per visit. */
    size_t n = SHARC_MIN(st->bytes - st->done, slice);
    n -= n % esize;
    if (n == 0)
      n = st->bytes - st->done;
    if (st->direct == 1) {
      consume(st, bufs, esize, dtype, op, st->dsrc + st->done, n);
    } else if (o->kind == SCHED_RECV) { /* fetched by the transport */
      if (c->tp->recv_copy(
              c, buf_at(bufs, o->dst_buf, o->dst_off, esize) + st->done,
              st->done, n) != SHARC_OK)
        return moved;
    } else {
      if (!*bounce && !(*bounce = malloc(slice)))
        return moved;
      if (c->tp->recv_copy(c, *bounce, st->done, n) != SHARC_OK)
        return moved;
      consume(st, bufs, esize, dtype, op, *bounce, n);
    }
    st->done += n;
    if (st->done >= st->bytes) {
      c->tp->recv_done(c);
      st->done = st->wire;
    }
    return moved + n;
  }
  while (st->done < st->wire && moved < slice) {
    size_t left = st->wire - st->done;
    if (o->kind == SCHED_SEND) {
      void *p;
      size_t n = c->tp->send_space(c, &p);
      if (n == 0)
        break;
      n = SHARC_MIN(SHARC_MIN(n, left), SHARC_MIN(slice - moved, st->piece));
      size_t data = 0;
      if (st->done < st->bytes) {
        data = SHARC_MIN(n, st->bytes - st->done);
        memcpy(p, buf_at(bufs, o->src_buf, o->src_off, esize) + st->done, data);
      }
      c->tp->send_commit(c, n);
      st->done += n;
      moved += n;
    } else {
      const void *p;
      size_t n = c->tp->recv_avail(c, &p);
      n = SHARC_MIN(SHARC_MIN(n, left), slice - moved);
      if (st->done < st->bytes) {
        size_t data = SHARC_MIN(n, st->bytes - st->done);
        if (o->kind == SCHED_RECV_REDUCE)
          data -= data % esize; /* whole elements */
        if (data == 0)
          break;
        /* Release only what was consumed, unless the payload ends here. */
        if (n > data && st->done + data < st->bytes)
          n = data;
        consume(st, bufs, esize, dtype, op, p, data);
      }
      if (n == 0)
        break;
      c->tp->recv_release(c, n);
      st->done += n;
      moved += n;
    }
  }
  return moved;
}

/* Whether an earlier unfinished op of the round uses the same FIFO. */
/* One slice of a SCHED_COPY (no connection): the bytes moved. */
static size_t copy_slice(op_state_t *st, void *const bufs[3], size_t esize,
                         size_t slice) {
  const sched_op_t *o = st->op;
  size_t n = SHARC_MIN(st->bytes - st->done, slice);
  memcpy(buf_at(bufs, o->dst_buf, o->dst_off, esize) + st->done,
         buf_at(bufs, o->src_buf, o->src_off, esize) + st->done, n);
  st->done += n;
  return n;
}

static int blocked_by_earlier(const op_state_t *sts, size_t i) {
  for (size_t j = 0; j < i; j++)
    if (sts[j].conn == sts[i].conn && sts[j].done < sts[j].wire)
      return 1;
  return 0;
}

static sharc_status_t failed_status(struct sharc_comm *comm) {
  sharc_status_t st = (sharc_status_t)atomic_load(&comm->fail.status);
  pthread_mutex_lock(&comm->err_lock);
  char msg[sizeof comm->unusable_msg];
  snprintf(msg, sizeof msg, "%s", comm->unusable_msg);
  pthread_mutex_unlock(&comm->err_lock);
  return comm_record(comm, st, "%s", msg);
}

/* Names the peers this rank is waiting for, "rank 3 (host a), rank 5 ...". */
static void describe_waits(struct sharc_comm *comm, const op_state_t *sts,
                           size_t n, char *out, size_t len) {
  size_t o = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n && o + 80 < len; i++) {
    if (!sts[i].conn || sts[i].done >= sts[i].wire)
      continue;
    int p = sts[i].conn->peer, seen = 0;
    for (size_t j = 0; j < i; j++) /* once per peer and direction */
      seen |= sts[j].conn && sts[j].conn->peer == p &&
              sts[j].op->kind == sts[i].op->kind && sts[j].done < sts[j].wire;
    if (seen)
      continue;
    o += (size_t)snprintf(
        out + o, len - o, "%s%s rank %d (host %s)", o ? ", " : "",
        sts[i].op->kind == SCHED_SEND ? "sending to" : "receiving from", p,
        comm->peers[p].host);
  }
}

/* Same-host ranks that have not entered the collective this rank is stuck
 * in: the usual cause of a timeout (a rank that skipped or has not reached
 * the call). Returns the first such rank (-1: none known) and describes
 * them in out ("; rank 4 (host h) has not called it: it entered 50"). */
static int find_laggards(struct sharc_comm *comm, char *out, size_t len) {
  size_t o = 0;
  int first = -1;
  out[0] = '\0';
  for (int r = 0; r < comm->nranks && o + 100 < len; r++) {
    uint64_t e = transport_peer_entered(comm, r);
    if (r == comm->rank || e == UINT64_MAX || e > comm->seq)
      continue;
    if (first < 0)
      first = r;
    o += (size_t)snprintf(out + o, len - o,
                          "%s rank %d (host %s) has not called it (it has "
                          "entered %llu collectives)",
                          first == r ? ";" : ",", r, comm->peers[r].host,
                          (unsigned long long)e);
  }
  return first;
}

/* Over shared memory every rank publishes whom it sleeps on (shm_seg.c).
 * Following those waits from `first` (the peer this rank waits on) leads
 * to the rank that holds the collective up: one inside it that waits on
 * nobody (busy, stopped or descheduled). Returns that rank and describes
 * it in out; -1 when the chain leaves the host, loops, or ends at a rank
 * that is not inside this collective (find_laggards names those). */
static int follow_waits(struct sharc_comm *comm, int first, char *out,
                        size_t len) {
  char path[128];
  size_t o = (size_t)snprintf(path, sizeof path, "%d", comm->rank);
  int r = first;
  out[0] = '\0';
  for (int hops = 0; hops < comm->nranks && r >= 0 && r != comm->rank; hops++) {
    if (o + 16 < sizeof path)
      o += (size_t)snprintf(path + o, sizeof path - o, " -> %d", r);
    int w = transport_peer_waiting(comm, r);
    if (w == -1) {
      snprintf(out, len,
               "; rank %d (host %s) is inside it but waits on no peer (the "
               "waits lead there: %s): it stopped moving",
               r, comm->peers[r].host, path);
      return r;
    }
    r = w; /* -2: not on this host, -3: not inside it: stop */
  }
  return -1;
}

/* The first unhealthy connection among the round's pending ops: its
 * status (SHARC_OK: none), with *peer set to the rank it leads to. */
static sharc_status_t check_conns(const op_state_t *sts, size_t n, int *peer) {
  for (size_t i = 0; i < n; i++) {
    if (!sts[i].conn || sts[i].done >= sts[i].wire)
      continue;
    transport_conn_t *c = sts[i].conn;
    sharc_status_t st = c->tp->check(c);
    if (st != SHARC_OK) {
      *peer = c->peer;
      return st;
    }
  }
  return SHARC_OK;
}

/* Where the communicator keeps op o's connection (comm->conns; NULL: it
 * keeps none): a transport hands out one per peer, channel and side for
 * the communicator's life, so each is asked for once, not per call. */
static inline transport_conn_t **kept_conn(struct sharc_comm *comm,
                                           const sched_op_t *o) {
  if (!comm->conns || o->chan >= comm->nchan)
    return NULL; /* a channel it has not: connect says so */
  size_t i = (size_t)o->peer * (size_t)comm->nchan + (size_t)o->chan;
  return &comm->conns[i * 2 + (o->kind == SCHED_SEND)];
}

/* Marks the round's runs of consecutive SENDs of the same bytes over one
 * transport (a broadcast's root: n-1 of them) as groups that the transport
 * may copy once for all (transport_conn_t.share); only in schedules that
 * have such runs (sched_t.shared_sends). */
static void mark_shared(struct sharc_comm *comm, const sched_t *s, size_t first,
                        op_state_t *sts, size_t n) {
  for (size_t i = 0; i < n;) {
    const sched_op_t *o = &s->ops[first + i];
    size_t j = i + 1;
    if (o->kind == SCHED_SEND)
      while (j < n) {
        const sched_op_t *q = &s->ops[first + j];
        if (q->kind != SCHED_SEND || q->src_buf != o->src_buf ||
            q->src_off != o->src_off || q->count != o->count ||
            sts[j].conn->tp != sts[i].conn->tp)
          break;
        j++;
      }
    int group = j - i > 1 ? (int)(j - i) : 0;
    uint64_t key = group ? ++comm->share_groups : 0;
    for (; i < j; i++) {
      sts[i].share = group;
      sts[i].share_key = key;
    }
  }
}

/* *published: the peer this rank last published as the one it sleeps on
 * (transport_publish_wait), -1 for none; kept current across rounds. start: the
 * time now (time_ns), read by the caller: the round reads the clock again
 * only when it idles, never while it moves bytes. */
static sharc_status_t run_round(struct sharc_comm *comm, const sched_t *s,
                                size_t r, op_state_t *sts, void *const bufs[3],
                                sharc_dtype_t dtype, sharc_op_t op,
                                size_t esize, uint8_t **bounce, int *published,
                                uint64_t start) {
  size_t first = s->round_start[r], n = s->round_start[r + 1] - first;
  /* a connection made now (tcp) gives up on its peer at this deadline */
  uint64_t deadline = start + comm->cfg.timeout_ns;
  for (size_t i = 0; i < n; i++) {
    const sched_op_t *o = &s->ops[first + i];
    op_state_t *st = &sts[i];
    st->op = o;
    st->conn = NULL;
    st->bytes = o->count * esize;
    st->done = 0;
    st->begun = st->direct = 0;
    st->share = 0;
    st->dsrc = NULL;
    if (o->kind == SCHED_COPY) { /* sliced in the loop below */
      st->wire = st->bytes;
      continue;
    }
    st->wire = transport_wire_bytes(st->bytes);
    transport_conn_t **kept = kept_conn(comm, o);
    st->conn = kept ? *kept : NULL;
    if (!st->conn) {
      const transport_t *tp = comm->tp[o->peer];
      sharc_status_t cst = tp->connect(
          comm, o->peer, o->chan, o->kind == SCHED_SEND, deadline, &st->conn);
      if (cst != SHARC_OK) {
        if (!atomic_load(&comm->fail.failed))
          comm_fail(comm, cst == SHARC_ERR_PEER_LOST ? o->peer : -1, cst,
                    err_last());
        return cst;
      }
      if (kept)
        *kept = st->conn;
    }
    /* RECV and TMP hold what this call wrote, and in place SEND is RECV,
     * the caller's data just before the call; SEND out of place may be
     * read call after call unchanged, and stays in the peers' caches. */
    st->fresh =
        s->fresh_sends && (o->src_buf != SCHED_BUF_SEND ||
                           bufs[SCHED_BUF_SEND] == bufs[SCHED_BUF_RECV]);
  }
  if (s->shared_sends)
    mark_shared(comm, s, first, sts, n);

  size_t slice = comm->cfg.slice;
  slice -= slice % 64;
  int receives = 0; /* no: short sends go in EXEC_SEND_PIECE pieces */
  for (size_t i = 0; i < n; i++)
    receives |= sts[i].conn && sts[i].op->kind != SCHED_SEND;
  for (size_t i = 0; i < n; i++)
    sts[i].piece = !receives && sts[i].bytes <= EXEC_PIECE_SLICES * slice
                       ? SHARC_MIN(slice, EXEC_SEND_PIECE)
                       : slice;
  /* In each wait the first pause_max idle polls pause, the next ones
   * yield. */
  int can_pause = comm->cfg.spin > 0 && comm->local_max <= exec_host_cpus();
  int64_t pause_max = 0, spin_max = comm->cfg.spin;
  int64_t idle = 0;
  /* Progress is timed when the rank next idles: last_progress may then lag
   * the true last move by one spin phase, which only delays a timeout by
   * that much, and a moving rank never calls clock_gettime. */
  uint64_t last_progress = start, last_check = start;
  int progressed = 0; /* moved since the clock was last read */
  for (;;) {
    /* The doorbell value a sleep compares against must be read before the
     * poll that finds nothing to do; read it only for a poll whose failure
     * leads to sleep: peers bump it on every message, so each read is a
     * cache miss. */
    uint32_t seen = idle >= spin_max ? atomic_load(&comm->wake->doorbell) : 0;
    size_t moved = 0;
    int pending = 0;
    for (size_t i = 0; i < n; i++) {
      if (sts[i].done >= sts[i].wire)
        continue;
      pending = 1;
      if (!sts[i].conn || blocked_by_earlier(sts, i))
        continue;
      moved += advance(&sts[i], bufs, esize, dtype, op, slice, bounce);
    }
    /* Local copies (an out-of-place rank's own block) a slice per pass,
     * after the transfers had their turn: the peers get their data first,
     * and the copy fills what would be waits (a 256 MiB two-rank tcp
     * all-gather copied 128 MiB before its first send). No op of a round
     * touches another's bytes (schedule_sim.c checks), so the order is
     * free. */
    for (size_t i = 0; i < n; i++)
      if (!sts[i].conn && sts[i].done < sts[i].wire)
        moved += copy_slice(&sts[i], bufs, esize, slice);
    if (moved) {
      if (idle && can_pause)
        pause_learn(pause_max, idle);
      idle = 0;
      progressed = 1;
      if (*published != -1) { /* awake and moving: wait on nobody */
        transport_publish_wait(comm, -1);
        *published = -1;
      }
      continue;
    }
    if (!pending)
      return SHARC_OK;
    if (atomic_load(&comm->fail.failed))
      return failed_status(comm);
    if (idle == 0 && can_pause) { /* a wait starts */
      pause_max = pause_next();
      spin_max = comm->cfg.spin + pause_max;
    }
    if (++idle <= spin_max) {
      if (idle <= pause_max) {
        cpu_pause();
      } else {
        /* A cut budget already says the peer shares this CPU: only its
         * probes look again (the look costs a cache miss per wait), and
         * the waits after a look that found it here, until move_off */
        if (idle == pause_max + 1 && (pause_max > 0 || pause_tl.together))
          shares_cpu(comm, sts, n);
        sched_yield();
      }
      continue;
    }
    uint64_t now = time_ns();
    /* start may come from the coarse clock (the recorder's), a tick behind
     * this one: never let it lie ahead */
    if (now < last_progress)
      now = last_progress;
    if (progressed) {
      last_progress = now;
      progressed = 0;
    }
    if (now - last_check >= EXEC_CHECK_INTERVAL_NS) {
      last_check = now;
      transport_poll_notice(comm);
      int bad = -1;
      sharc_status_t cst = check_conns(sts, n, &bad);
      if (cst != SHARC_OK && !atomic_load(&comm->fail.failed)) {
        char why[512];
        snprintf(why, sizeof why, "%s", err_last());
        /* a lost peer or a broken link: the rank at its other end */
        comm_fail(comm,
                  cst == SHARC_ERR_PEER_LOST || cst == SHARC_ERR_NET ? bad : -1,
                  cst, why);
      }
      if (atomic_load(&comm->fail.failed))
        return failed_status(comm);
    }
    if (now - last_progress >= comm->cfg.timeout_ns) {
      char waits[400], behind[300];
      describe_waits(comm, sts, n, waits, sizeof waits);
      /* Only the awaited peers take part in a send/recv batch: ranks behind
       * in the collectives or waiting elsewhere say nothing about it. */
      int laggard = -1;
      behind[0] = '\0';
      if (!s->partial)
        laggard = find_laggards(comm, behind, sizeof behind);
      if (laggard < 0 && !s->partial)
        laggard = follow_waits(comm, *published, behind, sizeof behind);
      sharc_status_t st = comm_record(
          comm, SHARC_ERR_TIMEOUT,
          "%s #%llu: no progress for %llu s while %s%s "
          "(SHARC_TIMEOUT=%s)",
          s->partial ? "send/recv after collective" : "collective",
          (unsigned long long)comm->seq,
          (unsigned long long)((now - last_progress) / 1000000000ull), waits,
          behind, param_str(PARAM_TIMEOUT));
      char why[768];
      snprintf(why, sizeof why, "%s", err_last());
      comm_fail(comm, laggard, st, why);
      return st;
    }
    /* Whom we sleep on: for the flight recorder, and for same-host peers'
     * timeout diagnosis (follow_waits). */
    int on = awaited_peer(sts, n);
    rec_entry_t *rec =
        atomic_load_explicit(&comm->rec_cur, memory_order_acquire);
    if (rec)
      atomic_store(&rec->waiting_on, on);
    if (on != *published) {
      transport_publish_wait(comm, on);
      *published = on;
    }
    comm_wait(comm, seen, EXEC_CHECK_INTERVAL_NS);
  }
}

sharc_status_t exec_run(struct sharc_comm *comm, const sched_t *s,
                        void *const bufs[3], sharc_dtype_t dtype,
                        sharc_op_t op) {
  return exec_run_at(comm, s, bufs, dtype, op, time_ns(), NULL);
}

sharc_status_t exec_run_at(struct sharc_comm *comm, const sched_t *s,
                           void *const bufs[3], sharc_dtype_t dtype,
                           sharc_op_t op, uint64_t now_ns, exec_hook_t *hook) {
  size_t esize = dtype_bytes(dtype);
  size_t maxops = 0;
  for (size_t r = 0; r < s->nrounds; r++)
    maxops = SHARC_MAX(maxops, s->round_start[r + 1] - s->round_start[r]);
  op_state_t stack[16];
  op_state_t *sts = maxops <= 16 ? stack : malloc(maxops * sizeof *sts);
  if (!sts)
    return comm_error(comm, SHARC_ERR_NO_MEM, "executor: out of memory");
  sharc_status_t st = SHARC_OK;
  uint8_t *bounce = NULL; /* staging for reductions of cross-memory reads */
  int published = -1;
  for (size_t r = 0; r < s->nrounds && st == SHARC_OK; r++) {
    if (hook)
      hook->before(hook, s, r);
    /* A later round's start is for its timeouts (seconds): the coarse
     * clock (5 ns a read on the development VM, the full one 29) will do. */
    st = run_round(comm, s, r, sts, bufs, dtype, op, esize, &bounce, &published,
                   r == 0 && !hook ? now_ns : time_coarse_ns());
    if (hook && st == SHARC_OK)
      hook->after(hook, s, r);
  }
  /* After a failure the last wait stays published: peers that time out in
   * the same collective follow it through this rank (follow_waits). */
  if (published != -1 && st == SHARC_OK)
    transport_publish_wait(comm, -1);
  if (sts != stack)
    free(sts);
  free(bounce);
  return st;
}

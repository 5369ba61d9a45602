/*
 * shm_seg.c - the shared-memory transport's segments: one per rank, with
 * its wake word, failure notice and inbound FIFOs (shm.c moves messages
 * through them). Setup, liveness, failure notices, teardown.
 *
 * Segments live in /dev/shm as sharc-<job tag>-<comm uid>-<rank>, mode
 * 0600. Liveness: each rank holds a read lock (an open-file-description
 * lock, which the kernel drops however the process dies) on its own segment
 * for its whole life; a peer asks for a conflicting lock without taking it
 * (F_OFD_GETLK), so any number of ranks can test one owner at once. A
 * segment is built, locked and stamped in an unnamed O_TMPFILE file and only
 * then linked under its name, so a named segment nobody holds a lock on is
 * an orphan whatever instant its owner died at.
 *
 * Nothing is left in /dev/shm: the owner unlinks its name as soon as every
 * local peer has mapped it (end of setup) and, on a failed setup, in
 * teardown. A rank that dies first leaves an orphan, which the survivors
 * unlink once every local peer has seen it (mapped it, or given up on it in
 * teardown); until then it is the evidence that makes peers still in setup
 * fail at once, naming the dead rank. sharcrun removes what is left when
 * ranks of its job died together in setup (the job tag comes from the token
 * it hands out). Unlinking always follows a lock test that proves the owner
 * gone; racing survivors are harmless (the later unlink finds nothing).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm_impl.h"

/* SHM_DIR/sharc-<tag>-<uid>-<rank>. The tag, the low 32 bits of the FNV-1a
 * hash of the job token, groups one job's segments for sharcrun's sweep
 * (comm/launch/sharcrun.c computes it from the SHARC_TOKEN it hands out:
 * keep the two in step); the uid tells the communicators of a job apart. */
static void seg_path(char *out, size_t len, const struct sharc_comm *comm,
                     int rank) {
  uint32_t tag =
      (uint32_t)hash_bytes(HASH_BASIS, comm->token, sizeof comm->token);
  snprintf(out, len, SHM_DIR "/sharc-%08x-%016llx-%d", tag,
           (unsigned long long)comm->uid, rank);
}

/* ---- liveness and failure notices ---- */

/* The owner's liveness lock: a read lock on the whole segment, held as
 * long as the open file description lives. */
static int lock_live(int fd) {
  struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET};
  return fcntl(fd, F_OFD_SETLK, &fl);
}

/* 1 while a process holds the liveness lock of the segment behind fd. It
 * only asks (F_OFD_GETLK takes nothing), so ranks testing one owner at the
 * same moment cannot mistake each other for it. Unknown counts as alive. */
static int owner_alive(int fd) {
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
    return 1;
  return fl.l_type != F_UNLCK;
}

/* Unlinks segment `path` if its owner is provably gone: the file carries
 * the magic (stamped after the lock was taken) and nobody holds its lock.
 * With same >= 0, only while the name still refers to the file behind
 * `same`. Returns 1 if this call removed it; a racing rank's later call
 * finds nothing. */
static int unlink_orphan(const char *path, int same) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return 0;
  struct stat a, b;
  uint64_t magic = 0;
  int gone = fstat(fd, &a) == 0 &&
             (same < 0 || (fstat(same, &b) == 0 && a.st_ino == b.st_ino &&
                           a.st_dev == b.st_dev)) &&
             pread(fd, &magic, sizeof magic, offsetof(shm_header_t, magic)) ==
                 (ssize_t)sizeof magic &&
             magic == SHM_MAGIC && !owner_alive(fd) && unlink(path) == 0;
  close(fd);
  if (gone)
    INFO(SUB_SHM, "shm: removed %s, left by a rank that died", path);
  return gone;
}

/* Imports a failure notice left in header h: ours (a peer told us), or a
 * dead peer's (what it knew when it left; see shm_notify_abort). */
static void import_notice(struct sharc_comm *comm, shm_header_t *h) {
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

/* Removes the name of local peer `local` once its owner is dead and every
 * local peer has seen the segment (its `mapped` count is full). Until then
 * the orphan is what lets a peer still in setup fail at once instead of
 * waiting for a segment that will never come. With mark (teardown), a dead
 * peer's segment this rank never mapped counts as seen by it now. */
static void reap_peer(struct sharc_comm *comm, int local, int mark) {
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
  char path[96];
  seg_path(path, sizeof path, comm, comm->local_ranks[local]);
  int fd = s->segs[local].fd;
  shm_header_t *h = s->segs[local].base ? seg_hdr(s, local) : NULL;
  void *p = MAP_FAILED;
  if (!h && mark && (fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) >= 0) {
    struct stat sb;
    if (fstat(fd, &sb) == 0 && (size_t)sb.st_size == s->seg_bytes &&
        !owner_alive(fd))
      p = mmap(NULL, s->hdr_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED &&
        atomic_load(&((shm_header_t *)p)->magic) == SHM_MAGIC) {
      h = p;
      atomic_fetch_add(&h->mapped, 1);
    }
  }
  if (h && (int)atomic_load(&h->mapped) >= s->nlocal - 1)
    unlink_orphan(path, fd);
  if (p != MAP_FAILED)
    munmap(p, s->hdr_bytes);
  if (fd >= 0 && fd != s->segs[local].fd)
    close(fd);
}

/* Local peer `local` is dead (its lock is gone). If it failed first it
 * told us why, or kept the reason in its own header: that is the failure
 * to report; else its death is. */
static void peer_lost(struct sharc_comm *comm, int local) {
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
  int r = comm->local_ranks[local];
  import_notice(comm, seg_hdr(s, s->me));
  import_notice(comm, seg_hdr(s, local));
  char why[256];
  snprintf(why, sizeof why,
           "rank %d (host %s, pid %d) died or left the communicator", r,
           comm->peers[r].host, comm->peers[r].pid);
  comm_fail(comm, r, SHARC_ERR_PEER_LOST, why); /* no-op once failed */
  reap_peer(comm, local, 0);
}

/* The failure this comm has recorded, as this call's status and message. */
static sharc_status_t failure(struct sharc_comm *comm) {
  char msg[sizeof comm->unusable_msg];
  pthread_mutex_lock(&comm->err_lock);
  snprintf(msg, sizeof msg, "%s", comm->unusable_msg);
  sharc_status_t st = comm->unusable_st;
  pthread_mutex_unlock(&comm->err_lock);
  return comm_record(comm, st, "%s", msg);
}

/* While setup waits: fails at once when a rank reported a failure (to us,
 * or in the header of a peer we mapped: a peer that failed keeps its reason
 * there), or when a local peer died before it had mapped every segment
 * (setup cannot end without it). A peer that had mapped them all may have
 * finished setup and left already, which is not an error here. */
static sharc_status_t setup_watch(struct sharc_comm *comm,
                                  struct shm_state *s) {
  for (int i = 0; i < s->nlocal; i++)
    if (s->segs[i].base)
      import_notice(comm, seg_hdr(s, i));
  for (int i = 0; i < s->nlocal && !atomic_load(&comm->unusable); i++)
    if (i != s->me && s->segs[i].base &&
        !atomic_load(&seg_hdr(s, i)->mapped_all) && !owner_alive(s->segs[i].fd))
      peer_lost(comm, i);
  return atomic_load(&comm->unusable) ? failure(comm) : SHARC_OK;
}

/* ---- setup ---- */

/* One try at mapping local peer `local`'s segment; it stays unmapped
 * (segs[local].base NULL) while the segment is not there or not ready. */
static sharc_status_t map_peer(struct sharc_comm *comm, struct shm_state *s,
                               int local) {
  int rank = comm->local_ranks[local];
  char path[96];
  seg_path(path, sizeof path, comm, rank);
  int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return SHARC_OK;
  struct stat sb;
  uint64_t magic = 0;
  sharc_status_t st = SHARC_OK;
  if (fstat(fd, &sb) != 0) {
    /* gone again: try later */
  } else if (sb.st_uid != geteuid()) {
    st = comm_error(comm, SHARC_ERR_SYSTEM,
                    "shm: %s of local rank %d belongs to uid %d, not to this "
                    "rank's %d; run the ranks as one user",
                    path, rank, (int)sb.st_uid, (int)geteuid());
  } else if ((size_t)sb.st_size == s->seg_bytes) {
    void *p =
        mmap(NULL, s->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      st = comm_error(comm, SHARC_ERR_SYSTEM,
                      "shm: mapping %s of rank %d failed: %s", path, rank,
                      strerror(errno));
    } else if (atomic_load(&((shm_header_t *)p)->magic) == SHM_MAGIC) {
      s->segs[local] = (shm_seg_t){p, s->seg_bytes, fd};
      atomic_fetch_add(&((shm_header_t *)p)->mapped, 1);
      return SHARC_OK;
    } else {
      munmap(p, s->seg_bytes);
    }
  } else if (sb.st_size > 0 &&
             pread(fd, &magic, sizeof magic, offsetof(shm_header_t, magic)) ==
                 (ssize_t)sizeof magic &&
             magic == SHM_MAGIC) {
    st = comm_error(comm, SHARC_ERR_MISMATCH,
                    "shm: segment %s of local rank %d is %lld bytes where this "
                    "rank's is %zu: the ranks disagree on SHARC_SHM_FIFO_BYTES "
                    "or SHARC_NCHANNELS; set them alike on every rank",
                    path, rank, (long long)sb.st_size, s->seg_bytes);
  }
  close(fd);
  return st;
}

/* Maps every local peer's segment, trying all of them each round so that a
 * dead peer's orphan is found whichever segment is late. */
static sharc_status_t map_peers(struct sharc_comm *comm, struct shm_state *s,
                                uint64_t deadline) {
  unsigned backoff_us = 100;
  for (;;) {
    int missing = -1;
    for (int i = 0; i < s->nlocal; i++) {
      if (i == s->me || s->segs[i].base)
        continue;
      CHECK(map_peer(comm, s, i));
      if (!s->segs[i].base && missing < 0)
        missing = i;
    }
    if (missing < 0)
      return SHARC_OK;
    CHECK(setup_watch(comm, s));
    if (time_ns() > deadline) {
      int rank = comm->local_ranks[missing];
      char path[96];
      seg_path(path, sizeof path, comm, rank);
      return comm_error(comm, SHARC_ERR_TIMEOUT,
                        "shm: segment %s of local rank %d (pid %d) not ready "
                        "after %s s (SHARC_TIMEOUT)",
                        path, rank, comm->peers[rank].pid,
                        param_str(PARAM_TIMEOUT));
    }
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

/* Lays out our segment in fd: mode, liveness lock, size, mapping, header,
 * and the magic last. Takes fd (closed on failure). */
static sharc_status_t init_segment(struct sharc_comm *comm, struct shm_state *s,
                                   int fd) {
  const char *what = NULL, *hint = "";
  void *p = MAP_FAILED;
  if (fchmod(fd, 0600) != 0) { /* whatever the umask */
    what = "setting mode 0600 on";
  } else if (lock_live(fd) != 0) {
    what = "locking";
    hint = " (needs open file description locks: Linux 3.15 or later)";
  } else if (ftruncate(fd, (off_t)s->seg_bytes) != 0 ||
             (p = mmap(NULL, s->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                       fd, 0)) == MAP_FAILED) {
    what = "sizing and mapping";
    hint = " (is /dev/shm large enough? lower SHARC_SHM_FIFO_BYTES)";
  }
  if (what) {
    int e = errno;
    close(fd);
    return comm_error(comm, SHARC_ERR_SYSTEM,
                      "shm: %s %s (%zu bytes) failed: %s%s", what, s->path,
                      s->seg_bytes, strerror(e), hint);
  }
  s->segs[s->me] = (shm_seg_t){p, s->seg_bytes, fd};
  shm_header_t *h = p;
  h->pid = (int32_t)getpid();
  h->rank = comm->rank;
  h->seg_fd = fd;
  h->self_addr = (uint64_t)(uintptr_t)h;
  atomic_store(&h->waiting_on, -1);
  atomic_store(&h->cpu, -1);
  /* The wake word moves into shared memory so local peers can ring it,
   * and the progress counters so they can read them. */
  comm->wake = &h->wake;
  atomic_store(&h->progress[0], atomic_load(&comm->progress[0]));
  atomic_store(&h->progress[1], atomic_load(&comm->progress[1]));
  comm->progress = h->progress;
  atomic_store(&h->magic, SHM_MAGIC);
  return SHARC_OK;
}

static sharc_status_t name_taken(struct sharc_comm *comm, struct shm_state *s) {
  return comm_error(comm, SHARC_ERR_SYSTEM,
                    "shm: %s exists and its owner is alive: another job drew "
                    "communicator id %016llx; start this job again",
                    s->path, (unsigned long long)comm->uid);
}

/* Creates our segment so that it is complete and locked before its name
 * appears: built in an unnamed O_TMPFILE file, then linked under its name.
 * Where that is not possible (no O_TMPFILE on /dev/shm, no /proc to link
 * through) it is created under its name and locked at once; peers then
 * wait, and never unlink, while it lacks the magic. A name left by a dead
 * owner (an earlier job that drew the same uid) is removed first. */
static sharc_status_t create_segment(struct sharc_comm *comm,
                                     struct shm_state *s) {
  int fd = open(SHM_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) {
    CHECK(init_segment(comm, s, fd));
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int e;
    do {
      if (linkat(AT_FDCWD, proc, AT_FDCWD, s->path, AT_SYMLINK_FOLLOW) == 0) {
        s->named = 1;
        return SHARC_OK;
      }
      e = errno;
    } while (e == EEXIST && unlink_orphan(s->path, -1));
    if (e == EEXIST)
      return name_taken(comm, s);
    INFO(SUB_SHM, "shm: cannot link %s (%s); creating it by name", s->path,
         strerror(e));
    comm->wake = &comm->wake_private;
    comm->progress = comm->progress_private;
    munmap(s->segs[s->me].base, s->seg_bytes);
    close(fd);
    s->segs[s->me] = (shm_seg_t){NULL, 0, -1};
  }
  int e;
  do {
    fd =
        open(s->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    e = fd < 0 ? errno : 0;
  } while (e == EEXIST && unlink_orphan(s->path, -1));
  if (e == EEXIST)
    return name_taken(comm, s);
  if (fd < 0)
    return comm_error(comm, SHARC_ERR_SYSTEM, "shm: creating %s failed: %s",
                      s->path, strerror(e));
  s->named = 1;
  return init_segment(comm, s, fd);
}

sharc_status_t shm_setup(struct sharc_comm *comm) {
  struct shm_state *s = calloc(1, sizeof *s);
  if (!s)
    return comm_error(comm, SHARC_ERR_NO_MEM, "shm: out of memory");
  comm->tp_state[TRANSPORT_SHM] = s;
  s->nlocal = comm->local_size;
  s->me = comm->local_rank;
  s->nchan = comm->nchan;
  size_t fb = (size_t)SHARC_MAX(param_int(PARAM_SHM_FIFO_BYTES), 4096);
  s->fifo_bytes = (fb + 4095) & ~(size_t)4095;
  s->stride = 4096 + s->fifo_bytes; /* ctrl page + data */
  s->hdr_bytes = 4096;
  s->out_off = s->hdr_bytes + (size_t)s->nlocal * (size_t)s->nchan * s->stride;
  s->seg_bytes = s->out_off + SHM_OUT_BYTES;
  s->share_slot = -1;
  s->segs = calloc((size_t)s->nlocal, sizeof *s->segs);
  s->local_of = malloc((size_t)comm->nranks * sizeof *s->local_of);
  s->conns =
      calloc((size_t)comm->nranks * (size_t)s->nchan * 2, sizeof *s->conns);
  s->maps = calloc((size_t)s->nlocal * SHM_MAP_CACHE, sizeof *s->maps);
  s->direct = param_int(PARAM_SHM_DIRECT) != 0 && s->nlocal <= SHM_MAX_DIRECT;
  int64_t fresh = param_int(PARAM_SHM_DIRECT_FRESH_BYTES);
  s->fresh_min = fresh > 0 ? (size_t)fresh : 0;
  int64_t least = param_int(PARAM_SHM_DIRECT_MIN_BYTES);
  s->inplace_min = least > 0 ? (size_t)least : 0;
  int64_t shared = param_int(PARAM_SHM_DIRECT_SHARED_BYTES);
  if (comm->oversubscribed && shared > least)
    s->inplace_min = (size_t)shared;
  if (!s->segs || !s->local_of || !s->conns || !s->maps)
    return comm_error(comm, SHARC_ERR_NO_MEM, "shm: out of memory");
  for (int i = 0; i < s->nlocal; i++)
    s->segs[i].fd = -1;
  for (int r = 0; r < comm->nranks; r++)
    s->local_of[r] = -1;
  for (int i = 0; i < s->nlocal; i++)
    s->local_of[comm->local_ranks[i]] = i;

  /* Our own segment. */
  seg_path(s->path, sizeof s->path, comm, comm->rank);
  CHECK(create_segment(comm, s));
  shm_header_t *h = seg_hdr(s, s->me);

  uint64_t deadline = time_ns() + timeout_ns();
  CHECK(map_peers(comm, s, deadline));
  atomic_store(&h->mapped_all, 1);
  probe_direct(comm, s);
  /* Unlink once every local peer has mapped us. */
  unsigned backoff_us = 100;
  while ((int)atomic_load(&h->mapped) < s->nlocal - 1) {
    CHECK(setup_watch(comm, s));
    if (time_ns() > deadline)
      return comm_error(comm, SHARC_ERR_TIMEOUT,
                        "shm: only %u of %d local peers mapped %s after %s s",
                        atomic_load(&h->mapped), s->nlocal - 1, s->path,
                        param_str(PARAM_TIMEOUT));
    usleep(backoff_us);
    if (backoff_us < 20000)
      backoff_us *= 2;
  }
  unlink(s->path);
  s->named = 0;
  INFO(SUB_SHM, "shm: %d local ranks, %d channels, %zu-byte FIFOs", s->nlocal,
       s->nchan, s->fifo_bytes);
  return SHARC_OK;
}

void shm_publish_wait(struct sharc_comm *comm, int peer) {
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
  if (s && s->segs && s->segs[s->me].base)
    atomic_store_explicit(&seg_hdr(s, s->me)->waiting_on, peer,
                          memory_order_relaxed);
}

void shm_publish_cpu(struct sharc_comm *comm, int cpu) {
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
  if (s && s->segs && s->segs[s->me].base)
    atomic_store_explicit(&seg_hdr(s, s->me)->cpu, cpu, memory_order_relaxed);
}

/* The header of local rank `rank`'s segment, NULL when it is not mapped
 * (or the rank is not local, or there is no shm state). */
static shm_header_t *peer_hdr(struct sharc_comm *comm, int rank) {
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
  if (!s || !s->segs || rank < 0 || rank >= comm->nranks ||
      s->local_of[rank] < 0 || !s->segs[s->local_of[rank]].base)
    return NULL;
  return seg_hdr(s, s->local_of[rank]);
}

int shm_peer_cpu(struct sharc_comm *comm, int rank) {
  shm_header_t *h = peer_hdr(comm, rank);
  return h ? atomic_load_explicit(&h->cpu, memory_order_relaxed) : -1;
}

int shm_peer_waiting(struct sharc_comm *comm, int rank) {
  shm_header_t *h = peer_hdr(comm, rank);
  if (!h)
    return -2;
  if (atomic_load_explicit(&h->progress[0], memory_order_relaxed) !=
      comm->seq + 1)
    return -3;
  int w = atomic_load_explicit(&h->waiting_on, memory_order_relaxed);
  /* Out of it already: done (nothing published), or failed in it (its last
   * wait stays published: follow it). */
  if (atomic_load_explicit(&h->progress[1], memory_order_relaxed) != comm->seq)
    return w >= 0 ? w : -3;
  return w;
}

uint64_t shm_peer_entered(struct sharc_comm *comm, int rank) {
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
  if (!s || !s->segs || rank < 0 || rank >= comm->nranks ||
      s->local_of[rank] < 0)
    return UINT64_MAX;
  return atomic_load_explicit(&seg_hdr(s, s->local_of[rank])->progress[0],
                              memory_order_relaxed);
}

void shm_poll_notice(struct sharc_comm *comm) {
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
  if (s && s->segs && s->segs[s->me].base)
    import_notice(comm, seg_hdr(s, s->me));
}

/* Liveness of the peer this connection waits on. Only awaited peers are
 * checked: a peer that finished its part and left is not an error unless we
 * still need something from it. */
sharc_status_t shm_check(transport_conn_t *tc) {
  shm_conn_t *c = (shm_conn_t *)tc;
  struct sharc_comm *comm = c->comm;
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
  import_notice(comm, seg_hdr(s, s->me));
  if (owner_alive(s->segs[c->local].fd))
    return SHARC_OK;
  peer_lost(comm, c->local);
  return failure(comm);
}

/* Leaves the notice in every mapped local peer's header and wakes them;
 * also in our own, so that a peer which finds us dead later learns why we
 * left (peer_lost). */
void shm_notify_abort(struct sharc_comm *comm, int failed_rank,
                      sharc_status_t st) {
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
  if (!s || !s->segs)
    return;
  for (int i = 0; i < s->nlocal; i++) {
    if (!s->segs[i].base)
      continue;
    shm_header_t *h = seg_hdr(s, i);
    int32_t expect = 0;
    if (atomic_compare_exchange_strong(&h->fail.failed, &expect, 2)) {
      atomic_store(&h->fail.failed_rank, failed_rank);
      atomic_store(&h->fail.status, (int32_t)st);
      atomic_store(&h->fail.reporter, comm->rank);
      atomic_store(&h->fail.failed, 1);
    }
    if (i != s->me)
      comm_wake_word(&h->wake);
  }
}

void shm_teardown(struct sharc_comm *comm, uint64_t deadline) {
  struct shm_state *s = comm->tp_state[TRANSPORT_SHM];
  if (!s)
    return;
  if (comm->wake != &comm->wake_private) {
    /* Keep the wake word valid for anyone still holding the comm. */
    comm->wake = &comm->wake_private;
  }
  comm->progress = comm->progress_private;
  /* Our name (still there after a failed setup) goes while our lock says
   * we are alive; then the names of local peers that died with theirs. */
  if (s->named)
    unlink(s->path);
  if (s->segs && comm->local_ranks)
    for (int i = 0; i < s->nlocal; i++)
      if (i != s->me)
        reap_peer(comm, i, 1);
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
        close(s->segs[i].fd); /* ours: drops the liveness lock */
    }
    free(s->segs);
  }
  if (s->maps) {
    for (int i = 0; i < s->nlocal * SHM_MAP_CACHE; i++)
      if (s->maps[i].base)
        munmap(s->maps[i].base, s->maps[i].size);
    free(s->maps);
  }
  free(s->local_of);
  free(s);
  comm->tp_state[TRANSPORT_SHM] = NULL;
}

/*
 * direct.h - inside the direct GPU path (SHARC_CUDA_PATH=direct, and auto's
 * choice on one host): what path_direct.c (the path), direct_comm.c (a
 * communicator's device state: setup, watchdog, failure) and
 * direct_queue.c (a call's steps) share. The path: collectives
 * on device memory between the GPU ranks of one host, queued on the
 * caller's CUDA stream itself. No host thread takes part in a call: the
 * enqueueing thread queues copies, reduction kernels and stream memory
 * operations and returns; the CUDA stream carries them out.
 *
 * Per communicator (its "device comm", made by the first call that takes
 * the path, all ranks at the same call) every rank allocates one device
 * buffer and shares it through CUDA IPC:
 *
 *   [ready | done | probe][0..n)  flags, 32-bit step numbers, written by peers
 *   [slot 0 | slot 1]             staging, SHARC_CUDA_SLOT_BYTES each
 *
 * A call is a series of steps, numbered alike on every rank (the ranks
 * issue the same calls in the same order). In step s a rank may publish:
 * it waits until every peer's done word in its buffer says the peers
 * finished step s - 2 (the last step that used slot s % 2), copies its
 * data into slot s % 2, and writes s into its ready word in every peer's
 * buffer. A reader waits for the ready word of the rank it reads, in its
 * own buffer, to reach s, then copies or reduces from that rank's slot.
 * At the end of each step every rank writes s into its done word in every
 * peer's buffer. Waits are cuStreamWaitValue32 (GEQ, cyclic) on the
 * waiter's own memory, handled by the GPU's front end: no kernel ever waits
 * for another process, so ranks sharing one GPU keep their time slices.
 * Writes are cuStreamWriteValue32 with its default memory barrier, so the
 * data copied before a flag is visible to the peer that sees the flag.
 *
 *   all-gather  per piece: publish the own piece; copy every peer's piece
 *               from its slot (copy engines only, no kernel)
 *   broadcast   the root publishes; the others copy from its slot
 *   reduce-     step s: publish the piece of every block (one 2D copy);
 *   scatter     step s+1: reduce the own block from every rank's slot into
 *               the own slot s+1, starting with the own contribution, then
 *               copy it to recvbuf
 *   all-reduce  step s as reduce-scatter, on a piece split into n blocks;
 *               step s+1: publish the reduced block; copy every peer's
 *               reduced block from its slot. Each block is reduced by one
 *               rank only, so every rank gets the same bits.
 *   reduce      as all-reduce; only the root copies the reduced blocks
 *   gather      as all-gather; only the root copies, and does not publish
 *   scatter     the root publishes its n blocks' pieces (one 2D copy);
 *               each rank copies its own from the root's slot
 *   all-to-all  every rank publishes its n blocks' pieces; each copies
 *               block r of every rank's slot
 *   barrier     one step: publish, wait for every peer's ready word
 *
 * In place (direct_inplace.c). All-gather, broadcast, reduce-scatter and
 * all-reduce of at least SHARC_CUDA_INPLACE_BYTES (every buffer the peers
 * read registered with sharc_mem_register) or SHARC_CUDA_INPLACE_UNREG_BYTES
 * (any cudaMalloc memory) skip the slots: at enqueue the ranks exchange
 * their buffers' CUDA IPC handles in the call's turn (over the host
 * transport: the enqueue waits for the peers' enqueues, never for the
 * device), map them (cached; registered ones until their owner
 * deregisters) and agree that every rank could. The steps are then:
 *
 *   all-gather  step s: publish (the ready word only: the own sendbuf is
 *               the data); copy every peer's block from its sendbuf
 *   broadcast   the root publishes; the others copy from its sendbuf
 *   reduce-     step s: publish; reduce the own block of every rank's
 *   scatter     sendbuf into recvbuf, starting with the own
 *   all-reduce  step s as reduce-scatter, into the own block of recvbuf;
 *               step s+1: publish; copy every peer's block from its recvbuf
 *
 * and a rank whose buffers the peers read waits, before its stream goes
 * on, until every peer's done word says it finished the last step (the
 * caller may overwrite the buffers after the call). In-place layouts are
 * safe: a rank writes a block of its recvbuf only after the peer that
 * reads that block of its sendbuf published its next step.
 *
 * Buffers may be device, managed or host memory (the copies handle each);
 * the reduction kernels touch only the device staging. Calls on different
 * CUDA streams of one communicator are chained by an event, in the order
 * they were enqueued.
 *
 * Failure. A CUDA call that fails while a call is queued leaves the peers
 * waiting, so it fails the communicator (comm_fail): the peers are told,
 * and on every rank the abort hook (direct_abort) overwrites the rank's
 * flags with a step number no wait can exceed, from an internal stream, so
 * every queued wait passes and the CUDA streams drain (with undefined
 * results); sharc_stream_synchronize and every later call return the
 * error. A peer's flag write queued before its own release may still land
 * after this rank's and lower a flag again, so the watchdog repeats the
 * release while this rank's calls are in flight. The watchdog thread (one
 * per process, asleep unless a call is in flight) also fails the
 * communicator when a peer process died (SHARC_ERR_PEER_LOST) or when a
 * rank has sat inside a call without finishing a step for SHARC_TIMEOUT
 * (SHARC_ERR_TIMEOUT), also after the communicator was destroyed with
 * calls still queued. A call refused after the setup (a CUDA stream on
 * another device) fails the communicator too: its peers number the calls
 * they queue, and would otherwise pair the next call with this one. A CUDA
 * graph capture is refused on every rank alike (the binding), which skips
 * the call everywhere and keeps the numbering.
 */
#ifndef SHARC_COMM_GPU_DIRECT_H
#define SHARC_COMM_GPU_DIRECT_H

#ifdef SHARC_HAVE_CUDA

#include "gpu_impl.h"

#include <stdatomic.h>

#define NSLOTS 2
#define NWORDS 3                /* flag words per peer: ready, done, probe */
#define PROBE_NS 10000000000ull /* the setup's probe waits at most this */
/* 2D copies with a larger source pitch go as n 1D copies (the device's
 * cudaDevAttrMaxPitch is 2^31 - 1 or more on the GPUs this targets) */
#define MAX_PITCH ((size_t)INT32_MAX)
#define RELEASED_BYTE 0x7f /* flags memset to 0x7f7f7f7f pass every wait */

typedef CUresult (*write_value32_fn)(CUstream stream, CUdeviceptr addr,
                                     cuuint32_t value, unsigned int flags);

typedef struct devcomm {
  struct sharc_comm *comm; /* NULL once the comm is freed (wd.lock) */
  int refs;                /* the comm's, and each stream's using it */
  int rank, n, device;
  size_t slot_bytes, stg_off, bytes;
  int64_t inplace_bytes[2]; /* registered, unregistered: the thresholds */
  uint8_t *mem;             /* this rank's buffer */
  uint8_t **peer;           /* [n] every rank's buffer, as mapped here */
  int *opened;              /* [n] mapped with cudaIpcOpenMemHandle */
  pid_t *pid;               /* [n] */
  cudaStream_t side; /* internal: the abort's release, the teardown wait */
  cudaEvent_t last;  /* the end of the last call queued */
  cudaStream_t last_cs;
  int have_last;
  wait_value32_fn wait32;
  write_value32_fn write32;
  /* pinned, mapped: [0] the last step of the call the CUDA stream entered,
   * [1] the last step it finished (the watchdog's view) */
  _Atomic uint32_t *words;
  CUdeviceptr words_dev;
  pthread_mutex_t lock; /* enqueueing: step, last, last_cs */
  uint32_t step;        /* the last step queued */
  _Atomic uint32_t issued;
  /* the watchdog's state (wd.lock) */
  uint32_t seen_in, seen_out;
  uint64_t seen_at;
  struct devcomm *next;
  /* the failure, once the comm failed (failing: claimed) */
  _Atomic int failing, failed;
  sharc_status_t fail_st;
  char msg[sizeof(((struct sharc_comm *)0)->unusable_msg)];
} devcomm_t;

/* ---- direct_comm.c ------------------------------------------------------ */

/* comm's device comm; NULL before its setup, or when the setup declined
 * the path (SHARC_CUDA_PATH=auto: its calls take the staged path). */
devcomm_t *dc_of(const struct sharc_comm *comm);
int dc_declined(const struct sharc_comm *comm);

/* The first call of comm on this path, in that call's turn (now), on every
 * rank at the same call: every rank's buffer allocated, shared, mapped,
 * probed and agreed on, the comm's failure hook set. On failure
 * *declined tells whether every rank agreed to decline (auto). */
sharc_status_t dc_setup(dev_stream_t *ds, coll_call_t *call, call_now_fn now,
                        const char *fn, int *declined);

/* An all-gather of bytes from every rank into all, over the host transport
 * in call's turn. */
sharc_status_t dc_gather_now(coll_call_t *call, call_now_fn now,
                             const void *mine, void *all, size_t bytes);

/* Drops a reference (the last frees dc, waiting for the peers' reads). */
void dc_put(devcomm_t *dc);

/* dc failed: its failure becomes its communicator's last error too (as a
 * failed host collective records it), while the communicator exists. */
void dc_record(devcomm_t *dc);

/* A call was queued: wakes the watchdog. */
void wd_kick(void);

/* ---- direct_inplace.c --------------------------------------------------- */

struct map_slot;

/* A call read in place: every rank's buffers as mapped here (NULL where
 * the call does not read them), and the mappings held for it until the
 * CUDA stream has passed it. */
typedef struct {
  const uint8_t **send, **recv; /* [n] */
  struct map_slot **held;       /* [nheld] */
  int nheld;
} dq_inplace_t;

/* Whether call is one the ranks exchange their buffers for (the same
 * answer on every rank). */
int di_wants(const devcomm_t *dc, const coll_call_t *call);

/* The exchange, in call's turn, on every rank alike: *ip filled (the call
 * runs in place) or not (ip->send NULL: through the slots, the mappings
 * put back). An error fails the call: a mismatch, which every rank sees
 * and refuses alike (SHARC_ERR_MISMATCH, nothing queued), or a failed
 * host exchange or allocation, which breaks the communicator. */
sharc_status_t di_prepare(devcomm_t *dc, coll_call_t *call, call_now_fn now,
                          const char *fn, dq_inplace_t *ip);

/* Frees ip's arrays (not the mappings it holds). */
void di_clear(dq_inplace_t *ip);

/* ---- direct_queue.c ----------------------------------------------------- */

/* Queues call on cs (dc->lock held), numbering its steps from dc->step; in
 * place where ip is not NULL. Returns 0, or the CUDA error of the first
 * operation that failed, with its name in *what (nothing after it is
 * queued). */
int dq_call(devcomm_t *dc, cudaStream_t cs, const coll_call_t *call,
            const dq_inplace_t *ip, const char **what);

/* The setup's flag probe, on dc's internal stream: each rank writes its
 * probe word in every peer's buffer and waits for every peer's in its own
 * (bounded), so the stream memory operations the path is made of have
 * worked across these processes before any call relies on them. Recorded,
 * not logged. */
sharc_status_t dq_probe(devcomm_t *dc, const char *fn);

#endif /* SHARC_HAVE_CUDA */

#endif /* SHARC_COMM_GPU_DIRECT_H */

/*
 * devpipe.h - the pipelined staged path's plan: which
 * pieces of a staged collective's device-to-host copy must have landed
 * before each round of its schedule, and which pieces of the host-to-device
 * copy are final after each round.
 *
 * The staged path (path_staged.c) copies a collective's device buffers into
 * pinned host staging, runs the host collective there and copies the result
 * back. Whole, that is D2H + network + H2D one after another. Planned per
 * round, the CUDA stream copies the pieces in the order the schedule first
 * touches them, each followed by an event the worker waits on just before
 * the round that needs it, and copies each finished piece back as soon as
 * the worker releases it after the round that wrote it last: the copies
 * overlap the transfers of the other rounds. The wire protocol does not
 * change, so a rank on host memory and a rank on device memory still run
 * the same collective together.
 *
 * Pure planning on a schedule (no CUDA): path_staged.c queues the copies;
 * tests/unit/test_devpipe.c checks the plans of every algorithm.
 */
#ifndef SHARC_COMM_DEVPIPE_H
#define SHARC_COMM_DEVPIPE_H

#include <stddef.h>

#include "schedule.h"

/* One contiguous stretch of staging bytes. */
typedef struct {
  size_t off, len;
} devpipe_piece_t;

/* A group of pieces copied together: D2H groups must have landed before
 * round `round` starts; H2D groups are final once round `round` has ended
 * (the last H2D group only when the whole call has). */
typedef struct {
  size_t round;
  size_t first, npieces; /* devpipe_t.pieces[first, first + npieces) */
  size_t bytes;
} devpipe_group_t;

typedef struct {
  devpipe_group_t *d2h, *h2d; /* in round order */
  size_t nd2h, nh2d;
  devpipe_piece_t *pieces; /* sorted by offset within each group */
  size_t npieces;
} devpipe_t;

/* Where one staged call's buffers lie in the pinned staging buffer. In
 * place (NCCL's layouts, sharc.h) the staging mirrors the user's region, so
 * the host collective sees the same layout: all-gather's recvbuf with
 * sendbuf inside, reduce-scatter's sendbuf with recvbuf inside, all-reduce's
 * and broadcast's single buffer. Out of place it holds [send region]
 * [receive region], each only for a buffer in device memory. */
typedef struct {
  size_t stage_bytes;           /* 0: nothing is staged */
  int send_staged, recv_staged; /* the buffer lives in staging */
  size_t send_off, recv_off;    /* staging offset of its element 0 */
  int no_send;                  /* broadcast off the root reads no sendbuf */
  size_t d2h_off, d2h_bytes;    /* staging bytes filled from the device */
  size_t h2d_off, h2d_bytes;    /* staging bytes copied back */
} devpipe_layout_t;

/* Staging alignment of the receive region after a send region. */
#define DEVPIPE_ALIGN 256

/* The layout of coll (not the barrier) on rank of nranks with `bytes` per
 * rank block (count x element size: all-gather's send count,
 * reduce-scatter's receive count, the whole count otherwise); inplace as
 * sharc.h defines it; send_dev / recv_dev: the buffer is device memory (in
 * place: the one region is). */
void devpipe_layout(sched_coll_t coll, int rank, int nranks, int root,
                    size_t bytes, int inplace, int send_dev, int recv_dev,
                    devpipe_layout_t *l);

typedef struct {
  devpipe_layout_t lay;
  size_t esize;      /* bytes per element */
  size_t min_group;  /* bytes a group holds at least (but the last); larger
                        when max_groups needs it */
  size_t max_groups; /* per direction (>= 1) */
  int h2d_at_end;    /* nothing is final before the call ends (SHARC_AVG
                        divides after the rounds) */
} devpipe_args_t;

/* Plans a's copies for s into *out (devpipe_free it). Every staging byte of
 * the D2H region is in exactly one D2H group, and one that lands before
 * the first round that reads or writes it; every byte of the H2D region is
 * in exactly one H2D group, released no earlier than the last round that
 * writes it (bytes no round writes: after round 0). SHARC_ERR_NO_MEM on
 * allocation failure. */
sharc_status_t devpipe_plan(const sched_t *s, const devpipe_args_t *a,
                            devpipe_t *out);
void devpipe_free(devpipe_t *p);

#endif /* SHARC_COMM_DEVPIPE_H */

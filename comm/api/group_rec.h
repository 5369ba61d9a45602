/*
 * group_rec.h - the open group of this thread (sharc_group_start): while
 * one is open, calls are checked and then recorded here instead of issued;
 * the outermost sharc_group_end (group.c) takes the record and issues it.
 */
#ifndef SHARC_GROUP_REC_H
#define SHARC_GROUP_REC_H

#include "call.h"

/* One recorded call: a collective, or one send or receive. */
typedef struct {
  int p2p; /* 1: op; 0: call */
  coll_call_t call;
  call_p2p_op_t op;
  struct sharc_comm *comm;
  sharc_stream_t stream;
} group_item_t;

/* 1 while this thread is between sharc_group_start and its end. */
int group_active(void);
/* sharc_group_start: opens a group (or nests one deeper). */
void group_rec_open(void);
/* Records an item of the open group (copied). */
sharc_status_t group_push(const group_item_t *it);
/* Records a checked collective call of the open group. */
sharc_status_t group_add(const coll_call_t *call, sharc_stream_t stream);
/* Remembers st, the first error of a call inside the open group, with the
 * thread's last error message; returns st. */
sharc_status_t group_fail(sharc_status_t st);

/* sharc_group_end's bookkeeping. SHARC_ERR_INVALID_ARG when no group is
 * open; else closes one level and sets *outer to 1 when that was the
 * outermost, then hands over the record (*items, *n: the caller gives
 * *items back with group_rec_recycle) or, when a call of the group failed,
 * returns that error with its message (nothing handed over). */
sharc_status_t group_rec_close(int *outer, group_item_t **items, size_t *n);

/* The caller of group_rec_close is done with *items: this thread's next
 * group records into it (a send/recv loop allocates nothing per group), or
 * it is freed when that group has started a record of its own. */
void group_rec_recycle(group_item_t *items);

/* sharc_group_cancel: every open level closed, the record dropped;
 * SHARC_ERR_INVALID_ARG when no group is open. */
sharc_status_t group_rec_cancel(void);

#endif /* SHARC_GROUP_REC_H */

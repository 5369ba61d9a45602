/*
 * group_rec.c - the open group of this thread (group_rec.h).
 */
#include "group_rec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  int depth;
  group_item_t *items;
  size_t n, cap;
  size_t lent_cap;    /* the capacity of the record last handed over */
  sharc_status_t err; /* the first failed call of the group */
  char msg[512];
} group_t;

static _Thread_local group_t group_tl;
/* Threads with a group open: while none has, group_active answers without
 * the thread-local lookup (a call into the loader from a shared library),
 * once per collective call. */
static _Atomic int groups_open;

/* The thread's record, freed when the thread exits (a pthread key's
 * destructor: _Thread_local storage has none). */
static pthread_key_t items_key;
static pthread_once_t items_once = PTHREAD_ONCE_INIT;
static void items_key_make(void) { pthread_key_create(&items_key, free); }
static void items_own(group_item_t *items) {
  pthread_once(&items_once, items_key_make);
  pthread_setspecific(items_key, items);
}

int group_active(void) {
  return atomic_load_explicit(&groups_open, memory_order_relaxed) > 0 &&
         group_tl.depth > 0;
}

void group_rec_open(void) {
  group_t *g = &group_tl;
  if (g->depth++ == 0) {
    atomic_fetch_add_explicit(&groups_open, 1, memory_order_relaxed);
    g->n = 0;
    g->err = SHARC_OK;
    g->msg[0] = '\0';
  }
}

sharc_status_t group_fail(sharc_status_t st) {
  group_t *g = &group_tl;
  if (g->depth > 0 && g->err == SHARC_OK && st != SHARC_OK) {
    g->err = st;
    snprintf(g->msg, sizeof g->msg, "%s", err_last());
  }
  return st;
}

sharc_status_t group_push(const group_item_t *it) {
  group_t *g = &group_tl;
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 16;
    group_item_t *p = realloc(g->items, cap * sizeof *p);
    if (!p)
      return group_fail(err_set(
          SHARC_ERR_NO_MEM, "sharc_group: out of memory for %zu calls", cap));
    g->items = p;
    g->cap = cap;
    items_own(p);
  }
  g->items[g->n++] = *it;
  return SHARC_OK;
}

sharc_status_t group_add(const coll_call_t *call, sharc_stream_t stream) {
  group_item_t it = {
      .p2p = 0, .call = *call, .comm = call->comm, .stream = stream};
  return group_push(&it);
}

sharc_status_t group_rec_close(int *outer, group_item_t **items, size_t *n) {
  group_t *g = &group_tl;
  *outer = 0;
  *items = NULL;
  *n = 0;
  if (g->depth == 0)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_group_end: no group is open on this thread; call "
                   "sharc_group_start first");
  if (--g->depth > 0)
    return SHARC_OK;
  atomic_fetch_sub_explicit(&groups_open, 1, memory_order_relaxed);
  *outer = 1;
  size_t count = g->n;
  g->n = 0;
  if (g->err != SHARC_OK)
    return err_record(g->err,
                      "sharc_group_end: a call in the group failed, so "
                      "nothing of the group was issued: %s",
                      g->msg);
  /* The record is the caller's now: a group opened while it issues (by
   * this thread, after we return) starts a new one. */
  *items = g->items;
  *n = count;
  g->lent_cap = g->cap;
  g->items = NULL;
  g->cap = 0;
  /* the key keeps pointing at the lent record: it comes back to this
   * thread (group_rec_recycle) unless a new record replaced it meanwhile,
   * which group_push gave to the key */
  return SHARC_OK;
}

void group_rec_recycle(group_item_t *items) {
  group_t *g = &group_tl;
  if (items && !g->items) { /* no group recorded meanwhile: reuse it */
    g->items = items;       /* still the key's */
    g->cap = g->lent_cap;
  } else {
    free(items);
  }
}

sharc_status_t group_rec_cancel(void) {
  group_t *g = &group_tl;
  if (g->depth == 0)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_group_cancel: no group is open on this thread");
  atomic_fetch_sub_explicit(&groups_open, 1, memory_order_relaxed);
  g->depth = 0;
  g->n = 0;
  g->err = SHARC_OK;
  return SHARC_OK;
}

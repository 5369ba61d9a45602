/*
 * ib_track.c - the ib transport's bookkeeping that needs no device: the
 * order of RDMA writes completing on several QPs, and the registration
 * cache of user buffers. Pure (the cache reaches verbs through callbacks),
 * so tests/unit/test_ib_dev.c runs it everywhere.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ib_track.h"

/* ---- order of completions -------------------------------------------------
 * Write k goes to QP k % nqp, and QP q completes its writes in order, so
 * write k is complete exactly when count[k % nqp] > k / nqp. The prefix
 * advances over complete writes; `end` keeps the end offset of each write
 * still ahead of it (at most `window` of them: the sender never has more
 * in flight, which the receiver checks). */

sharc_status_t ib_order_init(ib_order_t *o, int nqp) {
  memset(o, 0, sizeof *o);
  o->nqp = nqp;
  o->window = IB_QP_WRITES * nqp;
  o->end = calloc((size_t)o->window, sizeof *o->end);
  o->count = calloc((size_t)nqp, sizeof *o->count);
  if (!o->end || !o->count) {
    ib_order_free(o);
    return SHARC_ERR_NO_MEM;
  }
  return SHARC_OK;
}

void ib_order_free(ib_order_t *o) {
  free(o->end);
  free(o->count);
  o->end = NULL;
  o->count = NULL;
}

static uint64_t advance(ib_order_t *o) {
  for (;;) {
    uint64_t k = o->next;
    if (o->count[k % (uint64_t)o->nqp] <= k / (uint64_t)o->nqp)
      return o->prefix;
    o->prefix = o->end[k % (uint64_t)o->window];
    o->next = k + 1;
  }
}

void ib_order_post(ib_order_t *o, uint64_t k, uint64_t end) {
  o->end[k % (uint64_t)o->window] = end;
}

uint64_t ib_order_done(ib_order_t *o, int q) {
  o->count[q]++;
  return advance(o);
}

uint64_t ib_order_arrive(ib_order_t *o, int q, uint64_t end) {
  if (q < 0 || q >= o->nqp)
    return UINT64_MAX;
  uint64_t k = o->count[q] * (uint64_t)o->nqp + (uint64_t)q;
  if (k - o->next >= (uint64_t)o->window)
    return UINT64_MAX;
  /* Ends only grow with k; a smaller one is a corrupt immediate. */
  if (end < o->prefix)
    return UINT64_MAX;
  o->end[k % (uint64_t)o->window] = end;
  o->count[q]++;
  return advance(o);
}

uint64_t ib_order_end(const ib_order_t *o, uint64_t k) {
  return o->end[k % (uint64_t)o->window];
}

/* ---- registration cache ---------------------------------------------------
 */

sharc_status_t ib_regcache_init(ib_regcache_t *c, int cap,
                                const ib_reg_ops_t *ops) {
  memset(c, 0, sizeof *c);
  c->ops = *ops;
  c->cap = cap > 0 ? cap : 1;
  c->e = calloc((size_t)c->cap, sizeof *c->e);
  return c->e ? SHARC_OK : SHARC_ERR_NO_MEM;
}

/* Slots never move (a send holds a pointer to its entry); a free slot has
 * no handle. */
static void drop(ib_regcache_t *c, ib_reg_entry_t *e) {
  c->ops.dereg(c->ops.arg, e->handle);
  memset(e, 0, sizeof *e);
  c->n--;
  c->evictions++;
}

void ib_regcache_sweep(ib_regcache_t *c) {
  /* Regions the user has freed since: their pages are pinned for nothing. */
  for (int i = 0; i < c->cap; i++) {
    ib_reg_entry_t *e = &c->e[i];
    if (e->handle && !e->inuse &&
        !c->ops.alive(c->ops.arg, e->id, e->base, e->len))
      drop(c, e);
  }
}

ib_reg_entry_t *ib_regcache_get(ib_regcache_t *c, uint64_t id, void *base,
                                size_t len, int *err) {
  c->clock++;
  for (int i = 0; i < c->cap; i++) {
    ib_reg_entry_t *e = &c->e[i];
    if (e->handle && e->id == id && e->base == (uintptr_t)base &&
        e->len == len) {
      e->inuse++;
      e->last_use = c->clock;
      c->hits++;
      return e;
    }
  }
  c->misses++;
  ib_regcache_sweep(c);
  ib_reg_entry_t *slot = NULL, *victim = NULL;
  for (int i = 0; i < c->cap && !slot; i++) {
    ib_reg_entry_t *e = &c->e[i];
    if (!e->handle)
      slot = e;
    else if (!e->inuse && (!victim || e->last_use < victim->last_use))
      victim = e; /* least recently used among the idle */
  }
  if (!slot && !victim) {
    *err = ENOSPC;
    return NULL;
  }
  if (!slot) {
    drop(c, victim);
    slot = victim;
  }
  void *handle = NULL;
  uint32_t lkey = 0;
  int rc = c->ops.reg(c->ops.arg, base, len, &handle, &lkey);
  if (rc || !handle) {
    *err = rc ? rc : EINVAL;
    return NULL;
  }
  *slot = (ib_reg_entry_t){id, (uintptr_t)base, len, handle, lkey, 1, c->clock};
  c->n++;
  return slot;
}

void ib_regcache_put(ib_regcache_t *c, ib_reg_entry_t *e) {
  (void)c;
  if (e && e->inuse > 0)
    e->inuse--;
}

void ib_regcache_free(ib_regcache_t *c) {
  for (int i = 0; c->e && i < c->cap; i++)
    if (c->e[i].handle)
      drop(c, &c->e[i]);
  free(c->e);
  c->e = NULL;
}

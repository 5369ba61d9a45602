/*
 * cache.c - the per-communicator cache of built schedules (cache.h).
 */
#include "cache.h"

#include <string.h>

void sched_cache_free(sched_cache_t *c) {
  for (int i = 0; i < SCHED_CACHE_SLOTS; i++)
    sched_free(&c->slot[i].sched);
  memset(c, 0, sizeof *c);
}

static int key_eq(const sched_key_t *a, const sched_key_t *b) {
  if (a->coll != b->coll || a->count != b->count || a->esize != b->esize ||
      a->inplace != b->inplace || a->root != b->root || a->np2p != b->np2p)
    return 0;
  for (int i = 0; i < a->np2p; i++)
    if (a->p2p[i].send != b->p2p[i].send || a->p2p[i].peer != b->p2p[i].peer ||
        a->p2p[i].bytes != b->p2p[i].bytes)
      return 0;
  return 1;
}

/* Slot i answers a lookup: counted, made the last hit and the most
 * recently used. */
static sched_cache_slot_t *hit(sched_cache_t *c, int i) {
  c->hits++;
  c->last = i;
  c->slot[i].used = ++c->clock;
  return &c->slot[i];
}

const sched_cache_slot_t *sched_cache_get(sched_cache_t *c,
                                          const sched_key_t *key) {
  /* A loop of one call hits the slot it hit last: try it first. */
  if (c->slot[c->last].used && key_eq(&c->slot[c->last].key, key))
    return hit(c, c->last);
  for (int i = 0; i < SCHED_CACHE_SLOTS; i++)
    if (c->slot[i].used && key_eq(&c->slot[i].key, key))
      return hit(c, i);
  c->misses++;
  return NULL;
}

const sched_cache_slot_t *sched_cache_get_sig(sched_cache_t *c,
                                              const sched_call_sig_t *sig) {
  const sched_call_sig_t *m = &c->memo;
  if (c->memo_puts != c->puts + 1 || m->coll != sig->coll ||
      m->count != sig->count || m->dtype != sig->dtype ||
      m->root != sig->root || m->sendbuf != sig->sendbuf ||
      m->recvbuf != sig->recvbuf)
    return NULL;
  return hit(c, c->memo_slot);
}

void sched_cache_memo(sched_cache_t *c, const sched_call_sig_t *sig,
                      const sched_cache_slot_t *e) {
  c->memo = *sig;
  c->memo_slot = (int)(e - c->slot);
  c->memo_puts = c->puts + 1; /* 0, as zeroed: no memo */
}

const sched_cache_slot_t *sched_cache_put(sched_cache_t *c,
                                          const sched_key_t *key,
                                          sched_algo_t algo, sched_t *s) {
  int v = 0; /* an empty slot, else the least recently used */
  for (int i = 1; i < SCHED_CACHE_SLOTS && c->slot[v].used; i++)
    if (c->slot[i].used < c->slot[v].used)
      v = i;
  sched_cache_slot_t *e = &c->slot[v];
  sched_free(&e->sched);
  e->key = *key;
  e->algo = algo;
  e->sched = *s;
  e->used = ++c->clock;
  c->last = v;
  c->puts++;
  sched_init(s);
  return e;
}

/*
 * reduce_scatter_ring.c - ring reduce-scatter: n-1 steps. In step s rank r
 * sends its partial of block (r - s - 1) mod n to r+1 and receives the
 * partial of block (r - s - 2) mod n from r-1, adding its own contribution
 * (from SEND). After the last step rank r holds block r, reduced over all
 * ranks, in RECV.
 *
 * SEND is (nranks*count), RECV (count). Partials alternate between two
 * slots so that a step never writes what it sends, and the last step lands
 * in RECV. Out of place the slots are RECV and TMP[0, count); in place
 * (RECV == SEND + rank*count) RECV still holds our own contribution to
 * block r, needed at the last step, so both slots are in TMP
 * (tmp_count = 2*count).
 */
#include "algo.h"

typedef struct {
  sched_buf_t buf;
  size_t off;
} slot_t;

static slot_t partial_slot(const sched_args_t *a, int st) {
  int last = a->nranks - 2;
  slot_t x = {SCHED_BUF_RECV, 0};
  if (st == last)
    return x;
  if (a->inplace) {
    x.buf = SCHED_BUF_TMP;
    x.off = (size_t)(st % 2) * a->count;
  } else if ((last - st) % 2 == 1) {
    x.buf = SCHED_BUF_TMP;
  }
  return x;
}

sharc_status_t ring_reduce_scatter_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, nc = a->nchan;
  size_t c = a->count;
  s->nchan = nc;
  if (c == 0)
    return SHARC_OK;
  if (n == 1) {
    if (!a->inplace)
      sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, c);
    return SHARC_OK;
  }
  s->tmp_count = n == 2 ? 0 : (a->inplace ? 2 * c : c);
  int right = (r + 1) % n, left = (r - 1 + n) % n;
  for (int st = 0; st < n - 1; st++) {
    size_t bs = (size_t)((r - st - 1 + 2 * n) % n);
    size_t br = (size_t)((r - st - 2 + 2 * n) % n);
    sched_round(s);
    if (st == 0) {
      send_split(s, right, nc, SCHED_BUF_SEND, bs * c, c);
    } else {
      slot_t prev = partial_slot(a, st - 1);
      send_split(s, right, nc, prev.buf, prev.off, c);
    }
    slot_t cur = partial_slot(a, st);
    recv_reduce_split(s, left, nc, SCHED_BUF_SEND, br * c, cur.buf, cur.off, c);
  }
  return SHARC_OK;
}

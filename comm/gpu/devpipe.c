/*
 * devpipe.c - the pipelined staged path's plan (devpipe.h).
 *
 * D2H: walking the rounds forward, every staging byte of the D2H region
 * goes to the first round that reads or writes it (a write too: the copy
 * from the device must not land on top of what the round wrote). H2D:
 * walking the rounds backward, every byte of the H2D region goes to the
 * last round that writes it. Both walks cut the region, kept as sorted
 * disjoint intervals, by each op's staging ranges. The tagged pieces are
 * then grouped in round order into groups of at least min_group bytes.
 */
#include "devpipe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

void devpipe_layout(sched_coll_t coll, int rank, int nranks, int root,
                    size_t bytes, int inplace, int send_dev, int recv_dev,
                    devpipe_layout_t *l) {
  memset(l, 0, sizeof *l);
  size_t n = (size_t)nranks;
  size_t sb = bytes, rb = bytes; /* the send and receive regions */
  int is_root = rank == root;
  /* blocks: the buffer of n blocks (the others' are one) */
  int a2a = coll == SCHED_ALL_TO_ALL; /* both */
  int rblocks = a2a || coll == SCHED_ALL_GATHER || coll == SCHED_GATHER;
  int sblocks = a2a || coll == SCHED_REDUCE_SCATTER || coll == SCHED_SCATTER;
  if (rblocks)
    rb = n * bytes;
  if (sblocks)
    sb = n * bytes;
  /* buffers of a rooted collective that only the root has */
  if (!is_root && (coll == SCHED_BROADCAST || coll == SCHED_SCATTER))
    sb = 0;
  if (!is_root && (coll == SCHED_REDUCE || coll == SCHED_GATHER))
    rb = 0;
  if (inplace) {
    if (!send_dev)
      return; /* host memory: the collective runs on it */
    size_t own = (size_t)rank * bytes; /* the inner buffer's offset */
    l->stage_bytes = rblocks ? rb : sblocks ? sb : bytes;
    l->send_staged = l->recv_staged = 1;
    l->send_off = rblocks && !a2a ? own : 0;
    l->recv_off = sblocks && !a2a ? own : 0;
    l->d2h_off = l->send_off;
    l->d2h_bytes = sb;
    l->h2d_off = l->recv_off;
    l->h2d_bytes = rb;
    return;
  }
  l->no_send = sb == 0;
  if (sb && send_dev) {
    l->send_staged = 1;
    l->d2h_bytes = sb;
    l->stage_bytes = (sb + DEVPIPE_ALIGN - 1) / DEVPIPE_ALIGN * DEVPIPE_ALIGN;
  }
  if (recv_dev) {
    l->recv_staged = 1;
    l->recv_off = l->h2d_off = l->stage_bytes;
    l->h2d_bytes = rb;
    l->stage_bytes += rb;
  }
}

typedef struct {
  size_t round, off, len;
} tagged_t;

typedef struct {
  size_t lo, hi;
} span_t;

typedef struct {
  span_t *left; /* what no round has claimed yet, sorted, disjoint */
  size_t nleft;
  tagged_t *out; /* claimed pieces, in walk order */
  size_t nout, out_cap;
  int oom;
} walk_t;

static void emit(walk_t *w, size_t round, size_t lo, size_t hi) {
  if (w->nout > 0) { /* extend the previous piece when contiguous */
    tagged_t *t = &w->out[w->nout - 1];
    if (t->round == round && t->off + t->len == lo) {
      t->len += hi - lo;
      return;
    }
  }
  if (w->nout == w->out_cap) {
    size_t cap = w->out_cap ? 2 * w->out_cap : 64;
    tagged_t *p = realloc(w->out, cap * sizeof *p);
    if (!p) {
      w->oom = 1;
      return;
    }
    w->out = p;
    w->out_cap = cap;
  }
  w->out[w->nout++] = (tagged_t){round, lo, hi - lo};
}

/* Claims [lo, hi) of what is left for round. */
static void cut(walk_t *w, size_t round, size_t lo, size_t hi) {
  if (lo >= hi || w->nleft == 0)
    return;
  size_t a = 0, b = w->nleft; /* first span ending after lo */
  while (a < b) {
    size_t m = a + (b - a) / 2;
    if (w->left[m].hi <= lo)
      a = m + 1;
    else
      b = m;
  }
  size_t first = a, end = a;
  while (end < w->nleft && w->left[end].lo < hi)
    end++;
  if (first == end)
    return;
  span_t keep[2];
  size_t nkeep = 0;
  if (w->left[first].lo < lo)
    keep[nkeep++] = (span_t){w->left[first].lo, lo};
  for (size_t i = first; i < end; i++)
    emit(w, round, SHARC_MAX(w->left[i].lo, lo), SHARC_MIN(w->left[i].hi, hi));
  if (w->left[end - 1].hi > hi)
    keep[nkeep++] = (span_t){hi, w->left[end - 1].hi};
  /* nkeep <= 2 <= end - first + 1: the array grows by at most one, and the
   * caller sized it for the worst case */
  memmove(&w->left[first + nkeep], &w->left[end],
          (w->nleft - end) * sizeof *w->left);
  memcpy(&w->left[first], keep, nkeep * sizeof *keep);
  w->nleft = w->nleft - (end - first) + nkeep;
}

/* The staging bytes of buffer buf at element off, count elements, clipped
 * to nothing when buf is not in staging. */
static int staged_range(const devpipe_args_t *a, int buf, size_t off,
                        size_t count, size_t *lo, size_t *hi) {
  size_t base;
  if (buf == SCHED_BUF_SEND && a->lay.send_staged)
    base = a->lay.send_off;
  else if (buf == SCHED_BUF_RECV && a->lay.recv_staged)
    base = a->lay.recv_off;
  else
    return 0;
  *lo = base + off * a->esize;
  *hi = *lo + count * a->esize;
  return 1;
}

/* Cuts by what op touches: reads and writes (writes_only 0) or writes. */
static void cut_op(walk_t *w, const devpipe_args_t *a, const sched_op_t *op,
                   size_t round, int writes_only) {
  size_t lo, hi;
  int reads = op->kind == SCHED_SEND || op->kind == SCHED_RECV_REDUCE ||
              op->kind == SCHED_COPY;
  int writes = op->kind != SCHED_SEND;
  if (reads && !writes_only &&
      staged_range(a, op->src_buf, op->src_off, op->count, &lo, &hi))
    cut(w, round, lo, hi);
  if (writes && staged_range(a, op->dst_buf, op->dst_off, op->count, &lo, &hi))
    cut(w, round, lo, hi);
}

static int walk_init(walk_t *w, const sched_t *s, size_t off, size_t bytes) {
  memset(w, 0, sizeof *w);
  /* each cut adds at most one span: one per op access, two per op */
  w->left = malloc((2 * s->nops + 2) * sizeof *w->left);
  if (!w->left)
    return 0;
  if (bytes)
    w->left[w->nleft++] = (span_t){off, off + bytes};
  return 1;
}

static int by_off(const void *x, const void *y) {
  const devpipe_piece_t *a = x, *b = y;
  return a->off < b->off ? -1 : a->off > b->off;
}

/* Groups the tagged pieces t[0..n) (rounds ascending) into g, pieces into
 * p (each group's sorted and merged); min_round: a D2H group takes its
 * first piece's round, an H2D group its last's. Returns the group count. */
static size_t group(const tagged_t *t, size_t n, size_t min_group,
                    int min_round, devpipe_group_t *g, devpipe_piece_t *p,
                    size_t p_base) {
  size_t ng = 0, np = 0;
  for (size_t i = 0; i < n;) {
    devpipe_group_t *cur = &g[ng++];
    cur->first = p_base + np;
    cur->bytes = 0;
    cur->round = t[i].round;
    size_t start = np;
    while (i < n && cur->bytes < min_group) {
      p[np++] = (devpipe_piece_t){t[i].off, t[i].len};
      cur->bytes += t[i].len;
      if (!min_round)
        cur->round = t[i].round;
      i++;
    }
    /* pieces of one round stay together: a group ends between rounds */
    while (i < n && t[i].round == t[i - 1].round) {
      p[np++] = (devpipe_piece_t){t[i].off, t[i].len};
      cur->bytes += t[i].len;
      i++;
    }
    /* A group holds at least one piece (min_group >= 1, fit_min_group):
     * merge the adjacent ones of [start, np) in place. */
    devpipe_piece_t *gp = &p[start];
    size_t len = np - start, m = 0;
    qsort(gp, len, sizeof *gp, by_off);
    for (size_t k = 1; k < len; k++) {
      if (gp[m].off + gp[m].len == gp[k].off)
        gp[m].len += gp[k].len;
      else
        gp[++m] = gp[k];
    }
    cur->npieces = len ? m + 1 : 0;
    np = start + cur->npieces;
  }
  return ng;
}

static size_t count_groups(const tagged_t *t, size_t n, size_t min_group) {
  size_t ng = 0;
  for (size_t i = 0; i < n;) {
    size_t bytes = 0;
    ng++;
    while (i < n && bytes < min_group)
      bytes += t[i++].len;
    while (i < n && t[i].round == t[i - 1].round)
      i++;
  }
  return ng;
}

/* Doubles min_group until t groups into at most max_groups. */
static size_t fit_min_group(const tagged_t *t, size_t n, size_t min_group,
                            size_t max_groups) {
  if (min_group == 0)
    min_group = 1;
  while (count_groups(t, n, min_group) > max_groups && min_group < SIZE_MAX / 2)
    min_group *= 2;
  return min_group;
}

sharc_status_t devpipe_plan(const sched_t *s, const devpipe_args_t *a,
                            devpipe_t *out) {
  memset(out, 0, sizeof *out);
  walk_t d, h;
  int ok = walk_init(&d, s, a->lay.d2h_off, a->lay.d2h_bytes);
  ok = walk_init(&h, s, a->lay.h2d_off, a->lay.h2d_bytes) && ok;
  size_t last = s->nrounds ? s->nrounds - 1 : 0;
  if (ok) {
    for (size_t r = 0; r < s->nrounds && d.nleft; r++)
      for (size_t i = s->round_start[r]; i < s->round_start[r + 1]; i++)
        cut_op(&d, a, &s->ops[i], r, 0);
    /* bytes no round touches: only the H2D copy reads them (stream order) */
    for (size_t i = 0; i < d.nleft; i++)
      emit(&d, s->nrounds, d.left[i].lo, d.left[i].hi);
    if (a->h2d_at_end) {
      for (size_t i = 0; i < h.nleft; i++)
        emit(&h, last, h.left[i].lo, h.left[i].hi);
    } else {
      for (size_t r = s->nrounds; r-- > 0 && h.nleft;)
        for (size_t i = s->round_start[r]; i < s->round_start[r + 1]; i++)
          cut_op(&h, a, &s->ops[i], r, 1);
      for (size_t i = 0; i < h.nleft; i++) /* never written: final now */
        emit(&h, 0, h.left[i].lo, h.left[i].hi);
      /* the backward walk emitted rounds descending, the leftovers last */
      for (size_t i = 0, j = h.nout; i < j / 2; i++) {
        tagged_t x = h.out[i];
        h.out[i] = h.out[j - 1 - i];
        h.out[j - 1 - i] = x;
      }
    }
  }
  size_t maxg = a->max_groups ? a->max_groups : 1;
  ok = ok && !d.oom && !h.oom;
  if (ok) {
    size_t dmin = fit_min_group(d.out, d.nout, a->min_group, maxg);
    size_t hmin = fit_min_group(h.out, h.nout, a->min_group, maxg);
    out->d2h = calloc(maxg, sizeof *out->d2h);
    out->h2d = calloc(maxg, sizeof *out->h2d);
    out->pieces = malloc((d.nout + h.nout + 1) * sizeof *out->pieces);
    ok = out->d2h && out->h2d && out->pieces;
    if (ok) {
      out->nd2h = group(d.out, d.nout, dmin, 1, out->d2h, out->pieces, 0);
      size_t np = out->nd2h ? out->d2h[out->nd2h - 1].first +
                                  out->d2h[out->nd2h - 1].npieces
                            : 0;
      out->nh2d = group(h.out, h.nout, hmin, 0, out->h2d, out->pieces + np, np);
      out->npieces = np + (out->nh2d ? out->h2d[out->nh2d - 1].first +
                                           out->h2d[out->nh2d - 1].npieces - np
                                     : 0);
    }
  }
  free(d.left);
  free(d.out);
  free(h.left);
  free(h.out);
  if (!ok) {
    devpipe_free(out);
    return err_set(SHARC_ERR_NO_MEM, "planning the staged copies: out of "
                                     "memory");
  }
  return SHARC_OK;
}

void devpipe_free(devpipe_t *p) {
  free(p->d2h);
  free(p->h2d);
  free(p->pieces);
  memset(p, 0, sizeof *p);
}

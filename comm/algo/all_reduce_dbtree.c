/*
 * all_reduce_dbtree.c - double binary tree all-reduce (as NCCL's tree
 * algorithm): the vector is cut in two halves; half h is reduced up binary
 * tree h to its root and broadcast back down, pipelined in chunks of
 * args->chunk elements. Tree 0 is an in-order binary tree over positions
 * 0..n-1 in which odd positions are the internal nodes and even positions
 * the leaves (depth floor(log2 n)); position x is rank x. Tree 1 has the same
 * shape over ranks shifted by one (position x is rank (x + n - 1) % n), so
 * every rank is internal in at most one tree and a leaf in the other, and
 * each rank's links carry about the same load. Tree h runs on channel
 * h % nchan, so the two trees have separate FIFOs.
 *
 * Timing. Every transfer gets a global step; a rank's round t holds exactly
 * its transfers of step t, so both ends of every transfer sit in the same
 * round and the schedule cannot deadlock. Node x sends chunk j up at step
 * j + O(x), where O(leaf) = 0 and O(x) = 1 + max over its children (a second
 * child with the same offset is delayed by one), so the two reductions into
 * chunk j happen in different rounds and before the send. The root holds
 * the final chunk j after step j + O(root) - 1; node x receives it at
 * j + F(x), F(child of root) = O(root), F(child) = F(parent) + 1. All
 * offsets of one node differ, so one round never touches one chunk twice.
 *
 * Partials accumulate in RECV (first reduction RECV = in + SEND, then
 * RECV = in + RECV); leaves send SEND. Each chunk is reduced once, at the
 * root, then copied: every rank ends with the same bits. In place
 * (SEND == RECV) holds as is. No TMP.
 */
#include <stdlib.h>

#include "algo.h"
#include "core.h"

typedef struct {
  int n;
  int *par, *kid0, *kid1; /* positions, -1 if none */
  int *up, *down;         /* O(x), F(x) */
  int root;
} tree_t;

/* The position in [lo, hi) with the most trailing one bits (unique). */
static int pick_root(int lo, int hi) {
  for (int h = 30; h > 0; h--) {
    long m = (((long)lo + 1 + (1L << h) - 1) >> h) << h; /* x + 1 = m */
    if (m - 1 < hi)
      return (int)(m - 1);
  }
  return lo;
}

/* Builds subtree over positions [lo, hi); returns its root (or -1). The
 * root of a range is the position with the most trailing ones, so even
 * positions are always leaves and the depth is floor(log2 n). */
static int build(tree_t *t, int lo, int hi, int parent) {
  if (lo >= hi)
    return -1;
  int mid = pick_root(lo, hi);
  t->par[mid] = parent;
  int a = build(t, lo, mid, mid), b = build(t, mid + 1, hi, mid);
  t->kid0[mid] = a;
  t->kid1[mid] = b;
  if (a >= 0 && b >= 0 && t->up[a] == t->up[b])
    t->up[b]++;
  int o = -1;
  if (a >= 0 && t->up[a] > o)
    o = t->up[a];
  if (b >= 0 && t->up[b] > o)
    o = t->up[b];
  t->up[mid] = o + 1;
  return mid;
}

static void set_down(tree_t *t, int x, int f) {
  if (x < 0)
    return;
  t->down[x] = f;
  set_down(t, t->kid0[x], f + 1);
  set_down(t, t->kid1[x], f + 1);
}

static int tree_init(tree_t *t, int n) {
  t->n = n;
  int *mem = calloc((size_t)n * 5, sizeof *mem);
  if (!mem)
    return 0;
  t->par = mem;
  t->kid0 = mem + n;
  t->kid1 = mem + 2 * n;
  t->up = mem + 3 * n;
  t->down = mem + 4 * n;
  t->root = build(t, 0, n, -1);
  t->down[t->root] = t->up[t->root] - 1;
  set_down(t, t->kid0[t->root], t->up[t->root]);
  set_down(t, t->kid1[t->root], t->up[t->root]);
  return 1;
}

typedef struct {
  const tree_t *t;
  int shift; /* rank of position x is (x + shift) % n */
  int chan;
  size_t off, len, ck; /* the half [off, off+len) in chunks of ck */
  long nchunks;
} half_t;

static int rank_of(const half_t *h, int x) { return (x + h->shift) % h->t->n; }

/* Chunk j of the half: [*o, *o + return). */
static size_t chunk(const half_t *h, long j, size_t *o) {
  *o = h->off + (size_t)j * h->ck;
  return min_sz(h->ck, h->len - (size_t)j * h->ck);
}

/* Emits rank r's transfers of global step t in half h. */
static void emit_step(sched_t *s, const half_t *h, int r, long t) {
  const tree_t *tr = h->t;
  int n = tr->n, x = (r - h->shift + n) % n;
  int kids[2] = {tr->kid0[x], tr->kid1[x]};
  if (kids[0] < 0) { /* an only child goes first */
    kids[0] = kids[1];
    kids[1] = -1;
  }
  if (kids[0] >= 0 && kids[1] >= 0 && tr->up[kids[1]] < tr->up[kids[0]]) {
    int k = kids[0]; /* earlier child first: its reduction reads SEND */
    kids[0] = kids[1];
    kids[1] = k;
  }
  size_t o, len;
  long j;
  for (int i = 0; i < 2; i++) { /* up: reduce children's partials */
    if (kids[i] < 0)
      continue;
    j = t - tr->up[kids[i]];
    if (j < 0 || j >= h->nchunks)
      continue;
    len = chunk(h, j, &o);
    sched_recv_reduce(s, rank_of(h, kids[i]), h->chan,
                      i == 0 ? SCHED_BUF_SEND : SCHED_BUF_RECV, o,
                      SCHED_BUF_RECV, o, len);
  }
  int p = tr->par[x];
  if (p >= 0) {
    j = t - tr->up[x]; /* up: pass our partial on */
    if (j >= 0 && j < h->nchunks) {
      len = chunk(h, j, &o);
      sched_send(s, rank_of(h, p), h->chan,
                 kids[0] >= 0 ? SCHED_BUF_RECV : SCHED_BUF_SEND, o, len);
    }
    j = t - tr->down[x]; /* down: the final value */
    if (j >= 0 && j < h->nchunks) {
      len = chunk(h, j, &o);
      sched_recv(s, rank_of(h, p), h->chan, SCHED_BUF_RECV, o, len);
    }
  }
  for (int i = 0; i < 2; i++) { /* down: forward to children */
    if (kids[i] < 0)
      continue;
    j = t - tr->down[kids[i]];
    if (j < 0 || j >= h->nchunks)
      continue;
    len = chunk(h, j, &o);
    sched_send(s, rank_of(h, kids[i]), h->chan, SCHED_BUF_RECV, o, len);
  }
}

sharc_status_t dbtree_all_reduce_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank;
  size_t N = a->count, ck = a->chunk ? a->chunk : (N ? N : 1);
  s->nchan = a->nchan >= 2 ? 2 : 1;
  if (N == 0)
    return SHARC_OK;
  if (n == 1) {
    if (!a->inplace)
      sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, 0, N);
    return SHARC_OK;
  }
  tree_t tr;
  if (!tree_init(&tr, n))
    return err_set(SHARC_ERR_NO_MEM, "dbtree: no memory for a %d-rank tree", n);
  size_t h0 = block_off(N, 2, 1);
  half_t hv[2] = {{&tr, 0, 0, 0, h0, ck, 0},
                  {&tr, n - 1, 1 % a->nchan, h0, N - h0, ck, 0}};
  int maxdown = 0;
  for (int x = 0; x < n; x++)
    if (tr.down[x] > maxdown)
      maxdown = tr.down[x];
  long tend = 0;
  for (int i = 0; i < 2; i++) {
    hv[i].nchunks = (long)((hv[i].len + ck - 1) / ck);
    if (hv[i].nchunks + maxdown + 1 > tend)
      tend = hv[i].nchunks + maxdown + 1;
  }
  for (long t = 0; t < tend; t++) {
    sched_round(s);
    emit_step(s, &hv[0], r, t); /* tree 0 before tree 1 on every rank, */
    emit_step(s, &hv[1], r, t); /* so shared FIFOs (nchan 1) match */
  }
  free(tr.par);
  return SHARC_OK;
}

/*
 * schedule.c - schedule builder, the per-collective dispatcher over the
 * algorithm files (comm/algo/), and the alpha-beta cost model that picks an
 * algorithm per call (docs/design.md, decisions 2 and 3). Pure logic: no I/O.
 */
#include "schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "core.h"

/* ---- building ----
 * Invariant while building: round_start has nrounds + 1 valid entries and
 * round_start[nrounds] == nops, so the last round is always well formed.
 * Only the last round can be empty (sched_round reuses an empty one). */

void sched_init(sched_t *s) {
  memset(s, 0, sizeof *s);
  s->nchan = 1;
}

void sched_free(sched_t *s) {
  free(s->ops);
  free(s->round_start);
  sched_init(s);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 1;
  size_t ncap = *cap ? *cap * 2 : 16;
  while (ncap < need)
    ncap *= 2;
  void *q = realloc(*p, ncap * elem);
  if (!q)
    return 0;
  *p = q;
  *cap = ncap;
  return 1;
}

void sched_round(sched_t *s) {
  if (s->oom)
    return;
  if (s->nrounds > 0 && s->round_start[s->nrounds - 1] == s->nops)
    return;
  if (!grow((void **)&s->round_start, &s->rounds_cap, s->nrounds + 2,
            sizeof *s->round_start)) {
    s->oom = 1;
    return;
  }
  s->round_start[s->nrounds] = s->nops;
  s->nrounds++;
  s->round_start[s->nrounds] = s->nops;
}

static void append(sched_t *s, const sched_op_t *op) {
  if (op->count == 0 || s->oom)
    return; /* both sides drop empty transfers */
  if (s->nrounds == 0)
    sched_round(s);
  if (s->oom)
    return;
  if (!grow((void **)&s->ops, &s->ops_cap, s->nops + 1, sizeof *s->ops)) {
    s->oom = 1;
    return;
  }
  s->ops[s->nops++] = *op;
  s->round_start[s->nrounds] = s->nops;
}

void sched_send(sched_t *s, int peer, int chan, sched_buf_t src, size_t off,
                size_t count) {
  sched_op_t op = {.kind = SCHED_SEND,
                   .chan = (uint8_t)chan,
                   .src_buf = (uint8_t)src,
                   .dst_buf = (uint8_t)src,
                   .peer = peer,
                   .src_off = off,
                   .dst_off = 0,
                   .count = count};
  append(s, &op);
}

void sched_recv(sched_t *s, int peer, int chan, sched_buf_t dst, size_t off,
                size_t count) {
  sched_op_t op = {.kind = SCHED_RECV,
                   .chan = (uint8_t)chan,
                   .src_buf = (uint8_t)dst,
                   .dst_buf = (uint8_t)dst,
                   .peer = peer,
                   .src_off = 0,
                   .dst_off = off,
                   .count = count};
  append(s, &op);
}

void sched_recv_reduce(sched_t *s, int peer, int chan, sched_buf_t src,
                       size_t src_off, sched_buf_t dst, size_t dst_off,
                       size_t count) {
  sched_op_t op = {.kind = SCHED_RECV_REDUCE,
                   .chan = (uint8_t)chan,
                   .src_buf = (uint8_t)src,
                   .dst_buf = (uint8_t)dst,
                   .peer = peer,
                   .src_off = src_off,
                   .dst_off = dst_off,
                   .count = count};
  append(s, &op);
}

void sched_copy(sched_t *s, sched_buf_t src, size_t src_off, sched_buf_t dst,
                size_t dst_off, size_t count) {
  sched_op_t op = {.kind = SCHED_COPY,
                   .chan = 0,
                   .src_buf = (uint8_t)src,
                   .dst_buf = (uint8_t)dst,
                   .peer = -1,
                   .src_off = src_off,
                   .dst_off = dst_off,
                   .count = count};
  append(s, &op);
}

sharc_status_t sched_finish(sched_t *s) {
  if (s->oom)
    return err_set(SHARC_ERR_NO_MEM,
                   "schedule: out of memory after %zu ops in %zu rounds",
                   s->nops, s->nrounds);
  if (s->nrounds > 0 && s->round_start[s->nrounds - 1] == s->nops)
    s->nrounds--; /* trailing empty round; round_start[nrounds] stays nops */
  if (s->nchan < 1)
    s->nchan = 1;
  return SHARC_OK;
}

/* ---- dispatch ---- */

typedef sharc_status_t (*gen_fn)(const sched_args_t *, sched_t *);

static const gen_fn generators[SCHED_ALGO_COUNT][SCHED_COLL_COUNT] = {
    [SCHED_ALGO_RING] = {[SCHED_ALL_GATHER] = ring_all_gather_schedule,
                         [SCHED_REDUCE_SCATTER] = ring_reduce_scatter_schedule,
                         [SCHED_ALL_REDUCE] = ring_all_reduce_schedule,
                         [SCHED_BROADCAST] = ring_broadcast_schedule,
                         [SCHED_BARRIER] = ring_barrier_schedule},
    [SCHED_ALGO_TREE] = {[SCHED_ALL_GATHER] = tree_all_gather_schedule,
                         [SCHED_REDUCE_SCATTER] = tree_reduce_scatter_schedule,
                         [SCHED_ALL_REDUCE] = tree_all_reduce_schedule,
                         [SCHED_BROADCAST] = tree_broadcast_schedule,
                         [SCHED_BARRIER] = tree_barrier_schedule},
    [SCHED_ALGO_RABENSEIFNER] = {[SCHED_ALL_REDUCE] =
                                     rabenseifner_all_reduce_schedule},
    [SCHED_ALGO_DBTREE] = {[SCHED_ALL_REDUCE] = dbtree_all_reduce_schedule},
    [SCHED_ALGO_HIER] = {[SCHED_ALL_GATHER] = hier_all_gather_schedule,
                         [SCHED_REDUCE_SCATTER] = hier_reduce_scatter_schedule,
                         [SCHED_ALL_REDUCE] = hier_all_reduce_schedule},
};

static const char *const algo_names[SCHED_ALGO_COUNT] = {
    "ring", "tree", "rabenseifner", "dbtree", "hier"};
static const char *const coll_names[SCHED_COLL_COUNT] = {
    "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier"};

const char *sched_algo_name(sched_algo_t algo) {
  return (unsigned)algo < SCHED_ALGO_COUNT ? algo_names[algo] : "?";
}

const char *sched_coll_name(sched_coll_t coll) {
  return (unsigned)coll < SCHED_COLL_COUNT ? coll_names[coll] : "?";
}

const char *sched_coll_fn(sched_coll_t coll) {
  static const char *const fn[SCHED_COLL_COUNT] = {
      "sharc_all_gather", "sharc_reduce_scatter", "sharc_all_reduce",
      "sharc_broadcast", "sharc_barrier"};
  return (unsigned)coll < SCHED_COLL_COUNT ? fn[coll] : "sharc_?";
}

int sched_algo_supports(sched_algo_t algo, sched_coll_t coll) {
  return (unsigned)algo < SCHED_ALGO_COUNT &&
         (unsigned)coll < SCHED_COLL_COUNT && generators[algo][coll] != NULL;
}

/* ---- ring order ----
 * A topology order runs an algorithm on virtual ranks (ring positions): the
 * schedule of position v = pos[rank] is built as usual and its peers mapped
 * back to ranks. Reductions and broadcasts need nothing else; all-gather
 * and reduce-scatter also map their per-rank blocks (RECV, resp. SEND,
 * block v is rank order[v]'s), which works for algorithms whose transfers
 * never straddle two blocks: the ring. */

static int reorders(sched_algo_t algo, sched_coll_t coll) {
  if (algo == SCHED_ALGO_HIER)
    return 0; /* follows the hosts itself */
  if (coll == SCHED_ALL_GATHER || coll == SCHED_REDUCE_SCATTER)
    return algo == SCHED_ALGO_RING;
  return 1;
}

static int is_identity(const int *order, int n) {
  for (int i = 0; i < n; i++)
    if (order[i] != i)
      return 0;
  return 1;
}

/* Maps off in a buffer of n blocks of `count` from virtual to real block;
 * -1 if [off, off+len) straddles a block boundary. */
static int map_block(size_t *off, size_t len, size_t count, const int *order) {
  size_t b = *off / count, in = *off % count;
  if (in + len > count)
    return -1;
  *off = (size_t)order[b] * count + in;
  return 0;
}

static sharc_status_t build_in_order(sched_algo_t algo, const sched_args_t *a,
                                     sched_t *s) {
  int n = a->nranks;
  int *pos = malloc((size_t)n * sizeof *pos);
  if (!pos)
    return err_set(SHARC_ERR_NO_MEM, "sched_build: out of memory");
  for (int i = 0; i < n; i++)
    pos[i] = -1;
  for (int i = 0; i < n; i++) {
    int r = a->order[i];
    if (r < 0 || r >= n || pos[r] >= 0) {
      free(pos);
      return err_set(SHARC_ERR_INVALID_ARG,
                     "sched_build: ring order is not a permutation of %d "
                     "ranks (entry %d is %d)",
                     n, i, r);
    }
    pos[r] = i;
  }
  sched_args_t v = *a;
  v.rank = pos[a->rank];
  v.root = a->coll == SCHED_BROADCAST ? pos[a->root] : a->root;
  v.order = NULL;
  sharc_status_t st = generators[algo][a->coll](&v, s);
  free(pos);
  CHECK(st);
  sched_buf_t blocks = a->coll == SCHED_ALL_GATHER       ? SCHED_BUF_RECV
                       : a->coll == SCHED_REDUCE_SCATTER ? SCHED_BUF_SEND
                                                         : (sched_buf_t)-1;
  for (size_t i = 0; i < s->nops; i++) {
    sched_op_t *op = &s->ops[i];
    if (op->peer >= 0)
      op->peer = a->order[op->peer];
    if ((int)blocks < 0)
      continue;
    int reads = op->kind != SCHED_RECV, writes = op->kind != SCHED_SEND;
    if ((reads && op->src_buf == blocks &&
         map_block(&op->src_off, op->count, a->count, a->order)) ||
        (writes && op->dst_buf == blocks &&
         map_block(&op->dst_off, op->count, a->count, a->order)))
      return err_set(SHARC_ERR_INTERNAL,
                     "sched_build: %s %s moves a range across two ranks' "
                     "blocks; it cannot run in a topology order",
                     sched_algo_name(algo), sched_coll_name(a->coll));
  }
  return SHARC_OK;
}

sharc_status_t sched_build(sched_algo_t algo, const sched_args_t *args,
                           sched_t *s) {
  if (!args || !s)
    return err_set(SHARC_ERR_INVALID_ARG, "sched_build: NULL %s",
                   args ? "schedule" : "arguments");
  if (!sched_algo_supports(algo, args->coll))
    return err_set(SHARC_ERR_UNSUPPORTED,
                   "sched_build: algorithm %s does not implement %s",
                   sched_algo_name(algo), sched_coll_name(args->coll));
  if (args->nranks < 1 || args->rank < 0 || args->rank >= args->nranks)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sched_build: rank %d of %d ranks is out of range",
                   args->rank, args->nranks);
  if (args->nchan < 1 || args->nchan > 255)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sched_build: nchan %d outside [1, 255]", args->nchan);
  if (args->coll == SCHED_BROADCAST &&
      (args->root < 0 || args->root >= args->nranks))
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sched_build: broadcast root %d of %d ranks is out of range",
                   args->root, args->nranks);
  if (s->nops != 0 || s->nrounds != 0)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sched_build: schedule not empty (%zu ops); sched_init it",
                   s->nops);
  s->nchan = 1;
  s->tmp_count = 0;
  if (args->order && reorders(algo, args->coll) &&
      !is_identity(args->order, args->nranks))
    CHECK(build_in_order(algo, args, s));
  else
    CHECK(generators[algo][args->coll](args, s));
  return sched_finish(s);
}

/* ---- cache ---- */

void sched_cache_free(sched_cache_t *c) {
  for (int i = 0; i < SCHED_CACHE_SLOTS; i++)
    sched_free(&c->slot[i].sched);
  memset(c, 0, sizeof *c);
}

static int key_eq(const sched_key_t *a, const sched_key_t *b) {
  return a->coll == b->coll && a->count == b->count && a->esize == b->esize &&
         a->inplace == b->inplace && a->root == b->root;
}

const sched_cache_slot_t *sched_cache_get(sched_cache_t *c,
                                          const sched_key_t *key) {
  /* A loop of one call hits the slot it hit last: try it first. */
  sched_cache_slot_t *e = &c->slot[c->last];
  if (!e->used || !key_eq(&e->key, key)) {
    e = NULL;
    for (int i = 0; i < SCHED_CACHE_SLOTS && !e; i++)
      if (c->slot[i].used && key_eq(&c->slot[i].key, key)) {
        e = &c->slot[i];
        c->last = i;
      }
  }
  if (!e) {
    c->misses++;
    return NULL;
  }
  c->hits++;
  e->used = ++c->clock;
  return e;
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
  sched_init(s);
  return e;
}

/* ---- cost model ----
 * alpha-beta: a message of m bytes costs alpha + m / beta. Times are per
 * rank and assume full-duplex links (a step that sends and receives m bytes
 * costs one message). beta_gbs GB/s is beta_gbs * 1e3 bytes per us.
 *
 * Recursive doubling/halving and trees exchange with peers at distance 2^k;
 * on real machines those cross sockets and hosts and share links, while
 * ring traffic stays between neighbours and overlaps the reduction with the
 * transfer slice by slice. We charge their bandwidth term FAR_PENALTY, which
 * is what makes ring win for large messages at every rank count even where
 * the textbook terms tie (Rabenseifner on powers of two). */
#define FAR_PENALTY 1.25
/* Pipelining unit assumed for chained/tree broadcast and dbtree (bytes);
 * matches the executor's default SHARC_SLICE_BYTES. */
#define COST_CHUNK_BYTES 262144.0

static double msg(double bytes, double alpha, double bw) {
  return alpha + bytes / bw;
}

/* Pipelined over `depth` hops in chunks: (depth - 1 + k) chunk steps. */
static double pipelined(double bytes, int depth, double alpha, double bw,
                        double per_step_factor) {
  if (depth <= 0)
    return 0;
  double k = ceil(bytes / COST_CHUNK_BYTES);
  if (k < 1)
    k = 1;
  double chunk = bytes / k;
  return (depth - 1 + k) * (alpha + per_step_factor * chunk / bw);
}

/* Hierarchical (hier.c) on nh hosts of L ranks: a within-host ring over
 * carrier sets (about nh pieces each) and, between hosts, each host's link
 * carrying its L ranks' traffic. B as in sched_cost_us. */
static double hier_cost(sched_coll_t coll, int nh, int L, double B, double a,
                        double bw, double na, double nbw) {
  switch (coll) {
  case SCHED_ALL_GATHER:
    return (nh > 1 ? msg((nh - 1.0) * L * B, na, nbw) : 0) +
           (L - 1) * msg(nh * B, a, bw);
  case SCHED_REDUCE_SCATTER:
    return (L - 1) * msg(nh * B, a, bw) + (nh - 1) * msg(L * B, na, nbw);
  case SCHED_ALL_REDUCE:
    return 2.0 *
           ((L - 1) * msg(B / L, a, bw) + (nh - 1) * msg(B / nh, na, nbw));
  default:
    return INFINITY;
  }
}

double sched_cost_us(sched_algo_t algo, sched_coll_t coll, int nranks,
                     size_t bytes, double alpha_us, double beta_gbs) {
  if (!sched_algo_supports(algo, coll))
    return INFINITY;
  if (nranks <= 1)
    return 0;
  if (beta_gbs <= 0)
    beta_gbs = 1e-9;
  int n = nranks, p = pow2_floor(n), lp = log2_ceil(p), ln = log2_ceil(n);
  int fold = n != p;
  double a = alpha_us, bw = beta_gbs * 1e3, B = (double)bytes;
  double farbw = bw / FAR_PENALTY;
  if (coll != SCHED_BARRIER && bytes == 0)
    return 0;
  switch (algo) {
  case SCHED_ALGO_RING:
    switch (coll) {
    case SCHED_ALL_GATHER:
    case SCHED_REDUCE_SCATTER:
      return (n - 1) * msg(B, a, bw);
    case SCHED_ALL_REDUCE:
      return 2.0 * (n - 1) * msg(B / n, a, bw);
    case SCHED_BROADCAST:
      return pipelined(B, n - 1, a, bw, 1.0);
    case SCHED_BARRIER:
      return (2.0 * n - 1) * a;
    default:
      break;
    }
    break;
  case SCHED_ALGO_TREE:
    switch (coll) {
    case SCHED_ALL_GATHER: /* doubling over p sets; fold: in, then all out */
      return lp * a + (p - 1) * B * ((double)n / p) / farbw +
             (fold ? msg(B, a, farbw) + msg((n - 1) * B, a, farbw) : 0);
    case SCHED_REDUCE_SCATTER: /* halving; fold: all in, own block out */
      return lp * a + (n - (double)n / p) * B / farbw +
             (fold ? msg(n * B, a, farbw) + msg(B, a, farbw) : 0);
    case SCHED_ALL_REDUCE: /* doubling, full vector every step */
      return (lp + 2 * fold) * msg(B, a, farbw);
    case SCHED_BROADCAST: /* binomial, whole message per hop */
      return ln * msg(B, a, farbw);
    case SCHED_BARRIER: /* dissemination */
      return ln * a;
    default:
      break;
    }
    break;
  case SCHED_ALGO_RABENSEIFNER:
    return 2.0 * lp * a + 2.0 * (p - 1) / p * B / farbw +
           (fold ? 2 * msg(B, a, farbw) : 0);
  case SCHED_ALGO_HIER: /* one host: a ring over carrier sets */
    return hier_cost(coll, 1, n, B, a, bw, a, bw);
  case SCHED_ALGO_DBTREE: {
    /* Each tree carries B/2 up then down, pipelined over ~2*depth hops.
     * Per step a rank internal in one tree receives 3 chunks there (two
     * children up, one down) and 1 as a leaf of the other: 4 chunks of
     * link time, 2B/beta in all, as ring's 2(n-1)/n B/beta. */
    int depth = log2_ceil(n + 1);
    return pipelined(B / 2, 2 * depth, a, farbw, 4.0);
  }
  default:
    break;
  }
  return INFINITY;
}

sched_algo_t sched_pick(sched_coll_t coll, int nranks, size_t bytes,
                        double alpha_us, double beta_gbs) {
  sched_links_t one = {1, nranks, alpha_us, beta_gbs, alpha_us, beta_gbs};
  return sched_pick_links(coll, nranks, bytes, &one);
}

double sched_cost_links_us(sched_algo_t algo, sched_coll_t coll, int nranks,
                           size_t bytes, const sched_links_t *l) {
  if (l->nhosts <= 1)
    return sched_cost_us(algo, coll, nranks, bytes, l->alpha_us, l->beta_gbs);
  if (algo != SCHED_ALGO_HIER)
    /* A flat algorithm moves at the pace of its inter-host edges. */
    return sched_cost_us(algo, coll, nranks, bytes, l->net_alpha_us,
                         l->net_beta_gbs);
  if (!sched_algo_supports(algo, coll))
    return INFINITY;
  if (bytes == 0)
    return 0;
  double nbw = (l->net_beta_gbs > 0 ? l->net_beta_gbs : 1e-9) * 1e3;
  double bw = (l->beta_gbs > 0 ? l->beta_gbs : 1e-9) * 1e3;
  return hier_cost(coll, l->nhosts, SHARC_MAX(l->local_max, 1), (double)bytes,
                   l->alpha_us, bw, l->net_alpha_us, nbw);
}

sched_algo_t sched_pick_links(sched_coll_t coll, int nranks, size_t bytes,
                              const sched_links_t *links) {
  sched_algo_t best = SCHED_ALGO_RING;
  double best_cost = INFINITY;
  for (int al = 0; al < SCHED_ALGO_COUNT; al++) {
    if (!sched_algo_supports((sched_algo_t)al, coll))
      continue;
    double c =
        sched_cost_links_us((sched_algo_t)al, coll, nranks, bytes, links);
    if (c < best_cost) {
      best_cost = c;
      best = (sched_algo_t)al;
    }
  }
  return best;
}

/*
 * cost.c - the alpha-beta cost model (cost.h).
 */
#include "cost.h"

#include <math.h>

#include "algo.h"
#include "core.h"
#include "dispatch.h"

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
/* A direct broadcast's root issues n-1 sends in one round: each costs it
 * a share of a hop's latency (its own work, not a wait). On the
 * development VM (shm) the root's call took 0.22 us with one 8-byte send
 * and 0.28 us with three, where a hop through a forwarding rank cost
 * 0.3 us with a core each and 4 us with two ranks per core: a send is
 * about a tenth of a hop or less. With 1/16 the tree wins again from about
 * 100 ranks (log2 n hops against (n-1)/16). */
#define DIRECT_SEND_SHARE 16.0
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
    case SCHED_REDUCE: /* a chain, pipelined: the mirror of broadcast's */
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
    case SCHED_REDUCE:
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
  case SCHED_ALGO_DIRECT:
    if (coll == SCHED_ALL_TO_ALL) /* n-1 rounds of one block each way */
      return (n - 1) * msg(B, a, bw);
    if (coll == SCHED_BROADCAST) /* one hop; the root issues n-1 sends */
      return a + (n - 1) * (a / DIRECT_SEND_SHARE + B / bw);
    if (coll == SCHED_BARRIER) /* two hops; rank 0 takes and sends n-1 */
      return 2 * a + 2 * (n - 1) * a / DIRECT_SEND_SHARE;
    return a + (n - 1) * B / bw; /* one round; the root's links: n-1 blocks */
  case SCHED_ALGO_BRUCK: {
    /* ceil(log2 n) rounds; the round of bit b moves the blocks whose
     * distance has bit b set, 2^b ranks away (far, as the tree's peers):
     * sum of popcount(i) over 0 < i < n blocks, (n/2) log2 n on powers of
     * two. A round's runs progress at once: one alpha per round. */
    double moved = 0;
    for (int i = 1; i < n; i++)
      for (int x = i; x; x &= x - 1)
        moved++;
    return ln * a + moved * B / farbw;
  }
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

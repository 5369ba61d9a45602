/*
 * all_to_all_bruck.c - Bruck's all-to-all: ceil(log2 n) rounds instead of
 * pairwise exchange's n-1, at the price of moving each block once per set
 * bit of its distance (about n/2 blocks a round, (n/2) log2 n in all, where
 * pairwise exchange moves n-1). It wins for small blocks, where the rounds'
 * latency dominates; the cost model (cost.c) picks it there.
 *
 * Rank r names its blocks by distance: position i (0..n-1) starts as its
 * block for rank r+i (mod n). The round of bit b sends every position with
 * bit b set to rank r + 2^b and receives the same positions from rank
 * r - 2^b, so a block keeps its position as it travels: once the rounds of
 * all of i's bits have run, position i of rank d holds rank d-i's block for
 * d, which belongs in RECV block d-i (the inverse rotation).
 *
 * The rounds run from the highest bit down. Then the positions a round
 * moves come in runs (bit b set, the same bits above b) whose blocks have
 * all been received equally often and so lie together: a run is one
 * transfer (split across the channels), not one per block. Where a block
 * lies after its j-th receive:
 *  - j = 0: SEND block r+i (the rotation is only an addressing); in place,
 *    TMP area 0 slot i, filled from RECV by a first round of copies (the
 *    blocks' final places are other positions' starting places);
 *  - TMP area (j + !inplace) % 2, slot i (block i-1 of the area): a round
 *    reads a position from one area and writes it to the other, never the
 *    slot it sends from;
 *  - the last receive of an odd position (in the last round, bit 0) lands
 *    in its RECV block directly; an even position is copied there in the
 *    round after its last receive (the round of its lowest set bit minus
 *    one), next to that round's transfers.
 * Sender and receiver cut a run where either side's blocks stop being
 * contiguous (the wrap of SEND's rotation, RECV's reversed order), both
 * computing both sides' places, so the k-th send matches the k-th receive.
 *
 * Buffers: SEND and RECV hold n blocks of count elements; block p of SEND
 * goes to rank p, block p of RECV comes from rank p. In place SEND is RECV.
 * TMP: up to two areas of n-1 blocks (tmp_count says how much is used).
 */
#include "algo.h"

typedef struct {
  sched_buf_t buf;
  size_t off; /* elements */
} place_t;

static int popcount(int x) {
  int c = 0;
  for (; x; x &= x - 1)
    c++;
  return c;
}

/* Where position i of `rank` lies after its j-th receive (0: none yet). */
static place_t place(const sched_args_t *a, int rank, int i, int j) {
  int n = a->nranks;
  size_t N = a->count;
  if (j == 0 && !a->inplace)
    return (place_t){SCHED_BUF_SEND, (size_t)((rank + i) % n) * N};
  if (j == popcount(i) && (i & 1))
    return (place_t){SCHED_BUF_RECV, (size_t)((rank - i + n) % n) * N};
  size_t area = (size_t)((j + !a->inplace) % 2);
  return (place_t){SCHED_BUF_TMP, (area * (size_t)(n - 1) + (size_t)i - 1) * N};
}

/* The round of bit b between sender `from` and receiver from + 2^b: this
 * rank's sends (send) or receives, one per run cut as the header says. */
static void xfer(sched_t *s, const sched_args_t *a, int b, int from, int send) {
  int n = a->nranks, bit = 1 << b, to = (from + bit) % n;
  size_t N = a->count;
  for (int i = bit; i < n;) {
    if (!(i & bit)) {
      i = (i | (bit - 1)) + 1; /* the next run starts at the next bit-b set */
      continue;
    }
    int j = popcount(i >> (b + 1)); /* receives before this round */
    place_t src = place(a, from, i, j), dst = place(a, to, i, j + 1);
    int len = 1;
    while (i + len < n && ((i + len) & bit)) {
      place_t s1 = place(a, from, i + len, j),
              d1 = place(a, to, i + len, j + 1);
      if (s1.buf != src.buf || s1.off != src.off + (size_t)len * N ||
          d1.buf != dst.buf || d1.off != dst.off + (size_t)len * N)
        break;
      len++;
    }
    if (send)
      send_split(s, to, a->nchan, src.buf, src.off, (size_t)len * N);
    else
      recv_split(s, from, a->nchan, dst.buf, dst.off, (size_t)len * N);
    i += len;
  }
}

/* Elements of TMP the ops use. */
static size_t tmp_used(const sched_t *s) {
  size_t hi = 0;
  for (size_t k = 0; k < s->nops; k++) {
    const sched_op_t *o = &s->ops[k];
    if (o->kind != SCHED_RECV && o->src_buf == SCHED_BUF_TMP &&
        o->src_off + o->count > hi)
      hi = o->src_off + o->count;
    if (o->kind != SCHED_SEND && o->dst_buf == SCHED_BUF_TMP &&
        o->dst_off + o->count > hi)
      hi = o->dst_off + o->count;
  }
  return hi;
}

sharc_status_t bruck_all_to_all_schedule(const sched_args_t *a, sched_t *s) {
  int n = a->nranks, r = a->rank, top = log2_ceil(n) - 1;
  size_t N = a->count;
  s->nchan = a->nchan;
  if (N == 0)
    return SHARC_OK;
  sched_round(s);
  if (a->inplace) { /* position i to TMP area 0 slot i; 0 stays put */
    sched_copy(s, SCHED_BUF_RECV, (size_t)(r + 1) * N, SCHED_BUF_TMP, 0,
               (size_t)(n - r - 1) * N);
    sched_copy(s, SCHED_BUF_RECV, 0, SCHED_BUF_TMP, (size_t)(n - r - 1) * N,
               (size_t)r * N);
    sched_round(s); /* the first sends read what the copies wrote */
  } else {          /* position 0: the rank's own block */
    sched_copy(s, SCHED_BUF_SEND, (size_t)r * N, SCHED_BUF_RECV, (size_t)r * N,
               N);
  }
  for (int b = top; b >= 0; b--) {
    if (b < top)
      sched_round(s);
    xfer(s, a, b, r, 1);
    xfer(s, a, b, (r - (1 << b) + n) % n, 0);
    /* the even positions whose last receive was the previous round's */
    int low = 1 << (b + 1);
    for (int i = low; i < n; i += 2 * low) {
      place_t p = place(a, r, i, popcount(i));
      sched_copy(s, p.buf, p.off, SCHED_BUF_RECV, (size_t)((r - i + n) % n) * N,
                 N);
    }
  }
  s->tmp_count = tmp_used(s);
  return SHARC_OK;
}

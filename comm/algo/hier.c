/*
 * hier.c - hierarchical all-gather, reduce-scatter and all-reduce for
 * communicators that span hosts (docs/design.md, decision 3): within each host
 * over shared memory, one exchange per host pair over the network, and within
 * each host again, so the slow links carry each byte once per host pair.
 *
 * Data is cut into n pieces, piece r belonging to rank r. For every pair of
 * hosts (h, g), piece r of a rank on h crosses to g through one rank of g,
 * its carrier: the rank of g whose local index is r's local index modulo
 * g's rank count. The carrier set S(c) of a rank c on host g is every piece
 * c carries into (or out of) g, its own included; the sets of one host
 * partition all pieces. Uneven hosts (3 ranks on one, 1 on another) just
 * give uneven sets.
 *
 *   all-gather:     (1) every rank sends its piece to its carrier on each
 *                   other host (one round); (2) a ring within each host
 *                   passes the carrier sets around until every rank has
 *                   every piece.
 *   reduce-scatter: (1) a ring within each host reduces the carrier sets,
 *                   so carrier c holds its host's partial sum of S(c);
 *                   (2) for k = 1..nhosts-1, carriers send the partial sums
 *                   of the pieces of host (h + k) to their owners, who
 *                   reduce them (one round per k, so reductions into one
 *                   piece never race).
 *   all-reduce:     reduce-scatter of count cut into n pieces (each rank
 *                   ends with its piece reduced over all ranks), then an
 *                   in-place all-gather of the pieces.
 *
 * The within-host ring reduces into two scratch slots (TMP), alternately,
 * each as large as the largest carrier set.
 */
#include <stdlib.h>

#include "algo.h"
#include "core.h"

typedef struct {
  int n, me, nh, myhost;
  const int *host;  /* host of each rank */
  int *nloc;        /* [nh] ranks per host */
  int *members;     /* ranks grouped by host, ascending within a host */
  int *first;       /* [nh + 1] members[first[h] .. first[h+1]) is host h */
  int *lidx;        /* [n] local index of each rank */
  const size_t *po; /* [n + 1] piece r is [po[r], po[r+1]) */
  int nchan;
  /* this rank's host ring */
  int L, j; /* ranks on my host, my local index */
  /* scratch layout: offset of each piece within its carrier set's slot */
  size_t *setoff; /* [n] for pieces of my host's sets */
  size_t slot;    /* elements per TMP slot */
} hier_t;

static int member(const hier_t *H, int h, int i) {
  return H->members[H->first[h] + i];
}

/* The rank of host g that carries piece r into and out of g. */
static int carrier(const hier_t *H, int r, int g) {
  return member(H, g, H->lidx[r] % H->nloc[g]);
}

static size_t pcount(const hier_t *H, int r) { return H->po[r + 1] - H->po[r]; }

static void hier_free(hier_t *H) {
  free(H->nloc);
  free(H->members);
  free(H->first);
  free(H->lidx);
  free(H->setoff);
}

static sharc_status_t hier_init(hier_t *H, const sched_args_t *a,
                                const size_t *po) {
  int n = a->nranks;
  H->n = n;
  H->me = a->rank;
  H->host = a->host_of;
  H->po = po;
  H->nchan = a->nchan;
  H->nh = 1;
  for (int r = 0; r < n; r++) {
    int h = H->host ? H->host[r] : 0;
    if (h < 0 || h >= n)
      return err_set(SHARC_ERR_INTERNAL, "hier: host index %d of rank %d", h,
                     r);
    if (h + 1 > H->nh)
      H->nh = h + 1;
  }
  H->nloc = calloc((size_t)H->nh, sizeof *H->nloc);
  H->first = calloc((size_t)H->nh + 1, sizeof *H->first);
  H->members = malloc((size_t)n * sizeof *H->members);
  H->lidx = malloc((size_t)n * sizeof *H->lidx);
  H->setoff = calloc((size_t)n, sizeof *H->setoff);
  if (!H->nloc || !H->first || !H->members || !H->lidx || !H->setoff)
    return err_set(SHARC_ERR_NO_MEM, "hier: out of memory for %d ranks", n);
  for (int r = 0; r < n; r++)
    H->nloc[H->host ? H->host[r] : 0]++;
  for (int h = 0; h < H->nh; h++) {
    if (H->nloc[h] == 0)
      return err_set(SHARC_ERR_INTERNAL, "hier: host %d has no ranks", h);
    H->first[h + 1] = H->first[h] + H->nloc[h];
  }
  int *fill = calloc((size_t)H->nh, sizeof *fill);
  if (!fill)
    return err_set(SHARC_ERR_NO_MEM, "hier: out of memory");
  for (int r = 0; r < n; r++) {
    int h = H->host ? H->host[r] : 0;
    H->lidx[r] = fill[h];
    H->members[H->first[h] + fill[h]++] = r;
  }
  free(fill);
  H->myhost = H->host ? H->host[H->me] : 0;
  H->L = H->nloc[H->myhost];
  H->j = H->lidx[H->me];
  /* Slot layout: each set of my host packed from 0 in ascending piece
   * order; the slot is as large as the largest set. */
  size_t *used = calloc((size_t)H->L, sizeof *used);
  if (!used)
    return err_set(SHARC_ERR_NO_MEM, "hier: out of memory");
  H->slot = 0;
  for (int r = 0; r < n; r++) {
    int c = H->lidx[carrier(H, r, H->myhost)];
    H->setoff[r] = used[c];
    used[c] += pcount(H, r);
    if (used[c] > H->slot)
      H->slot = used[c];
  }
  free(used);
  return SHARC_OK;
}

/* Whether piece r is in the carrier set of c (c on my host). */
static int in_set(const hier_t *H, int r, int c) {
  return carrier(H, r, H->myhost) == c;
}

/* (1) of all-gather: own piece from (src, soff) to its carrier on every
 * other host; pieces this rank carries into its host land in RECV. */
static void ag_exchange(const hier_t *H, sched_t *s, sched_buf_t src,
                        size_t soff) {
  for (int k = 1; k < H->nh; k++) {
    int g = (H->myhost + k) % H->nh;
    send_split(s, carrier(H, H->me, g), H->nchan, src, soff, pcount(H, H->me));
  }
  for (int r = 0; r < H->n; r++)
    if (H->host[r] != H->myhost && in_set(H, r, H->me))
      recv_split(s, r, H->nchan, SCHED_BUF_RECV, H->po[r], pcount(H, r));
}

/* (2) of all-gather: ring within the host over carrier sets, in RECV. */
static void ag_ring(const hier_t *H, sched_t *s) {
  int L = H->L, j = H->j, h = H->myhost;
  int right = member(H, h, (j + 1) % L), left = member(H, h, (j - 1 + L) % L);
  for (int k = 0; k < L - 1; k++) {
    int cs = member(H, h, (j - k + L) % L);
    int cr = member(H, h, (j - k - 1 + 2 * L) % L);
    sched_round(s);
    for (int r = 0; r < H->n; r++)
      if (in_set(H, r, cs))
        send_split(s, right, H->nchan, SCHED_BUF_RECV, H->po[r], pcount(H, r));
    for (int r = 0; r < H->n; r++)
      if (in_set(H, r, cr))
        recv_split(s, left, H->nchan, SCHED_BUF_RECV, H->po[r], pcount(H, r));
  }
}

/* Reduce-scatter of the pieces of (in, po[r]); rank me's total goes to
 * (out, ooff). */
static void rs_run(const hier_t *H, sched_t *s, sched_buf_t in, sched_buf_t out,
                   size_t ooff, int alias) {

  int L = H->L, j = H->j, h = H->myhost, me = H->me, nc = H->nchan;
  int right = member(H, h, (j + 1) % L), left = member(H, h, (j - 1 + L) % L);
  /* (1) ring within the host: at step k send the partial of set
   * (j - k - 1) and reduce the incoming partial of set (j - k - 2) with
   * this rank's own data; the last step's set is this rank's own. */
  for (int k = 0; k < L - 1; k++) {
    int cs = member(H, h, (j - k - 1 + 2 * L) % L);
    int cr = member(H, h, (j - k - 2 + 2 * L) % L);
    size_t ss = (size_t)((k + 1) % 2) * H->slot; /* slot written at k-1 */
    size_t rs = (size_t)(k % 2) * H->slot;
    sched_round(s);
    for (int r = 0; r < H->n; r++)
      if (in_set(H, r, cs)) {
        if (k == 0)
          send_split(s, right, nc, in, H->po[r], pcount(H, r));
        else
          send_split(s, right, nc, SCHED_BUF_TMP, ss + H->setoff[r],
                     pcount(H, r));
      }
    for (int r = 0; r < H->n; r++)
      if (in_set(H, r, cr)) {
        if (r == me)
          recv_reduce_split(s, left, nc, in, H->po[r], out, ooff, pcount(H, r));
        else
          recv_reduce_split(s, left, nc, in, H->po[r], SCHED_BUF_TMP,
                            rs + H->setoff[r], pcount(H, r));
      }
  }
  /* Where this host's partial sums now are: own piece in out (or still in
   * `in` on a one-rank host), the carried pieces in the last slot. */
  size_t last = (size_t)((L - 2 + 2) % 2) * H->slot;
  /* (2) between hosts: round k sends to the owners on host h + k and
   * reduces what the carrier on host h - k sends. */
  for (int k = 1; k < H->nh; k++) {
    int to = (h + k) % H->nh, from = (h - k + H->nh) % H->nh;
    sched_round(s);
    for (int r = 0; r < H->n; r++)
      if (H->host[r] == to && in_set(H, r, me)) {
        if (L == 1)
          send_split(s, r, nc, in, H->po[r], pcount(H, r));
        else
          send_split(s, r, nc, SCHED_BUF_TMP, last + H->setoff[r],
                     pcount(H, r));
      }
    int c = carrier(H, me, from);
    if (L == 1 && k == 1)
      recv_reduce_split(s, c, nc, in, H->po[me], out, ooff, pcount(H, me));
    else
      recv_reduce_split(s, c, nc, out, ooff, out, ooff, pcount(H, me));
  }
  if (L == 1 && H->nh == 1 && !alias) {
    sched_round(s);
    sched_copy(s, in, H->po[me], out, ooff, pcount(H, me));
  }
}

/* Pieces of `per` elements each, piece r at r * per. */
static size_t *even_pieces(int n, size_t per) {
  size_t *po = malloc(((size_t)n + 1) * sizeof *po);
  if (po)
    for (int r = 0; r <= n; r++)
      po[r] = (size_t)r * per;
  return po;
}

/* Pieces of count cut into n near-equal blocks. */
static size_t *split_pieces(int n, size_t count) {
  size_t *po = malloc(((size_t)n + 1) * sizeof *po);
  if (po)
    for (int r = 0; r <= n; r++)
      po[r] = block_off(count, (size_t)n, (size_t)r);
  return po;
}

typedef enum { HIER_AG, HIER_RS, HIER_AR } hier_kind_t;

static sharc_status_t hier_schedule(const sched_args_t *a, sched_t *s,
                                    hier_kind_t kind) {
  s->nchan = a->nchan;
  if (a->count == 0)
    return SHARC_OK;
  size_t *po = kind == HIER_AR ? split_pieces(a->nranks, a->count)
                               : even_pieces(a->nranks, a->count);
  if (!po)
    return err_set(SHARC_ERR_NO_MEM, "hier: out of memory");
  hier_t H = {0};
  int one_host[1] = {0};
  sched_args_t b = *a;
  sharc_status_t st = SHARC_OK;
  int *zeros = NULL;
  if (!b.host_of) { /* one host: give every rank host 0 */
    zeros = calloc((size_t)a->nranks, sizeof *zeros);
    if (!zeros) {
      free(po);
      return err_set(SHARC_ERR_NO_MEM, "hier: out of memory");
    }
    b.host_of = a->nranks == 1 ? one_host : zeros;
  }
  CHECK_GOTO(hier_init(&H, &b, po), st, done);
  int me = a->rank;
  switch (kind) {
  case HIER_AG:
    sched_round(s);
    if (!a->inplace)
      sched_copy(s, SCHED_BUF_SEND, 0, SCHED_BUF_RECV, po[me], a->count);
    ag_exchange(&H, s, SCHED_BUF_SEND, 0);
    ag_ring(&H, s);
    break;
  case HIER_RS:
    s->tmp_count = 2 * H.slot;
    rs_run(&H, s, SCHED_BUF_SEND, SCHED_BUF_RECV, 0, a->inplace);
    break;
  case HIER_AR:
    s->tmp_count = 2 * H.slot;
    rs_run(&H, s, a->inplace ? SCHED_BUF_RECV : SCHED_BUF_SEND, SCHED_BUF_RECV,
           po[me], a->inplace);
    sched_round(s);
    ag_exchange(&H, s, SCHED_BUF_RECV, po[me]);
    ag_ring(&H, s);
    break;
  }
done:
  hier_free(&H);
  free(zeros);
  free(po);
  return st;
}

sharc_status_t hier_all_gather_schedule(const sched_args_t *a, sched_t *s) {
  return hier_schedule(a, s, HIER_AG);
}

sharc_status_t hier_reduce_scatter_schedule(const sched_args_t *a, sched_t *s) {
  return hier_schedule(a, s, HIER_RS);
}

sharc_status_t hier_all_reduce_schedule(const sched_args_t *a, sched_t *s) {
  return hier_schedule(a, s, HIER_AR);
}

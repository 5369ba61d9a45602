/*
 * check.c - SHARC_CHECK=1 (see check.h): every collective first all-gathers
 * one 64-byte signature per rank and compares them.
 *
 * The exchange is an ordinary schedule (recursive-doubling all-gather of 8
 * uint64 per rank, log2(nranks) steps) run by the executor on the same
 * FIFOs, so it waits, times out and detects lost peers exactly as the
 * collective would. Every rank runs the same exchange whatever it called,
 * so the exchange itself cannot mismatch and leaves no bytes behind in the
 * FIFOs; every rank then holds the same records and reaches the same
 * verdict, with the same message.
 *
 * Fields a collective does not use are stored as SIG_NONE, so the compare
 * is in the collective's own terms: count per rank for all-gather and
 * reduce-scatter (NCCL's meaning), root only for broadcast, the reduction
 * only for all-reduce and reduce-scatter, nothing but the call for barrier.
 */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "exec.h"

#define SIG_MAGIC 0x31304b4352414853ull /* "SHARCK01" */
#define SIG_NONE UINT64_MAX
#define SIG_STACK 64     /* ranks whose records fit on the stack */
#define SIG_RANKS_MAX 96 /* characters of one rank list */
/* Past this many characters a message names no more groups (the recorded
 * message keeps 511). */
#define SIG_MSG_SOFT 280

typedef struct {
  uint64_t magic; /* SIG_MAGIC: the peer ran the exchange too */
  uint64_t seq;   /* collectives before this one on the comm */
  uint64_t coll;  /* sched_coll_t */
  uint64_t count; /* elements, NCCL's meaning; SIG_NONE for barrier */
  uint64_t dtype; /* SIG_NONE for barrier */
  uint64_t op;    /* reductions only */
  uint64_t root;  /* rooted collectives only */
  uint64_t pad;   /* 0 */
} signature_t;

#define SIG_WORDS (sizeof(signature_t) / sizeof(uint64_t))
_Static_assert(sizeof(signature_t) == 64, "a signature is 8 uint64 (one line)");

static void sig_make(const coll_call_t *c, uint64_t seq, signature_t *g) {
  int reduces = sched_coll_reduces(c->coll);
  int barrier = c->coll == SCHED_BARRIER;
  *g = (signature_t){
      .magic = SIG_MAGIC,
      .seq = seq,
      .coll = (uint64_t)c->coll,
      .count = barrier ? SIG_NONE : (uint64_t)c->count,
      .dtype = barrier ? SIG_NONE : (uint64_t)c->dtype,
      .op = reduces ? (uint64_t)c->op : SIG_NONE,
      .root = sched_coll_rooted(c->coll) ? (uint64_t)c->root : SIG_NONE,
  };
}

/* "all_reduce(count 1024, float, sum)"; with_seq adds "#12 " in front. */
static void sig_describe(const signature_t *g, int with_seq, char *out,
                         size_t len) {
  if (g->magic != SIG_MAGIC) {
    snprintf(out, len,
             "something else (no signature: is SHARC_CHECK=1 set "
             "on every rank?)");
    return;
  }
  char seq[32] = "";
  if (with_seq)
    snprintf(seq, sizeof seq, "#%llu ", (unsigned long long)g->seq);
  const char *name = sched_coll_name((sched_coll_t)g->coll);
  const char *type = sharc_dtype_name((sharc_dtype_t)g->dtype);
  unsigned long long n = (unsigned long long)g->count;
  switch (g->coll) {
  case SCHED_BARRIER:
    snprintf(out, len, "%s%s()", seq, name);
    break;
  case SCHED_P2P:
    snprintf(out, len, "sharc_send/sharc_recv (%llu transfer(s) with it)", n);
    break;
  case SCHED_ALL_REDUCE:
  case SCHED_REDUCE_SCATTER:
    snprintf(out, len, "%s%s(count %llu, %s, %s)", seq, name, n, type,
             sharc_op_name((sharc_op_t)g->op));
    break;
  case SCHED_REDUCE:
    snprintf(out, len, "%s%s(count %llu, %s, %s, root %lld)", seq, name, n,
             type, sharc_op_name((sharc_op_t)g->op), (long long)g->root);
    break;
  case SCHED_BROADCAST:
  case SCHED_GATHER:
  case SCHED_SCATTER:
    snprintf(out, len, "%s%s(count %llu, %s, root %lld)", seq, name, n, type,
             (long long)g->root);
    break;
  default:
    snprintf(out, len, "%s%s(count %llu, %s)", seq, name, n, type);
  }
}

/* The ranks r with group[r] == g, as "rank 3" or "ranks 0-2,5" (cut short
 * with ",..." past SIG_RANKS_MAX characters). */
static void rank_list(const int *group, int n, int g, char *out, size_t len) {
  int members = 0;
  for (int r = 0; r < n; r++)
    members += group[r] == g;
  size_t o = (size_t)snprintf(out, len, "%s", members > 1 ? "ranks " : "rank ");
  const char *sep = "";
  for (int r = 0; r < n; r++) {
    if (group[r] != g)
      continue;
    int e = r;
    while (e + 1 < n && group[e + 1] == g)
      e++;
    if (o + 32 > SHARC_MIN(len, (size_t)SIG_RANKS_MAX)) {
      snprintf(out + o, len - o, ",...");
      return;
    }
    o += (size_t)(e == r ? snprintf(out + o, len - o, "%s%d", sep, r)
                         : snprintf(out + o, len - o, "%s%d-%d", sep, r, e));
    sep = ",";
    r = e;
  }
}

/* Groups the ranks by signature (in order of first appearance, so rank 0's
 * group comes first) and records the message; SHARC_ERR_MISMATCH. */
static sharc_status_t report(struct sharc_comm *comm, const char *fn,
                             const signature_t *all) {
  int n = comm->nranks;
  int *group = malloc((size_t)n * sizeof *group);
  int *first = malloc((size_t)n * sizeof *first); /* a rank of each group */
  if (!group || !first) {
    free(group);
    free(first);
    return comm_record(comm, SHARC_ERR_MISMATCH,
                       "%s #%llu: collective mismatch between ranks "
                       "(SHARC_CHECK; out of memory for the details)",
                       fn, (unsigned long long)comm->seq);
  }
  int ngroups = 0, seq_differs = 0;
  for (int r = 0; r < n; r++) {
    int g = 0;
    while (g < ngroups && memcmp(&all[first[g]], &all[r], sizeof *all))
      g++;
    if (g == ngroups)
      first[ngroups++] = r;
    group[r] = g;
    seq_differs |= all[r].magic == SIG_MAGIC && all[r].seq != comm->seq;
  }
  static const char *const joint[3] = {"", " but", ","};
  char msg[1024], ranks[SIG_RANKS_MAX + 8], sig[160];
  size_t o =
      (size_t)snprintf(msg, sizeof msg, "%s #%llu: collective mismatch:", fn,
                       (unsigned long long)comm->seq);
  int g = 0;
  for (; g < ngroups && (g < 2 || o < SIG_MSG_SOFT); g++) {
    rank_list(group, n, g, ranks, sizeof ranks);
    sig_describe(&all[first[g]], seq_differs, sig, sizeof sig);
    o += (size_t)snprintf(msg + o, sizeof msg - o, "%s %s called %s",
                          joint[g < 2 ? g : 2], ranks, sig);
  }
  if (g < ngroups)
    snprintf(msg + o, sizeof msg - o, " (and %d more signatures)", ngroups - g);
  free(group);
  free(first);
  return comm_record(comm, SHARC_ERR_MISMATCH, "%s", msg);
}

sharc_status_t check_call(const coll_call_t *call, const char *fn) {
  struct sharc_comm *comm = call->comm;
  int n = comm->nranks;
  if (n == 1)
    return SHARC_OK;
  signature_t stack[SIG_STACK];
  signature_t *all = n <= SIG_STACK ? stack : malloc((size_t)n * sizeof *all);
  if (!all)
    return comm_error(comm, SHARC_ERR_NO_MEM,
                      "%s: SHARC_CHECK: out of memory for %d signatures", fn,
                      n);
  sig_make(call, comm->seq, &all[comm->rank]);
  /* In place: our record already sits in its slot of the result. */
  sched_args_t args = {
      .coll = SCHED_ALL_GATHER,
      .rank = comm->rank,
      .nranks = n,
      .count = SIG_WORDS,
      .inplace = 1,
      .nchan = 1,
      .chunk = SIG_WORDS,
  };
  sched_t s;
  sched_init(&s);
  sharc_status_t st = sched_build(SCHED_ALGO_TREE, &args, &s);
  if (st == SHARC_OK && s.tmp_count) /* no scratch buffer is passed below */
    st = err_record(SHARC_ERR_INTERNAL, "the schedule wants scratch space");
  if (st != SHARC_OK) {
    st = comm_error(comm, st,
                    "%s: SHARC_CHECK: building the signature "
                    "exchange failed: %s",
                    fn, err_last());
  } else {
    void *const bufs[3] = {&all[comm->rank], all, NULL};
    st = exec_run(comm, &s, bufs, SHARC_U64, SHARC_SUM);
  }
  sched_free(&s);
  for (int r = 1; r < n && st == SHARC_OK; r++)
    if (memcmp(&all[r], &all[0], sizeof *all))
      st = report(comm, fn, all);
  if (all != stack)
    free(all);
  return st;
}

/* ---- send/recv batches: each pair agrees ----
 * Per peer of the batch, both ranks exchange a signature (coll
 * SCHED_P2P, count: how many transfers it lists with this peer), then the
 * lists themselves (one p2p_entry_t per transfer, posting order), and
 * compare this rank's sends with the peer's receives and the reverse, in
 * order. Both ranks of a pair hold the same two lists and word the verdict
 * alike (lower rank first). A peer that runs a collective's exchange
 * instead sends its collective signature, named as such. */

typedef struct {
  uint32_t send;
  uint32_t dtype;
  uint64_t count;
} p2p_entry_t;

/* The first disagreement of the transfers from rank a to rank b: a's sends
 * sa[] against b's receives rb[] (lists of both kinds, filtered here); 0 if
 * none, else the message in out. */
static int p2p_compare(int a, const p2p_entry_t *la, size_t na, int b,
                       const p2p_entry_t *lb, size_t nb, char *out,
                       size_t len) {
  size_t i = 0, j = 0, k = 0;
  for (;; k++) {
    while (i < na && !la[i].send)
      i++;
    while (j < nb && lb[j].send)
      j++;
    if (i == na && j == nb)
      return 0;
    if (i == na || j == nb) {
      size_t ns = k, nr = k;
      for (; i < na; i++)
        ns += la[i].send;
      for (; j < nb; j++)
        nr += !lb[j].send;
      snprintf(out, len,
               "rank %d posts %zu send(s) to rank %d but rank %d posts %zu "
               "receive(s) from rank %d",
               a, ns, b, b, nr, a);
      return 1;
    }
    if (la[i].count != lb[j].count || la[i].dtype != lb[j].dtype) {
      snprintf(out, len,
               "rank %d's send #%zu to rank %d is %llu x %s but rank %d's "
               "receive #%zu from rank %d is %llu x %s",
               a, k, b, (unsigned long long)la[i].count,
               sharc_dtype_name((sharc_dtype_t)la[i].dtype), b, k, a,
               (unsigned long long)lb[j].count,
               sharc_dtype_name((sharc_dtype_t)lb[j].dtype));
      return 1;
    }
    i++;
    j++;
  }
}

/* Exchanges len[p] bytes mine[p] -> theirs[p] with each peer[p], all at
 * once (one round, channel 0). */
static sharc_status_t p2p_exchange(struct sharc_comm *comm, const int *peer,
                                   size_t np, void **mine, void **theirs,
                                   const size_t *mine_len,
                                   const size_t *their_len) {
  void **bufs = malloc((SCHED_BUF_P2P + 2 * np) * sizeof *bufs);
  if (!bufs)
    return comm_error(comm, SHARC_ERR_NO_MEM, "SHARC_CHECK: out of memory");
  sched_t s;
  sched_init(&s);
  s.partial = 1;
  sched_round(&s);
  bufs[0] = bufs[1] = bufs[2] = NULL;
  for (size_t p = 0; p < np; p++) {
    bufs[SCHED_BUF_P2P + 2 * p] = mine[p];
    bufs[SCHED_BUF_P2P + 2 * p + 1] = theirs[p];
    sched_send(&s, peer[p], 0, (sched_buf_t)(SCHED_BUF_P2P + 2 * p), 0,
               mine_len[p]);
    sched_recv(&s, peer[p], 0, (sched_buf_t)(SCHED_BUF_P2P + 2 * p + 1), 0,
               their_len[p]);
  }
  sharc_status_t st = sched_finish(&s);
  if (st == SHARC_OK)
    st = exec_run(comm, &s, bufs, SHARC_U8, SHARC_SUM);
  sched_free(&s);
  free(bufs);
  return st;
}

sharc_status_t check_p2p(const coll_call_t *call) {
  struct sharc_comm *comm = call->comm;
  const call_p2p_t *b = call->p2p;
  const char *fn = "sharc_send/sharc_recv";
  size_t n = b->n, np = 0;
  int *peer = malloc(n * sizeof *peer);
  size_t *cnt = calloc(n, sizeof *cnt), *at = calloc(n, sizeof *at);
  signature_t *sig = calloc(2 * n, sizeof *sig);
  p2p_entry_t *list = malloc(n * sizeof *list);
  p2p_entry_t **theirs = calloc(n, sizeof *theirs);
  /* exchange arguments: [0, np) what goes out, [np, 2np) what comes in */
  void **mine = calloc(2 * n, sizeof *mine);
  size_t *lens = calloc(2 * n, sizeof *lens);
  sharc_status_t st = SHARC_OK;
  if (!peer || !cnt || !at || !sig || !list || !theirs || !mine || !lens) {
    st = comm_error(comm, SHARC_ERR_NO_MEM, "%s: SHARC_CHECK: out of memory",
                    fn);
    goto out;
  }
  /* the peers (not this rank: its own pairs are checked when built) */
  for (size_t i = 0; i < n; i++) {
    int q = b->ops[i].peer;
    size_t p = 0;
    while (p < np && peer[p] != q)
      p++;
    if (q == comm->rank)
      continue;
    if (p == np)
      peer[np++] = q;
    cnt[p]++;
  }
  /* this rank's list, grouped by peer (at[p]: where peer p's entries
   * start), posting order kept */
  for (size_t p = 0, o = 0; p < np; p++) {
    at[p] = o;
    for (size_t i = 0; i < n; i++)
      if (b->ops[i].peer == peer[p])
        list[o++] =
            (p2p_entry_t){(uint32_t)b->ops[i].send, (uint32_t)b->ops[i].dtype,
                          (uint64_t)b->ops[i].count};
  }
  for (size_t p = 0; p < np; p++) {
    sig[2 * p] = (signature_t){.magic = SIG_MAGIC,
                               .seq = SIG_NONE,
                               .coll = SCHED_P2P,
                               .count = cnt[p],
                               .dtype = SIG_NONE,
                               .op = SIG_NONE,
                               .root = SIG_NONE};
    mine[p] = &sig[2 * p];
    mine[np + p] = &sig[2 * p + 1];
    lens[p] = lens[np + p] = sizeof *sig;
  }
  st = p2p_exchange(comm, peer, np, mine, mine + np, lens, lens + np);
  char msg[400] = "";
  /* the lists, with each peer that answered with a send/recv signature */
  size_t ok = 0;
  for (size_t p = 0; p < np && st == SHARC_OK; p++) {
    const signature_t *g = &sig[2 * p + 1];
    if (g->magic != SIG_MAGIC || g->coll != SCHED_P2P) {
      if (!msg[0]) {
        char what[160];
        sig_describe(g, 0, what, sizeof what);
        snprintf(msg, sizeof msg,
                 "rank %d posts send/recv with rank %d but rank %d called %s",
                 comm->rank, peer[p], peer[p], what);
      }
      continue;
    }
    theirs[p] = malloc((g->count ? g->count : 1) * sizeof **theirs);
    if (!theirs[p]) {
      st = comm_error(comm, SHARC_ERR_NO_MEM, "%s: SHARC_CHECK: out of memory",
                      fn);
      break;
    }
    peer[ok] = peer[p];
    mine[ok] = &list[at[p]];
    mine[np + ok] = theirs[p];
    lens[ok] = cnt[p] * sizeof *list;
    lens[np + ok] = g->count * sizeof **theirs;
    ok++;
  }
  if (st == SHARC_OK && ok)
    st = p2p_exchange(comm, peer, ok, mine, mine + np, lens, lens + np);
  for (size_t p = 0; p < ok && st == SHARC_OK && !msg[0]; p++) {
    const p2p_entry_t *ml = mine[p], *tl = mine[np + p];
    size_t mn = lens[p] / sizeof *list, tn = lens[np + p] / sizeof *list;
    int me = comm->rank, q = peer[p];
    /* lower rank's sends first, so both ranks word it alike */
    if (me < q)
      (void)(p2p_compare(me, ml, mn, q, tl, tn, msg, sizeof msg) ||
             p2p_compare(q, tl, tn, me, ml, mn, msg, sizeof msg));
    else
      (void)(p2p_compare(q, tl, tn, me, ml, mn, msg, sizeof msg) ||
             p2p_compare(me, ml, mn, q, tl, tn, msg, sizeof msg));
  }
  if (st == SHARC_OK && msg[0])
    st = comm_record(comm, SHARC_ERR_MISMATCH,
                     "%s: send/recv mismatch (SHARC_CHECK): %s", fn, msg);
out:
  for (size_t p = 0; theirs && p < n; p++)
    free(theirs[p]);
  free(peer);
  free(cnt);
  free(at);
  free(sig);
  free(list);
  free(theirs);
  free(mine);
  free(lens);
  return st;
}

void check_fail(struct sharc_comm *comm, sharc_status_t st) {
  if (st != SHARC_ERR_MISMATCH)
    return; /* the exchange failed: the executor already failed the comm */
  char why[sizeof comm->last_error];
  pthread_mutex_lock(&comm->err_lock);
  snprintf(why, sizeof why, "%s", comm->last_error);
  pthread_mutex_unlock(&comm->err_lock);
  /* every rank holds the same records and fails by itself: see FAIL_LOCAL */
  comm_fail_as(comm, FAIL_LOCAL, -1, st, why);
}

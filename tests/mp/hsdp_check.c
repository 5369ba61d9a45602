/*
 * hsdp_check.c - multi-process test of sharc_comm_split_hsdp (hybrid
 * sharding groups).
 *
 *   sharcrun -n N hsdp_check
 *   tests/mp/hosts_test.sh MAP hsdp_check      (ranks on several hosts)
 *
 * For every group size g that divides the world size n: the shard group of
 * rank r is the block of g consecutive ranks holding r (its rank there is
 * r % g) and its replicate group the ranks at the same position of every
 * block (its rank there is r / g). For g = 0 (one shard group per host) the
 * shard group is this host's ranks in world order and the replicate group
 * the ranks at the same position on every host, hosts numbered by their
 * lowest rank; when hosts hold different numbers of ranks g = 0 must fail.
 * Each communicator's size and rank are checked, an all-gather of the world
 * ranks must list the expected members in order, and an all-reduce (i64
 * sum, 100003 elements of 1000 * world rank + index) must give their sum.
 * Sizes that cannot work (not dividing n, larger than n, negative) must
 * fail on every rank with SHARC_ERR_INVALID_ARG and a message naming the
 * size, leave both outputs NULL and the parent communicator usable.
 *
 * The hosts are found the way sharc defines them (SHARC_HOSTID if set,
 * else host name and network namespace), gathered from every rank, and
 * cross-checked against sharc_comm_nhosts / local_rank / local_size.
 * Rank 0 prints "hsdp_check: P passed, F failed". Exit 0 when everything
 * passed, 1 otherwise, 2 when the communicator could not be created.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sharc.h"

#define CNT 100003 /* all-reduce elements: odd, > 1 slice of the pipeline */
#define MAX_PRINT 20

static struct {
  sharc_comm_t comm;
  int rank, n;
  int nhosts; /* distinct hosts seen by the test */
  int *host;  /* host index of every rank, by first appearance */
  int even;   /* every host holds the same number of ranks */
  long pass, fail;
  int printed, dead;
} T;

static void check(int ok, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void check(int ok, const char *fmt, ...) {
  if (ok) {
    T.pass++;
    return;
  }
  T.fail++;
  if (T.printed++ >= MAX_PRINT)
    return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("hsdp_check FAIL: rank %d of %d: %s\n", T.rank, T.n, msg);
}

/* A collective that must work; a failure makes later ones untrustworthy. */
static int must(sharc_status_t st, sharc_comm_t comm, const char *what) {
  if (st == SHARC_OK)
    return 1;
  check(0, "%s: %s: %s", what, sharc_status_name(st),
        sharc_comm_last_error(comm));
  T.dead = 1;
  return 0;
}

/* ---- hosts ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t len) {
  const unsigned char *b = p;
  for (size_t i = 0; i < len; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* This process's host as sharc counts hosts: SHARC_HOSTID when set, else
 * host name and network namespace (ranks in one namespace share memory). */
static uint64_t host_key(void) {
  uint64_t h = 14695981039346656037ull;
  const char *id = getenv("SHARC_HOSTID");
  if (id && *id)
    return fnv(h, id, strlen(id));
  char name[256] = "";
  if (gethostname(name, sizeof name - 1) != 0)
    strcpy(name, "unknown");
  h = fnv(h, name, strlen(name) + 1);
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) {
    uint64_t ns[2] = {(uint64_t)st.st_dev, (uint64_t)st.st_ino};
    h = fnv(h, ns, sizeof ns);
  }
  return h;
}

/* Fills T.host, T.nhosts, T.even from every rank's host key. */
static int find_hosts(void) {
  uint64_t mine = host_key(), *keys = calloc((size_t)T.n, sizeof *keys);
  T.host = calloc((size_t)T.n, sizeof *T.host);
  int *count = calloc((size_t)T.n, sizeof *count);
  if (!keys || !T.host || !count) {
    check(0, "out of memory");
    free(keys), free(count);
    return 0;
  }
  if (!must(sharc_all_gather(&mine, keys, 1, SHARC_U64, T.comm, NULL), T.comm,
            "all_gather of host keys")) {
    free(keys), free(count);
    return 0;
  }
  T.nhosts = 0;
  for (int r = 0; r < T.n; r++) {
    int h = 0;
    while (h < T.nhosts && keys[h] != keys[r])
      h++;
    if (h == T.nhosts)
      keys[T.nhosts++] = keys[r]; /* keys[0..nhosts) becomes the host list */
    T.host[r] = h;
    count[h]++;
  }
  T.even = 1;
  for (int h = 1; h < T.nhosts; h++)
    if (count[h] != count[0])
      T.even = 0;

  int nh = -1, lr = -1, ls = -1, my_lr = 0;
  for (int r = 0; r < T.rank; r++)
    my_lr += T.host[r] == T.host[T.rank];
  must(sharc_comm_nhosts(T.comm, &nh), T.comm, "sharc_comm_nhosts");
  must(sharc_comm_local_rank(T.comm, &lr), T.comm, "sharc_comm_local_rank");
  must(sharc_comm_local_size(T.comm, &ls), T.comm, "sharc_comm_local_size");
  check(nh == T.nhosts, "sharc_comm_nhosts %d, the test sees %d hosts", nh,
        T.nhosts);
  check(ls == count[T.host[T.rank]],
        "sharc_comm_local_size %d, the test sees %d ranks on this host", ls,
        count[T.host[T.rank]]);
  check(lr == my_lr, "sharc_comm_local_rank %d, the test expects %d", lr,
        my_lr);
  free(keys), free(count);
  return !T.dead;
}

/* ---- one layout ---- */

/* Expected groups of this rank for group size g (0: per host). members
 * receive world ranks in group-rank order, *ns and *nr their counts. */
static void expected(int g, int *shard, int *ns, int *my_s, int *rep, int *nr,
                     int *my_r) {
  *ns = *nr = 0;
  if (g > 0) {
    int blk = T.rank / g, pos = T.rank % g;
    for (int i = 0; i < g; i++)
      shard[(*ns)++] = blk * g + i;
    for (int b = 0; b < T.n / g; b++)
      rep[(*nr)++] = b * g + pos;
    *my_s = pos, *my_r = blk;
    return;
  }
  int h = T.host[T.rank], pos = 0;
  for (int r = 0; r < T.n; r++)
    if (T.host[r] == h) {
      if (r == T.rank)
        pos = *ns;
      shard[(*ns)++] = r;
    }
  for (int hh = 0; hh < T.nhosts; hh++) {
    int k = 0;
    for (int r = 0; r < T.n; r++)
      if (T.host[r] == hh && k++ == pos)
        rep[(*nr)++] = r;
  }
  *my_s = pos, *my_r = h;
}

/* Size, rank, member list (all-gather) and an all-reduce on one group. */
static void check_group(sharc_comm_t c, const char *name, int g,
                        const int *want, int nwant, int my) {
  int size = -1, rank = -1;
  if (!must(sharc_comm_size(c, &size), c, "sharc_comm_size") ||
      !must(sharc_comm_rank(c, &rank), c, "sharc_comm_rank"))
    return;
  check(size == nwant, "group_size %d: %s size %d, expected %d", g, name, size,
        nwant);
  check(rank == my, "group_size %d: %s rank %d, expected %d", g, name, rank,
        my);
  if (size != nwant)
    return; /* the collectives below would disagree on sizes */

  int32_t me = T.rank, *got = malloc((size_t)nwant * sizeof *got);
  int64_t *buf = malloc(CNT * sizeof *buf);
  if (!got || !buf) {
    check(0, "out of memory");
    free(got), free(buf);
    return;
  }
  if (must(sharc_all_gather(&me, got, 1, SHARC_I32, c, NULL), c,
           "all_gather of world ranks")) {
    int same = 1;
    for (int i = 0; i < nwant; i++)
      same &= got[i] == want[i];
    check(same,
          "group_size %d: %s members (world ranks) differ from the "
          "expected layout at group rank %d",
          g, name, rank);
  }
  for (int i = 0; i < CNT; i++)
    buf[i] = (int64_t)T.rank * 1000 + i;
  if (must(sharc_all_reduce(buf, buf, CNT, SHARC_I64, SHARC_SUM, c, NULL), c,
           "all_reduce")) {
    int64_t base = 0;
    for (int i = 0; i < nwant; i++)
      base += (int64_t)want[i] * 1000;
    long bad = 0, first = -1;
    for (int i = 0; i < CNT; i++)
      if (buf[i] != base + (int64_t)nwant * i && bad++ == 0)
        first = i;
    check(bad == 0,
          "group_size %d: %s all_reduce: %ld wrong elements, first at %ld "
          "(expected %lld, got %lld)",
          g, name, bad, first,
          (long long)(base + (int64_t)nwant * (first < 0 ? 0 : first)),
          (long long)(first < 0 ? 0 : buf[first]));
  }
  free(got), free(buf);
}

static void check_layout(int g) {
  int *shard = malloc((size_t)T.n * sizeof *shard),
      *rep = malloc((size_t)T.n * sizeof *rep);
  int ns, nr, my_s, my_r;
  if (!shard || !rep) {
    check(0, "out of memory");
    free(shard), free(rep);
    return;
  }
  expected(g, shard, &ns, &my_s, rep, &nr, &my_r);
  sharc_comm_t sc = NULL, rc = NULL;
  sharc_status_t st = sharc_comm_split_hsdp(T.comm, g, &sc, &rc);
  char what[64];
  snprintf(what, sizeof what, "sharc_comm_split_hsdp(group_size %d)", g);
  if (must(st, T.comm, what)) {
    check(sc && rc, "%s returned shard %p, replicate %p", what, (void *)sc,
          (void *)rc);
    if (sc && rc) {
      check_group(sc, "shard", g, shard, ns, my_s);
      if (!T.dead)
        check_group(rc, "replicate", g, rep, nr, my_r);
      /* both in use at once: the shard all-reduce result feeds the
       * replicate one (a gradient step of HSDP), sum over the world */
      int64_t x = T.rank;
      if (!T.dead &&
          must(sharc_all_reduce(&x, &x, 1, SHARC_I64, SHARC_SUM, sc, NULL), sc,
               "shard all_reduce") &&
          must(sharc_all_reduce(&x, &x, 1, SHARC_I64, SHARC_SUM, rc, NULL), rc,
               "replicate all_reduce"))
        check(x == (int64_t)T.n * (T.n - 1) / 2,
              "group_size %d: shard then replicate all_reduce gives %lld, "
              "expected the world sum %lld",
              g, (long long)x, (long long)T.n * (T.n - 1) / 2);
    }
    if (T.dead) { /* peers may still be inside: do not wait for them */
      sharc_comm_abort(rc);
      sharc_comm_abort(sc);
    } else {
      check(sharc_comm_destroy(rc) == SHARC_OK, "destroy replicate comm: %s",
            sharc_comm_last_error(NULL));
      check(sharc_comm_destroy(sc) == SHARC_OK, "destroy shard comm: %s",
            sharc_comm_last_error(NULL));
    }
    if (T.rank == 0 && !T.dead)
      printf("hsdp_check: group_size %d: %d shard groups of %d, %d replicate "
             "groups of %d\n",
             g, nr, ns, ns, nr);
  }
  free(shard), free(rep);
}

/* A size that cannot work: INVALID_ARG with a message, no communicators. */
static void check_invalid(int g) {
  sharc_comm_t sc = NULL, rc = NULL;
  sharc_status_t st = sharc_comm_split_hsdp(T.comm, g, &sc, &rc);
  const char *msg = sharc_comm_last_error(T.comm);
  check(st == SHARC_ERR_INVALID_ARG,
        "sharc_comm_split_hsdp(group_size %d) on %d ranks%s returned %s, "
        "expected SHARC_ERR_INVALID_ARG",
        g, T.n, g == 0 ? " with uneven hosts" : "", sharc_status_name(st));
  check(sc == NULL && rc == NULL,
        "failed sharc_comm_split_hsdp(group_size %d) returned communicators",
        g);
  char num[16];
  snprintf(num, sizeof num, "%d", g);
  check(msg && *msg && (g == 0 || strstr(msg, num)),
        "sharc_comm_split_hsdp(group_size %d): message '%s' should say what "
        "does not fit, naming the size",
        g, msg ? msg : "(null)");
  if (T.rank == 0 && st == SHARC_ERR_INVALID_ARG)
    printf("hsdp_check: group_size %d refused as expected: %s\n", g,
           msg ? msg : "");
  if (st == SHARC_OK) { /* do not leak what should not exist */
    sharc_comm_destroy(rc);
    sharc_comm_destroy(sc);
  }
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  sharc_status_t st = sharc_comm_init_env(&T.comm);
  if (st != SHARC_OK) {
    printf("hsdp_check: sharc_comm_init_env: %s: %s\n", sharc_status_name(st),
           sharc_last_error());
    return 2;
  }
  must(sharc_comm_rank(T.comm, &T.rank), T.comm, "sharc_comm_rank");
  must(sharc_comm_size(T.comm, &T.n), T.comm, "sharc_comm_size");
  if (!T.dead && T.n >= 1 && find_hosts()) {
    if (T.rank == 0)
      printf("hsdp_check: %d ranks on %d host(s)%s\n", T.n, T.nhosts,
             T.even ? "" : " of different sizes");
    for (int g = 1; g <= T.n && !T.dead; g++)
      if (T.n % g == 0)
        check_layout(g);
    if (!T.dead) {
      if (T.even)
        check_layout(0);
      else
        check_invalid(0);
    }
    int bad[] = {-1, T.n + 1, 2 * T.n, 0, 0};
    int nbad = 3;
    for (int g = 2; g < T.n && nbad < 5; g++)
      if (T.n % g)
        bad[nbad++] = g; /* the first two non-divisors below n */
    for (int i = 0; i < nbad && !T.dead; i++)
      if (i != 2 || bad[2] != bad[1]) /* n = 1: n + 1 == 2n */
        check_invalid(bad[i]);
    /* after the refusals the world communicator must still work */
    int64_t one = 1;
    if (!T.dead && must(sharc_all_reduce(&one, &one, 1, SHARC_I64, SHARC_SUM,
                                         T.comm, NULL),
                        T.comm, "world all_reduce after the refused splits"))
      check(one == T.n, "world all_reduce after the refused splits: %lld",
            (long long)one);
  }

  if (T.dead) {
    printf("hsdp_check: rank %d stopped after a failed collective: %ld "
           "passed, %ld failed\n",
           T.rank, T.pass, T.fail);
    sharc_comm_abort(T.comm);
    free(T.host);
    return 1;
  }
  int64_t tot[2] = {T.pass, T.fail};
  if (T.fail)
    printf("hsdp_check: rank %d: %ld passed, %ld failed\n", T.rank, T.pass,
           T.fail);
  st = sharc_all_reduce(tot, tot, 2, SHARC_I64, SHARC_SUM, T.comm, NULL);
  int rc = T.fail ? 1 : 0;
  if (st != SHARC_OK) {
    printf("hsdp_check: summary all_reduce failed: %s: %s\n",
           sharc_status_name(st), sharc_comm_last_error(T.comm));
    sharc_comm_abort(T.comm);
    free(T.host);
    return 1;
  }
  if (T.rank == 0)
    printf("hsdp_check: %lld passed, %lld failed (checks summed over %d "
           "ranks)\n",
           (long long)tot[0], (long long)tot[1], T.n);
  if (tot[1])
    rc = 1;
  if (sharc_comm_destroy(T.comm) != SHARC_OK) {
    printf("hsdp_check: sharc_comm_destroy: %s\n", sharc_last_error());
    rc = 1;
  }
  free(T.host);
  return rc;
}

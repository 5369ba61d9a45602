/*
 * comm.c - communicators: creation from the environment or a unique id,
 * split, destroy, abort, queries and error messages.
 *
 * Creation: open this rank's data listener on the interface that reaches
 * the rendezvous, rendezvous (bootstrap.c) to learn every rank's host and
 * address, group ranks by host, give each peer a transport (shm on the same
 * host unless SHARC_TRANSPORT names a network transport, SHARC_NET (tcp or
 * ib) otherwise), and set the transports up. Split exchanges (color, key,
 * listener port) with an all-gather on the parent and builds the child the
 * same way, without a new rendezvous.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "coll.h"
#include "comm.h"
#include "exec.h" /* exec_host_cpus */
#include "fault.h"
#include "gpu.h" /* gpu_comm_release */
#include "place.h"
#include "registry.h"
#include "schedule.h"

sharc_status_t comm_cfg_load(comm_cfg_t *cfg) {
  cfg->timeout_ns = timeout_ns();
  size_t slice = (size_t)SHARC_MAX(param_int(PARAM_SLICE_BYTES), 4096);
  cfg->slice = slice - slice % 64;
  cfg->spin = SHARC_MAX(param_int(PARAM_SPIN), 0);
  cfg->alpha_us = (double)param_int(PARAM_ALPHA_US);
  cfg->beta_gbs = (double)param_int(PARAM_BETA_GBS);
  if (cfg->alpha_us <= 0)
    cfg->alpha_us = 4;
  if (cfg->beta_gbs <= 0)
    cfg->beta_gbs = 5;
  cfg->net_alpha_us = (double)param_int(PARAM_NET_ALPHA_US);
  cfg->net_beta_gbs = (double)param_int(PARAM_NET_BETA_GBS);
  if (cfg->net_alpha_us <= 0)
    cfg->net_alpha_us = 20;
  if (cfg->net_beta_gbs <= 0)
    cfg->net_beta_gbs = 1;
  cfg->tree_max = param_int(PARAM_TREE_MAX_BYTES);
  cfg->check = param_int(PARAM_CHECK) != 0;
  const char *a = param_str(PARAM_ALGO);
  cfg->algo = !strcasecmp(a, "auto")   ? COMM_ALGO_AUTO
              : !strcasecmp(a, "tree") ? COMM_ALGO_TREE_FAMILY
                                       : -3;
  for (int i = 0; i < SCHED_ALGO_COUNT && cfg->algo == -3; i++)
    if (!strcasecmp(a, sched_algo_name((sched_algo_t)i)))
      cfg->algo = i;
  if (cfg->algo == -3)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "SHARC_ALGO=%s unknown; use auto, ring, tree, "
                   "rabenseifner, dbtree, hier, direct or bruck",
                   a);
  return SHARC_OK;
}

static struct sharc_comm *comm_alloc(void) {
  struct sharc_comm *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  pthread_mutex_init(&c->err_lock, NULL);
  pthread_mutex_init(&c->order_lock, NULL);
  pthread_cond_init(&c->order_cond, NULL);
  c->wake = &c->wake_private;
  c->progress = c->progress_private;
  c->listen_fd = -1;
  c->notify_abort = transport_notify_abort_all;
  return c;
}

static void comm_free(struct sharc_comm *c) {
  if (!c)
    return;
  rec_unregister(&c->rec);
  gpu_comm_release(c);
  uint64_t deadline = time_ns() + SHARC_MIN(timeout_ns(), 10000000000ull);
  transport_teardown_all(c, deadline);
  if (c->listen_fd >= 0)
    close(c->listen_fd);
  free(c->peers);
  free(c->local_ranks);
  free(c->host_of);
  free(c->ring_order);
  free(c->tp);
  free(c->conns);
  free(c->tmp);
  sched_cache_free(&c->sched_cache);
  pthread_mutex_destroy(&c->err_lock);
  pthread_mutex_destroy(&c->order_lock);
  pthread_cond_destroy(&c->order_cond);
  free(c);
}

/* Ranks per host and the topology ring order (topo/place.h); the order is
 * kept only when it differs from the rank order. */
static sharc_status_t comm_place(struct sharc_comm *c) {
  int n = c->nranks;
  topo_loc_t *loc = calloc((size_t)n, sizeof *loc);
  int *order = malloc((size_t)n * sizeof *order);
  int *cnt = calloc((size_t)c->nhosts, sizeof *cnt);
  if (!loc || !order || !cnt) {
    free(loc);
    free(order);
    free(cnt);
    return comm_error(c, SHARC_ERR_NO_MEM, "init: out of memory for %d ranks",
                      n);
  }
  c->local_max = 0;
  for (int r = 0; r < n; r++) {
    loc[r] = (topo_loc_t){c->host_of[r], -1, -1, -1, -1};
    if (++cnt[c->host_of[r]] > c->local_max)
      c->local_max = cnt[c->host_of[r]];
  }
  /* from the rank table alone, so that every rank decides the same */
  c->oversubscribed = 0;
  for (int r = 0; r < n; r++)
    if (c->peers[r].cpus > 0 && cnt[c->host_of[r]] > c->peers[r].cpus)
      c->oversubscribed = 1;
  place_ring_order(n, loc, order);
  int identity = 1;
  for (int i = 0; i < n && identity; i++)
    identity = order[i] == i;
  if (identity) {
    free(order);
    order = NULL;
  }
  c->ring_order = order;
  free(loc);
  free(cnt);
  return SHARC_OK;
}

/* Everything after the rank table is known: hosts, transports, setup. */
static sharc_status_t comm_setup(struct sharc_comm *c) {
  int n = c->nranks;
  c->local_ranks = malloc((size_t)n * sizeof(int));
  c->host_of = malloc((size_t)n * sizeof(int));
  c->tp = calloc((size_t)n, sizeof *c->tp);
  uint64_t *hosts = malloc((size_t)n * sizeof(uint64_t));
  if (!c->local_ranks || !c->host_of || !c->tp || !hosts) {
    free(hosts);
    return comm_error(c, SHARC_ERR_NO_MEM, "init: out of memory for %d ranks",
                      n);
  }
  c->nhosts = 0;
  c->local_size = 0;
  for (int r = 0; r < n; r++) {
    int h;
    for (h = 0; h < c->nhosts && hosts[h] != c->peers[r].host_hash; h++) {
    }
    if (h == c->nhosts)
      hosts[c->nhosts++] = c->peers[r].host_hash;
    c->host_of[r] = h;
  }
  free(hosts);
  CHECK(comm_place(c));
  /* A network transport named in SHARC_TRANSPORT carries every pair (for
   * one-host tests); auto uses SHARC_NET between hosts only. */
  const char *tps = param_str(PARAM_TRANSPORT), *nets = param_str(PARAM_NET);
  const transport_t *local = transport_local();
  const transport_t *forced = transport_find(tps, TRANSPORT_NET);
  int force_net = forced != NULL;
  char names[64];
  if (!force_net && strcasecmp(tps, "auto") && strcasecmp(tps, local->name))
    return comm_error(c, SHARC_ERR_INVALID_ARG,
                      "init: SHARC_TRANSPORT=%s unknown; use auto, %s, %s", tps,
                      local->name,
                      transport_names(TRANSPORT_NET, names, sizeof names));
  const transport_t *net =
      forced ? forced : transport_find(nets, TRANSPORT_NET);
  if (!net)
    return comm_error(c, SHARC_ERR_INVALID_ARG,
                      "init: SHARC_NET=%s unknown; use %s", nets,
                      transport_names(TRANSPORT_NET, names, sizeof names));
  int need_net = 0;
  for (int r = 0; r < n; r++) {
    int same = c->host_of[r] == c->host_of[c->rank];
    if (same && !force_net) {
      if (r == c->rank)
        c->local_rank = c->local_size;
      c->local_ranks[c->local_size++] = r;
      c->tp[r] = fault_wrap(local);
    } else {
      c->tp[r] = fault_wrap(net);
      need_net = 1;
    }
  }
  if (force_net) { /* the local group is just us */
    c->local_rank = 0;
    c->local_size = 1;
    c->local_ranks[0] = c->rank;
    c->tp[c->rank] = fault_wrap(local);
  }
  int64_t nch = param_int(PARAM_NCHANNELS);
  c->nchan = (int)SHARC_MIN(SHARC_MAX(nch, 1), 16);
  c->conns = calloc((size_t)n * (size_t)c->nchan * 2, sizeof *c->conns);
  if (!c->conns)
    return comm_error(c, SHARC_ERR_NO_MEM,
                      "init: out of memory for the connections of %d ranks", n);
  if (c->local_size > 1)
    CHECK(local->setup(c));
  if (need_net)
    CHECK(net->setup(c));
  INFO(SUB_INIT,
       "comm %016llx: rank %d of %d, local %d of %d, %d hosts, %s%s%s",
       (unsigned long long)c->uid, c->rank, c->nranks, c->local_rank,
       c->local_size, c->nhosts, need_net ? net->name : "", need_net ? "+" : "",
       local->name);
  return SHARC_OK;
}

static sharc_status_t comm_create(bootstrap_env_t *env, sharc_comm_t *out) {
  sharc_status_t st = SHARC_OK;
  comm_cfg_t cfg;
  CHECK(comm_cfg_load(&cfg));
  CHECK(fault_init(env->rank)); /* SHARC_FAULT (tests only) */
  struct sharc_comm *c = comm_alloc();
  if (!c)
    return err_set(SHARC_ERR_NO_MEM, "init: out of memory");
  c->cfg = cfg;
  c->rank = env->rank;
  c->nranks = env->nranks;
  memcpy(c->token, env->token, sizeof c->token);
  log_set_rank(env->rank);
  if (env->host_root)
    CHECK_GOTO(bootstrap_root_start(env), st, fail);
  net_addr_t local;
  CHECK_GOTO(bootstrap_local_addr(env, &local), st, fail);
  net_addr_set_port(&local, 0);
  CHECK_GOTO(net_listen(&local, 256, &c->listen_fd, &c->listen_addr), st, fail);
  peer_info_t mine;
  memset(&mine, 0, sizeof mine);
  mine.host_hash = host_identity();
  snprintf(mine.host, sizeof mine.host, "%s", host_name());
  mine.pid = (int32_t)getpid();
  mine.rank = env->rank;
  mine.addr = c->listen_addr;
  mine.cpus = exec_host_cpus();
  c->peers = calloc((size_t)env->nranks, sizeof *c->peers);
  if (!c->peers) {
    st = err_set(SHARC_ERR_NO_MEM, "init: out of memory for %d ranks",
                 env->nranks);
    goto fail;
  }
  CHECK_GOTO(bootstrap_rendezvous(env, &mine, c->peers), st, fail);
  /* Same on every rank, different for every communicator instance. */
  uint64_t h = hash_bytes(HASH_BASIS, c->token, sizeof c->token);
  h = hash_bytes(h, &c->peers[0].pid, sizeof c->peers[0].pid);
  h = hash_bytes(h, &c->peers[0].host_hash, sizeof c->peers[0].host_hash);
  int port0 = net_addr_port(&c->peers[0].addr);
  c->uid = hash_bytes(h, &port0, sizeof port0);
  rec_init(&c->rec, c->uid, c->rank, c->nranks, c->peers, &c->seq);
  CHECK_GOTO(comm_setup(c), st, fail);
  rec_register(&c->rec);
  *out = c;
  return SHARC_OK;
fail:
  comm_free(c);
  return st;
}

sharc_status_t sharc_comm_init_env(sharc_comm_t *comm) {
  if (!comm)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_comm_init_env: comm is NULL");
  *comm = NULL;
  bootstrap_env_t env;
  CHECK(bootstrap_env_read(&env));
  INFO(SUB_INIT, "init from %s: rank %d of %d, rendezvous %s:%d", env.source,
       env.rank, env.nranks, env.root_host, env.root_port);
  return comm_create(&env, comm);
}

sharc_status_t sharc_get_unique_id(sharc_unique_id_t *id) {
  if (!id)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_get_unique_id: id is NULL");
  return bootstrap_unique_id_create(id);
}

sharc_status_t sharc_comm_init_rank(sharc_comm_t *comm, int nranks,
                                    const sharc_unique_id_t *id, int rank) {
  if (!comm)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_comm_init_rank: comm is NULL");
  *comm = NULL;
  if (!id)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_comm_init_rank: id is NULL");
  if (nranks < 1)
    return err_set(
        SHARC_ERR_INVALID_ARG,
        "sharc_comm_init_rank: nranks %d; pass the number of ranks (>= 1)",
        nranks);
  if (rank < 0 || rank >= nranks)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "sharc_comm_init_rank: rank %d outside [0, %d)", rank,
                   nranks);
  bootstrap_env_t env;
  memset(&env, 0, sizeof env);
  CHECK(bootstrap_unique_id_parse(id, &env));
  env.rank = rank;
  env.nranks = nranks;
  env.local_rank = env.local_size = -1;
  env.host_root = 0; /* the root thread runs where the id was made */
  env.source = "unique id";
  return comm_create(&env, comm);
}

typedef struct {
  int32_t color, key, port, pad;
} split_info_t;

/* Orders the members of a split by (key, parent rank). Insertion sort:
 * n is small and this stays free of global state. */
static void sort_members(int *m, int n, const split_info_t *info) {
  for (int i = 1; i < n; i++) {
    int v = m[i], j = i - 1;
    while (j >= 0 && (info[m[j]].key > info[v].key ||
                      (info[m[j]].key == info[v].key && m[j] > v))) {
      m[j + 1] = m[j];
      j--;
    }
    m[j + 1] = v;
  }
}

sharc_status_t sharc_comm_split(sharc_comm_t comm, int color, int key,
                                sharc_comm_t *newcomm) {
  if (!comm)
    return err_set(SHARC_ERR_INVALID_ARG, "sharc_comm_split: comm is NULL");
  if (!newcomm)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "sharc_comm_split: newcomm is NULL");
  *newcomm = NULL;
  if (color < 0 && color != SHARC_SPLIT_NOCOLOR)
    return comm_error(
        comm, SHARC_ERR_INVALID_ARG,
        "sharc_comm_split: color %d; use >= 0 or SHARC_SPLIT_NOCOLOR", color);
  sharc_status_t st = SHARC_OK;
  struct sharc_comm *c = NULL;
  split_info_t *all = NULL;
  int *members = NULL;
  int lfd = -1;
  net_addr_t laddr;
  if (color >= 0) {
    net_addr_t local = comm->peers[comm->rank].addr;
    net_addr_set_port(&local, 0);
    CHECK(net_listen(&local, 256, &lfd, &laddr));
  }
  split_info_t mine = {color, key, color >= 0 ? net_addr_port(&laddr) : 0, 0};
  all = calloc((size_t)comm->nranks, sizeof *all);
  members = malloc((size_t)comm->nranks * sizeof *members);
  if (!all || !members) {
    st = comm_error(comm, SHARC_ERR_NO_MEM, "split: out of memory");
    goto done;
  }
  /* split_info_t is 4 int32s: exchange as int32 elements. */
  CHECK_GOTO(sharc_all_gather(&mine, all, 4, SHARC_I32, comm, NULL), st, done);
  uint64_t split_no = comm->nsplit++;
  if (color < 0)
    goto done;
  int n = 0;
  for (int r = 0; r < comm->nranks; r++)
    if (all[r].color == color)
      members[n++] = r;
  sort_members(members, n, all);
  c = comm_alloc();
  if (!c) {
    st = comm_error(comm, SHARC_ERR_NO_MEM, "split: out of memory");
    goto done;
  }
  c->cfg = comm->cfg;
  c->nranks = n;
  memcpy(c->token, comm->token, sizeof c->token);
  c->peers = calloc((size_t)n, sizeof *c->peers);
  if (!c->peers) {
    st = comm_error(comm, SHARC_ERR_NO_MEM, "split: out of memory");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    int pr = members[i];
    if (pr == comm->rank)
      c->rank = i;
    c->peers[i] = comm->peers[pr];
    c->peers[i].rank = i;
    net_addr_set_port(&c->peers[i].addr, all[pr].port);
  }
  uint64_t h = hash_bytes(comm->uid, &split_no, sizeof split_no);
  c->uid = hash_bytes(h, &color, sizeof color);
  c->listen_fd = lfd;
  c->listen_addr = laddr;
  lfd = -1;
  rec_init(&c->rec, c->uid, c->rank, c->nranks, c->peers, &c->seq);
  CHECK_GOTO(comm_setup(c), st, done);
  rec_register(&c->rec);
  *newcomm = c;
  c = NULL;
done:
  if (lfd >= 0)
    close(lfd);
  if (c)
    comm_free(c);
  free(all);
  free(members);
  return st;
}

sharc_status_t sharc_comm_split_hsdp(sharc_comm_t comm, int group_size,
                                     sharc_comm_t *shard,
                                     sharc_comm_t *replicate) {
  static const char fn[] = "sharc_comm_split_hsdp";
  if (!comm)
    return err_set(SHARC_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  if (!shard || !replicate)
    return comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: output pointer for the %s group is NULL", fn,
                      !shard ? "shard" : "replicate");
  *shard = *replicate = NULL;
  int n = comm->nranks;
  int32_t *gs = malloc((size_t)n * sizeof *gs);
  int *col = malloc((size_t)n * 4 * sizeof *col);
  sharc_status_t st = SHARC_OK;
  if (!gs || !col) {
    st = comm_error(comm, SHARC_ERR_NO_MEM, "%s: out of memory", fn);
    goto done;
  }
  /* Every rank must ask for the same layout; say who differs. */
  int32_t mine = group_size;
  CHECK_GOTO(sharc_all_gather(&mine, gs, 1, SHARC_I32, comm, NULL), st, done);
  for (int r = 1; r < n; r++)
    if (gs[r] != gs[0]) {
      st = comm_error(comm, SHARC_ERR_INVALID_ARG,
                      "%s: ranks disagree on group_size (rank 0 passed %d, "
                      "rank %d passed %d); pass the same value everywhere",
                      fn, (int)gs[0], r, (int)gs[r]);
      goto done;
    }
  char why[256];
  int *sc = col, *sk = col + n, *rc = col + 2 * n, *rk = col + 3 * n;
  if (place_hsdp(n, comm->host_of, group_size, sc, sk, rc, rk, why,
                 sizeof why)) {
    st = comm_error(comm, SHARC_ERR_INVALID_ARG, "%s: %s", fn, why);
    goto done;
  }
  int me = comm->rank;
  CHECK_GOTO(sharc_comm_split(comm, sc[me], sk[me], shard), st, done);
  st = sharc_comm_split(comm, rc[me], rk[me], replicate);
  if (st != SHARC_OK) {
    sharc_comm_destroy(*shard);
    *shard = NULL;
  }
done:
  free(gs);
  free(col);
  return st;
}

sharc_status_t sharc_comm_destroy(sharc_comm_t comm) {
  if (!comm)
    return SHARC_OK;
  coll_drain(comm);
  comm_free(comm);
  return SHARC_OK;
}

sharc_status_t sharc_comm_abort(sharc_comm_t comm) {
  if (!comm)
    return SHARC_OK;
  comm_fail(comm, comm->rank, SHARC_ERR_ABORTED,
            "the communicator was aborted by sharc_comm_abort");
  coll_drain(comm); /* queued work fails fast once the comm failed */
  comm_free(comm);
  return SHARC_OK;
}

#define QUERY(fn, field)                                                       \
  sharc_status_t fn(sharc_comm_t comm, int *out) {                             \
    if (!comm)                                                                 \
      return err_set(SHARC_ERR_INVALID_ARG, #fn ": comm is NULL");             \
    if (!out)                                                                  \
      return comm_error(comm, SHARC_ERR_INVALID_ARG,                           \
                        #fn ": output pointer is NULL");                       \
    *out = comm->field;                                                        \
    return SHARC_OK;                                                           \
  }
QUERY(sharc_comm_rank, rank)
QUERY(sharc_comm_size, nranks)
QUERY(sharc_comm_local_rank, local_rank)
QUERY(sharc_comm_local_size, local_size)
QUERY(sharc_comm_nhosts, nhosts)
#undef QUERY

const char *sharc_last_error(void) { return err_last(); }

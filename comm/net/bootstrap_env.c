/*
 * bootstrap_env.c - who am I and where is the rendezvous: the launcher
 * environments (SHARC_*, torchrun, Slurm, Open MPI, MPICH's Hydra) in
 * order, Slurm node lists, the job token, and the host identity.
 */
#include "bootstrap_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net.h"

const char *const bootstrap_env_vars[] = {"SHARC_RANK",
                                          "SHARC_WORLD_SIZE",
                                          "SHARC_ADDR",
                                          "SHARC_LOCAL_RANK",
                                          "SHARC_LOCAL_SIZE",
                                          "SHARC_TOKEN",
                                          "SHARC_PORT",
                                          "SHARC_SOCKET_IFNAME",
                                          "SHARC_HOSTID",
                                          "RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "TORCHELASTIC_RUN_ID",
                                          "SLURM_PROCID",
                                          "SLURM_NTASKS",
                                          "SLURM_NPROCS",
                                          "SLURM_LOCALID",
                                          "SLURM_NTASKS_PER_NODE",
                                          "SLURM_STEP_NODELIST",
                                          "SLURM_JOB_NODELIST",
                                          "SLURM_NODELIST",
                                          "SLURM_JOB_ID",
                                          "SLURM_STEP_ID",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "OMPI_MCA_ess_base_jobid",
                                          "PMIX_NAMESPACE",
                                          "PMI_RANK",
                                          "PMI_SIZE",
                                          "MPI_LOCALRANKID",
                                          "MPI_LOCALNRANKS",
                                          NULL};

/* ---- hashing and host identity ---- */

static uint64_t fnv_str(uint64_t h, const char *s) {
  return hash_bytes(h, s, strlen(s) + 1); /* include the NUL as a separator */
}

uint64_t host_identity(void) {
  const char *id = param_str(PARAM_HOSTID);
  if (*id)
    return fnv_str(HASH_BASIS, id);
  uint64_t h = fnv_str(HASH_BASIS, host_name());
  char boot[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
  if (f) {
    if (!fgets(boot, sizeof boot, f))
      boot[0] = '\0';
    fclose(f);
  }
  h = fnv_str(h, boot);
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) {
    uint64_t ns[2] = {(uint64_t)st.st_dev, (uint64_t)st.st_ino};
    h = hash_bytes(h, ns, sizeof ns);
  }
  return h;
}

/* ---- launcher environment ---- */

static const char *ev(const char *name) {
  const char *v = getenv(name);
  return (v && *v) ? v : NULL;
}

/* Parses variable `name` as an integer in [lo, hi]. */
static sharc_status_t env_int(const char *name, const char *what, long lo,
                              long hi, int *out) {
  const char *v = ev(name);
  char *end = NULL;
  errno = 0;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || errno || end == v || *end)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "bootstrap: %s=%s is not an integer; set it to %s", name,
                   v ? v : "", what);
  if (x < lo || x > hi)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "bootstrap: %s=%ld is out of range %ld..%ld; set it to %s",
                   name, x, lo, hi, what);
  *out = (int)x;
  return SHARC_OK;
}

/* Rank and size (required), local rank and size (optional: -1). */
static sharc_status_t read_ranks(bootstrap_env_t *env, const char *source,
                                 const char *rank, const char *size,
                                 const char *lrank, const char *lsize) {
  env->source = source;
  CHECK(env_int(size, "the number of processes (>= 1)", 1, MAX_RANKS,
                &env->nranks));
  CHECK(env_int(rank, "this process's rank, below the number of processes", 0,
                env->nranks - 1, &env->rank));
  if (lrank && ev(lrank))
    CHECK(env_int(lrank, "the rank among this host's processes", 0, MAX_RANKS,
                  &env->local_rank));
  if (lsize && ev(lsize))
    CHECK(env_int(lsize, "the number of processes on this host", 1, MAX_RANKS,
                  &env->local_size));
  return SHARC_OK;
}

/* The first of vars[] that is unset, or NULL. */
static const char *first_missing(const char *const *vars) {
  for (; *vars; vars++)
    if (!ev(*vars))
      return *vars;
  return NULL;
}

static sharc_status_t incomplete(const char *src, const char *set,
                                 const char *missing, const char *all) {
  return err_set(SHARC_ERR_INVALID_ARG,
                 "bootstrap: %s launch is incomplete: %s is set but %s is "
                 "not; set %s together (or unset %s)",
                 src, set, missing, all, set);
}

static sharc_status_t set_host(bootstrap_env_t *env, const char *var,
                               const char *host) {
  if (strlen(host) >= sizeof env->root_host)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "bootstrap: %s is too long (%zu "
                   "characters)",
                   var, strlen(host));
  strcpy(env->root_host, host);
  return SHARC_OK;
}

static sharc_status_t port_var(const char *var, int *port) {
  return env_int(var, "a free TCP port (1..65535) on rank 0's host", 1, 65535,
                 port);
}

/* SHARC_PORT if set (and not 0), else *port unchanged. */
static sharc_status_t sharc_port(int *port) {
  const char *v = ev("SHARC_PORT");
  if (!v || !strcmp(v, "0"))
    return SHARC_OK;
  return port_var("SHARC_PORT", port);
}

static sharc_status_t parse_token(const char *hex, uint8_t *tok) {
  size_t n = strlen(hex);
  for (size_t i = 0; i < n; i++)
    if (!((hex[i] >= '0' && hex[i] <= '9') ||
          (hex[i] >= 'a' && hex[i] <= 'f') || (hex[i] >= 'A' && hex[i] <= 'F')))
      n = 0;
  if (n != 2 * SHARC_TOKEN_BYTES)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "bootstrap: SHARC_TOKEN=%s is not %d hex digits; pass the "
                   "same token to every rank (sharcrun does) or unset it",
                   hex, 2 * SHARC_TOKEN_BYTES);
  for (int i = 0; i < SHARC_TOKEN_BYTES; i++) {
    unsigned b;
    sscanf(hex + 2 * i, "%2x", &b);
    tok[i] = (uint8_t)b;
  }
  return SHARC_OK;
}

static sharc_status_t env_sharc(bootstrap_env_t *env) {
  static const char *const req[] = {"SHARC_RANK", "SHARC_WORLD_SIZE",
                                    "SHARC_ADDR", NULL};
  const char *miss = first_missing(req);
  if (miss)
    return incomplete("SHARC_*",
                      ev("SHARC_RANK") ? "SHARC_RANK" : "SHARC_WORLD_SIZE",
                      miss, "SHARC_RANK, SHARC_WORLD_SIZE and SHARC_ADDR");
  CHECK(read_ranks(env, "SHARC_*", "SHARC_RANK", "SHARC_WORLD_SIZE",
                   "SHARC_LOCAL_RANK", "SHARC_LOCAL_SIZE"));
  return net_split_hostport(ev("SHARC_ADDR"), "SHARC_ADDR", env->root_host,
                            sizeof env->root_host, &env->root_port);
}

static sharc_status_t env_torchrun(bootstrap_env_t *env) {
  static const char *const req[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR",
                                    "MASTER_PORT", NULL};
  const char *miss = first_missing(req);
  if (miss)
    return incomplete("torchrun-style", ev("RANK") ? "RANK" : "WORLD_SIZE",
                      miss, "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  CHECK(read_ranks(env, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                   "LOCAL_WORLD_SIZE"));
  CHECK(set_host(env, "MASTER_ADDR", ev("MASTER_ADDR")));
  return port_var("MASTER_PORT", &env->root_port);
}

/* Under Slurm the rendezvous is the first host of the step's node list (where
 * srun's block distribution puts rank 0) on SHARC_PORT, else on
 * 29500 + SLURM_JOB_ID % 1000 (two concurrent steps of one job need
 * SHARC_PORT to differ). */
static sharc_status_t env_slurm(bootstrap_env_t *env) {
  const char *ntasks = ev("SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  if (!ev(ntasks))
    return incomplete("Slurm", "SLURM_PROCID", "SLURM_NTASKS",
                      "SLURM_PROCID and SLURM_NTASKS (run under srun)");
  CHECK(
      read_ranks(env, "Slurm", "SLURM_PROCID", ntasks, "SLURM_LOCALID", NULL));
  const char *tpn = ev("SLURM_NTASKS_PER_NODE");
  char *end = NULL;
  long l = tpn ? strtol(tpn, &end, 10) : -1;
  env->local_size =
      (tpn && *end == '\0' && l > 0 && l <= MAX_RANKS) ? (int)l : -1;
  const char *nlvar = ev("SLURM_STEP_NODELIST")  ? "SLURM_STEP_NODELIST"
                      : ev("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST"
                                                 : "SLURM_NODELIST";
  if (!ev(nlvar))
    return err_set(SHARC_ERR_INVALID_ARG,
                   "bootstrap: Slurm launch without SLURM_STEP_NODELIST or "
                   "SLURM_JOB_NODELIST; run under srun, or set SHARC_ADDR, "
                   "SHARC_RANK and SHARC_WORLD_SIZE");
  sharc_status_t st = bootstrap_slurm_first_host(ev(nlvar), env->root_host,
                                                 sizeof env->root_host);
  if (st != SHARC_OK) {
    char why[600];
    snprintf(why, sizeof why, "%s", err_last());
    return err_set(st, "%s=%s: %s", nlvar, ev(nlvar), why);
  }
  env->root_port = 0;
  CHECK(sharc_port(&env->root_port));
  if (env->root_port == 0) {
    int job;
    if (!ev("SLURM_JOB_ID"))
      return err_set(SHARC_ERR_INVALID_ARG,
                     "bootstrap: Slurm launch without SLURM_JOB_ID to derive "
                     "the rendezvous port from; set SHARC_PORT");
    CHECK(env_int("SLURM_JOB_ID", "the Slurm job id", 0, 0x7fffffff, &job));
    env->root_port = 29500 + job % 1000;
  }
  return SHARC_OK;
}

/* An MPI launcher's rendezvous, as it gives none itself: SHARC_ADDR, else
 * MASTER_ADDR with MASTER_PORT/SHARC_PORT; when every rank is on one host
 * (local size == size), 127.0.0.1 on SHARC_PORT or 29500 + job_hash() %
 * 1000, job_hash being what the ranks of one job on one host share. name
 * and the rest say, in messages, how to pass a variable with this launcher. */
typedef struct {
  const char *name;         /* "Open MPI" */
  const char *export_flag;  /* "mpirun -x" */
  const char *addr_example; /* "mpirun -x SHARC_ADDR=node01:29500" */
  const char *across;       /* what else makes local size != size, or "" */
  uint64_t (*job_hash)(void);
} mpi_launcher_t;

static sharc_status_t mpi_rendezvous(bootstrap_env_t *env,
                                     const mpi_launcher_t *l) {
  if (ev("SHARC_ADDR"))
    return net_split_hostport(ev("SHARC_ADDR"), "SHARC_ADDR", env->root_host,
                              sizeof env->root_host, &env->root_port);
  env->root_port = 0;
  if (ev("MASTER_ADDR")) {
    CHECK(set_host(env, "MASTER_ADDR", ev("MASTER_ADDR")));
    if (ev("MASTER_PORT"))
      return port_var("MASTER_PORT", &env->root_port);
    CHECK(sharc_port(&env->root_port));
    if (env->root_port == 0)
      return err_set(SHARC_ERR_INVALID_ARG,
                     "bootstrap: %s launch with MASTER_ADDR=%s but no port; "
                     "set MASTER_PORT or SHARC_PORT (%s ...)",
                     l->name, env->root_host, l->export_flag);
    return SHARC_OK;
  }
  if (env->local_size != env->nranks)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "bootstrap: %s launch across hosts%s has no rendezvous "
                   "address; set SHARC_ADDR=host:port (the host of rank 0), "
                   "e.g. %s, or MASTER_ADDR and MASTER_PORT",
                   l->name, l->across, l->addr_example);
  strcpy(env->root_host, "127.0.0.1");
  CHECK(sharc_port(&env->root_port));
  if (env->root_port == 0)
    env->root_port = 29500 + (int)(l->job_hash() % 1000);
  return SHARC_OK;
}

/* Open MPI's job: its jobid (or PMIx namespace); 0 without one. */
static uint64_t ompi_job_hash(void) {
  const char *job = ev("OMPI_MCA_ess_base_jobid");
  if (!job)
    job = ev("PMIX_NAMESPACE");
  return job ? fnv_str(HASH_BASIS, job) : 0;
}

/* Open MPI: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; the
 * rendezvous as mpi_rendezvous says. */
static sharc_status_t env_ompi(bootstrap_env_t *env) {
  if (!ev("OMPI_COMM_WORLD_SIZE"))
    return incomplete("Open MPI", "OMPI_COMM_WORLD_RANK",
                      "OMPI_COMM_WORLD_SIZE", "both (run under mpirun)");
  CHECK(read_ranks(env, "Open MPI", "OMPI_COMM_WORLD_RANK",
                   "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                   "OMPI_COMM_WORLD_LOCAL_SIZE"));
  static const mpi_launcher_t ompi = {"Open MPI", "mpirun -x",
                                      "mpirun -x SHARC_ADDR=node01:29500", "",
                                      ompi_job_hash};
  return mpi_rendezvous(env, &ompi);
}

/* The pid of the hydra_pmi_proxy this process descends from (Hydra starts
 * one proxy per host and the ranks as its children), or 0. Hydra exports
 * no job id; the proxy's pid is what the ranks of one job on one host share
 * and other jobs do not. A few levels up, for ranks started through a
 * wrapper (a shell, valgrind). */
static long hydra_proxy_pid(void) {
  long pid = (long)getppid();
  for (int depth = 0; depth < 4 && pid > 1; depth++) {
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
      return 0;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses */
    char *open = strchr(stat, '('), *close = strrchr(stat, ')');
    if (!open || !close || close < open)
      return 0;
    if (close - open - 1 == 15 && !strncmp(open + 1, "hydra_pmi_proxy", 15))
      return pid;
    char state;
    long ppid;
    if (sscanf(close + 1, " %c %ld", &state, &ppid) != 2)
      return 0;
    pid = ppid;
  }
  return 0;
}

/* Hydra's job on this host: its proxy's pid (Hydra exports no job id). */
static uint64_t hydra_job_hash(void) {
  long proxy = hydra_proxy_pid();
  return hash_bytes(HASH_BASIS, &proxy, sizeof proxy);
}

/* MPICH's (and Intel MPI's) Hydra launcher, mpiexec.hydra: PMI_RANK,
 * PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS; the rendezvous as
 * mpi_rendezvous says. */
static sharc_status_t env_hydra(bootstrap_env_t *env) {
  if (!ev("PMI_SIZE"))
    return incomplete("Hydra (MPICH)", "PMI_RANK", "PMI_SIZE",
                      "both (run under mpiexec)");
  CHECK(read_ranks(env, "Hydra (MPICH)", "PMI_RANK", "PMI_SIZE",
                   "MPI_LOCALRANKID", "MPI_LOCALNRANKS"));
  static const mpi_launcher_t hydra = {
      "Hydra (MPICH)", "mpiexec -genv", "mpiexec -genv SHARC_ADDR node01:29500",
      " (or without MPI_LOCALNRANKS)", hydra_job_hash};
  return mpi_rendezvous(env, &hydra);
}

/* Job identity every rank sees alike, for a token when SHARC_TOKEN is not
 * given. Such a token only keeps other jobs out; it is not a secret. */
static void derive_token(bootstrap_env_t *env) {
  static const char *const ids[] = {
      "TORCHELASTIC_RUN_ID",     "SLURM_JOB_ID",   "SLURM_STEP_ID",
      "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", NULL};
  uint64_t h = fnv_str(HASH_BASIS, env->source);
  h = fnv_str(h, env->root_host);
  h = hash_bytes(h, &env->root_port, sizeof env->root_port);
  for (int i = 0; ids[i]; i++) {
    const char *v = ev(ids[i]);
    h = fnv_str(h, v ? v : "");
  }
  uint64_t h2 = fnv_str(h ^ 0x5348415243ull, "sharc-token");
  memcpy(env->token, &h, 8);
  memcpy(env->token + 8, &h2, 8);
}

sharc_status_t bootstrap_env_read(bootstrap_env_t *env) {
  memset(env, 0, sizeof *env);
  env->local_rank = env->local_size = -1;
  sharc_status_t st;
  if (ev("SHARC_RANK") || ev("SHARC_WORLD_SIZE"))
    st = env_sharc(env);
  else if (ev("RANK") || ev("WORLD_SIZE"))
    st = env_torchrun(env);
  else if (ev("SLURM_PROCID") && !ev("OMPI_COMM_WORLD_RANK") &&
           !ev("MPI_LOCALRANKID"))
    /* mpirun / mpiexec inside an allocation inherits the batch step's
     * SLURM_PROCID; srun --mpi=pmi2 sets PMI_RANK too, but agrees */
    st = env_slurm(env);
  else if (ev("OMPI_COMM_WORLD_RANK"))
    st = env_ompi(env);
  else if (ev("PMI_RANK"))
    st = env_hydra(env);
  else
    return err_set(SHARC_ERR_INVALID_ARG,
                   "no launcher environment found: set SHARC_RANK, "
                   "SHARC_WORLD_SIZE and SHARC_ADDR, or run under sharcrun, "
                   "torchrun, srun, mpirun or mpiexec");
  if (st != SHARC_OK)
    return st;
  if (env->local_rank >= 0 && env->local_size > 0 &&
      env->local_rank >= env->local_size)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "bootstrap: %s launch: local rank %d is not below the local "
                   "size %d; fix the launcher's local rank/size variables",
                   env->source, env->local_rank, env->local_size);
  if (ev("SHARC_TOKEN"))
    CHECK(parse_token(ev("SHARC_TOKEN"), env->token));
  else
    derive_token(env);
  env->host_root = env->rank == 0;
  INFO(SUB_INIT, "bootstrap: %s launch: rank %d of %d, rendezvous %s:%d",
       env->source, env->rank, env->nranks, env->root_host, env->root_port);
  return SHARC_OK;
}

sharc_status_t bootstrap_slurm_first_host(const char *nodelist, char *out,
                                          size_t outlen) {
  size_t o = 0;
  const char *p = nodelist ? nodelist : "";
  /* Copy the first top-level entry; each [..] group becomes its first
   * number, literally (zero padding kept): "n[01-04,07]x" -> "n01x". */
  while (*p && *p != ',') {
    if (*p == '[') {
      const char *q = ++p;
      while (*q >= '0' && *q <= '9')
        q++;
      const char *close = strchr(p, ']');
      if (q == p || !close || (*q != '-' && *q != ',' && *q != ']'))
        return err_set(SHARC_ERR_INVALID_ARG,
                       "bootstrap: Slurm node list '%s' has a malformed range "
                       "near '%s'; set SHARC_ADDR to rank 0's host:port",
                       nodelist, p - 1);
      if (o + (size_t)(q - p) >= outlen)
        goto too_long;
      memcpy(out + o, p, (size_t)(q - p));
      o += (size_t)(q - p);
      p = close + 1;
      continue;
    }
    if (*p == ']')
      break;
    if (o + 1 >= outlen)
      goto too_long;
    out[o++] = *p++;
  }
  if (o == 0 || (*p && *p != ','))
    return err_set(SHARC_ERR_INVALID_ARG,
                   "bootstrap: cannot read the first host of Slurm node list "
                   "'%s'; set SHARC_ADDR to rank 0's host:port",
                   nodelist ? nodelist : "");
  out[o] = '\0';
  return SHARC_OK;
too_long:
  return err_set(SHARC_ERR_INVALID_ARG,
                 "bootstrap: first host of Slurm node list '%s' is too long",
                 nodelist);
}

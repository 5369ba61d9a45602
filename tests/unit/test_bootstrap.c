/*
 * test_bootstrap.c - launcher environment parsing (every source, Hydra's
 * port from its proxy's pid, precedence, errors naming the variable),
 * Slurm node lists, unique ids, and real in-process rendezvous on
 * 127.0.0.1: five ranks as threads, with stray connections beside them,
 * and a timeout naming the missing rank.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap.h"
#include "net.h"

#include "unit/expect.h"
#include "unit/free_port.h"

static void clear_env(void) {
  for (int i = 0; bootstrap_env_vars[i]; i++)
    unsetenv(bootstrap_env_vars[i]);
}

static void set(const char *k, const char *v) { setenv(k, v, 1); }

/* Reads the environment expecting an error that mentions `needle`. */
static void expect_env_error(const char *needle, int line) {
  bootstrap_env_t e;
  sharc_status_t st = bootstrap_env_read(&e);
  if (st == SHARC_ERR_INVALID_ARG && strstr(err_last(), needle)) {
    passed++;
  } else {
    failed++;
    printf("FAIL line %d: expected INVALID_ARG naming '%s', got %s: %s\n", line,
           needle, sharc_status_name(st), err_last());
  }
}
#define ENV_ERROR(needle) expect_env_error(needle, __LINE__)

static void test_env_sharc(void) {
  bootstrap_env_t e, e2;
  clear_env();
  EXPECT(bootstrap_env_read(&e) == SHARC_ERR_INVALID_ARG, "empty env");
  EXPECT(strstr(err_last(), "no launcher environment found: set SHARC_RANK"),
         "%s", err_last());

  set("SHARC_RANK", "1");
  set("SHARC_WORLD_SIZE", "4");
  set("SHARC_ADDR", "127.0.0.1:1234");
  set("SHARC_LOCAL_RANK", "1");
  set("SHARC_LOCAL_SIZE", "2");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK, "%s", err_last());
  EXPECT(e.rank == 1 && e.nranks == 4 && e.local_rank == 1 && e.local_size == 2,
         "%d %d %d %d", e.rank, e.nranks, e.local_rank, e.local_size);
  EXPECT(!strcmp(e.root_host, "127.0.0.1") && e.root_port == 1234, "%s:%d",
         e.root_host, e.root_port);
  EXPECT(!strcmp(e.source, "SHARC_*") && e.host_root == 0, "%s", e.source);
  EXPECT(bootstrap_env_read(&e2) == SHARC_OK &&
             !memcmp(e.token, e2.token, SHARC_TOKEN_BYTES),
         "derived token is deterministic");
  set("SHARC_ADDR", "127.0.0.1:1235");
  EXPECT(bootstrap_env_read(&e2) == SHARC_OK &&
             memcmp(e.token, e2.token, SHARC_TOKEN_BYTES),
         "token depends on the address");
  set("SHARC_TOKEN", "00112233445566778899aabbccddeeFF");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && e.token[0] == 0x00 &&
             e.token[1] == 0x11 && e.token[15] == 0xff,
         "SHARC_TOKEN parsed");
  set("SHARC_TOKEN", "0011");
  ENV_ERROR("SHARC_TOKEN=0011");
  set("SHARC_TOKEN", "zz112233445566778899aabbccddeeff");
  ENV_ERROR("SHARC_TOKEN");
  unsetenv("SHARC_TOKEN");

  set("SHARC_ADDR", "[::1]:29500");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && !strcmp(e.root_host, "::1") &&
             e.root_port == 29500,
         "%s %s:%d", err_last(), e.root_host, e.root_port);
  set("SHARC_ADDR", "localhost");
  ENV_ERROR("SHARC_ADDR=localhost");
  set("SHARC_ADDR", "localhost:70000");
  ENV_ERROR("SHARC_ADDR=localhost:70000");
  set("SHARC_ADDR", "localhost:");
  ENV_ERROR("SHARC_ADDR");
  set("SHARC_ADDR", "localhost:29500");
  set("SHARC_RANK", "abc");
  ENV_ERROR("SHARC_RANK=abc");
  set("SHARC_RANK", "4");
  ENV_ERROR("SHARC_RANK=4");
  set("SHARC_RANK", "-1");
  ENV_ERROR("SHARC_RANK=-1");
  set("SHARC_RANK", "0");
  set("SHARC_WORLD_SIZE", "0");
  ENV_ERROR("SHARC_WORLD_SIZE=0");
  set("SHARC_WORLD_SIZE", "4");
  set("SHARC_LOCAL_RANK", "x");
  ENV_ERROR("SHARC_LOCAL_RANK=x");
  set("SHARC_LOCAL_RANK", "3");
  ENV_ERROR("local rank 3");
  unsetenv("SHARC_LOCAL_RANK");
  unsetenv("SHARC_LOCAL_SIZE");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && e.host_root == 1 &&
             e.local_rank == -1 && e.local_size == -1,
         "rank 0 hosts the root; local unknown");
  unsetenv("SHARC_ADDR");
  ENV_ERROR("SHARC_ADDR");
  set("SHARC_ADDR", "localhost:29500");
  unsetenv("SHARC_WORLD_SIZE");
  ENV_ERROR("SHARC_WORLD_SIZE");
  unsetenv("SHARC_RANK");
  set("SHARC_WORLD_SIZE", "4");
  ENV_ERROR("SHARC_RANK");
}

static void test_env_torchrun(void) {
  bootstrap_env_t e;
  clear_env();
  set("RANK", "2");
  set("WORLD_SIZE", "3");
  set("LOCAL_RANK", "0");
  set("LOCAL_WORLD_SIZE", "1");
  set("MASTER_ADDR", "node7");
  set("MASTER_PORT", "29501");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK, "%s", err_last());
  EXPECT(e.rank == 2 && e.nranks == 3 && e.local_rank == 0 && e.local_size == 1,
         "%d %d", e.rank, e.nranks);
  EXPECT(!strcmp(e.root_host, "node7") && e.root_port == 29501 &&
             !strcmp(e.source, "torchrun"),
         "%s:%d %s", e.root_host, e.root_port, e.source);
  /* SHARC_* wins over torchrun */
  set("SHARC_RANK", "0");
  set("SHARC_WORLD_SIZE", "1");
  set("SHARC_ADDR", "127.0.0.1:5000");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && !strcmp(e.source, "SHARC_*") &&
             e.nranks == 1,
         "precedence SHARC_* > torchrun");
  unsetenv("SHARC_RANK");
  unsetenv("SHARC_WORLD_SIZE");
  unsetenv("SHARC_ADDR");
  /* torchrun wins over Slurm */
  set("SLURM_PROCID", "5");
  set("SLURM_NTASKS", "8");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && !strcmp(e.source, "torchrun"),
         "precedence torchrun > Slurm");
  unsetenv("MASTER_PORT");
  ENV_ERROR("MASTER_PORT");
  set("MASTER_PORT", "abc");
  ENV_ERROR("MASTER_PORT=abc");
  set("MASTER_PORT", "0");
  ENV_ERROR("MASTER_PORT=0");
  set("MASTER_PORT", "29501");
  set("WORLD_SIZE", "two");
  ENV_ERROR("WORLD_SIZE=two");
  set("WORLD_SIZE", "3");
  set("RANK", "3");
  ENV_ERROR("RANK=3");
  unsetenv("RANK");
  ENV_ERROR("RANK");
}

static void test_env_slurm(void) {
  bootstrap_env_t e;
  clear_env();
  set("SLURM_PROCID", "3");
  set("SLURM_NTASKS", "8");
  set("SLURM_LOCALID", "1");
  set("SLURM_NTASKS_PER_NODE", "4");
  set("SLURM_STEP_NODELIST", "gpu[07-08]");
  set("SLURM_JOB_NODELIST", "other[1-9]");
  set("SLURM_JOB_ID", "123456");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK, "%s", err_last());
  EXPECT(e.rank == 3 && e.nranks == 8 && e.local_rank == 1 && e.local_size == 4,
         "%d %d %d %d", e.rank, e.nranks, e.local_rank, e.local_size);
  EXPECT(!strcmp(e.root_host, "gpu07") && e.root_port == 29500 + 456 &&
             !strcmp(e.source, "Slurm"),
         "%s:%d", e.root_host, e.root_port);
  set("SHARC_PORT", "4000");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && e.root_port == 4000, "%d",
         e.root_port);
  set("SHARC_PORT", "99999");
  ENV_ERROR("SHARC_PORT=99999");
  unsetenv("SHARC_PORT");
  unsetenv("SLURM_STEP_NODELIST");
  set("SLURM_NTASKS_PER_NODE", "2(x4)");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && !strcmp(e.root_host, "other1") &&
             e.local_size == -1,
         "%s %d", e.root_host, e.local_size);
  unsetenv("SLURM_JOB_NODELIST");
  ENV_ERROR("SLURM_STEP_NODELIST");
  set("SLURM_JOB_NODELIST", "n[1-");
  ENV_ERROR("SLURM_JOB_NODELIST=n[1-");
  set("SLURM_JOB_NODELIST", "n1");
  unsetenv("SLURM_JOB_ID");
  ENV_ERROR("SHARC_PORT");
  set("SLURM_JOB_ID", "77");
  unsetenv("SLURM_NTASKS");
  ENV_ERROR("SLURM_NTASKS");
  set("SLURM_NTASKS", "8");
  set("SLURM_PROCID", "8");
  ENV_ERROR("SLURM_PROCID=8");
}

static void test_env_ompi(void) {
  bootstrap_env_t e;
  clear_env();
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  set("SLURM_PROCID", "0"); /* mpirun inside an allocation */
  set("SLURM_NTASKS", "1");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK, "%s", err_last());
  EXPECT(!strcmp(e.source, "Open MPI") && e.rank == 1 && e.nranks == 2 &&
             !strcmp(e.root_host, "127.0.0.1") && e.root_port >= 29500 &&
             e.root_port < 30500,
         "%s %d %s:%d", e.source, e.rank, e.root_host, e.root_port);
  set("SHARC_ADDR", "head:4321");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && !strcmp(e.root_host, "head") &&
             e.root_port == 4321,
         "%s:%d", e.root_host, e.root_port);
  unsetenv("SHARC_ADDR");
  set("MASTER_ADDR", "m0");
  ENV_ERROR("MASTER_PORT");
  set("SHARC_PORT", "5555");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && !strcmp(e.root_host, "m0") &&
             e.root_port == 5555,
         "%s:%d", e.root_host, e.root_port);
  unsetenv("MASTER_ADDR");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "1");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  ENV_ERROR("SHARC_ADDR");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  ENV_ERROR("OMPI_COMM_WORLD_SIZE");
}

/* Hydra starts ranks as children of hydra_pmi_proxy: a process renamed so
 * stands in for it, and its child (a rank) must derive the port from the
 * proxy's pid. Returns the port the rank read, or -1. */
static int port_under_fake_proxy(pid_t *proxy) {
  int fd[2];
  if (pipe(fd))
    return -1;
  pid_t p = fork();
  if (p == 0) {
    prctl(PR_SET_NAME, "hydra_pmi_proxy");
    pid_t r = fork();
    if (r == 0) {
      bootstrap_env_t e;
      int port = bootstrap_env_read(&e) == SHARC_OK ? e.root_port : -1;
      ssize_t w = write(fd[1], &port, sizeof port);
      _exit(w == (ssize_t)sizeof port ? 0 : 1);
    }
    int st;
    waitpid(r, &st, 0);
    _exit(0);
  }
  close(fd[1]);
  int port = -1;
  if (read(fd[0], &port, sizeof port) != (ssize_t)sizeof port)
    port = -1;
  close(fd[0]);
  int st;
  waitpid(p, &st, 0);
  *proxy = p;
  return port;
}

static void test_env_hydra(void) {
  bootstrap_env_t e;
  clear_env();
  /* what mpiexec.hydra (MPICH 4.0) sets for rank 1 of 2 on one host */
  set("PMI_RANK", "1");
  set("PMI_SIZE", "2");
  set("MPI_LOCALRANKID", "1");
  set("MPI_LOCALNRANKS", "2");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK, "%s", err_last());
  EXPECT(!strcmp(e.source, "Hydra (MPICH)") && e.rank == 1 && e.nranks == 2 &&
             e.local_rank == 1 && e.local_size == 2 &&
             !strcmp(e.root_host, "127.0.0.1") && e.root_port >= 29500 &&
             e.root_port < 30500 && !e.host_root,
         "%s %d/%d local %d/%d %s:%d", e.source, e.rank, e.nranks, e.local_rank,
         e.local_size, e.root_host, e.root_port);
  /* the port follows the proxy's pid: two jobs on one host differ */
  pid_t proxy = 0;
  int port = port_under_fake_proxy(&proxy);
  long pl = (long)proxy;
  int want = 29500 + (int)(hash_bytes(HASH_BASIS, &pl, sizeof pl) % 1000);
  EXPECT(port == want, "port %d under proxy %ld, want %d", port, pl, want);
  set("SHARC_PORT", "4444");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && e.root_port == 4444, "%d %s",
         e.root_port, err_last());
  unsetenv("SHARC_PORT");
  set("SHARC_ADDR", "head:4321");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && !strcmp(e.root_host, "head") &&
             e.root_port == 4321,
         "%s:%d", e.root_host, e.root_port);
  unsetenv("SHARC_ADDR");
  set("MASTER_ADDR", "m0");
  ENV_ERROR("MASTER_PORT");
  set("MASTER_PORT", "5555");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && !strcmp(e.root_host, "m0") &&
             e.root_port == 5555,
         "%s:%d", e.root_host, e.root_port);
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  /* mpiexec inside a Slurm allocation: the step's SLURM_PROCID is stale */
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "1");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK &&
             !strcmp(e.source, "Hydra (MPICH)") && e.rank == 1,
         "%s %d", e.source, e.rank);
  /* srun --mpi=pmi2 sets PMI_RANK but not MPI_LOCALRANKID: Slurm decides */
  unsetenv("MPI_LOCALRANKID");
  unsetenv("MPI_LOCALNRANKS");
  set("SLURM_PROCID", "1");
  set("SLURM_NTASKS", "2");
  set("SLURM_JOB_NODELIST", "n[1-2]");
  set("SLURM_JOB_ID", "7");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && !strcmp(e.source, "Slurm") &&
             e.rank == 1 && !strcmp(e.root_host, "n1"),
         "%s %d %s", e.source, e.rank, e.root_host);
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
  unsetenv("SLURM_JOB_NODELIST");
  unsetenv("SLURM_JOB_ID");
  /* several hosts (local size below size) need an address */
  set("MPI_LOCALRANKID", "0");
  set("MPI_LOCALNRANKS", "1");
  ENV_ERROR("SHARC_ADDR");
  set("MPI_LOCALNRANKS", "x");
  ENV_ERROR("MPI_LOCALNRANKS=x");
  set("MPI_LOCALNRANKS", "2");
  set("PMI_RANK", "2");
  ENV_ERROR("PMI_RANK=2");
  set("PMI_RANK", "0");
  unsetenv("PMI_SIZE");
  ENV_ERROR("PMI_SIZE");
  /* Open MPI's variables win when both are present */
  set("PMI_SIZE", "2");
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  EXPECT(bootstrap_env_read(&e) == SHARC_OK && !strcmp(e.source, "Open MPI") &&
             e.rank == 1,
         "%s %d %s", e.source, e.rank, err_last());
}

static void test_nodelist(void) {
  static const char *const cases[][2] = {{"node[01-04,07],gpu5", "node01"},
                                         {"a[001-004],b", "a001"},
                                         {"gpu5,node[1-2]", "gpu5"},
                                         {"n[5]", "n5"},
                                         {"r[1-2]n[3-4]", "r1n3"},
                                         {"x[09-10]-ib,y", "x09-ib"},
                                         {"host", "host"},
                                         {"n[7,3-4]", "n7"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char out[64] = "";
    sharc_status_t st =
        bootstrap_slurm_first_host(cases[i][0], out, sizeof out);
    EXPECT(st == SHARC_OK && !strcmp(out, cases[i][1]), "%s -> %s (%s)",
           cases[i][0], out, err_last());
  }
  static const char *const bad[] = {"",      "n[", "n[]", "n[a-b]",
                                    "n[1-2", ",a", "a]"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char out[64];
    EXPECT(bootstrap_slurm_first_host(bad[i], out, sizeof out) ==
               SHARC_ERR_INVALID_ARG,
           "'%s' accepted as '%s'", bad[i], out);
  }
  char small[4];
  EXPECT(bootstrap_slurm_first_host("node[1]", small, sizeof small) ==
             SHARC_ERR_INVALID_ARG,
         "too long for the buffer");
}

static void test_net_misc(void) {
  net_addr_t a;
  char buf[96];
  EXPECT(net_parse_hostport("[::1]:80", "X", &a) == SHARC_OK &&
             a.sa.ss_family == AF_INET6 && net_addr_port(&a) == 80 &&
             !strcmp(net_addr_str(&a, buf, sizeof buf), "[::1]:80"),
         "%s", buf);
  EXPECT(net_parse_hostport("127.0.0.1:9", "X", &a) == SHARC_OK &&
             !strcmp(net_addr_str(&a, buf, sizeof buf), "127.0.0.1:9"),
         "%s", buf);
  EXPECT(net_parse_hostport("127.0.0.1", "MYVAR", &a) ==
                 SHARC_ERR_INVALID_ARG &&
             strstr(err_last(), "MYVAR=127.0.0.1"),
         "%s", err_last());
  EXPECT(net_if_addr("lo", &a) == SHARC_OK &&
             !strcmp(net_addr_str(&a, buf, sizeof buf), "127.0.0.1:0"),
         "%s", buf);
  EXPECT(net_if_addr("=nosuchif0", &a) == SHARC_ERR_NET &&
             strstr(err_last(), "SHARC_SOCKET_IFNAME==nosuchif0"),
         "%s", err_last());
  EXPECT(net_if_addr("^nosuchif", &a) == SHARC_OK, "exclusion matches");
  EXPECT(net_if_addr("=l", &a) == SHARC_ERR_NET, "exact match is exact");
  /* A send to a closed peer is an error, not SIGPIPE. */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
    close(sv[1]);
    char x[64] = {0};
    EXPECT(net_send_all(sv[0], x, sizeof x, time_ns() + 1000000000ull) ==
               SHARC_ERR_NET,
           "send to closed peer");
    EXPECT(net_recv_all(sv[0], x, 1, time_ns() + 1000000000ull) ==
               SHARC_ERR_NET,
           "recv from closed peer");
    close(sv[0]);
  }
  set("SHARC_HOSTID", "a");
  uint64_t ha = host_identity();
  set("SHARC_HOSTID", "b");
  uint64_t hb = host_identity();
  unsetenv("SHARC_HOSTID");
  uint64_t h1 = host_identity(), h2 = host_identity();
  EXPECT(ha != hb && h1 == h2 && h1 != ha, "host identity");
}

typedef struct {
  bootstrap_env_t env;
  sharc_status_t st;
  char err[1024];
  int table_ok;
} rank_arg_t;

static void *rank_main(void *p) {
  rank_arg_t *r = p;
  peer_info_t mine, table[8];
  memset(&mine, 0, sizeof mine);
  mine.host_hash = host_identity();
  snprintf(mine.host, sizeof mine.host, "%s", host_name());
  mine.pid = (int32_t)getpid();
  r->st = bootstrap_local_addr(&r->env, &mine.addr);
  if (r->st == SHARC_OK) {
    net_addr_set_port(&mine.addr, 1000 + r->env.rank);
    r->st = bootstrap_rendezvous(&r->env, &mine, table);
  }
  snprintf(r->err, sizeof r->err, "%s", err_last());
  r->table_ok = r->st == SHARC_OK;
  for (int i = 0; r->st == SHARC_OK && i < r->env.nranks; i++)
    if (table[i].rank != i || net_addr_port(&table[i].addr) != 1000 + i ||
        table[i].pid != mine.pid || table[i].host_hash != mine.host_hash)
      r->table_ok = 0;
  return NULL;
}

/* Runs ranks [0, n) of base's job as threads. Returns the number that
 * succeeded with a correct table. */
static int run_ranks(const bootstrap_env_t *base, int n, rank_arg_t *args,
                     int quiet) {
  pthread_t t[8];
  for (int i = 0; i < n; i++) {
    args[i].env = *base;
    args[i].env.rank = i;
    pthread_create(&t[i], NULL, rank_main, &args[i]);
  }
  int ok = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    ok += args[i].table_ok;
    if (!args[i].table_ok && !quiet)
      printf("  rank %d: %s: %s\n", i, sharc_status_name(args[i].st),
             args[i].err);
  }
  return ok;
}

static void test_unique_id(void) {
  sharc_unique_id_t id, bad;
  bootstrap_env_t e;
  memset(&e, 0, sizeof e);
  EXPECT(bootstrap_unique_id_create(&id) == SHARC_OK, "%s", err_last());
  EXPECT(bootstrap_unique_id_parse(&id, &e) == SHARC_OK && e.root_port > 0 &&
             e.root_host[0],
         "%s", err_last());
  memset(&bad, 0, sizeof bad);
  EXPECT(bootstrap_unique_id_parse(&bad, &e) == SHARC_ERR_INVALID_ARG, "zeros");
  for (int i = 0; i < SHARC_UNIQUE_ID_BYTES; i++)
    bad.internal[i] = (char)(i * 37 + 11);
  EXPECT(bootstrap_unique_id_parse(&bad, &e) == SHARC_ERR_INVALID_ARG,
         "garbage");
  bad = id;
  bad.internal[30] ^= 1;
  EXPECT(bootstrap_unique_id_parse(&bad, &e) == SHARC_ERR_INVALID_ARG &&
             strstr(err_last(), "unique id"),
         "flipped bit: %s", err_last());
  /* Five ranks meet at the id's root, which learns nranks from them. */
  bootstrap_env_t base;
  memset(&base, 0, sizeof base);
  base.nranks = 5;
  EXPECT(bootstrap_unique_id_parse(&id, &base) == SHARC_OK, "parse");
  rank_arg_t args[5];
  EXPECT(run_ranks(&base, 5, args, 0) == 5, "unique id rendezvous of 5");
}

static int raw_connect(int port) {
  net_addr_t a;
  int fd = -1;
  if (net_resolve("127.0.0.1", port, &a) == SHARC_OK)
    net_connect(&a, time_ns() + 2000000000ull, &fd);
  return fd;
}

static void test_rendezvous_with_strays(void) {
  bootstrap_env_t base;
  memset(&base, 0, sizeof base);
  base.nranks = 5;
  base.root_port = free_port();
  base.source = "SHARC_*";
  strcpy(base.root_host, "127.0.0.1");
  random_bytes(base.token, sizeof base.token);
  EXPECT(bootstrap_root_start(&base) == SHARC_OK, "%s", err_last());
  /* A second root on the same port fails clearly. */
  EXPECT(bootstrap_root_start(&base) == SHARC_ERR_NET &&
             strstr(err_last(), "SHARC_ADDR") && strstr(err_last(), "port"),
         "%s", err_last());

  int garbage = raw_connect(base.root_port);
  const char http[] = "GET / HTTP/1.0\r\n\r\n";
  EXPECT(garbage >= 0 && net_send_all(garbage, http, sizeof http - 1,
                                      time_ns() + 1000000000ull) == SHARC_OK,
         "garbage sent");
  int silent = raw_connect(base.root_port);
  EXPECT(silent >= 0, "silent connection");

  peer_info_t mine, table[8];
  memset(&mine, 0, sizeof mine);
  net_resolve("127.0.0.1", 1, &mine.addr);
  bootstrap_env_t wrong = base;
  wrong.rank = 1;
  wrong.token[0] ^= 0x55;
  EXPECT(bootstrap_rendezvous(&wrong, &mine, table) == SHARC_ERR_NET &&
             strstr(err_last(), "token"),
         "wrong token: %s", err_last());
  bootstrap_env_t size6 = base;
  size6.nranks = 6;
  size6.rank = 5;
  EXPECT(bootstrap_rendezvous(&size6, &mine, table) == SHARC_ERR_MISMATCH &&
             strstr(err_last(), "nranks 6"),
         "nranks mismatch: %s", err_last());
  /* The garbage connection was dropped: the root closed it. */
  char c;
  EXPECT(net_recv_all(garbage, &c, 1, time_ns() + 2000000000ull) ==
             SHARC_ERR_NET,
         "garbage connection closed by the root");

  rank_arg_t args[5];
  uint64_t t0 = time_ns();
  EXPECT(run_ranks(&base, 5, args, 0) == 5, "rendezvous of 5 beside strays");
  EXPECT(time_ns() - t0 < 3000000000ull,
         "the silent connection did not delay it");
  close(garbage);
  close(silent);
}

static void test_ipv6(void) {
  net_addr_t a;
  int fd;
  if (net_resolve("::1", 0, &a) != SHARC_OK || net_listen(&a, 1, &fd, NULL)) {
    printf("skip: no IPv6 loopback here\n");
    return;
  }
  close(fd);
  bootstrap_env_t base;
  memset(&base, 0, sizeof base);
  base.nranks = 3;
  base.root_port = free_port();
  strcpy(base.root_host, "::1");
  EXPECT(bootstrap_root_start(&base) == SHARC_OK, "%s", err_last());
  rank_arg_t args[3];
  EXPECT(run_ranks(&base, 3, args, 0) == 3, "IPv6 rendezvous of 3");
  EXPECT(args[0].env.root_port == base.root_port, "port kept");
}

static void test_timeout(void) {
  set("SHARC_TIMEOUT", "2");
  bootstrap_env_t base;
  memset(&base, 0, sizeof base);
  base.nranks = 3;
  base.root_port = free_port();
  strcpy(base.root_host, "127.0.0.1");
  random_bytes(base.token, sizeof base.token);
  EXPECT(bootstrap_root_start(&base) == SHARC_OK, "%s", err_last());
  rank_arg_t args[2];
  uint64_t t0 = time_ns();
  run_ranks(&base, 2, args, 1);
  double s = (double)(time_ns() - t0) / 1e9;
  for (int i = 0; i < 2; i++)
    EXPECT(args[i].st == SHARC_ERR_TIMEOUT && strstr(args[i].err, "rank 2 ") &&
               strstr(args[i].err, "SHARC_TIMEOUT=2") &&
               strstr(args[i].err, "127.0.0.1:"),
           "rank %d: %s: %s", i, sharc_status_name(args[i].st), args[i].err);
  EXPECT(s > 1.5 && s < 5, "timed out after %.1f s", s);

  /* Nobody listens: the client names the address after SHARC_TIMEOUT. */
  set("SHARC_TIMEOUT", "1");
  base.root_port = free_port();
  base.rank = 1;
  peer_info_t mine, table[3];
  memset(&mine, 0, sizeof mine);
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%d", base.root_port);
  EXPECT(bootstrap_rendezvous(&base, &mine, table) == SHARC_ERR_TIMEOUT &&
             strstr(err_last(), want),
         "%s", err_last());
  unsetenv("SHARC_TIMEOUT");
}

int main(void) {
  /* Rejections are logged at WARN by design; keep the output readable
   * unless the caller asks for logs. */
  setenv("SHARC_DEBUG", getenv("SHARC_DEBUG") ? getenv("SHARC_DEBUG") : "NONE",
         1);
  test_env_sharc();
  test_env_torchrun();
  test_env_slurm();
  test_env_ompi();
  test_env_hydra();
  clear_env();
  test_nodelist();
  test_net_misc();
  test_unique_id();
  test_rendezvous_with_strays();
  test_ipv6();
  test_timeout();
  printf("test_bootstrap: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

/*
 * test_listen.c - where sharc listens: the rendezvous root, the
 * unique-id root and a communicator's data listener are bound to one
 * address each, never to the wildcard; SHARC_SOCKET_IFNAME=lo binds
 * 127.0.0.1; a rendezvous named by this host's name is reachable at what
 * the name resolves to. The bound addresses are read back from the kernel
 * (/proc/self/net/tcp and tcp6, this process's sockets only).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "net.h"

#include "unit/expect.h"
#include "unit/free_port.h"

/* ---- this process's listening sockets, from the kernel ---- */

#define MAX_SOCKS 256

static int own_inodes(unsigned long *ino, int max) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < max) {
    char path[300], link[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t k = readlink(path, link, sizeof link - 1);
    if (k <= 0)
      continue;
    link[k] = '\0';
    if (sscanf(link, "socket:[%lu]", &ino[n]) == 1)
      n++;
  }
  closedir(d);
  return n;
}

/* Appends the listening sockets of this process found in `file` (tcp or
 * tcp6 of /proc/self/net) to out[*n]. */
static void read_listeners(const char *file, int v6, net_addr_t *out, int *n,
                           int max) {
  unsigned long ino[MAX_SOCKS];
  int nino = own_inodes(ino, MAX_SOCKS);
  FILE *f = fopen(file, "re");
  if (!f)
    return;
  char line[512];
  if (!fgets(line, sizeof line, f)) { /* the header */
    fclose(f);
    return;
  }
  while (fgets(line, sizeof line, f) && *n < max) {
    char local[64];
    unsigned port, st;
    unsigned long inode;
    if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%X %*s %X %*s %*s %*s %*s %*s %lu",
               local, &port, &st, &inode) != 4 ||
        st != 0x0A) /* TCP_LISTEN */
      continue;
    int mine = 0;
    for (int i = 0; i < nino && !mine; i++)
      mine = ino[i] == inode;
    if (!mine)
      continue;
    net_addr_t a;
    memset(&a, 0, sizeof a);
    if (!v6) {
      struct sockaddr_in *s = (struct sockaddr_in *)&a.sa;
      s->sin_family = AF_INET;
      s->sin_addr.s_addr = (uint32_t)strtoul(local, NULL, 16);
      a.len = sizeof *s;
    } else {
      struct sockaddr_in6 *s = (struct sockaddr_in6 *)&a.sa;
      s->sin6_family = AF_INET6;
      for (int w = 0; w < 4; w++) {
        char word[9];
        memcpy(word, local + 8 * w, 8);
        word[8] = '\0';
        uint32_t x = (uint32_t)strtoul(word, NULL, 16);
        memcpy(&s->sin6_addr.s6_addr[4 * w], &x, 4);
      }
      a.len = sizeof *s;
    }
    net_addr_set_port(&a, (int)port);
    out[(*n)++] = a;
  }
  fclose(f);
}

/* This process's listeners on `port` (0: all of them). */
static int listeners(int port, net_addr_t *out, int max) {
  net_addr_t all[MAX_SOCKS];
  int n = 0, k = 0;
  read_listeners("/proc/self/net/tcp", 0, all, &n, MAX_SOCKS);
  read_listeners("/proc/self/net/tcp6", 1, all, &n, MAX_SOCKS);
  for (int i = 0; i < n && k < max; i++)
    if (port == 0 || net_addr_port(&all[i]) == port)
      out[k++] = all[i];
  return k;
}

static int has_wildcard(const net_addr_t *a, int n) {
  for (int i = 0; i < n; i++)
    if (net_addr_is_wildcard(&a[i]))
      return 1;
  return 0;
}

static int has_addr(const net_addr_t *a, int n, const char *host, int port) {
  net_addr_t want;
  if (net_resolve(host, port, &want) != SHARC_OK)
    return 0;
  for (int i = 0; i < n; i++)
    if (net_addr_equal(&a[i], &want))
      return 1;
  return 0;
}

static const char *list_str(const net_addr_t *a, int n, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && o < len; i++) {
    char s[96];
    o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? " " : "",
                          net_addr_str(&a[i], s, sizeof s));
  }
  return buf;
}

/* ---- a rendezvous of threads, so each root thread ends ---- */

typedef struct {
  bootstrap_env_t env;
  sharc_status_t st;
} rank_arg_t;

static void *rank_main(void *p) {
  rank_arg_t *r = p;
  peer_info_t mine, table[4];
  memset(&mine, 0, sizeof mine);
  snprintf(mine.host, sizeof mine.host, "%s", host_name());
  r->st = bootstrap_local_addr(&r->env, &mine.addr);
  if (r->st == SHARC_OK)
    r->st = bootstrap_rendezvous(&r->env, &mine, table);
  return NULL;
}

static int rendezvous(const bootstrap_env_t *base, int n) {
  pthread_t t[4];
  rank_arg_t a[4];
  for (int i = 0; i < n; i++) {
    a[i].env = *base;
    a[i].env.rank = i;
    pthread_create(&t[i], NULL, rank_main, &a[i]);
  }
  int ok = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    ok += a[i].st == SHARC_OK;
  }
  return ok;
}

static bootstrap_env_t job(const char *host, int nranks) {
  bootstrap_env_t e;
  memset(&e, 0, sizeof e);
  snprintf(e.root_host, sizeof e.root_host, "%s", host);
  e.root_port = free_port();
  e.nranks = nranks;
  e.source = "SHARC_*";
  random_bytes(e.token, sizeof e.token);
  return e;
}

/* ---- tests ---- */

static void test_net_listen_refuses_wildcard(void) {
  net_addr_t a, b;
  int fd = -1;
  EXPECT(net_resolve("0.0.0.0", 0, &a) == SHARC_OK &&
             net_addr_is_wildcard(&a) &&
             net_listen(&a, 1, &fd, &b) == SHARC_ERR_INVALID_ARG &&
             strstr(err_last(), "every interface"),
         "0.0.0.0: %s", err_last());
  EXPECT(net_resolve("::", 0, &a) == SHARC_OK && net_addr_is_wildcard(&a) &&
             net_listen(&a, 1, &fd, &b) == SHARC_ERR_INVALID_ARG,
         ":: refused");
  EXPECT(net_resolve("127.0.0.1", 0, &a) == SHARC_OK &&
             net_addr_is_loopback(&a) && !net_addr_is_wildcard(&a) &&
             net_addr_is_local(&a),
         "127.0.0.1 is local loopback");
  EXPECT(net_resolve("127.0.1.1", 0, &a) == SHARC_OK &&
             net_addr_is_loopback(&a) && net_addr_is_local(&a),
         "127.0.1.1 is local loopback (Debian's host name address)");
  EXPECT(net_resolve("198.51.100.7", 0, &a) == SHARC_OK &&
             !net_addr_is_local(&a) && !net_addr_is_loopback(&a),
         "TEST-NET-2 is not local");
  EXPECT(net_host_is_numeric("10.0.0.1") && net_host_is_numeric("::1") &&
             !net_host_is_numeric("node7"),
         "numeric hosts");
}

static void test_root_loopback(void) {
  bootstrap_env_t e = job("127.0.0.1", 2);
  net_addr_t l[16];
  char buf[512];
  EXPECT(bootstrap_root_start(&e) == SHARC_OK, "%s", err_last());
  int n = listeners(e.root_port, l, 16);
  EXPECT(n == 1 && has_addr(l, n, "127.0.0.1", e.root_port),
         "root at 127.0.0.1 listens on: %s", list_str(l, n, buf, sizeof buf));
  EXPECT(rendezvous(&e, 2) == 2, "rendezvous at 127.0.0.1");
}

static void test_ifname_lo(void) {
  setenv("SHARC_SOCKET_IFNAME", "lo", 1);
  bootstrap_env_t e = job("localhost", 2);
  net_addr_t l[16], a;
  char buf[512], s[96];
  EXPECT(bootstrap_local_addr(&e, &a) == SHARC_OK &&
             !strcmp(net_addr_str(&a, s, sizeof s), "127.0.0.1:0"),
         "SHARC_SOCKET_IFNAME=lo advertises %s", s);
  EXPECT(bootstrap_root_start(&e) == SHARC_OK, "%s", err_last());
  int n = listeners(e.root_port, l, 16);
  EXPECT(n >= 1 && !has_wildcard(l, n) &&
             has_addr(l, n, "127.0.0.1", e.root_port),
         "SHARC_SOCKET_IFNAME=lo root listens on: %s",
         list_str(l, n, buf, sizeof buf));
  for (int i = 0; i < n; i++)
    EXPECT(net_addr_is_loopback(&l[i]), "only loopback with lo: %s",
           net_addr_str(&l[i], s, sizeof s));
  EXPECT(rendezvous(&e, 2) == 2, "rendezvous with SHARC_SOCKET_IFNAME=lo");

  /* A unique id made with SHARC_SOCKET_IFNAME=lo points at 127.0.0.1. */
  sharc_unique_id_t id;
  bootstrap_env_t u;
  memset(&u, 0, sizeof u);
  EXPECT(bootstrap_unique_id_create(&id) == SHARC_OK &&
             bootstrap_unique_id_parse(&id, &u) == SHARC_OK &&
             !strcmp(u.root_host, "127.0.0.1"),
         "unique id root at %s: %s", u.root_host, err_last());
  n = listeners(u.root_port, l, 16);
  EXPECT(n == 1 && has_addr(l, n, "127.0.0.1", u.root_port),
         "unique id root listens on: %s", list_str(l, n, buf, sizeof buf));
  u.nranks = 2;
  EXPECT(rendezvous(&u, 2) == 2, "unique id rendezvous on lo");

  setenv("SHARC_SOCKET_IFNAME", "=nosuchif0", 1);
  bootstrap_env_t bad = job("127.0.0.1", 1);
  EXPECT(bootstrap_root_start(&bad) == SHARC_ERR_NET &&
             strstr(err_last(), "nosuchif0"),
         "an interface that does not exist: %s", err_last());
  unsetenv("SHARC_SOCKET_IFNAME");
}

/* The rendezvous named by this host's own name: reachable where the name
 * resolves here; when that is loopback (Debian's 127.0.1.1, or 127.0.0.1
 * in containers), also on the first non-loopback interface, where other
 * hosts reach the name. */
static void test_root_host_name(void) {
  bootstrap_env_t e = job(host_name(), 2);
  net_addr_t l[16], here, ifa;
  char buf[512], s[96];
  if (net_resolve(e.root_host, e.root_port, &here) != SHARC_OK) {
    printf("skip: host name %s does not resolve here\n", e.root_host);
    return;
  }
  EXPECT(bootstrap_root_start(&e) == SHARC_OK, "%s", err_last());
  int n = listeners(e.root_port, l, 16);
  EXPECT(n >= 1 && !has_wildcard(l, n), "root at %s listens on: %s",
         e.root_host, list_str(l, n, buf, sizeof buf));
  int found = 0;
  for (int i = 0; i < n; i++)
    found |= net_addr_equal(&l[i], &here);
  EXPECT(found, "root at %s not listening on %s (has %s)", e.root_host,
         net_addr_str(&here, s, sizeof s), list_str(l, n, buf, sizeof buf));
  if (net_addr_is_loopback(&here) && net_if_find(NULL, &ifa) == 0) {
    net_addr_set_port(&ifa, e.root_port);
    found = 0;
    for (int i = 0; i < n; i++)
      found |= net_addr_equal(&l[i], &ifa);
    EXPECT(found && n == 2, "%s resolves to loopback: expected %s too (has %s)",
           e.root_host, net_addr_str(&ifa, s, sizeof s),
           list_str(l, n, buf, sizeof buf));
    net_addr_t a;
    EXPECT(bootstrap_local_addr(&e, &a) == SHARC_OK &&
               !net_addr_is_loopback(&a),
           "a rank advertises %s for host name %s",
           net_addr_str(&a, s, sizeof s), e.root_host);
  }
  EXPECT(rendezvous(&e, 2) == 2, "rendezvous at the host name %s", e.root_host);
}

/* A whole communicator of one rank: every socket it listens on. */
static void test_comm_listeners(void) {
  sharc_unique_id_t id;
  sharc_comm_t comm = NULL;
  net_addr_t l[16];
  char buf[512];
  EXPECT(sharc_get_unique_id(&id) == SHARC_OK, "%s", err_last());
  EXPECT(sharc_comm_init_rank(&comm, 1, &id, 0) == SHARC_OK, "%s", err_last());
  int n = listeners(0, l, 16);
  EXPECT(n >= 1 && !has_wildcard(l, n), "a communicator listens on: %s",
         list_str(l, n, buf, sizeof buf));
  if (comm)
    sharc_comm_destroy(comm);
}

int main(void) {
  setenv("SHARC_DEBUG", getenv("SHARC_DEBUG") ? getenv("SHARC_DEBUG") : "NONE",
         1);
  unsetenv("SHARC_SOCKET_IFNAME");
  unsetenv("SHARC_TOKEN");
  setenv("SHARC_TIMEOUT", "20", 1);
  FILE *f = fopen("/proc/self/net/tcp", "re");
  if (!f) {
    printf("test_listen: skip: no /proc/self/net/tcp to read listeners from\n");
    return 77;
  }
  fclose(f);
  test_net_listen_refuses_wildcard();
  test_root_loopback();
  test_ifname_lo();
  test_root_host_name();
  test_comm_listeners();
  printf("test_listen: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

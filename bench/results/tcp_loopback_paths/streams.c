/* streams.c - K loopback TCP streams each way between two processes, N MiB
 * each way in total, from and into one buffer per process (128 MiB: not
 * cache-resident). mode 0 send/recv, 1 vmsplice+splice on the send side,
 * 2 MSG_ZEROCOPY; ONE=1 in the environment: one way only.
 *   gcc -O2 -pthread streams.c -o streams && ./streams 128 MODE K */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
#include <poll.h>
static int copied;
static size_t N;
static int mode, K, one;
typedef struct {
  int fd;
  char *buf;
  size_t len;
} arg_t;
/* One MSG_ZEROCOPY completion from the error queue, if there is one:
 * *done becomes the number of sends completed; counts those the kernel
 * copied anyway. */
static int completion(int fd, unsigned *done) {
  char cb[128];
  struct msghdr m = {.msg_control = cb, .msg_controllen = sizeof cb};
  if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
    return 0;
  struct sock_extended_err *e = (void *)CMSG_DATA(CMSG_FIRSTHDR(&m));
  *done = e->ee_data + 1;
  if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
    copied++;
  return 1;
}

static void *tx(void *a_) {
  arg_t *a = a_;
  size_t off = 0;
  if (mode == 2) {
    int one_ = 1;
    if (setsockopt(a->fd, SOL_SOCKET, SO_ZEROCOPY, &one_, sizeof one_))
      perror("SO_ZEROCOPY");
    unsigned sent = 0, done = 0;
    while (off < a->len) {
      size_t w = a->len - off;
      if (w > (1u << 20))
        w = 1u << 20;
      ssize_t k = send(a->fd, a->buf + off, w, MSG_NOSIGNAL | MSG_ZEROCOPY);
      if (k < 0 && errno == ENOBUFS) {
        k = 0;
      } else if (k <= 0) {
        perror("send zc");
        exit(1);
      } else {
        off += k;
        sent++;
      }
      while (completion(a->fd, &done))
        ;
    }
    while (done < sent) {
      struct pollfd pf = {a->fd, 0, 0};
      poll(&pf, 1, 10);
      completion(a->fd, &done);
    }
  } else if (mode == 0) {
    while (off < a->len) {
      ssize_t k = send(a->fd, a->buf + off, a->len - off, MSG_NOSIGNAL);
      if (k <= 0) {
        perror("send");
        exit(1);
      }
      off += k;
    }
  } else {
    int p[2];
    if (pipe(p)) {
      perror("pipe");
      exit(1);
    }
    fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    while (off < a->len) {
      size_t want = a->len - off;
      if (want > (1u << 20))
        want = 1u << 20;
      struct iovec v = {a->buf + off, want};
      ssize_t k = vmsplice(p[1], &v, 1, 0);
      if (k <= 0) {
        perror("vmsplice");
        exit(1);
      }
      ssize_t left = k;
      while (left > 0) {
        ssize_t s = splice(p[0], NULL, a->fd, NULL, left,
                           SPLICE_F_MORE | SPLICE_F_MOVE);
        if (s <= 0) {
          perror("splice");
          exit(1);
        }
        left -= s;
      }
      off += k;
    }
    close(p[0]);
    close(p[1]);
  }
  return NULL;
}
static void *rx(void *a_) {
  arg_t *a = a_;
  size_t off = 0;
  while (off < a->len) {
    ssize_t k = recv(a->fd, a->buf + off, a->len - off, 0);
    if (k <= 0) {
      perror("recv");
      exit(1);
    }
    off += k;
  }
  return NULL;
}
static void run(int *fd, int rank) {
  char *s = malloc(N), *r = malloc(N);
  memset(s, rank + 1, N);
  memset(r, 0, N);
  for (int it = 0; it < 5; it++) {
    char c;
    if (rank == 0) {
      write(fd[0], "x", 1);
      read(fd[0], &c, 1);
    } else {
      read(fd[0], &c, 1);
      write(fd[0], "x", 1);
    }
    double t0 = now();
    pthread_t th[16];
    arg_t A[16];
    int nt = 0;
    size_t part = N / K;
    for (int k = 0; k < K; k++) {
      if (!one || rank == 0) {
        A[nt] = (arg_t){fd[k], s + k * part, part};
        pthread_create(&th[nt], NULL, tx, &A[nt]);
        nt++;
      }
      if (!one || rank == 1) {
        A[nt] = (arg_t){fd[k], r + k * part, part};
        pthread_create(&th[nt], NULL, rx, &A[nt]);
        nt++;
      }
    }
    for (int i = 0; i < nt; i++)
      pthread_join(th[i], NULL);
    double t = now() - t0;
    if (rank == 0)
      printf(
          "%s K=%d mode=%d: %.2f GB/s per direction (zc copied notices %d)\n",
          one ? "one-way" : "both ways", K, mode, N / t / 1e9, copied);
  }
}
int main(int argc, char **argv) {
  N = (size_t)atol(argv[1]) << 20;
  mode = atoi(argv[2]);
  K = atoi(argv[3]);
  one = getenv("ONE") != NULL;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in ad = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof ad;
  bind(ls, (void *)&ad, sizeof ad);
  listen(ls, 16);
  getsockname(ls, (void *)&ad, &al);
  int fd[16];
  if (fork() == 0) {
    for (int k = 0; k < K; k++) {
      fd[k] = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd[k], (void *)&ad, sizeof ad))
        perror("connect");
    }
    run(fd, 1);
    return 0;
  }
  for (int k = 0; k < K; k++)
    fd[k] = accept(ls, NULL, NULL);
  run(fd, 0);
  wait(NULL);
  return 0;
}

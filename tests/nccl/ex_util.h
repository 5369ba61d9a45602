/*
 * ex_util.h - shared helpers for the NCCL-API example programs (ex_*.c).
 *
 * Uses only the standard NCCL C API, the CUDA runtime and libc/POSIX, so the
 * examples compile unchanged against any conforming nccl.h.
 *
 * Environment:
 *   rank/size   SHARC_RANK/SHARC_WORLD_SIZE, OMPI_COMM_WORLD_RANK/_SIZE,
 *               PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS (first set pair
 *               wins; default 0/1).
 *   local rank  SHARC_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID
 *               (default: the rank).
 *   EX_ID_SOCK  AF_UNIX socket path used to hand the ncclUniqueId from rank 0
 *               to the others. Default: /tmp/ex_nccl_<SHARC_TOKEN>.sock when
 *               SHARC_TOKEN is set (non-alphanumerics dropped), otherwise
 *               /tmp/ex_nccl_<parent pid>.sock (all ranks must share a parent,
 *               as under a launcher; otherwise set EX_ID_SOCK). Same host only.
 *   EX_MEM      "host" puts the NCCL buffers in malloc'd host memory (a sharc
 *               extension; real NCCL needs device memory). Default: device.
 */
#ifndef EX_UTIL_H
#define EX_UTIL_H

/* Include this header first (before any system header) so these apply. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <cuda_runtime.h>
#include <nccl.h>

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NCCLCHECK(cmd)                                                         \
  do {                                                                         \
    ncclResult_t r_ = (cmd);                                                   \
    if (r_ != ncclSuccess) {                                                   \
      fprintf(stderr, "%s:%d: NCCL error %d '%s' in %s\n", __FILE__, __LINE__, \
              (int)r_, ncclGetErrorString(r_), #cmd);                          \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define CUDACHECK(cmd)                                                         \
  do {                                                                         \
    cudaError_t e_ = (cmd);                                                    \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d: CUDA error %d '%s' in %s\n", __FILE__, __LINE__, \
              (int)e_, cudaGetErrorString(e_), #cmd);                          \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define EX_ID_TIMEOUT_MS 60000
#define EX_ID_RETRY_MS 20

static inline int ex_env_int(const char *name, int *out) {
  const char *s = getenv(name);
  char *end = NULL;
  long v;
  if (s == NULL || *s == '\0')
    return 0;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > 1000000) {
    fprintf(stderr, "ex: bad value %s=%s\n", name, s);
    exit(1);
  }
  *out = (int)v;
  return 1;
}

static inline void ex_rank_size(int *rank, int *size) {
  static const char *const pairs[][2] = {
      {"SHARC_RANK", "SHARC_WORLD_SIZE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"}};
  size_t i;
  *rank = 0;
  *size = 1;
  for (i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
    int r, s;
    if (ex_env_int(pairs[i][0], &r) && ex_env_int(pairs[i][1], &s)) {
      if (s < 1 || r >= s) {
        fprintf(stderr, "ex: %s=%d not below %s=%d\n", pairs[i][0], r,
                pairs[i][1], s);
        exit(1);
      }
      *rank = r;
      *size = s;
      return;
    }
  }
}

static inline int ex_local_rank(int rank) {
  static const char *const names[] = {
      "SHARC_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
  size_t i;
  int v;
  for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (ex_env_int(names[i], &v))
      return v;
  return rank;
}

static inline void ex_die(const char *what) {
  fprintf(stderr, "ex_share_id: %s: %s\n", what, strerror(errno));
  exit(1);
}

static inline void ex_sock_path(struct sockaddr_un *sa) {
  const char *p = getenv("EX_ID_SOCK");
  char buf[sizeof(sa->sun_path)];
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  if (p == NULL || *p == '\0') {
    const char *tok = getenv("SHARC_TOKEN");
    if (tok != NULL && *tok != '\0') {
      char clean[65];
      size_t n = 0;
      for (; *tok != '\0' && n + 1 < sizeof(clean); tok++)
        if ((*tok >= '0' && *tok <= '9') || (*tok >= 'a' && *tok <= 'z') ||
            (*tok >= 'A' && *tok <= 'Z'))
          clean[n++] = *tok;
      clean[n] = '\0';
      snprintf(buf, sizeof(buf), "/tmp/ex_nccl_%s.sock", clean);
    } else {
      snprintf(buf, sizeof(buf), "/tmp/ex_nccl_%ld.sock", (long)getppid());
    }
    p = buf;
  }
  if (strlen(p) >= sizeof(sa->sun_path)) {
    fprintf(stderr, "ex_share_id: socket path too long: %s\n", p);
    exit(1);
  }
  strcpy(sa->sun_path, p);
}

static inline long ex_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Write or read exactly n bytes; 0 on success, -1 on error or early EOF. */
static inline int ex_write_all(int fd, const void *buf, size_t n) {
  const char *p = (const char *)buf;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static inline int ex_read_all(int fd, void *buf, size_t n) {
  char *p = (char *)buf;
  while (n > 0) {
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      if (k == 0)
        errno = EPIPE;
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Rank 0 makes nid unique ids and hands all of them to every other rank. */
static inline void ex_share_ids(ncclUniqueId *id, int nid, int rank, int size) {
  struct sockaddr_un sa;
  long deadline = ex_now_ms() + EX_ID_TIMEOUT_MS;
  int fd, i;
  if (rank == 0)
    for (i = 0; i < nid; i++)
      NCCLCHECK(ncclGetUniqueId(&id[i]));
  if (size <= 1)
    return;
  ex_sock_path(&sa);
  if (rank == 0) {
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
      ex_die("socket");
    unlink(sa.sun_path); /* stale file from an earlier run */
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
      ex_die(sa.sun_path);
    if (listen(fd, size) != 0)
      ex_die("listen");
    for (i = 1; i < size; i++) {
      struct pollfd pf = {fd, POLLIN, 0};
      long left = deadline - ex_now_ms();
      int c, pr = left > 0 ? poll(&pf, 1, (int)left) : 0;
      if (pr < 0 && errno == EINTR) {
        i--;
        continue;
      }
      if (pr <= 0) {
        fprintf(stderr, "ex_share_id: only %d of %d ranks connected to %s\n",
                i - 1, size - 1, sa.sun_path);
        unlink(sa.sun_path);
        exit(1);
      }
      c = accept(fd, NULL, NULL);
      if (c < 0 && errno == EINTR) {
        i--;
        continue;
      }
      if (c < 0)
        ex_die("accept");
      if (ex_write_all(c, id, (size_t)nid * sizeof(*id)) != 0)
        ex_die("write id");
      close(c);
    }
    close(fd);
    unlink(sa.sun_path);
    return;
  }
  for (;;) {
    struct timespec ts = {0, EX_ID_RETRY_MS * 1000000L};
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
      ex_die("socket");
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
      break;
    close(fd);
    if (ex_now_ms() >= deadline) {
      fprintf(stderr, "ex_share_id: rank %d: no rank 0 at %s after %d s: %s\n",
              rank, sa.sun_path, EX_ID_TIMEOUT_MS / 1000, strerror(errno));
      exit(1);
    }
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
  }
  if (ex_read_all(fd, id, (size_t)nid * sizeof(*id)) != 0)
    ex_die("read id");
  close(fd);
}

static inline void ex_share_id(ncclUniqueId *id, int rank, int size) {
  ex_share_ids(id, 1, rank, size);
}

/* Select a device for this process, or exit 77 (skip) when none exists. */
static inline int ex_device_or_skip(int local_rank) {
  int count = 0, rank, size;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    ex_rank_size(&rank, &size);
    if (rank == 0)
      printf("SKIP: no CUDA device (%s)\n",
             e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    exit(77);
  }
  CUDACHECK(cudaSetDevice(local_rank % count));
  return local_rank % count;
}

static inline int ex_host_mem(void) {
  const char *m = getenv("EX_MEM");
  return m != NULL && strcmp(m, "host") == 0;
}

/* Buffers handed to NCCL; never zero-sized so every pointer is valid. */
static inline void *ex_alloc(size_t bytes) {
  void *p = NULL;
  if (bytes == 0)
    bytes = 1;
  if (ex_host_mem()) {
    p = malloc(bytes);
    if (p == NULL) {
      fprintf(stderr, "ex_alloc: out of host memory (%zu bytes)\n", bytes);
      exit(1);
    }
  } else {
    CUDACHECK(cudaMalloc(&p, bytes));
  }
  return p;
}

static inline void ex_free(void *p) {
  if (ex_host_mem())
    free(p);
  else
    CUDACHECK(cudaFree(p));
}

static inline void ex_upload(void *dst, const void *host_src, size_t bytes) {
  if (bytes == 0)
    return;
  if (ex_host_mem())
    memcpy(dst, host_src, bytes);
  else
    CUDACHECK(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
}

static inline void ex_download(void *host_dst, const void *src, size_t bytes) {
  if (bytes == 0)
    return;
  if (ex_host_mem())
    memcpy(host_dst, src, bytes);
  else
    CUDACHECK(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
}

/* Host scratch buffer; exits on failure. */
static inline void *ex_host(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "ex_host: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

/* Compare n floats; print the first mismatch. Returns number of errors. */
static inline size_t ex_check_f(const char *what, int rank, const float *got,
                                const float *want, size_t n) {
  size_t i, bad = 0;
  for (i = 0; i < n; i++)
    if (got[i] != want[i] && bad++ == 0)
      fprintf(stderr, "%s: rank %d: [%zu] = %g, want %g\n", what, rank, i,
              (double)got[i], (double)want[i]);
  if (bad)
    fprintf(stderr, "%s: rank %d: %zu of %zu wrong\n", what, rank, bad, n);
  return bad;
}

#endif /* EX_UTIL_H */

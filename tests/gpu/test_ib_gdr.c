/*
 * test_ib_gdr.c - GPUDirect RDMA in the ib transport: sends straight from
 * registered device memory, and the choice of how that memory is
 * registered with the NIC, on the software HCA of mock_verbs.c with
 * softcuda's device memory (or a real GPU's, where the mock still stands
 * for the NIC). What the stack allows is the mock's to say (mock_set_gdr):
 *
 *   - dma-buf import works: device_send says yes, the region is registered
 *     once through its dma-buf (ibv_reg_dmabuf_mr, which the mock maps and
 *     reads through), and sends of any size, also from inside the region at
 *     an odd offset, arrive intact; the registration is kept for the next
 *     send;
 *   - no dma-buf import and no nvidia-peermem: device_send says no and why,
 *     so the caller stages; nothing is registered;
 *   - SHARC_IB_GDR=peermem with a driver that takes device pointers:
 *     registered through ibv_reg_mr, and sends arrive; without it the
 *     answer is no, naming the refusal (EFAULT);
 *   - a region CUDA exported no dma-buf for (SOFTCUDA_NO_DMABUF): no, and
 *     why; SHARC_IB_GDR=off: no; memory never registered with sharc: no;
 *     SHARC_IB_GDR=bogus: setup fails naming the setting.
 * After each case the mock's protocol checks are clean and nothing is left.
 *
 * Then the GPU path that uses it, end to end: two ranks (threads of this
 * process, each its own communicator over ib everywhere) run the staged
 * path's reduce-scatter and all-reduce with the reduction on the GPU
 * (SHARC_CUDA_STAGED_REDUCE=gpu) on device buffers: with the sendbuf
 * registered, the peer's slices go straight from it (the ib counters show
 * the GPUDirect sends) and the results are exact; unregistered, they are
 * staged, with the same results.
 * Without a CUDA device the test exits 77, and on a real GPU too: the
 * software HCA reads device memory with the CPU, which only softcuda's
 * device memory allows (device_run.sh's bench_gdr step covers a real NIC).
 */
#include <cuda_runtime.h>

#include <pthread.h>

#include "ib.h"
#include "mem.h"
#include "sharc.h"
#include "unit/expect.h"
#include "unit/transport_contract.h"
/* after transport_contract.h */
#include "unit/ib_test.h"

/* softcuda's (tests/softcuda/softcuda_mem.c); absent on a real CUDA. */
int softcuda_dmabuf_info(int fd, uint64_t *file_off, size_t *len)
    __attribute__((weak));

static int is_device(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice;
}

static void setup_pair(struct sharc_comm **cs, uint64_t uid,
                       transport_conn_t **tx, transport_conn_t **rx) {
  ib_setup_pair(cs, uid, 0x47, tx, rx);
}

typedef struct {
  struct sharc_comm *comm;
  transport_conn_t *c;
  const void *src;
  size_t bytes;
  int begun, ok;
} sender_t;

static void *send_main(void *arg) {
  sender_t *s = arg;
  s->begun = tp->send_begin(s->c, s->src, s->bytes);
  if (s->begun != 1)
    return NULL;
  uint64_t end = time_ns() + 10000000000ull;
  while (time_ns() < end) {
    uint32_t seen = atomic_load(&s->comm->wake->doorbell);
    if (tp->send_done(s->c)) {
      s->ok = 1;
      return NULL;
    }
    comm_wait(s->comm, seen, 100000000ull);
  }
  return NULL;
}

/* One send of [src, +bytes) of device memory from rank 0, checked against
 * the host copy want on rank 1. */
static int send_device(struct sharc_comm **cs, transport_conn_t *tx,
                       transport_conn_t *rx, const void *src,
                       const uint8_t *want, size_t bytes) {
  sender_t s = {cs[0], tx, src, bytes, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, send_main, &s);
  int got = ib_recv_padded(cs[1], rx, want, bytes);
  pthread_join(th, NULL);
  EXPECT(s.begun == 1, "send_begin of %zu device bytes returned %d, not 1",
         bytes, s.begun);
  return got && s.ok;
}

#define BYTES ((size_t)1000003) /* not a multiple of 64, nor of a page */
#define OFF 100                 /* the region starts inside a page */

static uint8_t *dbuf, *host;

/* A device region [dbuf + OFF, + BYTES) registered with sharc. */
static void register_region(void) {
  EXPECT(sharc_mem_register(dbuf + OFF, BYTES) == SHARC_OK, "%s", err_last());
}

static void test_dmabuf(void) {
  mock_set_gdr(1, 0, is_device);
  register_region();
  mem_dev_t d;
  EXPECT(mem_find_device(dbuf + OFF, BYTES, &d) && d.has_dmabuf,
         "sharc_mem_register exported no dma-buf: %s", d.dmabuf_why);
  EXPECT(d.dmabuf_addr % 4096 == 0 && d.dmabuf_len % 4096 == 0 &&
             d.dmabuf_addr <= (uintptr_t)dbuf + OFF &&
             d.dmabuf_addr + d.dmabuf_len >= (uintptr_t)dbuf + OFF + BYTES,
         "the dma-buf [0x%llx, +%zu) is not the page-aligned cover",
         (unsigned long long)d.dmabuf_addr, d.dmabuf_len);
  struct sharc_comm *cs[2];
  transport_conn_t *tx, *rx;
  setup_pair(cs, 0x6d01, &tx, &rx);
  char why[400] = "";
  EXPECT(tp->device_send(cs[0], 1, dbuf + OFF, BYTES, why, sizeof why) == 1,
         "dma-buf allowed, yet device_send said no: %s", why);
  EXPECT(send_device(cs, tx, rx, dbuf + OFF, host + OFF, BYTES),
         "a whole-region send from device memory");
  /* far below SHARC_IB_ZCOPY_BYTES, at an odd offset: still from the GPU */
  EXPECT(send_device(cs, tx, rx, dbuf + OFF + 12345, host + OFF + 12345, 777),
         "a 777-byte send from inside the region");
  EXPECT(send_n(cs[0], tx, 5, 3000) && recv_n(cs[1], rx, 5, 3000),
         "inline host bytes after the device sends");
  ib_stats_t a;
  ib_stats(cs[0], &a);
  EXPECT(a.gdr_sends == 2 && a.gdr_dmabuf_regs == 1 &&
             a.gdr_peermem_regs == 0 && a.zcopy_sends == 0,
         "2 sends from the GPU, 1 dma-buf registration: %llu sends, %llu "
         "dma-buf, %llu peermem, %llu host zero-copy",
         (unsigned long long)a.gdr_sends, (unsigned long long)a.gdr_dmabuf_regs,
         (unsigned long long)a.gdr_peermem_regs,
         (unsigned long long)a.zcopy_sends);
  mock_report_t r;
  mock_report(&r);
  EXPECT(r.dmabuf_mrs >= 1, "the mock saw no dma-buf registration");
  for (int i = 0; i < 2; i++)
    free_comm(cs[i]);
  EXPECT(sharc_mem_deregister(dbuf + OFF) == SHARC_OK, "%s", err_last());
  mock_check("dma-buf sends");
}

/* device_send on a fresh pair under the mock's and the environment's
 * settings; returns its answer with why. */
static int ask(uint64_t uid, char *why, size_t n, ib_stats_t *st) {
  struct sharc_comm *cs[2];
  transport_conn_t *tx, *rx;
  setup_pair(cs, uid, &tx, &rx);
  why[0] = '\0';
  int yes = tp->device_send(cs[0], 1, dbuf + OFF, BYTES, why, n);
  if (yes)
    EXPECT(send_device(cs, tx, rx, dbuf + OFF, host + OFF, BYTES),
           "a send after device_send said yes");
  ib_stats(cs[0], st);
  for (int i = 0; i < 2; i++)
    free_comm(cs[i]);
  return yes;
}

static void test_choices(void) {
  char why[400];
  ib_stats_t a;
  int peermem_here = ib_peermem_loaded("");

  /* no dma-buf import, no nvidia-peermem: stage */
  mock_set_gdr(0, 0, is_device);
  register_region();
  if (!peermem_here) {
    EXPECT(!ask(0x6d02, why, sizeof why, &a) && strstr(why, "register") &&
               a.gdr_dmabuf_regs == 0 && a.gdr_peermem_regs == 0,
           "no import and no peermem: device_send must say no with a "
           "reason; said: \"%s\"",
           why);
    printf("test_ib_gdr: without dma-buf import: %s\n", why);
  }
  mock_check("no dma-buf import");

  /* SHARC_IB_GDR=peermem: ibv_reg_mr on the device pointer */
  setenv("SHARC_IB_GDR", "peermem", 1);
  mock_set_gdr(0, 1, is_device);
  EXPECT(ask(0x6d03, why, sizeof why, &a) && a.gdr_peermem_regs == 1 &&
             a.gdr_dmabuf_regs == 0 && a.gdr_sends == 1,
         "peermem: %s (%llu peermem registrations, %llu sends)", why,
         (unsigned long long)a.gdr_peermem_regs,
         (unsigned long long)a.gdr_sends);
  mock_check("nvidia-peermem sends");
  mock_set_gdr(1, 0, is_device); /* dma-buf there, but not asked for */
  EXPECT(!ask(0x6d04, why, sizeof why, &a) && strstr(why, "Bad address"),
         "peermem refused: device_send must say no naming EFAULT; said: "
         "\"%s\"",
         why);
  printf("test_ib_gdr: SHARC_IB_GDR=peermem without nvidia-peermem: %s\n", why);
  mock_check("peermem refused");

  setenv("SHARC_IB_GDR", "off", 1);
  EXPECT(!ask(0x6d05, why, sizeof why, &a) && strstr(why, "SHARC_IB_GDR=off"),
         "off: said \"%s\"", why);
  unsetenv("SHARC_IB_GDR");
  mock_check("GDR off");

  struct sharc_comm *cs[2];
  transport_conn_t *tx, *rx;
  setup_pair(cs, 0x6d06, &tx, &rx);
  EXPECT(!tp->device_send(cs[0], 1, dbuf, 64, why, sizeof why) &&
             strstr(why, "sharc_mem_register"),
         "unregistered device memory: said \"%s\"", why);
  for (int i = 0; i < 2; i++)
    free_comm(cs[i]);
  EXPECT(sharc_mem_deregister(dbuf + OFF) == SHARC_OK, "%s", err_last());
  mock_check("unregistered memory");

  /* CUDA exports no dma-buf for the region */
  setenv("SOFTCUDA_NO_DMABUF", "1", 1);
  register_region();
  unsetenv("SOFTCUDA_NO_DMABUF");
  mem_dev_t d;
  int soft = mem_find_device(dbuf + OFF, BYTES, &d) && !d.has_dmabuf;
  if (soft && !peermem_here) { /* softcuda honours SOFTCUDA_NO_DMABUF */
    mock_set_gdr(1, 0, is_device);
    EXPECT(!ask(0x6d07, why, sizeof why, &a) && strstr(why, "no dma-buf") &&
               strstr(why, "cuMemGetHandleForAddressRange"),
           "no dma-buf exported: said \"%s\"", why);
    printf("test_ib_gdr: without a dma-buf: %s\n", why);
  }
  EXPECT(sharc_mem_deregister(dbuf + OFF) == SHARC_OK, "%s", err_last());
  mock_check("no dma-buf exported");

  setenv("SHARC_IB_GDR", "bogus", 1);
  make_comms(cs, 1, 0x6d08, 0x48);
  EXPECT(tp->setup(cs[0]) == SHARC_ERR_INVALID_ARG &&
             strstr(err_last(), "SHARC_IB_GDR=bogus"),
         "SHARC_IB_GDR=bogus: setup said \"%s\"", err_last());
  free_comm(cs[0]);
  unsetenv("SHARC_IB_GDR");
  mock_check("a bad SHARC_IB_GDR");
}

/* ---- the staged path's GPU reduction over GPUDirect RDMA ---------------- */

#define NR 2
#define CNT ((size_t)300007) /* reduce-scatter's per-rank count; odd */

typedef struct {
  int rank, ndev, reg;
  sharc_unique_id_t id;
  int ok;
  uint64_t gdr_sends, dmabuf_regs;
  char err[300];
} rank_t;

/* Every value an integer below 2^24: exact sums in f32 in any order;
 * round k adds k. */
static float val(int r, size_t i) {
  return (float)((i * 7 + (size_t)r) % 4096);
}
static float valk(int r, size_t i, int k) { return val(r, i) + (float)k; }

static void *rank_main(void *arg) {
  rank_t *a = arg;
  int r = a->rank;
  size_t n = NR * CNT;
  float *h = malloc(n * sizeof *h), *h1 = malloc(n * sizeof *h1);
  float *got = malloc(n * sizeof *got);
  float *send = NULL, *rs = NULL, *ar = NULL;
  sharc_comm_t comm = NULL;
  sharc_stream_t st = NULL;
  cudaStream_t cs = NULL;
  snprintf(a->err, sizeof a->err, "setup");
  cudaSetDevice(r % a->ndev);
  if (sharc_comm_init_rank(&comm, NR, &a->id, r) != SHARC_OK) {
    snprintf(a->err, sizeof a->err, "init: %s", sharc_last_error());
    goto out;
  }
  /* Non-blocking, and every copy on it: both ranks share this process's
   * legacy stream, which would wait for the other rank's stream while it
   * waits inside a collective for this rank. */
  if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess ||
      sharc_stream_create_cuda(&st, cs) != SHARC_OK ||
      cudaMalloc((void **)&send, n * sizeof *send) != cudaSuccess ||
      cudaMalloc((void **)&rs, CNT * sizeof *rs) != cudaSuccess ||
      cudaMalloc((void **)&ar, n * sizeof *ar) != cudaSuccess) {
    snprintf(a->err, sizeof a->err, "streams or memory: %s",
             sharc_last_error());
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    h[i] = valk(r, i, 0);
    h1[i] = valk(r, i, 1);
  }
  cudaMemcpyAsync(send, h, n * sizeof *h, cudaMemcpyHostToDevice, cs);
  cudaStreamSynchronize(cs);
  if (a->reg && sharc_mem_register(send, n * sizeof *send) != SHARC_OK) {
    snprintf(a->err, sizeof a->err, "register: %s", sharc_last_error());
    goto out;
  }
  for (int round = 0; round < 2; round++) {
    /* round 1's input is written on the stream just before the calls, not
     * waited for: a GPUDirect send that read the sendbuf before the
     * stream reached the call would send round 0's values (under
     * SOFTCUDA_JITTER the copy lands late) */
    if (round == 1)
      cudaMemcpyAsync(send, h1, n * sizeof *h1, cudaMemcpyHostToDevice, cs);
    if (sharc_reduce_scatter(send, rs, CNT, SHARC_F32, SHARC_SUM, comm, st) !=
            SHARC_OK ||
        sharc_all_reduce(send, ar, n, SHARC_F32, SHARC_SUM, comm, st) !=
            SHARC_OK ||
        sharc_stream_synchronize(st) != SHARC_OK) {
      snprintf(a->err, sizeof a->err, "round %d: %s", round,
               sharc_last_error());
      goto out;
    }
    cudaMemcpyAsync(got, rs, CNT * sizeof *got, cudaMemcpyDeviceToHost, cs);
    cudaStreamSynchronize(cs);
    for (size_t i = 0; i < CNT; i++) {
      size_t at = (size_t)r * CNT + i;
      float want = valk(0, at, round) + valk(1, at, round);
      if (got[i] != want) {
        snprintf(a->err, sizeof a->err,
                 "round %d: reduce-scatter element %zu is %g, not %g", round, i,
                 (double)got[i], (double)want);
        goto out;
      }
    }
    cudaMemcpyAsync(got, ar, n * sizeof *got, cudaMemcpyDeviceToHost, cs);
    cudaStreamSynchronize(cs);
    for (size_t i = 0; i < n; i++)
      if (got[i] != valk(0, i, round) + valk(1, i, round)) {
        snprintf(a->err, sizeof a->err,
                 "round %d: all-reduce element %zu is %g, not %g", round, i,
                 (double)got[i],
                 (double)(valk(0, i, round) + valk(1, i, round)));
        goto out;
      }
  }
  ib_stats_t is;
  if (ib_stats(comm, &is) != SHARC_OK) {
    snprintf(a->err, sizeof a->err, "the communicator has no ib state");
    goto out;
  }
  a->gdr_sends = is.gdr_sends;
  a->dmabuf_regs = is.gdr_dmabuf_regs;
  a->ok = 1;
out:
  if (a->reg && send)
    sharc_mem_deregister(send);
  if (st)
    sharc_stream_destroy(st);
  if (comm)
    sharc_comm_destroy(comm);
  cudaFree(send);
  cudaFree(rs);
  cudaFree(ar);
  if (cs)
    cudaStreamDestroy(cs);
  free(h);
  free(h1);
  free(got);
  return NULL;
}

static void run_ranks(int ndev, int reg, rank_t *a) {
  sharc_unique_id_t id;
  EXPECT(sharc_get_unique_id(&id) == SHARC_OK, "%s", sharc_last_error());
  pthread_t th[NR];
  for (int r = 0; r < NR; r++) {
    a[r] = (rank_t){.rank = r, .ndev = ndev, .reg = reg, .id = id};
    pthread_create(&th[r], NULL, rank_main, &a[r]);
  }
  for (int r = 0; r < NR; r++)
    pthread_join(th[r], NULL);
  for (int r = 0; r < NR; r++)
    EXPECT(a[r].ok, "%s sendbuf, rank %d: %s",
           reg ? "registered" : "unregistered", r, a[r].err);
}

static void test_collectives(int ndev) {
  setenv("SHARC_TRANSPORT", "ib", 1);
  setenv("SHARC_CUDA_PATH", "staged", 1);
  setenv("SHARC_CUDA_STAGED_REDUCE", "gpu", 1);
  setenv("SHARC_CUDA_PIPE_BYTES", "262144", 1); /* several chunks */
  mock_set_gdr(1, 0, is_device);
  rank_t a[NR];
  run_ranks(ndev, 1, a);
  for (int r = 0; r < NR; r++)
    EXPECT(a[r].gdr_sends == 40 && a[r].dmabuf_regs == 1,
           "registered: rank %d sent %llu times straight from the GPU "
           "(%llu dma-buf registrations), not 40: 2 rounds of reduce-scatter "
           "and all-reduce, each in 10 chunks (256 KiB pipelining of 1.2 MB "
           "blocks), one send per chunk (one channel below 256 KiB)",
           r, (unsigned long long)a[r].gdr_sends,
           (unsigned long long)a[r].dmabuf_regs);
  printf("test_ib_gdr: staged GPU reduction, registered sendbuf: %llu and "
         "%llu sends from device memory\n",
         (unsigned long long)a[0].gdr_sends,
         (unsigned long long)a[1].gdr_sends);
  mock_check("collectives with GPUDirect sends");
  run_ranks(ndev, 0, a);
  for (int r = 0; r < NR; r++)
    EXPECT(a[r].gdr_sends == 0,
           "unregistered: rank %d sent %llu times from device memory", r,
           (unsigned long long)a[r].gdr_sends);
  mock_check("collectives staged");
  unsetenv("SHARC_TRANSPORT");
  unsetenv("SHARC_CUDA_PATH");
  unsetenv("SHARC_CUDA_STAGED_REDUCE");
  unsetenv("SHARC_CUDA_PIPE_BYTES");
}

int main(void) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  if (!softcuda_dmabuf_info) {
    printf("SKIP: a real CUDA device: the software HCA would read its memory "
           "with the CPU; with an RDMA NIC, device_run.sh's bench_gdr step "
           "runs GPUDirect RDMA for real\n");
    return 77;
  }
  char why[300];
  if (ib_probe(why, sizeof why) == 0) {
    printf("test_ib_gdr: the mock HCA is missing: %s\n", why);
    return 1;
  }
  pattern_init();
  tp = &transport_ib;
  setenv("SHARC_DEBUG", "NONE", 0);
  uint64_t t0 = time_ns();
  size_t total = OFF + BYTES + 4096;
  host = malloc(total);
  for (size_t i = 0; i < total; i++)
    host[i] = (uint8_t)(i * 2654435761u >> 13);
  EXPECT(cudaMalloc((void **)&dbuf, total) == cudaSuccess, "cudaMalloc");
  EXPECT(cudaMemcpy(dbuf, host, total, cudaMemcpyHostToDevice) == cudaSuccess,
         "cudaMemcpy");
  test_dmabuf();
  test_choices();
  test_collectives(ndev);
  cudaFree(dbuf);
  free(host);
  printf("test_ib_gdr: %d passed, %d failed (%.1f s)\n", passed, failed,
         (double)(time_ns() - t0) / 1e9);
  return failed ? 1 : 0;
}

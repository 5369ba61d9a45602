/*
 * test_stream_sync.c - sharc_stream_synchronize on a CUDA stream calls
 * nothing that waits for the whole device, because another stream of the
 * process may be inside a collective that waits for this rank.
 *
 * Two ranks are threads of this process on one device (ranks sharing a
 * process, or one process's two communicators on two streams, as hybrid
 * sharding has) on the staged path (SHARC_CUDA_PATH=staged). Each runs an
 * all-reduce of 1000 floats, then one of 4 Mi floats, which outgrows the
 * stream's pinned staging. Rank 0 then queues a third all-reduce, which
 * holds its CUDA stream until rank 1 joins it, and only after that does
 * rank 1 synchronize its stream. A synchronize that freed the outgrown
 * staging there (cudaFreeHost waits for every stream of the device, on a
 * GPU and on softcuda alike) would wait for rank 0's third call, which
 * waits for rank 1: a hang, which SHARC_TIMEOUT turns into a failure. Then
 * rank 1 joins the third call, and all three results are checked exactly.
 *
 * Without a CUDA device: one SKIP line, exit 77.
 */
#include <cuda_runtime.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sharc.h"

#define NR 2
static const size_t counts[3] = {1000, (size_t)4 << 20, 1000};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int third_queued; /* rank 0 queued its third call */

typedef struct {
  int rank;
  sharc_unique_id_t id;
  int ok;
  char err[300];
} rank_t;

/* Integers below 2^24: exact sums in f32. */
static float val(int r, int call, size_t i) {
  return (float)((i * 3 + (size_t)r + (size_t)call * 5) % 4096);
}

static void *rank_main(void *arg) {
  rank_t *a = arg;
  int r = a->rank;
  sharc_comm_t comm = NULL;
  sharc_stream_t st = NULL;
  cudaStream_t cs = NULL;
  float *buf[3] = {NULL, NULL, NULL}, *h = NULL;
  snprintf(a->err, sizeof a->err, "setup");
  if (sharc_comm_init_rank(&comm, NR, &a->id, r) != SHARC_OK) {
    snprintf(a->err, sizeof a->err, "init: %s", sharc_last_error());
    goto out;
  }
  /* non-blocking: the two ranks' streams must not be ordered through the
   * legacy stream, which would make them wait for each other anyway */
  if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess ||
      sharc_stream_create_cuda(&st, cs) != SHARC_OK) {
    snprintf(a->err, sizeof a->err, "streams: %s", sharc_last_error());
    goto out;
  }
  h = malloc(counts[1] * sizeof *h);
  for (int c = 0; c < 3; c++) {
    if (cudaMalloc((void **)&buf[c], counts[c] * sizeof(float)) !=
        cudaSuccess) {
      snprintf(a->err, sizeof a->err, "cudaMalloc of call %d", c);
      goto out;
    }
    for (size_t i = 0; i < counts[c]; i++)
      h[i] = val(r, c, i);
    cudaMemcpyAsync(buf[c], h, counts[c] * sizeof *h, cudaMemcpyHostToDevice,
                    cs);
    cudaStreamSynchronize(cs); /* h is written again next */
  }
  for (int c = 0; c < 2; c++)
    if (sharc_all_reduce(buf[c], buf[c], counts[c], SHARC_F32, SHARC_SUM, comm,
                         st) != SHARC_OK) {
      snprintf(a->err, sizeof a->err, "call %d: %s", c, sharc_last_error());
      goto out;
    }
  if (r == 0) {
    if (sharc_all_reduce(buf[2], buf[2], counts[2], SHARC_F32, SHARC_SUM, comm,
                         st) != SHARC_OK) {
      snprintf(a->err, sizeof a->err, "call 2: %s", sharc_last_error());
      goto out;
    }
    pthread_mutex_lock(&lock);
    third_queued = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
  } else {
    pthread_mutex_lock(&lock);
    while (!third_queued)
      pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    if (sharc_stream_synchronize(st) != SHARC_OK) {
      snprintf(a->err, sizeof a->err,
               "synchronize while rank 0's third call waits: %s",
               sharc_last_error());
      goto out;
    }
    if (sharc_all_reduce(buf[2], buf[2], counts[2], SHARC_F32, SHARC_SUM, comm,
                         st) != SHARC_OK) {
      snprintf(a->err, sizeof a->err, "call 2: %s", sharc_last_error());
      goto out;
    }
  }
  if (sharc_stream_synchronize(st) != SHARC_OK) {
    snprintf(a->err, sizeof a->err, "synchronize: %s", sharc_last_error());
    goto out;
  }
  for (int c = 0; c < 3; c++) {
    cudaMemcpyAsync(h, buf[c], counts[c] * sizeof *h, cudaMemcpyDeviceToHost,
                    cs);
    cudaStreamSynchronize(cs);
    for (size_t i = 0; i < counts[c]; i++)
      if (h[i] != val(0, c, i) + val(1, c, i)) {
        snprintf(a->err, sizeof a->err, "call %d: element %zu is %g, not %g", c,
                 i, (double)h[i], (double)(val(0, c, i) + val(1, c, i)));
        goto out;
      }
  }
  a->ok = 1;
out:
  if (st)
    sharc_stream_destroy(st);
  if (comm)
    sharc_comm_destroy(comm);
  for (int c = 0; c < 3; c++)
    cudaFree(buf[c]);
  if (cs)
    cudaStreamDestroy(cs);
  free(h);
  if (!a->ok && r == 0) { /* never leave rank 1 waiting */
    pthread_mutex_lock(&lock);
    third_queued = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
  }
  return NULL;
}

int main(void) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  setenv("SHARC_CUDA_PATH", "staged", 1);
  setenv("SHARC_TIMEOUT", "30", 0);
  setenv("SHARC_DEBUG", "NONE", 0);
  rank_t a[NR];
  sharc_unique_id_t id;
  if (sharc_get_unique_id(&id) != SHARC_OK) {
    printf("FAIL: sharc_get_unique_id: %s\n", sharc_last_error());
    return 1;
  }
  pthread_t th[NR];
  for (int r = 0; r < NR; r++) {
    a[r] = (rank_t){.rank = r, .id = id};
    pthread_create(&th[r], NULL, rank_main, &a[r]);
  }
  for (int r = 0; r < NR; r++)
    pthread_join(th[r], NULL);
  int bad = 0;
  for (int r = 0; r < NR; r++)
    if (!a[r].ok) {
      printf("FAIL: rank %d: %s\n", r, a[r].err);
      bad = 1;
    }
  if (!bad)
    printf("test_stream_sync: a synchronize with a peer's call waiting on the "
           "same device returned; 3 all-reduces exact on %d ranks\n",
           NR);
  return bad;
}

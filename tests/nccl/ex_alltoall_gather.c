/*
 * ex_alltoall_gather.c - NCCL 2.28's all-to-all, gather and scatter calls,
 * one device per process, on a communicator made by the scalable init.
 *
 * The ranks join with ncclCommInitRankScalable given two unique ids (one
 * with a single rank), both made by rank 0 and passed over a local socket
 * (see ex_util.h). Then, for counts {1, 1021, 65536} floats:
 *   ncclAlltoAll   block j of rank r's send buffer lands in block r of
 *                  rank j's receive buffer;
 *   ncclGather     to every root in turn, out of place and in place;
 *   ncclScatter    from every root in turn, out of place and in place.
 * Values encode (sender, receiver, index), so a misplaced block is caught.
 * Off the root the unused buffer is passed as NULL (gather's recvbuff,
 * scatter's sendbuff), as NCCL allows. A last gather moves fp8 bytes
 * (ncclFloat8e4m3), which must arrive bit for bit.
 *
 * Run:  sharcrun -n 4 ex_alltoall_gather     (EX_MEM=host: host buffers)
 * Exit: 0 PASS, 1 FAIL, 77 no CUDA device.
 */
#include "ex_util.h"

#include <stdint.h>

/* Element i of the block rank `src` sends to rank `dst` (an exact float:
 * an integer below 2^24). */
static float val(int src, int dst, int size, size_t i) {
  return (float)((((size_t)src * (size_t)size + (size_t)dst) * 977u + i) %
                 1000003u);
}

static size_t alltoall(ncclComm_t comm, cudaStream_t stream, int rank, int size,
                       size_t count) {
  size_t n = (size_t)size * count, i, bad;
  float *h_send = ex_host(n * sizeof(float));
  float *h_recv = ex_host(n * sizeof(float));
  float *h_want = ex_host(n * sizeof(float));
  void *sendbuf = ex_alloc(n * sizeof(float));
  void *recvbuf = ex_alloc(n * sizeof(float));
  int p;
  for (p = 0; p < size; p++)
    for (i = 0; i < count; i++) {
      h_send[(size_t)p * count + i] = val(rank, p, size, i);
      h_want[(size_t)p * count + i] = val(p, rank, size, i);
    }
  ex_upload(sendbuf, h_send, n * sizeof(float));
  NCCLCHECK(ncclAlltoAll(sendbuf, recvbuf, count, ncclFloat, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  ex_download(h_recv, recvbuf, n * sizeof(float));
  bad = ex_check_f("alltoall", rank, h_recv, h_want, n);
  ex_free(sendbuf);
  ex_free(recvbuf);
  free(h_send);
  free(h_recv);
  free(h_want);
  return bad;
}

/* Gather to root: rank p contributes val(p, root, .); in place the root's
 * block already sits at recvbuff + root*count. */
static size_t gather(ncclComm_t comm, cudaStream_t stream, int rank, int size,
                     int root, size_t count, int inplace) {
  size_t n = (size_t)size * count, i, bad = 0;
  float *h_mine = ex_host(count * sizeof(float));
  float *h_recv = ex_host(n * sizeof(float));
  float *h_want = ex_host(n * sizeof(float));
  void *recvbuf = rank == root ? ex_alloc(n * sizeof(float)) : NULL;
  void *sendbuf = NULL;
  const void *src;
  int p;
  for (i = 0; i < count; i++)
    h_mine[i] = val(rank, root, size, i);
  if (inplace && rank == root) {
    src = (const char *)recvbuf + (size_t)root * count * sizeof(float);
    ex_upload((void *)src, h_mine, count * sizeof(float));
  } else {
    sendbuf = ex_alloc(count * sizeof(float));
    ex_upload(sendbuf, h_mine, count * sizeof(float));
    src = sendbuf;
  }
  NCCLCHECK(ncclGather(src, recvbuf, count, ncclFloat, root, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  if (rank == root) {
    for (p = 0; p < size; p++)
      for (i = 0; i < count; i++)
        h_want[(size_t)p * count + i] = val(p, root, size, i);
    ex_download(h_recv, recvbuf, n * sizeof(float));
    bad = ex_check_f(inplace ? "gather in place" : "gather", rank, h_recv,
                     h_want, n);
    ex_free(recvbuf);
  }
  if (sendbuf)
    ex_free(sendbuf);
  free(h_mine);
  free(h_recv);
  free(h_want);
  return bad;
}

/* Scatter from root: block p of root's buffer is val(root, p, .); in place
 * the root receives into sendbuff + root*count. */
static size_t scatter(ncclComm_t comm, cudaStream_t stream, int rank, int size,
                      int root, size_t count, int inplace) {
  size_t n = (size_t)size * count, i, bad;
  float *h_send = ex_host(n * sizeof(float));
  float *h_recv = ex_host(count * sizeof(float));
  float *h_want = ex_host(count * sizeof(float));
  void *sendbuf = rank == root ? ex_alloc(n * sizeof(float)) : NULL;
  void *recvbuf = NULL;
  void *dst;
  int p;
  if (rank == root) {
    for (p = 0; p < size; p++)
      for (i = 0; i < count; i++)
        h_send[(size_t)p * count + i] = val(root, p, size, i);
    ex_upload(sendbuf, h_send, n * sizeof(float));
  }
  if (inplace && rank == root) {
    dst = (char *)sendbuf + (size_t)root * count * sizeof(float);
  } else {
    recvbuf = ex_alloc(count * sizeof(float));
    dst = recvbuf;
  }
  NCCLCHECK(ncclScatter(sendbuf, dst, count, ncclFloat, root, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  for (i = 0; i < count; i++)
    h_want[i] = val(root, rank, size, i);
  ex_download(h_recv, dst, count * sizeof(float));
  bad = ex_check_f(inplace ? "scatter in place" : "scatter", rank, h_recv,
                   h_want, count);
  if (sendbuf)
    ex_free(sendbuf);
  if (recvbuf)
    ex_free(recvbuf);
  free(h_send);
  free(h_recv);
  free(h_want);
  return bad;
}

/* fp8 is data to gather: every byte pattern must arrive unchanged. */
static size_t gather_fp8(ncclComm_t comm, cudaStream_t stream, int rank,
                         int size) {
  enum { COUNT = 300 };
  size_t n = (size_t)size * COUNT, i, bad = 0;
  uint8_t mine[COUNT];
  uint8_t *h_recv = ex_host(n);
  void *sendbuf = ex_alloc(COUNT);
  void *recvbuf = rank == 0 ? ex_alloc(n) : NULL;
  for (i = 0; i < COUNT; i++)
    mine[i] = (uint8_t)(i * 7 + (size_t)rank * 31);
  ex_upload(sendbuf, mine, COUNT);
  NCCLCHECK(
      ncclGather(sendbuf, recvbuf, COUNT, ncclFloat8e4m3, 0, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  if (rank == 0) {
    ex_download(h_recv, recvbuf, n);
    for (i = 0; i < n; i++) {
      uint8_t want = (uint8_t)((i % COUNT) * 7 + (i / COUNT) * 31);
      if (h_recv[i] != want && bad++ == 0)
        fprintf(stderr, "gather fp8: [%zu] = %u, want %u\n", i,
                (unsigned)h_recv[i], (unsigned)want);
    }
    ex_free(recvbuf);
  }
  ex_free(sendbuf);
  free(h_recv);
  return bad;
}

int main(void) {
  static const size_t counts[] = {1, 1021, 65536};
  int rank, size, nid, root, inplace;
  size_t bad = 0, c;
  ncclUniqueId ids[2];
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclComm_t comm;
  cudaStream_t stream;
  int version = 0;

  ex_rank_size(&rank, &size);
  ex_device_or_skip(ex_local_rank(rank));
  nid = size >= 2 ? 2 : 1;
  ex_share_ids(ids, nid, rank, size);
  NCCLCHECK(ncclCommInitRankScalable(&comm, size, rank, nid, ids, &config));
  CUDACHECK(cudaStreamCreate(&stream));
  NCCLCHECK(ncclGetVersion(&version));

  for (c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
    bad += alltoall(comm, stream, rank, size, counts[c]);
    for (root = 0; root < size; root++)
      for (inplace = 0; inplace < 2; inplace++) {
        bad += gather(comm, stream, rank, size, root, counts[c], inplace);
        bad += scatter(comm, stream, rank, size, root, counts[c], inplace);
      }
  }
  bad += gather_fp8(comm, stream, rank, size);

  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  CUDACHECK(cudaStreamDestroy(stream));
  printf("ex_alltoall_gather: ncclGetVersion %d, rank %d of %d: %s\n", version,
         rank, size, bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}

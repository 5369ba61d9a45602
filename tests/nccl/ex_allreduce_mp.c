/*
 * ex_allreduce_mp.c - one device per process, ncclCommInitRank.
 *
 * Rank 0 creates the ncclUniqueId and hands it to the other ranks over a
 * local socket (see ex_util.h). Then: AllReduce (sum, float, 1<<20 elements),
 * Broadcast from root size-1, Reduce to root 0, AllGather and ReduceScatter,
 * each verified exactly on every rank, plus the communicator queries
 * (ncclCommCount, ncclCommUserRank, ncclCommCuDevice, ncclGetVersion,
 * ncclCommGetAsyncError) and ncclCommFinalize + ncclCommDestroy.
 *
 * Run:  sharcrun -n 4 ex_allreduce_mp       (EX_MEM=host: host buffers)
 * Exit: 0 PASS, 1 FAIL, 77 no CUDA device.
 */
#include "ex_util.h"

#define N (1 << 20)   /* AllReduce / Broadcast / Reduce elements */
#define PER (1 << 16) /* AllGather / ReduceScatter elements per rank */

/* Contribution of rank r at index i: r+1 plus a small index term. Every
 * partial sum is an integer far below 2^24, so float sums are exact in any
 * order. */
static float contrib(int r, size_t i) { return (float)(r + 1 + (int)(i % 17)); }

static size_t check_queries(ncclComm_t comm, int rank, int size, int dev,
                            int verbose) {
  int count = -1, urank = -1, cudev = -1, version = 0;
  ncclResult_t async = ncclInternalError;
  size_t bad = 0;
  NCCLCHECK(ncclCommCount(comm, &count));
  NCCLCHECK(ncclCommUserRank(comm, &urank));
  NCCLCHECK(ncclCommCuDevice(comm, &cudev));
  NCCLCHECK(ncclGetVersion(&version));
  NCCLCHECK(ncclCommGetAsyncError(comm, &async));
  if (count != size) {
    fprintf(stderr, "rank %d: ncclCommCount = %d, want %d\n", rank, count,
            size);
    bad++;
  }
  if (urank != rank) {
    fprintf(stderr, "rank %d: ncclCommUserRank = %d\n", rank, urank);
    bad++;
  }
  if (cudev != dev) {
    fprintf(stderr, "rank %d: ncclCommCuDevice = %d, want %d\n", rank, cudev,
            dev);
    bad++;
  }
  if (version <= 0) {
    fprintf(stderr, "rank %d: ncclGetVersion = %d\n", rank, version);
    bad++;
  }
  if (async != ncclSuccess) {
    fprintf(stderr, "rank %d: async error %d '%s'\n", rank, (int)async,
            ncclGetErrorString(async));
    bad++;
  }
  if (rank == 0 && verbose)
    printf("ex_allreduce_mp: ncclGetVersion %d, %d ranks\n", version, count);
  return bad;
}

int main(void) {
  int rank, size, dev, root = 0;
  size_t i, bad = 0, tri;
  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t stream;
  float *h_in, *h_out, *h_want;
  void *sendbuf, *recvbuf;
  size_t big = (size_t)N; /* buffers hold max(N, size*PER) floats */

  ex_rank_size(&rank, &size);
  if ((size_t)size * PER > big)
    big = (size_t)size * PER;
  dev = ex_device_or_skip(ex_local_rank(rank));
  ex_share_id(&id, rank, size);
  NCCLCHECK(ncclCommInitRank(&comm, size, id, rank));
  CUDACHECK(cudaStreamCreate(&stream));
  bad += check_queries(comm, rank, size, dev, 1);

  h_in = ex_host(big * sizeof(float));
  h_out = ex_host(big * sizeof(float));
  h_want = ex_host(big * sizeof(float));
  sendbuf = ex_alloc(big * sizeof(float));
  recvbuf = ex_alloc(big * sizeof(float));
  tri = (size_t)size * (size_t)(size + 1) / 2; /* sum of r+1 over ranks */

  /* AllReduce: sum of contrib over all ranks. */
  for (i = 0; i < N; i++) {
    h_in[i] = contrib(rank, i);
    h_want[i] = (float)(tri + (size_t)size * (i % 17));
  }
  ex_upload(sendbuf, h_in, N * sizeof(float));
  NCCLCHECK(
      ncclAllReduce(sendbuf, recvbuf, N, ncclFloat, ncclSum, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  ex_download(h_out, recvbuf, N * sizeof(float));
  bad += ex_check_f("allreduce", rank, h_out, h_want, N);

  /* Broadcast from the last rank; root value is distinct from any input. */
  root = size - 1;
  for (i = 0; i < N; i++) {
    h_in[i] = rank == root ? (float)(1000 + (int)(i % 251)) : -1.0f;
    h_want[i] = (float)(1000 + (int)(i % 251));
    h_out[i] = -2.0f;
  }
  ex_upload(sendbuf, h_in, N * sizeof(float));
  ex_upload(recvbuf, h_out, N * sizeof(float));
  NCCLCHECK(ncclBroadcast(sendbuf, recvbuf, N, ncclFloat, root, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  ex_download(h_out, recvbuf, N * sizeof(float));
  bad += ex_check_f("broadcast", rank, h_out, h_want, N);

  /* Reduce to rank 0: same expected sums as the AllReduce. */
  for (i = 0; i < N; i++) {
    h_in[i] = contrib(rank, i);
    h_want[i] = (float)(tri + (size_t)size * (i % 17));
  }
  ex_upload(sendbuf, h_in, N * sizeof(float));
  NCCLCHECK(
      ncclReduce(sendbuf, recvbuf, N, ncclFloat, ncclSum, 0, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  if (rank == 0) {
    ex_download(h_out, recvbuf, N * sizeof(float));
    bad += ex_check_f("reduce", rank, h_out, h_want, N);
  }

  /* AllGather: block q of the result is rank q's contribution. */
  for (i = 0; i < PER; i++)
    h_in[i] = (float)(rank * 100 + (int)(i % 13));
  for (i = 0; i < (size_t)size * PER; i++)
    h_want[i] = (float)((int)(i / PER) * 100 + (int)(i % PER % 13));
  ex_upload(sendbuf, h_in, PER * sizeof(float));
  NCCLCHECK(ncclAllGather(sendbuf, recvbuf, PER, ncclFloat, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  ex_download(h_out, recvbuf, (size_t)size * PER * sizeof(float));
  bad += ex_check_f("allgather", rank, h_out, h_want, (size_t)size * PER);

  /* ReduceScatter: rank r keeps the sums of block r. */
  for (i = 0; i < (size_t)size * PER; i++)
    h_in[i] = (float)(rank + 1 + (int)(i % 29));
  for (i = 0; i < PER; i++)
    h_want[i] = (float)(tri + (size_t)size * (((size_t)rank * PER + i) % 29));
  ex_upload(sendbuf, h_in, (size_t)size * PER * sizeof(float));
  NCCLCHECK(ncclReduceScatter(sendbuf, recvbuf, PER, ncclFloat, ncclSum, comm,
                              stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  ex_download(h_out, recvbuf, PER * sizeof(float));
  bad += ex_check_f("reducescatter", rank, h_out, h_want, PER);

  bad += check_queries(comm, rank, size, dev, 0); /* async error still clean */
  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  CUDACHECK(cudaStreamDestroy(stream));
  ex_free(sendbuf);
  ex_free(recvbuf);
  free(h_in);
  free(h_out);
  free(h_want);
  printf("ex_allreduce_mp: rank %d of %d: %s\n", rank, size,
         bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}

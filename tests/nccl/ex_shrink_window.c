/*
 * ex_shrink_window.c - NCCL 2.28's communicator and memory calls, one
 * device per process: a registered window, a simulated group end and a
 * shrink.
 *
 *   ncclCommWindowRegister   an in-place all-reduce on a buffer from
 *                            ncclMemAlloc registered as a symmetric window,
 *                            then ncclCommWindowDeregister;
 *   ncclGroupSimulateEnd     a grouped all-reduce is simulated, never run:
 *                            its receive buffer must stay untouched (an
 *                            estimate is printed, or the library's reason
 *                            for giving none when it returns
 *                            ncclInvalidUsage);
 *   ncclCommShrink           the last rank, and rank 0 when there are 3 or
 *                            more, leave; the others shrink the
 *                            communicator, check their new rank and count
 *                            and all-reduce on it.
 * The unique id goes over a local socket (see ex_util.h).
 *
 * Run:  sharcrun -n 4 ex_shrink_window       (EX_MEM=host: host buffers)
 * Exit: 0 PASS, 1 FAIL, 77 no CUDA device.
 */
#include "ex_util.h"

#define N 4099 /* floats per all-reduce */

/* Rank r's element i: sums over any set of ranks stay exact integers. */
static float contrib(int r, size_t i) { return (float)(r + 1 + (int)(i % 13)); }

/* Fills buf with rank's contributions, all-reduces it in place, checks the
 * sum over the ranks listed in who (n of them). */
static size_t allreduce_check(const char *what, ncclComm_t comm,
                              cudaStream_t stream, void *buf, int rank,
                              const int *who, int n) {
  float *h = ex_host(N * sizeof(float));
  float *want = ex_host(N * sizeof(float));
  size_t i, bad;
  int k;
  for (i = 0; i < N; i++) {
    h[i] = contrib(rank, i);
    want[i] = 0.0f;
    for (k = 0; k < n; k++)
      want[i] += contrib(who[k], i);
  }
  ex_upload(buf, h, N * sizeof(float));
  NCCLCHECK(ncclAllReduce(buf, buf, N, ncclFloat, ncclSum, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));
  ex_download(h, buf, N * sizeof(float));
  bad = ex_check_f(what, rank, h, want, N);
  free(h);
  free(want);
  return bad;
}

static size_t window(ncclComm_t comm, cudaStream_t stream, int rank,
                     const int *all, int size) {
  size_t bytes = N * sizeof(float), bad;
  void *buf = NULL;
  ncclWindow_t win;
  if (ex_host_mem())
    buf = ex_host(bytes);
  else
    NCCLCHECK(ncclMemAlloc(&buf, bytes));
  NCCLCHECK(
      ncclCommWindowRegister(comm, buf, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
  bad =
      allreduce_check("window all-reduce", comm, stream, buf, rank, all, size);
  NCCLCHECK(ncclCommWindowDeregister(comm, win));
  if (ex_host_mem())
    free(buf);
  else
    NCCLCHECK(ncclMemFree(buf));
  return bad;
}

static size_t simulate(ncclComm_t comm, cudaStream_t stream, int rank) {
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  float *h = ex_host(N * sizeof(float));
  void *sendbuf = ex_alloc(N * sizeof(float));
  void *recvbuf = ex_alloc(N * sizeof(float));
  ncclResult_t r;
  size_t i, bad = 0;
  for (i = 0; i < N; i++)
    h[i] = 1.0f;
  ex_upload(sendbuf, h, N * sizeof(float));
  for (i = 0; i < N; i++)
    h[i] = -7.0f; /* what recvbuf must still hold */
  ex_upload(recvbuf, h, N * sizeof(float));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(
      ncclAllReduce(sendbuf, recvbuf, N, ncclFloat, ncclSum, comm, stream));
  r = ncclGroupSimulateEnd(&sim);
  if (r == ncclSuccess) {
    if (rank == 0)
      printf("ncclGroupSimulateEnd: estimated %g\n", (double)sim.estimatedTime);
  } else if (r == ncclInvalidUsage) {
    if (rank == 0)
      printf("ncclGroupSimulateEnd: no estimate: %s\n", ncclGetLastError(NULL));
  } else {
    fprintf(stderr, "rank %d: ncclGroupSimulateEnd: %d '%s'\n", rank, (int)r,
            ncclGetErrorString(r));
    bad++;
  }
  CUDACHECK(cudaStreamSynchronize(stream));
  ex_download(h, recvbuf, N * sizeof(float));
  for (i = 0; i < N; i++)
    if (h[i] != -7.0f && bad++ == 0)
      fprintf(stderr, "rank %d: simulated all-reduce wrote recvbuf[%zu]\n",
              rank, i);
  ex_free(sendbuf);
  ex_free(recvbuf);
  free(h);
  return bad;
}

static size_t shrink(ncclComm_t comm, cudaStream_t stream, int rank, int size) {
  int excl[2], nexcl = 0, keep[64], nkeep = 0, r, me = 0, cnt = -1, urank = -1;
  int i, out;
  ncclComm_t sub = NULL;
  void *buf;
  size_t bad = 0;
  if (size < 2 || size > 64)
    return 0;
  excl[nexcl++] = size - 1;
  if (size >= 3)
    excl[nexcl++] = 0;
  for (r = 0; r < size; r++) {
    out = 0;
    for (i = 0; i < nexcl; i++)
      out |= excl[i] == r;
    if (out)
      continue;
    if (r == rank)
      me = nkeep;
    keep[nkeep++] = r;
  }
  for (i = 0; i < nexcl; i++)
    if (excl[i] == rank) {
      printf("ex_shrink_window: rank %d left the shrunk communicator\n", rank);
      return 0; /* excluded ranks do not call ncclCommShrink */
    }
  NCCLCHECK(ncclCommShrink(comm, excl, nexcl, &sub, NULL, NCCL_SHRINK_DEFAULT));
  NCCLCHECK(ncclCommCount(sub, &cnt));
  NCCLCHECK(ncclCommUserRank(sub, &urank));
  if (cnt != nkeep || urank != me) {
    fprintf(stderr, "rank %d: shrunk to rank %d of %d, want %d of %d\n", rank,
            urank, cnt, me, nkeep);
    bad++;
  }
  buf = ex_alloc(N * sizeof(float));
  bad +=
      allreduce_check("shrunk all-reduce", sub, stream, buf, rank, keep, nkeep);
  ex_free(buf);
  NCCLCHECK(ncclCommDestroy(sub));
  return bad;
}

int main(void) {
  int rank, size, r, all[64];
  size_t bad = 0;
  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t stream;

  ex_rank_size(&rank, &size);
  ex_device_or_skip(ex_local_rank(rank));
  ex_share_id(&id, rank, size);
  NCCLCHECK(ncclCommInitRank(&comm, size, id, rank));
  CUDACHECK(cudaStreamCreate(&stream));
  for (r = 0; r < size && r < 64; r++)
    all[r] = r;

  if (size <= 64)
    bad += window(comm, stream, rank, all, size);
  bad += simulate(comm, stream, rank);
  bad += shrink(comm, stream, rank, size);

  NCCLCHECK(ncclCommDestroy(comm));
  CUDACHECK(cudaStreamDestroy(stream));
  printf("ex_shrink_window: rank %d of %d: %s\n", rank, size,
         bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}

/*
 * ex_alltoall_grouped.c - all-to-all built from grouped ncclSend / ncclRecv,
 * one device per process.
 *
 * Inside one ncclGroupStart / ncclGroupEnd each rank sends block p of its
 * send buffer to rank p and receives block p of its receive buffer from rank
 * p, for every p including itself. First with equal blocks (BLOCK floats),
 * then an all-to-all-v where rank r sends (r+p)%3*1000+1 floats to rank p.
 * Values encode (sender, receiver, index), so misplaced blocks are caught.
 * The unique id goes over a local socket (see ex_util.h).
 *
 * Run:  sharcrun -n 4 ex_alltoall_grouped     (EX_MEM=host: host buffers)
 * Exit: 0 PASS, 1 FAIL, 77 no CUDA device.
 */
#include "ex_util.h"

#define BLOCK 65537

/* Element i of the block that rank `src` sends to rank `dst` (exact float:
 * an integer below 2^24). */
static float val(int src, int dst, int size, size_t i) {
  return (float)((((size_t)src * (size_t)size + (size_t)dst) * 131u + i) %
                 1000003u);
}

/* Elements rank `src` sends to rank `dst` in the all-to-all-v. */
static size_t vcount(int src, int dst) {
  return (size_t)((src + dst) % 3) * 1000 + 1;
}

/* Grouped all-to-all(v): scount[p]/sdispl[p] describe the block for rank p in
 * sendbuf, rcount[p]/rdispl[p] the block from rank p in recvbuf (floats). */
static void alltoallv(ncclComm_t comm, cudaStream_t stream, int size,
                      const void *sendbuf, const size_t *scount,
                      const size_t *sdispl, void *recvbuf, const size_t *rcount,
                      const size_t *rdispl) {
  int p;
  NCCLCHECK(ncclGroupStart());
  for (p = 0; p < size; p++) {
    NCCLCHECK(ncclSend((const char *)sendbuf + sdispl[p] * sizeof(float),
                       scount[p], ncclFloat, p, comm, stream));
    NCCLCHECK(ncclRecv((char *)recvbuf + rdispl[p] * sizeof(float), rcount[p],
                       ncclFloat, p, comm, stream));
  }
  NCCLCHECK(ncclGroupEnd());
  CUDACHECK(cudaStreamSynchronize(stream));
}

/* Fill, run, verify one all-to-all(v) described by the count function (NULL:
 * equal BLOCK-sized blocks). Returns the number of wrong elements. */
static size_t run_case(ncclComm_t comm, cudaStream_t stream, int rank, int size,
                       size_t (*cnt)(int, int), const char *what) {
  size_t *sc = ex_host(4 * (size_t)size * sizeof(size_t));
  size_t *sd = sc + size, *rc = sd + size, *rd = rc + size;
  size_t stot = 0, rtot = 0, i, bad = 0;
  float *h_send, *h_recv, *h_want;
  void *sendbuf, *recvbuf;
  int p;
  for (p = 0; p < size; p++) {
    sc[p] = cnt ? cnt(rank, p) : BLOCK;
    rc[p] = cnt ? cnt(p, rank) : BLOCK;
    sd[p] = stot;
    rd[p] = rtot;
    stot += sc[p];
    rtot += rc[p];
  }
  h_send = ex_host(stot * sizeof(float));
  h_recv = ex_host(rtot * sizeof(float));
  h_want = ex_host(rtot * sizeof(float));
  for (p = 0; p < size; p++) {
    for (i = 0; i < sc[p]; i++)
      h_send[sd[p] + i] = val(rank, p, size, i);
    for (i = 0; i < rc[p]; i++)
      h_want[rd[p] + i] = val(p, rank, size, i);
  }
  for (i = 0; i < rtot; i++)
    h_recv[i] = -1.0f;
  sendbuf = ex_alloc(stot * sizeof(float));
  recvbuf = ex_alloc(rtot * sizeof(float));
  ex_upload(sendbuf, h_send, stot * sizeof(float));
  ex_upload(recvbuf, h_recv, rtot * sizeof(float));
  alltoallv(comm, stream, size, sendbuf, sc, sd, recvbuf, rc, rd);
  ex_download(h_recv, recvbuf, rtot * sizeof(float));
  bad = ex_check_f(what, rank, h_recv, h_want, rtot);
  ex_free(sendbuf);
  ex_free(recvbuf);
  free(h_send);
  free(h_recv);
  free(h_want);
  free(sc);
  return bad;
}

int main(void) {
  int rank, size;
  size_t bad = 0;
  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t stream;

  ex_rank_size(&rank, &size);
  ex_device_or_skip(ex_local_rank(rank));
  ex_share_id(&id, rank, size);
  NCCLCHECK(ncclCommInitRank(&comm, size, id, rank));
  CUDACHECK(cudaStreamCreate(&stream));

  bad += run_case(comm, stream, rank, size, NULL, "alltoall");
  bad += run_case(comm, stream, rank, size, vcount, "alltoallv");

  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  CUDACHECK(cudaStreamDestroy(stream));
  printf("ex_alltoall_grouped: rank %d of %d: %s\n", rank, size,
         bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}

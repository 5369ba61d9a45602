/*
 * ex_sendrecv_ring.c - point-to-point ncclSend / ncclRecv, one device per
 * process.
 *
 * Each rank sends to (rank+1)%size and receives from (rank-1+size)%size
 * inside ncclGroupStart / ncclGroupEnd: first 1000003 floats with values
 * derived from the sender's rank and the index, then counts 0, 1, 7, 1<<20
 * for ncclInt8, ncclInt32, ncclFloat64 and ncclBfloat16 with byte patterns
 * (verified byte for byte). Finally a pairwise exchange with rank^1 (ranks
 * without a partner sit it out). The unique id goes over a local socket
 * (see ex_util.h); a single rank talks to itself.
 *
 * Run:  sharcrun -n 4 ex_sendrecv_ring     (EX_MEM=host: host buffers)
 * Exit: 0 PASS, 1 FAIL, 77 no CUDA device.
 */
#include "ex_util.h"

#define RING_COUNT 1000003

static unsigned char pattern(int sender, size_t i, int salt) {
  return (unsigned char)((size_t)sender * 31u + i * 7u + (size_t)salt * 13u +
                         (i >> 8));
}

/* Send `bytes` of pattern(rank) to `to`, receive from `from`, verify bytes
 * equal pattern(from). Returns the number of wrong bytes. */
static size_t exchange(ncclComm_t comm, cudaStream_t stream, int rank, int to,
                       int from, size_t count, ncclDataType_t dt, size_t esize,
                       int salt, const char *what) {
  size_t i, bytes = count * esize, bad = 0;
  unsigned char *h = ex_host(bytes);
  void *sendbuf = ex_alloc(bytes), *recvbuf = ex_alloc(bytes);
  for (i = 0; i < bytes; i++)
    h[i] = pattern(rank, i, salt);
  ex_upload(sendbuf, h, bytes);
  memset(h, 0xA5, bytes);
  ex_upload(recvbuf, h, bytes);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(sendbuf, count, dt, to, comm, stream));
  NCCLCHECK(ncclRecv(recvbuf, count, dt, from, comm, stream));
  NCCLCHECK(ncclGroupEnd());
  CUDACHECK(cudaStreamSynchronize(stream));
  ex_download(h, recvbuf, bytes);
  for (i = 0; i < bytes; i++)
    if (h[i] != pattern(from, i, salt) && bad++ == 0)
      fprintf(stderr, "%s: rank %d: count %zu byte %zu = %u, want %u\n", what,
              rank, count, i, h[i], pattern(from, i, salt));
  if (bad)
    fprintf(stderr, "%s: rank %d: count %zu: %zu of %zu bytes wrong\n", what,
            rank, count, bad, bytes);
  ex_free(sendbuf);
  ex_free(recvbuf);
  free(h);
  return bad;
}

int main(void) {
  static const size_t counts[] = {0, 1, 7, 1 << 20};
  static const struct {
    ncclDataType_t dt;
    size_t esize;
    const char *name;
  } types[] = {{ncclInt8, 1, "int8"},
               {ncclInt32, 4, "int32"},
               {ncclFloat64, 8, "float64"},
               {ncclBfloat16, 2, "bfloat16"}};
  int rank, size, next, prev, t, c, salt = 0;
  size_t i, bad = 0;
  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t stream;
  float *h_out, *h_want;
  void *sendbuf, *recvbuf;

  ex_rank_size(&rank, &size);
  ex_device_or_skip(ex_local_rank(rank));
  ex_share_id(&id, rank, size);
  NCCLCHECK(ncclCommInitRank(&comm, size, id, rank));
  CUDACHECK(cudaStreamCreate(&stream));
  next = (rank + 1) % size;
  prev = (rank - 1 + size) % size;

  /* Float ring: value of sender s at index i is s*1000 + i%1000 (exact). */
  h_out = ex_host(RING_COUNT * sizeof(float));
  h_want = ex_host(RING_COUNT * sizeof(float));
  sendbuf = ex_alloc(RING_COUNT * sizeof(float));
  recvbuf = ex_alloc(RING_COUNT * sizeof(float));
  for (i = 0; i < RING_COUNT; i++) {
    h_out[i] = (float)(rank * 1000 + (int)(i % 1000));
    h_want[i] = (float)(prev * 1000 + (int)(i % 1000));
  }
  ex_upload(sendbuf, h_out, RING_COUNT * sizeof(float));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(sendbuf, RING_COUNT, ncclFloat, next, comm, stream));
  NCCLCHECK(ncclRecv(recvbuf, RING_COUNT, ncclFloat, prev, comm, stream));
  NCCLCHECK(ncclGroupEnd());
  CUDACHECK(cudaStreamSynchronize(stream));
  ex_download(h_out, recvbuf, RING_COUNT * sizeof(float));
  bad += ex_check_f("ring float", rank, h_out, h_want, RING_COUNT);
  ex_free(sendbuf);
  ex_free(recvbuf);
  free(h_out);
  free(h_want);

  /* Ring over counts x dtypes, byte patterns. */
  for (t = 0; t < (int)(sizeof(types) / sizeof(types[0])); t++)
    for (c = 0; c < (int)(sizeof(counts) / sizeof(counts[0])); c++)
      bad += exchange(comm, stream, rank, next, prev, counts[c], types[t].dt,
                      types[t].esize, ++salt, types[t].name);

  /* Pairwise exchange with rank^1. */
  if ((rank ^ 1) < size)
    for (c = 0; c < (int)(sizeof(counts) / sizeof(counts[0])); c++)
      bad += exchange(comm, stream, rank, rank ^ 1, rank ^ 1, counts[c] + 3,
                      ncclInt32, 4, ++salt, "pairwise int32");

  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  CUDACHECK(cudaStreamDestroy(stream));
  printf("ex_sendrecv_ring: rank %d of %d: %s\n", rank, size,
         bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}

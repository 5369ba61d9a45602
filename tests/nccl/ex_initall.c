/*
 * ex_initall.c - one process driving several devices via ncclCommInitAll.
 *
 * Creates ndev communicators (devices 0..ndev-1), one stream per device, and
 * issues one AllReduce (sum, float) per device inside ncclGroupStart /
 * ncclGroupEnd; then a second group with a Broadcast from device 0. Results
 * are verified exactly on every device.
 *
 * Run:  ex_initall [ndev]     (single process, no launcher; default ndev is
 *                              cudaGetDeviceCount; EX_MEM=host: host buffers)
 * Exit: 0 PASS, 1 FAIL, 77 no CUDA device or fewer devices than requested.
 */
#include "ex_util.h"

#define COUNT (1 << 18)

int main(int argc, char **argv) {
  int ndev = 0, have = 0, i;
  size_t j, bad = 0;
  ncclComm_t *comms;
  cudaStream_t *streams;
  void **sendbufs, **recvbufs;
  float *h_in = ex_host(COUNT * sizeof(float));
  float *h_out = ex_host(COUNT * sizeof(float));
  float *h_want = ex_host(COUNT * sizeof(float));

  ex_device_or_skip(0);
  CUDACHECK(cudaGetDeviceCount(&have));
  ndev = have;
  if (argc > 1) {
    char *end = NULL;
    long v = strtol(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || v < 1 || v > 1024) {
      fprintf(stderr, "usage: %s [ndev >= 1]\n", argv[0]);
      return 1;
    }
    ndev = (int)v;
  }
  if (ndev > have) {
    printf("SKIP: %d devices requested, %d present\n", ndev, have);
    return 77;
  }

  comms = ex_host((size_t)ndev * sizeof(*comms));
  streams = ex_host((size_t)ndev * sizeof(*streams));
  sendbufs = ex_host((size_t)ndev * sizeof(*sendbufs));
  recvbufs = ex_host((size_t)ndev * sizeof(*recvbufs));
  NCCLCHECK(ncclCommInitAll(comms, ndev, NULL));
  for (i = 0; i < ndev; i++) {
    CUDACHECK(cudaSetDevice(i));
    CUDACHECK(cudaStreamCreate(&streams[i]));
    sendbufs[i] = ex_alloc(COUNT * sizeof(float));
    recvbufs[i] = ex_alloc(COUNT * sizeof(float));
  }

  /* AllReduce: device i contributes (i+1) + (j % 11); sums stay exact. */
  for (i = 0; i < ndev; i++) {
    for (j = 0; j < COUNT; j++)
      h_in[j] = (float)(i + 1 + (int)(j % 11));
    CUDACHECK(cudaSetDevice(i));
    ex_upload(sendbufs[i], h_in, COUNT * sizeof(float));
  }
  NCCLCHECK(ncclGroupStart());
  for (i = 0; i < ndev; i++)
    NCCLCHECK(ncclAllReduce(sendbufs[i], recvbufs[i], COUNT, ncclFloat, ncclSum,
                            comms[i], streams[i]));
  NCCLCHECK(ncclGroupEnd());
  for (i = 0; i < ndev; i++) {
    CUDACHECK(cudaSetDevice(i));
    CUDACHECK(cudaStreamSynchronize(streams[i]));
  }
  for (j = 0; j < COUNT; j++)
    h_want[j] = (float)(ndev * (ndev + 1) / 2 + ndev * (int)(j % 11));
  for (i = 0; i < ndev; i++) {
    ex_download(h_out, recvbufs[i], COUNT * sizeof(float));
    bad += ex_check_f("initall allreduce", i, h_out, h_want, COUNT);
  }

  /* Broadcast from device 0; receive buffers pre-filled with -1. */
  for (j = 0; j < COUNT; j++) {
    h_want[j] = (float)(500 + (int)(j % 97) * 2);
    h_out[j] = -1.0f;
  }
  for (i = 0; i < ndev; i++) {
    CUDACHECK(cudaSetDevice(i));
    if (i == 0)
      ex_upload(sendbufs[i], h_want, COUNT * sizeof(float));
    ex_upload(recvbufs[i], h_out, COUNT * sizeof(float));
  }
  NCCLCHECK(ncclGroupStart());
  for (i = 0; i < ndev; i++)
    NCCLCHECK(ncclBroadcast(sendbufs[i], recvbufs[i], COUNT, ncclFloat, 0,
                            comms[i], streams[i]));
  NCCLCHECK(ncclGroupEnd());
  for (i = 0; i < ndev; i++) {
    CUDACHECK(cudaSetDevice(i));
    CUDACHECK(cudaStreamSynchronize(streams[i]));
  }
  for (i = 0; i < ndev; i++) {
    ex_download(h_out, recvbufs[i], COUNT * sizeof(float));
    bad += ex_check_f("initall broadcast", i, h_out, h_want, COUNT);
  }

  for (i = 0; i < ndev; i++) {
    CUDACHECK(cudaSetDevice(i));
    NCCLCHECK(ncclCommDestroy(comms[i]));
    CUDACHECK(cudaStreamDestroy(streams[i]));
    ex_free(sendbufs[i]);
    ex_free(recvbufs[i]);
  }
  free(comms);
  free(streams);
  free(sendbufs);
  free(recvbufs);
  free(h_in);
  free(h_out);
  free(h_want);
  printf("ex_initall: %d devices: %s\n", ndev, bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}

/*
 * stray_conn.c - the job under stray_test.sh: rank 1 arrives late so the
 * script can connect stray sockets to the rendezvous port while init is in
 * progress; the job must still form and compute correctly.
 *
 *   sharcrun -n N --port P stray_conn [DELAY_MS]
 *
 * Rank 1 sleeps DELAY_MS (default 1000) before sharc_comm_init_env. Then
 * every rank checks an all-reduce and a barrier, prints "stray_conn: rank R
 * ok" and exits 0; 1 on a wrong result, 2 when init failed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sharc.h"

int main(int argc, char **argv) {
  enum { CNT = 1000 };
  sharc_comm_t comm;
  int rank = -1, n = 0, bad = 0;
  long delay_ms = argc > 1 ? atol(argv[1]) : 1000;
  const char *er = getenv("SHARC_RANK");
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (er && atoi(er) == 1) {
    printf("stray_conn: rank 1 sleeping %ld ms before init\n", delay_ms);
    struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    printf("stray_conn: rank 1 calling init\n");
  }
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    printf("stray_conn: init failed: %s: %s\n", sharc_status_name(st),
           sharc_last_error());
    return 2;
  }
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &n);
  int32_t v[CNT];
  for (int i = 0; i < CNT; i++)
    v[i] = rank + 1 + i;
  st = sharc_all_reduce(v, v, CNT, SHARC_I32, SHARC_SUM, comm, NULL);
  for (int i = 0; st == SHARC_OK && i < CNT; i++)
    bad += v[i] != n * (n + 1) / 2 + n * i;
  if (st == SHARC_OK)
    st = sharc_barrier(comm, NULL);
  if (st != SHARC_OK || bad) {
    printf("stray_conn: rank %d: %s, %d wrong elements: %s\n", rank,
           sharc_status_name(st), bad, sharc_comm_last_error(comm));
    sharc_comm_abort(comm);
    return 1;
  }
  printf("stray_conn: rank %d ok\n", rank);
  return sharc_comm_destroy(comm) == SHARC_OK ? 0 : 1;
}

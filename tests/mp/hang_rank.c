/*
 * hang_rank.c - a rank stops calling collectives (alive, but never joins
 * collective #50); every other rank must fail with SHARC_ERR_TIMEOUT after
 * about SHARC_TIMEOUT seconds instead of hanging.
 *
 *   sharcrun -n N hang_rank K [NAME]
 *
 * With NAME=1 (ranks on one host, shm) each survivor's message must also
 * name "rank K" as the rank that has not called the collective. A survivor
 * prints its status and message and exits 3 when they are as expected, 4
 * otherwise; rank K stays away SHARC_TIMEOUT + 5 s and exits 0.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "names_rank.h"
#include "sharc.h"

#define COUNT 65536

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: sharcrun -n N hang_rank K [NAME]\n");
    return 2;
  }
  int k = atoi(argv[1]), need_name = argc > 2 && atoi(argv[2]);
  sharc_comm_t comm;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (sharc_comm_init_env(&comm) != SHARC_OK) {
    fprintf(stderr, "hang_rank: init failed: %s\n", sharc_last_error());
    return 2;
  }
  int rank;
  sharc_comm_rank(comm, &rank);
  static float a[COUNT], b[COUNT];
  for (int i = 0;; i++) {
    if (rank == k && i == 50) {
      /* Stay away for SHARC_TIMEOUT + 5 s; signals (SIGUSR1 asks for the
       * flight recorder) must not cut the absence short. */
      const char *t = getenv("SHARC_TIMEOUT");
      time_t until = time(NULL) + (t ? atoi(t) : 120) + 5;
      while (time(NULL) < until)
        sleep(1);
      sharc_comm_abort(comm);
      return 0;
    }
    sharc_status_t st =
        sharc_all_reduce(a, b, COUNT, SHARC_F32, SHARC_SUM, comm, NULL);
    if (st == SHARC_OK)
      continue;
    const char *msg = sharc_comm_last_error(comm);
    int good = st == SHARC_ERR_TIMEOUT && (!need_name || names_rank(msg, k));
    printf("hang_rank: survivor %d status %s after %d all-reduces: %s\n", rank,
           sharc_status_name(st), i, msg);
    sharc_comm_destroy(comm);
    return good ? 3 : 4;
  }
}

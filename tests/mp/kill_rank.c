/*
 * kill_rank.c - a rank dies mid-collective; every survivor must fail with
 * SHARC_ERR_PEER_LOST and a message naming the dead rank.
 *
 *   sharcrun -n N kill_rank K [SECONDS [LINGER]]
 *
 * All ranks loop 1 MiB f32 all-reduces (out of place, checking the sum).
 * After SECONDS (default 0.5) rank K raises SIGKILL on itself. A survivor
 * lingers LINGER seconds (default 1) after its failure before it exits, so
 * every survivor learns of rank K's death before it learns of another
 * survivor's exit (which would be a second, legitimate peer loss). A survivor
 * prints "kill_rank: survivor R status S after I all-reduces: MESSAGE" and
 * exits 3 when S is SHARC_ERR_PEER_LOST and MESSAGE names "rank K"; 4 for
 * any other status or message; 5 for a wrong sum; 2 for bad usage or a
 * failed init. Driven by kill_test.sh.
 */
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "names_rank.h"
#include "sharc.h"

#define COUNT (1u << 18) /* f32 elements: 1 MiB */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  sharc_comm_t comm;
  int rank = -1, n = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: sharcrun -n N kill_rank K [SECONDS [LINGER]]\n");
    return 2;
  }
  int k = atoi(argv[1]);
  double delay = argc > 2 ? atof(argv[2]) : 0.5,
         linger = argc > 3 ? atof(argv[3]) : 1.0;
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    printf("kill_rank: sharc_comm_init_env: %s: %s\n", sharc_status_name(st),
           sharc_last_error());
    return 2;
  }
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &n);
  if (k < 0 || k >= n) {
    printf("kill_rank: rank to kill %d is outside 0..%d\n", k, n - 1);
    sharc_comm_destroy(comm);
    return 2;
  }
  float *in = malloc(COUNT * sizeof *in), *out = malloc(COUNT * sizeof *out);
  if (!in || !out)
    return 2;
  for (unsigned i = 0; i < COUNT; i++)
    in[i] = 1.0f;

  long iters = 0;
  double t0 = now_s();
  for (;;) {
    if (rank == k && now_s() - t0 >= delay) {
      printf("kill_rank: rank %d raising SIGKILL after %ld all-reduces\n", rank,
             iters);
      fflush(stdout);
      raise(SIGKILL);
    }
    out[0] = out[COUNT - 1] = -1.0f;
    st = sharc_all_reduce(in, out, COUNT, SHARC_F32, SHARC_SUM, comm, NULL);
    if (st != SHARC_OK)
      break;
    if (out[0] != (float)n || out[COUNT - 1] != (float)n) {
      printf("kill_rank: rank %d: wrong sum %g (expected %d)\n", rank, out[0],
             n);
      return 5;
    }
    iters++;
  }
  const char *msg = sharc_comm_last_error(comm);
  int good = st == SHARC_ERR_PEER_LOST && msg && names_rank(msg, k);
  printf(
      "kill_rank: survivor %d status %s after %ld all-reduces (%.2f s): %s\n",
      rank, sharc_status_name(st), iters, now_s() - t0, msg ? msg : "(null)");
  if (!good)
    printf("kill_rank: survivor %d: unexpected; wanted SHARC_ERR_PEER_LOST "
           "naming rank %d\n",
           rank, k);
  /* Later calls on the broken communicator must fail too, not hang. */
  st = sharc_all_reduce(in, out, COUNT, SHARC_F32, SHARC_SUM, comm, NULL);
  if (st == SHARC_OK) {
    printf("kill_rank: survivor %d: all_reduce succeeded on a broken "
           "communicator\n",
           rank);
    good = 0;
  }
  struct timespec ts = {(time_t)linger, (long)((linger - (long)linger) * 1e9)};
  nanosleep(&ts, NULL);
  sharc_comm_abort(comm);
  free(in);
  free(out);
  return good ? 3 : 4;
}

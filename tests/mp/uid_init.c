/*
 * uid_init.c - communicator creation through the unique-id API, as a
 * program with its own out-of-band channel would do it (here: a file).
 *
 *   sharcrun -n N uid_init FILE
 *
 * The process with SHARC_RANK 0 calls sharc_get_unique_id and writes the id
 * to FILE.tmp, then renames it to FILE; every process waits for FILE, reads
 * the id and calls sharc_comm_init_rank(N, id, rank). Ranks run in reverse
 * order of their environment rank (rank = N-1-env rank) to show that the
 * id, not the environment, defines the job. Checks an all-reduce and an
 * all-gather; prints "uid_init: N passed, M failed" on every rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sharc.h"

int main(int argc, char **argv) {
  const char *er = getenv("SHARC_RANK"), *en = getenv("SHARC_WORLD_SIZE");
  if (argc != 2 || !er || !en) {
    fprintf(stderr, "usage: sharcrun -n N uid_init FILE\n");
    return 2;
  }
  int env_rank = atoi(er), n = atoi(en), pass = 0, fail = 0;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
  sharc_unique_id_t id;
  if (env_rank == 0) {
    if (sharc_get_unique_id(&id) != SHARC_OK) {
      fprintf(stderr, "uid_init: sharc_get_unique_id: %s\n",
              sharc_last_error());
      return 1;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 ||
        rename(tmp, argv[1]) != 0) {
      perror("uid_init: writing the id");
      return 1;
    }
  } else {
    FILE *f = NULL;
    for (int i = 0; i < 3000 && !(f = fopen(argv[1], "rb")); i++)
      usleep(10000);
    if (!f || fread(&id, sizeof id, 1, f) != 1) {
      fprintf(stderr, "uid_init: no id in %s after 30 s\n", argv[1]);
      return 1;
    }
    fclose(f);
  }
  int rank = n - 1 - env_rank;
  sharc_comm_t comm;
  sharc_status_t st = sharc_comm_init_rank(&comm, n, &id, rank);
  if (st != SHARC_OK) {
    fprintf(stderr, "uid_init: sharc_comm_init_rank: %s: %s\n",
            sharc_status_name(st), sharc_last_error());
    return 1;
  }
  int r = -1, size = -1;
  sharc_comm_rank(comm, &r);
  sharc_comm_size(comm, &size);
  (r == rank && size == n) ? pass++ : fail++;
  double x = rank, sum = -1;
  st = sharc_all_reduce(&x, &sum, 1, SHARC_F64, SHARC_SUM, comm, NULL);
  (st == SHARC_OK && sum == n * (n - 1) / 2.0) ? pass++ : fail++;
  int *all = calloc((size_t)n, sizeof *all);
  st = sharc_all_gather(&rank, all, 1, SHARC_I32, comm, NULL);
  int ok = st == SHARC_OK;
  for (int i = 0; i < n && all; i++)
    ok = ok && all[i] == i;
  ok ? pass++ : fail++;
  free(all);
  sharc_comm_destroy(comm);
  printf("uid_init: %d passed, %d failed (rank %d)\n", pass, fail, rank);
  return fail ? 1 : 0;
}

/* consumer.c - a user's C99 program: all-reduce of the ranks' numbers, and
 * the FSDP engine's header and defaults (sharc_shard.h). */
#include <sharc.h>
#include <sharc_shard.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  sharc_comm_t comm;
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    fprintf(stderr, "init: %s: %s\n", sharc_status_name(st),
            sharc_last_error());
    return 1;
  }
  int rank, size;
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &size);
  double x = rank + 1, sum = 0;
  st = sharc_all_reduce(&x, &sum, 1, SHARC_F64, SHARC_SUM, comm, NULL);
  sharc_shard_config_t cfg;
  sharc_shard_config_default(&cfg);
  int ok = st == SHARC_OK && sum == size * (size + 1) / 2.0 &&
           cfg.prefetch == 2 &&
           strcmp(sharc_strategy_name(cfg.strategy), "full") == 0;
  printf("consumer rank %d: sum %g %s\n", rank, sum, ok ? "ok" : "WRONG");
  sharc_comm_destroy(comm);
  return ok ? 0 : 1;
}

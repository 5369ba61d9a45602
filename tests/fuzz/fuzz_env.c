/*
 * fuzz_env.c - libFuzzer target for the parsers of what a launcher or a
 * user hands a rank: the launcher environment (bootstrap_env_read: ranks,
 * sizes, ports, SHARC_TOKEN, host:port, Slurm node lists), the first host
 * of a Slurm node list, "host:port" splitting, integer tunables
 * (SHARC_TIMEOUT) and the 128 bytes of a unique id.
 *
 * Input: lines. A line "NAME=VALUE" whose NAME is one of the variables
 * below sets it for one bootstrap_env_read (all are unset again after);
 * every line is also given to the Slurm node list, host:port and tunable
 * parsers as it is. The whole input, when it is at least 128 bytes, is a
 * unique id, once as is and once with its checksum made right so the
 * checks behind it are reached. Nothing here touches the network.
 *
 * Built with -DFUZZ_SEED_MAIN instead, it is a program that writes a unique
 * id made by sharc_get_unique_id's code into the directory given (the text
 * seeds are in seeds/fuzz_env/).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "net.h"

#define UID_SUM_OFF 124 /* bootstrap.c's unique id layout */

#ifndef FUZZ_SEED_MAIN

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  setenv("SHARC_DEBUG", "NONE", 1); /* errors are expected, by the million */
  for (int i = 0; bootstrap_env_vars[i]; i++)
    unsetenv(bootstrap_env_vars[i]);
  return 0;
}

static void one_line(const char *line) {
  char out[256], host[256];
  int port = 0;
  /* Buffers of several sizes: the too-long paths matter as much. */
  static const size_t lens[] = {1, 2, 8, sizeof out};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
    if (bootstrap_slurm_first_host(line, out, lens[i]) == SHARC_OK &&
        !memchr(out, '\0', lens[i]))
      abort();
  if (net_split_hostport(line, "FUZZ", host, sizeof host, &port) == SHARC_OK &&
      (port < 1 || port > 65535 || !memchr(host, '\0', sizeof host)))
    abort();
  net_split_hostport(line, "FUZZ", host, 4, &port);
  const char *eq = strchr(line, '=');
  if (eq) {
    size_t n = (size_t)(eq - line);
    for (int i = 0; bootstrap_env_vars[i]; i++)
      if (strlen(bootstrap_env_vars[i]) == n &&
          !strncmp(bootstrap_env_vars[i], line, n))
        setenv(bootstrap_env_vars[i], eq + 1, 1);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  for (char *p = text, *nl; p; p = nl) {
    nl = strchr(p, '\n');
    if (nl)
      *nl++ = '\0';
    one_line(p);
  }
  free(text);

  bootstrap_env_t env;
  if (bootstrap_env_read(&env) == SHARC_OK) {
    if (env.rank < 0 || env.rank >= env.nranks || env.nranks > MAX_RANKS ||
        env.root_port < 1 || env.root_port > 65535 ||
        !memchr(env.root_host, '\0', sizeof env.root_host) || !env.root_host[0])
      abort();
  }
  timeout_ns(); /* SHARC_TIMEOUT through the tunable parser */
  for (int i = 0; bootstrap_env_vars[i]; i++)
    unsetenv(bootstrap_env_vars[i]);

  if (size >= SHARC_UNIQUE_ID_BYTES) {
    sharc_unique_id_t id;
    bootstrap_env_t e;
    memset(&e, 0, sizeof e);
    memcpy(id.internal, data, sizeof id.internal);
    bootstrap_unique_id_parse(&id, &e);
    uint32_t sum = (uint32_t)hash_bytes(HASH_BASIS, id.internal, UID_SUM_OFF);
    memcpy(id.internal + UID_SUM_OFF, &sum, sizeof sum);
    if (bootstrap_unique_id_parse(&id, &e) == SHARC_OK &&
        (!memchr(e.root_host, '\0', sizeof e.root_host) || e.root_port < 0 ||
         e.root_port > 65535))
      abort();
  }
  return 0;
}

#else /* the seed writer */

int main(int argc, char **argv) {
  sharc_unique_id_t id;
  char path[4096];
  if (argc != 2) {
    fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  setenv("SHARC_SOCKET_IFNAME", "lo", 1);
  if (bootstrap_unique_id_create(&id) != SHARC_OK) {
    fprintf(stderr, "fuzz_env seeds: %s\n", err_last());
    return 1;
  }
  snprintf(path, sizeof path, "%s/unique_id", argv[1]);
  FILE *f = fopen(path, "wb");
  if (!f ||
      fwrite(id.internal, 1, sizeof id.internal, f) != sizeof id.internal) {
    perror(path);
    return 1;
  }
  fclose(f);
  return 0;
}

#endif

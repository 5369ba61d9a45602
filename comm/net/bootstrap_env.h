/*
 * bootstrap_env.h - who this process is, from the launcher's environment
 * (torchrun, Slurm, Open MPI, MPICH/Hydra or SHARC_*), and which host it
 * runs on. Pure parsing of the environment; no sockets.
 */
#ifndef SHARC_BOOTSTRAP_ENV_H
#define SHARC_BOOTSTRAP_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

#define SHARC_TOKEN_BYTES 16
#define SHARC_HOSTNAME_MAX 64
#define MAX_RANKS (1 << 16) /* largest communicator the bootstrap accepts */

typedef struct {
  int rank, nranks;
  int local_rank, local_size; /* from the launcher, -1 when unknown */
  char root_host[256];        /* rendezvous host as given */
  int root_port;
  uint8_t token[SHARC_TOKEN_BYTES];
  int host_root;      /* 1: this process serves the rendezvous */
  const char *source; /* "SHARC_*", "torchrun", "Slurm", ... */
} bootstrap_env_t;

/* Every environment variable bootstrap_env_read may consult (NULL ends
 * the list), for tests and fuzzers that must start from a clean slate. */
extern const char *const bootstrap_env_vars[];

/* Reads the launcher environment in the order of sharc.h
 * (sharc_comm_init_env). Errors name the variable and what was wrong.
 * For Slurm, expands the first host of the node list ("n[01-04,07]"). */
sharc_status_t bootstrap_env_read(bootstrap_env_t *env);

/* First host of a Slurm node list: "a[001-004],b" -> "a001". */
sharc_status_t bootstrap_slurm_first_host(const char *nodelist, char *out,
                                          size_t outlen);

/* Stable identity of this host: hash of SHARC_HOSTID if set, else of the
 * host name, /proc/sys/kernel/random/boot_id and the network namespace
 * (so network namespaces count as separate hosts). */
uint64_t host_identity(void);

#endif /* SHARC_BOOTSTRAP_ENV_H */

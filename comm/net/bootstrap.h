/*
 * bootstrap.h - who am I, where is the rendezvous, and the rank table.
 *
 * A rank learns (rank, nranks, rendezvous address, token) from the
 * launcher's environment or from a unique id, then connects to the root
 * (a thread in the process hosting the rendezvous), presents the job token
 * and its peer_info_t, and receives every rank's peer_info_t. Connections
 * without the token (or with a wrong magic/version/size) are dropped by the
 * root without disturbing the job.
 */
#ifndef SHARC_BOOTSTRAP_H
#define SHARC_BOOTSTRAP_H

#include <stdint.h>

#include "bootstrap_env.h"
#include "bootstrap_wire.h"
#include "net.h"

/* Creates a unique id: starts a root listener thread on this host (on the
 * SHARC_SOCKET_IFNAME interface, or the address of the host name, or
 * loopback as a last resort) and stores its address and a fresh token. */
sharc_status_t bootstrap_unique_id_create(sharc_unique_id_t *id);
/* Fills env->root_host/root_port/token from id. */
sharc_status_t bootstrap_unique_id_parse(const sharc_unique_id_t *id,
                                         bootstrap_env_t *env);

/* Starts the root thread listening on env's root address for env->nranks
 * ranks (used when env->host_root). The thread serves one rendezvous and
 * exits (after SHARC_TIMEOUT if ranks are missing). */
sharc_status_t bootstrap_root_start(const bootstrap_env_t *env);

/* Connects to the root (retrying until the deadline), presents the token and
 * `mine`, and fills table[0..nranks) ordered by rank. `mine->addr` must be
 * set: call bootstrap_local_addr first to know which address to listen on.
 * SHARC_ERR_TIMEOUT names the ranks that never arrived (the root sends the
 * list to the ranks that did). */
sharc_status_t bootstrap_rendezvous(const bootstrap_env_t *env,
                                    const peer_info_t *mine,
                                    peer_info_t *table);

/* The local address other ranks should use to reach this one: the
 * SHARC_SOCKET_IFNAME interface if set, else the source address of the
 * route to the rendezvous host; when the rendezvous is this host's own name
 * resolving to loopback here, the first up non-loopback interface (port
 * 0). Listeners bind to such addresses, never to all interfaces. */
sharc_status_t bootstrap_local_addr(const bootstrap_env_t *env,
                                    net_addr_t *out);

#endif /* SHARC_BOOTSTRAP_H */

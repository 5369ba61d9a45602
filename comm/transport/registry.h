/*
 * registry.h - the transport registry: the one table of transports, and
 * the loops over it that the rest of comm/ uses instead of naming one
 * (selection, teardown, abort notices, the peer board). Above the
 * transports: it knows them all, they know only transport.h.
 */
#ifndef SHARC_TRANSPORT_REGISTRY_H
#define SHARC_TRANSPORT_REGISTRY_H

#include "transport.h"

/* The transport for peers on this host (and for this rank itself). */
const transport_t *transport_local(void);
/* The transport of `scope` called `name` (case-insensitive); NULL if none. */
const transport_t *transport_find(const char *name, transport_scope_t scope);
/* The names of the transports of `scope`, "a, b or c", written to buf (len
 * bytes, truncated to fit) for messages; returns buf. */
const char *transport_names(transport_scope_t scope, char *buf, size_t len);
/* The transport of registry slot id. */
const transport_t *transport_get(transport_id_t id);
/* Every transport's teardown, in reverse registry order. */
void transport_teardown_all(struct sharc_comm *comm, uint64_t deadline_ns);
/* Every transport's notify_abort (those without state for comm skip it). */
void transport_notify_abort_all(struct sharc_comm *comm, int failed_rank,
                                sharc_status_t st);
/* The peer board over every transport that has one (see above); the
 * queries ask the transport that carries `rank`, with the "not known"
 * answer where it has no board. */
void transport_publish_progress(struct sharc_comm *comm, uint64_t entered,
                                uint64_t completed);
void transport_publish_wait(struct sharc_comm *comm, int peer);
/* The CPU this rank yields on, to every transport that tells peers; the
 * CPU a peer last published, -1 when not known. */
void transport_publish_cpu(struct sharc_comm *comm, int cpu);
int transport_peer_cpu(struct sharc_comm *comm, int rank);
uint64_t transport_peer_entered(struct sharc_comm *comm, int rank);
int transport_peer_waiting(struct sharc_comm *comm, int rank);
void transport_poll_notice(struct sharc_comm *comm);
/* The device_send answer (transport.h) of the transport that carries
 * `peer`: 0 with why when it has none, is wrapped by SHARC_FAULT (which
 * must see every byte), or says no. */
int transport_device_send(struct sharc_comm *comm, int peer, const void *p,
                          size_t len, char *why, size_t why_len);

#endif /* SHARC_TRANSPORT_REGISTRY_H */

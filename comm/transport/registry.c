/*
 * registry.c - the transport registry (registry.h).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "registry.h"
#include "state.h"

_Static_assert(TRANSPORT_COUNT <= COMM_TP_SLOTS,
               "struct sharc_comm has a tp_state slot per transport");

static const transport_t *const registry[TRANSPORT_COUNT] = {
    [TRANSPORT_SHM] = &transport_shm,
    [TRANSPORT_TCP] = &transport_tcp,
    [TRANSPORT_IB] = &transport_ib,
};

const transport_t *transport_get(transport_id_t id) {
  return (unsigned)id < TRANSPORT_COUNT ? registry[id] : NULL;
}

const transport_t *transport_local(void) {
  for (int i = 0; i < TRANSPORT_COUNT; i++)
    if (registry[i]->scope == TRANSPORT_LOCAL)
      return registry[i];
  return NULL;
}

const transport_t *transport_find(const char *name, transport_scope_t scope) {
  for (int i = 0; i < TRANSPORT_COUNT; i++)
    if (registry[i]->scope == scope && !strcasecmp(registry[i]->name, name))
      return registry[i];
  return NULL;
}

const char *transport_names(transport_scope_t scope, char *buf, size_t len) {
  int n = 0, k = 0;
  for (int i = 0; i < TRANSPORT_COUNT; i++)
    n += registry[i]->scope == scope;
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < TRANSPORT_COUNT && used < len; i++) {
    if (registry[i]->scope != scope)
      continue;
    const char *sep = k == 0 ? "" : k == n - 1 ? " or " : ", ";
    int w = snprintf(buf + used, len - used, "%s%s", sep, registry[i]->name);
    used += w > 0 ? (size_t)w : 0;
    k++;
  }
  return buf;
}

void transport_teardown_all(struct sharc_comm *comm, uint64_t deadline_ns) {
  for (int i = TRANSPORT_COUNT - 1; i >= 0; i--)
    registry[i]->teardown(comm, deadline_ns);
}

void transport_notify_abort_all(struct sharc_comm *comm, int failed_rank,
                                sharc_status_t st) {
  for (int i = 0; i < TRANSPORT_COUNT; i++)
    if (registry[i]->notify_abort)
      registry[i]->notify_abort(comm, failed_rank, st);
}

void transport_publish_progress(struct sharc_comm *comm, uint64_t entered,
                                uint64_t completed) {
  /* twice per call: two stores where peers read them (state.h) */
  atomic_store_explicit(&comm->progress[0], entered, memory_order_relaxed);
  atomic_store_explicit(&comm->progress[1], completed, memory_order_relaxed);
}

void transport_publish_wait(struct sharc_comm *comm, int peer) {
  for (int i = 0; i < TRANSPORT_COUNT; i++)
    if (registry[i]->publish_wait)
      registry[i]->publish_wait(comm, peer);
}

void transport_publish_cpu(struct sharc_comm *comm, int cpu) {
  for (int i = 0; i < TRANSPORT_COUNT; i++)
    if (registry[i]->publish_cpu)
      registry[i]->publish_cpu(comm, cpu);
}

void transport_poll_notice(struct sharc_comm *comm) {
  for (int i = 0; i < TRANSPORT_COUNT; i++)
    if (registry[i]->poll_notice)
      registry[i]->poll_notice(comm);
}

/* The transport that carries rank's data, or NULL before setup. */
static const transport_t *carrier(struct sharc_comm *comm, int rank) {
  if (!comm->tp || rank < 0 || rank >= comm->nranks)
    return NULL;
  return comm->tp[rank];
}

uint64_t transport_peer_entered(struct sharc_comm *comm, int rank) {
  const transport_t *tp = carrier(comm, rank);
  return tp && tp->peer_entered ? tp->peer_entered(comm, rank) : UINT64_MAX;
}

int transport_peer_cpu(struct sharc_comm *comm, int rank) {
  const transport_t *tp = carrier(comm, rank);
  return tp && tp->peer_cpu ? tp->peer_cpu(comm, rank) : -1;
}

int transport_peer_waiting(struct sharc_comm *comm, int rank) {
  const transport_t *tp = carrier(comm, rank);
  return tp && tp->peer_waiting ? tp->peer_waiting(comm, rank) : -2;
}

int transport_device_send(struct sharc_comm *comm, int peer, const void *p,
                          size_t len, char *why, size_t why_len) {
  const transport_t *tp = carrier(comm, peer);
  if (!tp) {
    snprintf(why, why_len, "no transport carries rank %d yet", peer);
    return 0;
  }
  if (tp->inner) {
    snprintf(why, why_len,
             "SHARC_FAULT wraps the %s transport and must see every byte",
             tp->name);
    return 0;
  }
  if (!tp->device_send) {
    snprintf(why, why_len, "the %s transport reads what it sends with the CPU",
             tp->name);
    return 0;
  }
  return tp->device_send(comm, peer, p, len, why, why_len);
}

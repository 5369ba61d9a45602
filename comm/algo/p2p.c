/*
 * p2p.c - the schedule of a batch of sends and receives (schedule.h,
 * sched_p2p_build): what sharc_send / sharc_recv post, alone or fused by a
 * group, as one round the executor progresses all at once.
 *
 * Matching needs nothing here: the executor's FIFOs carry the k-th send of
 * A to B into the k-th receive of B from A on each channel, and a round
 * runs the operations of one FIFO in list order, so listing the transfers
 * in posting order keeps each direction of each pair in order while
 * transfers with different peers (or the two directions with one peer)
 * progress together. Both sides cut a transfer across the channels alike
 * because they agree on its size. A rank's transfers with itself cannot use
 * a FIFO; they are local copies, the k-th send paired with the k-th receive.
 */
#include <stdlib.h>

#include "algo.h"
#include "core.h"

sharc_status_t sched_p2p_build(const sched_p2p_t *ops, size_t n, int rank,
                               int nchan, size_t split_bytes, sched_t *s) {
  s->nchan = nchan;
  s->partial = 1;
  if (n > SCHED_P2P_MAX)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "%zu sends and receives in one batch; at most %d per "
                   "communicator and stream in one group",
                   n, (int)SCHED_P2P_MAX);
  sched_round(s);
  size_t self_recv = 0; /* the next receive from self to pair */
  size_t nsend_self = 0, nrecv_self = 0;
  for (size_t i = 0; i < n; i++) {
    const sched_p2p_t *o = &ops[i];
    sched_buf_t b = (sched_buf_t)(SCHED_BUF_P2P + i);
    if (o->peer == rank) {
      if (o->send)
        nsend_self++;
      else
        nrecv_self++;
      continue;
    }
    int nc = o->bytes >= split_bytes ? nchan : 1;
    if (o->send)
      send_split(s, o->peer, nc, b, 0, o->bytes);
    else
      recv_split(s, o->peer, nc, b, 0, o->bytes);
  }
  if (nsend_self != nrecv_self)
    return err_set(SHARC_ERR_INVALID_ARG,
                   "rank %d posts %zu send(s) to itself and %zu receive(s) "
                   "from itself; each send to self needs a receive from self "
                   "in the same group",
                   rank, nsend_self, nrecv_self);
  for (size_t i = 0, k = 0; i < n; i++) {
    if (ops[i].peer != rank || !ops[i].send)
      continue;
    while (ops[self_recv].peer != rank || ops[self_recv].send)
      self_recv++;
    const sched_p2p_t *r = &ops[self_recv];
    if (r->bytes != ops[i].bytes)
      return err_set(SHARC_ERR_INVALID_ARG,
                     "rank %d: send #%zu to itself has %zu bytes but its "
                     "receive #%zu from itself %zu; they must match",
                     rank, k, ops[i].bytes, k, r->bytes);
    sched_copy(s, (sched_buf_t)(SCHED_BUF_P2P + i), 0,
               (sched_buf_t)(SCHED_BUF_P2P + self_recv), 0, ops[i].bytes);
    self_recv++;
    k++;
  }
  return sched_finish(s);
}

/*
 * softcuda_graph.c - stream capture and CUDA graphs on softcuda (see
 * softcuda.c).
 *
 * cudaStreamBeginCapture starts a capture sequence on a stream: what is then
 * queued on it (copies, memsets, kernels, host functions, stream memory
 * operations) becomes a node of a graph instead of running. An event
 * recorded in the sequence and waited for by another stream forks the
 * sequence into that stream; the origin's wait for an event recorded there
 * later joins it back. cudaStreamEndCapture returns the graph;
 * cudaGraphInstantiate and cudaGraphLaunch run its nodes on a stream in the
 * order they were captured: one order the graph's edges allow (the nodes of
 * forked streams run one after another, not concurrently).
 *
 * What capture forbids, with CUDA's errors:
 *  - synchronising or querying a capturing stream
 *    (cudaErrorStreamCaptureUnsupported; the sequence is invalidated);
 *  - using the legacy stream while a blocking stream of its device captures
 *    (cudaErrorStreamCaptureImplicit; invalidated);
 *  - querying, synchronising or timing an event last recorded in a sequence
 *    in progress (cudaErrorCapturedEvent);
 *  - waiting in a capturing stream for an event recorded outside the
 *    sequence (cudaErrorStreamCaptureIsolation) or in another sequence
 *    (cudaErrorStreamCaptureMerge); both invalidate;
 *  - the potentially unsafe calls (cudaMalloc, cudaHostAlloc,
 *    cudaMallocHost, cudaFree, cudaFreeHost, synchronous cudaMemcpy and
 *    cudaMemset, cudaDeviceSynchronize) while a sequence forbids them to
 *    the calling thread: one this thread began in global or thread-local
 *    mode, or one any thread began in global mode while this thread's mode
 *    (cudaThreadExchangeStreamCaptureMode) is global
 *    (cudaErrorStreamCaptureUnsupported; invalidated);
 *  - ending a sequence on a stream other than the one that began it
 *    (cudaErrorStreamCaptureUnmatched), from another thread unless it is
 *    relaxed (cudaErrorStreamCaptureWrongThread), or with a forked stream
 *    not joined back (cudaErrorStreamCaptureUnjoined); an invalidated
 *    sequence ends with cudaErrorStreamCaptureInvalidated and no graph.
 *
 * Not modelled (refused with cudaErrorNotSupported and a line): graphs
 * built node by node, instantiate flags, launching a graph into a capture,
 * the dependency sets of cudaStreamGetCaptureInfo, external event waits.
 */
#include <stdlib.h>

#include "softcuda_impl.h"

/* The nodes, shared by a graph and its instances (each holds a ref). */
typedef struct {
  int refs;
  op_t **nodes;
  size_t n, cap;
} body_t;

struct CUgraph_st {
  struct CUgraph_st *next;
  body_t *body;
};

struct CUgraphExec_st {
  struct CUgraphExec_st *next;
  body_t *body;
};

static struct CUgraph_st *graphs;    /* live handles (lock held) */
static struct CUgraphExec_st *execs; /* live handles (lock held) */
static _Thread_local int thread_mode = cudaStreamCaptureModeGlobal;

static body_t *body_new(void) {
  body_t *b = calloc(1, sizeof *b);
  if (b)
    b->refs = 1;
  return b;
}

/* Lock held. Kernel nodes release their arguments: launches still queued
 * use them, so they finish first. */
static void body_unref(body_t *b) {
  if (--b->refs > 0)
    return;
  sc_wait_all(-1);
  for (size_t i = 0; i < b->n; i++)
    sc_op_free(b->nodes[i]);
  free(b->nodes);
  free(b);
}

capture_t *sc_capture_find(uint64_t id) {
  for (capture_t *c = sc_state.captures; id && c; c = c->next)
    if (c->id == id)
      return c;
  return NULL;
}

void sc_capture_invalidate(capture_t *c, const char *why) {
  if (!c->invalid)
    sc_say("capture sequence %llu invalidated: %s", (unsigned long long)c->id,
           why);
  c->invalid = 1;
}

size_t sc_capture_nodes(const capture_t *c) { return c->graph->body->n; }

cudaError_t sc_capture_add(stream_t *s, op_t *op) {
  capture_t *c = s->cap;
  body_t *b = c->graph->body;
  if (c->invalid) {
    sc_op_free(op);
    return cudaErrorStreamCaptureInvalidated;
  }
  if (b->n == b->cap) {
    size_t ncap = b->cap ? 2 * b->cap : 16;
    op_t **nodes = realloc(b->nodes, ncap * sizeof *nodes);
    if (!nodes) {
      sc_op_free(op);
      return cudaErrorMemoryAllocation;
    }
    b->nodes = nodes;
    b->cap = ncap;
  }
  free(op->deps); /* in-stream order only: the graph runs in capture order */
  op->deps = NULL;
  op->ndeps = 0;
  op->next = NULL;
  b->nodes[b->n++] = op;
  s->cap_last = b->n;
  return cudaSuccess;
}

cudaError_t sc_capture_implicit(int dev, const char *fn) {
  int hit = 0;
  for (stream_t *t = sc_state.streams; t; t = t->next)
    if (t->cap && t->device == dev && !t->legacy &&
        !(t->flags & cudaStreamNonBlocking)) {
      sc_capture_invalidate(t->cap, "the legacy stream was used");
      hit = 1;
    }
  if (!hit)
    return cudaSuccess;
  REFUSE(cudaErrorStreamCaptureImplicit,
         "%s: the legacy stream of device %d, while a blocking stream of it "
         "is being captured (the legacy stream would depend on the capture)",
         fn, dev);
}

cudaError_t sc_capture_unsafe(const char *fn) {
  if (thread_mode == cudaStreamCaptureModeRelaxed)
    return cudaSuccess;
  int hit = 0;
  pthread_mutex_lock(&sc_state.lock);
  for (capture_t *c = sc_state.captures; c; c = c->next) {
    int mine = pthread_equal(c->thread, pthread_self());
    if ((mine && c->mode != cudaStreamCaptureModeRelaxed) ||
        (thread_mode == cudaStreamCaptureModeGlobal &&
         c->mode == cudaStreamCaptureModeGlobal)) {
      sc_capture_invalidate(c, fn);
      hit = 1;
    }
  }
  pthread_mutex_unlock(&sc_state.lock);
  if (!hit)
    return cudaSuccess;
  sc_say("%s while a stream is being captured into a CUDA graph: not "
         "permitted in this capture mode (cudaThreadExchangeStreamCaptureMode "
         "to relaxed allows it)",
         fn);
  return sc_fail(cudaErrorStreamCaptureUnsupported);
}

/* ---- capture API -------------------------------------------------------- */

cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                   enum cudaStreamCaptureMode mode) {
  ENTER_DEV();
  if ((unsigned)mode > cudaStreamCaptureModeRelaxed)
    return sc_fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&sc_state.lock);
  stream_t *s = NULL;
  cudaError_t e = sc_resolve(stream, &s);
  const char *why = NULL;
  if (e == cudaSuccess && s->legacy) {
    why = "the legacy (NULL) stream cannot be captured";
    e = cudaErrorStreamCaptureUnsupported;
  } else if (e == cudaSuccess && s->cap) {
    why = "the stream is already being captured";
    e = cudaErrorIllegalState;
  }
  capture_t *c = e == cudaSuccess ? calloc(1, sizeof *c) : NULL;
  struct CUgraph_st *g = c ? calloc(1, sizeof *g) : NULL;
  body_t *b = g ? body_new() : NULL;
  if (e == cudaSuccess && !b) {
    free(g);
    free(c);
    e = cudaErrorMemoryAllocation;
  }
  if (e == cudaSuccess) {
    g->body = b;
    c->id = ++sc_state.next_id;
    c->origin = s;
    c->thread = pthread_self();
    c->mode = mode;
    c->graph = g;
    c->next = sc_state.captures;
    sc_state.captures = c;
    s->cap = c;
    s->cap_last = s->cap_joined = 0;
  }
  pthread_mutex_unlock(&sc_state.lock);
  if (why)
    sc_say("cudaStreamBeginCapture: %s", why);
  return sc_fail(e);
}

/* Lock held: every stream leaves c; c is freed (its graph is not). */
static void capture_end(capture_t *c) {
  for (stream_t *t = sc_state.streams; t; t = t->next)
    if (t->cap == c)
      t->cap = NULL;
  for (capture_t **pp = &sc_state.captures; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  free(c);
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  ENTER_DEV();
  if (!pGraph)
    return sc_fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&sc_state.lock);
  stream_t *s = NULL;
  cudaError_t e = sc_resolve(stream, &s);
  capture_t *c = e == cudaSuccess ? s->cap : NULL;
  const char *why = NULL;
  if (e == cudaSuccess && !c) {
    why = "the stream is not being captured";
    e = cudaErrorIllegalState;
  } else if (c && c->origin != s) {
    why = "the capture began on another stream";
    sc_capture_invalidate(c, "ended on a stream that did not begin it");
    e = cudaErrorStreamCaptureUnmatched;
  } else if (c && c->mode != cudaStreamCaptureModeRelaxed &&
             !pthread_equal(c->thread, pthread_self())) {
    why = "another thread began it (not in relaxed mode)";
    e = cudaErrorStreamCaptureWrongThread;
  }
  if (e == cudaSuccess) {
    for (stream_t *t = sc_state.streams; t && !c->invalid; t = t->next)
      if (t->cap == c && t != s && t->cap_last > t->cap_joined) {
        why = "a stream forked from it was not joined back";
        e = cudaErrorStreamCaptureUnjoined;
      }
    if (c->invalid)
      e = cudaErrorStreamCaptureInvalidated;
    struct CUgraph_st *g = c->graph;
    capture_end(c);
    if (e == cudaSuccess) {
      g->next = graphs;
      graphs = g;
      *pGraph = g;
    } else {
      body_unref(g->body);
      free(g);
      *pGraph = NULL;
    }
  }
  pthread_mutex_unlock(&sc_state.lock);
  if (why)
    sc_say("cudaStreamEndCapture: %s", why);
  return sc_fail(e);
}

cudaError_t
cudaStreamIsCapturing(cudaStream_t stream,
                      enum cudaStreamCaptureStatus *pCaptureStatus) {
  ENTER_DEV();
  if (!pCaptureStatus)
    return sc_fail(cudaErrorInvalidValue);
  pthread_mutex_lock(&sc_state.lock);
  stream_t *s = NULL;
  cudaError_t e = sc_resolve(stream, &s);
  if (e == cudaSuccess && s->legacy) /* invalidates, as a use would */
    e = sc_capture_implicit(s->device, "cudaStreamIsCapturing");
  if (e == cudaSuccess)
    *pCaptureStatus = !s->cap           ? cudaStreamCaptureStatusNone
                      : s->cap->invalid ? cudaStreamCaptureStatusInvalidated
                                        : cudaStreamCaptureStatusActive;
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

cudaError_t cudaStreamGetCaptureInfo(
    cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
    unsigned long long *id_out, cudaGraph_t *graph_out,
    const cudaGraphNode_t **dependencies_out,
    const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out) {
  if (dependencies_out || edgeData_out || numDependencies_out) {
    ENTER();
    REFUSE(cudaErrorNotSupported, "cudaStreamGetCaptureInfo: capture "
                                  "dependency sets are not modelled");
  }
  cudaError_t e = cudaStreamIsCapturing(stream, captureStatus_out);
  if (e != cudaSuccess)
    return e;
  pthread_mutex_lock(&sc_state.lock);
  stream_t *s = NULL;
  if (sc_resolve(stream, &s) == cudaSuccess && s->cap) {
    if (id_out)
      *id_out = s->cap->id;
    if (graph_out)
      *graph_out = s->cap->graph;
  }
  pthread_mutex_unlock(&sc_state.lock);
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *m) {
  ENTER();
  if (!m || (unsigned)*m > cudaStreamCaptureModeRelaxed)
    return sc_fail(cudaErrorInvalidValue);
  int old = thread_mode;
  thread_mode = *m;
  *m = (enum cudaStreamCaptureMode)old;
  return cudaSuccess;
}

/* ---- graphs ------------------------------------------------------------- */

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) {
  ENTER_DEV();
  if (!pGraphExec)
    return sc_fail(cudaErrorInvalidValue);
  if (flags)
    REFUSE(cudaErrorNotSupported,
           "cudaGraphInstantiate: flags %#llx are not modelled", flags);
  struct CUgraphExec_st *x = calloc(1, sizeof *x);
  if (!x)
    return sc_fail(cudaErrorMemoryAllocation);
  pthread_mutex_lock(&sc_state.lock);
  struct CUgraph_st *g = graphs;
  while (g && g != graph)
    g = g->next;
  if (g) {
    x->body = g->body;
    x->body->refs++;
    x->next = execs;
    execs = x;
    *pGraphExec = x;
  }
  pthread_mutex_unlock(&sc_state.lock);
  if (!g) {
    free(x);
    REFUSE(cudaErrorInvalidValue, "cudaGraphInstantiate(%p): no such graph",
           (void *)graph);
  }
  return cudaSuccess;
}

/* Lock held: a copy of node to queue for one launch (a kernel's arguments
 * stay the graph's). */
static op_t *node_copy(const op_t *node) {
  op_t *op = sc_op_new(node->kind);
  if (op) {
    op->u = node->u;
    if (op->kind == OP_KERNEL)
      op->u.kern.borrowed = 1;
  }
  return op;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  struct CUgraphExec_st *x = execs;
  while (x && x != graphExec)
    x = x->next;
  stream_t *s = NULL;
  cudaError_t e = x ? sc_resolve(stream, &s) : cudaErrorInvalidResourceHandle;
  if (e == cudaSuccess && s->cap) {
    sc_say("cudaGraphLaunch: into a stream being captured (a child graph): "
           "not modelled");
    e = cudaErrorNotSupported;
  }
  for (size_t i = 0; e == cudaSuccess && i < x->body->n; i++) {
    op_t *op = node_copy(x->body->nodes[i]);
    e = op ? sc_submit(s, op) : cudaErrorMemoryAllocation;
  }
  pthread_mutex_unlock(&sc_state.lock);
  return sc_fail(e);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  struct CUgraphExec_st **pp = &execs;
  while (*pp && *pp != graphExec)
    pp = &(*pp)->next;
  struct CUgraphExec_st *x = *pp;
  if (x) {
    *pp = x->next;
    body_unref(x->body);
  }
  pthread_mutex_unlock(&sc_state.lock);
  free(x);
  return x ? cudaSuccess : sc_fail(cudaErrorInvalidValue);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  ENTER_DEV();
  pthread_mutex_lock(&sc_state.lock);
  struct CUgraph_st **pp = &graphs;
  while (*pp && *pp != graph)
    pp = &(*pp)->next;
  struct CUgraph_st *g = *pp;
  if (g) {
    *pp = g->next;
    body_unref(g->body);
  }
  pthread_mutex_unlock(&sc_state.lock);
  free(g);
  return g ? cudaSuccess : sc_fail(cudaErrorInvalidValue);
}

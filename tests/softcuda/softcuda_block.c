/*
 * softcuda_block.c - blocks whose threads cooperate: __syncthreads and
 * dynamic shared memory on softcuda (softcuda_launch.h).
 *
 * A serial grid runs each thread to its end before the next starts, which
 * cannot honour a barrier. A kernel launched with dynamic shared memory
 * (the launch's sharedMem > 0) runs instead one block at a time with every
 * thread of the block on a fiber of its own (ucontext, on the stream's
 * worker thread): the scheduler runs each live thread, in grid order, until
 * it reaches __syncthreads or returns, and starts the next phase once every
 * live thread waits at the barrier. So each thread sees, after a barrier,
 * everything every thread of its block wrote before it, and nothing
 * written after it, as on a GPU; the reverse grid order
 * (SOFTCUDA_GRID_ORDER=reverse) runs the threads of each phase in reverse.
 *
 * What a GPU leaves undefined fails here, loudly (a message on stderr and
 * cudaErrorLaunchFailure for every later call, like a trap):
 *  - a barrier not reached by every thread of the block: some threads
 *    returned while others wait at __syncthreads (divergent barrier; on a
 *    GPU it hangs or corrupts, and compute-sanitizer's synccheck flags it);
 *  - __syncthreads in a kernel launched without dynamic shared memory,
 *    which runs serially (the launch must say sharedMem > 0: softcuda has
 *    no static __shared__, see cuda_host.h).
 * The shared memory is filled with 0xff bytes (a float NaN) before every
 * block: a read of a word no thread of the block wrote shows.
 *
 * Under AddressSanitizer every switch is announced
 * (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber), so
 * the fibers' stacks are checked like any other.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "softcuda_impl.h"

#pragma GCC visibility push(default)
#include "softcuda_launch.h"
#pragma GCC visibility pop

#if defined(__SANITIZE_ADDRESS__)
#define SC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SC_ASAN 1
#endif
#endif
#ifdef SC_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

/* Each fiber's stack: kernels are shallow, but ASan's frames are large. */
#ifdef SC_ASAN
#define FIBER_STACK ((size_t)256 << 10)
#else
#define FIBER_STACK ((size_t)64 << 10)
#endif

enum { T_READY, T_BARRIER, T_DONE };

typedef struct {
  size_t nt, block;
  void (*body)(void *arg, size_t block, size_t thread);
  void *arg;
  ucontext_t main;
  ucontext_t *uc;
  unsigned char *state;
  unsigned char *stacks;
  size_t cur;
  unsigned char *shared;
  const void *main_bottom; /* the worker's own stack (ASan) */
  size_t main_size;
} coop_t;

static __thread coop_t *coop_cur; /* the block running on this thread */

/* The context's fault (said once: every thread of a block may trap). */
static void trap(const char *why) {
  cudaError_t was = cudaSuccess;
  if (__atomic_compare_exchange_n(&sc_state.sticky, &was,
                                  cudaErrorLaunchFailure, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE))
    sc_say("%s: cudaErrorLaunchFailure; every later call fails, as after a "
           "trap on a GPU",
           why);
}

/* Switches from the scheduler into thread j and back. */
static void enter(coop_t *c, size_t j) {
  c->cur = j;
#ifdef SC_ASAN
  void *fake = NULL;
  __sanitizer_start_switch_fiber(&fake, c->stacks + j * FIBER_STACK,
                                 FIBER_STACK);
#endif
  swapcontext(&c->main, &c->uc[j]);
#ifdef SC_ASAN
  __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

static void fiber_main(void) {
  coop_t *c = coop_cur;
#ifdef SC_ASAN
  __sanitizer_finish_switch_fiber(NULL, &c->main_bottom, &c->main_size);
#endif
  size_t j = c->cur;
  c->body(c->arg, c->block, j);
  c->state[c->cur] = T_DONE;
#ifdef SC_ASAN
  __sanitizer_start_switch_fiber(NULL, c->main_bottom, c->main_size);
#endif
  setcontext(&c->main);
}

void softcuda_syncthreads(void) {
  coop_t *c = coop_cur;
  if (!c) {
    trap("__syncthreads in a kernel launched without dynamic shared memory: "
         "softcuda runs its threads one after another and cannot honour a "
         "barrier; launch it with sharedMem > 0 (softcuda's cooperative "
         "blocks)");
    return;
  }
  size_t me = c->cur;
  c->state[me] = T_BARRIER;
#ifdef SC_ASAN
  void *fake = NULL;
  __sanitizer_start_switch_fiber(&fake, c->main_bottom, c->main_size);
#endif
  swapcontext(&c->uc[me], &c->main);
#ifdef SC_ASAN
  __sanitizer_finish_switch_fiber(fake, &c->main_bottom, &c->main_size);
#endif
}

void *softcuda_shared(void) { return coop_cur ? coop_cur->shared : NULL; }

/* Runs one block; 0, or -1 after a trap. */
static int run_block(coop_t *c, int reverse, size_t shared_bytes) {
  size_t nt = c->nt;
  memset(c->shared, 0xff, shared_bytes);
#ifdef SC_ASAN
  /* frames a fiber of the previous block left behind */
  ASAN_UNPOISON_MEMORY_REGION(c->stacks, nt * FIBER_STACK);
#endif
  for (size_t j = 0; j < nt; j++) {
    getcontext(&c->uc[j]);
    c->uc[j].uc_stack.ss_sp = c->stacks + j * FIBER_STACK;
    c->uc[j].uc_stack.ss_size = FIBER_STACK;
    c->uc[j].uc_link = NULL;
    makecontext(&c->uc[j], fiber_main, 0);
    c->state[j] = T_READY;
  }
  for (unsigned long phase = 0;; phase++) {
    size_t waiting = 0, done = 0;
    for (size_t k = 0; k < nt; k++) {
      size_t j = reverse ? nt - 1 - k : k;
      if (c->state[j] == T_DONE)
        continue;
      c->state[j] = T_READY;
      enter(c, j);
    }
    for (size_t j = 0; j < nt; j++) {
      waiting += c->state[j] == T_BARRIER;
      done += c->state[j] == T_DONE;
    }
    if (waiting == 0)
      return 0;
    if (done) {
      char why[200];
      snprintf(why, sizeof why,
               "kernel block %zu: %zu of its %zu threads wait at "
               "__syncthreads (barrier %lu) while %zu returned without "
               "reaching it (a divergent barrier)",
               c->block, waiting, nt, phase + 1, done);
      trap(why);
      return -1;
    }
  }
}

void softcuda_grid_run_coop(
    size_t nblocks, size_t nthreads, int reverse, size_t shared_bytes,
    void (*body)(void *arg, size_t block, size_t thread), void *arg) {
  coop_t c = {.nt = nthreads, .body = body, .arg = arg};
  size_t stack_bytes = nthreads * FIBER_STACK;
  c.uc = calloc(nthreads, sizeof *c.uc);
  c.state = calloc(nthreads, 1);
  c.shared = aligned_alloc(16, (shared_bytes + 15) & ~(size_t)15);
  void *st = mmap(NULL, stack_bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  c.stacks = st == MAP_FAILED ? NULL : st;
  if (!c.uc || !c.state || !c.shared || !c.stacks) {
    trap("a cooperative block: out of host memory for its fibers");
  } else {
    coop_t *outer = coop_cur;
    coop_cur = &c;
    for (size_t i = 0; i < nblocks; i++) {
      c.block = reverse ? nblocks - 1 - i : i;
      if (run_block(&c, reverse, shared_bytes) != 0)
        break;
    }
    coop_cur = outer;
  }
  if (c.stacks)
    munmap(c.stacks, stack_bytes);
  free(c.shared);
  free(c.state);
  free(c.uc);
}

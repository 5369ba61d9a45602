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
 * A switch saves and restores only what the ABI says a call preserves
 * (x86-64: the callee-saved registers, the stack pointer, MXCSR and the
 * x87 control word): 17 ns per switch on the development VM (48 under
 * ASan), where swapcontext, with its signal-mask system call, took 310 ns;
 * a tiny GPT step switches hundreds of thousands of times. Other
 * architectures use swapcontext. Under AddressSanitizer every switch is
 * announced (__sanitizer_start_switch_fiber /
 * __sanitizer_finish_switch_fiber), so the fibers' stacks are checked like
 * any other.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

/* ---- contexts ------------------------------------------------------------ */

#if defined(__x86_64__)
/* sc_fiber_switch(save, to): pushes the callee-saved registers, MXCSR and
 * the x87 control word, stores the stack pointer in *save, then loads `to`
 * and pops the same from it: a return from the other context's last
 * switch (or, the first time, into fiber_main through the frame
 * fiber_init built). */
void sc_fiber_switch(void **save, void *to);
__asm__(".text\n"
        ".p2align 4\n"
        ".type sc_fiber_switch,@function\n"
        ".hidden sc_fiber_switch\n"
        "sc_fiber_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size sc_fiber_switch,.-sc_fiber_switch\n");

typedef struct {
  void *sp;
} fiber_ctx_t;

/* A context that starts in entry on the given stack: the frame
 * sc_fiber_switch pops, returning into entry as if called (the stack
 * aligned as the ABI wants at a function's first instruction). */
static void fiber_init(fiber_ctx_t *f, unsigned char *stack, size_t size,
                       void (*entry)(void)) {
  uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
  uint64_t *sp = (uint64_t *)top;
  *--sp = 0;                          /* entry's return address: never used */
  *--sp = (uint64_t)(uintptr_t)entry; /* sc_fiber_switch returns here */
  for (int i = 0; i < 6; i++)
    *--sp = 0; /* rbp, rbx, r12-r15 */
  /* the launching thread's MXCSR and x87 control word (rounding, flush to
   * zero), as the serial grid and swapcontext's fibers inherit them */
  uint32_t mxcsr;
  uint16_t cw;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  *--sp = (uint64_t)cw << 32 | mxcsr;
  f->sp = sp;
}

static void fiber_jump(fiber_ctx_t *save, fiber_ctx_t *to) {
  sc_fiber_switch(&save->sp, to->sp);
}
#else
#include <ucontext.h>
typedef struct {
  ucontext_t uc;
} fiber_ctx_t;

static void fiber_init(fiber_ctx_t *f, unsigned char *stack, size_t size,
                       void (*entry)(void)) {
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = stack;
  f->uc.uc_stack.ss_size = size;
  f->uc.uc_link = NULL;
  makecontext(&f->uc, entry, 0);
}

static void fiber_jump(fiber_ctx_t *save, fiber_ctx_t *to) {
  swapcontext(&save->uc, &to->uc);
}
#endif

/* ---- blocks -------------------------------------------------------------- */

enum { T_READY, T_BARRIER, T_DONE };

#define GUARD_BYTES ((size_t)4096) /* the bottom of each fiber's stack */

typedef struct {
  size_t nt, block;
  void (*body)(void *arg, size_t block, size_t thread);
  void *arg;
  fiber_ctx_t main;
  fiber_ctx_t *fib;
  unsigned char *state;
  unsigned char *stacks;
  size_t cur;
  unsigned char *shared;
  const void *main_bottom; /* the worker's own stack (ASan) */
  size_t main_size;
} coop_t;

/* the block running on this thread (initial-exec: no __tls_get_addr call,
 * which ASan intercepts, on every switch) */
static __thread coop_t *coop_cur __attribute__((tls_model("initial-exec")));

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
  fiber_jump(&c->main, &c->fib[j]);
#ifdef SC_ASAN
  __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

static void fiber_main(void) {
  coop_t *c = coop_cur;
#ifdef SC_ASAN
  __sanitizer_finish_switch_fiber(NULL, &c->main_bottom, &c->main_size);
#endif
  c->body(c->arg, c->block, c->cur);
  c->state[c->cur] = T_DONE;
#ifdef SC_ASAN
  __sanitizer_start_switch_fiber(NULL, c->main_bottom, c->main_size);
#endif
  fiber_ctx_t dead;
  fiber_jump(&dead, &c->main); /* never resumed */
  abort();
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
  fiber_jump(&c->fib[me], &c->main);
#ifdef SC_ASAN
  __sanitizer_finish_switch_fiber(fake, &c->main_bottom, &c->main_size);
#endif
}

void *softcuda_shared(void) { return coop_cur ? coop_cur->shared : NULL; }

/* The shadow of the fibers' stacks made clean again (ASan): a fiber that
 * returned leaves only fiber_main's frame poisoned, at the top of its
 * stack (`top` bytes); one left waiting at a barrier, anything. */
static void stacks_unpoison(coop_t *c, size_t top) {
#ifdef SC_ASAN
  for (size_t j = 0; j < c->nt; j++)
    ASAN_UNPOISON_MEMORY_REGION(c->stacks + (j + 1) * FIBER_STACK - top, top);
#else
  (void)c;
  (void)top;
#endif
}

/* Runs one block; 0, or -1 after a trap. */
static int run_block(coop_t *c, int reverse, size_t shared_bytes) {
  size_t nt = c->nt;
  memset(c->shared, 0xff, shared_bytes);
  for (size_t j = 0; j < nt; j++) {
    fiber_init(&c->fib[j], c->stacks + j * FIBER_STACK, FIBER_STACK,
               fiber_main);
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
    if (waiting == 0) {
      stacks_unpoison(c, 4096);
      return 0;
    }
    if (done) {
      char why[200];
      snprintf(why, sizeof why,
               "kernel block %zu: %zu of its %zu threads wait at "
               "__syncthreads (barrier %lu) while %zu returned without "
               "reaching it (a divergent barrier)",
               c->block, waiting, nt, phase + 1, done);
      trap(why);
      stacks_unpoison(c, FIBER_STACK);
      return -1;
    }
  }
}

/* The fibers' stacks, kept per worker thread for its later launches (the
 * pages faulted in once), unmapped when the thread ends. The lowest page
 * of each is a guard (PROT_NONE): a fiber that overflows its stack faults
 * instead of writing over the frames of the fiber below. */
typedef struct {
  unsigned char *p;
  size_t bytes;
} stacks_t;
static pthread_key_t stacks_key;
static pthread_once_t stacks_once = PTHREAD_ONCE_INIT;

static void stacks_free(void *v) {
  stacks_t *s = v;
  if (s->p)
    munmap(s->p, s->bytes);
  free(s);
}

static void stacks_key_make(void) {
  pthread_key_create(&stacks_key, stacks_free);
}

/* At least bytes of fiber stacks for this thread, or NULL. */
static unsigned char *stacks_get(size_t bytes) {
  pthread_once(&stacks_once, stacks_key_make);
  stacks_t *s = pthread_getspecific(stacks_key);
  if (s && s->bytes >= bytes)
    return s->p;
  if (!s && !(s = calloc(1, sizeof *s)))
    return NULL;
  if (s->p)
    munmap(s->p, s->bytes);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  s->p = p == MAP_FAILED ? NULL : p;
  for (size_t at = 0; s->p && at + FIBER_STACK <= bytes; at += FIBER_STACK)
    mprotect(s->p + at, GUARD_BYTES, PROT_NONE);
  s->bytes = s->p ? bytes : 0;
  pthread_setspecific(stacks_key, s);
  return s->p;
}

void softcuda_grid_run_coop(
    size_t nblocks, size_t nthreads, int reverse, size_t shared_bytes,
    void (*body)(void *arg, size_t block, size_t thread), void *arg) {
  coop_t c = {.nt = nthreads, .body = body, .arg = arg};
  c.fib = calloc(nthreads, sizeof *c.fib);
  c.state = calloc(nthreads, 1);
  c.shared = aligned_alloc(16, (shared_bytes + 15) & ~(size_t)15);
  c.stacks = stacks_get(nthreads * FIBER_STACK);
  if (!c.fib || !c.state || !c.shared || !c.stacks) {
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
  free(c.shared);
  free(c.state);
  free(c.fib);
}

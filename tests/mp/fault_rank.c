/*
 * fault_rank.c - the program under SHARC_FAULT (comm/fault/fault.h) in the
 * fault tests: every rank runs the same loop of collectives and says how it
 * ended; fault_test.sh sets the fault and checks what each rank printed.
 *
 *   sharcrun -n N fault_rank [--coll C] [--calls I] [--count E] [--linger S]
 *
 * All ranks run I (default 20) out-of-place f32 collectives C (all_reduce,
 * the default, all_gather or reduce_scatter) of E elements (default 2^18;
 * all_gather: E / N per rank in; reduce_scatter: E / N per rank out) and
 * check every element of every result. Rank r contributes r + 1 (plus
 * element index mod 8 for the reductions, so a misplaced block shows).
 * Each rank prints one line and exits:
 *   "fault_rank: rank R ok after I C calls (E s)"                    0
 *   "fault_rank: rank R wrong: W elements in K of I C calls; first in
 *    call J at element X: got G, want V"                             5
 *   "fault_rank: rank R status S after I C calls (E s) at T: MSG"    3
 *   "fault_rank: rank R: init failed: S: MSG"                         2
 * (T: seconds of the realtime clock). After a failure a rank lingers S
 * seconds (default 1) before it exits, so every rank learns of the first
 * failure before another rank's exit can look like a second one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sharc.h"

enum coll { C_ALL_REDUCE, C_ALL_GATHER, C_REDUCE_SCATTER };
static const char *const coll_names[] = {"all_reduce", "all_gather",
                                         "reduce_scatter"};

static double now_s(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int usage(void) {
  fprintf(stderr, "usage: sharcrun -n N fault_rank [--coll all_reduce|"
                  "all_gather|reduce_scatter] [--calls I] [--count E] "
                  "[--linger S]\n");
  return 2;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  enum coll coll = C_ALL_REDUCE;
  long calls = 20;
  size_t count = (size_t)1 << 18;
  double linger = 1.0;
  for (int i = 1; i < argc; i += 2) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v)
      return usage();
    if (!strcmp(argv[i], "--coll")) {
      int c = 0;
      while (c < 3 && strcmp(v, coll_names[c]))
        c++;
      if (c == 3)
        return usage();
      coll = (enum coll)c;
    } else if (!strcmp(argv[i], "--calls")) {
      calls = atol(v);
    } else if (!strcmp(argv[i], "--count")) {
      count = (size_t)atol(v);
    } else if (!strcmp(argv[i], "--linger")) {
      linger = atof(v);
    } else {
      return usage();
    }
  }
  if (calls < 1 || count < 1)
    return usage();

  sharc_comm_t comm;
  sharc_status_t st = sharc_comm_init_env(&comm);
  if (st != SHARC_OK) {
    const char *r = getenv("SHARC_RANK");
    printf("fault_rank: rank %s: init failed: %s: %s\n", r ? r : "?",
           sharc_status_name(st), sharc_last_error());
    return 2;
  }
  int rank, n;
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &n);
  size_t per = count / (size_t)n ? count / (size_t)n : 1;
  size_t inn = coll == C_ALL_REDUCE   ? count
               : coll == C_ALL_GATHER ? per
                                      : per * (size_t)n;
  size_t outn = coll == C_ALL_REDUCE   ? count
                : coll == C_ALL_GATHER ? per * (size_t)n
                                       : per;
  float *in = malloc(inn * sizeof *in), *out = malloc(outn * sizeof *out);
  if (!in || !out)
    return 2;
  for (size_t j = 0; j < inn; j++)
    in[j] = (float)(rank + 1) + (coll == C_ALL_GATHER ? 0.0f : (float)(j % 8));
  /* The reductions' sums are small integers: exact in f32. */
  float tri = (float)(n * (n + 1) / 2);
  long wrong = 0, bad_calls = 0, first_call = -1;
  size_t first_at = 0;
  float first_got = 0, first_want = 0;
  double t0 = now_s(CLOCK_MONOTONIC);
  long i;
  for (i = 0; i < calls; i++) {
    memset(out, 0xff, outn * sizeof *out);
    if (coll == C_ALL_REDUCE)
      st = sharc_all_reduce(in, out, count, SHARC_F32, SHARC_SUM, comm, NULL);
    else if (coll == C_ALL_GATHER)
      st = sharc_all_gather(in, out, per, SHARC_F32, comm, NULL);
    else
      st = sharc_reduce_scatter(in, out, per, SHARC_F32, SHARC_SUM, comm, NULL);
    if (st != SHARC_OK)
      break;
    long w = 0;
    for (size_t j = 0; j < outn; j++) {
      float want;
      if (coll == C_ALL_GATHER)
        want = (float)(j / per + 1);
      else /* reduce_scatter: this rank's block starts at rank * per */
        want =
            tri +
            (float)n *
                (float)(((coll == C_REDUCE_SCATTER ? (size_t)rank * per : 0) +
                         j) %
                        8);
      if (out[j] != want) {
        if (first_call < 0) {
          first_call = i;
          first_at = j;
          first_got = out[j];
          first_want = want;
        }
        w++;
      }
    }
    wrong += w;
    bad_calls += w > 0;
  }
  double el = now_s(CLOCK_MONOTONIC) - t0;
  int rc = 0;
  if (st != SHARC_OK) {
    printf("fault_rank: rank %d status %s after %ld %s calls (%.2f s) at "
           "%.3f: %s\n",
           rank, sharc_status_name(st), i, coll_names[coll], el,
           now_s(CLOCK_REALTIME), sharc_comm_last_error(comm));
    rc = 3;
  } else if (wrong) {
    printf("fault_rank: rank %d wrong: %ld elements in %ld of %ld %s calls; "
           "first in call %ld at element %zu: got %.9g, want %.9g\n",
           rank, wrong, bad_calls, calls, coll_names[coll], first_call,
           first_at, (double)first_got, (double)first_want);
    rc = 5;
  } else {
    printf("fault_rank: rank %d ok after %ld %s calls (%.2f s)\n", rank, calls,
           coll_names[coll], el);
  }
  if (rc == 3) {
    struct timespec ts = {(time_t)linger,
                          (long)((linger - (long)linger) * 1e9)};
    nanosleep(&ts, NULL);
    sharc_comm_abort(comm);
  } else {
    sharc_comm_destroy(comm);
  }
  free(in);
  free(out);
  return rc;
}

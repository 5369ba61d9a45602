/*
 * bench_ccl_none.c - sharc-bench's oneCCL entry points in a build without
 * oneCCL (bench_ccl.cpp is built instead when CMake is given
 * -DSHARC_BENCH_CCL_ROOT): --backend/--compare ccl then says how to get it.
 */
#include "bench.h"

int bench_ccl_available(void) { return 0; }
const char *bench_ccl_version(void) { return ""; }
const char *bench_ccl_transport(void) { return ""; }

int bench_ccl_init(backend_t *b, const opts_t *o, backend_t *host) {
  (void)b, (void)o, (void)host;
  fprintf(stderr,
          "sharc-bench: built without oneCCL: install it "
          "(bench/peers/install_peers.sh --only impi,ccl) and configure with "
          "-DSHARC_BENCH_CCL_ROOT=<its venv> (bench/peers/build_peers.sh "
          "does both)\n");
  return -1;
}

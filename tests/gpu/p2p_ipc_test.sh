#!/usr/bin/env bash
# p2p_ipc_test.sh - sharc_send / sharc_recv on device memory through the CUDA
# IPC path (comm/gpu/path_ipc.c, SHARC_CUDA_PATH=ipc): p2p_check --mem cuda
# --quick on N ranks (the rings, all pairs with transfers to itself,
# all_to_allv; then a size mismatch and a host buffer, refused on both
# ranks), with the CUDA trace on. p2p_check checks the data and the
# refusals; this script counts the trace lines, so that a batch that went
# the staged way instead fails the test:
#   per rank   at least MIN "sharc_send/sharc_recv: ... through CUDA IPC,
#              B bytes pulled: SHARC_OK" lines, at least one with B > 0;
#   no rank    a "sharc_send/sharc_recv #k: staged path" line;
#   ranks 0, 1 the batch of the size mismatch (SHARC_ERR_MISMATCH) and of the
#              host buffer (SHARC_ERR_INVALID_ARG) ended on the IPC path.
#
#   p2p_ipc_test.sh SHARCRUN P2P_CHECK [N]
#
# Exit 0 passed, 1 failed, 77 without a CUDA device (the SKIP line).
set -u
run=$1 prog=$2 n=${3:-3} min=20
W=$(mktemp -d "${TMPDIR:-/tmp}/p2p_ipc.XXXXXX")
trap 'rm -rf "$W"' EXIT
export SHARC_CUDA_PATH=ipc SHARC_DEBUG=TRACE SHARC_DEBUG_SUBSYS=CUDA
export SHARC_TIMEOUT=${SHARC_TIMEOUT:-60}
log=$W/p2p.log
timeout 240 "$run" -n "$n" --timeout 200 "$prog" --mem cuda --quick \
  >"$log" 2>&1
rc=$?
if [ $rc = 77 ]; then
  grep -m1 SKIP "$log"
  exit 77
fi
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
[ $rc = 0 ] || fail "p2p_check exited $rc"
ipc='sharc_send/sharc_recv: [0-9]* transfers with [0-9]* peers through CUDA IPC'
for ((r = 0; r < n; r++)); do
  ok=$(grep -c "^\[$r\] .*$ipc, [0-9]* bytes pulled: SHARC_OK" "$log")
  moved=$(grep -c "^\[$r\] .*$ipc, [1-9][0-9]* bytes pulled: SHARC_OK" "$log")
  [ "$ok" -ge $min ] || fail "rank $r: $ok batches through CUDA IPC, want $min+"
  [ "$moved" -ge 1 ] || fail "rank $r: no batch pulled any bytes"
done
staged=$(grep -c 'sharc_send/sharc_recv #[0-9]*: staged path' "$log")
[ "$staged" = 0 ] || fail "$staged send/recv batches took the staged path"
for r in 0 1; do
  for st in SHARC_ERR_MISMATCH SHARC_ERR_INVALID_ARG; do
    grep -q "^\[$r\] .*$ipc, [0-9]* bytes pulled: $st" "$log" ||
      fail "rank $r: no batch on the CUDA IPC path ended with $st"
  done
done
echo "p2p_ipc_test: $n ranks, $(grep -c "$ipc" "$log") batches through CUDA IPC," \
  "$staged staged"
if [ $fails -gt 0 ]; then
  echo "--- log ($log) ---"
  grep -v ' TRACE\| CUDA sharc_\| CUDA CUDA' "$log" | tail -40
  exit 1
fi
exit 0

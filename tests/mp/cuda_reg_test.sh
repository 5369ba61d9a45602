#!/usr/bin/env bash
# cuda_reg_test.sh - registered device memory read in place by the peers
# (sharc_mem_register), on the CUDA IPC path or the direct path: cuda_reg
# runs two phases of all-reduces with a synchronize after
# each call, then a third that frees registered buffers without
# deregistering them (3 calls), first on registered buffers, then on
# unregistered ones, and this script counts each rank's "CUDA IPC: mapped a
# peer allocation" trace lines:
#   registered    each peer's two buffers are mapped once per phase, and
#                 per call after the misuse (10 x (N-1) per rank); the first
#                 phase's mappings are closed once their owners deregistered
#                 (at least 2 x (N-1)); a rank whose new buffers reuse the
#                 freed addresses warns that the registration is stale
#   unregistered  mapped again after every synchronize
#                 ((4 x calls + 6) x (N-1))
# and cuda_reg itself checks the sums and the registration's refusals.
# On the direct path (PATH direct) the 1 MiB calls read registered buffers
# in place by default (SHARC_CUDA_INPLACE_BYTES); the script sets
# SHARC_CUDA_INPLACE_UNREG_BYTES to 1 MiB so that unregistered ones are read
# in place too, through mappings closed at each synchronize, as on the IPC
# path, and also counts the path's trace of each call: at least 2 x K calls
# per rank "in place (registered buffers)", resp. "(unregistered buffers)".
#
#   cuda_reg_test.sh SHARCRUN CUDA_REG [N [PATH]]
#
# Exit 0 passed, 1 failed, 77 without a CUDA device (the SKIP line).
set -u
run=$1 prog=$2 n=${3:-3} path=${4:-ipc} iters=5
W=$(mktemp -d "${TMPDIR:-/tmp}/cuda_reg.XXXXXX")
trap 'rm -rf "$W"' EXIT
export SHARC_CUDA_PATH=$path SHARC_DEBUG=TRACE SHARC_DEBUG_SUBSYS=CUDA
[ "$path" = direct ] && export SHARC_CUDA_INPLACE_UNREG_BYTES=1048576
export SHARC_TIMEOUT=${SHARC_TIMEOUT:-60}
fails=0
for reg in 1 0; do
  log=$W/reg$reg.log
  timeout 240 "$run" -n "$n" --timeout 200 "$prog" --register $reg \
    --iters $iters >"$log" 2>&1
  rc=$?
  if [ $rc -eq 77 ]; then
    grep -m1 SKIP "$log"
    exit 77
  fi
  grep -E "cuda_reg" "$log" | head -20
  if [ $rc -ne 0 ]; then
    echo "FAIL: cuda_reg --register $reg exited $rc"
    fails=$((fails + 1))
    continue
  fi
  for r in $(seq 0 $((n - 1))); do
    opened=$(grep -c "^\[$r\] .*CUDA IPC: mapped a peer allocation" "$log")
    closed=$(grep -c "^\[$r\] .*CUDA IPC: closed a peer allocation" "$log")
    if [ $reg -eq 1 ]; then
      want=$((10 * (n - 1)))
      if [ "$opened" -ne $want ] || [ "$closed" -lt $((2 * (n - 1))) ]; then
        echo "FAIL: registered: rank $r mapped $opened peer allocations" \
          "(want $want: once per phase, per call after the misuse) and" \
          "closed $closed (want at least $((2 * (n - 1))): the first" \
          "phase's, after deregistration)"
        fails=$((fails + 1))
      fi
      if grep -q "^\[$r\] cuda_reg: rank $r stale reuse yes" "$log" &&
        ! grep -q "^\[$r\] .*registered region whose allocation was freed" \
          "$log"; then
        echo "FAIL: rank $r reused freed registered addresses without the" \
          "stale-registration warning"
        fails=$((fails + 1))
      fi
    else
      want=$(((4 * iters + 6) * (n - 1)))
      if [ "$opened" -ne $want ]; then
        echo "FAIL: unregistered: rank $r mapped $opened peer allocations" \
          "(want $want: again after every synchronize)"
        fails=$((fails + 1))
      fi
    fi
    kind=$([ $reg -eq 1 ] && echo registered || echo unregistered)
    if [ "$path" = direct ]; then
      inplace=$(grep -c "^\[$r\] .*sharc_all_reduce: [0-9]* bytes in place ($kind buffers)" "$log")
      if [ "$inplace" -lt $((2 * iters)) ]; then
        echo "FAIL: $kind: rank $r read its peers' buffers in place in" \
          "$inplace calls (want at least $((2 * iters)): every call of" \
          "phases 1 and 2)"
        fails=$((fails + 1))
      fi
      echo "rank $r, $kind: $inplace calls in place"
    fi
    echo "rank $r, $kind:" \
      "mapped $opened peer allocations, closed $closed ($iters calls x 2" \
      "phases, then 3)"
  done
done
echo "cuda_reg_test: $fails failed"
[ $fails -eq 0 ]

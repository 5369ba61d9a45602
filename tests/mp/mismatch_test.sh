#!/usr/bin/env bash
# mismatch_test.sh - ranks that disagree on a collective, with and without
# SHARC_CHECK (see mismatch.c for the cases and each rank's own checks).
#
#   mismatch_test.sh SHARCRUN MISMATCH_PROGRAM shm|tcp on|off [cuda]
#
# on:  every case on 2 and 4 ranks (groups also on 3, many on 8) with
#      SHARC_CHECK=1.
#      Per run: sharcrun exits 0 (every rank passed its checks), every rank
#      printed its summary, and for a real mismatch every rank logged the
#      mismatch once and its flight recorder shows the collective failed
#      with SHARC_ERR_MISMATCH; the run took less than MAX_S seconds.
# off: the count case without SHARC_CHECK over shm: every rank still gets
#      an error (the transport's message headers), within MAX_S.
# cuda: the cases on device memory (mismatch --mem cuda; on only; exit 77
#      when the first run skips: no CUDA device).
# SHARC_TIMEOUT is 20 s, above MAX_S, so a hang or a timeout fails the test.
set -u
if [ $# -lt 4 ]; then
  echo "usage: $0 SHARCRUN MISMATCH_PROGRAM shm|tcp on|off [cuda]" >&2
  exit 2
fi
sharcrun=$1 prog=$2 transport=$3 mode=$4 mem=()
[ "${5:-}" = cuda ] && mem=(--mem cuda)
MAX_S=10
pass=0 failed=0
check() { # check STATUS DESCRIPTION: STATUS 0 passes
  if [ "$1" -eq 0 ]; then pass=$((pass + 1)); else
    failed=$((failed + 1))
    echo "mismatch_test FAIL: $2"
    show=1
  fi
}
case $transport in
  tcp) export SHARC_TRANSPORT=tcp ;;
  shm) export SHARC_TRANSPORT=auto ;;
  *) echo "mismatch_test: transport must be shm or tcp" >&2; exit 2 ;;
esac
case $mode in
  on) export SHARC_CHECK=1 ;;
  off) unset SHARC_CHECK ;;
  *) echo "mismatch_test: mode must be on or off" >&2; exit 2 ;;
esac
export SHARC_TIMEOUT=20
export SHARC_DEBUG=WARN # the mismatch and recorder lines are checked
unset SHARC_DEBUG_FILE SHARC_DEBUG_SUBSYS

log=$(mktemp "${TMPDIR:-/tmp}/mismatch_test.XXXXXX")
trap 'rm -f "$log"' EXIT

run() { # run N CASE
  local n=$1 c=$2 what="$transport n=$1 $2 (SHARC_CHECK $mode)"
  show=0
  local start end rc
  start=$(date +%s%N)
  timeout 40 "$sharcrun" -n "$n" --grace 5 --timeout 30 "$prog" "$c" \
    ${mem[@]+"${mem[@]}"} >"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 77 ] && [ "$pass$failed" = 00 ]; then
    grep -m1 SKIP "$log"
    exit 77
  fi
  end=$(date +%s%N)
  local secs=$(((end - start) / 1000000000))
  check $((rc != 0)) "$what: sharcrun exited $rc"
  local done_lines
  done_lines=$(grep -c "^\[[0-9]*\] mismatch: rank [0-9]* $c: [0-9]* passed, 0 failed" "$log")
  check $((done_lines != n)) "$what: $done_lines of $n ranks passed"
  check $((secs >= MAX_S)) "$what: took $secs s"
  if [ "$mode" = on ] && [ "$c" != inplace ]; then
    local warned recorded
    warned=$(grep -c "COMM sharc_[a-z_]* #3: collective mismatch: .*(SHARC_ERR_MISMATCH)" "$log")
    check $((warned != n)) "$what: $warned of $n ranks logged the mismatch"
    recorded=$(grep -Ec "recorder: #3 .*failed (after|within) .* with SHARC_ERR_MISMATCH" "$log")
    check $((recorded != n)) "$what: $recorded of $n recorders show #3 failed"
  fi
  if [ "$show" -eq 1 ]; then cat "$log"; fi
}

if [ "$mode" = on ]; then
  for n in 2 4; do
    for c in coll count dtype op root barrier rs reduce gather groups many \
      inplace; do
      run $n $c
    done
  done
  run 3 groups
  run 8 many
else
  run 2 count
  run 4 count
fi
echo "mismatch_test: $pass passed, $failed failed ($transport, SHARC_CHECK $mode)"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# kill_test.sh - kill a rank mid-collective (or mid-setup); every survivor
# must stop on its own, soon, with its flight recorder and an error naming
# the dead rank, and no shared-memory segment of the job may stay in
# /dev/shm.
#
#   kill_test.sh SHARCRUN KILL_RANK [shm|tcp] [-n N] [--kill "K ..."]
#                [--coll C] [--at run|publish|unlink|abort|sweep]
#                [--mem host|cuda]
#   kill_test.sh SHARCRUN PROGRAM [shm|tcp] [-n N] --clean [-- ARGS ...]
#
# Defaults: 8 ranks, kill rank 5 mid-all_reduce. One job per rank in
# --kill: `SHARC_TIMEOUT=10 sharcrun -n N --grace 20 kill_rank --coll C
# --at WHEN K` (under `timeout 60`). Checks per job:
#   - sharcrun exits 137 naming rank K killed by signal 9 (abort: rank K
#     exits 0 and sharcrun 3);
#   - each survivor printed SHARC_ERR_PEER_LOST (abort: SHARC_ERR_ABORTED)
#     naming rank K, exited with status 3 by itself (not killed by sharcrun
#     after the grace period), failed at most 3 s after rank K died, and
#     printed its flight recorder (run and abort: showing collective C);
#   - the job took less than SHARC_TIMEOUT + 8 s;
#   - no /dev/shm name of the job's communicators (the uids the recorders
#     print) is left, and sharcrun had nothing to sweep: the survivors
#     removed what the dead rank left.
# --mem cuda: device buffers on CUDA streams (kill_rank --mem cuda); exits
# 77 with kill_rank's SKIP line when no CUDA device is usable.
# --at sweep: every rank dies as its segment appears; nothing survives, so
# sharcrun must remove all N segments. --clean: PROGRAM ARGS must pass and
# leave nothing (uids from SHARC_DEBUG=INFO init lines).
set -u
usage() {
  echo "usage: $0 SHARCRUN PROGRAM [shm|tcp] [-n N] [--kill \"K ...\"]" \
    "[--coll C] [--at WHEN] [--mem host|cuda] [--clean [-- ARGS ...]]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
sharcrun=$1 prog=$2
shift 2
transport=shm
case ${1:-} in shm | tcp) transport=$1 && shift ;; esac
n=8 kills=5 coll=all_reduce at=run mem=host clean=0 args=()
while [ $# -gt 0 ]; do
  case $1 in
    -n) n=$2 && shift 2 ;;
    --kill) kills=$2 && shift 2 ;;
    --coll) coll=$2 && shift 2 ;;
    --at) at=$2 && shift 2 ;;
    --mem) mem=$2 && shift 2 ;;
    --clean) clean=1 && shift ;;
    --) shift && args=("$@") && break ;;
    *) usage ;;
  esac
done
case $transport:$at in
  tcp:publish | tcp:unlink | tcp:sweep)
    echo "kill_test: --at $at stops a rank in the shm transport's setup; use shm" >&2
    exit 2
    ;;
esac
case $mem in
  host) ;;
  cuda)
    "$prog" --probe-cuda
    probe=$?
    [ $probe -eq 0 ] || exit $((probe == 77 ? 77 : 2))
    ;;
  *) usage ;;
esac
timeout_s=10 grace=20 margin_s=8 detect_s=3
pass=0 failed=0
check() { # check STATUS DESCRIPTION: STATUS 0 passes
  if [ "$1" -eq 0 ]; then pass=$((pass + 1)); else
    failed=$((failed + 1))
    echo "kill_test FAIL: $2"
  fi
}

log=$(mktemp "${TMPDIR:-/tmp}/kill_test.XXXXXX")
trap 'rm -f "$log"' EXIT
case $transport in
  tcp) export SHARC_TRANSPORT=tcp ;;
  shm) export SHARC_TRANSPORT=auto ;;
esac

# run_job ARGS...: one sharcrun job into $log; sets rc and elapsed_ms.
run_job() {
  local start end
  start=$(date +%s%N)
  SHARC_TIMEOUT=$timeout_s timeout 60 "$sharcrun" -n "$n" --grace $grace \
    "$prog" "$@" >"$log" 2>&1
  rc=$?
  end=$(date +%s%N)
  elapsed_ms=$(((end - start) / 1000000))
  cat "$log"
}

# shm_clean WHAT: no /dev/shm name of a communicator in $log is left.
shm_clean() {
  local uids f left=""
  uids=$(grep -oE "(flight recorder of comm|INIT comm) [0-9a-f]{16}" "$log" |
    awk '{print $NF}' | sort -u)
  [ -n "$uids" ]
  check $? "$1: the log names no communicator id to look for in /dev/shm"
  for u in $uids; do
    for f in /dev/shm/sharc-*-"$u"-*; do
      [ -e "$f" ] && left="$left ${f#/dev/shm/}"
    done
  done
  [ -z "$left" ]
  check $? "$1: left in /dev/shm: $left"
  ! grep -q "^sharcrun: removed .* shared-memory segment" "$log"
  check $? "$1: sharcrun had to remove segments the ranks should have"
}

# T of the line matching $1 ("... at T" or "... at T: ..."), or empty.
stamp() {
  grep -E "$1" "$log" | head -1 | sed -nE 's/.* at ([0-9]+\.[0-9]+)(:.*)?$/\1/p'
}

if [ $clean -eq 1 ]; then
  SHARC_DEBUG=INFO SHARC_DEBUG_SUBSYS=INIT run_job "${args[@]}"
  [ "$rc" -eq 0 ]
  check $? "$(basename "$prog") exited with status $rc"
  shm_clean "$(basename "$prog")"
  echo "kill_test: $pass passed, $failed failed ($transport, clean run, $elapsed_ms ms)"
  [ $failed -eq 0 ]
  exit
fi

if [ "$at" = sweep ]; then
  run_job --at publish all
  [ "$rc" -eq 137 ]
  check $? "sweep: sharcrun exited with status $rc, expected 137"
  for ((r = 0; r < n; r++)); do
    grep -Eq "^sharcrun: rank $r \(pid [0-9]+\) killed by signal 9" "$log"
    check $? "sweep: rank $r was not killed by signal 9"
  done
  prefix=$(sed -nE "s|^sharcrun: removed $n shared-memory segments \(/dev/shm/(sharc-[0-9a-f]{8}-)\*\).*|\1|p" "$log")
  [ -n "$prefix" ]
  check $? "sweep: sharcrun did not report removing the $n segments"
  if [ -n "$prefix" ]; then
    left=0
    for f in /dev/shm/"$prefix"*; do
      [ -e "$f" ] && left=$((left + 1))
    done
    [ "$left" -eq 0 ]
    check $? "sweep: $left segments /dev/shm/$prefix* left"
  fi
  echo "kill_test: $pass passed, $failed failed ($transport, sweep, $elapsed_ms ms)"
  [ $failed -eq 0 ]
  exit
fi

want=SHARC_ERR_PEER_LOST want_rc=137
[ "$at" = abort ] && want=SHARC_ERR_ABORTED want_rc=3
for k in $kills; do
  what="$coll, $at, rank $k of $n"
  run_job --coll "$coll" --at "$at" --mem "$mem" "$k" 0.3
  [ "$rc" -eq $want_rc ]
  check $? "$what: sharcrun exited with status $rc, expected $want_rc"
  if [ "$at" != abort ]; then
    grep -Eq "^sharcrun: rank $k \(pid [0-9]+\) killed by signal 9" "$log"
    check $? "$what: sharcrun did not report rank $k killed by signal 9"
    t_kill=$(stamp "^\[$k\] kill_rank: rank $k raising SIGKILL")
  else
    t_kill=$(stamp "^\[$k\] kill_rank: rank $k calling sharc_comm_abort")
  fi
  [ -n "$t_kill" ]
  check $? "$what: rank $k did not say when it failed"
  for ((r = 0; r < n; r++)); do
    [ $r -eq "$k" ] && continue
    grep -Eq "^\[$r\] kill_rank: survivor $r status $want .*rank $k([^0-9]|\$)" "$log"
    check $? "$what: rank $r did not print $want naming rank $k"
    grep -Eq "^sharcrun: rank $r \(pid [0-9]+\) exited with status 3\$" "$log"
    check $? "$what: rank $r did not exit on its own with status 3"
    grep -Eq "^\[$r\] .*flight recorder of comm [0-9a-f]{16} \(rank $r of $n\), after this failure" "$log"
    check $? "$what: rank $r did not print its flight recorder"
    if [ "$at" = run ] || [ "$at" = abort ]; then
      grep -Eq "^\[$r\] .*recorder: #[0-9]+ $coll " "$log"
      check $? "$what: rank $r's recorder does not show the $coll"
    fi
    t_fail=$(stamp "^\[$r\] kill_rank: survivor $r status")
    late=$(awk -v a="${t_kill:-0}" -v b="${t_fail:-1e12}" -v d=$detect_s \
      'BEGIN { printf "%.3f", b - a; exit !(b - a <= d) }')
    check $? "$what: rank $r failed ${late} s after rank $k died (limit $detect_s s)"
  done
  limit_ms=$(((timeout_s + margin_s) * 1000))
  [ $elapsed_ms -lt $limit_ms ]
  check $? "$what: the job took $elapsed_ms ms, limit $limit_ms ms (SHARC_TIMEOUT=$timeout_s + $margin_s s)"
  shm_clean "$what"
  echo "kill_test: $what: $elapsed_ms ms"
done

echo "kill_test: $pass passed, $failed failed ($transport, $coll, $at, ranks $kills of $n)"
[ $failed -eq 0 ]

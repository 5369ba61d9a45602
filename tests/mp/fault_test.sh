#!/usr/bin/env bash
# fault_test.sh - failures injected with SHARC_FAULT (comm/fault/fault.h) into 4
# ranks running fault_rank (1 MiB f32 ring all_reduce, 20 calls); checks
# what every rank printed, how it exited and how long it took.
#
#   fault_test.sh SHARCRUN FAULT_RANK CASE [shm|tcp]
#
# Each rank sends 1.5 MiB per call, so a fault at 20 MiB fires in call 13
# (of 0..19) on every run. CASE:
#   kill            kill:2:send:20M: sharcrun reports rank 2 killed by signal
#                   9; every survivor fails in call 13 (over tcp 12 or 13:
#                   the end of call 12 may die in rank 2's send ring) with
#                   SHARC_ERR_PEER_LOST naming rank 2, on its own, within 3 s
#                   of the kill, and prints its flight recorder
#   kill-recv       kill:2:recv:20M: the same, counting received bytes
#   drop            drop:1:send:20M: no process dies; every rank fails in call
#                   13 with SHARC_ERR_PEER_LOST or SHARC_ERR_NET, within 3 s,
#                   naming an end of the dropped connection (rank 1 or 2;
#                   rank 1 names rank 2; over shm everyone names rank 2)
#   drop-recv       drop:2:recv:20M: the same connection dropped by its
#                   receiving end (rank 2 names rank 1; over shm everyone
#                   names rank 1)
#   delay-ok        delay:1:1500:20M with SHARC_TIMEOUT=3: every rank passes
#   delay-timeout   delay:1:6000:20M with SHARC_TIMEOUT=2: every rank fails
#                   with SHARC_ERR_TIMEOUT 2-5 s after the delay began,
#                   before rank 1 wakes; over shm every rank's message names
#                   rank 1 (the same-host waits are followed to it), and
#                   rank 2's flight recorder shows it waiting on rank 1
#   corrupt-payload corrupt:1:payload:20M: nothing notices (payloads carry no
#                   checksum, as in NCCL): the job ends without an error and
#                   fault_rank finds wrong elements in call 13 only
#   corrupt-header  shm: corrupt:1:header:20M: every rank fails with
#                   SHARC_ERR_MISMATCH naming rank 1 (the message header's
#                   kind is checked); tcp: corrupt:0:header (the hello of
#                   rank 0's first connection): the peer drops it as "not a
#                   sharc hello" and every rank fails cleanly (status 3, an
#                   error, no signal) within SHARC_TIMEOUT + 5 s
#   badspec         malformed SHARC_FAULT values fail sharc_comm_init_env
#                   with SHARC_ERR_INVALID_ARG saying what is wrong, and
#                   sharc-info lists SHARC_FAULT
set -u
[ $# -ge 3 ] || {
  echo "usage: $0 SHARCRUN FAULT_RANK CASE [shm|tcp]" >&2
  exit 2
}
sharcrun=$1 prog=$2 case=$3 transport=${4:-shm}
n=4 calls=20 hit=13 detect_s=3 margin_s=5
pass=0 failed=0
check() { # check STATUS DESCRIPTION: STATUS 0 passes
  if [ "$1" -eq 0 ]; then pass=$((pass + 1)); else
    failed=$((failed + 1))
    echo "fault_test FAIL: $2"
  fi
}
log=$(mktemp "${TMPDIR:-/tmp}/fault_test.XXXXXX")
trap 'rm -f "$log"' EXIT
export SHARC_ALGO=ring
case $transport in
  tcp) export SHARC_TRANSPORT=tcp ;;
  shm) export SHARC_TRANSPORT=auto ;;
  *) echo "fault_test: transport must be shm or tcp" >&2 && exit 2 ;;
esac

# run_job TIMEOUT_S FAULT: one job into $log; sets rc and elapsed_ms.
run_job() {
  local start end
  start=$(date +%s%N)
  SHARC_TIMEOUT=$1 SHARC_FAULT=$2 timeout 60 "$sharcrun" -n $n --grace 20 \
    "$prog" --calls $calls >"$log" 2>&1
  rc=$?
  end=$(date +%s%N)
  elapsed_ms=$(((end - start) / 1000000))
  cat "$log"
}
# line R: rank R's fault_rank line
line() { grep -E "^\[$1\] fault_rank: rank $1 " "$log" | head -1; }
# names LINE K: LINE names "rank K" (not "rank K0")
names() { echo "$1" | grep -Eq "rank $2([^0-9]|\$)"; }
# fault_at PATTERN: T of the SHARC_FAULT line matching PATTERN
fault_at() {
  grep -E "SHARC_FAULT .*$1" "$log" | head -1 | sed -nE 's/.* at ([0-9]+\.[0-9]+)$/\1/p'
}
# within R T0 LO HI: rank R's failure time is in [T0 + LO, T0 + HI]
within() {
  local t
  t=$(line "$1" | sed -nE 's/.* at ([0-9]+\.[0-9]+): .*/\1/p')
  awk -v a="${2:-0}" -v b="${t:-1e12}" -v lo="$3" -v hi="$4" \
    'BEGIN { printf "%.3f", b - a; exit !(b - a >= lo && b - a <= hi) }'
}
exited3() { grep -Eq "^sharcrun: rank $1 \(pid [0-9]+\) exited with status 3\$" "$log"; }
recorder() { grep -Eq "^\[$1\] .*flight recorder of comm [0-9a-f]{16} \(rank $1 of $n\), after this failure" "$log"; }

case $case in
kill | kill-recv)
  point=send moved=sent
  [ "$case" = kill-recv ] && point=recv moved=received
  run_job 10 kill:2:$point:20M
  [ "$rc" -eq 137 ]
  check $? "sharcrun exited with status $rc, expected 137"
  grep -Eq "^sharcrun: rank 2 \(pid [0-9]+\) killed by signal 9" "$log"
  check $? "sharcrun did not report rank 2 killed by signal 9"
  t0=$(fault_at "rank 2 raising SIGKILL after [0-9]+ bytes $moved")
  [ -n "$t0" ]
  check $? "rank 2 did not log its SHARC_FAULT kill"
  for r in 0 1 3; do
    l=$(line $r)
    # A send completes once its bytes are in the transport's buffers: over
    # tcp rank 2 may finish call hit-1 and die in call hit while the end
    # of hit-1 still sits in its process's send ring, lost with it. Rank 3,
    # which reads rank 2's bytes, then rightly fails in call hit-1 (seen
    # under load: 2 of 30 runs), and so may a rank that waits on rank 3.
    calls_re=$hit
    [ "$transport" = tcp ] && calls_re="($((hit - 1))|$hit)"
    echo "$l" | grep -Eq "status SHARC_ERR_PEER_LOST after $calls_re all_reduce calls" &&
      names "$l" 2
    check $? "rank $r: wanted SHARC_ERR_PEER_LOST in call $calls_re naming rank 2: $l"
    exited3 $r
    check $? "rank $r did not exit on its own with status 3"
    recorder $r
    check $? "rank $r did not print its flight recorder"
    late=$(within $r "$t0" 0 $detect_s)
    check $? "rank $r failed $late s after rank 2 died (limit $detect_s s)"
  done
  ;;
drop | drop-recv)
  d=1 e=2 point=send # d drops its connection to e
  [ "$case" = drop-recv ] && d=2 e=1 point=recv
  run_job 10 drop:$d:$point:20M
  [ "$rc" -eq 3 ]
  check $? "sharcrun exited with status $rc, expected 3 (no rank killed)"
  t0=$(fault_at "rank $d drops its $transport connection to rank $e ")
  [ -n "$t0" ]
  check $? "rank $d did not log dropping its $transport connection to rank $e"
  for r in 0 1 2 3; do
    l=$(line $r)
    echo "$l" | grep -Eq "status SHARC_ERR_(PEER_LOST|NET) after $hit all_reduce calls"
    check $? "rank $r: wanted SHARC_ERR_PEER_LOST or _NET in call $hit: $l"
    if [ "$transport" = shm ] || [ $r -eq $d ]; then
      names "$l" $e
      check $? "rank $r does not name rank $e: $l"
    else
      names "$l" 1 || names "$l" 2
      check $? "rank $r names neither rank 1 nor rank 2: $l"
    fi
    exited3 $r
    check $? "rank $r did not exit on its own with status 3"
    recorder $r
    check $? "rank $r did not print its flight recorder"
    late=$(within $r "$t0" 0 $detect_s)
    check $? "rank $r failed $late s after the drop (limit $detect_s s)"
  done
  ;;
delay-ok)
  run_job 3 delay:1:1500:20M
  [ "$rc" -eq 0 ]
  check $? "sharcrun exited with status $rc, expected 0"
  grep -Eq "SHARC_FAULT .*rank 1 sleeps 1500 ms before sending to rank 2" "$log"
  check $? "rank 1 did not log its 1500 ms delay"
  for r in 0 1 2 3; do
    line $r | grep -q "ok after $calls all_reduce calls"
    check $? "rank $r did not pass: $(line $r)"
  done
  [ $elapsed_ms -ge 1500 ]
  check $? "the job took $elapsed_ms ms, less than the 1500 ms delay"
  ;;
delay-timeout)
  timeout_s=2
  run_job $timeout_s delay:1:6000:20M
  [ "$rc" -eq 3 ]
  check $? "sharcrun exited with status $rc, expected 3"
  t0=$(fault_at "rank 1 sleeps 6000 ms before sending to rank 2")
  [ -n "$t0" ]
  check $? "rank 1 did not log its 6000 ms delay"
  for r in 0 1 2 3; do
    l=$(line $r)
    echo "$l" | grep -q "status SHARC_ERR_TIMEOUT after $hit all_reduce calls"
    check $? "rank $r: wanted SHARC_ERR_TIMEOUT in call $hit: $l"
    exited3 $r
    check $? "rank $r did not exit on its own with status 3"
    if [ $r -ne 1 ]; then
      if [ "$transport" = shm ]; then
        names "$l" 1
        check $? "rank $r does not name rank 1: $l"
      fi
      recorder $r
      check $? "rank $r did not print its flight recorder"
      # A waiter's no-progress clock starts at the last byte it received,
      # which comes a little before rank 1 logs its delay, and both times
      # are printed to the millisecond: CI saw 1.999 s for 2. So 50 ms
      # early is still on time.
      late=$(within $r "$t0" "$(awk -v t=$timeout_s 'BEGIN { print t - 0.05 }')" \
        $((timeout_s + detect_s)))
      check $? "rank $r failed $late s after the delay began (want $timeout_s-$((timeout_s + detect_s)) s)"
    fi
  done
  # Over tcp the first rank to time out names whom it waits on, which may
  # be another waiter; rank 2's recorder shows where the chain ends.
  # Printed while the call runs ("running for"), or just after it ended
  # when a peer's abort notice came in right after rank 2's own timeout
  # ("failed after|within ... with SHARC_ERR_TIMEOUT, waiting on"): CI saw both.
  grep -Eq "^\[2\] .*recorder: #$hit all_reduce .*(running for|failed (after|within)) .*waiting on rank 1 " "$log"
  check $? "rank 2's flight recorder does not show it waiting on rank 1"
  ;;
corrupt-payload)
  run_job 10 corrupt:1:payload:20M
  grep -Eq "SHARC_FAULT .*rank 1 flips payload byte" "$log"
  check $? "rank 1 did not log the flipped byte"
  ! grep -q "fault_rank: rank [0-9] status" "$log"
  check $? "a rank reported an error: payloads carry no checksum"
  nwrong=0
  for r in 0 1 2 3; do
    l=$(line $r)
    if echo "$l" | grep -q " wrong: "; then
      nwrong=$((nwrong + 1))
      echo "$l" | grep -Eq "in 1 of $calls all_reduce calls; first in call $hit "
      check $? "rank $r: wrong data outside call $hit: $l"
    else
      echo "$l" | grep -q "ok after $calls"
      check $? "rank $r printed neither ok nor wrong: $l"
    fi
  done
  [ $nwrong -ge 1 ]
  check $? "no rank saw the corrupted element"
  [ "$rc" -eq 5 ]
  check $? "sharcrun exited with status $rc, expected 5 (fault_rank: wrong data)"
  echo "fault_test: $nwrong of $n ranks received the corrupted value; no error was raised (documented: no payload checksum)"
  ;;
corrupt-header)
  if [ "$transport" = shm ]; then
    run_job 10 corrupt:1:header:20M
    grep -Eq "SHARC_FAULT .*rank 1 flips byte 0 .* of its message header to rank 2" "$log"
    check $? "rank 1 did not log the flipped header byte"
    for r in 0 1 2 3; do
      l=$(line $r)
      echo "$l" | grep -q "status SHARC_ERR_MISMATCH after $hit all_reduce calls" &&
        names "$l" 1
      check $? "rank $r: wanted SHARC_ERR_MISMATCH in call $hit naming rank 1: $l"
      exited3 $r
      check $? "rank $r did not exit on its own with status 3"
    done
    line 2 | grep -q "message header of unknown kind"
    check $? "rank 2 did not say the header was unknown: $(line 2)"
  else
    timeout_s=3
    run_job $timeout_s corrupt:0:header
    peer=$(sed -nE 's/.*SHARC_FAULT .*rank 0 flips byte 0 .* hello to rank ([0-9]+) .*/\1/p' "$log" | head -1)
    [ -n "$peer" ]
    check $? "rank 0 did not log the flipped hello byte"
    grep -Eq "^\[${peer:-x}\] .*tcp: dropped connection from .*: not a sharc hello" "$log"
    check $? "rank ${peer:-?} did not drop the corrupted hello"
    for r in 0 1 2 3; do
      l=$(line $r)
      echo "$l" | grep -Eq "status SHARC_ERR_(PEER_LOST|NET|TIMEOUT) "
      check $? "rank $r: wanted a clean error: $l"
      exited3 $r
      check $? "rank $r did not exit on its own with status 3"
    done
    ! grep -Eq "killed by signal|exited with status (2|4|5|1[0-9]{2})" "$log"
    check $? "a rank crashed or was killed"
    [ $elapsed_ms -lt $(((timeout_s + margin_s) * 1000)) ]
    check $? "the job took $elapsed_ms ms (limit $(((timeout_s + margin_s) * 1000)))"
  fi
  ;;
badspec)
  for spec in "explode:1" "kill:x:send" "kill:1:sideways" "delay:1:abc" \
    "kill:1:send:12Q" "corrupt:1:footer" "save_kill:1:2" "kill:1:send:1:2:3"; do
    SHARC_FAULT=$spec timeout 60 "$sharcrun" -n 2 --grace 5 "$prog" >"$log" 2>&1
    rc=$?
    [ "$rc" -eq 2 ]
    check $? "SHARC_FAULT=$spec: sharcrun exited with status $rc, expected 2"
    for r in 0 1; do
      grep -Fq "[$r] fault_rank: rank $r: init failed: SHARC_ERR_INVALID_ARG: SHARC_FAULT=$spec: " "$log"
      check $? "SHARC_FAULT=$spec: rank $r did not refuse it at init"
    done
    sed -nE 's/^\[0\] fault_rank: rank 0: init failed: //p' "$log" | head -1
  done
  info=$(dirname "$sharcrun")/sharc-info
  "$info" | grep -Eq "^SHARC_FAULT .*TESTS ONLY"
  check $? "sharc-info does not list SHARC_FAULT"
  ;;
*)
  echo "fault_test: unknown case $case" >&2
  exit 2
  ;;
esac
if [ "$case" != badspec ]; then
  limit_ms=60000
  [ $elapsed_ms -lt $limit_ms ]
  check $? "the job took $elapsed_ms ms"
  echo "fault_test: job took $elapsed_ms ms"
fi
echo "fault_test: $pass passed, $failed failed ($case, $transport)"
[ $failed -eq 0 ]

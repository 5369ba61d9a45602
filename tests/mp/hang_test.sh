#!/usr/bin/env bash
# hang_test.sh - one rank of 6 stays alive but never joins a collective;
# the others must fail with SHARC_ERR_TIMEOUT within SHARC_TIMEOUT + margin,
# and over shm their message must name the rank that did not call; SIGUSR1
# makes every rank print its flight recorder.
#   hang_test.sh SHARCRUN HANG_RANK_PROGRAM [shm|tcp]
set -u
sharcrun=$1 prog=$2 transport=${3:-shm}
n=6 k=4 timeout_s=3 margin_s=5
name=1
[ "$transport" = tcp ] && { export SHARC_TRANSPORT=tcp; name=0; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s%N)
SHARC_TIMEOUT=$timeout_s "$sharcrun" -n $n --grace 30 "$prog" $k $name >"$log" 2>&1 &
job=$!
(sleep 60; kill -9 $job) >/dev/null 2>&1 & # no hold on our output
watchdog=$!
# While the others wait in collective #50: SIGUSR1 (forwarded by sharcrun)
# makes every rank print its flight recorder. Again every 0.5 s until the
# recorders show #50 running (a slow machine, or TSan, reaches it later
# than 1.5 s), while the job lives.
sleep 1.5
for _ in $(seq 1 40); do
  kill -USR1 $job 2>/dev/null || break
  sleep 0.5
  [ "$(grep -c "recorder: #50 all_reduce .*running for" "$log")" -ge $((n - 1)) ] && break
done
wait $job
end=$(date +%s%N)
kill $watchdog 2>/dev/null
pass=0 fail=0
dumps=$(grep -c "flight recorder of comm .* on SIGUSR1" "$log")
if [ "$dumps" -ge $((n - 1)) ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "hang_test FAIL: $dumps ranks printed their recorder on SIGUSR1"; fi
waiting=$(grep -c "recorder: #50 all_reduce .*running for" "$log")
if [ "$waiting" -ge $((n - 1)) ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "hang_test FAIL: $waiting recorder lines show collective #50 running"; fi
ok=$(grep -c "^\[[0-9]*\] hang_rank: survivor .* status SHARC_ERR_TIMEOUT" "$log")
if [ "$ok" -eq $((n - 1)) ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "hang_test FAIL: $ok of $((n - 1)) survivors reported SHARC_ERR_TIMEOUT"; fi
bad=$(grep -c "exited with status 4" "$log")
if [ "$bad" -eq 0 ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "hang_test FAIL: $bad survivors gave the wrong status or message"; fi
# Survivors must be done long before the hung rank wakes up.
last=$(grep -n "exited with status 3" "$log" | wc -l)
if [ "$last" -eq $((n - 1)) ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "hang_test FAIL: $last survivors exited with status 3"; fi
elapsed=$(((end - start) / 1000000000))
if [ "$elapsed" -le $((timeout_s + 5 + margin_s + 2)) ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "hang_test FAIL: took $elapsed s"; fi
[ "$fail" -eq 0 ] || cat "$log"
echo "hang_test: $pass passed, $fail failed ($transport)"
[ "$fail" -eq 0 ]

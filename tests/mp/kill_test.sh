#!/usr/bin/env bash
# kill_test.sh - kill one rank of eight mid-all-reduce; every survivor must
# stop on its own, within the timeout, with an error naming the dead rank.
#
#   kill_test.sh SHARCRUN KILL_RANK_PROGRAM [shm|tcp]
#
# Runs `SHARC_TIMEOUT=10 sharcrun -n 8 --grace 20 kill_rank 5` (under an outer
# `timeout 60`) and checks: sharcrun exits 137 and names rank 5 as killed by
# signal 9; each of the 7 survivors printed SHARC_ERR_PEER_LOST naming rank 5
# and exited with status 3 by itself (not killed by sharcrun after the
# grace period); the whole run took less than SHARC_TIMEOUT + 8 s, which is
# below the grace period, so survivors that hang are caught.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 SHARCRUN KILL_RANK_PROGRAM [shm|tcp]" >&2
  exit 2
fi
sharcrun=$1 prog=$2 transport=${3:-shm}
n=8 k=5 timeout_s=10 grace=20 margin_s=8
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
  *) echo "kill_test: transport must be shm or tcp, got '$transport'" >&2; exit 2 ;;
esac

start=$(date +%s%N)
SHARC_TIMEOUT=$timeout_s timeout 60 "$sharcrun" -n $n --grace $grace "$prog" $k >"$log" 2>&1
rc=$?
end=$(date +%s%N)
elapsed_ms=$(((end - start) / 1000000))
cat "$log"

[ "$rc" -eq 137 ]
check $? "sharcrun exited with status $rc, expected 137 (rank $k killed by signal 9)"
grep -Eq "^sharcrun: rank $k \(pid [0-9]+\) killed by signal 9" "$log"
check $? "sharcrun did not report rank $k killed by signal 9"
for ((r = 0; r < n; r++)); do
  [ $r -eq $k ] && continue
  grep -Eq "^\[$r\] kill_rank: survivor $r status SHARC_ERR_PEER_LOST .*rank $k([^0-9]|\$)" "$log"
  check $? "rank $r did not print SHARC_ERR_PEER_LOST naming rank $k"
  grep -Eq "^sharcrun: rank $r \(pid [0-9]+\) exited with status 3\$" "$log"
  check $? "rank $r did not exit on its own with status 3"
done
limit_ms=$(((timeout_s + margin_s) * 1000))
[ $elapsed_ms -lt $limit_ms ]
check $? "the job took $elapsed_ms ms, limit $limit_ms ms (SHARC_TIMEOUT=$timeout_s + $margin_s s)"

echo "kill_test: $pass passed, $failed failed ($transport, $elapsed_ms ms)"
[ $failed -eq 0 ]

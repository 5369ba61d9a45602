#!/usr/bin/env bash
# stray_test.sh - stray TCP connections to the rendezvous port during init
# must be dropped without disturbing the job.
#
#   stray_test.sh SHARCRUN STRAY_CONN_PROGRAM
#
# Starts `sharcrun -n 4 --port P stray_conn 2000` (rank 1 arrives 2 s late).
# While rank 0 waits for it, connects to 127.0.0.1:P (bash /dev/tcp) and
# sends 4 KiB of random bytes on one connection, a truncated hello on a
# second, nothing on a third (held open until the job ends), and opens and
# closes a fourth at once. Checks that the strays got in before rank 1
# called init, that the job exits 0 with every rank's all-reduce right, and
# that no rank waited for the silent connection (the job ends well before
# SHARC_TIMEOUT).
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 SHARCRUN STRAY_CONN_PROGRAM" >&2
  exit 2
fi
sharcrun=$1 prog=$2
n=4 delay_ms=2000 timeout_s=15
pass=0 failed=0
check() { # check STATUS DESCRIPTION: STATUS 0 passes
  if [ "$1" -eq 0 ]; then pass=$((pass + 1)); else
    failed=$((failed + 1))
    echo "stray_test FAIL: $2"
  fi
}

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null) ||
  port=$((20000 + RANDOM % 20000))
log=$(mktemp "${TMPDIR:-/tmp}/stray_test.XXXXXX")
trap 'rm -f "$log"' EXIT

start=$(date +%s%N)
SHARC_TIMEOUT=$timeout_s "$sharcrun" -n $n --port "$port" --grace 5 --timeout 60 \
  "$prog" $delay_ms >"$log" 2>&1 &
job=$!

# Wait (up to 5 s) for rank 0's rendezvous listener.
g=
for ((i = 0; i < 250; i++)); do
  if { exec {g}<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then break; fi
  g=
  sleep 0.02
done
s= h=
if [ -n "$g" ]; then
  in_window=1
  grep -q "^\[1\] stray_conn: rank 1 calling init" "$log" && in_window=0
  (head -c 4096 /dev/urandom >&"$g") 2>/dev/null
  { exec {h}<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null && (printf 'SHARC\001\000' >&"$h") 2>/dev/null
  { exec {s}<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null
  if { exec {c}<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then exec {c}>&-; fi
  check 0 "connected to the rendezvous port"
  check $((1 - in_window)) "rank 1 called init before the stray connections; the window was missed"
else
  check 1 "could not connect to the rendezvous port 127.0.0.1:$port within 5 s"
fi

wait $job
rc=$?
end=$(date +%s%N)
for fd in $g $h $s; do exec {fd}>&-; done
elapsed_ms=$(((end - start) / 1000000))
cat "$log"

[ $rc -eq 0 ]
check $? "sharcrun exited with status $rc, expected 0"
for ((r = 0; r < n; r++)); do
  grep -q "^\[$r\] stray_conn: rank $r ok" "$log"
  check $? "rank $r did not report a correct all-reduce"
done
[ $elapsed_ms -lt $(((timeout_s - 3) * 1000)) ]
check $? "the job took $elapsed_ms ms: someone waited on a stray connection (SHARC_TIMEOUT=$timeout_s)"

echo "stray_test: $pass passed, $failed failed ($elapsed_ms ms)"
[ $failed -eq 0 ]

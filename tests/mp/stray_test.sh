#!/usr/bin/env bash
# stray_test.sh - stray TCP connections to the rendezvous port during init
# must be rejected (the root logs why) without disturbing the job.
#
#   stray_test.sh SHARCRUN STRAY_CONN_PROGRAM
#
# Starts `sharcrun -n 4 --port P stray_conn 2000` (rank 1 arrives 2 s late).
# While rank 0 waits for it, connects to 127.0.0.1:P and sends 4 KiB of
# random bytes on one connection (bash /dev/tcp), a truncated non-sharc
# hello on a second, nothing on a third (held open until the job ends), and
# opens and closes a fourth at once. Then `stray_conn --stray KIND` sends
# what a broken or foreign sharc would: a truncated hello (valid header,
# half the payload), a header announcing an oversize length, a header of
# another protocol version, a complete hello with a wrong job token, and
# random bytes; each must be closed by the root. Checks that the strays
# got in before rank 1 called init, that the root logged a reason for each
# kind, that the rendezvous listener is bound to 127.0.0.1 and no listener
# of the job to a wildcard address, that the job exits 0 with every rank's
# all-reduce right, and that no rank waited for the silent connection (the
# job ends well before SHARC_TIMEOUT).
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
kinds="truncated oversize version token random"
log=$(mktemp "${TMPDIR:-/tmp}/stray_test.XXXXXX")
trap 'rm -f "$log" "$log".*' EXIT
listen_lines=

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
s='' h=''
if [ -n "$g" ]; then
  in_window=1
  grep -q "^\[1\] stray_conn: rank 1 calling init" "$log" && in_window=0
  (head -c 4096 /dev/urandom >&"$g") 2>/dev/null
  { exec {h}<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null && (printf 'SHARC\001\000' >&"$h") 2>/dev/null
  { exec {s}<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null
  if { exec {c}<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then exec {c}>&-; fi
  # Crafted sharc messages, each from its own process, all at once.
  pids=()
  for kind in $kinds; do
    "$prog" --stray "$kind" 127.0.0.1 "$port" >"$log.$kind" 2>&1 &
    pids+=($!)
  done
  # Where the job listens, while it is forming (ss: iproute2).
  listen_lines=$(ss -Hltnp 2>/dev/null) || listen_lines=
  i=0
  for kind in $kinds; do
    wait "${pids[$i]}"
    check $? "stray '$kind' was not rejected: $(cat "$log.$kind")"
    i=$((i + 1))
  done
  grep -q "^\[1\] stray_conn: rank 1 calling init" "$log" && in_window=0
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
# The root says why it dropped each kind of stray (WARN, rank 0's log).
for reason in "bad magic" "closed after" "length 4294967280" \
  "protocol version 99" "wrong job token"; do
  grep -q "^\[0\] .*dropping connection from .*$reason" "$log"
  check $? "the root did not log a drop for '$reason'"
done
# Listeners: the rendezvous on 127.0.0.1 (the rendezvous address), none of
# the job's sockets on a wildcard address.
if [ -n "$listen_lines" ]; then
  root_lines=$(echo "$listen_lines" | awk -v p=":$port" '$4 ~ p"$"')
  [ -n "$root_lines" ] && ! echo "$root_lines" | awk '{print $4}' | grep -qv "^127\.0\.0\.1:$port$"
  check $? "the rendezvous listener is not bound to 127.0.0.1 only: $root_lines"
  job_lines=$(echo "$listen_lines" | grep '"stray_conn"')
  [ -n "$job_lines" ] && ! echo "$job_lines" | awk '{print $4}' | grep -qE '^(0\.0\.0\.0|\*|\[::\]):'
  check $? "a listener of the job is bound to a wildcard address: $job_lines"
else
  echo "stray_test: ss not available; listener addresses not checked"
fi
[ $elapsed_ms -lt $(((timeout_s - 3) * 1000)) ]
check $? "the job took $elapsed_ms ms: someone waited on a stray connection (SHARC_TIMEOUT=$timeout_s)"

echo "stray_test: $pass passed, $failed failed ($elapsed_ms ms)"
[ $failed -eq 0 ]

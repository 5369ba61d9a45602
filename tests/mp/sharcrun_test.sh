#!/usr/bin/env bash
# sharcrun_test.sh - end-to-end checks of the launcher with plain shell ranks
# (no libsharc needed): output prefixes, environment, failure teardown, exit
# status, signal forwarding, usage errors.
#
# usage: sharcrun_test.sh path/to/sharcrun
set -u

SR=${1:?usage: sharcrun_test.sh path/to/sharcrun}
SR=$(cd "$(dirname "$SR")" && pwd)/$(basename "$SR")
[ -x "$SR" ] || { echo "sharcrun_test: '$SR' is not executable"; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sharcrun_test.XXXXXX")
MAIN_PID=$BASHPID
# Only this shell cleans up: a subshell hit by a signal while being forked
# would otherwise run the trap too.
trap '[ "$BASHPID" = "$MAIN_PID" ] && rm -rf "$TMP"' EXIT
OUT=$TMP/out ERR=$TMP/err
passed=0 failed=0

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() {
  failed=$((failed + 1))
  echo "FAIL $1"
  echo "  --- rc=$RC stdout:"; sed 's/^/  | /' "$OUT" | head -20
  echo "  --- stderr:"; sed 's/^/  | /' "$ERR" | head -20
}
check() { # check NAME COMMAND...: passes when COMMAND succeeds
  local name=$1; shift
  if "$@"; then ok "$name"; else bad "$name"; fi
}
# run ARGS...: sharcrun with a watchdog; sets RC, fills $OUT and $ERR.
run() {
  RC=0
  timeout -k 5 60 "$SR" "$@" >"$OUT" 2>"$ERR" </dev/null || RC=$?
}
lines() { grep -c -- "$2" "$1"; }
now() { date +%s.%N; }
elapsed_lt() { awk -v a="$1" -v b="$(now)" -v lim="$2" 'BEGIN { exit !(b - a < lim) }'; }

# ---- output prefixes ----------------------------------------------------
run -n 3 sh -c 'echo out $SHARC_RANK; echo err $SHARC_RANK >&2'
check "prefix: exit 0" test "$RC" = 0
check "prefix: stdout lines" test "$(sort "$OUT")" = "$(printf '[0] out 0\n[1] out 1\n[2] out 2')"
check "prefix: stderr lines" test "$(sort "$ERR")" = "$(printf '[0] err 0\n[1] err 1\n[2] err 2')"

run -n 2 --no-prefix sh -c 'echo out $SHARC_RANK; printf tail'
check "no-prefix: raw output" test "$(grep -o 'out [01]' "$OUT" | wc -l)" = 2 -a \
  "$(grep -c '\[' "$OUT")" = 0
check "no-prefix: partial line untouched" test "$(grep -o tail "$OUT" | wc -l)" = 2

run -n 1 sh -c 'printf "no newline"'
check "partial line flushed at EOF" test "$(cat "$OUT")" = "[0] no newline"

run -n 2 sh -c 'printf "a\nb"; sleep 0.2; printf "c\nd"'
check "partial line joined across reads" \
  test "$(grep -c -e '^\[[01]\] a$' -e '^\[[01]\] bc$' -e '^\[[01]\] d$' "$OUT")" = 6

run -n 1 sh -c 'head -c 100000 /dev/zero | tr "\0" x; echo; echo after'
check "long line passes without loss" \
  test "$(head -1 "$OUT" | tr -d '[0] ' | wc -c)" = 100001 -a "$(tail -1 "$OUT")" = "[0] after"

run -n 1 sh -c 'cat; echo done'
check "stdin is /dev/null" test "$RC:$(cat "$OUT")" = "0:[0] done"

# ---- environment --------------------------------------------------------
SHARC_TIMEOUT=77 SHARC_RANK=99 SHARC_TOKEN=stale run -n 4 sh -c \
  'echo "$SHARC_RANK $SHARC_WORLD_SIZE $SHARC_LOCAL_RANK $SHARC_LOCAL_SIZE $SHARC_ADDR $SHARC_TOKEN $SHARC_TIMEOUT"'
check "env: exit 0" test "$RC" = 0
check "env: rank matches prefix, sizes 4" \
  test "$(awk '{ r = substr($1, 2, length($1) - 2) } r == $2 && r == $4 && $3 == 4 && $5 == 4' "$OUT" | wc -l)" = 4
check "env: every rank once" test "$(awk '{ print $2 }' "$OUT" | sort | tr '\n' ' ')" = "0 1 2 3 "
check "env: one address, 127.0.0.1:port" \
  test "$(awk '{ print $6 }' "$OUT" | sort -u | grep -cE '^127\.0\.0\.1:[0-9]+$')" = 1 -a \
       "$(awk '{ print $6 }' "$OUT" | sort -u | wc -l)" = 1
check "env: one 32-hex token" \
  test "$(awk '{ print $7 }' "$OUT" | sort -u | grep -cE '^[0-9a-f]{32}$')" = 1 -a \
       "$(awk '{ print $7 }' "$OUT" | sort -u | wc -l)" = 1
check "env: caller's SHARC_TIMEOUT kept" test "$(awk '$8 == 77' "$OUT" | wc -l)" = 4
TOKEN1=$(awk 'NR == 1 { print $7 }' "$OUT")
run -n 1 sh -c 'echo $SHARC_TOKEN'
check "env: fresh token per job" test -n "$TOKEN1" -a "$(cut -c5- "$OUT")" != "$TOKEN1"
run -np 2 --port 23456 sh -c 'echo $SHARC_ADDR'
check "env: -np and --port" test "$(sort -u "$OUT" | cut -c5- | sort -u)" = "127.0.0.1:23456"
run -n 1 --addr=10.1.2.3:999 -- sh -c 'echo $SHARC_ADDR'
check "env: --addr" test "$(cat "$OUT")" = "[0] 10.1.2.3:999"

# ---- process group ------------------------------------------------------
run -n 3 sh -c 'echo $(cut -d" " -f5 /proc/$$/stat) $(cut -d" " -f5 /proc/$PPID/stat)'
check "pgid: ranks share one group, not sharcrun's" \
  test "$(awk '{ print $3 }' "$OUT" | sort -u | wc -l)" = 1 -a \
       "$(awk '$2 != $3' "$OUT" | wc -l)" = 3

# ---- failures -----------------------------------------------------------
T0=$(now)
run -n 3 --grace 2 sh -c 'if [ $SHARC_RANK = 1 ]; then exit 3; fi; exec sleep 100'
check "exit 3: sharcrun exits 3" test "$RC" = 3
check "exit 3: one naming line" \
  test "$(lines "$ERR" '^sharcrun: rank 1 (pid [0-9]*) exited with status 3$')" = 1
check "exit 3: others terminated after grace" \
  test "$(lines "$ERR" '^sharcrun: 2 ranks still running after the 2 s grace period')" = 1
check "exit 3: no other rank named" test "$(lines "$ERR" '^sharcrun: rank')" = 1
check "exit 3: done within grace + kill time" elapsed_lt "$T0" 7

run -n 3 --grace 10 sh -c 'if [ $SHARC_RANK = 1 ]; then exit 3; fi
  sleep 0.5; echo "rank $SHARC_RANK leaving"; exit 5'
check "grace: survivors print their own message" test "$(lines "$OUT" 'leaving$')" = 2
check "grace: exit status is the first failure's" test "$RC" = 3
check "grace: later failures named too" \
  test "$(lines "$ERR" '^sharcrun: rank [02] (pid [0-9]*) exited with status 5$')" = 2

run -n 2 --grace 1 sh -c 'if [ $SHARC_RANK = 0 ]; then kill -KILL $$; fi; exec sleep 100'
check "SIGKILL: exit 137" test "$RC" = 137
check "SIGKILL: one naming line" \
  test "$(lines "$ERR" '^sharcrun: rank 0 (pid [0-9]*) killed by signal 9 (Killed)$')" = 1

run -n 2 --grace 0.2 sh -c 'trap "" TERM; if [ $SHARC_RANK = 0 ]; then exit 1; fi
  while :; do sleep 0.1; done'
check "escalation: SIGKILL after ignored SIGTERM" \
  test "$RC:$(lines "$ERR" '^sharcrun: 1 rank still running 3 s after SIGTERM; sending SIGKILL$')" = "1:1"

T0=$(now)
run -n 2 --timeout 1 sleep 100
check "timeout: exit 124 with a message" \
  test "$RC:$(lines "$ERR" '^sharcrun: job timed out after 1 s')" = "124:1"
check "timeout: prompt" elapsed_lt "$T0" 6

run -n 3 no-such-program-xyz arg
check "missing program: exit 127" test "$RC" = 127
check "missing program: clear message once" \
  test "$(cat "$ERR")" = "sharcrun: cannot run 'no-such-program-xyz': No such file or directory"

# ---- signal forwarding --------------------------------------------------
forward_test() { # SIGNAL: children trap it, print, and exit 0
  local sig=$1 i
  "$SR" -n 3 sh -c "trap 'echo got $sig \$SHARC_RANK; exit 0' $sig
    echo ready; while :; do sleep 0.05; done" >"$OUT" 2>"$ERR" </dev/null &
  local pid=$!
  for i in $(seq 100); do
    [ "$(grep -c ready "$OUT")" = 3 ] && break
    sleep 0.1
  done
  kill -"$sig" "$pid"
  # Watchdog that ends on its own instead of being killed.
  ( for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
    kill -KILL "$pid" ) &
  local dog=$!
  RC=0
  wait "$pid" || RC=$?
  wait "$dog"
  check "forward $sig: every rank got it" \
    test "$(grep -c "^\[\([012]\)\] got $sig \1$" "$OUT")" = 3
  check "forward $sig: sharcrun exits 0" test "$RC" = 0
}
forward_test TERM
forward_test INT
forward_test USR1

# Ranks that do not catch it die of it: one line from sharcrun, exit 128+15.
"$SR" -n 3 sh -c 'echo ready; exec sleep 100' >"$OUT" 2>"$ERR" </dev/null &
pid=$!
for i in $(seq 100); do [ "$(grep -c ready "$OUT")" = 3 ] && break; sleep 0.1; done
kill -TERM "$pid"
RC=0
wait "$pid" || RC=$?
check "forward TERM, not caught: exit 143" test "$RC" = 143
check "forward TERM, not caught: one line" \
  test "$(cat "$ERR")" = "sharcrun: got SIGTERM; forwarding it to 3 ranks"

# ---- usage --------------------------------------------------------------
for args in "" "-n" "-n 0" "-n 1025" "-n abc" "-n 2" "-n 2 --bogus prog" \
            "-n 2 --grace x true" "-n 2 --port 70000 true"; do
  # shellcheck disable=SC2086
  run $args
  check "usage '$args': exit 2 with usage line" \
    test "$RC:$(lines "$ERR" '^usage: sharcrun')" = "2:1"
done
run --help
check "--help: exit 0" test "$RC:$(lines "$OUT" '^usage: sharcrun')" = "0:1"
run --version
check "--version" test "$RC:$(lines "$OUT" '^sharcrun (sharc) [0-9]')" = "0:1"

# ---- --bind --------------------------------------------------------------
# Each rank prints the CPUs it may run on (Cpus_allowed_list). Run under
# taskset on two CPUs of this machine so that the plan is known; with fewer
# than two, only the refusals are checked (said below).
run --bind bogus true
check "--bind bogus: exit 2 naming the option" \
  test "$RC:$(lines "$ERR" "^sharcrun: --bind wants shared, auto, core or none, got 'bogus'")" = "2:1"
RC=0
SHARC_BIND=sideways timeout 60 "$SR" -n 1 true >"$OUT" 2>"$ERR" </dev/null || RC=$?
check "SHARC_BIND=sideways: exit 2 naming the variable" \
  test "$RC:$(lines "$ERR" "^sharcrun: SHARC_BIND wants shared, auto")" = "2:1"
mapfile -t cpus < <(taskset -cp $$ 2>/dev/null | sed 's/.*: //' | tr ',' '\n' |
  awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }')
if [ "${#cpus[@]}" -ge 2 ]; then
  two="${cpus[0]},${cpus[1]}"
  allowed='grep Cpus_allowed_list /proc/self/status | sed "s/.*:[[:space:]]*//"'
  both=$(taskset -c "$two" sh -c "$allowed") # the two, as the kernel lists them
  RC=0
  SHARC_DEBUG=INFO timeout 60 taskset -c "$two" "$SR" --bind auto -n 2 \
    sh -c "$allowed" \
    >"$OUT" 2>"$ERR" </dev/null || RC=$?
  check "--bind auto, 2 ranks on 2 CPUs: a CPU each" test "$RC:$(sort "$OUT")" = \
    "0:$(printf '[0] %s\n[1] %s' "${cpus[0]}" "${cpus[1]}")"
  check "--bind auto: SHARC_DEBUG=INFO names the CPUs" \
    test "$(lines "$ERR" "^sharcrun: rank [01] bound to CPU ${cpus[0]}$\\|^sharcrun: rank [01] bound to CPU ${cpus[1]}$")" = 2
  RC=0
  SHARC_BIND=auto timeout 60 taskset -c "$two" "$SR" -n 3 sh -c "$allowed" \
    >"$OUT" 2>"$ERR" </dev/null || RC=$?
  check "--bind auto, 3 ranks on 2 CPUs: unbound" test "$RC:$(sort -u "$OUT" | sed 's/^\[[0-9]\] //' | sort -u)" = "0:$both"
  RC=0
  timeout 60 taskset -c "$two" "$SR" --bind core -n 3 sh -c "$allowed" \
    >"$OUT" 2>"$ERR" </dev/null || RC=$?
  check "--bind core, 3 ranks on 2 CPUs: round robin" test "$RC:$(sort "$OUT")" = \
    "0:$(printf '[0] %s\n[1] %s\n[2] %s' "${cpus[0]}" "${cpus[1]}" "${cpus[0]}")"
  RC=0
  SHARC_BIND=core timeout 60 taskset -c "$two" "$SR" --bind none -n 2 \
    sh -c "$allowed" >"$OUT" 2>"$ERR" </dev/null || RC=$?
  check "--bind none (over SHARC_BIND=core): unbound" test "$RC:$(sort "$OUT")" = \
    "0:$(printf '[0] %s\n[1] %s' "$both" "$both")"
  RC=0
  timeout 60 taskset -c "$two" "$SR" -n 2 sh -c "$allowed" >"$OUT" 2>"$ERR" \
    </dev/null || RC=$?
  check "no --bind, 2 ranks on 2 CPUs: unbound" test "$RC:$(sort "$OUT")" = \
    "0:$(printf '[0] %s\n[1] %s' "$both" "$both")"
  RC=0
  timeout 60 taskset -c "$two" "$SR" -n 4 sh -c "$allowed" >"$OUT" 2>"$ERR" \
    </dev/null || RC=$?
  check "no --bind (shared), 4 ranks on 2 CPUs: round robin" \
    test "$RC:$(sort "$OUT")" = "0:$(printf '[0] %s\n[1] %s\n[2] %s\n[3] %s' \
      "${cpus[0]}" "${cpus[1]}" "${cpus[0]}" "${cpus[1]}")"
  RC=0
  timeout 60 taskset -c "$two" "$SR" --bind shared -n 5 sh -c "$allowed" \
    >"$OUT" 2>"$ERR" </dev/null || RC=$?
  check "--bind shared, 5 ranks on 2 CPUs: unbound" \
    test "$RC:$(sort -u "$OUT" | sed 's/^\[[0-9]\] //' | sort -u)" = "0:$both"
else
  echo "sharcrun_test: --bind placement not checked: this process may run on ${#cpus[@]} CPU(s), it needs 2"
fi

echo "sharcrun_test: $passed passed, $failed failed"
[ "$failed" = 0 ]

#!/usr/bin/env bash
# timeout_test.sh - init failures: a missing rank times out naming it; a
# misconfigured or absent launcher environment fails at once naming the
# variable.
#
#   timeout_test.sh INIT_ONLY_PROGRAM [SHARCRUN]
#
# Each case runs init_only with a clean environment (env -i, keeping PATH,
# HOME, TMPDIR, LD_LIBRARY_PATH and the sanitizer options):
#   - rank 0 of 2 alone, SHARC_TIMEOUT=3: SHARC_ERR_TIMEOUT naming rank 1,
#     after 2.5 to 8 s;
#   - SHARC_RANK=abc, SHARC_RANK=2 of 2, SHARC_ADDR without a port: fails at
#     once with SHARC_ERR_INVALID_ARG naming the variable;
#   - no launcher variables at all: fails at once mentioning SHARC_RANK or
#     sharcrun;
#   - with SHARCRUN: `sharcrun -n 3 init_only --allreduce` succeeds.
set -u
if [ $# -lt 1 ]; then
  echo "usage: $0 INIT_ONLY_PROGRAM [SHARCRUN]" >&2
  exit 2
fi
prog=$1 sharcrun=${2:-}
pass=0 failed=0
check() { # check STATUS DESCRIPTION: STATUS 0 passes
  if [ "$1" -eq 0 ]; then pass=$((pass + 1)); else
    failed=$((failed + 1))
    echo "timeout_test FAIL: $2"
  fi
}

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null) ||
  port=$((20000 + RANDOM % 20000))
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
keep=("PATH=$PATH")
for v in HOME TMPDIR LD_LIBRARY_PATH ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do
  [ -n "${!v+x}" ] && keep+=("$v=${!v}")
done

out= rc=0 ms=0
run() { # run VAR=VALUE...: runs prog in a clean environment
  local start end
  start=$(date +%s%N)
  out=$(env -i "${keep[@]}" "$@" timeout 60 "$prog" 2>&1)
  rc=$?
  end=$(date +%s%N)
  ms=$(((end - start) / 1000000))
  printf '%s\n(exit %d after %d ms)\n' "$out" "$rc" "$ms"
}
fails_naming() { # fails_naming WHAT REGEX: rc 2, INVALID_ARG, REGEX, quick
  [ $rc -eq 2 ]
  check $? "$1: exit status $rc, expected 2"
  grep -q "init failed: SHARC_ERR_INVALID_ARG" <<<"$out"
  check $? "$1: status is not SHARC_ERR_INVALID_ARG"
  grep -Eq "init failed: .*($2)" <<<"$out"
  check $? "$1: message does not name $2"
  [ $ms -lt 10000 ]
  check $? "$1: took $ms ms, expected an immediate failure"
}

echo "== rank 0 of 2 alone, SHARC_TIMEOUT=3"
run SHARC_RANK=0 SHARC_WORLD_SIZE=2 SHARC_LOCAL_RANK=0 SHARC_LOCAL_SIZE=2 \
  SHARC_ADDR="127.0.0.1:$port" SHARC_TOKEN="$token" SHARC_TIMEOUT=3
[ $rc -eq 2 ]
check $? "missing rank: exit status $rc, expected 2"
grep -q "init failed: SHARC_ERR_TIMEOUT" <<<"$out"
check $? "missing rank: status is not SHARC_ERR_TIMEOUT"
grep -Eq "init failed: .*rank 1([^0-9]|\$)" <<<"$out"
check $? "missing rank: message does not name rank 1"
[ $ms -ge 2500 ] && [ $ms -le 8000 ]
check $? "missing rank: failed after $ms ms, expected 3 s (2.5 to 8 s)"

echo "== SHARC_RANK=abc"
run SHARC_RANK=abc SHARC_WORLD_SIZE=2 SHARC_ADDR="127.0.0.1:$port" SHARC_TOKEN="$token" SHARC_TIMEOUT=30
fails_naming "SHARC_RANK=abc" "SHARC_RANK"

echo "== SHARC_RANK=2 of SHARC_WORLD_SIZE=2"
run SHARC_RANK=2 SHARC_WORLD_SIZE=2 SHARC_ADDR="127.0.0.1:$port" SHARC_TOKEN="$token" SHARC_TIMEOUT=30
fails_naming "SHARC_RANK=2 of 2" "SHARC_RANK|SHARC_WORLD_SIZE"

echo "== SHARC_ADDR without a port"
run SHARC_RANK=0 SHARC_WORLD_SIZE=2 SHARC_ADDR=127.0.0.1 SHARC_TOKEN="$token" SHARC_TIMEOUT=30
fails_naming "SHARC_ADDR=127.0.0.1" "SHARC_ADDR"

echo "== no launcher environment"
run SHARC_TIMEOUT=30
[ $rc -ne 0 ]
check $? "no launcher environment: init succeeded"
grep -Eq "init failed: .*(SHARC_RANK|sharcrun)" <<<"$out"
check $? "no launcher environment: message mentions neither SHARC_RANK nor sharcrun"
[ $ms -lt 10000 ]
check $? "no launcher environment: took $ms ms, expected an immediate failure"

if [ -n "$sharcrun" ]; then
  echo "== sharcrun -n 3 init_only --allreduce"
  out=$(SHARC_TIMEOUT=30 timeout 60 "$sharcrun" -n 3 "$prog" --allreduce 2>&1)
  rc=$?
  printf '%s\n(exit %d)\n' "$out" "$rc"
  [ $rc -eq 0 ] && [ "$(grep -c "init_only: rank [0-2] of 3 ok" <<<"$out")" -eq 3 ]
  check $? "sharcrun -n 3 init_only: exit $rc, expected 0 and three ok lines"
fi

echo "timeout_test: $pass passed, $failed failed"
[ $failed -eq 0 ]

#!/usr/bin/env bash
# delay_test.sh - hosts_test.sh --delay really delays, and only with it.
#
#   delay_test.sh WIRE_DELAY
#
# On 2 namespace hosts (ab) it measures TCP round trips between them with
# tests/mp/link_probe.py and checks:
#   1. --delay 1000: every round trip takes at least 2 x 1000 us (one hold
#      each way) and the median less than 2 x 1000 us + 20 ms;
#   2. --delay 200 with --qdisc "tbf rate 500mbit ...": at least 400 us,
#      and 32 MiB take no less than the rate allows (tbf on the sender's
#      link, before the delay, with the large MTU of the routed hosts);
#   3. without --delay (the bridge): the fastest round trip is under 1000 us,
#      the link as fast as before;
#   4. teardown: after each job no namespace, tun or wire_delay is left;
#      a hosts_test.sh killed with SIGKILL leaves a wire_delay that exits by
#      itself (it watches its owner) and namespaces the next run removes.
# Lower bounds are what a delay guarantees; the upper ones are loose (20 ms,
# 1 ms) so that a loaded machine does not fail them. Exit 0 passed, 1
# failed, 77 skipped (not root, no namespaces, no /dev/net/tun).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
wd=${1:?usage: delay_test.sh WIRE_DELAY}
probe=$here/link_probe.py
# shellcheck source-path=SCRIPTDIR source=hosts_test.sh
. "$here/hosts_test.sh"
HOSTS_WIRE_DELAY=$wd
failed=0
fail() {
  echo "delay_test FAIL: $*"
  failed=1
}
command -v python3 >/dev/null || { echo "SKIP: python3 runs the probe"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hosts_test.$$.delay.XXXXXX") || exit 2
HOSTS_TMP=$tmp
trap 'rm -rf "$HOSTS_TMP"' EXIT

# Value after word $2 on rank 1's line that starts with $1 (rtt_us min,
# rtt_us median); with no $2, the first value (throughput_gbit).
probe_value() {
  awk -v k="$1" -v w="${2:-$1}" '$1 == k {
    for (i = 1; i < NF; i++) if ($i == w) { print $(i + 1); exit } }' "$tmp/1.log"
}

# One probe job on hosts ab: up (SPEC, DELAY), run, down; checks teardown.
run_probe() {
  local spec=$1 delay=$2 rc tag
  shift 2
  hosts_up ab "$spec" "$delay"
  rc=$?
  [ $rc -eq 0 ] || exit $rc
  trap 'hosts_down; rm -rf "$HOSTS_TMP"' EXIT
  tag=$HOSTS_TAG
  local wpid=$HOSTS_WD_PID
  hosts_job "$tmp" 60 python3 "$probe" "$@"
  rc=$?
  sed 's/^/[1] /' "$tmp/1.log"
  [ $rc -eq 0 ] || { fail "probe job failed (status $rc)"; sed 's/^/[0] /' "$tmp/0.log"; }
  hosts_down
  if ip netns list | grep -q "^$tag-"; then
    fail "namespaces of $tag left after hosts_down"
  fi
  if [ -n "$wpid" ] && kill -0 "$wpid" 2>/dev/null; then
    fail "wire_delay (pid $wpid) still runs after hosts_down"
  fi
  return 0
}

# Is $1 >= $2 (decimals)?
ge() { python3 -c "import sys; sys.exit(0 if float('$1') >= float('$2') else 1)"; }

echo "== 1. --delay 1000"
run_probe "" 1000 --rounds 30
min=$(probe_value rtt_us min) med=$(probe_value rtt_us median)
if [ -z "$min" ]; then
  fail "no round trips measured with --delay 1000"
else
  ge "$min" 2000 || fail "--delay 1000: fastest round trip $min us < 2 x 1000 us"
  ge 22000 "$med" || fail "--delay 1000: median round trip $med us > 2 x 1000 us + 20 ms"
  echo "delay 1000 us: round trip min $min us, median $med us (>= 2000 us)"
fi

echo "== 2. --delay 200 --qdisc 'tbf rate 500mbit burst 256kb latency 50ms'"
run_probe "tbf rate 500mbit burst 256kb latency 50ms" 200 --rounds 30 --bytes 32M
min=$(probe_value rtt_us min) gbit=$(probe_value throughput_gbit)
if [ -z "$min" ] || [ -z "$gbit" ]; then
  fail "no round trips or no transfer with --delay 200 and tbf"
else
  ge "$min" 400 || fail "--delay 200: fastest round trip $min us < 400 us"
  # 256 KiB of burst on 32 MiB adds under 1 %
  ge 0.55 "$gbit" || fail "tbf 500mbit with --delay: $gbit Gbit/s, more than the rate"
  echo "delay 200 us, tbf 500mbit: round trip min $min us, $gbit Gbit/s"
fi

echo "== 3. no --delay (bridge)"
run_probe "" "" --rounds 30
min=$(probe_value rtt_us min)
if [ -z "$min" ]; then
  fail "no round trips measured without --delay"
else
  ge 1000 "$min" || fail "without --delay: fastest round trip $min us >= 1000 us"
  echo "no delay: round trip min $min us (< 1000 us)"
fi

echo "== 4. a hosts_test.sh killed with SIGKILL"
SHARC_WIRE_DELAY=$wd bash "$here/hosts_test.sh" --delay 100 --expect "" \
  --timeout 60 ab sleep 30 >"$tmp/killed.log" 2>&1 &
victim=$!
wpid="" i=0
while [ -z "$wpid" ] && [ $i -lt 500 ]; do
  sleep 0.02
  i=$((i + 1))
  wpid=$(ip netns pids "$HOSTS_PREFIX-$victim-br" 2>/dev/null | head -1)
done
if [ -z "$wpid" ]; then
  fail "the hosts_test.sh to kill never started wire_delay:"
  cat "$tmp/killed.log"
  kill -KILL "$victim" 2>/dev/null
else
  kill -KILL "$victim"
  wait "$victim" 2>/dev/null
  for ((i = 0; i < 250; i++)); do
    kill -0 "$wpid" 2>/dev/null || break
    sleep 0.02
  done
  if kill -0 "$wpid" 2>/dev/null; then
    fail "wire_delay (pid $wpid) outlived its killed owner (pid $victim) by 5 s"
  else
    echo "wire_delay (pid $wpid) exited with its killed owner (pid $victim)"
  fi
fi
hosts_reap_stale
if ip netns list | grep -q "^$HOSTS_PREFIX-$victim-"; then
  fail "namespaces of the killed run (pid $victim) left after hosts_reap_stale"
  ip netns list | grep "^$HOSTS_PREFIX-$victim-"
else
  echo "its namespaces were removed by the next run's reaping"
fi

if [ $failed -eq 0 ]; then
  echo "delay_test: passed"
  exit 0
fi
echo "delay_test: FAILED"
exit 1

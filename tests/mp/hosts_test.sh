#!/usr/bin/env bash
# hosts_test.sh - several "hosts" on one machine, for multi-host tests and
# benchmarks. Each host is a network namespace with its own address
# (10.77.0.<i+1>/24 on its eth0, i = 0 for host a); a veth pair joins it to
# a bridge that lives in a namespace of its own, so nothing is added to the
# machine's own network. sharc counts ranks in one namespace as one host
# (the host identity includes the network namespace): they use shared
# memory, ranks on different hosts use TCP across the bridge.
#
#   hosts_test.sh [--timeout S] [--qdisc SPEC] [--expect TEXT] [--logs DIR]
#                 MAP PROGRAM [ARGS...]
#
# MAP has one letter (a-h) per rank naming its host: aabb is 2 hosts x 2
# ranks, aaabbb 2 x 3, abaa 3 + 1 with the ranks interleaved, abcd 4 hosts
# of one rank. Every rank gets SHARC_RANK, SHARC_WORLD_SIZE, SHARC_ADDR
# (rank 0's host, port 29517), a fresh SHARC_TOKEN, SHARC_TIMEOUT (60
# unless set) and the rest of the caller's environment (SHARC_ALGO, ...),
# and runs under `timeout S` (default 240). --qdisc adds a root qdisc to
# each host's link (`tc qdisc add dev eth0 root SPEC`, for example
# "netem rate 10gbit delay 50us"). The job passes when every rank exits 0,
# rank 0 printed TEXT (default " 0 failed"; --expect "" skips that) and no
# rank's log shows a failure (FAIL, "N failed" with N > 0, a sanitizer
# report). Rank logs are printed with a "[rank] " prefix and kept in DIR
# with --logs. Exit status: 0 passed, 1 failed, 2 usage or setup error, 77
# skipped (not root, no network namespaces, veth or bridge; or every rank
# exited 77), 124 timed out.
#
# Sourced (`. hosts_test.sh`), it only defines functions, for scripts that
# run several jobs on one set of hosts (bench/netem_bench.sh):
#   hosts_up MAP [SPEC]    create the hosts of MAP (with SPEC as above) and
#                          install the EXIT/INT/TERM/HUP traps that tear
#                          them down; returns 77 (with a line why) when
#                          hosts cannot be made here, 2 on other errors
#   hosts_job DIR SECONDS PROGRAM [ARGS...]
#                          one job on those hosts, rank r's output in
#                          DIR/r.log; returns 0 when every rank exited 0,
#                          else the first failing rank's status (124: timed
#                          out); HOSTS_STATUS holds every rank's status
#   hosts_down             kill leftover ranks, delete the namespaces (with
#                          their veths and bridge) and check none is left
#
# Names carry the shell's pid (sharc-hosts-PID-a, ...-br), so parallel runs
# do not collide; namespaces (and the log folder) left by a run that was
# killed with SIGKILL (its pid is gone) are removed by the next run.
set -u

HOSTS_PREFIX=sharc-hosts
HOSTS_TAG=""
HOSTS_MAP=""
HOSTS_NS=()
HOSTS_PIDS=()
HOSTS_STATUS=()
HOSTS_PORT=29517
HOSTS_TMP=""

# Host index of letter $1 (a = 0).
hosts_index() {
  local l=$1 abc=abcdefgh
  local pre=${abc%%"$l"*}
  echo "${#pre}"
}

# Letters of MAP in order of first appearance.
hosts_letters() {
  local map=$1 out="" i l
  for ((i = 0; i < ${#map}; i++)); do
    l=${map:i:1}
    [[ $out == *"$l"* ]] || out+=$l
  done
  echo "$out"
}

# Namespaces (and log folders) of earlier runs whose shell is gone (killed
# before its trap ran).
hosts_reap_stale() {
  local ns pid d
  for d in "${TMPDIR:-/tmp}"/hosts_test.[0-9]*.*; do
    [[ $d =~ /hosts_test\.([0-9]+)\.[^/]+$ ]] || continue
    [ -d "/proc/${BASH_REMATCH[1]}" ] || rm -rf "$d"
  done
  while read -r ns _; do
    [[ $ns =~ ^$HOSTS_PREFIX-([0-9]+)- ]] || continue
    pid=${BASH_REMATCH[1]}
    [ -d "/proc/$pid" ] && continue
    echo "hosts: removing namespace $ns left by a run that is gone (pid $pid)"
    hosts_kill_in "$ns"
    ip netns del "$ns" 2>/dev/null
  done < <(ip netns list 2>/dev/null)
}

# SIGKILL every process still inside namespace $1 (only ranks started here).
hosts_kill_in() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null) || return 0
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086 # one pid per word
  kill -KILL $pids 2>/dev/null
  return 0
}

hosts_down() {
  local p ns left
  for p in "${HOSTS_PIDS[@]}"; do # `timeout` passes TERM on to its rank
    kill -TERM "$p" 2>/dev/null
  done
  for p in "${HOSTS_PIDS[@]}"; do
    wait "$p" 2>/dev/null
  done
  HOSTS_PIDS=()
  for ns in "${HOSTS_NS[@]}"; do
    hosts_kill_in "$ns"
    ip netns del "$ns" 2>/dev/null
  done
  if [ -n "$HOSTS_TAG" ]; then
    left=$(ip netns list 2>/dev/null | grep -c "^$HOSTS_TAG-")
    if [ "$left" -ne 0 ]; then
      echo "hosts: $left namespace(s) $HOSTS_TAG-* could not be removed:"
      ip netns list | grep "^$HOSTS_TAG-"
    fi
  fi
  HOSTS_NS=()
  HOSTS_TAG=""
}

hosts_skip() {
  echo "SKIP: $*"
  hosts_down
  return 77
}

hosts_up() {
  local map=$1 spec=${2:-} letters l i ns br err
  if ! [[ $map =~ ^[a-h]+$ ]]; then
    echo "hosts: MAP wants one letter a-h per rank (aabb: 2 hosts x 2 ranks), got '$map'" >&2
    return 2
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: making hosts needs root (network namespaces, veth, bridge)"
    return 77
  fi
  command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; return 77; }
  command -v timeout >/dev/null || { echo "SKIP: coreutils timeout is missing"; return 77; }
  if [ -n "$spec" ] && ! command -v tc >/dev/null; then
    echo "hosts: --qdisc needs tc (iproute2)" >&2
    return 2
  fi
  trap hosts_down EXIT
  trap 'exit 129' HUP
  trap 'exit 130' INT
  trap 'exit 143' TERM
  hosts_reap_stale
  HOSTS_MAP=$map
  HOSTS_TAG=$HOSTS_PREFIX-$$
  br=$HOSTS_TAG-br
  if ! err=$(ip netns add "$br" 2>&1); then
    hosts_skip "cannot create network namespaces here: $err"
    return
  fi
  HOSTS_NS+=("$br")
  if ! err=$(ip -n "$br" link add br0 type bridge 2>&1); then
    hosts_skip "cannot create a bridge: $err"
    return
  fi
  if ! { ip -n "$br" link set lo up && ip -n "$br" link set br0 up; }; then
    hosts_down
    return 2
  fi
  letters=$(hosts_letters "$map")
  for ((i = 0; i < ${#letters}; i++)); do
    l=${letters:i:1}
    ns=$HOSTS_TAG-$l
    if ! err=$(ip netns add "$ns" 2>&1); then
      hosts_skip "cannot create network namespace $ns: $err"
      return
    fi
    HOSTS_NS+=("$ns")
    if ! err=$(ip -n "$br" link add "h$l" type veth peer name eth0 netns "$ns" 2>&1); then
      hosts_skip "cannot create a veth pair: $err"
      return
    fi
    if ! { ip -n "$br" link set "h$l" master br0 &&
      ip -n "$br" link set "h$l" up &&
      ip -n "$ns" addr add "10.77.0.$(($(hosts_index "$l") + 1))/24" dev eth0 &&
      ip -n "$ns" link set lo up &&
      ip -n "$ns" link set eth0 up; }; then
      echo "hosts: configuring host $l ($ns) failed" >&2
      hosts_down
      return 2
    fi
    # shellcheck disable=SC2086 # SPEC is a list of tc words
    if [ -n "$spec" ] && ! err=$(ip netns exec "$ns" tc qdisc add dev eth0 root $spec 2>&1); then
      echo "hosts: tc qdisc add dev eth0 root $spec: $err" >&2
      hosts_down
      return 2
    fi
  done
  return 0
}

hosts_job() {
  local dir=$1 secs=$2
  shift 2
  local map=$HOSTS_MAP n=${#HOSTS_MAP} r l token addr st rc=0
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  addr=10.77.0.$(($(hosts_index "${map:0:1}") + 1)):$HOSTS_PORT
  HOSTS_PIDS=()
  HOSTS_STATUS=()
  for ((r = 0; r < n; r++)); do
    l=${map:r:1}
    timeout -k 10 "$secs" ip netns exec "$HOSTS_TAG-$l" env SHARC_RANK=$r \
      SHARC_WORLD_SIZE="$n" SHARC_ADDR="$addr" SHARC_TOKEN="$token" \
      SHARC_TIMEOUT="${SHARC_TIMEOUT:-60}" "$@" >"$dir/$r.log" 2>&1 &
    HOSTS_PIDS+=($!)
  done
  for ((r = 0; r < n; r++)); do
    wait "${HOSTS_PIDS[r]}"
    st=$?
    HOSTS_STATUS+=("$st")
    [ "$rc" -eq 0 ] && rc=$st
  done
  HOSTS_PIDS=()
  return "$rc"
}

# Failures a rank may print even when it exits 0.
HOSTS_FAIL_RE='FAIL|(^|[^0-9])[1-9][0-9]* failed|Sanitizer|runtime error:'

hosts_main() {
  local secs=240 spec="" expect=" 0 failed" logs="" dir map n r st failed=0
  while [ $# -gt 0 ]; do
    case $1 in
      --timeout) secs=${2:?--timeout wants seconds}; shift 2 ;;
      --qdisc) spec=${2:?--qdisc wants a tc qdisc}; shift 2 ;;
      --expect) expect=${2?--expect wants a text}; shift 2 ;;
      --logs) logs=${2:?--logs wants a folder}; shift 2 ;;
      --) shift; break ;;
      -*) echo "hosts_test: unknown option $1" >&2; return 2 ;;
      *) break ;;
    esac
  done
  if [ $# -lt 2 ]; then
    echo "usage: hosts_test.sh [--timeout S] [--qdisc SPEC] [--expect TEXT] [--logs DIR] MAP PROGRAM [ARGS...]" >&2
    return 2
  fi
  map=$1
  shift
  n=${#map}
  hosts_up "$map" "$spec" || return
  if [ -n "$logs" ]; then
    dir=$logs
    mkdir -p "$dir" || return 2
  else
    dir=$(mktemp -d "${TMPDIR:-/tmp}/hosts_test.$$.XXXXXX") || return 2
    HOSTS_TMP=$dir
    trap 'hosts_down; rm -rf "$HOSTS_TMP"' EXIT
  fi
  local t0=$SECONDS
  hosts_job "$dir" "$secs" "$@"
  local elapsed=$((SECONDS - t0))
  for ((r = 0; r < n; r++)); do
    sed "s/^/[$r] /" "$dir/$r.log"
  done
  # every rank skipped (77: a program that needs what these hosts lack,
  # such as a CUDA device): the job skips, its ranks said why
  local skips=0
  for st in "${HOSTS_STATUS[@]}"; do
    [ "$st" -eq 77 ] && skips=$((skips + 1))
  done
  if [ "$skips" -eq "$n" ]; then
    echo "hosts_test: $map: every rank skipped (exit 77)"
    return 77
  fi
  for ((r = 0; r < n; r++)); do
    st=${HOSTS_STATUS[r]}
    if [ "$st" -eq 124 ] || [ "$st" -eq 137 ]; then
      echo "hosts_test FAIL: rank $r (host ${map:r:1}) timed out after $secs s (status $st)"
      failed=1
    elif [ "$st" -ne 0 ]; then
      echo "hosts_test FAIL: rank $r (host ${map:r:1}) exited with status $st"
      failed=1
    fi
    if grep -Eq "$HOSTS_FAIL_RE" "$dir/$r.log"; then
      echo "hosts_test FAIL: rank $r's log reports a failure:"
      grep -E "$HOSTS_FAIL_RE" "$dir/$r.log" | head -5 | sed "s/^/  [$r] /"
      failed=1
    fi
  done
  if [ -n "$expect" ] && ! grep -qF -- "$expect" "$dir/0.log"; then
    echo "hosts_test FAIL: rank 0 did not print '$expect'"
    failed=1
  fi
  local hosts
  hosts=$(hosts_letters "$map")
  if [ $failed -eq 0 ]; then
    echo "hosts_test: $map ($n ranks on ${#hosts} hosts, SHARC_ALGO=${SHARC_ALGO:-auto}) passed in $elapsed s"
    return 0
  fi
  echo "hosts_test: $map ($n ranks on ${#hosts} hosts, SHARC_ALGO=${SHARC_ALGO:-auto}) FAILED after $elapsed s"
  for st in "${HOSTS_STATUS[@]}"; do
    [ "$st" -eq 124 ] && return 124
  done
  return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  hosts_main "$@"
  exit $?
fi

#!/usr/bin/env bash
# hosts_test.sh - several "hosts" on one machine, for multi-host tests and
# benchmarks. Each host is a network namespace with its own address
# (10.77.0.<i+1>/24 on its eth0, i = 0 for host a); a veth pair joins it to
# a bridge that lives in a namespace of its own, so nothing is added to the
# machine's own network. sharc counts ranks in one namespace as one host
# (the host identity includes the network namespace): they use shared
# memory, ranks on different hosts use TCP across the bridge.
#
#   hosts_test.sh [--timeout S] [--qdisc SPEC] [--delay US] [--expect TEXT]
#                 [--logs DIR] MAP PROGRAM [ARGS...]
#
# MAP has one letter (a-h) per rank naming its host: aabb is 2 hosts x 2
# ranks, aaabbb 2 x 3, abaa 3 + 1 with the ranks interleaved, abcd 4 hosts
# of one rank. Every rank gets SHARC_RANK, SHARC_WORLD_SIZE, SHARC_ADDR
# (rank 0's host, port 29517), a fresh SHARC_TOKEN, SHARC_TIMEOUT (60
# unless set) and the rest of the caller's environment (SHARC_ALGO, ...),
# and runs under `timeout S` (default 240). --qdisc adds a root qdisc to
# each host's link (`tc qdisc add dev eth0 root SPEC`, for example
# "netem rate 10gbit delay 50us" where the kernel has sch_netem).
# --delay US (opt-in; without it nothing here changes) holds every packet
# between hosts for US microseconds (one way; fractions allowed), for
# kernels where tc cannot (no sch_netem, fq or etf): the middle namespace
# then routes instead of bridging (one veth per host, MTU 65000 on both
# ends, proxy ARP), and policy routing sends every packet a host puts on
# its link into a tun device there, where tests/mp/wire_delay holds it for
# US and writes it back to be delivered (one FIFO: no reordering). A round
# trip between two hosts takes 2 x US longer; --delay 0 routes through
# wire_delay without holding (its cost alone: a TCP round trip of 35 us
# instead of 18; at --delay 200, 435-480 us). The helper is
# $SHARC_WIRE_DELAY, else wire_delay in PROGRAM's build tree (tests/mp/) or
# in build/ of this checkout. With --qdisc the rate limit applies on the
# sender's eth0 before the delay: --qdisc "tbf rate 1gbit burst 256kb
# latency 50ms" --delay 200 is a 1 Gbit/s link with 200 us each way (tbf's
# burst must hold a 64 KB packet: at least 64kb). One thread carries the
# packets of all links: 7-16 Gbit/s in all on 2 cores (wire_delay.c).
#
# The job passes when every rank exits 0, rank 0 printed TEXT (default
# " 0 failed"; --expect "" skips that) and no rank's log shows a failure
# (FAIL, "N failed" with N > 0, a sanitizer report). Rank logs are printed
# with a "[rank] " prefix and kept in DIR with --logs. Exit status: 0
# passed, 1 failed, 2 usage or setup error, 77 skipped (not root, no
# network namespaces, veth or bridge, with --delay no tun device; or every
# rank exited 77), 124 timed out.
#
# Sourced (`. hosts_test.sh`), it only defines functions, for scripts that
# run several jobs on one set of hosts (bench/netem_bench.sh):
#   hosts_up MAP [SPEC [US]]
#                          create the hosts of MAP (with SPEC and a --delay
#                          of US as above; HOSTS_WIRE_DELAY names the
#                          helper) and install the EXIT/INT/TERM/HUP traps
#                          that tear them down; returns 77 (with a line
#                          why) when hosts cannot be made here, 2 on other
#                          errors
#   hosts_job DIR SECONDS PROGRAM [ARGS...]
#                          one job on those hosts, rank r's output in
#                          DIR/r.log; returns 0 when every rank exited 0,
#                          else the first failing rank's status (124: timed
#                          out); HOSTS_STATUS holds every rank's status
#   hosts_down             kill leftover ranks, stop wire_delay (printing
#                          its statistics), delete the namespaces (with
#                          their veths, bridge or tun) and check none is left
#
# Names carry the shell's pid (sharc-hosts-PID-a, ...-br), so parallel runs
# do not collide; namespaces (and the log folder) left by a run that was
# killed with SIGKILL (its pid is gone) are removed by the next run.
# wire_delay exits by itself when the shell that started it exits (--owner),
# and the next run stops one that is left all the same.
set -u

HOSTS_PREFIX=sharc-hosts
HOSTS_TAG=""
HOSTS_MAP=""
HOSTS_NS=()
HOSTS_PIDS=()
HOSTS_STATUS=()
HOSTS_PORT=29517
HOSTS_TMP=""
HOSTS_WIRE_DELAY=${SHARC_WIRE_DELAY:-${HOSTS_WIRE_DELAY:-}}
HOSTS_WD_PID=""
HOSTS_WD_LOG=""
HOSTS_MTU=65000 # --delay: few large packets, so that one thread keeps up

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
  local f cmd owner # a wire_delay whose owner is gone (see hosts_wire_up)
  for f in /proc/[0-9]*/cmdline; do
    mapfile -d "" -t cmd 2>/dev/null <"$f" || continue
    [[ ${cmd[0]:-} == *wire_delay && ${cmd[5]:-} == --owner ]] || continue
    owner=${cmd[6]:-}
    if ! [[ $owner =~ ^[0-9]+$ ]] || [ -d "/proc/$owner" ]; then
      continue
    fi
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    echo "hosts: stopping wire_delay (pid $pid) left by a run that is gone (pid $owner)"
    kill -KILL "$pid" 2>/dev/null
  done
}

# The wire_delay helper for PROGRAM $1: in its build tree (PROGRAM is
# BUILD/tests/mp/coll_check, BUILD/bench/sharc-bench, ...), else in build/
# of this checkout; empty when there is none.
hosts_find_wire_delay() {
  local d c here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  d=$(dirname "$1")
  for c in "$d/wire_delay" "$d/../tests/mp/wire_delay" \
    "$d/../../tests/mp/wire_delay" "$here/../../build/tests/mp/wire_delay"; do
    [[ $1 == */* || $c == "$here"/* ]] || continue
    if [ -x "$c" ] && [ -f "$c" ]; then
      echo "$c"
      return
    fi
  done
}

# Bytes in tbf's bucket of qdisc SPEC $1 (burst, buffer or maxburst, in
# tc's units); empty when SPEC is not tbf or the size is not understood.
hosts_tbf_bytes() {
  local re='^tbf .*(burst|buffer|maxburst) ([0-9]+)([a-z]*)( |$)' n u
  [[ $1 =~ $re ]] || return 0
  n=${BASH_REMATCH[2]} u=${BASH_REMATCH[3]}
  case $u in
    "" | b) ;;
    k | kb) n=$((n << 10)) ;;
    m | mb) n=$((n << 20)) ;;
    g | gb) n=$((n << 30)) ;;
    bit) n=$((n / 8)) ;;
    kbit) n=$(((n << 10) / 8)) ;;
    mbit) n=$(((n << 20) / 8)) ;;
    *) return 0 ;;
  esac
  echo "$n"
}

# Writes sysctls KEY=VALUE (net.ipv4.conf.X.rp_filter=0) inside namespace $1.
hosts_sysctl() {
  local ns=$1 kv key script=""
  shift
  for kv in "$@"; do
    key=${kv%%=*}
    script+="echo ${kv#*=} >/proc/sys/${key//.//} && "
  done
  ip netns exec "$ns" sh -c "${script}true"
}

# --delay: namespace $1 routes between the hosts' veths (made by hosts_up)
# through tun wd0, where wire_delay holds every packet $2 us. Packets from a
# host's veth (iif hX) take table 100, whose one route is wd0; what
# wire_delay writes back comes in on wd0 and takes the main table, which has
# a /32 route to each host's veth. The hosts keep their /24 and ask by ARP
# for each other; the router answers for them (proxy ARP, at once).
hosts_wire_up() {
  local br=$1 delay=$2 err i
  if ! err=$(ip -n "$br" tuntap add dev wd0 mode tun 2>&1); then
    echo "SKIP: cannot create a tun device for --delay: $err"
    return 77
  fi
  if ! { hosts_sysctl "$br" net.ipv4.conf.wd0.rp_filter=0 &&
    ip -n "$br" link set wd0 mtu "$HOSTS_MTU" up &&
    ip -n "$br" route add default dev wd0 table 100; }; then
    echo "hosts: configuring tun wd0 in $br failed" >&2
    return 2
  fi
  HOSTS_WD_LOG=$(mktemp "${TMPDIR:-/tmp}/hosts_test.$$.wire_delay.XXXXXX") || return 2
  # SCHED_FIFO: on time when the ranks keep both cores busy (where bulk
  # traffic had packets 250 us late on average, 70 us); it uses little CPU
  ip netns exec "$br" "$HOSTS_WIRE_DELAY" --dev wd0 --delay "$delay" \
    --owner $$ --fifo 1 >"$HOSTS_WD_LOG" 2>&1 &
  HOSTS_WD_PID=$!
  for ((i = 0; i < 500; i++)); do
    grep -q '^wire_delay: wd0 attached' "$HOSTS_WD_LOG" && return 0
    kill -0 "$HOSTS_WD_PID" 2>/dev/null || break
    sleep 0.01
  done
  echo "hosts: $HOSTS_WIRE_DELAY did not attach to tun wd0 in $br:" >&2
  sed 's/^/  /' "$HOSTS_WD_LOG" >&2
  return 2
}

# Stops wire_delay and prints what it said (its statistics).
hosts_wire_down() {
  local i
  if [ -n "$HOSTS_WD_PID" ]; then
    kill -TERM "$HOSTS_WD_PID" 2>/dev/null
    for ((i = 0; i < 200; i++)); do
      kill -0 "$HOSTS_WD_PID" 2>/dev/null || break
      sleep 0.01
    done
    kill -KILL "$HOSTS_WD_PID" 2>/dev/null
    wait "$HOSTS_WD_PID" 2>/dev/null
    HOSTS_WD_PID=""
  fi
  if [ -f "$HOSTS_WD_LOG" ]; then
    grep -v '^wire_delay: wd0 attached' "$HOSTS_WD_LOG" | sed 's/^/hosts: /'
    rm -f "$HOSTS_WD_LOG"
    HOSTS_WD_LOG=""
  fi
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
  hosts_wire_down
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
  local map=$1 spec=${2:-} delay=${3:-} letters l i ns br err addr rc
  if ! [[ $map =~ ^[a-h]+$ ]]; then
    echo "hosts: MAP wants one letter a-h per rank (aabb: 2 hosts x 2 ranks), got '$map'" >&2
    return 2
  fi
  if [ -n "$delay" ] && ! [[ $delay =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
    echo "hosts: --delay wants microseconds (200, 50.5), got '$delay'" >&2
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
  if [ -n "$delay" ]; then
    if [ ! -c /dev/net/tun ]; then
      echo "SKIP: --delay needs a tun device and /dev/net/tun is missing (kernel without CONFIG_TUN, or a container without the device)"
      return 77
    fi
    local bucket
    bucket=$(hosts_tbf_bytes "$spec")
    if [ -n "$bucket" ] && [ "$bucket" -lt $((HOSTS_MTU + 14)) ]; then
      echo "hosts: with --delay the links' MTU is $HOSTS_MTU, and tbf drops every packet larger than its bucket ($bucket bytes in '$spec'): use burst 64kb or more" >&2
      return 2
    fi
    if [ ! -x "$HOSTS_WIRE_DELAY" ]; then
      echo "hosts: --delay needs the wire_delay helper (BUILD/tests/mp/wire_delay, made with the tests); none found${HOSTS_WIRE_DELAY:+ at $HOSTS_WIRE_DELAY}: set SHARC_WIRE_DELAY=PATH" >&2
      return 2
    fi
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
  if [ -n "$delay" ]; then # a router
    if ! { ip -n "$br" link set lo up &&
      hosts_sysctl "$br" net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
        net.ipv4.conf.default.rp_filter=0; }; then
      hosts_down
      return 2
    fi
  elif ! err=$(ip -n "$br" link add br0 type bridge 2>&1); then
    hosts_skip "cannot create a bridge: $err"
    return
  elif ! { ip -n "$br" link set lo up && ip -n "$br" link set br0 up; }; then
    hosts_down
    return 2
  fi
  letters=$(hosts_letters "$map")
  for ((i = 0; i < ${#letters}; i++)); do
    l=${letters:i:1}
    ns=$HOSTS_TAG-$l
    addr=10.77.0.$(($(hosts_index "$l") + 1))
    if ! err=$(ip netns add "$ns" 2>&1); then
      hosts_skip "cannot create network namespace $ns: $err"
      return
    fi
    HOSTS_NS+=("$ns")
    if [ -n "$delay" ]; then
      err=$(ip -n "$br" link add "h$l" mtu "$HOSTS_MTU" type veth peer name eth0 \
        mtu "$HOSTS_MTU" netns "$ns" 2>&1)
    else
      err=$(ip -n "$br" link add "h$l" type veth peer name eth0 netns "$ns" 2>&1)
    fi
    # shellcheck disable=SC2181 # the status of the assignment above
    if [ $? -ne 0 ]; then
      hosts_skip "cannot create a veth pair: $err"
      return
    fi
    if [ -n "$delay" ]; then # proxy ARP at once, not after up to 0.8 s
      hosts_sysctl "$br" "net.ipv4.conf.h$l.proxy_arp=1" \
        "net.ipv4.neigh.h$l.proxy_delay=0" &&
        ip -n "$br" link set "h$l" up &&
        ip -n "$br" route add "$addr/32" dev "h$l" &&
        ip -n "$br" rule add iif "h$l" lookup 100
    else
      ip -n "$br" link set "h$l" master br0 &&
        ip -n "$br" link set "h$l" up
    fi
    rc=$?
    if ! { [ $rc -eq 0 ] &&
      ip -n "$ns" addr add "$addr/24" dev eth0 &&
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
  if [ -n "$delay" ]; then
    hosts_wire_up "$br" "$delay"
    rc=$?
    if [ $rc -ne 0 ]; then
      hosts_down
      return $rc
    fi
    echo "hosts: links routed through $HOSTS_WIRE_DELAY (MTU $HOSTS_MTU):"
    sed -n 's/^wire_delay: wd0 attached, /hosts:   /p' "$HOSTS_WD_LOG"
  fi
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
  local secs=240 spec="" delay="" expect=" 0 failed" logs="" dir map n r st failed=0
  while [ $# -gt 0 ]; do
    case $1 in
      --timeout) secs=${2:?--timeout wants seconds}; shift 2 ;;
      --qdisc) spec=${2:?--qdisc wants a tc qdisc}; shift 2 ;;
      --delay) delay=${2:?--delay wants microseconds}; shift 2 ;;
      --expect) expect=${2?--expect wants a text}; shift 2 ;;
      --logs) logs=${2:?--logs wants a folder}; shift 2 ;;
      --) shift; break ;;
      -*) echo "hosts_test: unknown option $1" >&2; return 2 ;;
      *) break ;;
    esac
  done
  if [ $# -lt 2 ]; then
    echo "usage: hosts_test.sh [--timeout S] [--qdisc SPEC] [--delay US] [--expect TEXT] [--logs DIR] MAP PROGRAM [ARGS...]" >&2
    return 2
  fi
  map=$1
  shift
  n=${#map}
  [ -n "$delay" ] && [ -z "$HOSTS_WIRE_DELAY" ] && HOSTS_WIRE_DELAY=$(hosts_find_wire_delay "$1")
  hosts_up "$map" "$spec" "$delay" || return
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

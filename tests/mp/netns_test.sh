#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces joined by a veth pair.
# Ranks in one namespace share memory (shm), ranks in different ones talk
# TCP over the veth, so one job exercises both transports and the host
# grouping (the host identity includes the network namespace).
#   netns_test.sh PROGRAM [ARGS...]     (needs root and iproute2; else SKIP 77)
set -u
prog=("$@")
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  echo "SKIP: needs root and iproute2 (ip netns) to make test hosts"
  exit 77
fi
tag=sh$$
nsa=$tag-a nsb=$tag-b
cleanup() { ip netns del "$nsa" 2>/dev/null; ip netns del "$nsb" 2>/dev/null; }
trap cleanup EXIT
if ! ip netns add "$nsa" 2>/dev/null || ! ip netns add "$nsb"; then
  echo "SKIP: cannot create network namespaces here"
  exit 77
fi
ip link add "$tag-va" type veth peer name "$tag-vb" || { echo "SKIP: no veth"; exit 77; }
ip link set "$tag-va" netns "$nsa"
ip link set "$tag-vb" netns "$nsb"
ip -n "$nsa" addr add 10.77.0.1/24 dev "$tag-va"
ip -n "$nsb" addr add 10.77.0.2/24 dev "$tag-vb"
for ns in "$nsa" "$nsb"; do
  ip -n "$ns" link set lo up
done
ip -n "$nsa" link set "$tag-va" up
ip -n "$nsb" link set "$tag-vb" up

pass=0 fail=0
# run_job NAME N HOSTMAP: HOSTMAP is a string of a/b, one letter per rank.
run_job() {
  local name=$1 n=$2 map=$3 token port=29517 pids=() rc=0
  token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  local out
  out=$(mktemp -d)
  for ((r = 0; r < n; r++)); do
    local ns=$nsa
    [ "${map:r:1}" = b ] && ns=$nsb
    ip netns exec "$ns" env SHARC_RANK=$r SHARC_WORLD_SIZE=$n \
      SHARC_ADDR=10.77.0.1:$port SHARC_TOKEN="$token" SHARC_TIMEOUT=60 \
      "${prog[@]}" >"$out/$r.log" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    if ! wait "${pids[r]}"; then
      rc=1
      echo "--- $name: rank $r failed:"
      tail -5 "$out/$r.log"
    fi
  done
  if [ $rc -eq 0 ] && grep -q " 0 failed" "$out/0.log"; then
    pass=$((pass + 1))
    echo "ok: $name: $(grep -h "passed" "$out/0.log" | tail -1)"
  else
    fail=$((fail + 1))
    echo "FAILED: $name"
  fi
  rm -rf "$out"
}
run_job "2 hosts x 2 ranks" 4 aabb
run_job "uneven hosts (3 + 1), interleaved ranks" 4 abaa
echo "netns_test: $pass passed, $fail failed"
[ "$fail" -eq 0 ]

#!/usr/bin/env bash
# ib_test.sh - the ib transport through real processes (sharcrun).
#   ib_test.sh refused SHARCRUN INIT_ONLY HAVE_IBVERBS
#       where no RDMA port is active (or the build has no libibverbs),
#       SHARC_TRANSPORT=ib must fail at init on every rank, at once, with
#       the reason; a misspelt transport must name the valid ones
#   ib_test.sh coll SHARCRUN PROGRAM HAVE_IBVERBS N
#       PROGRAM --quick on N ranks over ib (SHARC_TRANSPORT=ib: through
#       the NIC even on one host): coll_check (every collective) or
#       p2p_check (send/recv, groups, all_to_allv); exits 77 without an
#       active RDMA port
set -u
case=$1 sharcrun=$2 prog=$3 have=$4 n=${5:-2}
active=$(cat /sys/class/infiniband/*/ports/*/state 2>/dev/null | grep -c ACTIVE)
if [ "$have" != ON ]; then
  why="sharc was built without libibverbs (install libibverbs-dev, rebuild)"
elif [ ! -d /sys/class/infiniband ]; then
  why="no RDMA device: /sys/class/infiniband is missing (the kernel has no InfiniBand/RoCE driver or RXE device)"
elif [ "$active" -eq 0 ]; then
  why="no ACTIVE RDMA port in /sys/class/infiniband (see ibv_devinfo)"
else
  why=""
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
pass=0 fail=0
check() { # check STATUS DESCRIPTION
  if [ "$1" -eq 0 ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "ib_test FAIL: $2"; fi
}
case $case in
  refused)
    if [ -z "$why" ]; then
      echo "SKIP ib_test refused: this machine has $active active RDMA port(s); the refusal needs none"
      exit 77
    fi
    echo "ib_test: expecting a refusal: $why"
    start=$(date +%s)
    SHARC_TRANSPORT=ib SHARC_TIMEOUT=20 timeout 60 "$sharcrun" -n 2 "$prog" >"$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - start))
    cat "$log"
    check $((rc == 0)) "the job exited 0 with SHARC_TRANSPORT=ib and no device"
    refused=$(grep -c "init failed: SHARC_ERR_[A-Z]*: ib: " "$log")
    check $((refused != 2)) "$refused of 2 ranks printed the ib refusal"
    if [ "$have" = ON ]; then
      check $((1 - $(grep -c -E "init failed: .*(no RDMA device|no usable RDMA port)" "$log") / 2)) \
        "the refusal does not say that there is no RDMA device/port"
    else
      check $((1 - $(grep -c "init failed: .*install libibverbs-dev" "$log") / 2)) \
        "the refusal does not say to install libibverbs-dev"
    fi
    check $((secs > 10)) "the refusal took $secs s (expected at once)"
    SHARC_TRANSPORT=infiniband timeout 60 "$sharcrun" -n 1 "$prog" >"$log" 2>&1
    check $(($(grep -c "SHARC_TRANSPORT=infiniband unknown; use auto, shm, tcp or ib" "$log") < 1)) \
      "a misspelt SHARC_TRANSPORT is not named with the valid values: $(cat "$log")"
    SHARC_NET=rdma timeout 60 "$sharcrun" -n 1 "$prog" >"$log" 2>&1
    check $(($(grep -c "SHARC_NET=rdma unknown; use tcp or ib" "$log") < 1)) \
      "a misspelt SHARC_NET is not named with the valid values: $(cat "$log")"
    ;;
  coll)
    if [ -n "$why" ]; then
      echo "SKIP ib_test coll ($(basename "$prog")): $why; running over ib needs an active RDMA port"
      exit 77
    fi
    SHARC_TRANSPORT=ib SHARC_TIMEOUT=60 "$sharcrun" -n "$n" --timeout 570 "$prog" --quick >"$log" 2>&1
    rc=$?
    tail -5 "$log"
    check $rc "$(basename "$prog") on $n ranks over ib exited $rc"
    ;;
  *)
    echo "usage: $0 refused|coll SHARCRUN PROGRAM HAVE_IBVERBS [N]" >&2
    exit 2
    ;;
esac
echo "ib_test $case: $pass passed, $fail failed"
[ "$fail" -eq 0 ]

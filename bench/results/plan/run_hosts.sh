#!/usr/bin/env bash
# run_hosts.sh BUILD OUT LAYOUT RATE DELAY_US [REPS [MODELS]] - the
# several-host measurements behind bench/results/plan/README.md ("Across
# hosts"). Hosts are network namespaces on this machine
# (tests/mp/hosts_test.sh): LAYOUT HxG puts G ranks on each of H hosts
# (2x2, 4x2); each host's link is `tbf rate RATE` (e.g. 1gbit) with
# DELAY_US microseconds each way (hosts_test.sh --delay: this kernel has no
# sch_netem). Per repetition (OUT/<layout>_<rate>_<delay>/rK):
#   - sharc-bench all_gather, reduce_scatter and all_reduce, 8 B..16 MB,
#     on the hosts (the inter-node link calibration: bench_hosts.json);
#   - sharc-bench on one host with G ranks, shm (the intra link:
#     bench_intra.json), outside the namespaces;
#   - sharc-train at 1 rank, outside (the compute calibration), for each
#     model;
#   - sharc-train on the hosts: CNN (--synthetic --dropout 0, 11 steps) and
#     tiny GPT (tests/shard/corpus.txt, 21 steps), FULL_SHARD and HYBRID
#     with a shard group per host, batch 64, f32, AdamW.
# /proc/loadavg is recorded before every run (load.txt). Needs root; exit
# 77 with the reason when hosts cannot be made here.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
B=$(cd "$1" && pwd)
O=$2
LAYOUT=$3
RATE=$4
DELAY=$5
REPS=${6:-2}
MODELS=${7:-cnn gpt}
H=${LAYOUT%x*}
G=${LAYOUT#*x}
map=""
letters=abcdefgh
for ((h = 0; h < H; h++)); do
  for ((g = 0; g < G; g++)); do map+=${letters:h:1}; done
done
N=$((H * G))
. "$here/tests/mp/hosts_test.sh"
export HOSTS_WIRE_DELAY=${HOSTS_WIRE_DELAY:-$B/tests/mp/wire_delay}
hosts_up "$map" "tbf rate $RATE burst 256kb latency 50ms" "$DELAY"
rc=$?
[ $rc -eq 0 ] || exit $rc
top="$O/${LAYOUT}_${RATE}_${DELAY}us"
mkdir -p "$top"
top=$(cd "$top" && pwd)

model_args() {
  case $1 in
  cnn) echo "--model cnn --synthetic --dropout 0 --steps 11" ;;
  *) echo "--model gpt --gpt-size tiny --data $here/tests/shard/corpus.txt --steps 21" ;;
  esac
}

job() { # DIR TAG PROGRAM ARGS...: one job on the hosts, logs in DIR/TAG/
  local d=$1 tag=$2
  shift 2
  mkdir -p "$d/$tag"
  echo "$(date -u +%H:%M:%S) $tag: $(cat /proc/loadavg)" >>"$d/load.txt"
  hosts_job "$d/$tag" 900 "$@" || {
    echo "run_hosts: $tag failed (status ${HOSTS_STATUS[*]}); rank 0's log:"
    tail -20 "$d/$tag/0.log"
    return 1
  }
}

r=1
while [ $r -le "$REPS" ]; do
  d="$top/r$r"
  mkdir -p "$d"
  job "$d" bench_hosts "$B/bench/sharc-bench" \
    all_gather,reduce_scatter,all_reduce -b 8 -e 16M -f 4 -n 10 -w 2 -c 0 \
    --limits 0 -J "$d/bench_hosts.json" || exit 1
  echo "$(date -u +%H:%M:%S) bench_intra: $(cat /proc/loadavg)" >>"$d/load.txt"
  SHARC_TRANSPORT=shm "$B/sharcrun" -n "$G" "$B/bench/sharc-bench" \
    all_gather,reduce_scatter,all_reduce -b 8 -e 16M -f 4 -n 10 -w 2 -c 0 \
    --limits 0 -J "$d/bench_intra.json" >"$d/bench_intra.txt" 2>&1 || exit 1
  for model in $MODELS; do
    echo "$(date -u +%H:%M:%S) train_${model}_n1: $(cat /proc/loadavg)" >>"$d/load.txt"
    # shellcheck disable=SC2046 # model_args is a list of words
    "$B/sharcrun" -n 1 "$B/models/sharc-train" $(model_args "$model") \
      --strategy full --log-every 1 --log "$d/train_${model}_n1_full.jsonl" \
      >"$d/train_${model}_n1_full.txt" 2>&1 || exit 1
    for strat in full hybrid; do
      g=""
      [ $strat = hybrid ] && g="--shard-group $G"
      tag="train_${model}_n${N}_${strat}"
      # shellcheck disable=SC2046,SC2086
      job "$d" "$tag" "$B/models/sharc-train" $(model_args "$model") \
        --strategy $strat $g --log-every 1 --log "$d/$tag.jsonl" || exit 1
    done
  done
  echo "$(date -u +%H:%M:%S) done: $(cat /proc/loadavg)" >>"$d/load.txt"
  r=$((r + 1))
done

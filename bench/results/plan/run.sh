#!/bin/sh
# run.sh BUILD OUT [REPS [MODELS]] - the measurements behind
# bench/results/plan/README.md. MODELS: a list of cnn, gpt (tiny),
# gpt_small (default "cnn gpt"). Per repetition (OUT/rK): sharc-train at 1 rank (the compute
# calibration: CNN and tiny GPT), then for 2 and 4 ranks on this host (shm)
# sharc-bench all_gather, reduce_scatter and all_reduce 8 B..64 MB (the
# link calibration) followed at once by sharc-train CNN and tiny GPT under
# FULL_SHARD and HYBRID, so that each calibration and the runs it predicts
# see the same load. /proc/loadavg is recorded before every run
# (OUT/rK/load.txt): the machine is shared, the load is part of the result.
set -eu
B=${1:-build-plan2}
O=${2:-bench/results/plan/data}
REPS=${3:-3}
MODELS=${4:-cnn gpt}
N="nice -n 19"

# train DIR MODEL RANKS STRATEGY GROUP
train() {
  case $2 in
  cnn) m="--model cnn --synthetic --dropout 0" steps=21 ;;
  gpt) m="--model gpt --gpt-size tiny --data tests/shard/corpus.txt" steps=51 ;;
  *) m="--model gpt --gpt-size small --data tests/shard/corpus.txt" steps=9 ;;
  esac
  g=""
  [ "$5" != 0 ] && g="--shard-group $5"
  tag="$2_n$3_$4"
  echo "$(date -u +%H:%M:%S) train $tag: $(cat /proc/loadavg)" >>"$1/load.txt"
  # shellcheck disable=SC2086
  $N "$B/sharcrun" -n "$3" "$B/models/sharc-train" $m --strategy "$4" $g \
    --steps $steps --log-every 1 --log "$1/train_$tag.jsonl" \
    >"$1/train_$tag.txt" 2>&1
}

r=1
while [ $r -le "$REPS" ]; do
  d="$O/r$r"
  mkdir -p "$d"
  for model in $MODELS; do
    train "$d" "$model" 1 full 0
  done
  for n in 2 4; do
    echo "$(date -u +%H:%M:%S) bench n=$n: $(cat /proc/loadavg)" >>"$d/load.txt"
    $N "$B/sharcrun" -n $n "$B/bench/sharc-bench" \
      all_gather,reduce_scatter,all_reduce -b 8 -e 64M -f 4 -n 20 -w 5 -c 0 \
      -J "$d/bench_n$n.json" >"$d/bench_n$n.txt" 2>&1
    for model in $MODELS; do
      train "$d" "$model" $n full 0
      train "$d" "$model" $n hybrid $((n / 2))
    done
  done
  echo "$(date -u +%H:%M:%S) done: $(cat /proc/loadavg)" >>"$d/load.txt"
  r=$((r + 1))
done

#!/bin/sh
# plan_vs_train.sh BUILD SRC - the planner's memory against the engine's.
# For the CNN and the tiny GPT at 1, 2, 3 and 4 ranks (3: padded slices
# and uneven batch parts), every strategy, f32 and bf16 parameters, with
# and without activation checkpointing, one micro-batch (and 3 and 8 at 2
# ranks under full and grad_op: gradient accumulation), runs sharc-train
# for one step and sharc-plan for the same configuration on one node of
# that many GPUs, and compares rank 0's peak by category
# (tests/plan/compare_mem.py): the sharded state (param_slices,
# grad_slices, optim) equal to the byte, activations within 5%.
set -u
B=$1
S=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
n=0

# one MODEL RANKS STRATEGY MP CKPT MICRO
one() {
  model=$1 ranks=$2 strat=$3 mp=$4 ck=$5 micro=$6
  if [ "$model" = cnn ]; then
    margs="--model cnn --synthetic --dropout 0"
    pmodel=cnn
  else
    margs="--model gpt --gpt-size tiny --data $S/tests/shard/corpus.txt"
    pmodel=gpt:tiny
  fi
  grp=""
  case $strat in hybrid*) grp="--shard-group 2" ;; esac
  pstrat=$strat
  [ "$strat" = no_shard ] && pstrat=none
  dt=f32
  [ "$mp" = bf16 ] && dt=bf16
  ckf=""
  [ "$ck" = 1 ] && ckf="--checkpoint-activations"
  label="$model ranks=$ranks $strat $mp ckpt=$ck micro=$micro"
  log="$T/train.$n.jsonl"
  # shellcheck disable=SC2086 # margs, grp and ckf are word lists
  if ! "$B/sharcrun" -n "$ranks" "$B/models/sharc-train" $margs \
    --strategy "$strat" $grp --mp "$mp" $ckf --steps 1 --batch 16 \
    --micro "$micro" --log "$log" --log-every 1 >"$T/out.$n" 2>&1; then
    echo "FAIL: sharc-train $label:"
    tail -5 "$T/out.$n"
    fail=1
    return
  fi
  # shellcheck disable=SC2086
  if ! "$B/plan/sharc-plan" --model "$pmodel" --nodes 1 \
    --gpus-per-node "$ranks" --batch 16 --micro "$micro" \
    --strategy "$pstrat" $grp --dtype "$dt" --checkpoint "$ck" \
    --json "$T/plan.$n.json" >"$T/pout.$n" 2>&1; then
    echo "FAIL: sharc-plan $label:"
    cat "$T/pout.$n"
    fail=1
    return
  fi
  python3 "$S/tests/plan/compare_mem.py" "$log" "$T/plan.$n.json" \
    "$label" || fail=1
  n=$((n + 1))
}

# PLAN_QUICK=1 (sanitizer builds): 3 and 4 ranks only (padded slices,
# uneven batches and the hybrid groups), no micro-batch variants
all_ranks="1 2 3 4"
[ "${PLAN_QUICK:-0}" = 1 ] && all_ranks="3 4"
for model in cnn gpt; do
  for ranks in $all_ranks; do
    for strat in full grad_op no_shard hybrid hybrid_zero2; do
      case $strat in hybrid*) [ "$ranks" -lt 4 ] && continue ;; esac
      micros=1
      if [ "$ranks" = 2 ] && { [ $strat = full ] || [ $strat = grad_op ]; }
      then
        micros="1 3 8"
      fi
      for mp in off bf16; do
        for ck in 0 1; do
          for micro in $micros; do
            one "$model" "$ranks" "$strat" "$mp" "$ck" "$micro"
          done
        done
      done
    done
  done
done
echo "plan_vs_train: $n configurations compared"
[ $fail = 0 ] && echo PASS || echo FAIL
exit $fail

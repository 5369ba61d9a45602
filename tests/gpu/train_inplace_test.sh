#!/usr/bin/env bash
# train_inplace_test.sh - GPU training on the direct path reading its peers'
# registered buffers in place (the engine registers its device blocks;
# SHARC_CUDA_INPLACE_BYTES=0 puts every all-gather and reduce-scatter it
# makes in place) against the same run through the path's slots
# (SHARC_CUDA_INPLACE_BYTES=-1): the tiny GPT, 2 and 4 ranks, 12 steps. The
# two reduce in the same order, so every step's loss and gradient norm must
# print alike; the trace must show calls read in place (registered
# buffers) and none refused.
#
#   train_inplace_test.sh SHARCRUN SHARC_TRAIN CORPUS
#
# Exit 0 passed, 1 failed, 77 without a CUDA device (the SKIP line).
set -u
run=$1 train=$2 corpus=$3
W=$(mktemp -d "${TMPDIR:-/tmp}/train_inplace.XXXXXX")
trap 'rm -rf "$W"' EXIT
export SHARC_CUDA_PATH=direct SHARC_TIMEOUT=${SHARC_TIMEOUT:-60}
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
# skip where sharc-train cannot train on a GPU (no device, no GPU models)
if ! timeout 120 "$run" -n 1 --timeout 100 "$train" --device cuda \
  --model gpt --gpt-size tiny --data "$corpus" --steps 1 >"$W/probe.out" 2>&1; then
  if grep -qE "no usable CUDA device|has no GPU models" "$W/probe.out"; then
    echo "SKIP: $(grep -m1 -oE -- '--device cuda: .*' "$W/probe.out")"
    exit 77
  fi
  echo "FAIL: a one-step GPU run failed:"
  tail -20 "$W/probe.out"
  exit 1
fi
for n in 2 4; do
  for mode in inplace slots; do
    bytes=$([ $mode = inplace ] && echo 0 || echo -1)
    SHARC_CUDA_INPLACE_BYTES=$bytes SHARC_DEBUG=TRACE SHARC_DEBUG_SUBSYS=CUDA \
      timeout 240 "$run" -n "$n" --timeout 200 "$train" --device cuda \
      --model gpt --gpt-size tiny --data "$corpus" --steps 12 --batch 8 \
      --lr 1e-3 --seed 5 --log-every 1 >"$W/$mode$n.log" 2>&1
    rc=$?
    if [ $rc = 77 ]; then
      grep -m1 SKIP "$W/$mode$n.log"
      exit 77
    fi
    [ $rc = 0 ] || fail "$n ranks, $mode: sharc-train exited $rc" \
      "($(grep -v 'CUDA' "$W/$mode$n.log" | tail -2))"
    grep -E '^\[0\] step ' "$W/$mode$n.log" | awk '{print $3, $5, $7}' \
      >"$W/$mode$n.steps"
  done
  steps=$(wc -l <"$W/inplace$n.steps")
  [ "$steps" -eq 12 ] || fail "$n ranks: $steps steps printed, want 12"
  cmp -s "$W/inplace$n.steps" "$W/slots$n.steps" ||
    fail "$n ranks: losses or norms differ in place:" \
      "$(diff "$W/inplace$n.steps" "$W/slots$n.steps" | head -4)"
  ip=$(grep -c 'bytes in place (registered buffers)' "$W/inplace$n.log")
  sl=$(grep -c 'through the slots' "$W/inplace$n.log")
  [ "$ip" -gt 0 ] && [ "$sl" -eq 0 ] ||
    fail "$n ranks: $ip calls in place (want > 0), $sl through the slots" \
      "(want 0: $(grep -m1 'through the slots' "$W/inplace$n.log"))"
  echo "train_inplace: $n ranks: 12 steps alike, $ip calls in place"
done
echo "train_inplace_test: $fails failed"
[ $fails -eq 0 ]

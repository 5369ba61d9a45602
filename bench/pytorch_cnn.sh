#!/usr/bin/env bash
# pytorch_cnn.sh BUILD OUT [EPOCHS]: the tutorial CNN on Fashion-MNIST on 4
# ranks, three ways, one after another on this machine: PyTorch FSDP2 over
# sharc (docs/examples/fsdp2_cnn.py --backend sharc), PyTorch FSDP2 over
# gloo, and sharc's own engine (sharc-train --model cnn --strategy full).
# Same global batch 64, AdamW lr 1e-3, EPOCHS epochs (default 2). Writes
# OUT/{fsdp2_sharc,fsdp2_gloo}.json, OUT/sharc_train.jsonl and the logs.
# Needs a Python with torch: SHARC_TORCH_PYTHON (else python3).
set -euo pipefail
build=$1 out=$2 epochs=${3:-2}
py=${SHARC_TORCH_PYTHON:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export SHARC_LIBRARY=$build/libsharc.so PYTHONPATH=$here/python
# GNU time's report (peak RSS of the whole job) where it is installed
# (Debian package time); the scripts record their own RSS either way.
timev=()
[ -x /usr/bin/time ] && timev=(/usr/bin/time -v)
for be in sharc gloo; do
  echo "=== FSDP2 on $be, 4 ranks, $epochs epochs"
  "${timev[@]}" "$py" -m torch.distributed.run --standalone \
    --nproc-per-node 4 "$here/docs/examples/fsdp2_cnn.py" --backend $be \
    --epochs "$epochs" --json "$out/fsdp2_$be.json" \
    > "$out/fsdp2_$be.log" 2>&1
  grep -E "^epoch|test accuracy" "$out/fsdp2_$be.log"
done
echo "=== sharc-train (sharc's engine), 4 ranks, $epochs epochs"
"${timev[@]}" "$build/sharcrun" -n 4 "$build/models/sharc-train" \
  --model cnn --strategy full --epochs "$epochs" --batch 64 --lr 1e-3 \
  --log-every 100 --log "$out/sharc_train.jsonl" > "$out/sharc_train.log" 2>&1
tail -1 "$out/sharc_train.jsonl"

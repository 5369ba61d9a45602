#!/usr/bin/env bash
# pytorch_gpt.sh BUILD OUT [STEPS]: sharc's GPT at GPT-2's width (C 768,
# 12 heads) with 2 layers, trained with PyTorch FSDP2 on the CPU
# (bench/fsdp2_gpt.py), three runs one after another on this machine:
#   gpt_sharc_n2   2 ranks over the "sharc" backend (import sharc.torch)
#   gpt_gloo_n2    2 ranks over gloo, the reference
#   gpt_gloo_n1    1 rank over gloo: the same training with every sum
#                  grouped another way, for the noise floor
# All from the same seed: the same parameters and the same windows. Then
# it writes OUT/gpt_compare.json: the largest relative loss difference over
# the steps of sharc against gloo (2 ranks) and of gloo's 1 rank against
# its 2 (the floor), with the table it prints. Writes OUT/gpt_*.json and
# OUT/gpt_*.log.
# Needs a Python with torch: SHARC_TORCH_PYTHON (else python3).
# GPT_ARGS replaces the model and batch options below; GPT_TAG (say v50257)
# names such a run's files OUT/gpt_TAG_*.
set -euo pipefail
build=$1 out=$2 steps=${3:-300}
py=${SHARC_TORCH_PYTHON:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export SHARC_LIBRARY=$build/libsharc.so PYTHONPATH=$here/python OMP_NUM_THREADS=1
# byte tokens, so V 256 rather than GPT-2's 50257 (see the README)
tag=${GPT_TAG:+${GPT_TAG}_}
read -r -a cfg <<< "${GPT_ARGS:---preset gpt2 --vocab 256 --layers 2 --context 64 --batch 8}"
timev=()
[ -x /usr/bin/time ] && timev=(/usr/bin/time -v)
run() {  # run NAME BACKEND RANKS
  echo "=== FSDP2 on $2, $3 rank(s), $steps steps: $1"
  "${timev[@]}" "$py" -m torch.distributed.run --standalone \
    --nproc-per-node "$3" "$here/bench/fsdp2_gpt.py" --backend "$2" \
    "${cfg[@]}" --steps "$steps" --warmup 10 --log-every 50 \
    --data "$here/tests/shard/corpus.txt" --json "$out/$1.json" \
    > "$out/$1.log" 2>&1
  grep -E "^fsdp2_gpt: cpu" "$out/$1.log"
}
run "gpt_${tag}sharc_n2" sharc 2
run "gpt_${tag}gloo_n2" gloo 2
run "gpt_${tag}gloo_n1" gloo 1

"$py" - "$out/gpt_$tag" <<'EOF'
import json, sys
pre = sys.argv[1]  # OUT/gpt_ or OUT/gpt_TAG_
r = {k: json.load(open(f"{pre}{k}.json")) for k in ("sharc_n2", "gloo_n2", "gloo_n1")}

def rel(a, b):  # the largest |a-b|/|b| over the steps, and its step (1-based)
    d = [abs(x - y) / abs(y) for x, y in zip(a["losses"], b["losses"])]
    i = max(range(len(d)), key=d.__getitem__)
    return d[i], i + 1

sharc, at = rel(r["sharc_n2"], r["gloo_n2"])
floor, fat = rel(r["gloo_n1"], r["gloo_n2"])
res = {
    "steps": len(r["gloo_n2"]["losses"]),
    "sharc_vs_gloo_max_rel": sharc, "sharc_vs_gloo_at_step": at,
    "sharc_vs_gloo_bitwise": r["sharc_n2"]["losses"] == r["gloo_n2"]["losses"],
    "floor_gloo_n1_vs_n2_max_rel": floor, "floor_at_step": fat,
    "within_floor": sharc <= floor,
    "runs": {k: {"final_loss": v["losses"][-1], "tokens_per_s": v["tokens_per_s"],
                 "peak_rss_mib_per_rank": v["peak_bytes_per_rank"] / 2**20}
             for k, v in r.items()},
}
with open(f"{pre}compare.json", "w") as f:
    json.dump(res, f, indent=1)
    f.write("\n")
print(f"{'run':<10} {'final loss':>11} {'tokens/s':>9} {'peak RSS/rank':>14}")
for k, v in res["runs"].items():
    print(f"{k:<10} {v['final_loss']:>11.6f} {v['tokens_per_s']:>9.0f} "
          f"{v['peak_rss_mib_per_rank']:>10.0f} MiB")
print(f"sharc vs gloo (2 ranks): max relative loss difference {sharc:.3g} "
      f"(step {at}){', bitwise equal' if res['sharc_vs_gloo_bitwise'] else ''}")
print(f"noise floor, gloo 1 rank vs 2: {floor:.3g} (step {fat}); "
      f"sharc {'within' if res['within_floor'] else 'OUTSIDE'} it")
EOF

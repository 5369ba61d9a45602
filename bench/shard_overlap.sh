#!/usr/bin/env bash
# shard_overlap.sh - how much of the FSDP engine's communication hides
# behind compute: sharc-train on the GPT (tiny and small shapes) with 4
# ranks on host memory, prefetch 1 (none), 2 (the default) and 3, each run
# twice. Prints a table (per step, mean over the steps after the first
# two: step time, compute, communication on the stream, exposed
# communication = time compute waited for it, its share of the step, and
# the share of communication hidden) and writes bench/results/
# shard_overlap.json; with python3-matplotlib also a PNG timeline of one
# traced step (bench/results/shard_timeline_gpt_small_4ranks.png).
#
#   bench/shard_overlap.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
STEPS=${2:-20}
OUT=bench/results
mkdir -p "$OUT"
W=$(mktemp -d /tmp/sharc-overlap-XXXXXX)
trap 'rm -rf "$W"' EXIT
export OPENBLAS_NUM_THREADS=1
rows=()
printf '%-6s %8s %4s %10s %10s %10s %10s %9s %9s\n' model prefetch run \
  "step ms" "compute" "comm" "exposed" "exp/step" "hidden"
for size in tiny small; do
  batch=16
  for pf in 1 2 3; do
    for run in 1 2; do
      log=$W/$size-$pf-$run.jsonl
      ./"$B"/sharcrun -n 4 ./"$B"/models/sharc-train --model gpt \
        --gpt-size $size --data tests/shard/corpus.txt --steps "$STEPS" \
        --batch $batch --prefetch $pf --log "$log" --log-every 100000 >/dev/null
      row=$(python3 - "$log" $size $pf $run <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l][2:]
m = lambda k: sum(r[k] for r in recs) / len(recs)
step, comp, comm, exp = m("time_s"), m("t_compute"), m("t_comm"), m("t_exposed")
print(json.dumps({"model": "gpt-" + sys.argv[2], "ranks": 4,
                  "prefetch": int(sys.argv[3]), "run": int(sys.argv[4]),
                  "steps": len(recs), "step_ms": step * 1e3,
                  "compute_ms": comp * 1e3, "comm_ms": comm * 1e3,
                  "exposed_ms": exp * 1e3, "exposed_share": exp / step,
                  "hidden_share": max(0.0, 1 - exp / comm) if comm else 0}))
PY
)
      rows+=("$row")
      python3 -c "import json,sys; r=json.loads(sys.argv[1]); print('%-6s %8d %4d %10.2f %10.2f %10.2f %10.2f %8.0f%% %8.0f%%' % (r['model'][4:], r['prefetch'], r['run'], r['step_ms'], r['compute_ms'], r['comm_ms'], r['exposed_ms'], 100*r['exposed_share'], 100*r['hidden_share']))" "$row"
    done
  done
done
{
  echo "{\"machine\": \"$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\","
  echo " \"command\": \"bench/shard_overlap.sh $B $STEPS\", \"rows\": ["
  printf '%s\n' "${rows[@]}" | sed '$!s/$/,/'
  echo "]}"
} >"$OUT/shard_overlap.json"
echo "wrote $OUT/shard_overlap.json"
./"$B"/sharcrun -n 4 ./"$B"/models/sharc-train --model gpt --gpt-size small \
  --data tests/shard/corpus.txt --steps 4 --batch 16 --trace "$W/trace" \
  --log-every 100000 \
  >/dev/null
PY=python3 # Debian's python3-matplotlib lives in /usr/bin/python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
if $PY -c "import matplotlib" 2>/dev/null; then
  $PY bench/trace_plot.py "$W/trace" -o "$OUT/shard_timeline_gpt_small_4ranks.png" \
    --title "sharc-train GPT small, 4 ranks (FULL_SHARD, prefetch 2), step 4: $(nproc)-core $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
fi
python3 tests/shard/trace_check.py "$W/trace" 4

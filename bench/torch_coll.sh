#!/usr/bin/env bash
# torch_coll.sh BUILD OUT [RANKS...]: torch.distributed's all_gather_into_
# tensor, reduce_scatter_tensor and all_reduce through the sharc backend
# and through gloo, and sharc-bench on the same sizes, one after another on
# this machine, so the Python layer's cost and gloo's distance are numbers
# from one run. Per rank count (default 2 4), 8 B to 256 MiB (x4), float32
# sum, the same buffers every call, best and median of 3 passes, twice:
#   - per call (--timing call: a barrier, t0, one call, t1; the median of
#     the slowest rank), sharc-bench --timing call beside it;
#   - back to back (--timing stream: the slowest rank's mean over calls in
#     a row, nccl-tests' method), sharc-bench --timing stream beside it
#     (calls enqueued on a stream, then one synchronize; its -z 1 would
#     add a barrier after every call).
# Writes OUT/{torch_sharc,torch_gloo,sharc_bench}_{call,stream}_n{N}.{json,
# txt} and the 256 MiB point's *_256m.{json,txt} (ONLY=256m: that point
# alone); bench/torch_coll_summary.py OUT turns them into the tables. Needs
# a Python with torch: SHARC_TORCH_PYTHON (else python3). Run it on a
# quiet machine: the ranks share its cores.
set -euo pipefail
build=$(cd "$1" && pwd) out=$2
shift 2
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(2 4)
py=${SHARC_TORCH_PYTHON:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export SHARC_LIBRARY=$build/libsharc.so PYTHONPATH=$here/python
export OMP_NUM_THREADS=1
# 8 B..128 MiB by factors of 4, then 256 MiB alone (suffix _256m; the
# summary merges it): x4 from 8 B does not reach 256 MiB.
sweeps=("-b 8 -e 128M -f 4:" "-b 256M -e 256M -f 4:_256m")
for n in "${ranks[@]}"; do
  for timing in call stream; do
    echo "=== $n ranks, timing $timing, load $(cut -d' ' -f1-3 /proc/loadavg)"
    for sw in "${sweeps[@]}"; do
      [ "${ONLY:-}" = 256m ] && [ "${sw#*:}" != _256m ] && continue
      read -r -a sizes <<<"${sw%%:*}"
      sfx=${sw#*:}
      SHARC_TRANSPORT=shm "$build/sharcrun" -n "$n" "$build/bench/sharc-bench" \
        all_gather,reduce_scatter,all_reduce "${sizes[@]}" -n 200 -w 5 -c 1 \
        --timing $timing --passes 3 --limits 0 \
        -J "$out/sharc_bench_${timing}_n$n$sfx.json" \
        > "$out/sharc_bench_${timing}_n$n$sfx.txt" 2>&1
      for be in sharc gloo; do
        "$py" -m torch.distributed.run --standalone --nproc-per-node "$n" \
          "$here/bench/torch_coll_bench.py" --backend $be "${sizes[@]}" \
          --timing $timing --passes 3 --warmup 3 \
          --json "$out/torch_${be}_${timing}_n$n$sfx.json" \
          > "$out/torch_${be}_${timing}_n$n$sfx.txt" 2>&1
      done
    done
  done
done
"$py" "$here/bench/torch_coll_summary.py" "$out" | tee "$out/summary.md"

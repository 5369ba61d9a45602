#!/usr/bin/env bash
# timing_methods.sh - sharc-bench's two timing methods side by side (issue
# 24, item 1), a benchmark, not a test: all-gather, reduce-scatter,
# all-reduce and broadcast, 8 B to 4 MiB (-f 2), float sum, -R 0, 3 passes,
# at 2 ranks on one host:
#   call_sharc       sharc alone, --timing call (blocking calls, -z 1)
#   call_sharc_z0    sharc alone, --timing call -z 0 (each call enqueued on
#                    a stream, then synchronized: the stream hand-off)
#   stream_sharc     sharc alone, --timing stream (nccl-tests' average)
#   stream_cold      sharc alone, --timing stream --cold 1 (nccl-tests'
#                    method whole: sharc-bench's method before --timing)
#   call_mpi         --compare mpi, --timing call (under mpirun)
#   stream_mpi       --compare mpi, --timing stream
#
#   bench/timing_methods.sh [--build DIR] [--out DIR] [--ranks N]
#                           [--tag NAME] [--flags "SHARC-BENCH FLAGS"]
#
#   --build  build folder with bench/sharc-bench and sharcrun  [build]
#   --out    result folder         [bench/results/timing_methods]
#   --ranks  ranks                                             [2]
#   --tag    suffix of the file names (run1, run2, ...)        [run1]
#   --flags  [-b 8 -e 4M -f 2 -n 100 -w 10 -c 1 --passes 3 --limits 0]
# Writes <out>/<name>_n<N>_<tag>.txt (rank 0's output) and .json, and
# <out>/machine_n<N>_<tag>.txt (CPU, load before and after). Runs under
# nice. bench/timing_methods_summary.py makes the tables.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
build=$root/build out=$root/bench/results/timing_methods ranks=2 tag=run1
flags="-b 8 -e 4M -f 2 -n 100 -w 10 -c 1 --passes 3 --limits 0"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --ranks) ranks=${2:?}; shift 2 ;;
    --tag) tag=${2:?}; shift 2 ;;
    --flags) flags=${2:?}; shift 2 ;;
    *) sed -n '/^#   bench/,/^#   --flags/p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
  esac
done
bench=$build/bench/sharc-bench run=$build/sharcrun
colls=all_gather,reduce_scatter,all_reduce,broadcast
mkdir -p "$out"
export SHARC_TIMEOUT=60 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{
  grep -m1 'model name' /proc/cpuinfo
  echo "cores: $(nproc)"
  echo "load before: $(cat /proc/loadavg)"
} >"$out/machine_n${ranks}_$tag.txt"
# shellcheck disable=SC2086 # flags are words
one() { # name launcher-words... -- sharc-bench flags...
  local name=$1
  shift
  echo "== $name: $*" >&2
  nice "$@" -J "$out/${name}_n${ranks}_$tag.json" >"$out/${name}_n${ranks}_$tag.txt" 2>&1 ||
    echo "$name exited $?" >&2
}
sh=("$run" -n "$ranks" --no-prefix --timeout 600 "$bench" "$colls")
# shellcheck disable=SC2054 # "self,vader" is one argument
mp=(timeout 600 mpirun -np "$ranks" --oversubscribe --mca btl self,vader "$bench" "$colls")
# shellcheck disable=SC2086
{
  one call_sharc "${sh[@]}" $flags --timing call
  one call_sharc_z0 "${sh[@]}" $flags --timing call -z 0
  one stream_sharc "${sh[@]}" $flags --timing stream
  one stream_cold "${sh[@]}" $flags --timing stream --cold 1
  if command -v mpirun >/dev/null; then
    one call_mpi "${mp[@]}" $flags --timing call --compare mpi
    one stream_mpi "${mp[@]}" $flags --timing stream --compare mpi
  fi
}
echo "load after: $(cat /proc/loadavg)" >>"$out/machine_n${ranks}_$tag.txt"

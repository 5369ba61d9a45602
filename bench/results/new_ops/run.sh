#!/usr/bin/env bash
# run.sh - issue 22's operations against Open MPI in the same processes:
# reduce, gather, scatter, all_to_all, send_recv (ring, nccl-tests'
# sendrecv) and send_recv_pair (--exchange pair), 2 and 4 ranks over shared
# memory, 8 B to 256 MiB, --timing call (the host default), 3 passes; each
# configuration once per run (RUNS, default "1 2", alternating the rank
# counts). Writes OP_n{2,4}_run{R}.{txt,json} into OUT (default: beside
# this script) and appends each command with the load before and after it
# to log.txt there.
#   [RUNS="1 2"] [OPS="..."] [OUT=DIR] bench/results/new_ops/run.sh [BUILD]
#   BUILD holds bench/sharc-bench [build]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=${OUT:-$(cd "$(dirname "$0")" && pwd)}
build=${1:-$root/build}
bench=$build/bench/sharc-bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SHARC_TRANSPORT=shm
log=$here/log.txt
{
  echo "# $(date -u +%FT%TZ) $(uname -n): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  echo "# $(mpirun --version 2>&1 | head -1); tree at $(git -C "$root" rev-parse --short HEAD)" \
    "(uncommitted: $(git -C "$root" diff --name-only | tr '\n' ' '))"
} >>"$log"
for run in ${RUNS:-1 2}; do
  for n in 2 4; do
    for op in ${OPS:-reduce gather scatter all_to_all send_recv send_recv_pair}; do
      out=$here/${op}_n${n}_run$run
      args=("$op")
      [ "$op" = send_recv_pair ] && args=(send_recv --exchange pair)
      cmd=(timeout 900 mpirun -np "$n" --oversubscribe --mca btl self,vader "$bench"
        "${args[@]}" -b 8 -e 256M -f 2 -c 1 --passes 3 --compare mpi -J "$out.json")
      echo "SHARC_TRANSPORT=shm ${cmd[*]#"$root/"} > $(basename "$out").txt" >>"$log"
      echo "#   load before: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$log"
      start=$SECONDS
      "${cmd[@]}" >"$out.txt" 2>&1
      echo "#   load after:  $(cut -d' ' -f1-3 /proc/loadavg); $((SECONDS - start)) s" >>"$log"
    done
  done
done

#!/usr/bin/env bash
# run.sh - sharc's send_recv (nccl-tests' sendrecv) against Open MPI's
# MPI_Sendrecv in the same processes, 2 and 4 ranks over shared memory,
# 8 B to 256 MiB; each configuration once per run (RUNS, default "1 2":
# run1, run2, alternating the rank counts). Writes
# send_recv_n{2,4}_run{R}.{txt,json} beside this script and appends each
# command with the load before and after it to log.txt there.
#   [RUNS="1 2"] bench/results/p2p/run.sh [BUILD]   BUILD holds bench/sharc-bench [build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
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
    out=$here/send_recv_n${n}_run$run
    cmd=(timeout 600 mpirun -np "$n" --oversubscribe --mca btl self,vader "$bench"
      send_recv -b 8 -e 256M -f 2 -c 1 --passes 3 --compare mpi -J "$out.json")
    echo "SHARC_TRANSPORT=shm ${cmd[*]#"$root/"} > $(basename "$out").txt" >>"$log"
    echo "#   load before: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$log"
    start=$SECONDS
    "${cmd[@]}" >"$out.txt" 2>&1
    echo "#   load after:  $(cut -d' ' -f1-3 /proc/loadavg); $((SECONDS - start)) s" >>"$log"
  done
done

#!/usr/bin/env bash
# The main job: install what is missing, build, then check every collective
# on 4 ranks of this host and print the bandwidth table (nccl-tests layout).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
mkdir -p bench/results
./build/sharcrun -n 4 ./build/bench/sharc-bench all -b 8 -e 64M -f 4 -n 10 -w 3 -c 1 \
  -J bench/results/main_host_4ranks.json
# sharc against Open MPI in the same processes (both timed by the same code)
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun -np 4 --oversubscribe --mca btl self,vader ./build/bench/sharc-bench all \
  -b 8 -e 64M -f 4 -n 10 -w 3 -c 1 --compare mpi -J bench/results/compare_mpi_4ranks.json

#!/usr/bin/env bash
# The main job: install what is missing, build, check every collective on 4
# ranks of this host with the bandwidth table (nccl-tests layout), then
# train the CNN on Fashion-MNIST with the FSDP engine on 4 ranks, ending
# with the test accuracy.
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
# The FSDP engine: 4 ranks train the tutorial CNN on Fashion-MNIST for two
# epochs (FULL_SHARD, AdamW), then evaluate it on the 10k test images.
./build/sharcrun -n 4 ./build/models/sharc-train --model cnn --strategy full \
  --epochs 2 --batch 64 --lr 1e-3 --log-every 100 \
  --log build/train_cnn_4ranks.jsonl

#!/usr/bin/env bash
# run.sh - sharc's send_recv (nccl-tests' sendrecv) against Open MPI's
# MPI_Sendrecv in the same processes, 2 and 4 ranks over shared memory,
# 8 B to 256 MiB: bench/results/new_ops/run.sh with OPS=send_recv, writing
# send_recv_n{2,4}_run{R}.{txt,json} and log.txt beside this script.
#   [RUNS="1 2"] bench/results/p2p/run.sh [BUILD]   BUILD holds bench/sharc-bench [build]
here=$(cd "$(dirname "$0")" && pwd)
OUT=$here OPS=${OPS:-send_recv} exec "$here/../new_ops/run.sh" "$@"

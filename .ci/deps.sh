#!/usr/bin/env bash
# Installs the Debian packages sharc needs, only those missing (idempotent).
set -euo pipefail
pkgs=(build-essential cmake pkg-config iproute2 clang-format git python3 python3-venv coreutils
      libopenmpi-dev openmpi-bin libhwloc-dev libibverbs-dev graphviz libopenblas-dev zlib1g-dev dataset-fashion-mnist
      clang libclang-rt-14-dev # clang + libFuzzer: tests/fuzz/run_fuzz.sh
      mpich libmpich-dev # second MPI peer of sharc-bench; Open MPI stays the default
      python3-matplotlib) # bench/plot.py, plan/plan_plot.py (PNG figures)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
else
  echo "deps: all present (${pkgs[*]})"
fi

#!/usr/bin/env bash
# run_torch_test.sh LIBSHARC NRANKS SCRIPT [ARGS...]: the PyTorch backend's
# tests. A Python that has torch (SHARC_TORCH_PYTHON, else python3) runs
# SCRIPT under torchrun --standalone with NRANKS ranks, or directly when
# NRANKS is 0, with SHARC_LIBRARY pointing at the built libsharc.so.
# Exits 77 with a SKIP line when no such Python is installed, or when
# SHARC_TORCH=0 (.ci/test.sh then installs none either).
set -u
lib=$1 n=$2 script=$3
shift 3
if [ "${SHARC_TORCH:-1}" = 0 ]; then
  echo "SKIP: SHARC_TORCH=0 turns the PyTorch tests off"
  exit 77
fi
py=${SHARC_TORCH_PYTHON:-python3}
if ! "$py" -c "import torch, torch.distributed" 2>/dev/null; then
  echo "SKIP: no Python with torch ($py); set SHARC_TORCH_PYTHON to one" \
    "(bash .ci/torch_venv.sh makes a venv and prints its python)"
  exit 77
fi
export SHARC_LIBRARY=$lib OMP_NUM_THREADS=1
if [ "$n" = 0 ]; then
  exec "$py" "$script" "$@"
fi
exec "$py" -m torch.distributed.run --standalone --nproc-per-node "$n" \
  "$script" "$@"

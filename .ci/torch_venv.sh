#!/usr/bin/env bash
# torch_venv.sh: a Python venv with PyTorch from PyPI, on which the PyTorch
# backend's tests (tests/python, label python) run on the CPU. Prints the
# venv's python on stdout (the only line there; progress goes to stderr), to
# be passed as SHARC_TORCH_PYTHON. Exits non-zero with one line saying why
# when it cannot (no network, no python3-venv); the torch tests then skip.
#
#   SHARC_TORCH_VENV   where the venv lives (default
#                      ${XDG_CACHE_HOME:-$HOME/.cache}/sharc/torch-venv)
#
# Idempotent: a venv that already holds this recipe (the stamp file) and
# imports torch is reused without touching the network, so keeping the
# venv's folder between runs is the cache. pip's own cache is not used
# (--no-cache-dir): it would keep a second copy of the 2.4 GB of wheels that
# only a change of this recipe, which changes the wheels too, would read.
#
# The recipe. PyPI's only Linux x86_64 torch is the CUDA build (the CPU-only
# wheels live on download.pytorch.org); its libtorch_cuda.so, which
# libtorch.so links, names cudart, cupti, cublas(Lt), cufft, cusparse,
# cusparseLt, cufile, nvrtc, cudnn, nccl and nvshmem as NEEDED, so the
# dynamic loader wants them at `import torch` even with no GPU. Those wheels
# come in with --no-deps, pinned; torch finds them through its RPATH
# ($ORIGIN/../../nvidia/...), so nothing outside the venv (no CUDA toolkit,
# no driver) is relied on. Left out, as nothing here loads them: triton
# (torch.compile only), cusolver and nvjitlink (libtorch_cuda_linalg, loaded
# on the first GPU linear-algebra call), nvtx, cccl (headers),
# cuda-bindings and cuda-pathfinder (used only with a GPU). numpy is in,
# though no test uses it: without it every `import torch` warns "Failed to
# initialize NumPy" into the tests' logs.
set -euo pipefail
torch_version=2.15.0
pkgs=(
  "torch==$torch_version"
  # import torch: libtorch_cuda.so's NEEDED libraries (see above)
  nvidia-cuda-runtime==13.2.86 nvidia-cuda-cupti==13.2.86
  nvidia-cuda-nvrtc==13.2.86 nvidia-cublas==13.4.1.3 nvidia-cufft==12.2.0.57
  nvidia-cusparse==12.7.10.12 nvidia-cufile==1.17.1.22
  nvidia-cudnn-cu13==9.26.0.51 nvidia-cusparselt-cu13==0.8.1
  nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.7.2
  # torch's pure-Python requirements (torch.fx, FSDP2 and torchrun import them)
  filelock==4.3.1 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0
  networkx==3.6.1 jinja2==3.1.6 markupsafe==3.0.4 fsspec==2026.9.0
  numpy==2.4.6
)
venv=${SHARC_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sharc/torch-venv}
py=$venv/bin/python
stamp=$venv/sharc-recipe.txt
recipe=$(printf '%s\n' "${pkgs[@]}")
check="import torch, torch.distributed as d; from torch.distributed.fsdp import fully_shard
assert torch.__version__.split('+')[0] == '$torch_version', torch.__version__
assert d.is_available()"

mkdir -p "$(dirname "$venv")"
# two runs at once (two CI jobs sharing a home) would clobber one venv: the
# second waits here, then reuses what the first built
exec 9>"$venv.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$recipe" ] &&
  "$py" -c "$check" 2>/dev/null; then
  echo "torch_venv: reusing $venv (torch $torch_version)" >&2
  echo "$py"
  exit 0
fi

fail() {
  echo "torch_venv: $*; the torch tests will skip (SHARC_TORCH=0 skips this step)" >&2
  exit 1
}
start=$SECONDS
echo "torch_venv: creating $venv (torch $torch_version from PyPI, 2.4 GB to download, 4.0 GB installed)" >&2
rm -f "$stamp"
# --clear: a venv left half-installed by an earlier failed run starts over
python3 -m venv --clear "$venv" >&2 ||
  fail "python3 -m venv $venv failed (Debian: apt-get install python3-venv)"
"$py" -m pip install --quiet --no-cache-dir --no-deps --only-binary :all: \
  --timeout 60 --retries 3 "${pkgs[@]}" >&2 ||
  fail "pip install torch==$torch_version from PyPI failed (no network? see above)"
"$py" -c "$check" >&2 ||
  fail "torch $torch_version installed in $venv but does not import (see above)"
echo "$recipe" >"$stamp"
echo "torch_venv: $venv ready in $((SECONDS - start)) s, $(du -sh "$venv" | cut -f1)" >&2
echo "$py"

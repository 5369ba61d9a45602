#!/usr/bin/env bash
# build_peers.sh - one sharc-bench build per MPI peer installed by
# install_peers.sh, each against that venv's mpicc (Release, no CUDA, no
# tests): build-peers-impi, build-peers-ompi5, build-peers-mpich5 in the
# source tree. The Intel MPI build also gets the oneCCL backend
# (--compare ccl) when the ccl venv is there: oneCCL runs over Intel MPI.
#
#   bench/peers/build_peers.sh [--only impi,ompi5,mpich5] [--prefix DIR/build-peers-]
#       [--jobs N]
#
#   --only    which builds                                [impi,ompi5,mpich5]
#   --prefix  build folders are <prefix><name>            [<source>/build-peers-]
#   --jobs    parallel compile jobs                       [nproc]
#
# Each build: cmake -DCMAKE_BUILD_TYPE=Release -DSHARC_WITH_CUDA=OFF
# -DSHARC_BUILD_TESTS=OFF -DSHARC_WERROR=ON -DMPI_C_COMPILER=<venv>/bin/mpicc
# [-DSHARC_BENCH_CCL_ROOT=<ccl venv>], then the targets sharc-bench and
# sharcrun. It checks that CMake took the venv's MPI (MPI_C_HEADER_DIR is
# the venv's include/) and fails loudly otherwise; the logs are
# <build>/peers-configure.log and <build>/peers-build.log.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
only=impi,ompi5,mpich5
prefix=$root/build-peers-
jobs=$(nproc)
usage() {
  sed -n '/^#   bench\/peers/,/^#   --jobs/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --only) only=${2:?}; shift 2 ;;
    --prefix) prefix=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "build_peers: unknown argument '$1'" >&2; usage ;;
  esac
done
peers_root=${SHARC_PEERS_DIR:-$HOME/.cache/sharc/peers}
IFS=, read -r -a names <<<"$only"
for name in "${names[@]}"; do
  case $name in
    impi | ompi5 | mpich5) ;;
    *) echo "build_peers: unknown build '$name' (impi, ompi5, mpich5)" >&2; exit 2 ;;
  esac
  (
    # shellcheck source=peers_env.sh
    source "$here/peers_env.sh" "$name"
    b=$prefix$name
    ccl=()
    if [ "$name" = impi ] && [ -e "$peers_root/ccl/include/oneapi/ccl.hpp" ]; then
      ccl=(-DSHARC_BENCH_CCL_ROOT="$peers_root/ccl")
    fi
    echo "build_peers: $name: $b (mpicc: $peer_dir/bin/mpicc${ccl:+, oneCCL: $peers_root/ccl})"
    # MPI_C_COMPILER alone would keep a cached MPI of an earlier configure
    # with another compiler: start the MPI search anew
    rm -f "$b/CMakeCache.txt"
    mkdir -p "$b"
    cmake -S "$root" -B "$b" -DCMAKE_BUILD_TYPE=Release -DSHARC_WITH_CUDA=OFF \
      -DSHARC_BUILD_TESTS=OFF -DSHARC_WERROR=ON \
      -DMPI_C_COMPILER="$peer_dir/bin/mpicc" "${ccl[@]}" >"$b/peers-configure.log" 2>&1 ||
      { tail -20 "$b/peers-configure.log" >&2; echo "build_peers: $name: configure failed ($b/peers-configure.log)" >&2; exit 1; }
    grep -E "sharc-bench: (MPI|oneCCL)" "$b/peers-configure.log" | sed 's/^/  /'
    mpi_inc=$(sed -n 's/^MPI_C_HEADER_DIR:PATH=//p' "$b/CMakeCache.txt")
    if [ "$mpi_inc" != "$peer_dir/include" ] ||
      ! grep -q "sharc-bench: MPI backend on" "$b/peers-configure.log"; then
      echo "build_peers: $name: CMake did not take $peer_dir's MPI (MPI_C_HEADER_DIR=$mpi_inc)" >&2
      exit 1
    fi
    cmake --build "$b" -j "$jobs" --target sharc-bench sharcrun >"$b/peers-build.log" 2>&1 ||
      { grep -E "error|Error" "$b/peers-build.log" | head -20 >&2; echo "build_peers: $name: build failed ($b/peers-build.log)" >&2; exit 1; }
    echo "  built $b/bench/sharc-bench; links $(ldd "$b/bench/sharc-bench" | awk '/libmpi\.so|libccl\.so/ {printf "%s ", $3}')"
  )
done
echo "build_peers: done"

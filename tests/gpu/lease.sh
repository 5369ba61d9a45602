#!/usr/bin/env bash
# lease.sh - tests/gpu/device_run.sh for a GPU machine lent for minutes:
# the build is made on a CPU machine with the CUDA toolkit (here), packed
# with the shared libraries the GPU machine may lack, and the GPU machine
# only unpacks it and runs the checks, each stage under a deadline so that
# the logs come back inside the lease. The first H100 run (2026-11-27,
# bench/results/gpu_h100_first) was made this way: 15 minutes of device
# time in all, none spent building.
#
#   bash tests/gpu/lease.sh pack     on the CPU machine: configures and
#                                    builds build-gpu (CUDA_ARCHS, default
#                                    90), then writes .devcarry/bundle.tar.xz
#                                    (about 9 MB): the build without its
#                                    objects and debug info, and OpenBLAS
#                                    with its Fortran runtime (.devlibs)
#   bash tests/gpu/lease.sh run      on the GPU machine, in the repository
#                                    (the same commit): unpacks the bundle,
#                                    then device_run.sh's tests stage and
#                                    bench stage into $OUT (default gpu-out)
#
# Carry .devcarry to the GPU machine (it is ignored by git). Variables for
# `run`: TESTS_S and BENCH_S, each stage's deadline in seconds (default 220
# and 180), CTEST_JOBS (default 4: the gpu tests share the GPU, several at
# a time), and those of device_run.sh (GPU_TESTS, SHARC_GPU_BIG, ...).
# The build's paths are absolute: when the repository is elsewhere on the
# GPU machine, `run` links (or, failing that, bind-mounts) the packed
# source path to it. The build leaves out hwloc, verbs and sharc-bench's MPI
# backend (their libraries need not be there); OpenBLAS comes from this
# machine, cuBLAS and the CUDA runtime from the GPU machine's toolkit (or
# its Python nvidia-* packages).
set -u
cd "$(dirname "$0")/../.." || exit 1
root=$(pwd -P)
build=build-gpu
bundle=.devcarry/bundle.tar.xz

pack() {
  local archs=${CUDA_ARCHS:-90} jobs=${JOBS:-$(nproc)} stage lib
  rm -rf "$build"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSHARC_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" \
    -DSHARC_WITH_HWLOC=OFF -DSHARC_WITH_IB=OFF -DSHARC_BENCH_MPI=OFF \
    >/dev/null || return 1
  cmake --build "$build" -j"$jobs" >/dev/null || {
    echo "lease.sh: the build failed (cmake --build $build)" >&2
    return 1
  }
  [ -x "$build/models/sharc-train" ] || {
    echo "lease.sh: no sharc-train in $build: install libopenblas-dev and zlib1g-dev" >&2
    return 1
  }
  stage=$(mktemp -d "${TMPDIR:-/tmp}/lease.XXXXXX") || return 1
  mkdir -p "$stage/.devlibs"
  cp -a "$build" "$stage/"
  find "$stage/$build" -name '*.o' -delete
  find "$stage/$build" -type f -perm -u+x -exec sh -c \
    'for f; do [ "$(head -c4 "$f" | tail -c3)" = ELF ] && strip --strip-debug "$f"; done' _ {} +
  find "$stage/$build" -name '*.so*' -type f -exec strip --strip-debug {} +
  for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
    path=$(ldd "$build/models/sharc-train" | awk -v l="$lib" '$1 == l {print $3}')
    [ -n "$path" ] && cp -L "$path" "$stage/.devlibs/"
  done
  mkdir -p .devcarry "$(git rev-parse --git-path info)"
  grep -qx '/.devcarry/' "$(git rev-parse --git-path info/exclude)" 2>/dev/null ||
    echo '/.devcarry/' >>"$(git rev-parse --git-path info/exclude)"
  tar -C "$stage" -cf - "$build" .devlibs | xz -T0 -6 >"$bundle" || return 1
  rm -rf "$stage"
  echo "lease.sh: $bundle ($(du -h "$bundle" | cut -f1)) for $(git describe --always --dirty), CUDA archs $archs, source path $root"
  echo "lease.sh: on the GPU machine, carry .devcarry and run: bash tests/gpu/lease.sh run"
}

run() {
  local src nv
  [ -f "$bundle" ] || {
    echo "lease.sh: no $bundle: run 'bash tests/gpu/lease.sh pack' on a machine with the CUDA toolkit, and carry .devcarry" >&2
    return 1
  }
  tar -xJf "$bundle" || return 1
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  if [ -n "$src" ] && [ "$src" != "$root" ]; then
    if [ ! -e "$src" ]; then
      mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
    elif [ "$(cd "$src" && pwd -P)" != "$root" ]; then
      mount --bind "$root" "$src"
    fi || {
      echo "lease.sh: the build expects its source at $src; could not link it to $root" >&2
      return 1
    }
  fi
  nv=$(python3 -c 'import nvidia, glob, os; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/**/lib*.so.[0-9]*", recursive=True)})))' 2>/dev/null)
  export LD_LIBRARY_PATH=$root/.devlibs:/usr/local/cuda/lib64:/usr/local/cuda/lib${nv:+:$nv}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OUT=${OUT:-gpu-out}
  mkdir -p "$OUT"
  ldd "$build/models/sharc-train" "$build/bench/sharc-bench" >"$OUT/ldd.txt" 2>&1
  if grep -q 'not found' "$OUT/ldd.txt"; then
    echo "lease.sh: missing libraries:" >&2
    grep 'not found' "$OUT/ldd.txt" >&2
  fi
  local rc=0
  STAGE=tests BUILD=$build DEADLINE=${TESTS_S:-220} CTEST_JOBS=${CTEST_JOBS:-4} \
    bash tests/gpu/device_run.sh >"$OUT/tests_console.log" 2>&1 || rc=1
  STAGE=bench BUILD=$build DEADLINE=${BENCH_S:-180} \
    bash tests/gpu/device_run.sh >"$OUT/bench_console.log" 2>&1 || rc=1
  cat "$OUT"/summary_*.txt
  return $rc
}

case ${1:-} in
pack) pack ;;
run) run ;;
*)
  echo "usage: bash tests/gpu/lease.sh pack|run (see its header)" >&2
  exit 2
  ;;
esac

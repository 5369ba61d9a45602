#!/usr/bin/env bash
# compile_nvidia.sh - compile-only check that the NCCL examples (ex_*.c) build
# unchanged against NVIDIA's own nccl.h and cuda_runtime.h. Nothing is linked
# or run.
#
# Usage: bash tests/nccl/compile_nvidia.sh [CUDA_INCLUDE_DIR]
#   include dir: first argument, else $CUDA_HOME/include, else
#   /usr/local/cuda/include. CC overrides the compiler (default cc).
# Exit: 0 all compile, 1 some failed, 77 (SKIP) headers not found.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ $# -ge 1 ] && [ -n "$1" ]; then
  inc="$1"
elif [ -n "${CUDA_HOME:-}" ]; then
  inc="$CUDA_HOME/include"
else
  inc=/usr/local/cuda/include
fi
cc="${CC:-cc}"

for h in nccl.h cuda_runtime.h; do
  if [ ! -f "$inc/$h" ]; then
    echo "SKIP: $inc/$h not found"
    exit 77
  fi
done

fail=0
n=0
for f in "$here"/ex_*.c; do
  [ -e "$f" ] || continue
  n=$((n + 1))
  if out="$("$cc" -std=c11 -Wall -Wextra -Werror -fsyntax-only \
      -I"$inc" "$f" 2>&1)"; then
    echo "OK   $(basename "$f") (against $inc/nccl.h)"
  else
    echo "FAIL $(basename "$f")"
    printf '%s\n' "$out" | sed 's/^/    /'
    fail=1
  fi
done
if [ "$n" -eq 0 ]; then
  echo "FAIL: no ex_*.c in $here"
  exit 1
fi
exit "$fail"

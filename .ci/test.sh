#!/usr/bin/env bash
# The whole test suite: install what is missing, build (plain and with
# AddressSanitizer + UndefinedBehaviorSanitizer), run every CTest test in both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps.sh
jobs=$(nproc)
status=0
echo "=== format (.clang-format, STYLE.md 12) ==="
if git ls-files '*.c' '*.h' '*.cpp' | xargs clang-format --dry-run -Werror; then
  echo "format: clean"
else
  echo "format: run 'git ls-files '*.c' '*.h' '*.cpp' | xargs clang-format -i'"
  status=1
fi
for variant in plain asan; do
  dir=build-test-$variant
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARC_WERROR=ON)
  [ "$variant" = asan ] && flags+=(-DSHARC_SANITIZE=ON)
  cmake -S . -B "$dir" "${flags[@]}" >/dev/null
  cmake --build "$dir" -j"$jobs"
  echo "=== ctest ($variant) ==="
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  (cd "$dir" && ctest --output-on-failure -j1 --timeout 600) || status=1
done
exit $status

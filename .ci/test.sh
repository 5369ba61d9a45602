#!/usr/bin/env bash
# The whole test suite: install what is missing, build (plain and with
# AddressSanitizer + UndefinedBehaviorSanitizer), run every CTest test in both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/deps.sh
jobs=$(nproc)
status=0
total_pass=0 total_fail=0 total_skip=0
echo "=== format (.clang-format, STYLE.md 12) ==="
if git ls-files '*.c' '*.h' '*.cpp' | xargs clang-format --dry-run -Werror; then
  echo "format: clean"
else
  echo "format: run 'git ls-files '*.c' '*.h' '*.cpp' | xargs clang-format -i'"
  status=1
fi
echo "=== fuzz (tests/fuzz: regression inputs, then 25 s per target) ==="
if FUZZ_DIR=build-fuzz bash tests/fuzz/run_fuzz.sh 25; then
  echo "fuzz: no findings"
else
  echo "fuzz: findings or a failed build; see build-fuzz/*.log and build-fuzz/artifacts/"
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
  log="$dir/ctest.log"
  set +e
  (cd "$dir" && ctest --output-on-failure -j1 --timeout 900) 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" -eq 0 ] || status=1
  skipped=$(grep -c -- "\*\*\*Skipped" "$log" || true)
  total_skip=$((total_skip + skipped))
  # "100% tests passed, 0 tests failed out of 45"
  line=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$log" | tail -1)
  failed=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/')
  total=$(echo "$line" | sed -E 's/.* out of ([0-9]+).*/\1/')
  if [ -n "$line" ]; then
    total_pass=$((total_pass + total - failed - skipped))
    total_fail=$((total_fail + failed))
  else
    status=1
  fi
done
echo "ci: plain and asan builds, every test of each (a skip says why: root, a device, or MPI, which sanitizer builds leave out)"
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
exit $status

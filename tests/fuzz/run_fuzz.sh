#!/usr/bin/env bash
# run_fuzz.sh - build the libFuzzer targets of tests/fuzz with clang
# (-fsanitize=fuzzer,address,undefined), replay every regression input in
# tests/fuzz/regress/<target>/, then fuzz each target for SECONDS.
#
#   tests/fuzz/run_fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS defaults to 20 per target; TARGET is fuzz_bootstrap, fuzz_env,
# fuzz_topo_xml or fuzz_ckpt_meta (default: all). Work goes to $FUZZ_DIR
# (default build-fuzz/ at the repository root): the binaries, a corpus per target (seeds from
# tests/fuzz/seeds/<target>/, from the target itself when it has a
# FUZZ_SEED_MAIN part, and for fuzz_topo_xml the exports in tests/topo/xml/),
# and artifacts/<target>/ for any crashing input. FUZZ_CC picks the
# compiler (default clang). The exit status is 1 when a regression input
# fails or the fuzzer finds anything, 2 when a target cannot be built, 0
# otherwise. A finding is fixed, then its input is copied into
# regress/<target>/ so it is replayed on every later run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_bootstrap fuzz_env fuzz_topo_xml fuzz_ckpt_meta)
out=${FUZZ_DIR:-$root/build-fuzz}
cc=${FUZZ_CC:-clang}
case $secs in '' | *[!0-9]*)
  echo "run_fuzz: SECONDS must be a number, got '$secs'" >&2
  exit 2
  ;;
esac

if ! command -v "$cc" >/dev/null; then
  echo "run_fuzz: $cc not found; install clang (Debian: apt-get install clang)" >&2
  exit 2
fi
mkdir -p "$out"
incs=(-I"$root/include" -I"$root/comm/core" -I"$root/comm/net"
  -I"$root/kernels" -I"$root/topo" -I"$root/shard")
flags=(-g -O1 -std=c11 -D_GNU_SOURCE -fno-omit-frame-pointer
  "-fsanitize=fuzzer,address,undefined" -fno-sanitize-recover=undefined
  -Wall -Wextra -Wno-unused-parameter -Werror "${incs[@]}")
core=("$root/comm/core/core.c")
boot=("$root/comm/net/bootstrap.c" "$root/comm/net/bootstrap_env.c" "$root/comm/net/net.c")
hwloc_flags=()
if pkg-config --exists hwloc 2>/dev/null; then
  read -r -a hwloc_flags <<<"-DSHARC_HAVE_HWLOC $(pkg-config --cflags --libs hwloc)"
fi

srcs=()
build() { # build TARGET: the fuzzer binary in $out (sets srcs)
  local t=$1
  srcs=()
  case $t in
  fuzz_bootstrap | fuzz_env) srcs=("${boot[@]}" "${core[@]}") ;;
  fuzz_ckpt_meta) srcs=("$root/shard/ckpt_meta.c") ;;
  fuzz_topo_xml)
    if [ ${#hwloc_flags[@]} -eq 0 ]; then
      echo "run_fuzz: fuzz_topo_xml needs hwloc (libhwloc-dev); skipped"
      return 3
    fi
    srcs=("$root/topo/topo.c" "$root/topo/place.c" "$root/topo/topo_sys.c"
      "${core[@]}")
    ;;
  *)
    echo "run_fuzz: unknown target $t" >&2
    return 2
    ;;
  esac
  "$cc" "${flags[@]}" -o "$out/$t" "$here/$t.c" "${srcs[@]}" \
    "${hwloc_flags[@]}" -lpthread -lm
}

status=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=suppressions=$here/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}
for t in "${targets[@]}"; do
  echo "=== $t: build ==="
  rc=0
  build "$t" || rc=$?
  if [ $rc -eq 3 ]; then continue; fi
  if [ $rc -ne 0 ]; then
    echo "run_fuzz: building $t failed" >&2
    exit 2
  fi
  corpus=$out/corpus/$t art=$out/artifacts/$t/
  mkdir -p "$corpus" "$art"
  seeds=()
  [ -d "$here/seeds/$t" ] && seeds+=("$here/seeds/$t")
  if grep -q FUZZ_SEED_MAIN "$here/$t.c"; then # seeds that follow the code
    mkdir -p "$out/seeds/$t"
    "$cc" -std=c11 -D_GNU_SOURCE -DFUZZ_SEED_MAIN "${incs[@]}" \
      -o "$out/${t}_seeds" "$here/$t.c" "${srcs[@]}" -lpthread
    "$out/${t}_seeds" "$out/seeds/$t"
    seeds+=("$out/seeds/$t")
  fi
  [ "$t" = fuzz_topo_xml ] && seeds+=("$root/tests/topo/xml")
  opts=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1
    "-artifact_prefix=$art")
  [ -f "$here/$t.dict" ] && opts+=("-dict=$here/$t.dict")
  case $t in
  fuzz_topo_xml) opts+=(-max_len=65536) ;;
  *) opts+=(-max_len=4096) ;;
  esac

  regress=()
  if [ -d "$here/regress/$t" ]; then
    while IFS= read -r -d '' f; do regress+=("$f"); done < <(
      find "$here/regress/$t" -type f ! -name '*.md' -print0 | sort -z
    )
  fi
  if [ ${#regress[@]} -gt 0 ]; then
    echo "=== $t: ${#regress[@]} regression inputs ==="
    if ! "$out/$t" "${opts[@]}" "${regress[@]}" >"$out/$t.regress.log" 2>&1; then
      tail -40 "$out/$t.regress.log"
      echo "run_fuzz: $t FAILS a regression input (log: $out/$t.regress.log)"
      status=1
      continue
    fi
  fi

  echo "=== $t: fuzzing ${secs} s ==="
  before=$(find "$art" -type f | wc -l)
  rc=0
  "$out/$t" "${opts[@]}" -max_total_time="$secs" "$corpus" "${seeds[@]}" \
    >"$out/$t.log" 2>&1 || rc=$?
  after=$(find "$art" -type f | wc -l)
  grep -E "^stat::number_of_executed_units|^#[0-9]+ +DONE" "$out/$t.log" | tail -2 || true
  if [ $rc -ne 0 ] || [ "$after" -gt "$before" ]; then
    tail -60 "$out/$t.log"
    echo "run_fuzz: $t found a problem (exit $rc); input(s) in $art"
    status=1
  else
    echo "run_fuzz: $t: no findings in ${secs} s ($(find "$corpus" -type f | wc -l) corpus inputs)"
  fi
done
exit $status

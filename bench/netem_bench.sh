#!/usr/bin/env bash
# netem_bench.sh - flat ring vs hierarchical collectives across slow links:
# a benchmark (not a test). Hosts are network namespaces on this machine
# (tests/mp/hosts_test.sh); each host's link gets a tc qdisc that slows it
# (default `netem rate 10gbit delay 50us`), so traffic between hosts is
# slower than shared memory within one, as between real machines. Where
# the kernel has no sch_netem, --delay adds the propagation delay that tc
# cannot (hosts_test.sh --delay: tests/mp/wire_delay holds every packet
# between hosts), and --link gives the rate with tbf.
#
#   bench/netem_bench.sh [--build DIR] [--layouts 2x2,2x3] [--colls LIST]
#       [--algos ring,hier] [--link "QDISC"] [--delay US] [--no-fallback]
#       [--args "SHARC-BENCH FLAGS"] [--out DIR] [--tag NAME] [--timeout S]
#
#   --build     build folder holding bench/sharc-bench        [build]
#   --layouts   HOSTSxRANKS, comma separated                  [2x2,2x3]
#   --colls     sharc-bench collectives                       [all_reduce,all_gather]
#   --algos     SHARC_ALGO values; the first is the baseline  [ring,hier]
#   --link      tc qdisc on each host's link (egress), none: as is
#                                                             [netem rate 10gbit delay 50us]
#   --delay     one-way delay of every link between hosts (microseconds),
#               added by wire_delay after the qdisc (and on top of a
#               netem delay); needs BUILD/tests/mp/wire_delay (or
#               SHARC_WIRE_DELAY=PATH). For example --link "tbf rate 10gbit
#               burst 256kb latency 50ms" --delay 50 is 10 Gbit/s with 50
#               us each way (tbf's burst at least 64kb: the links' MTU is
#               65000 with --delay)                           [none]
#   --no-fallback  fail when the qdisc is refused; by default a refused
#               netem (kernel without sch_netem) falls back to
#               `tbf rate <its rate> burst 128kb latency 50ms`: the same
#               rate and, without --delay, no added delay; the output and
#               summary say so
#   --args      flags for sharc-bench  [-b 64K -e 64M -f 4 -n 5 -w 2 -c 1 --limits 0]
#   --out       result folder                                 [bench/results]
#   --tag       suffix of the result files (run1, run2, ...)  [run1]
#   --timeout   seconds per sharc-bench job                   [600]
#
# For each layout, collective and algorithm it runs
#   SHARC_ALGO=<algo> sharc-bench <coll> <args> -J <out>/netem_<layout>_<coll>_<algo>_<tag>.json
# with rank 0's table in the matching .txt (all ranks' logs go to a temporary
# folder, shown when a job fails), then prints, and writes to
# <out>/netem_summary_<tag>.txt, a table per layout and collective: size,
# busbw of the baseline algorithm and of each other one (out-of-place and
# in-place, GB/s) and their ratio (> 1: faster than the baseline). The
# summary starts with the machine (CPU model, cores, kernel, load), the
# link and the commands. Needs root; exit 77 (with a line why) when hosts
# cannot be made here. Run it on an otherwise quiet machine: with 2 cores,
# anything else running moves the numbers.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../tests/mp/hosts_test.sh
. "$root/tests/mp/hosts_test.sh"

build=$root/build layouts=2x2,2x3 colls=all_reduce,all_gather algos=ring,hier
link="netem rate 10gbit delay 50us" fallback=1 out=$root/bench/results tag=run1
delay=""
args="-b 64K -e 64M -f 4 -n 5 -w 2 -c 1 --limits 0" secs=600
usage() {
  sed -n '/^#   bench/,/^#   --timeout/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=${2:?}; shift 2 ;;
    --layouts) layouts=${2:?}; shift 2 ;;
    --colls) colls=${2:?}; shift 2 ;;
    --algos) algos=${2:?}; shift 2 ;;
    --link) link=${2:?}; shift 2 ;;
    --delay) delay=${2:?}; shift 2 ;;
    --no-fallback) fallback=0; shift ;;
    --args) args=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --tag) tag=${2:?}; shift 2 ;;
    --timeout) secs=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "netem_bench: unknown argument '$1'" >&2; usage ;;
  esac
done
bench=$build/bench/sharc-bench
[ -x "$bench" ] || { echo "netem_bench: no $bench; build first or pass --build DIR" >&2; exit 2; }
HOSTS_WIRE_DELAY=${SHARC_WIRE_DELAY:-$build/tests/mp/wire_delay}
if [ -n "$delay" ] && [ ! -x "$HOSTS_WIRE_DELAY" ]; then
  echo "netem_bench: --delay needs $HOSTS_WIRE_DELAY (make wire_delay in $build) or SHARC_WIRE_DELAY=PATH" >&2
  exit 2
fi
command -v python3 >/dev/null || { echo "netem_bench: python3 is needed for the comparison table" >&2; exit 2; }
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
IFS=, read -r -a layout_list <<<"$layouts"
IFS=, read -r -a coll_list <<<"$colls"
IFS=, read -r -a algo_list <<<"$algos"
read -r -a bench_args <<<"$args"

# Layout "HxR" -> host map (2x2 -> aabb).
layout_map() {
  local h=${1%x*} r=${1#*x} abc=abcdefgh map="" i j
  if ! [[ $1 =~ ^[2-8]x[1-9][0-9]?$ ]]; then
    echo "netem_bench: layout '$1' wants HOSTSxRANKS (2 to 8 hosts), e.g. 2x2" >&2
    return 2
  fi
  for ((i = 0; i < h; i++)); do
    for ((j = 0; j < r; j++)); do map+=${abc:i:1}; done
  done
  echo "$map"
}

# tbf with the rate of a netem spec: the same bandwidth, no delay.
fallback_of() {
  local rate
  rate=$(sed -nE 's/.*rate ([0-9.]+[a-zA-Z]*).*/\1/p' <<<"$1")
  [ -n "$rate" ] && echo "tbf rate $rate burst 128kb latency 50ms"
}

summary=$out/netem_summary_$tag.txt
logs=$(mktemp -d "${TMPDIR:-/tmp}/netem_bench.XXXXXX") || exit 2
HOSTS_TMP=$logs # removed with the hosts on every exit path
trap 'rm -rf "$HOSTS_TMP"' EXIT
{
  echo "# netem_bench $tag: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# machine: $(lscpu | sed -nE 's/^Model name: +//p'), $(nproc) cores, kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# sharc: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  echo "# command: bench/netem_bench.sh --build $build --layouts $layouts --colls $colls --algos $algos --link '$link'${delay:+ --delay $delay} --args '$args' --tag $tag"
} | tee "$summary"

status=0
for lay in "${layout_list[@]}"; do
  map=$(layout_map "$lay") || exit 2
  used=$link
  [ "$link" = none ] && used=""
  hosts_up "$map" "$used" "$delay"
  rc=$?
  if [ $rc -eq 2 ] && [ $fallback -eq 1 ] && [[ $link == netem* ]] && [ -n "$(fallback_of "$link")" ]; then
    used=$(fallback_of "$link")
    if [ -n "$delay" ]; then
      echo "# link: '$link' refused by this kernel (no sch_netem); using '$used' instead: same rate, and --delay $delay us each way from wire_delay, NOT the netem delay" | tee -a "$summary"
    else
      echo "# link: '$link' refused by this kernel (no sch_netem); using '$used' instead: same rate, NO added delay (--delay US adds one)" | tee -a "$summary"
    fi
    hosts_up "$map" "$used" "$delay"
    rc=$?
  fi
  [ $rc -eq 0 ] || exit $rc
  trap 'hosts_down; rm -rf "$HOSTS_TMP"' EXIT
  added="no added delay"
  [ -n "$delay" ] && added="$delay us added each way (wire_delay)"
  echo "# layout $lay ($map): ${lay%x*} hosts of ${lay#*x} ranks, link qdisc on each host's eth0: ${used:-none (veth as is)}, $added" | tee -a "$summary"
  for coll in "${coll_list[@]}"; do
    for algo in "${algo_list[@]}"; do
      name=netem_${lay}_${coll}_${algo}_$tag
      echo "# run: SHARC_ALGO=$algo sharc-bench $coll $args -J $name.json" | tee -a "$summary"
      mkdir -p "$logs/$name"
      SHARC_ALGO=$algo hosts_job "$logs/$name" "$secs" "$bench" "$coll" \
        "${bench_args[@]}" -T "$secs" -J "$out/$name.json"
      jrc=$?
      {
        echo "# $name: $map, link qdisc '${used:-none}', delay ${delay:-0} us, SHARC_ALGO=$algo"
        echo "# sharc-bench $coll $args -J $name.json"
        cat "$logs/$name/0.log"
      } >"$out/$name.txt"
      if [ $jrc -ne 0 ]; then
        echo "netem_bench: $name failed (status $jrc):"
        for f in "$logs/$name"/*.log; do tail -5 "$f" | sed "s|^|[$(basename "$f" .log)] |"; done
        status=1
      fi
    done
    python3 - "$out" "$lay" "$coll" "$tag" "${algo_list[@]}" <<'EOF' | tee -a "$summary"
import json, os, sys
out, lay, coll, tag, algos = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
rows = {}
for a in algos:
    p = os.path.join(out, "netem_%s_%s_%s_%s.json" % (lay, coll, a, tag))
    try:
        with open(p) as f:
            rows[a] = {r["size"]: r for r in json.load(f)["results"]}
    except (OSError, ValueError, KeyError) as e:
        print("# %s %s: no results for %s (%s)" % (lay, coll, a, e))
        rows[a] = {}
base = algos[0]
sizes = sorted(rows[base])
head = "%10s" % "size"
for a in algos:
    head += "  %10s" % (a[:10])
for a in algos[1:]:
    head += "  %10s" % ("%s/%s" % (a, base))[:10]
print("# %s %s: busbw (GB/s) out-of-place | in-place" % (lay, coll))
print(head + "  |" + head[10:])
for s in sizes:
    line = "%10d" % s
    for key in ("busbw", "inplace_busbw"):
        vals = [rows[a].get(s, {}).get(key) for a in algos]
        for v in vals:
            line += "  %10s" % ("-" if v is None else "%.3f" % v)
        for v in vals[1:]:
            b = vals[0]
            line += "  %10s" % ("-" if not v or not b else "%.2f" % (v / b))
        if key == "busbw":
            line += "  |"
    print(line)
EOF
  done
  hosts_down
done
echo "# done $(date -u '+%H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$summary"
echo "# results in $out/netem_*_$tag.{json,txt}; summary $summary"
exit $status

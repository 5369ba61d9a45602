#!/usr/bin/env bash
# sharc-topo's command line, one case per CTest test (topo_tests.cmake):
#   sharc_topo_test.sh CASE SHARC_TOPO SHARCRUN XML_DIR HAVE_HWLOC(ON|OFF)
# Cases that read an hwloc XML export exit 77 (skipped) in a build without
# hwloc, after checking that sharc-topo refuses the file with a message.
set -u
case=$1 topo=$2 run=$3 xml=$4 hwloc=$5
dgx2=$xml/nvidia-dgx2-16gpu.xml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err
unset SHARC_TOPO_FILE

fail() {
  echo "FAIL (topo.cli.$case): $*"
  echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"
  exit 1
}
# runs sharc-topo with the given arguments; rc holds its exit status
topo() { "$topo" "$@" >"$out" 2>"$err"; rc=$?; }
expect_rc() { [ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1"; }
has() { grep -q -- "$1" "${2:-$out}" || fail "no '$1' in ${2:-stdout}"; }
need_hwloc() {
  [ "$hwloc" = ON ] && return
  topo --xml "$dgx2"
  expect_rc 1
  has "without hwloc" "$err"
  echo "SKIP: sharc-topo --xml needs hwloc (this build has none); it refuses the file as it should"
  exit 77
}

case $case in
summary) # the DGX-2: 16 GPUs on 2 NUMA nodes, 8 per socket in the ring
  need_hwloc
  topo --xml "$dgx2"
  expect_rc 0
  has "machine: 2 packages, 2 NUMA nodes, 4 cores, 4 PUs, 16 GPUs, 0 NICs, 14 PCI switches, 12 NVSwitches"
  has "NVIDIA DGX-2H"
  has "^  16 GPUs on 2 NUMA nodes (NUMA 0: 8, NUMA 1: 8)$"
  [ "$(grep -c 'Tesla V100-SXM3-32GB-H' "$out")" -eq 16 ] || fail "16 GPU rows expected"
  has "GPU ring (place_ring_order"
  has "2 package crossings"
  has "^  gpu0 gpu1 gpu2 gpu3 gpu4 gpu5 gpu6 gpu7 gpu8 gpu9 gpu10 gpu11 gpu12 gpu13 gpu14 gpu15$"
  has "GPU tree (place_tree, root gpu0"
  has "6 NVSwitches:150000 in all"
  # the same through SHARC_TOPO_FILE
  SHARC_TOPO_FILE=$dgx2 "$topo" >"$tmp/env" 2>"$err" || fail "SHARC_TOPO_FILE run failed"
  cmp -s "$out" "$tmp/env" || fail "SHARC_TOPO_FILE output differs from --xml"
  ;;
nics) # nearest NICs on the two-socket server with InfiniBand
  need_hwloc
  topo --xml "$xml/32em64t-2n8c2t-pci-normalio.xml"
  expect_rc 0
  has "0000:84:00.0 .*mlx5_0 (PIX"
  has "0000:83:00.0 .*mlx5_0 (PHB"
  has "0000:03:00.0 .*mlx5_0 (SYS"
  ;;
dot) # a Graphviz graph: clusters, 16 GPUs, ring edges
  need_hwloc
  topo --xml "$dgx2" --dot
  expect_rc 0
  [ "$(head -1 "$out")" = "graph topo {" ] || fail "does not start as a graph"
  [ "$(tail -1 "$out")" = "}" ] || fail "does not end the graph"
  has "subgraph cluster_pkg1"
  has "subgraph cluster_numa0"
  [ "$(grep -c '^      gpu[0-9]* \[label' "$out")" -eq 16 ] || fail "16 GPU nodes expected"
  [ "$(grep -c 'color=red' "$out")" -eq 16 ] || fail "16 ring edges expected"
  if command -v dot >/dev/null; then
    dot -Tsvg "$out" >"$tmp/g.svg" 2>"$err" || fail "dot rejects the graph"
  fi
  ;;
badargs) # usage errors exit 2
  topo --bogus
  expect_rc 2
  has "unknown argument '--bogus'" "$err"
  has "usage: sharc-topo" "$err"
  topo --xml
  expect_rc 2
  has "missing FILE" "$err"
  topo --help
  expect_rc 0
  has "usage: sharc-topo"
  ;;
missing) # a missing file exits 1 saying what to do
  topo --xml /nonexistent/topo.xml
  expect_rc 1
  has "/nonexistent/topo.xml" "$err"
  has "lstopo --of xml" "$err"
  [ ! -s "$out" ] || fail "output on error"
  SHARC_TOPO_FILE=/nonexistent/topo.xml "$topo" >"$out" 2>"$err"; rc=$?
  expect_rc 1
  has "SHARC_TOPO_FILE=/nonexistent/topo.xml" "$err"
  ;;
garbage) # a file that is no hwloc export exits 1
  printf 'not a topology\n\001\002' >"$tmp/junk.xml"
  topo --xml "$tmp/junk.xml"
  expect_rc 1
  has "not an hwloc XML export" "$err"
  if [ "$hwloc" = ON ]; then # looks like one, but cut short
    head -c 3000 "$dgx2" >"$tmp/cut.xml"
    topo --xml "$tmp/cut.xml"
    expect_rc 1
    has "hwloc cannot" "$err"
  fi
  ;;
live) # this machine
  topo
  expect_rc 0
  grep -Eq "^machine: [1-9][0-9]* packages?, [1-9][0-9]* NUMA nodes?, [1-9]" "$out" || fail "no machine line"
  has "^host: "
  topo --dot
  expect_rc 0
  has "graph topo {"
  ;;
job) # under the launcher: 4 ranks describe themselves, rank 0 prints them
  "$run" -n 4 --timeout 100 "$topo" >"$out" 2>"$err"; rc=$?
  expect_rc 0
  has "^\[0\] ranks (4 on 1 host;"
  for r in 0 1 2 3; do
    grep -Eq "^\[0\]   $r +0 +" "$out" || fail "no row for rank $r"
  done
  has "^\[0\] rank ring (place_ring_order"
  has "^\[0\] rank tree (place_tree, root 0"
  [ "$(grep -c '^\[[123]\]' "$out")" -eq 0 ] || fail "ranks other than 0 printed"
  ;;
*)
  echo "unknown case $case"; exit 2 ;;
esac
echo "topo.cli.$case: ok"

#!/bin/sh
# plan_topo.sh BUILD XML_DIR HAVE_HWLOC(ON|OFF) - sharc-plan --topology on
# the real machines' hwloc exports the topology tests use (tests/topo/xml):
# what each node gives (GPUs, intra class and bandwidth, NICs, GPU model
# numbers) in the header and in the JSON cluster; flags given beside the
# export win; bad files exit 2 with a message saying what is wrong. Exits
# 77 (skipped) without the exports, or in a build without hwloc after
# checking that the file is refused with a message.
set -u
P="$1/plan/sharc-plan"
X=$2
hwloc=${3:-ON}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
dgx2=$X/nvidia-dgx2-16gpu.xml
p8=$X/power8gpudistances.xml
ib3=$X/24em64t-2n6c2t-pci.xml
mix=$X/32em64t-2n8c2t-pci-normalio.xml
for f in "$dgx2" "$p8" "$ib3" "$mix"; do
  if [ ! -r "$f" ]; then
    echo "SKIP: no hwloc export at $f (tests/topo/xml of the sources)"
    exit 77
  fi
done
if [ "$hwloc" != ON ]; then
  "$P" --topology "$dgx2" >"$T/out" 2>&1
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q "without hwloc" "$T/out"; then
    echo "FAIL: a build without hwloc exited $rc on --topology:"
    cat "$T/out"
    exit 1
  fi
  echo "SKIP: --topology needs hwloc (this build has none); it refuses the file as it should"
  exit 77
fi

# node FILE ARGS... : runs sharc-plan on the export, table in $T/out and
# the JSON in $T/p.json
node() {
  f=$1
  shift
  if ! "$P" --model gpt:gpt2-124m --top 3 --topology "$f" "$@" \
    --json "$T/p.json" >"$T/out" 2>&1; then
    echo "FAIL: sharc-plan --topology $f $* exited nonzero:"
    cat "$T/out"
    fail=1
  fi
}
# has TEXT: the output holds this line (fixed string, whole line)
has() {
  if ! grep -qxF -- "$1" "$T/out"; then
    echo "FAIL: no line '$1' in:"
    cat "$T/out"
    fail=1
  fi
}
# cluster KEY=VALUE...: the JSON's cluster holds these numbers
cluster() {
  if ! python3 - "$T/p.json" "$@" <<'EOF'; then
import json, sys
c = json.load(open(sys.argv[1]))["cluster"]
bad = [kv for kv in sys.argv[2:]
       if abs(c[kv.split("=")[0]] - float(kv.split("=")[1])) > 1e-4 *
       max(1.0, abs(float(kv.split("=")[1])))]
if bad:
    print("cluster", c, "differs in", bad)
    sys.exit(1)
EOF
    echo "FAIL: the JSON cluster of the run above"
    cat "$T/out"
    fail=1
  else
    echo "ok   $(head -1 "$T/out")"
  fi
}

# DGX-2H: 16 V100s on NVSwitch, 6 NVLinks of 25 GB/s each, no NIC
node "$dgx2"
has "# topology: nvidia-dgx2-16gpu.xml: 16 GPUs (Tesla V100-SXM3-32GB-H), NVSwitch, 0 NICs: inter link from --link or the default"
has "# links: intra 3 us 150 GB/s, inter 5 us 50 GB/s per NIC; 32 GiB, 52.5 TFLOP/s sustained, 900 GB/s HBM per GPU"
cluster nodes=1 gpus_per_node=16 intra_lat_us=3 intra_gbs=150 inter_gbs=50 \
  gpu_mem_gib=32 tflops=52.5 hbm_gbs=900

# POWER8 Minsky: 4 P100s, NVLink pairs (40 GB/s), the other ring edges
# through the CPUs' NVLinks (40 GB/s)
node "$p8"
has "# topology: power8gpudistances.xml: 4 GPUs (Tesla P100-SXM2-16GB), NVLink, 0 NICs: inter link from --link or the default"
grep -q "2 over the pair's NVLinks, 2 through the host" "$T/out" ||
  { echo "FAIL: power8 ring edges"; cat "$T/out"; fail=1; }
cluster gpus_per_node=4 intra_gbs=40 gpu_mem_gib=16 tflops=8.5 hbm_gbs=732

# ProLiant SL390s: 3 GPUs on PCIe (4 GB/s links), one RDMA HCA whose PCI
# link (2 GB/s) caps the default NDR rate, two Ethernet ports left out;
# the GPU (10de:06d2) is not in the table: defaults kept
node "$ib3"
has "# topology: 24em64t-2n6c2t-pci.xml: 3 GPUs (NVIDIA [10de:06d2]), PCIe, 1 RDMA NIC (mlx4_0; 2 without RDMA left out): inter 0.6667 GB/s per GPU"
grep -q "not in sharc-plan's table (NVIDIA \[10de:06d2\])" "$T/out" ||
  { echo "FAIL: unknown GPU not said"; cat "$T/out"; fail=1; }
cluster gpus_per_node=3 intra_gbs=4 inter_lat_us=5 inter_gbs=0.666667 \
  gpu_mem_gib=80 tflops=400 hbm_gbs=3350

# X9DRG-HF: two GPU models, no PCI link speed recorded (PCIe 4.0 x16
# assumed), one ConnectX-4 (no link speed: the NDR default, uncapped)
node "$mix"
has "# topology: 32em64t-2n8c2t-pci-normalio.xml: 3 GPUs (2 Tesla M2075 Dual-Slot Computing Processor Module, 1 Tesla K40m), PCIe, 1 RDMA NIC (mlx5_0; 2 without RDMA left out): inter 16.67 GB/s per GPU"
cluster gpus_per_node=3 intra_gbs=31.5 inter_gbs=16.6667 gpu_mem_gib=80

# flags beside the export win, before or after it
"$P" --gpus-per-node 8 --gpu-mem 40 --link intra:2,300 --flops 10 \
  --model gpt:gpt2-124m --topology "$dgx2" --nodes 2 --json "$T/p.json" \
  >"$T/out" 2>&1 || { echo "FAIL: overrides run"; cat "$T/out"; fail=1; }
has "#   GPUs per node: 8 (--gpus-per-node; the export has 16)"
cluster nodes=2 gpus_per_node=8 intra_lat_us=2 intra_gbs=300 gpu_mem_gib=40 \
  tflops=10 hbm_gbs=900
node "$ib3" --nic-gbps 25 --nodes 2
cluster nodes=2 inter_gbs=8.33333 intra_gbs=4
node "$ib3" --link inter:7,3
cluster inter_lat_us=7 inter_gbs=3

# with --json -, stdout is the JSON alone (the topology lines on stderr)
if ! "$P" --model cnn --topology "$dgx2" --json - 2>"$T/err" |
  python3 -c "import json,sys; assert json.load(sys.stdin)['cluster']['gpus_per_node'] == 16" ||
  ! grep -q "^# topology: nvidia-dgx2-16gpu.xml" "$T/err"; then
  echo "FAIL: --topology with --json - mixed its lines into the JSON"
  fail=1
fi

# bad files: exit 2 (never a crash) with what is wrong and what to do
sed 's/\[10de:/[1234:/g' "$ib3" >"$T/nogpu.xml"
head -c 3000 "$dgx2" >"$T/cut.xml"
printf 'not a topology\n\001\002' >"$T/junk.xml"
refuse() {
  text=$1
  shift
  "$P" "$@" >"$T/bad" 2>&1
  rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$text" "$T/bad"; then
    echo "FAIL: sharc-plan $* exited $rc, expected 2 and '$text':"
    cat "$T/bad"
    fail=1
  else
    echo "ok   $(head -1 "$T/bad")"
  fi
}
refuse "--topology $T/missing.xml: cannot open" --topology "$T/missing.xml"
refuse "is a directory; pass an hwloc XML export" --topology "$T"
refuse "is not an hwloc XML export (no <topology> element" \
  --topology "$T/junk.xml"
refuse "--topology $T/cut.xml: hwloc " --topology "$T/cut.xml"
refuse "the export has no GPU" --topology "$T/nogpu.xml"
refuse "--topology '': give the path of an hwloc XML export" --topology ""
refuse "--topology needs a value" --topology
refuse "--nic-gbps needs --topology FILE" --nic-gbps 25
refuse "--nic-gbps '0'" --topology "$dgx2" --nic-gbps 0
[ $fail = 0 ] && echo PASS || echo FAIL
exit $fail

#!/usr/bin/env bash
# device_run.sh - the GPU checks, for a machine with an NVIDIA
# GPU: nvidia-smi, a fresh build with SHARC_WITH_CUDA=ON, the gpu-labelled
# CTest tests (which must run there, not skip: test_dev_kernels and the
# staged device-memory collectives gpu.coll.n2/n3/n4, gpu.coll.tcp.n2,
# gpu.coll.hostfn.n3, the CUDA IPC path gpu.coll.ipc.n2/n3/n4 and its
# device send/recv gpu.p2p.ipc.trace.n3, the direct
# path gpu.coll.direct.n2/n3/n4, gpu.loop.direct, gpu.direct.props and the
# killed-rank gpu.kill.shm/tcp/ipc/direct from tests/mp),
# unit.test_stream_cuda (must take its
# with-a-device branch), compute-sanitizer memcheck on test_dev_kernels, and
# test_dev_kernels --big (indices past 2^31), then sharc-gpu-floor (the
# latencies of the CUDA primitives the paths use), sharc-bench on device
# memory: `all --mem cuda` with 2 and 4 ranks on the GPU, staged and with
# SHARC_CUDA_PATH=ipc and =direct (tables in bench_{cuda,ipc,direct}_n{2,4}.log, rows in the
# .json of the same names), NCCL with 1 rank
# and --compare nccl with 2 ranks (bench_nccl_*: recorded, but a failure or
# skip there does not fail the run: NCCL before 2.30 refuses 2 ranks on one
# GPU), then GPU training: sharc-train of the GPT (gpt2 shapes, bf16) with
# 1 and 2 ranks on the GPU and PyTorch FSDP2 (bench/fsdp2_gpt.py) where
# PyTorch is installed, in one file, train_compare.json
# (bench/train_compare.py). SHARC_GPU_BENCH=0 skips the bench runs.
# Every step's output goes to <step>.log in a log folder, the status of each
# to summary.txt; at the end the logs, the bench JSON and the summary are
# packed into $OUT/device_run_<STAGE>.tar.gz and the summary is copied to
# $OUT/summary_<STAGE>.txt (the device tool brings back 8 files at most).
# The exit status is 0 only if every step passed. summary.txt also names
# the device, its driver and the CUDA versions (the "device" lines).
#
# SOFTCUDA=1 runs the same script end to end on softcuda (a build with
# -DSHARC_SOFTCUDA=ON: the CUDA runtime made of host memory and threads of
# tests/softcuda), so that it cannot rot on machines without a GPU: CI runs
# it so. The steps that need a GPU (nvidia-smi, compute-sanitizer, --big,
# NCCL) then say in one line each that they are not run and why; the
# benchmarks run small (up to 16 MiB) and say nothing about GPU speed.
#
#   bash tests/gpu/device_run.sh               (any directory; every stage)
#   STAGE=build bash tests/gpu/device_run.sh   then STAGE=tests, STAGE=bench:
#                                              one device call each (a call
#                                              may run 10 minutes), the build
#                                              kept between them
#   OUT=gpu-out BUILD=build-gpu JOBS=16 CUDA_ARCHS=90 SHARC_GPU_BIG=0 \
#     GPU_TESTS='gpu\.coll\.ipc' bash tests/gpu/device_run.sh
#
# STAGE: all (default), build (nvidia-smi, versions, a fresh configure and
# build), tests (the gpu ctest tests matching GPU_TESTS, default all of
# them, the stream unit test, compute-sanitizer, --big), bench (the device
# benchmarks); tests and bench reuse the build. OUT defaults to ./gpu-out
# (relative to where it is started), BUILD to build-gpu in the repository
# (deleted and re-created by the build stage), CUDA_ARCHS to the project
# default (80;90), WERROR=ON turns warnings into errors (off by default: the
# GPU image's compilers may warn where this project's CI compilers do not,
# and a lease is too short to lose to that), SHARC_GPU_BIG=0 skips the --big run (it needs about 6.5
# GB of GPU and 9 GB of host memory), DEADLINE=S ends the run S seconds
# after its start (see step() below), CTEST_JOBS=N runs the gpu tests N at
# a time.
set -u
soft=${SOFTCUDA:-0}
out=${OUT:-gpu-out}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
cd "$(dirname "$0")/../.." || exit 1
build=${BUILD:-build-gpu}
jobs=${JOBS:-$(nproc)}
stage=${STAGE:-all}
case $stage in all | build | tests | bench) ;; *)
  echo "device_run: STAGE=$stage: use all, build, tests or bench" >&2
  exit 2
  ;;
esac
logs=$(mktemp -d "${TMPDIR:-/tmp}/device_run.XXXXXX") || exit 1
summary=$logs/summary.txt
: >"$summary"
failed=0

# DEADLINE=S (seconds from the start; 0, the default, for none) fits a
# lease: each step runs under `timeout` for the seconds left, and a step
# that would start after the deadline is recorded as not run (rc=124), so
# the logs are always packed before the device call ends.
deadline=${DEADLINE:-0}

# step NAME CMD...: runs CMD, output to the terminal and $logs/NAME.log, and
# records NAME's exit status.
step() {
  local name=$1 start=$SECONDS rc left=0
  shift
  if [ "$deadline" -gt 0 ]; then
    left=$((deadline - SECONDS))
    if [ "$left" -le 0 ]; then
      printf '%-10s rc=124 not run: DEADLINE=%ss passed  %s\n' "$name" \
        "$deadline" "$*" | tee -a "$summary"
      failed=1
      return 124
    fi
  fi
  echo "=== $name: $*" | tee "$logs/$name.log"
  if [ "$left" -gt 0 ]; then
    timeout -k 5 "$left" "$@" 2>&1 | tee -a "$logs/$name.log"
  else
    "$@" 2>&1 | tee -a "$logs/$name.log"
  fi
  rc=${PIPESTATUS[0]}
  printf '%-10s rc=%-3s %4ss  %s\n' "$name" "$rc" $((SECONDS - start)) "$*" |
    tee -a "$summary"
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}
note() { echo "$*" | tee -a "$summary"; }
# optional NAME CMD...: as step, but its failure is only recorded.
optional() {
  local f=$failed
  step "$@"
  local rc=$?
  failed=$f
  [ "$rc" -eq 0 ] || note "${1}: rc=$rc recorded, not counted as a failure"
  return 0
}
# finish: packs the logs into $out and exits with the verdict.
finish() {
  echo "=== summary ($stage)"
  cat "$summary"
  if [ "$failed" -eq 0 ]; then
    echo "device_run: all steps passed" | tee -a "$summary"
  else
    echo "device_run: FAILED (logs in $out/device_run_$stage.tar.gz)" |
      tee -a "$summary"
  fi
  cp "$summary" "$out/summary_$stage.txt"
  tar -C "$logs" -czf "$out/device_run_$stage.tar.gz" .
  rm -rf "$logs"
  exit "$failed"
}
want() { [ "$stage" = all ] || [ "$stage" = "$1" ]; }

note "device_run: stage $stage, $(date -u +%FT%TZ) on $(hostname), source $(git describe --always --dirty 2>/dev/null || echo '(no git)')"
if want build; then
  if [ "$soft" = 1 ]; then
    note "smi        not run: SOFTCUDA=1 (no GPU; softcuda's host device)"
  elif command -v nvidia-smi >/dev/null; then
    step smi nvidia-smi
    nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total \
      --format=csv >>"$logs/smi.log" 2>&1
  else
    note "smi        missing: nvidia-smi is not on PATH"
    failed=1
  fi
  step versions bash -c 'cmake --version | head -1; (nvcc --version || /usr/local/cuda/bin/nvcc --version) | tail -2; gcc --version | head -1'
  grep -E 'release|V[0-9]' "$logs/versions.log" | head -1 | sed 's/^/device     toolkit: /' >>"$summary"
  arch_flag=()
  [ -n "${CUDA_ARCHS:-}" ] && arch_flag=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
  cuda_flag=(-DSHARC_WITH_CUDA=ON)
  [ "$soft" = 1 ] && cuda_flag=(-DSHARC_SOFTCUDA=ON)
  rm -rf "$build"
  step configure cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSHARC_WERROR="${WERROR:-OFF}" "${cuda_flag[@]}" ${arch_flag[@]+"${arch_flag[@]}"} &&
    step build cmake --build "$build" -j"$jobs"
fi
if [ ! -x "$build/sharcrun" ]; then
  note "no build in $build: run STAGE=build first (or it failed)"
  failed=1
  finish
fi

if want tests; then
  test_bin=$build/tests/gpu/test_dev_kernels
  # CTEST_JOBS=N runs N tests at once (the ranks share the GPU); the
  # default, 1, keeps timings clean
  step ctest bash -c "cd '$build' && ctest -L gpu -R '${GPU_TESTS:-.}' -j${CTEST_JOBS:-1} --output-on-failure -V"
  # the device, its driver and runtime, as the kernels' test found them
  grep -m1 -oE 'test_dev_kernels: device .*' "$logs/ctest.log" |
    sed 's/^/device     /' >>"$summary"
  grep -m1 -oE '(driver supports|no NVIDIA driver)[^;]*' "$logs/ctest.log" |
    sed 's/^/device     /' >>"$summary"
  # A skip on this machine means the device is not usable (driver too old,
  # no kernel image for its architecture): a failure here. The gpu.hosts
  # tests may skip for their own reasons (not root, no network namespaces).
  if grep -- '\*\*\*Skipped' "$logs/ctest.log" | grep -qv 'gpu\.hosts\.'; then
    note "ctest      FAILED: a gpu test skipped on a GPU machine (see ctest.log)"
    failed=1
  fi
  step stream_unit "$build/tests/test_stream_cuda"
  if ! grep -q 'with a device' "$logs/stream_unit.log"; then
    note "stream_unit FAILED: sharc_stream_create_cuda found no device here"
    failed=1
  fi
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ "$soft" = 1 ]; then
    note "memcheck   not run: SOFTCUDA=1 (compute-sanitizer needs a GPU; the CI's softcuda build runs these tests under ASan and UBSan instead)"
  elif [ -n "$cs" ]; then
    step memcheck "$cs" --tool memcheck --leak-check full --error-exitcode 1 \
      "$test_bin"
    # the kernels whose threads share memory (block reductions): shared
    # memory races and barrier misuse, which softcuda's fibers cannot see
    # (its threads of a phase never run at once)
    for tool in racecheck synccheck; do
      for t in test_coop test_gpt_cuda; do
        [ -x "$build/tests/gpu/$t" ] || continue
        step "${tool}_$t" "$cs" --tool "$tool" --error-exitcode 1 \
          "$build/tests/gpu/$t"
      done
    done
  else
    note "memcheck   not run: no compute-sanitizer on PATH or in /usr/local/cuda/bin"
  fi
  if [ "$soft" = 1 ]; then
    note "big        not run: SOFTCUDA=1 (6.5 GB of device memory to page through on the host)"
  elif [ "${SHARC_GPU_BIG:-1}" != 0 ]; then
    step big "$test_bin" --big
  else
    note "big        not run (SHARC_GPU_BIG=0)"
  fi
fi

if want bench && [ "${SHARC_GPU_BENCH:-1}" != 0 ]; then
  run=$build/sharcrun bench=$build/bench/sharc-bench
  # -n 10 -w 2: the staged path at 128 MiB takes tens of ms per call;
  # the runs together stay within a few minutes
  bargs=(all -b 8 -e 256M -f 4 -n 10 -w 2 -T 300 --mem cuda)
  pbytes=256M
  if [ "$soft" = 1 ]; then # the plumbing, not GPU speed: small and quick
    # (every path and every collective; 16 MiB took 100 s of CI here)
    bargs=(all -b 8 -e 1M -f 4 -n 3 -w 1 -T 120 --mem cuda)
    pbytes=4M
  fi
  # the CUDA primitives' latencies first, on an idle GPU: where a call's
  # fixed cost goes (bench/gpu_floor.c)
  floor_n=1000
  [ "$soft" = 1 ] && floor_n=20
  step gpu_floor timeout 150 "$build/bench/sharc-gpu-floor" -n "$floor_n" \
    -J "$logs/gpu_floor.json"
  for n in 2 4; do # the staged path (named: the default is auto)
    step "bench_cuda_n$n" env SHARC_CUDA_PATH=staged timeout 150 "$run" \
      -n "$n" --timeout 140 "$bench" "${bargs[@]}" \
      -J "$logs/bench_cuda_n$n.json"
  done
  # the staged path without its round-by-round pipelining, for
  # the difference it makes: all-reduce at 2 ranks, 1 MiB and up, twice
  for k in 1 2; do
    step "bench_cuda_nopipe_n2_$k" env SHARC_CUDA_PATH=staged \
      SHARC_CUDA_PIPE_BYTES=0 timeout 90 \
      "$run" -n 2 --timeout 80 "$bench" all_reduce -b 1M -e "$pbytes" -f 4 \
      -n 10 -w 2 -T 300 --mem cuda -J "$logs/bench_cuda_nopipe_n2_$k.json"
    step "bench_cuda_pipe_n2_$k" env SHARC_CUDA_PATH=staged timeout 90 \
      "$run" -n 2 --timeout 80 \
      "$bench" all_reduce -b 1M -e "$pbytes" -f 4 -n 10 -w 2 -T 300 \
      --mem cuda -J "$logs/bench_cuda_pipe_n2_$k.json"
  done
  # the CUDA IPC path (its target: 85% of the copy limit), and the direct
  # path (ordered on the CUDA stream, no host thread)
  for n in 2 4; do
    step "bench_ipc_n$n" env SHARC_CUDA_PATH=ipc timeout 120 "$run" -n "$n" \
      --timeout 110 "$bench" "${bargs[@]}" -J "$logs/bench_ipc_n$n.json"
    step "bench_direct_n$n" env SHARC_CUDA_PATH=direct timeout 120 "$run" \
      -n "$n" --timeout 110 "$bench" "${bargs[@]}" \
      -J "$logs/bench_direct_n$n.json"
    # registered buffers: the peers read calls from SHARC_CUDA_INPLACE_BYTES
    # in place (one copy instead of two through the slots)
    step "bench_direct_reg_n$n" env SHARC_CUDA_PATH=direct timeout 120 \
      "$run" -n "$n" --timeout 110 "$bench" "${bargs[@]}" -R 1 \
      -J "$logs/bench_direct_reg_n$n.json"
  done
  # GPUDirect RDMA across an RDMA NIC (issue 26, item 2): the staged GPU
  # reduction over ib with registered device buffers, which sends each
  # peer's slices straight from the GPU where the NIC can reach it (its
  # TRACE lines say how many peers; the NET lines which registration, or
  # why none). On softcuda the software HCA covers it (gpu.ib.gdr).
  if [ "$soft" = 1 ]; then
    note "gdr        not run: SOFTCUDA=1 (no RDMA NIC; gpu.ib.gdr covers GPUDirect RDMA on the software HCA)"
  elif ! ls /sys/class/infiniband/ 2>/dev/null | grep -q .; then
    note "gdr        not run: no RDMA device (/sys/class/infiniband is empty)"
  else
    optional bench_gdr_n2 env SHARC_TRANSPORT=ib SHARC_CUDA_PATH=staged \
      SHARC_CUDA_STAGED_REDUCE=gpu SHARC_DEBUG=TRACE \
      SHARC_DEBUG_SUBSYS=CUDA,NET timeout 120 "$run" -n 2 --timeout 110 \
      "$bench" reduce_scatter -b 64K -e "$pbytes" -f 4 -n 10 -w 2 -T 300 \
      --mem cuda -R 1 -J "$logs/bench_gdr_n2.json"
    grep -m2 "GPUDirect\|registered through\|could not register" \
      "$logs/bench_gdr_n2.log" | tee -a "$summary"
  fi
  # NCCL: the system's libnccl.so.2, else the one of the nvidia-nccl Python
  # package (the GPU image has NCCL only there)
  if [ "$soft" = 1 ]; then
    note "nccl       not run: SOFTCUDA=1 (NCCL needs a GPU)"
  elif ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
    nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
    if [ -n "$nccl_lib" ] && [ -e "$nccl_lib/libnccl.so.2" ]; then
      export LD_LIBRARY_PATH=$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      note "nccl       from $nccl_lib"
    else
      note "nccl       no libnccl.so.2 found (ldconfig, python3 nvidia.nccl)"
    fi
  fi
  [ "$soft" = 1 ] || optional bench_nccl_n1 timeout 60 "$run" -n 1 --timeout 50 "$bench" \
    "${bargs[@]}" --backend nccl -J "$logs/bench_nccl_n1.json"
  # several ranks on one GPU: NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1
  # (bench_nccl.c sets it); an older NCCL refuses, recorded, not a failure
  for n in 2 4; do
    [ "$soft" = 1 ] || optional "bench_nccl_cmp_n$n" timeout 90 "$run" -n "$n" \
      --timeout 80 "$bench" "${bargs[@]}" --compare nccl \
      -J "$logs/bench_nccl_cmp_n$n.json"
  done
  # GPU training side by side: sharc-train of the GPT (GPT-2 124M shapes,
  # bf16) on the GPU with 1 and 2 ranks, and PyTorch FSDP2 with NCCL where
  # PyTorch is installed, in one results file naming the device
  # (train_compare.json: tokens per second and peak memory per rank). On
  # softcuda the tiny GPT, for the plumbing only.
  train=$build/models/sharc-train
  targs=(--model gpt --gpt-size gpt2 --batch 8 --steps 12)
  [ "$soft" = 1 ] && targs=(--model gpt --gpt-size tiny --batch 8 --steps 6)
  targs+=(--data tests/shard/corpus.txt --mp bf16 --log-every 1)
  cmp_args=(--out "$logs/train_compare.json")
  for n in 1 2; do
    step "train_gpt_sharc_n$n" timeout 400 "$run" -n "$n" --timeout 390 \
      "$train" --device cuda "${targs[@]}" \
      --log "$logs/train_gpt_sharc_n$n.jsonl" &&
      cmp_args+=(--sharc "sharc-n$n" "$logs/train_gpt_sharc_n$n.jsonl")
  done
  preset=${targs[3]}
  if [ "$soft" = 1 ]; then
    note "fsdp2      not run: SOFTCUDA=1 (PyTorch needs a GPU for the comparison)"
  elif ! python3 -c 'import torch' 2>/dev/null; then
    note "fsdp2      not run: no PyTorch for python3 (pip install torch to compare)"
  else # two ranks on one GPU need an NCCL that allows it: optional
    fargs=(--device cuda --preset "$preset" --data tests/shard/corpus.txt
      --batch 8 --steps 12 --mp bf16)
    optional train_gpt_fsdp2_n1 timeout 400 python3 bench/fsdp2_gpt.py \
      "${fargs[@]}" --json "$logs/train_gpt_fsdp2_n1.json"
    optional train_gpt_fsdp2_n2 timeout 400 python3 -m torch.distributed.run \
      --standalone --nproc_per_node 2 bench/fsdp2_gpt.py "${fargs[@]}" \
      --json "$logs/train_gpt_fsdp2_n2.json"
    cmp_args+=(--fsdp2 fsdp2-n1 "$logs/train_gpt_fsdp2_n1.json"
      --fsdp2 fsdp2-n2 "$logs/train_gpt_fsdp2_n2.json")
    dev_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null |
      head -1)
    [ -n "$dev_name" ] && cmp_args+=(--device-name "$dev_name")
  fi
  [ "$soft" = 1 ] && cmp_args+=(--device-name "softcuda (host memory)")
  step train_compare python3 bench/train_compare.py "${cmp_args[@]}"
  # everything above in one file naming the device: each run's peak busbw
  # per collective against the copy limit, its smallest size's time, the
  # training comparison and the primitives' floors
  step gpu_results python3 bench/gpu_results.py \
    --out "$logs/gpu_results.json" "$logs"
elif want bench; then
  note "bench      not run (SHARC_GPU_BENCH=0)"
fi
finish

#!/usr/bin/env bash
# shard_test.sh - the FSDP engine's end-to-end checks, each a job (or a few)
# of sharc-train through sharcrun, compared with tests/shard/compare.py.
#
#   shard_test.sh BUILD_DIR SRC_DIR CHECK [--quick]
#
# CHECK is one of
#   parity-cnn, parity-gpt  1-rank reference, then 2, 3, 4 ranks under full,
#                           grad_op, no_shard, hybrid 2x2 and hybrid_zero2
#                           (and micro-batches, activation checkpointing and
#                           other prefetch depths): losses for 50 steps and
#                           the final parameters agree with the reference
#                           (compare.py: to 1e-5, or to 4x the noise floor
#                           where that is larger; --quick: fewer)
#   ckpt                    save at step 20 with 4 ranks (full strategy,
#                           sharded and full files), load with 2 ranks under
#                           grad_op / no_shard, go on to step 40: equal to a
#                           straight 40-step run
#   kill-save               a rank dies in the middle of a save; the previous
#                           checkpoint stays loadable and the job resumes
#   memory                  sharded state at 4 ranks <= 0.3 of 1 rank's; the
#                           report's categories add up to the total
#   options                 bf16 / f16 training, clipping, SGD, errors for
#                           bad flags, a wrong checkpoint, a corrupt file
#   hsdp-hosts              HSDP across two network-namespace hosts (2x2,
#                           one shard group per host) equals FULL_SHARD
#   trace                   SHARC_TRACE writes a Chrome trace per rank whose
#                           prefetched gathers overlap the previous unit's
#                           compute
#   device-cnn, device-gpt  GPU training (--device cuda): 1, 2 and 4 ranks
#                           under full, grad_op and hybrid (1x1, 2 replicas
#                           of 1, 2x2; --quick: 3 of the 9) equal the host
#                           reference (its noise, as parity); --offload
#                           changes where the state lives (memory report)
#                           and not one bit of the losses; bf16 equals host
#                           bf16 and converges; micro-batches, recomputed
#                           activations, clipping with SGD momentum and
#                           (gpt) the held-out evaluation match the host;
#                           a device checkpoint resumes on the host and the
#                           reverse; a rank killed mid-step is named by
#                           every other (--quick: fewer).
#                           Skipped (77) without a usable CUDA device: on
#                           softcuda (ctest's gpu.train.*) they run
#   device-timing           GPU training's t_comm and t_exposed come from
#                           CUDA events ("timing": "cuda events" in the
#                           log), within their bounds on every step (comm
#                           > 0, 0 <= exposed <= step); without prefetch
#                           more of the communication is exposed than with
#                           it (asserted on a second pair of runs only if
#                           the first disagrees: a ratio, but 2 ranks on 2
#                           shared cores); a collective delayed 1 s
#                           (SHARC_FAULT) shows in one step's comm and
#                           exposed time; host training's timing is
#                           "host" (timing_check.py). Skipped (77) as
#                           device-*
# Every comparison of runs that group their sums differently (more ranks,
# other strategies, a checkpoint resumed on another rank count) is bounded
# by the floating-point noise measured on this machine, with the BLAS kernel
# it picks: the reference job again in 2, 3 and 4 micro-batches
# (reference below; compare.py --noise says how the bound is set). Runs
# that group their sums alike (activation checkpointing, prefetch depth)
# must agree bit for bit (exact).
# The GPT checks train on tests/shard/corpus.txt, a frozen copy of the
# README of commit a99a964: training on the live README let every edit of
# it move the trajectories the tolerances were set against.
# Exit status 0 passed, 1 failed, 77 skipped (with a line saying why).
set -u
B=$1 SRC=$2 CHECK=$3
QUICK=${4:-}
# SHARC_SHARD_QUICK=1 asks for --quick too (CI's jittered softcuda passes:
# the stream orders under jitter, the whole sets of runs once without)
[ "${SHARC_SHARD_QUICK:-0}" = 1 ] && QUICK=--quick
RUN="$B/sharcrun"
TRAIN="$B/models/sharc-train"
CMP="python3 $SRC/tests/shard/compare.py"
export OPENBLAS_NUM_THREADS=1 SHARC_TIMEOUT=${SHARC_TIMEOUT:-60}
W=$(mktemp -d /tmp/sharc-shard-XXXXXX)
trap 'rm -rf "$W"' EXIT
fails=0
# The kernel OpenBLAS picked (OPENBLAS_CORETYPE names one), for the log: the
# noise floors below depend on it.
python3 -c 'import ctypes; b = ctypes.CDLL("libopenblas.so.0"); b.openblas_get_corename.restype = ctypes.c_char_p; print("openblas kernel:", b.openblas_get_corename().decode())' 2>/dev/null

need_mnist() {
  if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    echo "SKIP: Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist; .ci/deps.sh does)"
    exit 77
  fi
}

# train TAG NRANKS ARGS...: one job; its log in $W/TAG.jsonl, params in
# $W/TAG.bin, output in $W/TAG.out.
train() {
  local tag=$1 n=$2
  shift 2
  if ! $RUN -n "$n" --timeout 240 "$TRAIN" --log-every 1000 \
      --log "$W/$tag.jsonl" --dump-params "$W/$tag.bin" "$@" \
      >"$W/$tag.out" 2>&1; then
    echo "FAIL: $tag ($n ranks: $*) exited non-zero:"
    tail -20 "$W/$tag.out"
    fails=$((fails + 1))
    return 1
  fi
}

# reference TAG NRANKS ARGS...: the job TAG, and the same job (same ranks)
# in 2, 3 and 4 micro-batches (TAG_m2, TAG_m3, TAG_m4: the groupings of the
# 2, 3 and 4-rank runs): TAG's own floating-point noise,
# which same() then allows.
reference() {
  local tag=$1 n=$2
  shift 2
  train "$tag" "$n" "$@" &&
    train "${tag}_m2" "$n" "$@" --micro 2 &&
    train "${tag}_m3" "$n" "$@" --micro 3 &&
    train "${tag}_m4" "$n" "$@" --micro 4
}

# compare REF TAG [compare args]: TAG's losses and parameters against REF's.
compare() {
  local ref=$1 tag=$2
  shift 2
  local out rc
  out=$($CMP "$W/$ref.jsonl" "$W/$tag.jsonl" --params "$W/$ref.bin" \
    "$W/$tag.bin" "$@")
  rc=$?
  echo "$tag vs $ref: $(echo "$out" | tr '\n' ' ')"
  if [ $rc -ne 0 ]; then
    fails=$((fails + 1))
    return 1
  fi
}

# same REF TAG [compare args]: TAG equals REF up to REF's measured noise
# (REF trained by reference).
same() {
  local ref=$1 tag=$2
  shift 2
  if [ ! -f "$W/${ref}_m4.bin" ]; then
    echo "FAIL: $tag vs $ref: no noise runs of $ref (train it with reference)"
    fails=$((fails + 1))
    return 1
  fi
  local noise=() m
  for m in 2 3 4; do
    noise+=(--noise "$W/${ref}_m$m.jsonl" "$W/${ref}_m$m.bin")
    # the device's own regrouped runs, where device() trained them
    [ -f "$W/${ref}_d$m.bin" ] &&
      noise+=(--noise "$W/${ref}_d$m.jsonl" "$W/${ref}_d$m.bin")
  done
  compare "$ref" "$tag" "${noise[@]}" "$@"
}

# exact REF TAG: bit for bit (runs that sum in the same order).
exact() { compare "$1" "$2" --tol 0; }

# need_cuda: skips the check when sharc-train cannot train on a GPU here.
need_cuda() {
  if ! $RUN -n 1 --timeout 120 "$TRAIN" --device cuda "$@" --steps 1 \
      >"$W/probe.out" 2>&1; then
    if grep -qE "no usable CUDA device|has no GPU models" "$W/probe.out"; then
      echo "SKIP: $(grep -m1 -oE -- '--device cuda: .*' "$W/probe.out")"
      exit 77
    fi
    echo "FAIL: a one-step GPU run failed:"
    tail -20 "$W/probe.out"
    exit 1
  fi
}

# device MODEL_ARGS...: GPU training against the host (see the top).
device() {
  need_cuda "$@"
  reference ref 1 "$@" || return
  # The noise of the device's own kernels, regrouped the same way: on a GPU
  # cuBLAS rounds otherwise than the host's BLAS, and Adam turns the sign of
  # a near-zero gradient into a whole +-lr step, so the host's regroupings
  # alone can miss it (first H100 run: host regroupings 2.7e-06 apart, a
  # 1-rank device run 9.6e-05 from the host's; bench/results/gpu_h100_first)
  train ref_d2 1 "$@" --device cuda --micro 2 &&
    train ref_d4 1 "$@" --device cuda --micro 4 || return
  # every strategy at 1, 2 and 4 ranks; hybrid shards over n/2 ranks (at 2
  # ranks two replicas of one shard, at 1 rank one of one)
  local combos="full:1 full:2 full:4 grad_op:1 grad_op:2 grad_op:4 hybrid:1
    hybrid:2 hybrid:4"
  [ "$QUICK" = --quick ] && combos="full:1 grad_op:2 hybrid:4"
  for c in $combos; do
    local s=${c%%:*} n=${c##*:} g=2
    [ "$s" = hybrid ] && g=$(((n + 1) / 2))
    train "dev_$s$n" "$n" "$@" --device cuda --strategy "$s" \
      --shard-group "$g" && same ref "dev_$s$n"
  done
  # offload: the optimizer on the host, the same bits as on the device
  train dev_off 4 "$@" --device cuda --strategy hybrid --shard-group 2 \
    --offload && exact "dev_hybrid4" dev_off && python3 - "$W" <<'PY' ||
import json, sys
def last(tag):
    return [json.loads(x) for x in open(f"{sys.argv[1]}/{tag}.jsonl")
            if '"step"' in x][-1]
on, off = last("dev_hybrid4")["now"], last("dev_off")["now"]
state = on["param_slices"] + on["grad_slices"] + on["optim"]
print(f"state on the device: {on['device']} of {on['total']} bytes; "
      f"offloaded: {off['device']} of {off['total']}")
sys.exit(0 if on["device"] >= state > 0 and off["device"] == 0 and
         off["total"] == on["total"] else 1)
PY
    fails=$((fails + 1))
  # a rank killed mid-step (on the staged path its bytes go through the
  # transports, where SHARC_FAULT counts them): every other rank fails,
  # naming it, and nothing waits on the GPU past the timeout
  if SHARC_CUDA_PATH=staged SHARC_FAULT=kill:2:send:2M $RUN -n 4 \
    --timeout 120 "$TRAIN" "$@" --device cuda >"$W/kill.out" 2>&1; then
    echo "FAIL: GPU training with a killed rank exited 0"
    fails=$((fails + 1))
  elif [ "$(grep -c 'step failed: SHARC_ERR_PEER_LOST.*rank 2 ' \
    "$W/kill.out")" != 3 ]; then
    echo "FAIL: not every survivor named the killed rank 2:"
    tail -20 "$W/kill.out"
    fails=$((fails + 1))
  else
    echo "killed rank: $(grep -m1 'step failed' "$W/kill.out")"
  fi
  # the same on the default path (direct on one host: no host thread, no
  # transport bytes): the engine's own fault point kills rank 2 in step 3.
  # Every survivor fails; the first names rank 2. A later one may name a
  # rank that had exited after its own failure by then (its watchdog sees
  # processes gone, not which went first).
  if SHARC_FAULT=kill:2:step:3 $RUN -n 4 --timeout 120 "$TRAIN" "$@" \
    --device cuda >"$W/kill2.out" 2>&1; then
    echo "FAIL: GPU training with rank 2 killed in step 3 exited 0"
    fails=$((fails + 1))
  elif [ "$(grep -c 'step failed: SHARC_ERR_PEER_LOST' "$W/kill2.out")" != 3 ] ||
    ! grep -m1 'step failed' "$W/kill2.out" | grep -q 'rank 2 '; then
    echo "FAIL: the survivors did not all fail, the first naming rank 2:"
    tail -20 "$W/kill2.out"
    fails=$((fails + 1))
  else
    echo "killed in step 3: $(grep -m1 'step failed' "$W/kill2.out")"
  fi
  # checkpoints interchange: device saves, host resumes, and the reverse
  train dsave 2 "$@" --device cuda --steps 10 --save "$W/dck" &&
    train hload 2 "$@" --load "$W/dck" && same ref hload --steps 11:20
  train hsave 2 "$@" --steps 10 --save "$W/hck" &&
    train dload 2 "$@" --device cuda --load "$W/hck" &&
    same ref dload --steps 11:20
  # bf16 gathers and compute copies on the device: as on the host
  reference refbf 1 "$@" --mp bf16 &&
    train dev_bf16 2 "$@" --device cuda --mp bf16 && same refbf dev_bf16 &&
    python3 - "$W/dev_bf16.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1]) if '"step"' in x]
first, last = sum(l[:5]) / 5, sum(l[-5:]) / 5
print(f"bf16 on the device: loss {first:.3f} (first 5 steps) -> {last:.3f} "
      f"(last 5)")
sys.exit(0 if last < 0.9 * first else 1)
PY
  [ "$QUICK" = --quick ] && return
  # micro-batches and recomputed activations; clipping by the device's
  # gradient norm with SGD momentum (the norm's partial sums and the SGD
  # kernel), against a host reference of its own
  train dev_micro 2 "$@" --device cuda --micro 2 --checkpoint-activations &&
    same ref dev_micro
  local clip=(--clip 0.5 --optim sgd --lr 0.05 --momentum 0.9)
  reference refclip 1 "$@" "${clip[@]}" &&
    train dev_clip 2 "$@" --device cuda "${clip[@]}" && same refclip dev_clip
  # offload computes the norm on the host in the device's order: clipping
  # changes nothing there either
  train dev_clip_off 2 "$@" --device cuda --offload "${clip[@]}" &&
    exact dev_clip dev_clip_off
}

parity() { # parity MODEL_ARGS...
  reference ref 1 "$@" || return
  local combos="full:2 full:3 full:4 grad_op:2 grad_op:3 grad_op:4
    no_shard:2 no_shard:3 no_shard:4 hybrid:4 hybrid_zero2:4"
  [ "$QUICK" = --quick ] && combos="full:3 grad_op:4 hybrid:4"
  for c in $combos; do
    local s=${c%%:*} n=${c##*:}
    train "$s$n" "$n" "$@" --strategy "$s" --shard-group 2 &&
      same ref "$s$n"
  done
  # the schedule's knobs change nothing numerically
  train ref_ckpt 1 "$@" --checkpoint-activations && exact ref ref_ckpt
  train full2_ckpt 2 "$@" --checkpoint-activations --prefetch 1 &&
    same ref full2_ckpt
  [ "$QUICK" = --quick ] && return
  train full4_pf3 4 "$@" --prefetch 3 && exact full4 full4_pf3
  train micro2 2 "$@" --micro 2 && same ref micro2
}

case $CHECK in
parity-cnn)
  need_mnist
  parity --model cnn --steps 50 --batch 16 --lr 3e-4 --seed 3
  ;;
parity-gpt)
  # --eval 1: every run's held-out loss (the last tenth of the corpus,
  # summed over the ranks' windows) is checked against the reference too
  parity --model gpt --gpt-size tiny --data "$SRC/tests/shard/corpus.txt" --steps 50 \
    --batch 8 --lr 1e-3 --seed 5 --eval 1
  ;;
ckpt)
  need_mnist
  args=(--model cnn --batch 16 --lr 3e-4 --seed 11)
  reference straight 1 "${args[@]}" --steps 40
  train first 4 "${args[@]}" --steps 20 --save "$W/ck" &&
    train second 2 "${args[@]}" --steps 40 --strategy grad_op --load "$W/ck" &&
    same straight second --steps 21:40
  train firstf 4 "${args[@]}" --steps 20 --strategy hybrid --shard-group 2 \
    --save "$W/ckf" --save-full &&
    train secondf 3 "${args[@]}" --steps 40 --strategy no_shard \
      --load "$W/ckf" && same straight secondf --steps 21:40
  # the step directory itself loads too, and a 1-rank run resumes it
  train third 1 "${args[@]}" --steps 40 --load "$W/ck/step-00000020" &&
    same straight third --steps 21:40
  ;;
kill-save)
  need_mnist
  args=(--model mlp --batch 32 --seed 2)
  train ok 4 "${args[@]}" --steps 10 --save "$W/ck" || exit 1
  echo "a rank dies half-way through writing the step-20 checkpoint:"
  if SHARC_FAULT=save_kill:2 $RUN -n 4 --timeout 120 "$TRAIN" "${args[@]}" \
      --steps 20 --load "$W/ck" --save "$W/ck" >"$W/killed.out" 2>&1; then
    echo "FAIL: the job with a killed rank exited 0"
    fails=$((fails + 1))
  fi
  grep -m3 -E "rank 2|PEER_LOST|killed" "$W/killed.out"
  latest=$(cat "$W/ck/latest")
  if [ "$latest" != step-00000010 ]; then
    echo "FAIL: latest is '$latest', not the previous step-00000010"
    fails=$((fails + 1))
  else
    echo "latest still names step-00000010"
  fi
  train resumed 2 "${args[@]}" --steps 12 --load "$W/ck" --save "$W/ck" &&
    reference straight 1 "${args[@]}" --steps 12 &&
    same straight resumed --steps 11:12
  # saving step 12 again (nothing left to train) swaps the directory in
  # atomically and keeps step 10
  train again 3 "${args[@]}" --steps 12 --load "$W/ck" --save "$W/ck" || exit 1
  got=$(cd "$W/ck" && echo step-* "latest=$(cat latest)")
  if [ "$got" != "step-00000010 step-00000012 latest=step-00000012" ]; then
    echo "FAIL: after re-saving step 12: $got"
    fails=$((fails + 1))
  else
    echo "re-saved step 12: $got"
  fi
  # a job with nothing left to train logs no step: its parameters are the
  # re-saved step 12
  train after 2 "${args[@]}" --steps 12 --load "$W/ck" &&
    cp "$W/straight.jsonl" "$W/after.jsonl" && same straight after ||
    echo "FAIL: the re-saved step 12 differs"
  ;;
memory)
  need_mnist
  args=(--model cnn --batch 16 --steps 3)
  train one 1 "${args[@]}" && train four 4 "${args[@]}" || exit 1
  python3 - "$W/one.jsonl" "$W/four.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
cats = ["param_slices", "grad_slices", "optim", "gathered",
        "unsharded_grads", "activations"]
def last(p):
    return [json.loads(l) for l in open(p) if '"step"' in l][-1]
one, four = last(sys.argv[1]), last(sys.argv[2])
ok = True
for rec in (one, four):
    for key in ("peak", "now"):
        m = rec[key]
        s = sum(m[c] for c in cats)
        if s != m["total"]:
            print(f"FAIL: {key} categories add to {s}, total says {m['total']}")
            ok = False
sh = lambda r: sum(r["now"][c] for c in ("param_slices", "grad_slices", "optim"))
ratio = sh(four) / sh(one)
print(f"sharded state per rank: 1 rank {sh(one)} B, 4 ranks {sh(four)} B, "
      f"ratio {ratio:.3f} (limit 0.3)")
print(f"peak per rank: 1 rank {one['peak']['total']} B, 4 ranks "
      f"{four['peak_total_per_rank']} B")
if ratio > 0.3:
    ok = False
    print("FAIL: sharded state does not fall as 1/N")
sys.exit(0 if ok else 1)
PY
  ;;
options)
  need_mnist
  args=(--model cnn --batch 16 --steps 30 --seed 4)
  for mp in bf16 f16; do
    train "mp_$mp" 2 "${args[@]}" --mp "$mp" || continue
    python3 - "$W/mp_$mp.jsonl" "$mp" <<'PY' || fails=$((fails + 1))
import json, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1]) if '"step"' in x]
first, last = sum(l[:5]) / 5, sum(l[-5:]) / 5
print(f"{sys.argv[2]}: loss {first:.3f} (steps 1-5) -> {last:.3f} (26-30)")
sys.exit(0 if last < 0.8 * first else 1)
PY
  done
  reference sgd1 1 "${args[@]}" --optim sgd --lr 0.05 --momentum 0.9 --clip 1 &&
    train sgd3 3 "${args[@]}" --optim sgd --lr 0.05 --momentum 0.9 --clip 1 &&
    same sgd1 sgd3
  expect_err() { # expect_err TEXT ARGS...: exit 2 (or 1) naming TEXT
    local text=$1
    shift
    if $RUN -n 2 --timeout 60 "$TRAIN" "$@" >"$W/err.out" 2>&1; then
      echo "FAIL: sharc-train $* succeeded"
      fails=$((fails + 1))
    elif ! grep -q -- "$text" "$W/err.out"; then
      echo "FAIL: sharc-train $* did not say '$text':"
      cat "$W/err.out"
      fails=$((fails + 1))
    else
      echo "refused as expected: $(grep -m1 -- "$text" "$W/err.out")"
    fi
  }
  expect_err "--strategy 'zero9'" --strategy zero9
  expect_err "--device 'tpu'" --device tpu
  expect_err "add --device cuda or drop --offload" --offload
  expect_err "--mp 'fp8'" --mp fp8
  expect_err "unknown option '--bogus'" --bogus
  expect_err "needs --data" --model gpt
  expect_err "give --holdout F > 0" --model gpt --data "$SRC/tests/shard/corpus.txt" \
    --holdout 0 --eval 1
  head -c 100 "$SRC/tests/shard/corpus.txt" >"$W/short.txt"
  expect_err "too short to hold out" --model gpt --data "$W/short.txt" \
    --holdout 0.9 --steps 1
  expect_err "does not divide" --model mlp --strategy hybrid --shard-group 3 \
    --steps 1
  train small 2 --model mlp --batch 8 --steps 2 --save "$W/ck" || exit 1
  expect_err "a different model" --model cnn --steps 3 --load "$W/ck"
  expect_err "cannot read" --model mlp --steps 3 --load "$W/nothing"
  f=$(ls "$W"/ck/step-*/shard-1.bin)
  printf 'XXXX' | dd of="$f" bs=1 seek=100 conv=notrunc status=none
  expect_err "corrupt" --model mlp --steps 3 --load "$W/ck"
  ;;
hsdp-hosts)
  need_mnist
  args=(--model cnn --batch 16 --steps 20 --lr 3e-4 --seed 9)
  reference full 4 "${args[@]}" || exit 1
  # rank 0 writes the log; every rank writes only through it
  bash "$SRC/tests/mp/hosts_test.sh" --timeout 240 --expect "" aabb \
    "$TRAIN" "${args[@]}" --strategy hybrid --log-every 1000 \
    --log "$W/hosts.jsonl" --dump-params "$W/hosts.bin" >"$W/hosts.out" 2>&1
  rc=$?
  if [ $rc -eq 77 ]; then
    grep -m1 SKIP "$W/hosts.out"
    exit 77
  elif [ $rc -ne 0 ]; then
    echo "FAIL: HSDP on two namespace hosts exited $rc"
    tail -20 "$W/hosts.out"
    exit 1
  fi
  grep -m1 "strategy hybrid" "$W/hosts.out"
  same full hosts
  ;;
device-cnn)
  device --model cnn --synthetic --steps 20 --batch 16 --lr 3e-4 --seed 3
  ;;
device-gpt)
  # --eval 1: every run's held-out loss is checked against the host's too
  device --model gpt --gpt-size tiny --data "$SRC/tests/shard/corpus.txt" \
    --steps 20 --batch 8 --lr 1e-3 --seed 5 --eval 1
  ;;
device-timing)
  args=(--model cnn --synthetic --steps 8 --batch 16 --seed 3)
  TCHK="python3 $SRC/tests/shard/timing_check.py"
  need_cuda "${args[@]}"
  train host2 2 "${args[@]}" && $TCHK bounds host "$W/host2.jsonl" ||
    fails=$((fails + 1))
  for try in 1 2; do
    train pf1 2 "${args[@]}" --device cuda --prefetch 1 &&
      train pf2 2 "${args[@]}" --device cuda --prefetch 2 || break
    $TCHK bounds "cuda events" "$W/pf1.jsonl" "$W/pf2.jsonl" || {
      fails=$((fails + 1))
      break
    }
    if $TCHK order "$W/pf1.jsonl" "$W/pf2.jsonl"; then
      break
    elif [ $try = 2 ]; then
      echo "FAIL: exposed communication not larger without prefetch, twice"
      fails=$((fails + 1))
    fi
  done
  # rank 1 sleeps 1 s in one step's collectives (the staged path, where
  # SHARC_FAULT reaches the bytes): that step's comm and exposed time on
  # rank 0's streams hold most of it, whatever the machine's speed
  SHARC_FAULT=delay:1:1000:20M SHARC_CUDA_PATH=staged \
    train slow 2 "${args[@]}" --device cuda &&
    $TCHK slow 0.8 0.5 "$W/slow.jsonl" || fails=$((fails + 1))
  if ! grep -q "exposed [0-9.]*, cuda events)" "$W/pf1.out"; then
    echo "FAIL: sharc-train's step line does not name the clock:"
    grep -m2 "step " "$W/pf1.out"
    fails=$((fails + 1))
  fi
  ;;
trace)
  args=(--model gpt --gpt-size tiny --data "$SRC/tests/shard/corpus.txt" --batch 8
    --steps 4)
  train traced 4 "${args[@]}" --trace "$W/trace" || exit 1
  python3 "$SRC/tests/shard/trace_check.py" "$W/trace" 4 ||
    fails=$((fails + 1))
  ;;
*)
  echo "shard_test.sh: unknown check '$CHECK'"
  exit 2
  ;;
esac
if [ $fails -ne 0 ]; then
  echo "$CHECK: $fails failed"
  exit 1
fi
echo "$CHECK: 0 failed"

#!/bin/sh
# plan_cli.sh BUILD SRC - sharc-plan's command line: a good run prints a
# ranked table and writes JSON; a calibration from a committed sharc-bench
# file prints its fit; the committed unit list docs/units/gpt2-124m.units
# plans exactly what gpt:gpt2-124m plans; each bad flag or file exits 2
# with a message naming it.
set -u
P="$1/plan/sharc-plan"
S=${2:-.}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
if ! "$P" --model gpt:70b --nodes 4 --batch 32 --json "$T/p.json" \
  >"$T/out" 2>&1 || ! grep -q '^1 ' "$T/out" || ! grep -q '^best:' "$T/out"; then
  echo "FAIL: a good run printed no ranked table:"
  cat "$T/out"
  fail=1
fi
if ! python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
assert d['configs'] and d['configs'][0]['rank'] == 1" "$T/p.json"; then
  echo "FAIL: --json wrote no ranked configurations"
  fail=1
fi
# calibration from a real sharc-bench file (4 ranks, one host): the fit,
# every row's residual, and the plan with the fitted link
if ! "$P" --model cnn --gpus-per-node 4 --strategy full \
  --calibrate "$S/bench/results/main_host_4ranks.json" >"$T/cal" 2>&1 ||
  ! grep -q '^# calibration: intra-node link from' "$T/cal" ||
  ! grep -q '^#   all_gather  *4  *1 ' "$T/cal" ||
  ! grep -q '^# calibrated: --link intra:' "$T/cal" ||
  ! grep -q '^best:' "$T/cal"; then
  echo "FAIL: --calibrate printed no fit or no plan:"
  cat "$T/cal"
  fail=1
fi
# with --json -, stdout is the JSON alone (the fit goes to stderr)
if ! "$P" --model cnn --gpus-per-node 4 --strategy full --json - \
  --calibrate "$S/bench/results/main_host_4ranks.json" 2>/dev/null |
  python3 -c "import json,sys; json.load(sys.stdin)"; then
  echo "FAIL: --calibrate with --json - wrote more than JSON on stdout"
  fail=1
fi
# a unit list: the committed GPT-2 124M list plans what gpt:gpt2-124m does
U="$S/docs/units/gpt2-124m.units"
if ! "$P" --model "units:$U" --nodes 2 --batch 32 --json "$T/u.json" \
  >"$T/u" 2>&1 ||
  ! grep -q '^# sharc-plan: units:gpt2-124m.units, 124439808 parameters' \
    "$T/u" ||
  ! "$P" --model gpt:gpt2-124m --nodes 2 --batch 32 --json "$T/g.json" \
    >/dev/null 2>&1 ||
  ! python3 -c "import json,sys; a=json.load(open(sys.argv[1])); \
b=json.load(open(sys.argv[2])); assert a['params'] == b['params']; \
assert a['configs'] == b['configs'], 'the configurations differ'" \
    "$T/u.json" "$T/g.json"; then
  echo "FAIL: --model units:$U does not plan as gpt:gpt2-124m does:"
  cat "$T/u"
  fail=1
fi
printf 'a 10 5 0\nb 10 x 0\n' >"$T/bad.units"
printf '# nothing here\n' >"$T/empty.units"
echo "not json" >"$T/bad.json"
printf '{"nranks": 4, "nhosts": 1, "results": []}\n' >"$T/empty.json"
# refuse: args... | the text the message must hold
refuse() {
  text=$1
  shift
  "$P" "$@" >"$T/bad" 2>&1
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q -- "$text" "$T/bad"; then
    echo "FAIL: sharc-plan $* exited $rc, expected 2 and '$text':"
    cat "$T/bad"
    fail=1
  else
    echo "ok   sharc-plan $*: $(head -1 "$T/bad")"
  fi
}
refuse "unknown option '--gpus'" --gpus 8
refuse "model 'llama'" --model llama
refuse "gpt:70x" --model gpt:70x
refuse "not divisible" --model gpt:2,100,3,256,16
refuse "--nodes '0'" --nodes 0
refuse "--nodes 'x'" --nodes x
refuse "--link 'intra:3'" --link intra:3
refuse "--link 'pcie:1,2'" --link pcie:1,2
refuse "--link 'inter:5,0'" --link inter:5,0
refuse "--gpu-mem '-1'" --gpu-mem -1
refuse "--flops needs a value" --flops
refuse "'fsdp' is not one of" --strategy fsdp
refuse "'fp8' is not bf16" --dtype fp8
refuse "--micro 9 exceeds\|micro-batches" --batch 8 --micro 9
refuse "shard group of 3" --strategy hybrid --shard-group 3
refuse "--seq is for GPT" --model cnn --seq 128
refuse "--batch '1.5': give an integer" --batch 1.5
refuse "--optim 'lamb'" --optim lamb
refuse "cannot read" --calibrate "$T/missing.json"
refuse "not a sharc-bench -J file" --calibrate "$T/bad.json"
refuse "no all_gather, reduce_scatter or all_reduce row" \
  --calibrate "$T/empty.json"
refuse "none of its 1 lines is a step record" --model cnn \
  --calibrate-compute "$T/empty.json"
refuse "--calibrate-compute needs a value" --calibrate-compute
refuse "--model units:$T/bad.units: line 2: FLOPs 'x'" --model "units:$T/bad.units"
refuse "--model units:$T/none.units: cannot read" --model "units:$T/none.units"
refuse "--model units:$T/empty.units: no unit in 1 line" \
  --model "units:$T/empty.units"
refuse "--seq is for GPT models; a unit list" --model "units:$U" --seq 64
[ $fail = 0 ] && echo PASS || echo FAIL
exit $fail

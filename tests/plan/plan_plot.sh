#!/bin/sh
# plan_plot.sh BUILD SRC - plan/plan_plot.py over a sweep of GPU counts:
# the sweep JSON holds every count and the PNG is written (a PNG file's
# signature). Skips (77) where matplotlib does not import, in python3 or
# in the system's /usr/bin/python3 (Debian's python3-matplotlib is for the
# latter, where a python3 of another install comes first on the PATH).
set -u
B=$1
S=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PY=
for p in python3 /usr/bin/python3; do
  if "$p" -c "import matplotlib" 2>/dev/null; then
    PY=$p
    break
  fi
done
if [ -z "$PY" ]; then
  echo "SKIP: neither python3 nor /usr/bin/python3 imports matplotlib" \
    "(.ci/deps.sh installs python3-matplotlib)"
  exit 77
fi
if ! "$PY" "$S/plan/plan_plot.py" --plan "$B/plan/sharc-plan" \
  --gpus 1,2,4,8,16 --top 3 -o "$T/p.png" --json-out "$T/p.json" \
  -- --model gpt:tiny --gpus-per-node 4 --dtype f32 >"$T/out" 2>&1; then
  echo "FAIL: plan_plot.py:"
  cat "$T/out"
  exit 1
fi
cat "$T/out"
if ! "$PY" - "$T/p.json" "$T/p.png" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["gpus"] == [1, 2, 4, 8, 16], d["gpus"]
assert len(d["drawn"]) == 3, d["drawn"]
assert d["sweep"][4]["plan"]["cluster"]["nodes"] == 4
with open(sys.argv[2], "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
PY
then
  echo "FAIL: the sweep JSON or the PNG is wrong"
  exit 1
fi
# the command itself: sharc-plan --png sweeps one node, x8, ... the cluster
if ! SHARC_PLAN_PYTHON=$PY "$B/plan/sharc-plan" --model gpt:70b --nodes 1024 \
  --gpus-per-node 8 --link intra:3,450 --link inter:5,50 --top 3 \
  --png "$T/c.png" >"$T/c.out" 2>&1; then
  echo "FAIL: sharc-plan --png:"
  cat "$T/c.out"
  exit 1
fi
grep -q -- "--gpus 8,64,512,4096,8192 " "$T/c.out" &&
  "$PY" -c "import sys; assert open(sys.argv[1], 'rb').read(8) == b'\\x89PNG\\r\\n\\x1a\\n'" \
    "$T/c.png" || {
  echo "FAIL: sharc-plan --png: no sweep 8..8192 or no PNG:"
  cat "$T/c.out"
  exit 1
}
SHARC_PLAN_PYTHON=/nonexistent "$B/plan/sharc-plan" \
  --model cnn --gpus-per-node 2 --png "$T/d.png" >"$T/d.out" 2>&1
grep -q "no python3 with matplotlib" "$T/d.out" || {
  echo "FAIL: sharc-plan --png without python says nothing clear:"
  cat "$T/d.out"
  exit 1
}
echo PASS

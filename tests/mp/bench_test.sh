#!/usr/bin/env bash
# sharc-bench end to end: nccl-tests layout, validation, JSON, the corruption
# switch, --timing call|stream with --passes and --cold, (mode mpi)
# --compare mpi under mpirun (both timings), (mode hydra) sharc
# started by MPICH's mpiexec, and (mode cuda) --mem cuda: 2 ranks on the
# GPU, or exit 77 with the bench's SKIP line where there is none.
#   bench_test.sh SHARCRUN SHARC_BENCH [core|mpi|hydra|cuda]
# Exit 0 pass, 1 fail, 77 skipped (with the reason on stdout).
set -u
run=$1 bench=$2 mode=${3:-core}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# An nccl-tests style parser: data rows are the lines that do not start
# with '#' and have 13 columns; prints "rows wrong_total".
parse() {
  awk '!/^#/ && NF == 13 && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ {
         rows++; w += $9 + $13
         if ($6 !~ /^[0-9.]+$/ || $7 !~ /^[0-9.]+$/ || $8 !~ /^[0-9.]+$/) bad++
       }
       END { if (bad) print "bad", bad; else print rows + 0, w + 0 }' "$1"
}

if [ "$mode" = mpi ]; then
  command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SHARC_TIMEOUT=30
  timeout 100 mpirun -np 2 --oversubscribe --mca btl self,vader "$bench" all \
    -b 8 -e 256K -f 8 -n 2 -w 1 --limits 0 --compare mpi -J "$tmp/c.json" \
    >"$tmp/c.out" 2>&1
  rc=$?
  if grep -q "built without MPI" "$tmp/c.out"; then
    echo "SKIP: sharc-bench built without MPI"; exit 77
  fi
  [ $rc -eq 0 ] || { cat "$tmp/c.out"; fail "--compare mpi exited $rc"; }
  [ "$(grep -c '^# Backend: mpi' "$tmp/c.out")" = 9 ] || fail "not 9 mpi tables"
  [ "$(grep -c '^# Compare: busbw sharc / mpi' "$tmp/c.out")" = 9 ] || fail "not 9 compare tables"
  [ "$(grep -c '^# Out of bounds values : 0 OK' "$tmp/c.out")" = 18 ] || fail "not 18 OK tables"
  read -r rows wrong < <(parse "$tmp/c.out")
  [ "$rows" -gt 0 ] && [ "$wrong" = 0 ] || fail "compare rows $rows wrong $wrong"
  python3 -m json.tool "$tmp/c.json" >/dev/null || fail "compare JSON invalid"
  python3 - "$tmp/c.json" <<'PY' || fail "compare JSON: send_recv rows"
import json, sys
d = json.load(open(sys.argv[1]))
sr = [r for r in d["results"] if r["collective"] == "send_recv"]
assert {r["backend"] for r in sr} == {"sharc", "mpi"}, sr
assert all(r["wrong"] == 0 and r["inplace_wrong"] is None for r in sr), sr
PY
  grep -q '^# MPI library: ' "$tmp/c.out" || fail "no '# MPI library' line"
  # the pairwise exchange against MPI_Sendrecv with the same peers, 4 ranks
  timeout 100 mpirun -np 4 --oversubscribe --mca btl self,vader "$bench" send_recv \
    --exchange pair -b 8 -e 64K -f 16 -n 2 -w 1 --limits 0 --compare mpi \
    >"$tmp/p.out" 2>&1 || { cat "$tmp/p.out"; fail "--compare mpi --exchange pair exited $?"; }
  [ "$(grep -c '^# Out of bounds values : 0 OK' "$tmp/p.out")" = 2 ] || fail "pair: not 2 OK tables"
  # the peer through the same stream loop, 2 passes
  timeout 100 mpirun -np 2 --oversubscribe --mca btl self,vader "$bench" all_reduce,broadcast \
    -b 8 -e 4K -f 8 -n 3 -w 1 --limits 0 --compare mpi --timing stream --passes 2 \
    >"$tmp/s.out" 2>&1 || { cat "$tmp/s.out"; fail "--compare mpi --timing stream exited $?"; }
  [ "$(grep -c '^# Out of bounds values : 0 OK' "$tmp/s.out")" = 4 ] || fail "--timing stream: not 4 OK tables"
  [ "$(grep -c '^# Passes (mpi): 2; ' "$tmp/s.out")" = 2 ] || fail "--timing stream: not 2 mpi passes tables"
  echo "PASS: --compare mpi ($rows rows)"
  exit 0
fi

# mode hydra: sharc alone started by MPICH's launcher (PMI_RANK, PMI_SIZE,
# MPI_LOCALRANKID, MPI_LOCALNRANKS; rendezvous port from the proxy's pid)
if [ "$mode" = hydra ]; then
  command -v mpiexec.mpich >/dev/null || { echo "SKIP: mpiexec.mpich not found (apt-get install mpich)"; exit 77; }
  export SHARC_TIMEOUT=30
  pids=()
  for job in 1 2; do # two jobs at once: each finds its own rendezvous port
    timeout 100 mpiexec.mpich -n 2 "$bench" all_reduce -b 8 -e 64K -f 8 -n 2 \
      -w 1 --limits 0 >"$tmp/h$job.out" 2>&1 &
    pids+=($!)
  done
  for job in 1 2; do
    wait "${pids[job - 1]}"
    rc=$?
    [ "$rc" -eq 0 ] || { cat "$tmp/h$job.out"; fail "job $job under mpiexec.mpich exited $rc"; }
    grep -q '^# Out of bounds values : 0 OK$' "$tmp/h$job.out" || fail "job $job: no OK table"
    grep -q '2 ranks on 1 host' "$tmp/h$job.out" || fail "job $job: not 2 ranks on 1 host"
  done
  echo "PASS: two jobs under mpiexec.mpich (Hydra)"
  exit 0
fi

# mode cuda: device memory through the staged path (sharc_stream_create_cuda)
if [ "$mode" = cuda ]; then
  export SHARC_TIMEOUT=30
  "$run" -n 2 --no-prefix --timeout 100 "$bench" all_reduce --mem cuda -b 8 \
    -e 1K -f 4 -n 2 -w 1 -J "$tmp/d.json" >"$tmp/d.out" 2>&1
  rc=$?
  if [ $rc -eq 77 ]; then
    grep -q '^SKIP: no CUDA device (.*)$' "$tmp/d.out" ||
      { cat "$tmp/d.out"; fail "exit 77 without a 'SKIP: no CUDA device (why)' line"; }
    [ "$(grep -c '^SKIP' "$tmp/d.out")" = 1 ] || fail "SKIP printed by more than rank 0"
    grep '^SKIP' "$tmp/d.out"
    exit 77
  fi
  [ $rc -eq 0 ] || { cat "$tmp/d.out"; fail "--mem cuda exited $rc (want 0, or 77 without a GPU)"; }
  cat "$tmp/d.out"
  grep -q '^# Out of bounds values : 0 OK$' "$tmp/d.out" || fail "no OK table"
  grep -q 'device memory (cudaMalloc' "$tmp/d.out" || fail "preamble does not say device memory"
  grep -q '^# Limits: GPU device-to-device copy [0-9.]* GB/s' "$tmp/d.out" || fail "no GPU limit line"
  read -r rows wrong < <(parse "$tmp/d.out")
  [ "$rows" = 4 ] && [ "$wrong" = 0 ] || fail "rows $rows wrong $wrong (want 4, 0)"
  python3 -m json.tool "$tmp/d.json" >/dev/null || fail "JSON invalid"
  echo "PASS: --mem cuda ($rows rows)"
  exit 0
fi

export SHARC_TIMEOUT=30
args=(all -b 8 -e 256K -f 8 -n 2 -w 1 -c 1 --limits 0)
"$run" -n 2 --no-prefix --timeout 50 "$bench" "${args[@]}" -J "$tmp/r.json" >"$tmp/ok.out" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$tmp/ok.out"; fail "clean run exited $rc"; }
[ "$(grep -c '^#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong$' "$tmp/ok.out")" = 9 ] \
  || { cat "$tmp/ok.out"; fail "not nine nccl-tests headers"; }
[ "$(grep -c '^# Out of bounds values : 0 OK$' "$tmp/ok.out")" = 9 ] || fail "not nine OK tables"
[ "$(grep -c '^# Avg bus bandwidth    : ' "$tmp/ok.out")" = 9 ] || fail "no Avg bus bandwidth lines"
grep -q '^# nThread 1 nGpus 1 minBytes 8 maxBytes 262144 step: 8(factor) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0$' "$tmp/ok.out" \
  || fail "preamble line differs from nccl-tests'"
read -r rows wrong < <(parse "$tmp/ok.out")
[ "$rows" = 54 ] || { cat "$tmp/ok.out"; fail "parsed $rows rows, want 54"; }
[ "$wrong" = 0 ] || fail "#wrong total $wrong"
python3 -m json.tool "$tmp/r.json" >/dev/null || fail "JSON invalid"
python3 - "$tmp/r.json" <<'PY' || fail "JSON rows"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["results"]) == 54, len(d["results"])
# send_recv (last in `all`) has no in-place form: null there
assert [r["collective"] for r in d["results"][-6:]] == ["send_recv"] * 6
assert all(r["wrong"] == 0 and r["inplace_wrong"] == (
    None if r["collective"] == "send_recv" else 0) for r in d["results"])
PY

# send_recv on 3 ranks (the previous rank is not the next), by nccl-tests'
# name, checked: #wrong 0 out of place, N/A in place
"$run" -n 3 --no-prefix --timeout 50 "$bench" sendrecv -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 \
  --limits 0 >"$tmp/sr.out" 2>&1 || { cat "$tmp/sr.out"; fail "send_recv on 3 ranks exited $?"; }
grep -q '^# Out of bounds values : 0 OK$' "$tmp/sr.out" || fail "send_recv: no OK table"
read -r srrows srwrong < <(parse "$tmp/sr.out")
[ "$srrows" = 5 ] && [ "$srwrong" = 0 ] || { cat "$tmp/sr.out"; fail "send_recv: rows $srrows wrong $srwrong (want 5, 0)"; }
[ "$(awk '!/^#/ && NF == 13 && $10 == "N/A" && $13 == "N/A"' "$tmp/sr.out" | wc -l)" = 5 ] \
  || fail "send_recv: in-place columns not N/A"
# --exchange pair on 3 ranks: 0<->1, and rank 2 with itself; checked
"$run" -n 3 --no-prefix --timeout 50 "$bench" send_recv --exchange pair -b 8 -e 64K -f 8 -n 2 \
  -w 1 -c 1 --limits 0 -J "$tmp/pair.json" >"$tmp/pair.out" 2>&1 \
  || { cat "$tmp/pair.out"; fail "send_recv --exchange pair exited $?"; }
grep -q '^# send_recv: --exchange pair' "$tmp/pair.out" || fail "pair: no exchange line"
read -r srrows srwrong < <(parse "$tmp/pair.out")
[ "$srrows" = 5 ] && [ "$srwrong" = 0 ] || { cat "$tmp/pair.out"; fail "pair: rows $srrows wrong $srwrong (want 5, 0)"; }
grep -q '"exchange": "pair"' "$tmp/pair.json" || fail "pair: JSON has no exchange"
"$bench" send_recv --exchange star 2>&1 | grep -q "exchange: ring or pair, not 'star'" \
  || fail "--exchange star not refused"

SHARC_BENCH_CORRUPT=1 "$run" -n 2 --no-prefix --timeout 50 "$bench" "${args[@]}" >"$tmp/bad.out" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "corrupted run exited 0"
grep -q '^# Out of bounds values : [1-9][0-9]* FAILED$' "$tmp/bad.out" || fail "no FAILED line"
read -r rows wrong < <(parse "$tmp/bad.out")
[ "$wrong" -gt 0 ] || fail "corrupted run shows #wrong 0"

# --timing call (-z 0: each call enqueued and synchronized) and stream
# (--cold 1: buffers moved every iteration), 2 passes, data checked: the
# rows, the passes tables and the JSON's pass statistics
for t in call stream; do
  if [ $t = call ]; then extra=(-z 0); else extra=(--cold 1); fi
  "$run" -n 2 --no-prefix --timeout 50 "$bench" all_gather,reduce_scatter,all_reduce,broadcast \
    -b 8 -e 32K -f 8 -n 3 -w 1 -c 1 --limits 0 --timing $t --passes 2 "${extra[@]}" \
    -J "$tmp/$t.json" >"$tmp/$t.out" 2>&1
  trc=$?
  [ $trc -eq 0 ] || { cat "$tmp/$t.out"; fail "--timing $t exited $trc"; }
  grep -q "^# Timing: $t " "$tmp/$t.out" || fail "--timing $t: no '# Timing: $t' line"
  [ "$(grep -c '^# Out of bounds values : 0 OK$' "$tmp/$t.out")" = 4 ] || fail "--timing $t: not four OK tables"
  [ "$(grep -c '^# Passes (sharc): 2; ' "$tmp/$t.out")" = 4 ] || fail "--timing $t: not four passes tables"
  read -r trows twrong < <(parse "$tmp/$t.out")
  [ "$trows" = 20 ] && [ "$twrong" = 0 ] || { cat "$tmp/$t.out"; fail "--timing $t: rows $trows wrong $twrong (want 20, 0)"; }
  python3 - "$tmp/$t.json" $t <<'PY' || fail "--timing $t: JSON"
import json, sys
d = json.load(open(sys.argv[1]))
t = sys.argv[2]
assert d["timing"] == t and d["passes"] == 2, (d["timing"], d["passes"])
assert d["cold"] == (t == "stream"), d["cold"]
assert len(d["results"]) == 20, len(d["results"])
for r in d["results"]:
    for p in ("", "inplace_"):
        assert r[p + "wrong"] == 0, r
        assert len(r[p + "pass_time_us"]) == 2, r
        assert r[p + "time_us"] == min(r[p + "pass_time_us"]), r
        assert r[p + "spread"] >= 1.0 and r[p + "cpu_us"] >= 0, r
        assert r[p + "busbw_median"] <= r[p + "busbw"] * 1.001 + 1e-4, r
        assert (r[p + "min_us"] is None) == (t == "stream"), r
PY
done
grep -q 'one operation enqueued and synchronized' "$tmp/call.out" || fail "--timing call -z 0: header does not say how the call completes"
grep -q 'one operation called blocking' "$tmp/ok.out" || fail "default run: not --timing call with blocking calls"
grep -q 'buffers cold (--cold 1' "$tmp/stream.out" || fail "--cold 1 not named in the header"

# SHARC_DEBUG=INFO names the algorithm each collective runs at each size
# (once per power of two), why, and the cost model's estimates; SHARC_ALGO
# forcing one is named as the reason
SHARC_DEBUG=INFO SHARC_DEBUG_SUBSYS=COMM "$run" -n 3 "$bench" all_reduce,broadcast \
  -b 8 -e 32K -f 64 -n 1 -w 0 --passes 1 >"$tmp/algo.out" 2>&1 || fail "INFO run failed"
for sz in 8 512 32768; do
  for c in all_reduce broadcast; do
    grep "^\[0\].*COMM sharc_$c of $sz bytes on 3 ranks: [a-z]* (the cost model's cheapest; the cost model's estimates, us: ring [0-9.e+]*" "$tmp/algo.out" >/dev/null ||
      { grep COMM "$tmp/algo.out"; fail "INFO: no algorithm line for $c of $sz bytes"; }
  done
done
[ "$(grep -c '^\[0\].*COMM sharc_all_reduce of 512 bytes' "$tmp/algo.out")" = 1 ] || fail "INFO: algorithm line repeated for one size"
SHARC_ALGO=ring SHARC_DEBUG=INFO SHARC_DEBUG_SUBSYS=COMM "$run" -n 2 "$bench" all_reduce \
  -b 64 -e 64 -n 1 -w 0 --passes 1 >"$tmp/algo2.out" 2>&1 || fail "INFO run with SHARC_ALGO failed"
grep -q "^\[0\].*COMM sharc_all_reduce of 64 bytes on 2 ranks: ring (SHARC_ALGO;" "$tmp/algo2.out" ||
  { grep COMM "$tmp/algo2.out"; fail "INFO: SHARC_ALGO=ring not named as the reason"; }

# bad usage: exit 2 with a message
"$run" -n 1 --no-prefix "$bench" all_reduce -a 7 >"$tmp/use.out" 2>&1
[ $? -eq 2 ] && grep -q -- "-a takes" "$tmp/use.out" || fail "bad -a not refused"
"$run" -n 1 --no-prefix "$bench" all_reduce --backend nccl >"$tmp/nccl.out" 2>&1
[ $? -eq 2 ] && grep -q "pass --mem cuda" "$tmp/nccl.out" || fail "--backend nccl without --mem cuda not refused clearly"
"$run" -n 1 --no-prefix "$bench" all_reduce --timing burst >"$tmp/tm.out" 2>&1
[ $? -eq 2 ] && grep -q -- "--timing: call or stream" "$tmp/tm.out" || fail "bad --timing not refused"
"$run" -n 1 --no-prefix "$bench" all_reduce --passes 0 >"$tmp/ps.out" 2>&1
[ $? -eq 2 ] && grep -q -- "--passes takes" "$tmp/ps.out" || fail "--passes 0 not refused"
echo "PASS: sharc-bench ($rows rows; corrupted run: #wrong $wrong, exit $rc)"

#!/bin/bash
# Alternating launches of one sharc-bench over several libsharc builds;
# per collective, size and build: the median over rounds of the per-call
# time (best of PASSES passes, out of place / in place) and of the CPU time
# per call, and the median over rounds of time(build)/time(first build) in
# the same round.
#   [MIN MAX F N W PASSES COLLS B] abt.sh NRANKS ROUNDS LIBDIR...
n=$1 rounds=$2; shift 2
B=${B:-/tmp/head/build}
dir=$(mktemp -d)
for r in $(seq "$rounds"); do
  i=0
  for L in "$@"; do
    LD_LIBRARY_PATH=$L $B/sharcrun -n "$n" $B/bench/sharc-bench ${COLLS:-all_reduce} \
      -b ${MIN:-8} -e ${MAX:-8192} -f ${F:-4} -n ${N:-2000} -w ${W:-200} -c 1 \
      --limits 0 --timing call --passes ${PASSES:-3} -J $dir/r${r}_b$i.json >/dev/null 2>&1
    i=$((i+1))
  done
done
python3 - "$dir" "$rounds" "$@" <<'PY'
import json, sys, statistics as st
d, rounds, libs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
data = {}
for r in range(1, rounds + 1):
    for i in range(len(libs)):
        try:
            res = json.load(open(f"{d}/r{r}_b{i}.json"))["results"]
        except Exception as e:
            print("missing", r, i, e); continue
        for x in res:
            data[(r, i, x["collective"], x["size"])] = x
keys = sorted({(k[2], k[3]) for k in data})
print("per-call time (us), median over %d rounds, out of place / in place; ratio = median of build/first in the same round" % rounds)
for coll, size in keys:
    line = "%-15s %8d" % (coll, size)
    for i in range(len(libs)):
        t = [data[(r, i, coll, size)]["time_us"] for r in range(1, rounds + 1) if (r, i, coll, size) in data]
        ti = [data[(r, i, coll, size)]["inplace_time_us"] for r in range(1, rounds + 1) if (r, i, coll, size) in data]
        c = [data[(r, i, coll, size)]["cpu_us"] for r in range(1, rounds + 1) if (r, i, coll, size) in data]
        line += "  | %.3f/%.3f cpu %.3f" % (st.median(t), st.median(ti), st.median(c))
        if i:
            rr = [data[(r, i, coll, size)]["time_us"] / data[(r, 0, coll, size)]["time_us"] for r in range(1, rounds + 1) if (r, i, coll, size) in data and (r, 0, coll, size) in data]
            ri = [data[(r, i, coll, size)]["inplace_time_us"] / data[(r, 0, coll, size)]["inplace_time_us"] for r in range(1, rounds + 1) if (r, i, coll, size) in data and (r, 0, coll, size) in data]
            line += " ratio %.3f/%.3f" % (st.median(rr), st.median(ri))
    print(line)
PY
rm -rf "$dir"

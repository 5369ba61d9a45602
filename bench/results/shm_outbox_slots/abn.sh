#!/bin/bash
# Rounds of alternating launches over several builds of libsharc (the same
# sharc-bench binary; LD_LIBRARY_PATH picks the library), then per build
# and size the median, least and greatest busbw over the rounds, and the
# median over rounds of each build's busbw over the first build's in the
# same round (launches next to each other share the VM's state).
#   [MIN=bytes MAX=bytes F=factor N=iters W=warmup COLL=name] \
#     abn.sh NRANKS ROUNDS LIBDIR...
n=$1 rounds=$2; shift 2
B=${B:-build-peers-impi}
out=$(mktemp)
for r in $(seq "$rounds"); do
  for L in "$@"; do
    LD_LIBRARY_PATH=$L $B/sharcrun -n "$n" $B/bench/sharc-bench ${COLL:-broadcast} \
      -b ${MIN:-2048} -e ${MAX:-32768} -f ${F:-2} -n ${N:-200} -w ${W:-20} -c 1 \
      -R 0 --timing call --passes 3 -d float -o sum 2>&1 |
      awk -v L=$L -v r=$r '/^\[0\] #  +[0-9]+ +float/ && $8 ~ /^[0-9.]+$/ {print L, $3, $8, r}' >>"$out"
  done
done
python3 - "$out" "$@" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
libs = sys.argv[2:]
sizes = sorted({int(r[1]) for r in rows})
print("busbw GB/s: median [least-greatest] over rounds")
print("%-28s" % "size" + "".join("%22s" % s for s in sizes))
for L in libs:
    cells = []
    for s in sizes:
        v = [float(r[2]) for r in rows if r[0] == L and int(r[1]) == s]
        cells.append("%6.2f [%5.2f-%5.2f]" % (st.median(v), min(v), max(v)) if v else "-")
    print("%-28s" % L[-28:] + "".join("%22s" % c for c in cells))
print("median over rounds of busbw / %s's in the same round" % libs[0])
bw = {(r[0], int(r[1]), r[3]): float(r[2]) for r in rows}
rounds = sorted({r[3] for r in rows})
for L in libs[1:]:
    cells = []
    for s in sizes:
        v = [bw[(L, s, k)] / bw[(libs[0], s, k)] for k in rounds
             if (L, s, k) in bw and bw.get((libs[0], s, k))]
        cells.append("%.2f" % st.median(v) if v else "-")
    print("%-28s" % L[-28:] + "".join("%22s" % c for c in cells))
PY
rm -f "$out"

#!/bin/bash
# Alternating launches of several builds of libsharc under one sharc-bench
# (LD_LIBRARY_PATH picks the library), ROUNDS rounds; per build and size
# the median busbw over rounds, out of place and in place, and the median
# over rounds of each build's busbw over the first build's in the same
# round (launches next to each other share the VM's state).
#   [MIN=bytes MAX=bytes F=factor N=iters W=warmup COLL=name B=builddir] \
#     ab.sh NRANKS ROUNDS LIBDIR...
n=$1 rounds=$2; shift 2
B=${B:-build-peers-impi}
out=$(mktemp)
for r in $(seq "$rounds"); do
  for L in "$@"; do
    LD_LIBRARY_PATH=$L $B/sharcrun -n "$n" $B/bench/sharc-bench ${COLL:-broadcast} \
      -b ${MIN:-131072} -e ${MAX:-8388608} -f ${F:-2} -n ${N:-100} -w ${W:-5} -c 1 \
      -R 0 --timing call --passes 2 --limits 0 -d float -o sum 2>&1 |
      awk -v L=$L -v r=$r '/^\[0\] #  +[0-9]+ +float/ && $8 ~ /^[0-9.]+$/ {print L, $3, $8, $13, r}' >>"$out"
  done
done
python3 - "$out" "$@" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
libs = sys.argv[2:]
sizes = sorted({int(r[1]) for r in rows})
rounds = sorted({r[4] for r in rows})
for col, name in ((2, "out of place"), (3, "in place")):
    print("busbw GB/s, %s: median over %d rounds" % (name, len(rounds)))
    print("%-16s" % "size" + "".join("%17dK" % (s // 1024) for s in sizes))
    bw = {(r[0], int(r[1]), r[4]): float(r[col]) for r in rows}
    for L in libs:
        v = [[bw[(L, s, k)] for k in rounds if (L, s, k) in bw] for s in sizes]
        print("%-16s" % L[-16:] + "".join("%18.2f" % st.median(x) if x else "%18s" % "-" for x in v))
    for L in libs[1:]:
        cells = []
        for s in sizes:
            v = [bw[(L, s, k)] / bw[(libs[0], s, k)] for k in rounds
                 if (L, s, k) in bw and bw.get((libs[0], s, k))]
            cells.append("%18s" % ("%.2f [%.2f-%.2f]" % (st.median(v), min(v), max(v)) if v else "-"))
        print("%-16s" % ("ratio " + L[-10:]) + "".join(cells))
PY
rm -f "$out"

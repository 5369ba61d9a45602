#!/bin/bash
# Rounds of alternating launches over several builds of libsharc (the same
# sharc-bench binary; LD_LIBRARY_PATH picks the library), then per build
# and size the median, least and greatest busbw over the rounds, and the
# median over rounds of each build's busbw over the first build's in the
# same round (launches next to each other share the VM's state).
# INPLACE=1: out-of-place and in-place tables instead, each with the
# median busbw per build and the paired ratios' median [least-greatest].
#   [MIN=bytes MAX=bytes F=factor N=iters W=warmup COLL=name PASSES=p
#    EXTRA="more sharc-bench flags" INPLACE=1 B=builddir] \
#     abn.sh NRANKS ROUNDS LIBDIR...
n=$1 rounds=$2; shift 2
B=${B:-build-peers-impi}
out=$(mktemp)
for r in $(seq "$rounds"); do
  for L in "$@"; do
    # shellcheck disable=SC2086 # EXTRA: several flags
    LD_LIBRARY_PATH=$L $B/sharcrun -n "$n" $B/bench/sharc-bench ${COLL:-broadcast} \
      -b ${MIN:-2048} -e ${MAX:-32768} -f ${F:-2} -n ${N:-200} -w ${W:-20} -c 1 \
      -R 0 --timing call --passes ${PASSES:-3} ${EXTRA:-} -d float -o sum 2>&1 |
      awk -v L=$L -v r=$r '/^\[0\] #  +[0-9]+ +float/ && $8 ~ /^[0-9.]+$/ {print L, $3, $8, $13, r}' >>"$out"
  done
done
INPLACE=${INPLACE:-} python3 - "$out" "$@" <<'PY'
import os, sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
libs = sys.argv[2:]
sizes = sorted({int(r[1]) for r in rows})
rounds = sorted({r[4] for r in rows})
if not os.environ.get("INPLACE"):
    print("busbw GB/s: median [least-greatest] over rounds")
    print("%-28s" % "size" + "".join("%22s" % s for s in sizes))
    for L in libs:
        cells = []
        for s in sizes:
            v = [float(r[2]) for r in rows if r[0] == L and int(r[1]) == s]
            cells.append("%6.2f [%5.2f-%5.2f]" % (st.median(v), min(v), max(v)) if v else "-")
        print("%-28s" % L[-28:] + "".join("%22s" % c for c in cells))
    print("median over rounds of busbw / %s's in the same round" % libs[0])
    bw = {(r[0], int(r[1]), r[4]): float(r[2]) for r in rows}
    for L in libs[1:]:
        cells = []
        for s in sizes:
            v = [bw[(L, s, k)] / bw[(libs[0], s, k)] for k in rounds
                 if (L, s, k) in bw and bw.get((libs[0], s, k))]
            cells.append("%.2f" % st.median(v) if v else "-")
        print("%-28s" % L[-28:] + "".join("%22s" % c for c in cells))
    sys.exit(0)
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

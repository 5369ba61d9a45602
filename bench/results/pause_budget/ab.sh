#!/bin/bash
# ab.sh NRANKS ROUNDS COLL LIBDIR... : alternating launches of the sweep's
# small part (8 B-32 MiB x4, 20 calls, 3 passes); JSON per launch in OUT.
n=$1 rounds=$2 coll=$3; shift 3
# Run from the repository root; B: a build with sharc-bench and sharcrun.
B=${B:-build-peers-impi}
OUT=${OUT:-out}
mkdir -p "$OUT"
for r in $(seq "$rounds"); do
  for L in "$@"; do
    tag=$(echo $L | tr / _)
    LD_LIBRARY_PATH=$L $B/sharcrun -n "$n" $B/bench/sharc-bench $coll \
      -b 8 -e ${MAX:-32M} -f 4 -n 20 -w 5 -c 1 -R 0 --timing call --passes 3 \
      --limits 0 -J $OUT/${tag}_r$r.json > /dev/null 2>&1 || echo "fail $L $r"
  done
done

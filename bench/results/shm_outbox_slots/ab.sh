#!/bin/bash
# Alternating launches of one sharc-bench against two builds of libsharc
# (the same binary; LD_LIBRARY_PATH picks the library: its RUNPATH lets it).
#   [MIN=bytes F=factor W=warmup] ab.sh OLD_LIBDIR NEW_LIBDIR NRANKS ROUNDS COLL MAXBYTES [ITERS]
# Per launch: per-call timing, -R 0, best of 3 passes; prints each size's
# best busbw (GB/s) out of place.
old=$1 new=$2 n=$3 rounds=$4 coll=$5 max=$6 it=${7:-20}
B=${B:-build-peers-impi}
for r in $(seq "$rounds"); do
  for v in old new; do
    L=$old; [ $v = new ] && L=$new
    LD_LIBRARY_PATH=$L $B/sharcrun -n "$n" $B/bench/sharc-bench "$coll" \
      -b ${MIN:-8} -e "$max" -f ${F:-4} -n "$it" -w ${W:-5} -c 1 -R 0 --timing call --passes 3 \
      -d float -o sum 2>&1 |
      awk -v a=$v -v r=$r '/^\[0\] #  +[0-9]+ +float/ {printf "%s:%s ", $3, $8}
        END {print "  <- " a " round " r}'
  done
done

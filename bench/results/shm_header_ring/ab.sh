#!/bin/bash
# ab.sh ROUNDS NRANKS LIBDIR_A LIBDIR_B [MIN] [MAX]: alternating launches of
# sharc-bench with the libsharc of LIBDIR_A and of LIBDIR_B (copies of two
# builds' libsharc.so*); prints per collective the per-call time (us, best
# of 3 passes of 200 calls, -R 0, float sum) at MIN..MAX (x4).
# Run from the repository root (BUILD: the build folder, build-dev).
rounds=$1 n=$2 a=$3 b=$4 min=${5:-8} max=${6:-32K}
B=${BUILD:-build-dev}
for r in $(seq "$rounds"); do
  for lib in "$a" "$b"; do
    printf "%-14s r%d:\n" "$(basename "$lib")" "$r"
    LD_LIBRARY_PATH=$lib "$B/sharcrun" -n "$n" "$B/bench/sharc-bench" \
      all_gather,all_reduce,reduce_scatter,broadcast -b "$min" -e "$max" -f 4 \
      -n 200 -w 20 -c 1 -R 0 --timing call --passes 3 -d float -o sum 2>&1 |
      awk '/^\[0\] # Collective test:/ { c = $5; order[m++] = c }
           /^\[0\] +[0-9]/ { line[c] = line[c] sprintf(" %s:%s", $2, $7) }
           END { for (i = 0; i < m; i++) printf "  %-15s%s\n", order[i], line[order[i]] }'
  done
done

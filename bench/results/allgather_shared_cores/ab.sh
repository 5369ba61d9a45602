#!/bin/bash
# ab.sh ROUNDS NRANKS BIND "COLL ALGO,COLL ALGO,...": alternating launches;
# out-of-place / in-place busbw (GB/s, best of 3 passes of 20 calls, per
# call) at 32 KiB-8 MiB (x4) for each collective forced to each algorithm
# (SHARC_ALGO; auto: the cost model's choice), sharcrun --bind BIND.
# Run from the repository root (BUILD: the build folder, build-dev).
rounds=$1 n=$2 bind=$3
B=${BUILD:-build-dev}
IFS=, read -ra specs <<<"${4:-all_gather auto,all_gather tree}"
for r in $(seq "$rounds"); do
  for spec in "${specs[@]}"; do
    read -r coll algo <<<"$spec"
    printf "%-14s %-13s r%d: " "$coll" "$algo" "$r"
    SHARC_ALGO=$algo "$B/sharcrun" -n "$n" --bind "$bind" "$B/bench/sharc-bench" "$coll" \
      -b 32K -e 8M -f 4 -n 20 -w 5 -c 1 -R 0 --timing call --passes 3 -d float \
      -o sum 2>&1 | awk '/^\[0\] +[0-9]/ { printf "%s=%s/%s ", $2, $8, $12 } END { print "" }'
  done
done

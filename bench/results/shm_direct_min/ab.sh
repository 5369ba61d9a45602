#!/bin/bash
# ab.sh ROUNDS NRANKS "REG MIN,REG MIN,..." MINSIZE MAXSIZE: alternating
# launches; per-call time (us, best of 3 passes of 200 calls) of
# all_gather | all_reduce | reduce_scatter at MINSIZE..MAXSIZE (x4), for
# each config: sharc-bench -R REG with SHARC_SHM_DIRECT_MIN_BYTES=MIN.
# Run from the repository root (BUILD: the build folder, build-dev).
rounds=$1 n=$2 min=${4:-256} max=${5:-4K}
B=${BUILD:-build-dev}
IFS=, read -ra cfgs <<<"${3:-0 0,1 0,1 2048}"
for r in $(seq "$rounds"); do
  for cfg in "${cfgs[@]}"; do
    read -r reg least <<<"$cfg"
    printf "R%s min%-5s r%d: " "$reg" "$least" "$r"
    SHARC_SHM_DIRECT_MIN_BYTES=$least "$B/sharcrun" -n "$n" "$B/bench/sharc-bench" \
      all_gather,all_reduce,reduce_scatter -b "$min" -e "$max" -f 4 -n 200 -w 20 \
      -c 1 -R "$reg" --timing call --passes 3 -d float -o sum 2>&1 |
      awk '/^\[0\] +[0-9]/ { t[n++] = $7 } END { per = n / 3
             for (i = 0; i < n; i++) printf "%s%s", t[i], (i + 1) % per ? " " : " | "
             print "" }'
  done
done

#!/bin/bash
# placement.sh ROUNDS: all-gather at 4 ranks on 2 CPUs, the ring and the
# tree (SHARC_ALGO), with rank r pinned to CPU r mod 2 (cyclic: what
# sharcrun --bind shared does; ring neighbours on different CPUs) or to
# CPU r / 2 (block: ring neighbours 0-1 and 2-3 on one CPU). Busbw GB/s
# out of place / in place, best of 3 passes. Run from the repository root.
B=${BUILD:-build-dev}
for r in $(seq "${1:-3}"); do
  for spec in "cyclic ring" "block ring" "cyclic tree" "block tree"; do
    read -r place algo <<<"$spec"
    printf "%-6s %-4s r%d: " "$place" "$algo" "$r"
    SHARC_ALGO=$algo PLACE=$place "$B/sharcrun" -n 4 --bind none bash -c '
      [ "$PLACE" = block ] && cpu=$((SHARC_LOCAL_RANK / 2)) || cpu=$((SHARC_LOCAL_RANK % 2))
      exec taskset -c $cpu "$0" "$@"' "$B/bench/sharc-bench" all_gather \
      -b 32K -e 8M -f 4 -n 20 -w 5 -c 1 -R 0 --timing call --passes 3 -d float \
      -o sum 2>&1 | awk '/^\[0\] +[0-9]/ { printf "%s=%s/%s ", $2, $8, $12 } END { print "" }'
  done
done

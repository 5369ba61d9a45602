#!/usr/bin/env python3
"""regress_compare.py - before/after table of two sets of sharc-bench -J runs.

usage: regress_compare.py DIR  (DIR holds {before,after}_n{N}_pass{P}.json)

For each rank count, collective and size: the out-of-place time (us) of
each side, the best (lowest) of its passes, and the ratio after/before.
Prints a markdown table per rank count and, per rank count, the geometric
mean ratio over sizes >= 128 KiB and below it.
"""
import glob
import json
import math
import os
import re
import sys


def load(d):
    runs = {}
    for f in glob.glob(os.path.join(d, "*_n*_pass*.json")):
        m = re.match(r"(before|after)_n(\d+)_pass(\d+)\.json", os.path.basename(f))
        if not m:
            continue
        side, n = m.group(1), int(m.group(2))
        for r in json.load(open(f))["results"]:
            key = (n, r["collective"], r["size"])
            runs.setdefault(key, {}).setdefault(side, []).append(r["time_us"])
    return runs


def main(d):
    runs = load(d)
    for n in sorted({k[0] for k in runs}):
        print(f"\n### {n} ranks (time in us, best of the passes; ratio after/before)\n")
        print("| collective | size | before | after | ratio |")
        print("|---|---:|---:|---:|---:|")
        small, large = [], []
        for key in sorted(k for k in runs if k[0] == n):
            v = runs[key]
            if "before" not in v or "after" not in v:
                continue
            b, a = min(v["before"]), min(v["after"])
            ratio = a / b if b > 0 else float("nan")
            (large if key[2] >= 131072 else small).append(ratio)
            print(f"| {key[1]} | {key[2]} | {b:.2f} | {a:.2f} | {ratio:.2f} |")
        for name, xs in (("< 128 KiB", small), (">= 128 KiB", large)):
            if xs:
                g = math.exp(sum(math.log(x) for x in xs) / len(xs))
                print(f"\n{n} ranks, sizes {name}: geometric mean ratio {g:.3f} over {len(xs)} rows")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])

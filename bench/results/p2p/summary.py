#!/usr/bin/env python3
"""summary.py - the send_recv runs beside this file as markdown tables.

    python3 bench/results/p2p/summary.py [DIR]

Reads send_recv_n{N}_run{R}.json (sharc-bench --compare mpi -J); per rank
count one table: per size the out-of-place busbw (GB/s, best of the passes)
of sharc and MPI in each run, and the ratio sharc / MPI per run (> 1: sharc
ahead). Then, per rank count, the sizes where MPI is ahead in some run.
"""
import glob
import json
import os
import re
import sys


def size_str(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return "%d %s" % (b // k, unit)
    return "%d B" % b


def main(d):
    runs = {}  # n -> run -> backend -> size -> busbw
    for f in sorted(glob.glob(os.path.join(d, "send_recv_n*_run*.json"))):
        m = re.match(r"send_recv_n(\d+)_run(\d+)\.json$", os.path.basename(f))
        if not m:
            continue
        n, run = int(m.group(1)), int(m.group(2))
        for r in json.load(open(f))["results"]:
            assert r["collective"] == "send_recv" and r["wrong"] == 0, (f, r)
            assert r["inplace_time_us"] is None, (f, r)
            runs.setdefault(n, {}).setdefault(run, {}).setdefault(
                r["backend"], {})[r["size"]] = r["busbw"]
    for n in sorted(runs):
        rs = sorted(runs[n])
        print("\n### %d ranks\n" % n)
        print("| size | " + " | ".join(
            "sharc r%d | MPI r%d | ratio r%d" % (r, r, r) for r in rs) + " |")
        print("|---:|" + "---:|---:|---:|" * len(rs))
        behind = []
        for size in sorted(runs[n][rs[0]]["sharc"]):
            cells, lose = [], 0
            for r in rs:
                s, p = runs[n][r]["sharc"][size], runs[n][r]["mpi"][size]
                q = s / p if p > 0 else float("nan")
                lose += q < 1
                cells.append("%.2f | %.2f | %.2f" % (s, p, q))
            if lose:
                behind.append("%s (%d of %d runs)" % (size_str(size), lose,
                                                      len(rs)))
            print("| %s | %s |" % (size_str(size), " | ".join(cells)))
        print("\n%d ranks, MPI ahead at: %s" % (n, ", ".join(behind) or
                                                "no size"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.abspath(__file__)))

#!/usr/bin/env python3
"""summary.py - the runs beside this file (run.sh) as markdown tables.

    python3 bench/results/new_ops/summary.py [DIR]

Reads OP_n{N}_run{R}.json (sharc-bench --compare mpi -J). Per operation and
rank count: the ratio sharc / MPI of the busbw (best of the passes) per size
and run, out of place and (where the operation has one) in place, > 1:
sharc ahead; then the sizes where MPI is ahead in some run, and the time
per call at 8 B. Asserts every row was checked with #wrong 0.
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


def load(d):
    runs = {}  # (op, n) -> run -> backend -> size -> row
    pat = re.compile(r"(.+)_n(\d+)_run(\d+)\.json$")
    for f in sorted(glob.glob(os.path.join(d, "*_n*_run*.json"))):
        m = pat.match(os.path.basename(f))
        if not m:
            continue
        op, n, run = m.group(1), int(m.group(2)), int(m.group(3))
        for r in json.load(open(f))["results"]:
            assert r["wrong"] == 0 and r["inplace_wrong"] in (0, None), (f, r)
            runs.setdefault((op, n), {}).setdefault(run, {}).setdefault(
                r["backend"], {})[r["size"]] = r
    return runs


def ratio(s, p, key):
    if s.get(key) is None or p.get(key) is None or p[key] <= 0:
        return None
    return s[key] / p[key]


def fmt(q):
    return "-" if q is None else "%.2f" % q


BANDS = ((8, 2048), (4096, 65536), (131072, 4 << 20), (8 << 20, 256 << 20))


def bands(runs):
    """One table: per operation and rank count, the out-of-place ratio's
    range (over runs and sizes) in each size band, in-place after a slash."""
    print("| op | ranks | " + " | ".join(
        "%s-%s" % (size_str(a), size_str(b)) for a, b in BANDS) + " |")
    print("|---|---:|" + "---|" * len(BANDS))
    for op, n in sorted(runs):
        rr = runs[(op, n)]
        cells = []
        for a, b in BANDS:
            got = {"busbw": [], "inplace_busbw": []}
            for run in rr.values():
                for size, s in run["sharc"].items():
                    if a <= size <= b and s["count"]:
                        for key in got:
                            q = ratio(s, run["mpi"][size], key)
                            if q is not None:
                                got[key].append(q)
            cell = "%.2f-%.2f" % (min(got["busbw"]), max(got["busbw"]))
            if got["inplace_busbw"]:
                cell += " / %.2f-%.2f" % (min(got["inplace_busbw"]),
                                          max(got["inplace_busbw"]))
            cells.append(cell)
        print("| %s | %d | %s |" % (op, n, " | ".join(cells)))


def main(d):
    runs = load(d)
    bands(runs)
    for op, n in sorted(runs):
        rr = runs[(op, n)]
        rs = sorted(rr)
        inplace = any(r.get("inplace_busbw") is not None
                      for r in rr[rs[0]]["sharc"].values())
        print("\n### %s, %d ranks\n" % (op, n))
        head = ["size"] + ["out r%d" % r for r in rs]
        if inplace:
            head += ["in r%d" % r for r in rs]
        print("| " + " | ".join(head) + " |")
        print("|" + "---:|" * len(head))
        behind = []
        for size in sorted(rr[rs[0]]["sharc"]):
            cells, lose = [], 0
            keys = ["busbw"] + (["inplace_busbw"] if inplace else [])
            for key in keys:
                for r in rs:
                    q = ratio(rr[r]["sharc"][size], rr[r]["mpi"][size], key)
                    lose += q is not None and q < 1
                    cells.append(fmt(q))
            if lose:
                behind.append(size_str(size))
            print("| %s | %s |" % (size_str(size), " | ".join(cells)))
        first = min(z for z, r in rr[rs[0]]["sharc"].items() if r["count"])
        t = ", ".join("r%d %.2f / %.2f" % (
            r, rr[r]["sharc"][first]["time_us"], rr[r]["mpi"][first]["time_us"])
            for r in rs)
        print("\nMPI ahead (some run, some placement) at: %s" %
              (", ".join(behind) or "no size"))
        print("Time per call at %s, sharc / MPI (us): %s" % (size_str(first), t))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.abspath(__file__)))

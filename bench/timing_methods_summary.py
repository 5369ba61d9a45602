#!/usr/bin/env python3
"""Tables of bench/timing_methods.sh's results: per collective and size,
out-of-place, each run's time per call (the best pass's), its busbw (best
and median over passes), spread and CPU time per call.

    python3 bench/timing_methods_summary.py bench/results/timing_methods [--ranks 2] [--tag run1]

Prints Markdown on stdout.
"""
import argparse
import json
import os

RUNS = [  # (file stem, backend in that file, column label)
    ("call_sharc", "sharc", "sharc call"),
    ("call_sharc_z0", "sharc", "sharc call -z 0"),
    ("stream_sharc", "sharc", "sharc stream"),
    ("stream_cold", "sharc", "sharc stream cold"),
    ("call_mpi", "sharc", "sharc call (mpirun)"),
    ("call_mpi", "mpi", "Open MPI call"),
    ("stream_mpi", "sharc", "sharc stream (mpirun)"),
    ("stream_mpi", "mpi", "Open MPI stream"),
]
COLLS = ["all_gather", "reduce_scatter", "all_reduce", "broadcast"]


def load(d, n, tag):
    rows = {}
    for stem, be, label in RUNS:
        path = os.path.join(d, f"{stem}_n{n}_{tag}.json")
        if not os.path.exists(path):
            continue
        for r in json.load(open(path))["results"]:
            if r["backend"] == be:
                rows[(label, r["collective"], r["size"])] = r
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--tag", default="run1")
    ap.add_argument("--sizes", default="8,1024,8192,65536,524288,4194304")
    a = ap.parse_args()
    rows = load(a.dir, a.ranks, a.tag)
    labels = [lab for _, _, lab in RUNS if any(k[0] == lab for k in rows)]
    sizes = [int(s) for s in a.sizes.split(",")]
    what = [
        ("time per call (us), best pass", lambda r: f"{r['time_us']:.2f}"),
        ("busbw (GB/s): best / median of the passes",
         lambda r: f"{r['busbw']:.2f} / {r['busbw_median']:.2f}"),
        ("spread (slowest / fastest pass time)", lambda r: f"{r['spread']:.2f}"),
        ("CPU time per call (us; max over ranks, the best pass)",
         lambda r: f"{r['cpu_us']:.2f}"),
    ]
    for title, fmt in what:
        print(f"### {title}, {a.ranks} ranks, out-of-place ({a.tag})\n")
        print("| collective | size (B) | " + " | ".join(labels) + " |")
        print("|---|---:|" + "---:|" * len(labels))
        for c in COLLS:
            for s in sizes:
                cells = []
                for lab in labels:
                    r = rows.get((lab, c, s))
                    cells.append(fmt(r) if r and r["time_us"] is not None else "")
                print(f"| {c} | {s} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plots sharc-bench JSON results: bus bandwidth against message size,
log-log, one line per (file, backend, collective), out-of-place.

    python3 bench/plot.py bench/results/compare_mpi_4ranks.json -o out.png

Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+", help="sharc-bench -J files")
    ap.add_argument("-o", "--output", default="bench.png")
    ap.add_argument("--inplace", action="store_true", help="in-place columns")
    ap.add_argument("--type", default="float", help="element type to plot")
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    styles = {"sharc": "-", "mpi": "--", "nccl": ":"}
    colors = {"all_gather": "C0", "reduce_scatter": "C1", "all_reduce": "C2",
              "broadcast": "C3", "reduce": "C4", "gather": "C5",
              "scatter": "C6", "all_to_all": "C7", "send_recv": "C8"}
    key = "inplace_busbw" if a.inplace else "busbw"
    meta = []
    for path in a.json:
        d = json.load(open(path))
        meta.append("%d ranks on %s" % (d.get("nranks", 0), d.get("host", "?")))
        lines = {}
        for r in d["results"]:
            if r.get("type", "float") != a.type or r["size"] <= 0:
                continue
            if r.get("redop", "sum") not in ("sum", "none"):
                continue
            if r.get(key) is None:  # placement the backend does not run
                continue
            k = (r.get("backend", "sharc"), r["collective"])
            lines.setdefault(k, []).append((r["size"], r[key]))
        tag = "" if len(a.json) == 1 else os.path.basename(path) + ": "
        for (backend, coll), pts in sorted(lines.items()):
            pts.sort()
            xs = [p[0] for p in pts]
            ys = [max(p[1], 1e-4) for p in pts]
            ax.plot(xs, ys, styles.get(backend, "-."), marker="o", ms=3,
                    color=colors.get(coll),
                    label="%s%s %s" % (tag, backend, coll))
        lim = d.get("limits", {})
        if lim.get("memcpy_all") and d.get("nranks", 0) > 1:
            ax.axhline(lim["memcpy_all"] / d["nranks"], color="grey", lw=0.8,
                       ls=":", label="%slimit: memcpy all ranks / n" % tag)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s, %s)" %
                  ("in-place" if a.inplace else "out-of-place"))
    ax.set_title(a.title or "sharc-bench, " + "; ".join(sorted(set(meta))))
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print("wrote", a.output)


if __name__ == "__main__":
    main()

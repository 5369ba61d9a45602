#!/usr/bin/env python3
"""trace_plot.py - one training step of sharc-train's Chrome traces as a PNG.

usage: trace_plot.py TRACE_DIR -o OUT.png [--step N] [--title TEXT]

Reads TRACE_DIR/trace-rank*.json (written by sharc-train --trace or
SHARC_TRACE=DIR) and draws, per rank, two lanes over time: the caller's
thread (forward, backward, optimizer, and the waits for communication) and
the communication stream (all-gathers, reduce-scatters, replica
all-reduces). Overlap is where a stream bar sits under a compute bar.
Needs python3-matplotlib.
"""
import argparse
import glob
import json
import os
import re

COLORS = {"forward": "#4c72b0", "backward": "#55a868", "optimizer": "#8172b2",
          "wait": "#c44e52", "all_gather": "#dd8452",
          "reduce_scatter": "#937860", "all_reduce": "#da8bc3"}


def color(name):
    return COLORS.get(name.split()[0], "#8c8c8c")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--step", type=int, default=0,
                    help="step to draw (default: the last one traced)")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = sorted(glob.glob(os.path.join(a.dir, "trace-rank*.json")),
                   key=lambda p: int(re.findall(r"(\d+)\.json$", p)[0]))
    if not files:
        raise SystemExit(f"trace_plot: no trace-rank*.json in {a.dir}")
    ranks = [[e for e in json.load(open(f))["traceEvents"]
              if e.get("ph") == "X"] for f in files]
    step = a.step or max(e["args"]["step"] for r in ranks for e in r)
    ranks = [[e for e in r if e["args"]["step"] == step] for r in ranks]
    t0 = min(e["ts"] for r in ranks for e in r)
    fig, ax = plt.subplots(figsize=(12, 0.9 * len(ranks) + 1.2))
    labels = []
    for i, evs in enumerate(ranks):
        for e in evs:
            y = 2 * (len(ranks) - 1 - i) + (0 if e["tid"] == 1 else 1)
            ax.barh(y, e["dur"] / 1e3, left=(e["ts"] - t0) / 1e3, height=0.8,
                    color=color(e["name"]), edgecolor="none")
        labels += [(2 * (len(ranks) - 1 - i), f"rank {i} comm"),
                   (2 * (len(ranks) - 1 - i) + 1, f"rank {i} compute")]
    ax.set_yticks([y for y, _ in labels])
    ax.set_yticklabels([t for _, t in labels])
    ax.set_xlabel("ms since the step began")
    ax.set_title(a.title or f"sharc-train step {step}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, list(COLORS), ncol=len(COLORS), fontsize=7,
              loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"trace_plot: step {step} of {len(ranks)} ranks -> {a.out}")


if __name__ == "__main__":
    main()

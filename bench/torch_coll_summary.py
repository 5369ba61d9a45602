#!/usr/bin/env python3
"""torch_coll_summary.py OUT: the tables of bench/torch_coll.sh's files in
OUT (markdown on stdout). Per rank count and timing method, per collective
and size: bus bandwidth (GB/s, best of the passes; the median pass in
parentheses) of torch.distributed through the sharc backend, of sharc-bench
(sharc's C API) and of torch.distributed through gloo; then the time per
call of the first two and their difference, the cost of the Python layer
(torch's own wrapper and sharc.torch), with gloo's time beside it."""

import glob
import json
import os
import re
import sys

COLLS = ("all_gather", "reduce_scatter", "all_reduce")


def human(b):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            return f"{b / f:g} {unit}"
    return f"{b} B"


def load(path):
    with open(path) as f:
        return json.load(f)


def torch_rows(d):
    out = {c: [] for c in COLLS}
    for r in d["rows"]:
        out[r["coll"]].append((r["size"], r["time_us"], r["busbw"],
                               r["median_busbw"]))
    return out


def bench_rows(d):
    out = {c: [] for c in COLLS}
    for r in d["results"]:
        if r["collective"] in out:
            out[r["collective"]].append((r["size"], r["time_us"], r["busbw"],
                                         r.get("busbw_median", r["busbw"])))
    return out


def merged(reader, out, stem):
    """The rows of OUT/STEM.json and of its extra sweeps OUT/STEM_*.json
    (torch_coll.sh's 256 MiB point), by collective and size."""
    rows = reader(load(os.path.join(out, stem + ".json")))
    for extra in sorted(glob.glob(os.path.join(out, stem + "_*.json"))):
        for c, rs in reader(load(extra)).items():
            rows[c] = sorted(rows[c] + rs)
    return rows


def main():
    out = sys.argv[1]
    print("# torch.distributed on sharc and on gloo, and sharc-bench\n")
    for f in sorted(glob.glob(os.path.join(out, "torch_sharc_*_n*.json"))):
        m = re.search(r"torch_sharc_([a-z]+)_n(\d+)\.json$", f)
        if not m:
            continue  # an extra sweep, merged into its main file
        timing, n = m.group(1), int(m.group(2))
        try:
            ts = merged(torch_rows, out, f"torch_sharc_{timing}_n{n}")
            tg = merged(torch_rows, out, f"torch_gloo_{timing}_n{n}")
            sb = merged(bench_rows, out, f"sharc_bench_{timing}_n{n}")
        except OSError as e:
            print(f"(missing: {e.filename})\n")
            continue
        what = ("per call: a barrier, t0, one call, t1; the median "
                "iteration's slowest rank" if timing == "call" else
                "back to back: the slowest rank's mean over calls in a row")
        print(f"## {n} ranks, timing {timing} ({what})\n")
        print("busbw in GB/s, best of 3 passes (median pass); Python layer ="
              " torch on sharc's time - sharc-bench's (best passes)\n")
        print("| collective | size | torch on sharc | sharc-bench | "
              "torch on gloo | torch on sharc us | sharc-bench us | "
              "Python layer us | torch on gloo us | sharc / gloo |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for c in COLLS:
            bench_at = {row[0]: row for row in sb[c]}
            gloo_at = {row[0]: row for row in tg[c]}
            for size, us, bw, mbw in ts[c]:
                # the same whole-buffer size (a size too small for every
                # rank to get an element has no sharc-bench row)
                b, g = bench_at.get(size), gloo_at.get(size)
                cells = [c, human(size), f"{bw:.3g} ({mbw:.3g})"]
                cells.append(f"{b[2]:.3g} ({b[3]:.3g})" if b else "-")
                cells.append(f"{g[2]:.3g} ({g[3]:.3g})" if g else "-")
                cells.append(f"{us:.1f}")
                cells.append(f"{b[1]:.1f}" if b else "-")
                cells.append(f"{us - b[1]:.1f}" if b else "-")
                cells.append(f"{g[1]:.1f}" if g else "-")
                cells.append(f"{g[1] / us:.1f}x" if g and us > 0 else "-")
                print("| " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()

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


def main():
    out = sys.argv[1]
    print("# torch.distributed on sharc and on gloo, and sharc-bench\n")
    for f in sorted(glob.glob(os.path.join(out, "torch_sharc_*_n*.json"))):
        m = re.search(r"torch_sharc_(\w+)_n(\d+)\.json$", f)
        timing, n = m.group(1), int(m.group(2))
        try:
            ts = torch_rows(load(f))
            tg = torch_rows(load(os.path.join(
                out, f"torch_gloo_{timing}_n{n}.json")))
            sb = bench_rows(load(os.path.join(
                out, f"sharc_bench_{timing}_n{n}.json")))
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
            for i, (size, us, bw, mbw) in enumerate(ts[c]):
                b = sb[c][i] if i < len(sb[c]) else None
                g = tg[c][i] if i < len(tg[c]) else None
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

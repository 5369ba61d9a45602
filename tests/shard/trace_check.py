#!/usr/bin/env python3
"""trace_check.py - checks the Chrome traces sharc-train wrote with --trace.

usage: trace_check.py DIR NRANKS

Every rank's trace-rank<R>.json parses as JSON with complete ("X") events on
the compute thread (forward, backward, optimizer) and the communication
stream (all_gather, reduce_scatter); and on every rank, in some step, an
all-gather of unit u+1 ran while unit u's forward was computing (the
prefetch overlapping communication with compute) on at least one rank: on
2 cores shared by 4 ranks, whether a given rank's stream thread gets a core
while that rank computes is the scheduler's choice (seen: one rank of four
with no overlap in a 4-step run), so one rank without overlap is a
scheduling fact, not a missing prefetch. Prints per rank the
overlap found and the share of communication hidden behind compute.
"""
import json
import os
import sys


def main(d, n):
    ok, overlapping = True, 0
    for r in range(n):
        path = os.path.join(d, f"trace-rank{r}.json")
        try:
            ev = json.load(open(path))["traceEvents"]
        except (OSError, ValueError, KeyError) as e:
            print(f"FAIL: {path}: {e}")
            ok = False
            continue
        xs = [e for e in ev if e.get("ph") == "X"]
        comp = [e for e in xs if e["tid"] == 0 and
                e["name"].split()[0] in ("forward", "backward")]
        comm = [e for e in xs if e["tid"] == 1]
        names = {e["name"].split()[0] for e in xs}
        for need in ("forward", "backward", "optimizer", "all_gather",
                     "reduce_scatter"):
            if need not in names:
                print(f"FAIL: rank {r}: no '{need}' span in {path}")
                ok = False
        # communication time that ran while the caller computed
        hidden = 0.0
        overlapped_gathers = 0
        for c in comm:
            c0, c1 = c["ts"], c["ts"] + c["dur"]
            h = 0.0
            for f in comp:
                f0, f1 = f["ts"], f["ts"] + f["dur"]
                h += max(0.0, min(c1, f1) - max(c0, f0))
            hidden += h
            if c["name"].startswith("all_gather") and h > 0:
                overlapped_gathers += 1
        total = sum(c["dur"] for c in comm)
        print(f"rank {r}: {len(comp)} compute spans, {len(comm)} collectives "
              f"({total / 1e3:.2f} ms), {overlapped_gathers} all-gathers "
              f"overlapping compute, {100 * hidden / max(total, 1e-9):.0f}% "
              f"of communication time hidden behind compute")
        overlapping += overlapped_gathers > 0
    if overlapping == 0:
        print(f"FAIL: on no rank of {n} did an all-gather run during compute "
              "(no prefetch overlap)")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], int(sys.argv[2])))

#!/usr/bin/env python3
"""timing_check.py - checks the step timings in sharc-train's --log files.

usage: timing_check.py bounds LABEL LOG.jsonl [LOG.jsonl ...]
       timing_check.py order LOG_PREFETCH1.jsonl LOG_PREFETCH2.jsonl
       timing_check.py slow COMM_S EXPOSED_S LOG.jsonl

bounds: every logged step names its clock ("timing" is LABEL: "cuda events"
for GPU training, "host" for host training) and has t_comm > 0 and
0 <= t_exposed <= time_s, t_comm <= time_s. Both hold by construction
with CUDA events: the collectives' spans lie on one stream (they cannot
overlap), the compute stream's stalls lie on another (neither can they),
and all of them lie between the step's first enqueue and its final
synchronize. A tolerance of 1 us covers the float milliseconds of
cudaEventElapsedTime.

order: the exposed share of communication (sum of t_exposed over sum of
t_comm, the first step left out: it allocates) is larger without prefetch
(--prefetch 1: each gather is issued just before compute waits for it)
than with it (--prefetch 2: issued a unit ahead, behind the previous
unit's compute). A ratio, not a time: the machine's speed cancels.

slow: some step has t_comm >= COMM_S and t_exposed >= EXPOSED_S seconds (a
run with one collective delayed on purpose: its time is communication, and
compute cannot run much of it away, having a step's worth of work at most).
"""
import json
import sys

TOL = 1e-6  # seconds


def steps(path):
    with open(path) as f:
        return [json.loads(line) for line in f if '"step"' in line]


def bounds(label, paths):
    ok = True
    for p in paths:
        rs = steps(p)
        if not rs:
            print(f"FAIL: {p}: no step logged")
            ok = False
        for r in rs:
            s, comm, exp = r["time_s"], r["t_comm"], r["t_exposed"]
            why = []
            if r.get("timing") != label:
                why.append(f"timing {r.get('timing')!r}, want {label!r}")
            if not comm > 0:
                why.append("t_comm not > 0")
            if not -TOL <= exp <= s + TOL:
                why.append("t_exposed outside [0, time_s]")
            if not comm <= s + TOL:
                why.append("t_comm > time_s")
            if why:
                print(f"FAIL: {p} step {r['step']}: time {s * 1e3:.3f} ms, "
                      f"comm {comm * 1e3:.3f} ms, exposed {exp * 1e3:.3f} ms: "
                      + "; ".join(why))
                ok = False
        if rs:
            c = sum(r["t_comm"] for r in rs) * 1e3
            e = sum(r["t_exposed"] for r in rs) * 1e3
            t = sum(r["time_s"] for r in rs) * 1e3
            print(f"{p}: {len(rs)} steps, timing {label!r}: step {t:.1f} ms, "
                  f"comm {c:.1f} ms, exposed {e:.1f} ms (sums)")
    return ok


def share(path):
    rs = steps(path)[1:]
    comm = sum(r["t_comm"] for r in rs)
    return sum(r["t_exposed"] for r in rs) / comm if comm > 0 else 0.0


def order(p1, p2):
    s1, s2 = share(p1), share(p2)
    print(f"exposed share of comm: prefetch 1 {s1:.2f}, prefetch 2 {s2:.2f}")
    if s1 > s2:
        return True
    print("not larger without prefetch")
    return False


def slow(comm_s, exposed_s, path):
    rs = steps(path)
    top = max(rs, key=lambda r: r["t_exposed"], default=None)
    if top is None:
        print(f"FAIL: {path}: no step logged")
        return False
    print(f"{path}: the most exposed step, {top['step']}: time "
          f"{top['time_s'] * 1e3:.1f} ms, comm {top['t_comm'] * 1e3:.1f} ms, "
          f"exposed {top['t_exposed'] * 1e3:.1f} ms")
    if top["t_comm"] >= comm_s and top["t_exposed"] >= exposed_s:
        return True
    print(f"FAIL: want comm >= {comm_s * 1e3:.0f} ms and exposed >= "
          f"{exposed_s * 1e3:.0f} ms in the delayed step")
    return False


def main(argv):
    if len(argv) >= 4 and argv[1] == "bounds":
        return 0 if bounds(argv[2], argv[3:]) else 1
    if len(argv) == 4 and argv[1] == "order":
        return 0 if order(argv[2], argv[3]) else 1
    if len(argv) == 5 and argv[1] == "slow":
        ok = slow(float(argv[2]), float(argv[3]), argv[4])
        return 0 if ok and bounds("cuda events", argv[4:]) else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

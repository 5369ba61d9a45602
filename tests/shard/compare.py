#!/usr/bin/env python3
"""compare.py - checks a sharc-train run against a reference run.

usage: compare.py REF.jsonl RUN.jsonl [--params REF.bin RUN.bin] [--tol 1e-5]
                  [--steps A:B] [--noise SAME.bin ...]

Losses: |run - ref| <= tol * |ref| at every step both logs hold (or steps A
to B). Parameters (f32 dumps from --dump-params): max |run - ref| over each
file is at most tol * max(1, max |ref|): absolute for parameters of unit
scale or less (elementwise relative error is meaningless for values near
zero, and trained weights cross zero).

--noise SAME.bin (repeatable) names parameter dumps of single-device runs
that differ from REF only in how their sums are grouped (--micro 2, 4: the
same gradient summed in another order). Their largest difference from REF
is the training's own floating-point noise floor; over tens of Adam steps it
can exceed tol (Adam divides by the gradient's RMS, so rounding in a small
gradient moves a parameter by a fraction of the learning rate). A run that
only regroups sums too (sharding, a ring reduce-scatter) is then allowed
NOISE_FACTOR times that floor. The floor itself must stay below
FLOOR_LIMIT * max(1, max |ref|), or the check fails: single-device runs that
disagree with themselves by more are not a reference.

Prints the worst deviations; exits 1 when a check fails, 2 on unusable input.
"""
import json
import struct
import sys

NOISE_FACTOR = 4.0
FLOOR_LIMIT = 1e-3


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "step" in rec:
                out[rec["step"]] = rec["loss"]
    return out


def floats(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) % 4:
        sys.exit(f"compare: {path} is not a whole number of f32 values")
    return struct.unpack(f"{len(data) // 4}f", data)


def max_diff(a, b):
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def main(argv):
    tol, params, rng, noise, args = 1e-5, None, None, [], []
    i = 0
    while i < len(argv):
        if argv[i] == "--tol":
            tol = float(argv[i + 1]); i += 2
        elif argv[i] == "--params":
            params = (argv[i + 1], argv[i + 2]); i += 3
        elif argv[i] == "--noise":
            noise.append(argv[i + 1]); i += 2
        elif argv[i] == "--steps":
            a, b = argv[i + 1].split(":"); rng = (int(a), int(b)); i += 2
        else:
            args.append(argv[i]); i += 1
    if len(args) != 2:
        print(__doc__)
        return 2
    ref, run = losses(args[0]), losses(args[1])
    steps = sorted(set(ref) & set(run))
    if rng:
        steps = [s for s in steps if rng[0] <= s <= rng[1]]
        if len(steps) != rng[1] - rng[0] + 1:
            print(f"compare: steps {rng[0]}..{rng[1]} not all in both logs "
                  f"({len(steps)} found)")
            return 1
    if not steps:
        print("compare: no common steps")
        return 2
    worst, at = 0.0, steps[0]
    for s in steps:
        rel = abs(run[s] - ref[s]) / max(abs(ref[s]), 1e-30)
        if rel > worst:
            worst, at = rel, s
    ok = worst <= tol
    print(f"losses: {len(steps)} steps, worst relative difference {worst:.3g} "
          f"at step {at} ({ref[at]!r} vs {run[at]!r}); tolerance {tol:g}: "
          f"{'ok' if ok else 'FAIL'}")
    if params:
        a, b = floats(params[0]), floats(params[1])
        if len(a) != len(b):
            print(f"params: {len(a)} vs {len(b)} values: FAIL")
            return 1
        scale = max(abs(v) for v in a)
        diff = max_diff(a, b)
        limit = tol * max(1.0, scale)
        floor = 0.0
        for path in noise:
            same = floats(path)
            if len(same) != len(a):
                print(f"noise: {path} has {len(same)} values, not {len(a)}")
                return 2
            floor = max(floor, max_diff(a, same))
        if noise:
            fok = floor <= FLOOR_LIMIT * max(1.0, scale)
            print(f"noise floor: single-device regrouped runs differ by "
                  f"{floor:.3g}; limit {FLOOR_LIMIT * max(1.0, scale):.3g}: "
                  f"{'ok' if fok else 'FAIL'}")
            ok = ok and fok
            limit = max(limit, NOISE_FACTOR * floor)
        pok = diff <= limit
        print(f"params: {len(a)} values, max difference {diff:.3g} (largest "
              f"|parameter| {scale:.3g}); tolerance {limit:.3g}"
              f": {'ok' if pok else 'FAIL'}")
        ok = ok and pok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

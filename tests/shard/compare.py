#!/usr/bin/env python3
"""compare.py - checks a sharc-train run against a reference run.

usage: compare.py REF.jsonl RUN.jsonl [--params REF.bin RUN.bin] [--tol 1e-5]
                  [--steps A:B] [--noise SAME.jsonl SAME.bin ...]

Why not bit for bit: a sharded run sums each gradient in another order than
one device does (per-rank partial sums, a ring reduce-scatter), and float
addition is not associative. Over tens of Adam steps the rounding grows
(Adam divides by the gradient's RMS, so rounding in a small gradient moves a
parameter by a fraction of the learning rate), and how much it grows depends
on the BLAS kernel the machine picks (OpenBLAS's AVX2 and AVX-512 kernels
round differently). So no constant tolerance holds on every CPU; the bound
comes from the noise measured on this machine, with this kernel:

--noise SAME.jsonl SAME.bin (repeatable) names the log and parameter dump of
a run that differs from REF only in how its sums are grouped (one device in
2 or 4 micro-batches: the same gradient summed in another order). Its
distance from REF is the training's own floating-point noise floor.

Losses: at every step s both logs hold (or steps A to B), the relative
difference |run - ref| / |ref| is at most the noise bound max(tol,
NOISE_FACTOR * floor(s)), where floor(s) is the largest relative loss
difference of the noise runs from REF at any step up to s (rounding
differences grow over the steps, so an early step gets the early, small
floor, and a bug that shows early is not hidden by the late noise).

Branch flips: in a network with ReLU and max-pooling (the CNN, the MLP) a
last-bit difference can tip one unit's decision (a pre-activation that
rounds to either side of zero, a max-pool near-tie). The run then moves to
a neighbouring trajectory, a few 1e-5 relative in the loss tens of steps
later. Which of the regrouped runs take such a flip is a matter of chance
(measured: 0 to 5 of 6 runs, by BLAS kernel), so the noise runs need not
show the flip a sharded run takes. A flip departs gradually: the difference
grows out of the rounding noise over several steps. A bug departs at once:
a rank's dropped gradient or a skipped update moves the loss by 1e-3 or
more in one step. So a run may leave the noise bound only gradually: at the
first step beyond it, by at most ONSET times the bound; from then on it must
stay under the hard ceiling LOSS_CEILING (relative), and its parameters
under PARAM_CEILING * max(1, max |ref|). The output says "branch flip" and
the step where the run left the noise bound.

Parameters (f32 dumps from --dump-params): max |run - ref| over each file is
at most max(tol, NOISE_FACTOR * floor) * max(1, max |ref|), the floor being
the noise runs' largest parameter difference from REF (absolute for
parameters of unit scale or less: elementwise relative error is meaningless
for values near zero, and trained weights cross zero); after a branch flip
in the losses, at most the parameter ceiling.

Hard ceilings keep a real bug failing on any machine: the noise floors
themselves must stay below FLOOR_LIMIT (relative loss, and parameters scaled
as above), or the check fails: single-device runs that disagree with
themselves by more are not a reference.

Held-out evaluation (a line with "eval_loss" in both logs, from
sharc-train --eval 1 on the gpt): its loss is held to the same kind of
bound, max(tol, NOISE_FACTOR * floor), the floor being the noise runs'
largest relative eval-loss difference from REF; a run whose losses left the
noise bound in a branch flip is held to LOSS_CEILING instead. One log with
the line and the other without it fails.

Prints which bound applied; exits 1 when a check fails, 2 on unusable input.
"""
import json
import struct
import sys

NOISE_FACTOR = 4.0
FLOOR_LIMIT = 1e-3
ONSET = 10.0
LOSS_CEILING = 1e-3
PARAM_CEILING = 3e-3


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "step" in rec:
                out[rec["step"]] = rec["loss"]
    return out


def eval_loss(path):
    """The held-out loss the log ends with, or None."""
    out = None
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "eval_loss" in rec:
                out = rec["eval_loss"]
    return out


def check_eval(ref_path, run_path, tol, noise, flip):
    ref, run = eval_loss(ref_path), eval_loss(run_path)
    if ref is None and run is None:
        return True
    if ref is None or run is None:
        print(f"eval: only {'the run' if ref is None else 'the reference'} "
              f"logged a held-out loss: FAIL")
        return False
    floor = 0.0
    for path in noise:
        e = eval_loss(path)
        if e is None:
            print(f"noise: {path} has no eval_loss")
            return None
        floor = max(floor, rel(e, ref))
    bound = max(tol, NOISE_FACTOR * floor)
    why = (f"{NOISE_FACTOR:g} x the noise floor {floor:.3g}"
           if NOISE_FACTOR * floor > tol else f"tolerance {tol:g}")
    if flip is not None and LOSS_CEILING > bound:
        bound, why = LOSS_CEILING, f"the hard ceiling, after the branch flip"
    d = rel(run, ref)
    ok = d <= bound and floor <= FLOOR_LIMIT
    print(f"eval: held-out loss {run!r} vs {ref!r}: {d:.3g} relative, bound "
          f"{bound:.3g} = {why} (floor limit {FLOOR_LIMIT:g}): "
          f"{'ok' if ok else 'FAIL'}")
    return ok


def floats(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) % 4:
        sys.exit(f"compare: {path} is not a whole number of f32 values")
    return struct.unpack(f"{len(data) // 4}f", data)


def max_diff(a, b):
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def rel(x, ref):
    return abs(x - ref) / max(abs(ref), 1e-30)


def loss_floor(ref, noise, steps):
    """floor[s]: the noise runs' largest relative loss difference from REF
    at any step up to s (a running maximum over all of REF's steps)."""
    logs = [losses(p) for p in noise]
    floor, worst = {}, 0.0
    for s in sorted(ref):
        for i, log in enumerate(logs):
            if s not in log:
                if s in steps:
                    print(f"noise: {noise[i]} has no step {s}")
                    return None
                continue
            worst = max(worst, rel(log[s], ref[s]))
        floor[s] = worst
    return floor


def check_losses(ref, run, steps, tol, noise):
    """Returns (ok, flip step or None), or None on unusable input."""
    floor = loss_floor(ref, noise, steps) if noise else {}
    if floor is None:
        return None
    bound = {s: max(tol, NOISE_FACTOR * floor.get(s, 0.0)) for s in steps}
    diff = {s: rel(run[s], ref[s]) for s in steps}
    flip = next((s for s in steps if diff[s] > bound[s]), None)
    if flip is not None and noise:
        # a branch flip departs gradually and stays under the ceiling
        after = [s for s in steps if s >= flip]
        top = max(after, key=lambda s: diff[s])
        ok = diff[flip] <= ONSET * bound[flip] and diff[top] <= LOSS_CEILING
        print(f"losses: {len(steps)} steps; within {NOISE_FACTOR:g} x the "
              f"noise floor (or {tol:g}) up to step {flip - 1}; at step "
              f"{flip} {diff[flip]:.3g} against a bound of {bound[flip]:.3g} "
              f"({diff[flip] / bound[flip]:.3g}x; a branch flip leaves it by "
              f"at most {ONSET:g}x), then up to {diff[top]:.3g} at step {top} "
              f"({ref[top]!r} vs {run[top]!r}; hard ceiling "
              f"{LOSS_CEILING:g}): {'ok, branch flip' if ok else 'FAIL'}")
    else:
        at = max(steps, key=lambda s: diff[s] / bound[s] if bound[s] else
                 (0.0 if diff[s] == 0 else float("inf")))
        f = floor.get(at, 0.0)
        if noise and NOISE_FACTOR * f > tol:
            why = (f"{NOISE_FACTOR:g} x the noise floor {f:.3g} of "
                   f"single-device regrouped runs up to step {at}")
        elif noise:
            why = (f"tolerance {tol:g} (above {NOISE_FACTOR:g} x noise floor "
                   f"{f:.3g})")
        else:
            why = f"tolerance {tol:g}"
        ok = flip is None
        print(f"losses: {len(steps)} steps, largest relative difference "
              f"{max(diff.values()):.3g}; nearest its bound at step {at} "
              f"({ref[at]!r} vs {run[at]!r}: {diff[at]:.3g}, bound "
              f"{bound[at]:.3g} = {why}): {'ok' if ok else 'FAIL'}")
    if noise:
        top = max(floor[s] for s in steps)
        fok = top <= FLOOR_LIMIT
        print(f"loss noise floor: up to {top:.3g} relative; limit "
              f"{FLOOR_LIMIT:g}: {'ok' if fok else 'FAIL'}")
        ok = ok and fok
    return ok, flip


def check_params(paths, tol, noise, flip):
    a, b = floats(paths[0]), floats(paths[1])
    if len(a) != len(b):
        print(f"params: {len(a)} vs {len(b)} values: FAIL")
        return False
    scale = max(1.0, max((abs(v) for v in a), default=0.0))
    diff = max_diff(a, b)
    floor = 0.0
    for path in noise:
        same = floats(path)
        if len(same) != len(a):
            print(f"noise: {path} has {len(same)} values, not {len(a)}")
            return None
        floor = max(floor, max_diff(a, same))
    ok = True
    if noise:
        fok = floor <= FLOOR_LIMIT * scale
        print(f"param noise floor: single-device regrouped runs differ by "
              f"{floor:.3g}; limit {FLOOR_LIMIT * scale:.3g}: "
              f"{'ok' if fok else 'FAIL'}")
        ok = fok
    limit = max(tol * scale, NOISE_FACTOR * floor)
    why = (f"{NOISE_FACTOR:g} x the noise floor" if NOISE_FACTOR * floor >
           tol * scale else f"tolerance {tol:g} x {scale:.3g}")
    if flip is not None and PARAM_CEILING * scale > limit:
        limit = PARAM_CEILING * scale
        why = (f"the hard ceiling {PARAM_CEILING:g} x {scale:.3g}, after "
               f"the branch flip at step {flip}")
    pok = diff <= limit
    print(f"params: {len(a)} values, max difference {diff:.3g} (largest "
          f"|parameter| {max((abs(v) for v in a), default=0.0):.3g}); bound "
          f"{limit:.3g} = {why}: {'ok' if pok else 'FAIL'}")
    return ok and pok


def main(argv):
    tol, params, rng, noise_log, noise_bin, args = 1e-5, None, None, [], [], []
    i = 0
    try:
        while i < len(argv):
            if argv[i] == "--tol":
                tol = float(argv[i + 1]); i += 2
            elif argv[i] == "--params":
                params = (argv[i + 1], argv[i + 2]); i += 3
            elif argv[i] == "--noise":
                noise_log.append(argv[i + 1])
                noise_bin.append(argv[i + 2]); i += 3
            elif argv[i] == "--steps":
                a, b = argv[i + 1].split(":"); rng = (int(a), int(b)); i += 2
            else:
                args.append(argv[i]); i += 1
    except (IndexError, ValueError):
        print(f"compare: bad arguments {argv[i:]}\n{__doc__}")
        return 2
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
    res = check_losses(ref, run, steps, tol, noise_log)
    if res is None:
        return 2
    ok, flip = res
    eok = check_eval(args[0], args[1], tol, noise_log, flip)
    if eok is None:
        return 2
    ok = ok and eok
    if params:
        pok = check_params(params, tol, noise_bin, flip)
        if pok is None:
            return 2
        ok = ok and pok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

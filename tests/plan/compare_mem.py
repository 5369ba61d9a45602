#!/usr/bin/env python3
"""compare_mem.py TRAIN.jsonl PLAN.json LABEL - rank 0's peak memory as
sharc-train reported it against sharc-plan's prediction: the sharded state
exactly, activations within 5%. Gathered, unsharded gradients and the total
are printed beside them, not asserted: which moment is the peak depends on
when a reduction finishes, which the host's timing decides."""
import json
import sys

EXACT = ("param_slices", "grad_slices", "optim")
NEAR = ("gathered", "unsharded_grads", "activations", "total")
ASSERTED = ("activations",)


def main(train, plan, label):
    with open(train) as f:
        step = json.loads(f.readline())["peak"]
    with open(plan) as f:
        cfgs = json.load(f)["configs"]
    if len(cfgs) != 1:
        print(f"FAIL {label}: sharc-plan gave {len(cfgs)} configurations, "
              "expected 1")
        return 1
    pred = cfgs[0]["mem"]
    bad = [k for k in EXACT if step[k] != pred[k]]
    cells = []
    worst = 0.0
    for k in NEAR:
        m, p = step[k], pred[k]
        rel = abs(p - m) / m if m else (0.0 if p == 0 else 1.0)
        cells.append(f"{k} {m}/{p} ({100 * rel:.1f}%)")
        if rel > 0.05 and k in ASSERTED:
            bad.append(k)
        worst = max(worst, rel)
    status = "ok  " if not bad else "FAIL"
    print(f"{status} {label}: sharded {step['param_slices']}+"
          f"{step['grad_slices']}+{step['optim']} "
          f"{'equal' if not [k for k in EXACT if k in bad] else 'DIFFER'}; "
          f"measured/predicted " + ", ".join(cells))
    if bad:
        print(f"     differs: {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))

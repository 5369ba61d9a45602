#!/usr/bin/env python3
"""train_compare.py - puts training runs side by side in one results file:
sharc-train's --log JSON lines and fsdp2_gpt.py's --json results.

    python3 bench/train_compare.py --out train_compare.json \
        [--device-name "NVIDIA H100 80GB HBM3"] \
        --sharc sharc-n1 train_n1.jsonl --sharc sharc-n2 train_n2.jsonl \
        --fsdp2 fsdp2-n1 fsdp2_n1.json

Runs keep the order given. For a sharc log, tokens per second is the median
over the logged steps after the first 2 (their setup and first gathers
would skew it; all the steps when there are fewer than 3), and the peak per
rank is the largest of the last step's peak_total_per_rank (the engine's
own accounting of parameters, gradients, optimizer state, gathered buffers
and activations); for an FSDP2 result both are fsdp2_gpt.py's (timed steps
after its warmup; torch.cuda.max_memory_allocated). The two peaks count
alike in spirit, not byte for byte: the allocator's caching and workspaces
are in PyTorch's and not in sharc's.

The device is --device-name, else the first "device" of an FSDP2 result,
else "unknown" (sharc's logs do not name it). A missing or unreadable
input is a "not run" row with the reason, not an error. Writes --out as
{"device": ..., "runs": [{"label", "framework", "status", "ranks",
"tokens_per_s", "peak_bytes_per_rank", "final_loss", ...}]} and prints a
table. Exit status: 0, or 2 for bad arguments or an unwritable --out.
"""
import argparse
import json
import statistics
import sys

SKIP_FIRST = 2  # sharc log steps left out of the median


class AddRun(argparse.Action):
    """--sharc/--fsdp2 LABEL FILE, kept in command-line order."""

    def __call__(self, parser, ns, values, option_string=None):
        ns.runs.append((self.const, values[0], values[1]))


def not_run(label, framework, path, why):
    return {"label": label, "framework": framework, "status": "not run",
            "source": path, "reason": why, "ranks": None, "tokens_per_s": None,
            "peak_bytes_per_rank": None, "final_loss": None}


def read_sharc(label, path):
    fw = "sharc"
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        return not_run(label, fw, path, f"cannot read {path}: {e}")
    rows = [r for r in rows if isinstance(r, dict) and "step" in r]
    if not rows:
        return not_run(label, fw, path, f"{path} holds no step")
    if "tokens_per_s" not in rows[-1]:
        return not_run(label, fw, path, f"{path} has no tokens_per_s (not a gpt run)")
    rows.sort(key=lambda r: r["step"])
    timed = rows[SKIP_FIRST:] if len(rows) > SKIP_FIRST else rows
    last = rows[-1]
    peaks = last.get("peak_total_per_rank") or [last.get("peak", {}).get("total", 0)]
    return {
        "label": label, "framework": fw, "status": "ok", "source": path,
        "ranks": last.get("ranks"),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
        "tokens_per_s_how": f"median over {len(timed)} logged steps"
                            + (f" after the first {SKIP_FIRST}" if timed is not rows else ""),
        "peak_bytes_per_rank": max(peaks),
        "peak_kind": "sharc engine accounting, max over ranks, last step",
        "final_loss": last.get("loss"), "steps": last["step"],
        "strategy": last.get("strategy"),
    }


def read_fsdp2(label, path):
    fw = "pytorch-fsdp2"
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        return not_run(label, fw, path, f"cannot read {path}: {e}")
    need = ("ranks", "tokens_per_s", "peak_bytes_per_rank", "losses")
    if not isinstance(r, dict) or any(k not in r for k in need):
        return not_run(label, fw, path, f"{path} lacks one of {', '.join(need)}")
    out = {
        "label": label, "framework": r.get("framework", fw), "status": "ok",
        "source": path, "ranks": r["ranks"], "tokens_per_s": r["tokens_per_s"],
        "tokens_per_s_how": f"{r.get('steps', 0) - r.get('warmup', 0)} timed steps "
                            f"after {r.get('warmup', '?')} warmup",
        "peak_bytes_per_rank": r["peak_bytes_per_rank"],
        "peak_kind": r.get("peak_kind"),
        "final_loss": r["losses"][-1] if r["losses"] else None,
        "steps": r.get("steps"),
    }
    for k in ("device", "torch", "nccl", "preset", "params", "mp", "batch"):
        if k in r:
            out[k] = r[k]
    return out


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table(runs):
    lines = [f"{'label':<16} {'framework':<14} {'ranks':>5} {'tokens/s':>12} "
             f"{'peak MiB/rank':>14} {'final loss':>11}"]
    for r in runs:
        peak = None if r["peak_bytes_per_rank"] is None else r["peak_bytes_per_rank"] / 2**20
        line = (f"{r['label']:<16} {r['framework']:<14} {fmt(r['ranks'], 'd'):>5} "
                f"{fmt(r['tokens_per_s'], '.0f'):>12} {fmt(peak, '.1f'):>14} "
                f"{fmt(r['final_loss'], '.4f'):>11}")
        if r["status"] != "ok":
            line += f"  not run: {r['reason']}"
        lines.append(line)
    return "\n".join(lines)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the results file (JSON)")
    p.add_argument("--device-name", help="the device (else from the FSDP2 results)")
    p.add_argument("--sharc", nargs=2, metavar=("LABEL", "LOG"), action=AddRun,
                   const="sharc", help="a sharc-train --log file (repeatable)")
    p.add_argument("--fsdp2", nargs=2, metavar=("LABEL", "JSON"), action=AddRun,
                   const="fsdp2", help="an fsdp2_gpt.py --json file (repeatable)")
    p.set_defaults(runs=[])
    a = p.parse_args(argv)
    runs = [read_sharc(lbl, f) if kind == "sharc" else read_fsdp2(lbl, f)
            for kind, lbl, f in a.runs]
    device = a.device_name or next(
        (r["device"] for r in runs if r["status"] == "ok" and r.get("device")), "unknown")
    res = {"device": device,
           "note": f"sharc tokens/s: median over the logged steps after the first "
                   f"{SKIP_FIRST}; peaks: sharc's engine accounting vs "
                   "torch.cuda.max_memory_allocated (or CPU RSS)",
           "runs": runs}
    try:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    except OSError as e:
        print(f"train_compare: cannot write --out {a.out}: {e}", file=sys.stderr)
        return 2
    print(f"train_compare: device {device}; {len(runs)} runs -> {a.out}")
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""gpu_results.py - the one results file of a device run: everything
tests/gpu/device_run.sh's bench stage measured, side by side, naming the
device.

    python3 bench/gpu_results.py --out gpu_results.json LOGS_DIR

Reads from LOGS_DIR every bench_*.json (sharc-bench -J: sharc's paths,
NCCL, the GPUDirect run), train_compare.json (bench/train_compare.py:
sharc-train against PyTorch FSDP2) and gpu_floor.json (sharc-gpu-floor),
and writes --out as

    {"device": ..., "copy_limit_gbps": ..., "bench": [...],
     "training": {...} or null, "floor": {...} or null}

where each bench entry is {"run", "backend", "ranks", "path", "memory",
"registration", "peak": {collective: {"busbw", "size"}}, "latency_us":
{collective: time at the smallest size}} with the whole sharc-bench JSON
under "raw". It prints a table: per run and collective the peak busbw and
its fraction of the device-to-device copy limit the bench measured, and the
smallest size's time. A file that cannot be read is listed under "skipped"
with the reason, never an error. The device is the first one a bench JSON
names, else the training comparison's, else "unknown".
Exit status 0, or 2 when LOGS_DIR is not a directory or --out cannot be
written.
"""
import argparse
import glob
import json
import os
import sys


def load(path, skipped):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        skipped.append({"file": os.path.basename(path), "reason": str(e)})
        return None


def summarise(name, d):
    peak, lat = {}, {}
    for r in d.get("results") or []:
        c = r.get("collective")
        bw = r.get("busbw") or 0.0
        if c is None:
            continue
        if c not in peak or bw > peak[c]["busbw"]:
            peak[c] = {"busbw": bw, "size": r.get("size")}
        if c not in lat or (r.get("size") or 0) < lat[c][0]:
            lat[c] = (r.get("size") or 0, r.get("time_us"))
    return {
        "run": name,
        "backend": d.get("backend"),
        "compare": d.get("compare") or None,
        "ranks": d.get("nranks"),
        "path": name.split("_")[1] if name.count("_") >= 2 else None,
        "memory": d.get("memory"),
        "registration": d.get("registration"),
        "peak": peak,
        "latency_us": {c: v[1] for c, v in lat.items()},
        "raw": d,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("logs")
    a = ap.parse_args()
    if not os.path.isdir(a.logs):
        print(f"gpu_results.py: {a.logs} is not a directory", file=sys.stderr)
        return 2
    skipped, bench, device, limit = [], [], None, None
    for path in sorted(glob.glob(os.path.join(a.logs, "bench_*.json"))):
        d = load(path, skipped)
        if not isinstance(d, dict):
            continue
        name = os.path.basename(path)[: -len(".json")]
        bench.append(summarise(name, d))
        device = device or d.get("device")
        lg = d.get("limits_gpu") or {}
        limit = limit or lg.get("d2d_copy")
    tc = os.path.join(a.logs, "train_compare.json")
    training = load(tc, skipped) if os.path.exists(tc) else None
    fl = os.path.join(a.logs, "gpu_floor.json")
    floor = load(fl, skipped) if os.path.exists(fl) else None
    if not device and isinstance(training, dict):
        device = training.get("device")
    out = {"device": device or "unknown", "copy_limit_gbps": limit,
           "bench": bench, "training": training, "floor": floor,
           "skipped": skipped}
    try:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    except OSError as e:
        print(f"gpu_results.py: cannot write {a.out}: {e}", file=sys.stderr)
        return 2
    print(f"device: {out['device']}; device-to-device copy limit: "
          f"{limit if limit else 'not measured'} GB/s")
    print(f"{'run':<28} {'collective':<15} {'peak busbw':>11} {'at bytes':>10}"
          f" {'of limit':>9} {'smallest us':>12}")
    for b in bench:
        for c, p in sorted(b["peak"].items()):
            frac = f"{p['busbw'] / limit:.3f}" if limit else "-"
            t = b["latency_us"].get(c)
            print(f"{b['run']:<28} {c:<15} {p['busbw']:>11.2f} "
                  f"{p['size'] or 0:>10} {frac:>9} "
                  f"{t if t is not None else '-':>12}")
    if isinstance(training, dict):
        for r in training.get("runs") or []:
            print(f"training {r.get('label')}: {r.get('status')}, "
                  f"{r.get('tokens_per_s')} tokens/s, peak "
                  f"{r.get('peak_bytes_per_rank')} bytes per rank")
    for s in skipped:
        print(f"skipped {s['file']}: {s['reason']}")
    print(f"written: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

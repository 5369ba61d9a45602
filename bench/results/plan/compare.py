#!/usr/bin/env python3
"""compare.py BUILD DATA [OUT.md] - sharc-plan's predictions against the
measurements of run.sh (bench/results/plan/README.md says how they were
taken).

For every repetition DATA/rK and world size n in {2, 4}:
  links    sharc-plan --calibrate rK/bench_n{n}.json (one host, shm)
  compute  --calibrate-compute rK/train_{model}_n1_full.jsonl (1 rank)
  predict  the step of sharc-train --model {model} at n ranks (full; hybrid
           with shard group n/2), batch 64, f32, AdamW, prefetch 2
  measure  the medians of rK/train_{model}_n{n}_{strategy}.jsonl (steps
           after the first)
and, for the collectives, the calibrated link's prediction of a few sizes
both in the file it was fitted to and in the next repetition's file
(--check), against what sharc-bench measured. Prints markdown tables and
writes DATA/compare.json.
"""
import glob
import json
import os
import re
import statistics
import subprocess
import sys

MODELS = {"cnn": "cnn", "gpt": "gpt:tiny", "gpt_small": "gpt:small"}
SIZES = (4096, 262144, 4194304)  # per-rank block / vector, bytes (nearest)


def plan(build, args):
    p = subprocess.run([os.path.join(build, "plan", "sharc-plan")] + args,
                       capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"sharc-plan {' '.join(args)}: {p.stderr}")
    return p.stdout, p.stderr


def rows(text):
    """The per-row lines of a calibration or check printout."""
    out = []
    for line in text.splitlines():
        m = re.match(r"#\s+(all_gather|reduce_scatter|all_reduce)\s+(\d+)\s+"
                     r"(\d+)\s+(\d+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)", line)
        if m:
            out.append({"coll": m[1], "ranks": int(m[2]), "bytes": int(m[4]),
                        "algo": m[5], "meas_us": float(m[6]),
                        "pred_us": float(m[7])})
    return out


def nearest(rs, coll, size):
    c = [r for r in rs if r["coll"] == coll]
    return min(c, key=lambda r: abs(r["bytes"] - size)) if c else None


def measured(path):
    steps = [json.loads(l) for l in open(path) if '"step"' in l][1:]
    med = lambda k: statistics.median(s[k] for s in steps)
    return {k: med(k) for k in ("time_s", "t_compute", "t_comm",
                                "t_exposed")}


def err(p, m):
    return 100.0 * (p - m) / m if m else float("nan")


def main():
    build, data = sys.argv[1], sys.argv[2]
    reps = sorted(glob.glob(os.path.join(data, "r*")),
                  key=lambda d: int(d.rsplit("r", 1)[1]))
    colls, steps, fits = [], [], []
    for i, d in enumerate(reps):
        load = {}
        for line in open(os.path.join(d, "load.txt")):
            m = re.match(r"\S+ (.*?): ([\d.]+)", line)
            if m:
                load[m[1]] = float(m[2])
        for n in (2, 4):
            bench = os.path.join(d, f"bench_n{n}.json")
            out, _ = plan(build, ["--model", "cnn", "--gpus-per-node", str(n),
                                  "--strategy", "full", "--calibrate", bench])
            m = re.search(r"latency ([\d.]+) us, bandwidth ([\d.]+) GB/s.*rms "
                          r"([\d.]+)%, max ([\d.]+)%", out)
            lat, gbs = float(m[1]), float(m[2])
            fits.append({"rep": i + 1, "n": n, "lat_us": lat, "gbs": gbs,
                         "rms": float(m[3]), "max": float(m[4]),
                         "load": load.get(f"bench n={n}")})
            nxt = os.path.join(reps[(i + 1) % len(reps)], f"bench_n{n}.json")
            chk, _ = plan(build, ["--model", "cnn", "--gpus-per-node", str(n),
                                  "--strategy", "full", "--link",
                                  f"intra:{lat},{gbs}", "--check", nxt])
            for coll in ("all_gather", "reduce_scatter", "all_reduce"):
                for size in SIZES:
                    a, b = nearest(rows(out), coll, size), nearest(rows(chk),
                                                                   coll, size)
                    colls.append({"rep": i + 1, "n": n, "coll": coll,
                                  "bytes": a["bytes"], "algo": a["algo"],
                                  "pred_us": a["pred_us"],
                                  "meas_us": a["meas_us"],
                                  "next_meas_us": b["meas_us"]})
            for model, spec in MODELS.items():
                if not os.path.exists(os.path.join(
                        d, f"train_{model}_n1_full.jsonl")):
                    continue
                for strat, grp in (("full", None), ("hybrid", n // 2)):
                    args = ["--model", spec, "--nodes", "1",
                            "--gpus-per-node", str(n), "--strategy", strat,
                            "--dtype", "f32", "--checkpoint", "0",
                            "--batch", "64", "--json", "-",
                            "--calibrate", bench, "--calibrate-compute",
                            os.path.join(d, f"train_{model}_n1_full.jsonl")]
                    if grp:
                        args += ["--shard-group", str(grp)]
                    js, info = plan(build, args)
                    c = json.loads(js)["configs"][0]
                    # the same with compute fitted to the n-rank FULL_SHARD
                    # log: what is left is the communication model's error
                    args[args.index("--calibrate-compute") + 1] = \
                        os.path.join(d, f"train_{model}_n{n}_full.jsonl")
                    c2 = json.loads(plan(build, args)[0])["configs"][0]
                    tag = f"{model}_n{n}_{strat}"
                    me = measured(os.path.join(d, f"train_{tag}.jsonl"))
                    tf = re.search(r"sustained ([\d.e-]+) TFLOP/s", info)[1]
                    steps.append({
                        "rep": i + 1, "model": model, "n": n, "strategy": strat,
                        "load": load.get(f"train {tag}"),
                        "tflops": float(tf),
                        "pred_own_compute": c2["t_step"],
                        "pred": {"step": c["t_step"],
                                 "compute": c["t_compute"] - c["t_optim"],
                                 "comm": c["t_comm"],
                                 "exposed": c["t_exposed"]},
                        "meas": {"step": me["time_s"],
                                 "compute": me["t_compute"],
                                 "comm": me["t_comm"],
                                 "exposed": me["t_exposed"]}})
    json.dump({"fits": fits, "collectives": colls, "steps": steps},
              open(os.path.join(data, "compare.json"), "w"), indent=1)

    print("### Link fits (one per repetition and world size)\n")
    print("| rep | ranks | load (1 min) | latency us | GB/s per rank | rms "
          "error | max error |")
    print("|---|---|---|---|---|---|---|")
    for f in fits:
        print(f"| {f['rep']} | {f['n']} | {f['load']} | {f['lat_us']:.2f} | "
              f"{f['gbs']:.2f} | {f['rms']:.0f}% | {f['max']:.0f}% |")

    print("\n### Collectives: predicted (fitted link) vs measured, medians "
          "over repetitions\n")
    print("| ranks | collective | bytes | algorithm | predicted us | measured "
          "us (same file) | error | measured us (next rep) | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    keys = sorted({(c["n"], c["coll"], c["bytes"]) for c in colls},
                  key=lambda k: (k[0], k[1], k[2]))
    for k in keys:
        cs = [c for c in colls if (c["n"], c["coll"], c["bytes"]) == k]
        p = statistics.median(c["pred_us"] for c in cs)
        m = statistics.median(c["meas_us"] for c in cs)
        e1 = statistics.median(err(c["pred_us"], c["meas_us"]) for c in cs)
        x = statistics.median(c["next_meas_us"] for c in cs)
        e2 = statistics.median(err(c["pred_us"], c["next_meas_us"])
                               for c in cs)
        print(f"| {k[0]} | {k[1]} | {k[2]} | {cs[0]['algo']} | {p:.1f} | "
              f"{m:.1f} | {e1:+.0f}% | {x:.1f} | {e2:+.0f}% |")

    print("\n### Training steps: predicted vs measured (ms), per repetition\n")
    print("| model | ranks | strategy | rep | load | TFLOP/s (1-rank fit) | "
          "step pred | step meas | error | compute pred | compute meas | "
          "comm pred | comm meas | exposed pred | exposed meas |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in sorted(steps, key=lambda s: (s["model"], s["n"], s["strategy"],
                                          s["rep"])):
        p, m = s["pred"], s["meas"]
        print(f"| {s['model']} | {s['n']} | {s['strategy']} | {s['rep']} | "
              f"{s['load']} | {s['tflops']:.4f} | {p['step'] * 1e3:.2f} | "
              f"{m['step'] * 1e3:.2f} | {err(p['step'], m['step']):+.0f}% | "
              f"{p['compute'] * 1e3:.2f} | {m['compute'] * 1e3:.2f} | "
              f"{p['comm'] * 1e3:.2f} | {m['comm'] * 1e3:.2f} | "
              f"{p['exposed'] * 1e3:.2f} | {m['exposed'] * 1e3:.2f} |")

    print("\n### Training steps: medians over repetitions\n")
    print("| model | ranks | strategy | step pred ms | step meas ms | "
          "median error | errors per rep | pred, compute from the n-rank "
          "full run | its median error |")
    print("|---|---|---|---|---|---|---|---|---|")
    groups = sorted({(s["model"], s["n"], s["strategy"]) for s in steps})
    for g in groups:
        ss = [s for s in steps if (s["model"], s["n"], s["strategy"]) == g]
        es = [err(s["pred"]["step"], s["meas"]["step"]) for s in ss]
        es2 = [err(s["pred_own_compute"], s["meas"]["step"]) for s in ss]
        print(f"| {g[0]} | {g[1]} | {g[2]} | "
              f"{statistics.median(s['pred']['step'] for s in ss) * 1e3:.2f}"
              f" | {statistics.median(s['meas']['step'] for s in ss) * 1e3:.2f}"
              f" | {statistics.median(es):+.0f}% | "
              f"{', '.join(f'{e:+.0f}%' for e in es)} | "
              f"{statistics.median(s['pred_own_compute'] for s in ss) * 1e3:.2f}"
              f" | {statistics.median(es2):+.0f}% |")


if __name__ == "__main__":
    main()

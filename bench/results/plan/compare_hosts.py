#!/usr/bin/env python3
"""compare_hosts.py BUILD DATA... - sharc-plan's predictions against the
several-host measurements of run_hosts.sh (README.md, "Across hosts").

For each DATA folder (a layout HxG with its link, e.g.
data_hosts/2x2_1gbit_200us) and repetition rK:
  links    sharc-plan --calibrate rK/bench_intra.json (G ranks, one host,
           shm: the intra link) --calibrate rK/bench_hosts.json (the
           layout: the inter link, the intra one held)
  compute  --calibrate-compute rK/train_{model}_n1_full.jsonl (1 rank)
  predict  sharc-train's step on the layout (full; hybrid with a shard
           group per host), batch 64, f32, AdamW, prefetch 2
  measure  the medians of rK/train_{model}_n{N}_{strategy}.jsonl
and, as a second prediction, the compute fitted to the layout's own
FULL_SHARD log (what is left is the communication model's error). The
inter-node collectives: the fitted link's prediction against the file it
was fitted to and against the next repetition's file (--check). Prints
markdown and writes DATA/compare.json.
"""
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import err, measured, nearest, plan, rows  # noqa: E402

MODELS = {"cnn": "cnn", "gpt": "gpt:tiny"}
SIZES = (4096, 262144, 4194304)


def fits(text):
    """(latency us, GB/s, rms %, max %) of each fit printed, in order."""
    return [(float(m[1]), float(m[2]), float(m[3]), float(m[4]))
            for m in re.finditer(r"latency ([\d.]+) us, bandwidth ([\d.]+) "
                                 r"GB/s.*?rms ([\d.]+)%, max ([\d.]+)%", text)]


def one(build, data):
    m = re.search(r"(\d+)x(\d+)_([^_]+)_([\d.]+)us$", data.rstrip("/"))
    if not m:
        raise SystemExit(f"{data}: want a folder named HxG_RATE_DELAYus")
    h, g, rate, delay = int(m[1]), int(m[2]), m[3], m[4]
    n = h * g
    shape = ["--nodes", str(h), "--gpus-per-node", str(g)]
    reps = sorted(glob.glob(os.path.join(data, "r*")),
                  key=lambda d: int(d.rsplit("r", 1)[1]))
    out = {"layout": f"{h}x{g}", "rate": rate, "delay_us": float(delay),
           "fits": [], "collectives": [], "steps": []}
    for i, d in enumerate(reps):
        intra = os.path.join(d, "bench_intra.json")
        hosts = os.path.join(d, "bench_hosts.json")
        txt, _ = plan(build, ["--model", "cnn"] + shape +
                      ["--strategy", "full", "--calibrate", intra,
                       "--calibrate", hosts])
        fi, fx = fits(txt)
        out["fits"].append({"rep": i + 1, "intra": fi, "inter": fx})
        link = ["--link", f"intra:{fi[0]},{fi[1]}", "--link",
                f"inter:{fx[0]},{fx[1]}"]
        nxt = os.path.join(reps[(i + 1) % len(reps)], "bench_hosts.json")
        chk, _ = plan(build, ["--model", "cnn"] + shape + ["--strategy",
                                                          "full"] + link +
                      ["--check", nxt])
        inter_rows = [r for r in rows(txt) if r["ranks"] == n]
        chk_rows = [r for r in rows(chk) if r["ranks"] == n]
        for coll in ("all_gather", "reduce_scatter", "all_reduce"):
            for size in SIZES:
                a, b = nearest(inter_rows, coll, size), nearest(chk_rows,
                                                                coll, size)
                if a and b:
                    out["collectives"].append({
                        "rep": i + 1, "coll": coll, "bytes": a["bytes"],
                        "algo": a["algo"], "pred_us": a["pred_us"],
                        "meas_us": a["meas_us"],
                        "next_meas_us": b["meas_us"]})
        for model, spec in MODELS.items():
            one_rank = os.path.join(d, f"train_{model}_n1_full.jsonl")
            if not os.path.exists(one_rank):
                continue
            for strat in ("full", "hybrid"):
                args = ["--model", spec] + shape + [
                    "--strategy", strat, "--dtype", "f32", "--checkpoint",
                    "0", "--batch", "64", "--json", "-", "--calibrate",
                    intra, "--calibrate", hosts, "--calibrate-compute",
                    one_rank]
                if strat == "hybrid":
                    args += ["--shard-group", str(g)]
                c = json.loads(plan(build, args)[0])["configs"][0]
                args[args.index("--calibrate-compute") + 1] = \
                    os.path.join(d, f"train_{model}_n{n}_full.jsonl")
                c2 = json.loads(plan(build, args)[0])["configs"][0]
                me = measured(os.path.join(
                    d, f"train_{model}_n{n}_{strat}.jsonl"))
                out["steps"].append({
                    "rep": i + 1, "model": model, "strategy": strat,
                    "pred": {"step": c["t_step"],
                             "compute": c["t_compute"] - c["t_optim"],
                             "comm": c["t_comm"], "exposed": c["t_exposed"]},
                    "pred_own_compute": {"step": c2["t_step"],
                                         "comm": c2["t_comm"],
                                         "exposed": c2["t_exposed"]},
                    "meas": {"step": me["time_s"],
                             "compute": me["t_compute"],
                             "comm": me["t_comm"],
                             "exposed": me["t_exposed"]}})
    with open(os.path.join(data, "compare.json"), "w") as f:
        json.dump(out, f, indent=1)
    return out


def report(o):
    print(f"## {o['layout']} hosts x ranks, tbf {o['rate']}, "
          f"{o['delay_us']:g} us each way\n")
    print("| rep | intra latency us | intra GB/s | inter latency us | "
          "inter GB/s per rank | inter rms error | inter max error |")
    print("|---|---|---|---|---|---|---|")
    for f in o["fits"]:
        a, x = f["intra"], f["inter"]
        print(f"| {f['rep']} | {a[0]:.2f} | {a[1]:.2f} | {x[0]:.1f} | "
              f"{x[1]:.3f} | {x[2]:.0f}% | {x[3]:.0f}% |")
    print("\nCollectives across the hosts, medians over repetitions:\n")
    print("| collective | bytes | algorithm | predicted us | measured us "
          "(same file) | error | measured us (next rep) | error |")
    print("|---|---|---|---|---|---|---|---|")
    keys = sorted({(c["coll"], c["bytes"]) for c in o["collectives"]})
    for k in keys:
        cs = [c for c in o["collectives"] if (c["coll"], c["bytes"]) == k]
        med = statistics.median
        print(f"| {k[0]} | {k[1]} | {cs[0]['algo']} | "
              f"{med(c['pred_us'] for c in cs):.1f} | "
              f"{med(c['meas_us'] for c in cs):.1f} | "
              f"{med(err(c['pred_us'], c['meas_us']) for c in cs):+.0f}% | "
              f"{med(c['next_meas_us'] for c in cs):.1f} | "
              f"{med(err(c['pred_us'], c['next_meas_us']) for c in cs):+.0f}%"
              f" |")
    print("\nTraining steps (ms), per repetition:\n")
    print("| model | strategy | rep | step pred | step meas | error | "
          "comm pred | comm meas | exposed pred | exposed meas | step pred, "
          "compute from this layout's full run | its error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in sorted(o["steps"], key=lambda s: (s["model"], s["strategy"],
                                               s["rep"])):
        p, m, q = s["pred"], s["meas"], s["pred_own_compute"]
        print(f"| {s['model']} | {s['strategy']} | {s['rep']} | "
              f"{p['step'] * 1e3:.1f} | {m['step'] * 1e3:.1f} | "
              f"{err(p['step'], m['step']):+.0f}% | {p['comm'] * 1e3:.1f} | "
              f"{m['comm'] * 1e3:.1f} | {p['exposed'] * 1e3:.1f} | "
              f"{m['exposed'] * 1e3:.1f} | {q['step'] * 1e3:.1f} | "
              f"{err(q['step'], m['step']):+.0f}% |")
    print()


def main():
    build = sys.argv[1]
    for data in sys.argv[2:]:
        report(one(build, data))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""plan_plot.py - sharc-plan over a sweep of GPU counts, drawn as a PNG.

Runs sharc-plan once per GPU count (--json -, every configuration), keeps
the K configurations with the best mean rank over the sweep, and draws
their predicted step time and memory per GPU against the GPU count, with
the GPU's memory as a line. Hollow markers are configurations that do not
fit. Needs python3-matplotlib (.ci/deps.sh installs it); --json-out works
without it.

  plan/plan_plot.py --plan build/plan/sharc-plan --gpus 8,64,512,4096 \\
      -o plan_70b.png -- --model gpt:70b --checkpoint 1

Arguments after -- go to sharc-plan unchanged, except --nodes and
--gpus-per-node, which the sweep sets: a count below the node size G (8 or
the --gpus-per-node given) is one node of that many GPUs, a larger one
must be a multiple of G. The batch is sharc-plan's default (one sample per
GPU: weak scaling) unless --batch-per-gpu N (N per GPU) or a --batch in
the sharc-plan arguments (strong scaling; counts it cannot split over are
reported and skipped) is given.
"""
import argparse
import json
import subprocess
import sys


def run_plan(plan, args, gpus, gpn, per_gpu):
    """sharc-plan's JSON for `gpus` GPUs, or (None, message)."""
    if gpus < gpn:
        shape = ["--nodes", "1", "--gpus-per-node", str(gpus)]
    elif gpus % gpn == 0:
        shape = ["--nodes", str(gpus // gpn), "--gpus-per-node", str(gpn)]
    else:
        return None, f"{gpus} GPUs is not a multiple of {gpn} per node"
    cmd = [plan] + args + shape + ["--top", "0", "--json", "-"]
    if per_gpu:
        cmd += ["--batch", str(per_gpu * gpus)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        return None, p.stderr.strip() or f"exit {p.returncode}"
    return json.loads(p.stdout), None


def key(c):
    """A configuration across GPU counts (hybrid: by its group size)."""
    k = f"{c['strategy']} {c['param_dtype']} ckpt{c['checkpoint']}"
    if c["strategy"].startswith("hybrid"):
        k = k.replace(" ", f" g{c['shard_group']} ", 1)
    if c["prefetch"] != 2:
        k += f" pf{c['prefetch']}"
    if c["offload"]:
        k += " offload"
    return k


def pick(sweep, top):
    """The `top` keys with the best mean rank (absent: last place)."""
    ranks = {}
    for s in sweep:
        n = len(s["plan"]["configs"])
        for c in s["plan"]["configs"]:
            ranks.setdefault(key(c), {})[s["gpus"]] = c["rank"] / n
    def mean(k):
        return sum(ranks[k].get(s["gpus"], 1.5) for s in sweep) / len(sweep)
    return sorted(ranks, key=mean)[:top]


def draw(sweep, keys, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.8))
    gib = 1024.0**3
    for i, k in enumerate(keys):
        color = f"C{i % 10}"
        pts = []
        for s in sweep:
            for c in s["plan"]["configs"]:
                if key(c) == k:
                    pts.append((s["gpus"], c))
        xs = [g for g, _ in pts]
        ax_t.plot(xs, [c["t_step"] * 1e3 for _, c in pts], "-", color=color,
                  label=k)
        ax_m.plot(xs, [c["mem"]["device"] / gib for _, c in pts], "-",
                  color=color, label=k)
        for g, c in pts:
            face = color if c["fits"] else "none"
            ax_t.plot([g], [c["t_step"] * 1e3], "o", color=color,
                      markerfacecolor=face)
            ax_m.plot([g], [c["mem"]["device"] / gib], "o", color=color,
                      markerfacecolor=face)
    mem = sweep[0]["plan"]["cluster"]["gpu_mem_gib"]
    ax_m.axhline(mem, color="k", linestyle="--", linewidth=1,
                 label=f"GPU memory {mem:g} GiB")
    ax_m.axhline(mem - 1, color="k", linestyle=":", linewidth=1,
                 label="usable (1 GiB reserve)")
    for ax, lab in ((ax_t, "predicted step time (ms)"),
                    (ax_m, "memory per GPU at the peak (GiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs")
        ax.set_ylabel(lab)
        ax.grid(True, which="both", alpha=0.3)
    ax_m.legend(fontsize=7, loc="best")
    fig.suptitle(title + "  (hollow: does not fit)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(
        description="sharc-plan over GPU counts, as a PNG",
        epilog="arguments after -- go to sharc-plan")
    ap.add_argument("--plan", default="build/plan/sharc-plan",
                    help="the sharc-plan binary")
    ap.add_argument("--gpus", default="8,64,512,4096",
                    help="comma list of GPU counts")
    ap.add_argument("--top", type=int, default=4,
                    help="configurations drawn (best mean rank)")
    ap.add_argument("--batch-per-gpu", type=int, default=0,
                    help="global batch = this x GPUs (default: "
                    "sharc-plan's, one per GPU)")
    ap.add_argument("-o", "--out", help="PNG to write")
    ap.add_argument("--json-out", help="the sweep as JSON")
    ap.add_argument("--title", default="", help="figure title")
    a = ap.parse_args(argv)
    gpn = 8
    rest = []
    i = 0
    while i < len(extra):
        if extra[i] in ("--nodes", "--gpus-per-node") and i + 1 < len(extra):
            if extra[i] == "--gpus-per-node":
                gpn = int(extra[i + 1])
            i += 2
            continue
        rest.append(extra[i])
        i += 1
    try:
        counts = [int(x) for x in a.gpus.split(",") if x]
    except ValueError:
        ap.error(f"--gpus '{a.gpus}': give a comma list of integers")
    if not counts or min(counts) < 1:
        ap.error(f"--gpus '{a.gpus}': give counts >= 1")
    sweep = []
    for g in counts:
        plan, msg = run_plan(a.plan, rest, g, gpn, a.batch_per_gpu)
        if plan is None:
            print(f"plan_plot: {g} GPUs skipped: {msg}", file=sys.stderr)
            continue
        sweep.append({"gpus": g, "plan": plan})
        best = plan["configs"][0]
        print(f"{g:8d} GPUs: best {key(best)}: {best['t_step'] * 1e3:.2f} "
              f"ms, {best['mem']['device'] / 1024**3:.2f} GiB, "
              f"{'fits' if best['fits'] else 'does NOT fit'}")
    if not sweep:
        print("plan_plot: no GPU count could be planned", file=sys.stderr)
        return 1
    keys = pick(sweep, a.top)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"gpus": [s["gpus"] for s in sweep], "drawn": keys,
                       "sweep": sweep}, f)
    if a.out:
        title = a.title or (f"sharc-plan: {sweep[0]['plan']['model']}, "
                            f"{gpn} GPUs per node")
        try:
            draw(sweep, keys, a.out, title)
        except ImportError as e:
            print(f"plan_plot: cannot draw {a.out}: {e} (install "
                  "python3-matplotlib)", file=sys.stderr)
            return 3
        print(f"wrote {a.out}: {', '.join(keys)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

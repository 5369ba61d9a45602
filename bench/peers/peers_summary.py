#!/usr/bin/env python3
"""Plots and tables of a run_peers.sh result folder: sharc against its peers.

    python3 bench/peers/peers_summary.py bench/results/peers/<tag> [--inplace]

Reads every <lib>_n<N>_R<r>_<part>.json there (sharc-bench -J: lib sharc
is sharc alone under sharcrun; the others are --compare mpi|ccl jobs, rows
of backend "sharc" and of the peer, "mpi" or "ccl"). Per rank count and
collective it draws n<N>_<collective>.png: bus bandwidth against size,
log-log, out of place (--inplace: in place), with

- sharc -R 0 and -R 1 alone (sharcrun's default binding, --bind shared);
- sharc -R 0 and -R 1 beside the peers: per size the median over the
  peers' jobs (sharc ran beside each, in the same processes, under that
  peer's launcher and its binding of ranks to cores);
- each peer: its -R 0 job (malloc'd buffers, as its users have);
- the copy limit: bench_limits.c's bound from the memcpy rate of all ranks
  at once (the median over the jobs): all-gather out of place C(n-1)/n^2,
  the others C/n (in place: all-gather, reduce-scatter, all-reduce C/n,
  broadcast C/(n-1)).

and writes summary.md: per size the busbw of sharc -R 0 and -R 1 (alone,
and beside the peers), of every peer, the best peer, and sharc's busbw
(alone; beside the peers where it did not run alone) over the best
peer's (> 1: sharc faster); then the CPU time per call (the bench's cpu
column: the process CPU clock around each call, its mean over the calls,
the most of any rank, in the pass whose busbw the table shows) of sharc
-R 0 and of every peer's -R 0 job, and sharc's over the least of the
peers' (< 1: sharc used less). Needs matplotlib (Debian: python3-matplotlib) for the plots only;
without it the summary is still written.
"""
import argparse
import glob
import json
import os
import re
import statistics

NAME = re.compile(r"^(?P<lib>[a-z0-9-]+)_n(?P<n>\d+)_R(?P<r>\d)_(?P<part>\w+)\.json$")
COLLS = ["all_gather", "reduce_scatter", "all_reduce", "broadcast"]
LABELS = {
    "impi": "Intel MPI 2021.19",
    "ompi5": "Open MPI 5.0.11",
    "ompi5-sm": "Open MPI 5.0.11 coll/sm",
    "mpich5": "MPICH 5.0.2",
    "ccl": "oneCCL 2022.2",
}
COLORS = {"impi": "C0", "ompi5": "C1", "ompi5-sm": "C4", "mpich5": "C2",
          "ccl": "C3"}


def limit(coll, n, copy_all, inplace):
    """bench_limits.c's busbw bound on one host (GB/s)."""
    if n < 2 or not copy_all:
        return None
    if coll == "all_gather" and not inplace:
        return copy_all * (n - 1) / (n * n)
    if coll == "broadcast" and inplace:
        return copy_all / (n - 1)
    return copy_all / n


def size_label(b):
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return "%d %s" % (b >> k, unit)
    return "%d B" % b


def busbw(row, n, inplace):
    """busbw (GB/s) from the row's time: the JSON's busbw has 4 decimals,
    too few for the tick-bound peers. nccl-tests' factors; the size column
    is what algbw counts for these four collectives."""
    t = row.get("inplace_time_us" if inplace else "time_us")
    if t is None or t <= 0:
        return None
    factor = {"all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
              "all_reduce": 2.0 * (n - 1) / n}.get(row["collective"], 1.0)
    return row["size"] / (t * 1e3) * factor


def load(folder, inplace):
    """-> data[(n, coll)] = {"alone": {r: {size: [busbw, ...]}},
    "sharc": {r: {size: [busbw, ...]}} (beside the peers),
    "peers": {lib: {r: {size: busbw}}}, "cpu": {lib: {r: {size: [us]}}}
    (lib "sharc" for sharc alone, "beside" for sharc in the peers' jobs)},
    copy[n] = [memcpy_all, ...]"""
    data, copy, host = {}, {}, set()
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        m = NAME.match(os.path.basename(path))
        if not m:
            continue
        try:
            d = json.load(open(path))
        except (OSError, ValueError) as e:
            print("peers_summary: skipping %s: %s" % (path, e))
            continue
        lib, n, r = m["lib"], int(m["n"]), int(m["r"])
        host.add(d.get("host", "?"))
        lim = d.get("limits", {})
        if lim.get("memcpy_all"):
            copy.setdefault(n, []).append(lim["memcpy_all"])
        for row in d.get("results", []):
            if row.get("type") != "float" or row["size"] <= 0:
                continue
            if row.get("redop") not in ("sum", "none"):
                continue
            bw = busbw(row, n, inplace)
            if bw is None:
                continue
            cell = data.setdefault((n, row["collective"]),
                                   {"alone": {}, "sharc": {}, "peers": {},
                                    "cpu": {}})
            cpu = row.get("inplace_cpu_us" if inplace else "cpu_us")
            if cpu is not None:
                who = (lib if row["backend"] != "sharc" else
                       "sharc" if lib == "sharc" else "beside")
                cell["cpu"].setdefault(who, {}).setdefault(r, {}).setdefault(
                    row["size"], []).append(cpu)
            if row["backend"] == "sharc":
                where = "alone" if lib == "sharc" else "sharc"
                cell[where].setdefault(r, {}).setdefault(
                    row["size"], []).append(bw)
            else:
                cell["peers"].setdefault(lib, {}).setdefault(r, {})[
                    row["size"]] = bw
    return data, copy, host


def curves(cell):
    """sharc's curves alone and beside the peers, {r: {size: median}}, and
    the peers' {lib: {size: bw}} (each peer's -R 0 job, else its lowest
    -R)."""
    alone, beside = [{r: {s: statistics.median(v) for s, v in by.items()}
                      for r, by in cell[k].items()}
                     for k in ("alone", "sharc")]
    peers = {}
    for lib, by_r in cell["peers"].items():
        peers[lib] = by_r[min(by_r)]
    return alone, beside, peers


def plot(folder, n, coll, alone, beside, peers, lim, tag, inplace, hosts):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for sharc, style, what in ((alone, "-", "alone (sharcrun)"),
                               (beside, ":", "beside the peers (median)")):
        for r in (0, 1):
            if r not in sharc:
                continue
            pts = sorted(sharc[r].items())
            ax.plot([p[0] for p in pts], [max(p[1], 1e-6) for p in pts],
                    style, marker="o" if style == "-" else None, ms=3.5,
                    lw=2 if r else 1.4, color="black" if r else "dimgrey",
                    label="sharc -R %d %s" % (r, what))
    for lib in sorted(peers, key=lambda x: list(LABELS).index(x)
                      if x in LABELS else 99):
        pts = sorted(peers[lib].items())
        ax.plot([p[0] for p in pts], [max(p[1], 1e-6) for p in pts], "--",
                marker="s", ms=3, color=COLORS.get(lib),
                label=LABELS.get(lib, lib))
    if lim:
        ax.axhline(lim, color="grey", lw=1, ls=":",
                   label="copy limit (memcpy of 128 MiB by all ranks at once): "
                   "%.1f GB/s" % lim)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s, %s)" %
                  ("in-place" if inplace else "out-of-place"))
    ax.set_title("%s, %d ranks on %s (%s): sharc-bench --timing call, "
                 "best of passes" % (coll, n, "/".join(sorted(hosts)), tag),
                 fontsize=9)
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out = os.path.join(folder, "n%d_%s%s.png" % (n, coll,
                                                  "_inplace" if inplace else ""))
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def table(n, coll, alone, beside, peers, lim):
    libs = sorted(peers, key=lambda x: list(LABELS).index(x)
                  if x in LABELS else 99)
    # the ratios' sharc: alone where it ran alone, else beside the peers
    sharc = {r: alone.get(r) or beside[r] for r in set(alone) | set(beside)}
    regs = sorted(sharc)
    bregs = sorted(beside) if alone else []
    sizes = sorted(set(s for c in list(sharc.values()) + list(peers.values())
                       for s in c))
    head = (["size"] + ["sharc -R %d" % r for r in regs] +
            ["beside -R %d" % r for r in bregs] + libs +
            ["best peer"] + ["-R %d / best" % r for r in regs])
    lines = ["### %s, %d ranks (busbw GB/s%s)" %
             (coll, n, "; copy limit %.2f" % lim if lim else ""), "",
             "| " + " | ".join(head) + " |",
             "|" + "|".join("---:" for _ in head) + "|"]
    for s in sizes:
        row = [size_label(s)]
        row += ["%.3g" % sharc[r][s] if s in sharc[r] else "-" for r in regs]
        row += ["%.3g" % beside[r][s] if s in beside[r] else "-"
                for r in bregs]
        row += ["%.3g" % peers[lib][s] if s in peers[lib] else "-"
                for lib in libs]
        have = [(peers[lib][s], lib) for lib in libs if s in peers[lib]]
        best = max(have) if have else None
        row.append("%.3g %s" % best if best else "-")
        for r in regs:
            ok = best and s in sharc[r] and best[0] > 0
            row.append("%.2f" % (sharc[r][s] / best[0]) if ok else "-")
        lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def cpu_table(n, coll, cell):
    """CPU time per call (us): sharc -R 0 (alone, else beside the peers:
    the median over their jobs) and each peer's -R 0 job (else its lowest
    -R), and sharc's over the least of the peers'."""
    cpu = cell.get("cpu", {})
    src = "sharc" if 0 in cpu.get("sharc", {}) else "beside"
    sharc = {s: statistics.median(v)
             for s, v in cpu.get(src, {}).get(0, {}).items()}
    peers = {lib: {s: min(v) for s, v in by_r[min(by_r)].items()}
             for lib, by_r in cpu.items() if lib not in ("sharc", "beside")}
    if not sharc or not peers:
        return []
    libs = sorted(peers, key=lambda x: list(LABELS).index(x)
                  if x in LABELS else 99)
    head = ["size", "sharc -R 0"] + libs + ["least peer", "sharc / least"]
    lines = ["### %s, %d ranks: CPU time per call (us)" % (coll, n), "",
             "| " + " | ".join(head) + " |",
             "|" + "|".join("---:" for _ in head) + "|"]
    for s in sorted(sharc):
        row = [size_label(s), "%.3g" % sharc[s]]
        row += ["%.3g" % peers[lib][s] if s in peers[lib] else "-"
                for lib in libs]
        have = [(peers[lib][s], lib) for lib in libs if s in peers[lib]]
        least = min(have) if have else None
        row.append("%.3g %s" % least if least else "-")
        row.append("%.2f" % (sharc[s] / least[0])
                   if least and least[0] > 0 else "-")
        lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--inplace", action="store_true")
    a = ap.parse_args()
    data, copy, hosts = load(a.folder, a.inplace)
    if not data:
        print("peers_summary: no <lib>_n<N>_R<r>_<part>.json in %s" % a.folder)
        return 1
    tag = os.path.basename(os.path.normpath(a.folder))
    try:
        import matplotlib  # noqa: F401
        can_plot = True
    except ImportError:
        can_plot = False
        print("peers_summary: no matplotlib (apt-get install "
              "python3-matplotlib): tables only")
    md = ["# sharc against its peers: %s (%s)" % (tag, "in place" if a.inplace
                                                  else "out of place"),
          "",
          "sharc -R r: sharc alone under sharcrun (its default binding: ranks pinned only where they share CPUs two to one at most); "
          "beside -R r: sharc in the peers' jobs, in the same processes as "
          "each peer, under its launcher (the median over those jobs; the "
          "sharc columns show it where sharc did not run alone). Each "
          "peer's busbw is its -R 0 job's. Ratio: sharc -R r over the best "
          "peer (> 1: sharc faster).", ""]
    for (n, coll) in sorted(data, key=lambda k: (k[0], COLLS.index(k[1])
                                                 if k[1] in COLLS else 99)):
        alone, beside, peers = curves(data[(n, coll)])
        c = statistics.median(copy[n]) if copy.get(n) else None
        lim = limit(coll, n, c, a.inplace)
        md += table(n, coll, alone, beside, peers, lim)
        md += cpu_table(n, coll, data[(n, coll)])
        if can_plot:
            print("wrote", plot(a.folder, n, coll, alone, beside, peers, lim,
                                tag, a.inplace, hosts))
    out = os.path.join(a.folder, "summary%s.md" %
                       ("_inplace" if a.inplace else ""))
    with open(out, "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
    print("wrote", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Tables of the host path against MPI from bench/host_vs_mpi.sh results: one per
target, each run beside the other, and a verdict (holds when every run
meets the target).

    python3 bench/host_vs_mpi_summary.py bench/results/item6 [--tags run1,run2]

Targets (2-core machine, 2 and 4 ranks, one host):
  1. bus bandwidth from 1 MiB up, all-gather / reduce-scatter / all-reduce:
     with -R 1 at least 2x Open MPI and not below MPICH; with -R 0 not below
     either; against the peers in the default environment and with
     MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 ("mallocenv");
  2. the largest all-gather at 85% or more of the memory-copy limit
     (aggregate memcpy rate / ranks, measured by the bench in the same run);
  3. 8-byte all-reduce time no worse than Open MPI's, same ranks;
  4. over TCP (2 ranks) the largest all-gather at 80% or more of the
     loopback TCP stream rate the bench measured.
Ratios are sharc / peer busbw (> 1: sharc faster); "oop" out-of-place,
"ip" in-place.
"""
import argparse
import glob
import json
import os
import re

COLLS = ["all_gather", "reduce_scatter", "all_reduce"]
SHORT = {"all_gather": "AG", "reduce_scatter": "RS", "all_reduce": "AR"}
PEER = {"ompi": "Open MPI", "mpich": "MPICH"}


def load(d, tags):
    """{(kind, peer, n, R, env): {tag: json}} for every result file; the
    mid and big sweeps of one configuration become one "large" entry (rows
    of both, limits of the big one)."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        name = os.path.basename(path)[:-5]
        m = re.match(r"(small|mid|big)_([a-z]+)_n(\d+)_R(\d)_([a-z]+)_(\w+)$",
                     name)
        t = re.match(r"tcp_allgather_n(\d+)_R(\d)_(\w+)$", name)
        if m:
            kind = "small" if m[1] == "small" else "large"
            key = (kind, m[2], int(m[3]), int(m[4]), m[5])
            tag = m[6]
        elif t:
            key = ("tcp", "", int(t[1]), int(t[2]), "default")
            tag = t[3]
        else:
            continue
        if tags and tag not in tags:
            continue
        with open(path) as f:
            js = json.load(f)
        have = runs.setdefault(key, {}).get(tag)
        if have:  # merge the mid and big sweeps
            have["results"] += js["results"]
            if "limits" in js:
                have["limits"] = js["limits"]
        else:
            runs[key][tag] = js
    return runs


def present(runs, kind, tags):
    """The tags that have results of this kind (tables leave out the others)."""
    return [t for t in tags if any(t in v for k, v in runs.items()
                                   if k[0] == kind)]


def rows(js, backend, coll):
    return {r["size"]: r for r in js["results"]
            if r["backend"] == backend and r["collective"] == coll}


def fmt(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def target1(runs, tags):
    tags = present(runs, "large", tags)
    out = ["## Target 1: busbw from 1 MiB up, sharc / peer (smallest ratio "
           "over the sizes, oop / ip)", "",
           "| ranks | -R | peer | peer env | coll | " +
           " | ".join(f"{t} min ratio (size)" for t in tags) +
           " | target | verdict |", "|" + "---|" * (6 + len(tags) + 1)]
    verdicts = []
    detail = []
    for key in sorted(k for k in runs if k[0] == "large"):
        _, peer, n, reg, env = key
        need = 2.0 if (reg == 1 and peer == "ompi") else 1.0
        for coll in COLLS:
            cells, ok = [], True
            for tag in tags:
                js = runs[key].get(tag)
                if not js:
                    cells.append("missing")
                    ok = False
                    continue
                s, p = rows(js, "sharc", coll), rows(js, "mpi", coll)
                worst = []
                for ip, col in ((0, "busbw"), (1, "inplace_busbw")):
                    rs = [(s[z][col] / p[z][col], z) for z in s
                          if z >= (1 << 20) and z in p and p[z][col] > 0]
                    if not rs:
                        worst.append(None)
                        continue
                    r = min(rs)
                    worst.append(r)
                    if r[0] < need:
                        ok = False
                cells.append(" / ".join(
                    "-" if w is None else f"{w[0]:.2f} ({w[1] >> 20}M)"
                    for w in worst))
                for z in sorted(s):
                    if z in p:
                        detail.append((n, reg, peer, env, coll, tag, z,
                                       s[z]["busbw"], p[z]["busbw"],
                                       s[z]["inplace_busbw"],
                                       p[z]["inplace_busbw"]))
            v = "holds" if ok else "misses"
            verdicts.append((n, reg, peer, env, coll, v))
            out.append(f"| {n} | {reg} | {PEER.get(peer, peer)} | {env} | "
                       f"{SHORT[coll]} | " + " | ".join(cells) +
                       f" | >= {need:g}x | {v} |")
    return out, verdicts, detail


def ceiling(runs, tags):
    """How far 2x Open MPI can go: the peer's own busbw at the largest size
    as a fraction of the copy limit of target 2 (C/n, out-of-place
    all-gather C(n-1)/n^2); above 50%, twice it is past the limit."""
    tags = present(runs, "large", tags)
    out = ["## Ceiling of target 1: the peer's busbw at the largest size, "
           "% of the copy limit (oop / ip); 2x is possible only below 50%",
           "", "| ranks | -R | peer | peer env | " + " | ".join(
               f"{t}: AG / RS / AR" for t in tags) + " |",
           "|" + "---|" * (4 + len(tags))]
    for key in sorted(k for k in runs if k[0] == "large"):
        _, peer, n, reg, env = key
        cells = []
        for tag in tags:
            js = runs[key].get(tag)
            if not js or "limits" not in js:
                cells.append("missing")
                continue
            c = js["limits"]["memcpy_all"]
            parts = []
            for coll in COLLS:
                p = rows(js, "mpi", coll)
                z = max(p)
                lo = c * (n - 1) / (n * n) if coll == "all_gather" else c / n
                parts.append(f"{100 * p[z]['busbw'] / lo:.0f}/"
                             f"{100 * p[z]['inplace_busbw'] / (c / n):.0f}%")
            cells.append(" ; ".join(parts))
        out.append(f"| {n} | {reg} | {PEER.get(peer, peer)} | {env} | " +
                   " | ".join(cells) + " |")
    return out


def target2(runs, tags):
    tags = present(runs, "large", tags)
    out = ["## Target 2: largest all-gather / memcpy limit, C = aggregate "
           "memcpy rate of all ranks at once, measured in the same run; "
           "limit C/n in place, C(n-1)/n^2 out of place (each rank also "
           "copies its own block)", "",
           "| ranks | -R | launcher (peer env) | size | " +
           " | ".join(f"{t}: busbw oop / ip, C, % oop / ip" for t in tags)
           + " | verdict (>= 85%, oop / ip) |", "|" + "---|" * (5 + len(tags))]
    for key in sorted(k for k in runs if k[0] == "large"):
        _, peer, n, reg, env = key
        cells, ok, size = [], [True, True], 0
        for tag in tags:
            js = runs[key].get(tag)
            if not js or "limits" not in js:
                cells.append("missing")
                ok = [False, False]
                continue
            s = rows(js, "sharc", "all_gather")
            size = max(s)
            c = js["limits"]["memcpy_all"]
            lim = (c * (n - 1) / (n * n), c / n)
            a, b = s[size]["busbw"], s[size]["inplace_busbw"]
            cells.append(f"{a:.2f} / {b:.2f}, {c:.1f}, "
                         f"{100 * a / lim[0]:.0f}% / {100 * b / lim[1]:.0f}%")
            ok = [ok[0] and a >= 0.85 * lim[0], ok[1] and b >= 0.85 * lim[1]]
        v = " / ".join("holds" if x else "misses" for x in ok)
        out.append(f"| {n} | {reg} | {'mpirun' if peer == 'ompi' else 'mpiexec'}"
                   f" ({env}) | {size >> 20} MiB | " + " | ".join(cells) +
                   f" | {v} |")
    return out


def target3(runs, tags):
    tags = present(runs, "small", tags)
    out = ["## Target 3: 8-byte all-reduce time (us, oop / ip), sharc vs "
           "the peer in the same run", "",
           "| ranks | peer | " + " | ".join(
               f"{t}: sharc, peer" for t in tags) +
           " | verdict (sharc <= Open MPI) |", "|" + "---|" * (3 + len(tags))]
    for key in sorted(k for k in runs if k[0] == "small"):
        _, peer, n, reg, env = key
        cells, ok = [], True
        for tag in tags:
            js = runs[key].get(tag)
            if not js:
                cells.append("missing")
                ok = False
                continue
            s, p = rows(js, "sharc", "all_reduce"), rows(js, "mpi", "all_reduce")
            z = min(s)
            cells.append(f"{s[z]['time_us']:.2f} / {s[z]['inplace_time_us']:.2f}"
                         f", {p[z]['time_us']:.2f} / {p[z]['inplace_time_us']:.2f}")
            if s[z]["time_us"] > p[z]["time_us"]:
                ok = False
        v = ("holds" if ok else "misses") if peer == "ompi" else "(info)"
        out.append(f"| {n} | {PEER.get(peer, peer)} | " + " | ".join(cells) +
                   f" | {v} |")
    return out


def target4(runs, tags):
    tags = present(runs, "tcp", tags)
    out = ["## Target 4: TCP, 2 ranks, largest all-gather / loopback TCP "
           "rate of one stream (and of one of two streams at once, where "
           "measured)", "",
           "| -R | size | " + " | ".join(
               f"{t}: busbw oop / ip, one stream (two), % oop (two)"
               for t in tags) +
           " | verdict (>= 80%) |", "|" + "---|" * (3 + len(tags))]
    for key in sorted(k for k in runs if k[0] == "tcp"):
        _, _, n, reg, _ = key
        cells, ok, size = [], True, 0
        for tag in tags:
            js = runs[key].get(tag)
            if not js:
                cells.append("missing")
                ok = False
                continue
            s = rows(js, "sharc", "all_gather")
            size = max(s)
            lim = js["limits"]["tcp_loopback"]
            two = js["limits"].get("tcp_loopback_2streams", 0)
            a, b = s[size]["busbw"], s[size]["inplace_busbw"]
            cells.append(f"{a:.2f} / {b:.2f}, {lim:.2f}" +
                         (f" ({two:.2f})" if two else "") +
                         f", {100 * a / lim:.0f}%" +
                         (f" ({100 * a / two:.0f}%)" if two else ""))
            if a < 0.8 * lim:
                ok = False
        out.append(f"| {reg} | {size >> 20} MiB | " + " | ".join(cells) +
                   f" | {'holds' if ok else 'misses'} |")
    return out


GAP_ORDER = ["sharcrun", "mpirun-alone", "mpirun-compare",
             "mpirun-compare-yield", "mpirun-compare-nobind", "mpiexec-alone",
             "mpiexec-compare"]


def gap(d, tags):
    """sharc's 32 MiB busbw under each launcher / neighbour (gap_* files)."""
    found = {}
    for path in glob.glob(os.path.join(d, "gap_*.json")):
        m = re.match(r"gap_([a-z-]+)_n(\d+)_(\w+)$",
                     os.path.basename(path)[:-5])
        if not m or (tags and m[3] not in tags):
            continue
        with open(path) as f:
            found[(int(m[2]), m[1], m[3])] = json.load(f)
    if not found:
        return []
    tags = [t for t in tags if any(k[2] == t for k in found)]
    out = ["## sharc under sharcrun and under MPI launchers: 32 MiB busbw "
           "(GB/s, oop / ip), -R 0", "",
           "| ranks | how | " + " | ".join(
               f"{t}: AG | {t}: AR | {t}: peer AG / AR" for t in tags) + " |",
           "|" + "---|" * (2 + 3 * len(tags))]
    for n in sorted({k[0] for k in found}):
        for v in GAP_ORDER:
            cells = []
            for tag in tags:
                js = found.get((n, v, tag))
                if not js:
                    cells += ["-", "-", "-"]
                    continue
                for coll in ("all_gather", "all_reduce"):
                    r = rows(js, "sharc", coll)
                    z = max(r)
                    cells.append(f"{r[z]['busbw']:.2f} / "
                                 f"{r[z]['inplace_busbw']:.2f}")
                peer = [rows(js, "mpi", c) for c in ("all_gather",
                                                     "all_reduce")]
                cells.append(" / ".join(
                    f"{p[max(p)]['busbw']:.2f}" for p in peer if p) or "-")
            out.append(f"| {n} | {v} | " + " | ".join(cells) + " |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="host_vs_mpi.sh --out folder")
    ap.add_argument("--tags", default="run1,run2")
    ap.add_argument("--detail", help="also write per-size ratios here (md)")
    a = ap.parse_args()
    tags = a.tags.split(",")
    runs = load(a.dir, tags)
    t1, verdicts, detail = target1(runs, tags)
    lines = t1 + [""] + ceiling(runs, tags) + [""] + target2(runs, tags) + [""] + target3(runs, tags) + \
        [""] + target4(runs, tags) + [""] + gap(a.dir, tags)
    print("\n".join(lines))
    if a.detail:
        with open(a.detail, "w") as f:
            f.write("# Per size: sharc and peer busbw (GB/s), ratio; "
                    "out-of-place | in-place\n\n")
            f.write("| ranks | -R | peer | env | coll | run | size | sharc | "
                    "peer | ratio | sharc ip | peer ip | ratio ip |\n")
            f.write("|" + "---|" * 13 + "\n")
            for (n, reg, peer, env, coll, tag, z, a1, b1, a2, b2) in detail:
                r1 = a1 / b1 if b1 > 0 else 0
                r2 = a2 / b2 if b2 > 0 else 0
                f.write(f"| {n} | {reg} | {peer} | {env} | {SHORT[coll]} | "
                        f"{tag} | {z >> 20}M | {a1:.2f} | {b1:.2f} | "
                        f"{r1:.2f} | {a2:.2f} | {b2:.2f} | {r2:.2f} |\n")


if __name__ == "__main__":
    main()

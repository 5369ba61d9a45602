#!/usr/bin/env python3
"""torch_coll_bench.py - bus bandwidth of torch.distributed's all_gather_
into_tensor, reduce_scatter_tensor and all_reduce through a backend (sharc
through `import sharc.torch`, or gloo), in nccl-tests' terms, timed the way
`sharc-bench --timing call` times sharc, so the cost of the Python layer is
the difference between the two tables at the same size.

    torchrun --standalone --nproc-per-node 2 bench/torch_coll_bench.py \
        --backend sharc -b 8 -e 256M -f 4 --passes 3 --json out.json

Sizes are each call's whole buffer (all-gather's output, reduce-scatter's
input, all-reduce's vector), float32, sum, the same buffers every call.

--timing call (default; OSU, IMB and sharc-bench --timing call): per
iteration a barrier, t0, one synchronous call (async_op=False), t1; the
time of an iteration is its slowest rank's; a pass reports the median over
its iterations. --timing stream (nccl-tests): the calls back to back after
a barrier, the slowest rank's mean. Iterations per size: --iters, fewer
for large sizes so that one pass of one size takes about --budget seconds
(at least --min-iters). Every size is swept --passes times; a row reports
the best pass's busbw, the median pass's and the spread (worst time /
best). busbw factors as nccl-tests: all_gather and reduce_scatter
(n-1)/n of the size, all_reduce 2(n-1)/n.
"""

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

COLLS = ("all_gather", "reduce_scatter", "all_reduce")


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult \
        else int(s)


def buffers(coll, size, n):
    """(call, the size it moves in bytes) for one collective and size."""
    count = max(1, size // 4)
    if coll == "all_reduce":
        vec = torch.ones(count)
        return (lambda: dist.all_reduce(vec)), count * 4
    count = max(1, count // n)
    small, big = torch.ones(count), torch.ones(count * n)
    if coll == "all_gather":
        return (lambda: dist.all_gather_into_tensor(big, small)), count * n * 4
    return (lambda: dist.reduce_scatter_tensor(small, big)), count * n * 4


def slowest(values):
    """Element-wise maximum over ranks of a list of floats."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def time_pass(call, iters, timing):
    """Seconds of one call: the median of the per-iteration slowest rank
    (call) or the slowest rank's mean (stream)."""
    if timing == "stream":
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        return slowest([(time.perf_counter() - t0) / iters])[0]
    times = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(slowest(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="sharc")
    ap.add_argument("-b", type=size_arg, default=8)
    ap.add_argument("-e", type=size_arg, default=256 << 20)
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("--colls", default=",".join(COLLS))
    ap.add_argument("--timing", choices=("call", "stream"), default="call")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.25)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    colls = a.colls.split(",")
    for c in colls:
        if c not in COLLS:
            ap.error(f"--colls: {c} is not one of {','.join(COLLS)}")
    if a.backend == "sharc":
        import sharc.torch  # noqa: F401
    dist.init_process_group(a.backend)
    r, n = dist.get_rank(), dist.get_world_size()
    factor = {"all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
              "all_reduce": 2 * (n - 1) / n}
    sizes = []
    size = a.b
    while size <= a.e:
        sizes.append(size)
        size *= a.f
    # iterations per (coll, size) from the warm-up: same on every rank
    plan = {}
    for size in sizes:
        for coll in colls:
            call, total = buffers(coll, size, n)
            t0 = time.perf_counter()
            for _ in range(a.warmup):
                call()
            est = slowest([(time.perf_counter() - t0) / a.warmup])[0]
            iters = int(a.budget / max(est, 1e-7))
            plan[coll, size] = (total, max(a.min_iters, min(a.iters, iters)))
            del call
    times = {k: [] for k in plan}
    for _ in range(a.passes):
        for size in sizes:
            for coll in colls:
                call, _ = buffers(coll, size, n)
                call()
                times[coll, size].append(time_pass(call, plan[coll, size][1],
                                                   a.timing))
                del call
    rows = []
    if r == 0:
        print(f"# torch.distributed on {a.backend}, {n} ranks, float32 sum, "
              f"torch {torch.__version__}; timing {a.timing}, best and "
              f"median of {a.passes} passes")
        print(f"# {'size(B)':>12} {'coll':>15} {'iters':>6} {'time(us)':>10} "
              f"{'busbw':>8} {'med_us':>10} {'med_bw':>8} {'spread':>7}")
    for size in sizes:
        for coll in colls:
            total, iters = plan[coll, size]
            ts = sorted(times[coll, size])
            best, med = ts[0], statistics.median(ts)

            def bw(t):
                return total / t / 1e9 * factor[coll] if n > 1 else 0.0

            row = {"size": total, "coll": coll, "iters": iters,
                   "time_us": best * 1e6, "busbw": bw(best),
                   "median_us": med * 1e6, "median_busbw": bw(med),
                   "spread": ts[-1] / best if best > 0 else 1.0,
                   "pass_us": [t * 1e6 for t in times[coll, size]]}
            rows.append(row)
            if r == 0:
                print(f"  {total:>12} {coll:>15} {iters:>6} "
                      f"{row['time_us']:>10.2f} {row['busbw']:>8.2f} "
                      f"{row['median_us']:>10.2f} {row['median_busbw']:>8.2f}"
                      f" {row['spread']:>7.2f}", flush=True)
    if r == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump({"backend": a.backend, "ranks": n, "timing": a.timing,
                       "passes": a.passes, "torch": torch.__version__,
                       "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

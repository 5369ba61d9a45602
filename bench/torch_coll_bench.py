#!/usr/bin/env python3
"""torch_coll_bench.py - bus bandwidth of torch.distributed's all_gather_
into_tensor, reduce_scatter_tensor and all_reduce through a backend (sharc
through `import sharc.torch`, or gloo), in nccl-tests' terms, so the cost of
the Python layer is a number next to sharc-bench's table for the same sizes.

    torchrun --standalone --nproc-per-node 2 bench/torch_coll_bench.py \
        --backend sharc -b 8 -e 256M -f 4 --json out.json

Per size: --warmup calls, then --iters calls each followed by nothing (the
calls are synchronous: async_op=False), timed on every rank with
perf_counter around the loop after a barrier; the time reported is the
slowest rank's mean. busbw factors as nccl-tests: all_gather and
reduce_scatter (n-1)/n of the total, all_reduce 2(n-1)/n. float32, sum.
"""

import argparse
import json
import time

import torch
import torch.distributed as dist


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult \
        else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="sharc")
    ap.add_argument("-b", type=size_arg, default=8)
    ap.add_argument("-e", type=size_arg, default=256 << 20)
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.backend == "sharc":
        import sharc.torch  # noqa: F401
    dist.init_process_group(a.backend)
    r, n = dist.get_rank(), dist.get_world_size()
    rows = []
    if r == 0:
        print(f"# {a.backend}, {n} ranks, float32 sum; time: slowest rank's "
              f"mean of {a.iters} synchronous calls")
        print(f"# {'size(B)':>12} {'coll':>15} {'time(us)':>10} "
              f"{'busbw(GB/s)':>12}")
    size = a.b
    while size <= a.e:
        for coll in ("all_gather", "reduce_scatter", "all_reduce"):
            count = max(1, size // 4)
            if coll != "all_reduce":
                count = max(1, count // n)  # size: the full buffer
            small = torch.ones(count)
            big = torch.ones(count * n)
            big_in = torch.ones(count * n)

            def call():
                if coll == "all_gather":
                    dist.all_gather_into_tensor(big, small)
                elif coll == "reduce_scatter":
                    dist.reduce_scatter_tensor(small, big_in)
                else:
                    dist.all_reduce(small)

            for _ in range(a.warmup):
                call()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(a.iters):
                call()
            dt = torch.tensor([(time.perf_counter() - t0) / a.iters])
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            us = dt.item() * 1e6
            total = (count * n if coll != "all_reduce" else count) * 4
            factor = 2 * (n - 1) / n if coll == "all_reduce" else (n - 1) / n
            busbw = total / (us * 1e-6) / 1e9 * factor if n > 1 else 0.0
            rows.append({"size": total, "coll": coll, "time_us": us,
                         "busbw": busbw})
            if r == 0:
                print(f"  {total:>12} {coll:>15} {us:>10.2f} {busbw:>12.2f}",
                      flush=True)
        size *= a.f
    if r == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump({"backend": a.backend, "ranks": n, "rows": rows}, f,
                      indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

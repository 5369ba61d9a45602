"""The PyTorch backend (python/sharc/torch.py) against gloo, in the same
processes: every call x dtype x reduction, in place and not, synchronous and
async_op, on the world group and on new_group sub-groups (scatter and gather
to a root; premul_sum against gloo's sum of scaled copies); then FSDP2
(fully_shard) trains a small model on both backends from the same start and
the losses must agree within the noise of regrouping the sums.

Run by torchrun (any rank count):
    torchrun --standalone --nproc-per-node 4 tests/python/torch_backend_check.py
Exit 0 when every check passed; failures are printed with the rank.
"""

import gc
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import sharc.torch  # noqa: E402,F401  (registers "sharc")

FAIL = []


def check(cond, what):
    if not cond:
        FAIL.append(what)
        if len(FAIL) <= 10:
            print(f"rank {dist.get_rank()}: FAIL {what}", flush=True)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int8, torch.uint8, torch.int32, torch.int64]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
       dist.ReduceOp.MAX]


def data(dt, n, rank, salt):
    g = torch.Generator().manual_seed(1000 * salt + rank)
    if dt.is_floating_point:
        # small integers: sums and products exact in every float type
        return torch.randint(-3, 4, (n,), generator=g).to(dt)
    lo = 0 if dt == torch.uint8 else -3
    return torch.randint(lo, 4, (n,), generator=g).to(dt)


def same(a, b):
    return torch.equal(a, b)


def collectives(sg, gg, tag):
    """sg: a sharc group, gg: the gloo group of the same ranks."""
    r, n = dist.get_rank(sg), dist.get_world_size(sg)
    salt = 0
    for dt in DTYPES:
        for count in (0, 1, 7, 1000):
            salt += 1
            x = data(dt, count, r, salt)
            for op in OPS:
                if op == dist.ReduceOp.PRODUCT and dt in (torch.int8,
                                                          torch.uint8):
                    continue  # gloo and sharc wrap alike, but keep it short
                a, b = x.clone(), x.clone()
                dist.all_reduce(a, op=op, group=sg)
                dist.all_reduce(b, op=op, group=gg)
                check(same(a, b), f"{tag} all_reduce {dt} {count} {op}")
            a = x.clone()
            w = dist.all_reduce(a, group=sg, async_op=True)
            b = x.clone()
            dist.all_reduce(b, group=gg)
            w.wait()
            check(same(a, b), f"{tag} all_reduce async {dt} {count}")
            out_s = torch.empty(count * n, dtype=dt)
            out_g = torch.empty(count * n, dtype=dt)
            dist.all_gather_into_tensor(out_s, x, group=sg)
            dist.all_gather_into_tensor(out_g, x, group=gg)
            check(same(out_s, out_g), f"{tag} all_gather {dt} {count}")
            lst = [torch.empty(count, dtype=dt) for _ in range(n)]
            dist.all_gather(lst, x, group=sg)
            check(same(torch.cat(lst), out_g), f"{tag} all_gather list {dt}")
            big = data(dt, count * n, r, salt + 7)
            rs_s = torch.empty(count, dtype=dt)
            rs_g = torch.empty(count, dtype=dt)
            dist.reduce_scatter_tensor(rs_s, big, group=sg)
            dist.reduce_scatter_tensor(rs_g, big, group=gg)
            check(same(rs_s, rs_g), f"{tag} reduce_scatter {dt} {count}")
            for root in {0, n - 1}:
                a, b = x.clone(), x.clone()
                dist.broadcast(a, dist.get_global_rank(sg, root), group=sg)
                dist.broadcast(b, dist.get_global_rank(gg, root), group=gg)
                check(same(a, b), f"{tag} broadcast {dt} {count} root {root}")
            a2a_s = torch.empty(count * n, dtype=dt)
            a2a_g = torch.empty(count * n, dtype=dt)
            dist.all_to_all_single(a2a_s, big, group=sg)
            dist.all_to_all_single(a2a_g, big, group=gg)
            check(same(a2a_s, a2a_g), f"{tag} all_to_all {dt} {count}")
            for root in {0, n - 1}:
                groot = dist.get_global_rank(sg, root)
                src = [big[i * count:(i + 1) * count] for i in range(n)] \
                    if r == root else None
                sc_s = torch.empty(count, dtype=dt)
                sc_g = torch.empty(count, dtype=dt)
                dist.scatter(sc_s, src, groot, group=sg)
                dist.scatter(sc_g, src, groot, group=gg)
                check(same(sc_s, sc_g), f"{tag} scatter {dt} {count} "
                      f"root {root}")
                lst_s = [torch.empty(count, dtype=dt) for _ in range(n)] \
                    if r == root else None
                dist.gather(x, lst_s, groot, group=sg)
                if r == root:
                    check(same(torch.cat(lst_s), out_g),
                          f"{tag} gather {dt} {count} root {root}")
            if dt.is_floating_point:
                premul(sg, gg, tag, x, big, count)
    # uneven all_to_all (MoE): rank r sends (r + p) % 3 + 1 rows to p
    ins = [(r + p) % 3 + 1 for p in range(n)]
    outs = [(p + r) % 3 + 1 for p in range(n)]
    src = torch.arange(sum(ins) * 4, dtype=torch.float32).view(-1, 4) + 100 * r
    o_s = torch.empty(sum(outs), 4)
    o_g = torch.empty(sum(outs), 4)
    dist.all_to_all_single(o_s, src, outs, ins, group=sg)
    dist.all_to_all_single(o_g, src, outs, ins, group=gg)
    check(same(o_s, o_g), f"{tag} all_to_all uneven")
    dist.barrier(group=sg)
    if n > 1:  # a ring of sends and receives
        nxt = dist.get_global_rank(sg, (r + 1) % n)
        prv = dist.get_global_rank(sg, (r - 1) % n)
        t = torch.full((513,), float(r))
        got = torch.empty(513)
        ops = [dist.P2POp(dist.isend, t, nxt, group=sg),
               dist.P2POp(dist.irecv, got, prv, group=sg)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        check(got[0].item() == (r - 1) % n, f"{tag} send/recv ring")


def work_handles(sg, gg, tag):
    """The handles of async calls: a future's callback runs with nobody
    calling wait(); is_completed() turns true on its own; a handle dropped
    before its call finished keeps the tensors alive until it has (the
    memory is checked by the calls after it); result() and exception()."""
    r = dist.get_rank(sg)
    x = data(torch.float32, 1 << 16, r, 99)
    want = x.clone()
    dist.all_reduce(want, group=gg)
    a = x.clone()
    w = dist.all_reduce(a, group=sg, async_op=True)
    seen = []
    fut = w.get_future().then(lambda f: seen.append(f.value()))
    deadline = time.monotonic() + 60
    while not fut.done() and time.monotonic() < deadline:
        time.sleep(0.001)
    check(fut.done() and w.is_completed() and len(seen) == 1,
          f"{tag} async all_reduce: future done {fut.done()}, "
          f"is_completed {w.is_completed()}, callbacks run {len(seen)}")
    check(same(a, want) and seen and same(seen[0][0], want),
          f"{tag} async all_reduce through its future")
    # a callback may call its Work again (DDP-style hooks): no deadlock
    c = x.clone()
    w2 = dist.all_reduce(c, group=sg, async_op=True)
    fut2 = w2.get_future().then(lambda f: (w2.wait(), w2.is_completed()))
    deadline = time.monotonic() + 60
    while not fut2.done() and time.monotonic() < deadline:
        time.sleep(0.001)
    check(fut2.done() and fut2.value() == (True, True) and same(c, want),
          f"{tag} a future callback calling its Work's wait(): done "
          f"{fut2.done()}")
    check(w.is_success() and w.exception() is None and
          same(w.result()[0], want), f"{tag} async handle after success")
    # barrier synchronizes: the last rank arrives 0.3 s late, so every
    # rank's barrier (blocking, and async + wait) lasts about that long
    last = dist.get_world_size(sg) - 1
    for mode in ("blocking", "async"):
        if r == last:
            time.sleep(0.3)
        t0 = time.monotonic()
        if mode == "blocking":
            dist.barrier(group=sg)
        else:
            dist.barrier(group=sg, async_op=True).wait()
        took = time.monotonic() - t0
        check(r == last or took >= 0.2,
              f"{tag} {mode} barrier returned after {took * 1e3:.1f} ms "
              f"while rank {last} was 300 ms late")
    for _ in range(8):  # dropped handles: nobody waits, nothing is kept
        dist.all_reduce(x.clone(), group=sg, async_op=True)
        dist.all_gather_into_tensor(
            torch.empty(x.numel() * dist.get_world_size(sg)), x, group=sg,
            async_op=True)
    gc.collect()
    fresh = [x.clone() for _ in range(8)]
    b = x.clone()
    dist.all_reduce(b, group=sg)
    check(same(b, want) and all(same(f, x) for f in fresh),
          f"{tag} calls after dropped async handles")


def premul(sg, gg, tag, x, big, count):
    """premul_sum (a sum of copies scaled by the factor) against gloo's sum
    of the scaled copies, computed here: gloo has no premul_sum. A float
    factor and a 1-element tensor factor; 0.5 keeps the sums exact."""
    n, dt = dist.get_world_size(sg), x.dtype
    for factor in (0.5, torch.tensor([0.5], dtype=dt)):
        kind = type(factor).__name__
        op = dist._make_nccl_premul_sum(factor)
        a, b = x.clone(), x * 0.5
        w = dist.all_reduce(a, op=op, group=sg, async_op=True)
        dist.all_reduce(b, group=gg)
        w.wait()
        check(same(a, b), f"{tag} all_reduce premul_sum {kind} {dt} {count}")
        keep = big.clone()
        rs_s = torch.empty(count, dtype=dt)
        rs_g = torch.empty(count, dtype=dt)
        dist.reduce_scatter_tensor(rs_s, big, op=op, group=sg)
        dist.reduce_scatter_tensor(rs_g, big * 0.5, group=gg)
        check(same(rs_s, rs_g) and same(big, keep),
              f"{tag} reduce_scatter premul_sum {kind} {dt} {count}")
        root = dist.get_global_rank(sg, n - 1)
        a, b = x.clone(), x * 0.5
        dist.reduce(a, root, op=op, group=sg)
        dist.reduce(b, root, group=gg)
        if dist.get_rank() == root:
            check(same(a, b), f"{tag} reduce premul_sum {kind} {dt} {count}")


def fsdp2(backend_group, seed=0):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    mesh = torch.distributed.device_mesh.DeviceMesh.from_group(
        backend_group, "cpu")
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(7 + dist.get_rank())
    losses = []
    for _ in range(20):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    dist.init_process_group("sharc")
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    collectives(dist.group.WORLD, gloo, "world")
    work_handles(dist.group.WORLD, gloo, "world")
    if n >= 2:  # two sub-groups (new_group: a communicator each)
        evens = list(range(0, n, 2))
        odds = list(range(1, n, 2))
        se, so = dist.new_group(evens), dist.new_group(odds)
        ge = dist.new_group(evens, backend="gloo")
        go = dist.new_group(odds, backend="gloo")
        if rank % 2 == 0:
            collectives(se, ge, "evens")
        else:
            collectives(so, go, "odds")
    ls = fsdp2(dist.group.WORLD)
    lg = fsdp2(gloo)
    # float32 sums regrouped: a few ulps of the loss per step
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(ls, lg))
    check(worst < 1e-4, f"FSDP2 losses sharc vs gloo differ by {worst:.2e}")
    if rank == 0:
        print(f"FSDP2 on {n} ranks: 20 steps, loss {ls[0]:.4f} -> "
              f"{ls[-1]:.4f} (gloo {lg[-1]:.4f}, worst relative "
              f"difference {worst:.1e})", flush=True)
    dist.destroy_process_group()
    print(f"rank {rank}: torch_backend_check "
          f"{'FAILED' if FAIL else 'passed'}", flush=True)
    sys.exit(1 if FAIL else 0)


if __name__ == "__main__":
    main()

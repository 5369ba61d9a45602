"""HSDP through the PyTorch backend: FSDP2 (fully_shard) on a 2-D
DeviceMesh ("replicate", "shard"), 2 x N/2, against the same run on gloo in
the same processes.

- Each mesh dimension's group (a sharc communicator of its own) runs the
  whole call sweep of torch_backend_check.py against the gloo group of the
  same ranks: all_reduce on "replicate", all_gather on "shard", and the rest.
- HSDP trains a small MLP for 10 steps on sharc and on gloo from the same
  start. Gradients are reduce-scattered over "shard" and all-reduced over
  "replicate", sums of 2 at 2 x 2: the same sums in either order, so the
  losses and the final parameters must be bitwise equal at 4 ranks (1e-4
  relative elsewhere). For scale the script prints how far gloo's own HSDP
  run is from gloo's 1-D FSDP2 run (the same sums regrouped).
- HSDP with set_gradient_divide_factor(N) makes FSDP2 reduce-scatter with
  premul_sum(1/N) (gloo has no premul_sum); scaling by a power of 2 is
  exact, so at 2 x 2 it too must equal gloo's plain HSDP bitwise.

    torchrun --standalone --nproc-per-node 4 tests/python/torch_hsdp_check.py
Exit 0 when every check passed.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh  # noqa: E402,E501

import sharc.torch  # noqa: E402  (registers "sharc")
import torch_backend_check as tbc  # noqa: E402  (the call sweep)

DIMS = ("replicate", "shard")
STEPS = 10


def train(mesh, divide_factor=None):
    """FSDP2 over mesh (1-D: FSDP, 2-D: HSDP) from seed 0. Returns the
    losses (this rank's batch) and the full parameters after the last step."""
    from torch.distributed.fsdp import FSDPModule, fully_shard
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if divide_factor is not None:
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.set_gradient_divide_factor(divide_factor)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(7 + dist.get_rank())
    losses = []
    for _ in range(STEPS):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = [p.full_tensor().clone() for p in model.parameters()]
    return losses, params


def worst(a, b):
    """The largest relative difference of the losses and parameters."""
    (la, pa), (lb, pb) = a, b
    d = [abs(x - y) / max(abs(y), 1e-6) for x, y in zip(la, lb)]
    d += [((x - y).abs().max() / y.abs().max().clamp_min(1e-6)).item()
          for x, y in zip(pa, pb)]
    return max(d)


def main():
    dist.init_process_group("sharc")
    rank, n = dist.get_rank(), dist.get_world_size()
    if n < 4 or n % 2:
        print(f"torch_hsdp_check wants an even number of ranks >= 4, got {n}")
        sys.exit(2)
    shape = (2, n // 2)
    ms = init_device_mesh("cpu", shape, mesh_dim_names=DIMS)
    mg = init_device_mesh("cpu", shape, mesh_dim_names=DIMS,
                          backend_override={d: "gloo" for d in DIMS})
    for d in DIMS:
        sg, gg = ms.get_group(d), mg.get_group(d)
        tbc.check(dist.get_backend(sg) == "sharc" and
                  dist.get_backend(gg) == "gloo" and sg.size() == gg.size() and
                  dist.get_process_group_ranks(sg) ==
                  dist.get_process_group_ranks(gg),
                  f"mesh dim {d}: {sg.getBackendName()} group of ranks "
                  f"{dist.get_process_group_ranks(sg)}, gloo "
                  f"{dist.get_process_group_ranks(gg)}")
        tbc.collectives(sg, gg, d)

    hs = train(ms)
    hg = train(mg)
    seen = []  # the premul_sum factors the backend got from FSDP2
    premul = sharc.torch._premul

    def spy(opts):
        f = premul(opts)
        if f is not None:
            seen.append(f)
        return f
    sharc.torch._premul = spy
    hp = train(ms, divide_factor=float(n))
    sharc.torch._premul = premul
    tbc.check(seen and all(float(f) == 1 / n for f in seen),
              f"FSDP2 with divide factor {n} sent premul_sum factors "
              f"{sorted(set(float(f) for f in seen))}, want [{1 / n}]")
    fg = train(DeviceMesh.from_group(dist.new_group(backend="gloo"), "cpu"))
    tol = 0.0 if shape == (2, 2) else 1e-4
    w, wp, noise = worst(hs, hg), worst(hp, hg), worst(hg, fg)
    tbc.check(w <= tol, f"HSDP sharc vs gloo differ by {w:.2e} (allowed "
              f"{tol:.0e})")
    tbc.check(wp <= tol, f"HSDP sharc with premul_sum vs gloo differ by "
              f"{wp:.2e} (allowed {tol:.0e})")
    if rank == 0:
        print(f"HSDP {shape[0]}x{shape[1]}: {STEPS} steps, loss "
              f"{hs[0][0]:.4f} -> {hs[0][-1]:.4f}; sharc vs gloo worst "
              f"relative difference {w:.1e}, with premul_sum {wp:.1e} "
              f"({len(seen)} calls); gloo "
              f"HSDP vs gloo 1-D FSDP2 (regrouping noise) {noise:.1e}",
              flush=True)
    dist.destroy_process_group()
    print(f"rank {rank}: torch_hsdp_check "
          f"{'FAILED' if tbc.FAIL else 'passed'}", flush=True)
    sys.exit(1 if tbc.FAIL else 0)


if __name__ == "__main__":
    main()

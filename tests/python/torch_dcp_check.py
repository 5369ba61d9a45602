"""torch.distributed.checkpoint (DCP) through the PyTorch backend: an FSDP2
model and its Adam state saved on N ranks, loaded on N and on N/2.

    python tests/python/torch_dcp_check.py [N]      (default 4 ranks)

Launches torchrun twice (loading on another world size needs another
launch; each costs several seconds of imports):

1. N ranks: FSDP2 trains 3 steps on backend "sharc", dcp.save()s the model
   and optimizer state dicts (get_state_dict) to a temporary folder, then
   trains 2 more steps: the un-checkpointed reference. Rank 0 writes the
   full parameters and optimizer state at the checkpoint, and the losses
   and parameters after the 2 steps. Then a fresh model (another seed)
   dcp.load()s the checkpoint: parameters and optimizer state must equal
   the reference's bitwise, and so must the 2 following steps' losses and
   parameters (the same sums in the same order).
2. N/2 ranks, a fresh model again, resharded by DCP: parameters and
   optimizer state bitwise; the 2 steps within 1e-5 relative (the global
   batch of 64 split over fewer ranks: the gradient's mean is summed in
   another grouping).

DCP's own coordination (gather_object, scatter_object_list, broadcast) runs
through sharc's gather, scatter and broadcast. Exit 0 when every check
passed; the temporary folder is removed.
"""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

BATCH = 64      # global batch (rows), split evenly over the ranks
SAVED_AT = 3    # steps before the checkpoint
AFTER = 2       # steps after it
RESHARD_TOL = 1e-5


def build(seed):
    import torch
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, opt


def step(model, opt, i):
    """Step i on this rank's rows of global batch i; returns the global
    loss (the mean over all ranks' rows)."""
    import torch
    import torch.distributed as dist
    g = torch.Generator().manual_seed(100 + i)
    x = torch.randn(BATCH, 32, generator=g)
    y = torch.randint(0, 10, (BATCH,), generator=g)
    n, r = dist.get_world_size(), dist.get_rank()
    rows = slice(r * BATCH // n, (r + 1) * BATCH // n)
    loss = torch.nn.functional.cross_entropy(model(x[rows]), y[rows])
    opt.zero_grad()
    loss.backward()
    opt.step()
    total = loss.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.AVG)
    return total.item()


def full(model, opt):
    """{name: full tensor} of the parameters and the optimizer state."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.tensor import DTensor
    msd, osd = get_state_dict(model, opt)
    out = {f"model.{k}": v.full_tensor() for k, v in msd.items()}
    for fqn, st in osd["state"].items():
        for k, v in st.items():
            out[f"optim.{fqn}.{k}"] = v.full_tensor() \
                if isinstance(v, DTensor) else v.clone()
    return out


def params(model):
    return [p.full_tensor() for p in model.parameters()]


def save(ckpt):
    """Trains, checkpoints, trains on: the reference (the same on every
    rank: full tensors and global losses)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model, opt = build(seed=0)
    for i in range(SAVED_AT):
        step(model, opt, i)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt)
    at_save = full(model, opt)
    losses = [step(model, opt, SAVED_AT + i) for i in range(AFTER)]
    return {"n": dist.get_world_size(), "state": at_save, "losses": losses,
            "params": params(model)}


def load(ckpt, ref, fail):
    """A fresh model loads the checkpoint; checks it against ref."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_state_dict,
                                                         set_state_dict)
    n = dist.get_world_size()
    model, opt = build(seed=1)  # a different start: the load must count
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=ckpt)
    set_state_dict(model, opt, model_state_dict=sd["model"],
                   optim_state_dict=sd["optim"])
    got = full(model, opt)
    if sorted(got) != sorted(ref["state"]):
        fail.append(f"state keys {sorted(got)} != saved "
                    f"{sorted(ref['state'])}")
    for k, v in ref["state"].items():
        if k in got and not torch.equal(got[k], v):
            fail.append(f"{k} differs from the saved one by "
                        f"{(got[k] - v).abs().max().item():.2e}")
    losses = [step(model, opt, SAVED_AT + i) for i in range(AFTER)]
    tol = 0.0 if n == ref["n"] else RESHARD_TOL
    d = [abs(a - b) / abs(b) for a, b in zip(losses, ref["losses"])]
    d += [((a - b).abs().max() / b.abs().max()).item()
          for a, b in zip(params(model), ref["params"])]
    if max(d) > tol:
        fail.append(f"{AFTER} steps after loading on {n} ranks differ from "
                    f"the un-checkpointed run by {max(d):.2e} relative "
                    f"(allowed {tol:.0e})")
    if dist.get_rank() == 0:
        print(f"load on {n} ranks (saved on {ref['n']}): {len(got)} tensors "
              f"equal; next {AFTER} steps' losses "
              f"{[round(x, 6) for x in losses]}, worst relative difference "
              f"{max(d):.1e}", flush=True)


def rank_main(phase, folder):
    import torch
    import torch.distributed as dist
    import sharc.torch  # noqa: F401  (registers "sharc")

    dist.init_process_group("sharc")
    rank = dist.get_rank()
    ckpt = os.path.join(folder, "ckpt")
    ref_file = os.path.join(folder, "ref.pt")
    fail = []
    if phase == "save":
        ref = save(ckpt)
        if rank == 0:
            torch.save(ref, ref_file)
    else:
        ref = torch.load(ref_file)
    load(ckpt, ref, fail)
    dist.destroy_process_group()
    for f in fail[:10]:
        print(f"rank {rank}: FAIL {phase}: {f}", flush=True)
    print(f"rank {rank}: torch_dcp_check {phase} "
          f"{'FAILED' if fail else 'passed'}", flush=True)
    sys.exit(1 if fail else 0)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    folder = tempfile.mkdtemp(prefix="sharc-dcp-")
    rc = 0
    try:
        for phase, ranks in (("save", n), ("load", n // 2)):
            if ranks < 1:
                continue
            print(f"torch_dcp_check: {phase} on {ranks} ranks", flush=True)
            rc = subprocess.call(
                [sys.executable, "-m", "torch.distributed.run", "--standalone",
                 "--nproc-per-node", str(ranks), os.path.abspath(__file__),
                 "--rank", phase, folder])
            if rc:
                print(f"torch_dcp_check: {phase} on {ranks} ranks failed "
                      f"(exit {rc})", flush=True)
                break
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"torch_dcp_check {'FAILED' if rc else 'passed'}", flush=True)
    sys.exit(1 if rc else 0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(sys.argv[2], sys.argv[3])
    else:
        main()

#!/usr/bin/env python3
"""fsdp2_cnn.py - PyTorch FSDP2 (fully_shard) trains the tutorial CNN on
Fashion-MNIST over any torch.distributed backend: sharc (import sharc.torch)
or gloo, from the same start, so the two can be compared run for run.

    pip install ./python            # once, into the venv that has torch
    torchrun --standalone --nproc-per-node 4 docs/examples/fsdp2_cnn.py \
        --backend sharc --epochs 2

The network is sharc's reference CNN (models/cnn.h, PyTorch's
examples/mnist net): conv 3x3 1->32, ReLU, conv 3x3 32->64, ReLU, max-pool
2, dropout 0.25, fc 9216->128, ReLU, dropout 0.5, fc 128->10,
log-softmax, NLL loss. AdamW (lr 1e-3), global batch 64 split evenly over
the ranks, images normalised with the training set's mean and deviation
(0.2860, 0.3530), the data read from the Debian package
dataset-fashion-mnist (/usr/share/datasets/fashion-mnist; --data DIR
elsewhere). fully_shard wraps each layer with parameters, then the root.

Rank 0 prints one line per epoch (seconds, mean loss) and at the end the
test accuracy on the 10k test images, the seconds per epoch and the peak
RSS of every rank; --json FILE writes the same.
"""

import argparse
import gzip
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big")
            for i in range(ndim)]
    data = torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8)
    return data.view(*dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = (x.float() / 255.0 - MEAN) / STD
    return x.unsqueeze(1).contiguous(), y.long()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.dropout(x, 0.25, self.training).flatten(1)
        x = F.dropout(F.relu(self.fc1(x)), 0.5, self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="sharc", help="sharc or gloo")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64, help="global batch")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0,
                    help="stop each epoch after this many steps (0: all)")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    if args.backend == "sharc":
        import sharc.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        sys.exit(f"--batch {args.batch} is not a multiple of {world} ranks")
    # the ranks of this host share its cores
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    from torch.distributed.fsdp import fully_shard

    xtr, ytr = load(args.data, "train")
    xte, yte = load(args.data, "test")
    torch.manual_seed(args.seed)
    model = Net()
    for layer in (model.conv1, model.conv2, model.fc1, model.fc2):
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    per = args.batch // world
    steps = len(xtr) // args.batch
    if args.steps:
        steps = min(steps, args.steps)
    epoch_s = []
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        perm = torch.randperm(len(xtr), generator=g)
        model.train()
        t0 = time.perf_counter()
        total = torch.zeros(1, dtype=torch.float64)
        for s in range(steps):
            idx = perm[s * args.batch + rank * per:s * args.batch +
                       (rank + 1) * per]
            loss = F.nll_loss(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach().double()
        dist.all_reduce(total)
        epoch_s.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"epoch {epoch + 1}: {epoch_s[-1]:.1f} s, mean loss "
                  f"{total.item() / steps / world:.4f}", flush=True)

    model.eval()
    correct = torch.zeros(1, dtype=torch.int64)
    lo, hi = rank * len(xte) // world, (rank + 1) * len(xte) // world
    with torch.no_grad():
        for i in range(lo, hi, 500):
            j = min(i + 500, hi)
            correct += (model(xte[i:j]).argmax(1) == yte[i:j]).sum()
    dist.all_reduce(correct)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss],
                       dtype=torch.int64)  # KiB
    all_rss = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(all_rss, rss)
    acc = correct.item() / len(xte)
    if rank == 0:
        out = {"backend": args.backend, "ranks": world, "epochs": args.epochs,
               "steps_per_epoch": steps, "test_accuracy": acc,
               "epoch_s": epoch_s,
               "peak_rss_mib": [r.item() / 1024 for r in all_rss]}
        print(f"{args.backend}, {world} ranks: test accuracy {acc:.4f}, "
              f"{sum(epoch_s) / len(epoch_s):.1f} s per epoch, peak RSS "
              f"{max(out['peak_rss_mib']):.0f} MiB per rank", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

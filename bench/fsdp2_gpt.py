#!/usr/bin/env python3
"""fsdp2_gpt.py - sharc's GPT (models/gpt.h) trained with PyTorch FSDP2, as
the baseline that sharc-train's GPU numbers are set against.

Run it under torchrun (NCCL on CUDA, local rank r on cuda:r % GPUs):

    torchrun --nproc_per_node 2 bench/fsdp2_gpt.py --preset gpt2 \
        --data tests/shard/corpus.txt --batch 8 --steps 12 --mp bf16 \
        --json fsdp2_n2.json

or plainly, as one process (a 1-rank group over a FileStore). Without CUDA
(or with --device cpu) it runs on the CPU with gloo: that tests this
script, not anyone's speed; --device cuda fails (exit 2) rather than fall
back to the CPU on a machine whose torch cannot use its GPU.

--backend gloo|sharc picks the CPU backend (and implies the CPU): sharc is
sharc's torch.distributed backend (python/sharc, `import sharc.torch`),
which needs SHARC_LIBRARY (or a build*/libsharc.so beside the package) and
python/ on PYTHONPATH. The same seed gives both backends the same
parameters and windows, so their losses can be set side by side
(bench/pytorch_gpt.sh). --layers, --context and --vocab replace the
preset's L, T and V, for GPT-2's width with a few layers and a short
context on a CPU (byte tokens need only V 256; GPT-2's 50257 makes the
tied head and wte most of the work).

What it trains is sharc's network, tensor for tensor: byte tokens, token
and learned position embeddings wte (V,C) and wpe (T,C), L pre-norm blocks
(LayerNorm eps 1e-5, a fused qkv Linear (3C,C) with bias, causal multi-head
attention, an output projection, an MLP of 4C with GELU's tanh form), a
final LayerNorm and an output head tied to wte, with the mean token
cross-entropy as the loss; GPT-2's initialisation (N(0, 0.02), the two
residual projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm gains 1);
AdamW with sharc-train's defaults (betas 0.9/0.999, eps 1e-8, wd 0; no
decay on biases and LayerNorm parameters). The parameter count is checked
against gpt.c's tensor list, name by name. FSDP2: fully_shard on every
block, then on the root (wte, wpe, lnf: sharc's unit 0).

It measures tokens per second over the steps after --warmup (the device
synchronised at both ends), peak memory per rank (torch.cuda's
max_memory_allocated over the whole run; on the CPU the process's peak
RSS, which is not comparable to anything) and the loss of every step.
Rank 0 prints a summary line and writes --json.

What differs from sharc: the random parameters (torch's generator, not
sharc's) and the windows (random windows of T+1 bytes of the first 90% of
the text, as sharc-train's default --holdout 0.1 keeps, but drawn by
torch's generator); attention is F.scaled_dot_product_attention (a fused
kernel that never stores the (n,H,T,T) weights sharc keeps); under --mp
bf16 the loss is taken on f32 logits, the rest in bf16 as FSDP2 casts it.

Exit status: 0 done, 2 bad arguments or data, 77 ("SKIP: ...") when torch
cannot be imported, 1 anything else.
"""
import argparse
import atexit
import json
import math
import os
import resource
import sys
import tempfile
import time

PRESETS = {  # name: (V, T, L, H, C), as gpt_config_preset
    "tiny": (256, 16, 2, 2, 32),
    "small": (256, 64, 4, 4, 128),
    "gpt2": (50257, 1024, 12, 12, 768),
}


def sharc_param_shapes(V, T, L, C):
    """The tensors of gpt.c's describe(), as {our name: shape}."""
    shapes = {"wte": (V, C), "wpe": (T, C), "lnf.weight": (C,), "lnf.bias": (C,)}
    for l in range(L):
        b = f"blocks.{l}."
        shapes |= {
            b + "ln1.weight": (C,), b + "ln1.bias": (C,),
            b + "attn.qkv.weight": (3 * C, C), b + "attn.qkv.bias": (3 * C,),
            b + "attn.proj.weight": (C, C), b + "attn.proj.bias": (C,),
            b + "ln2.weight": (C,), b + "ln2.bias": (C,),
            b + "mlp.fc.weight": (4 * C, C), b + "mlp.fc.bias": (4 * C,),
            b + "mlp.proj.weight": (C, 4 * C), b + "mlp.proj.bias": (C,),
        }
    return shapes


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--data", required=True, help="any text file (byte tokens)")
    p.add_argument("--batch", type=int, default=8, help="global sequences a step")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the timing")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--wd", type=float, default=0.0)
    p.add_argument("--mp", choices=["bf16", "off"], default="off")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                   help="auto: CUDA when torch sees a GPU; cuda: fail without one")
    p.add_argument("--backend", choices=["gloo", "sharc"],
                   help="CPU backend (implies --device cpu); default: nccl on "
                        "CUDA, else gloo")
    p.add_argument("--layers", type=int, help="blocks L (default: the preset's)")
    p.add_argument("--context", type=int, help="context T (default: the preset's)")
    p.add_argument("--vocab", type=int,
                   help="vocabulary V, >= 256 (default: the preset's); byte "
                        "tokens use only the first 256 rows of wte")
    p.add_argument("--json", help="rank 0 writes the results here")
    p.add_argument("--log-every", type=int, default=0,
                   help="rank 0 prints its loss every N steps (0: never)")
    a = p.parse_args(argv)
    if a.batch < 1 or a.steps < 1 or a.warmup < 0 or not a.lr > 0 or a.wd < 0:
        p.error("--batch and --steps must be >= 1, --warmup >= 0, --lr > 0, --wd >= 0")
    if (a.layers is not None and a.layers < 1) or (a.context is not None and a.context < 1):
        p.error("--layers and --context must be >= 1")
    if a.log_every < 0:
        p.error("--log-every must be >= 0")
    if a.vocab is not None and a.vocab < 256:
        p.error(f"--vocab {a.vocab}: byte tokens need at least 256")
    if a.backend and a.device == "cuda":
        p.error(f"--backend {a.backend} runs on the CPU; leave it out for nccl "
                "on CUDA, or pass --device cpu")
    if a.backend:
        a.device = "cpu"
    if a.steps <= a.warmup:  # a smoke run: time the last step, and say so
        if os.environ.get("RANK", "0") == "0":
            setup = "; that includes the first step's setup" if a.steps == 1 else ""
            print(f"fsdp2_gpt: --warmup {a.warmup} leaves none of --steps {a.steps} "
                  f"to time: timing the last step only (warmup {a.steps - 1}{setup})")
        a.warmup = a.steps - 1
    if not os.path.isfile(a.data):
        p.error(f"--data {a.data}: no such file")
    return a


def build_model(torch, V, T, L, H, C):
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)

        def forward(self, x):  # x (n,T,C)
            n, t, _ = x.shape
            # q, k, v side by side on the last axis; head h at h*hs of each
            q, k, v = (z.view(n, t, H, C // H).transpose(1, 2)
                       for z in self.qkv(x).split(C, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(n, t, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(C, 4 * C)
            self.proj = nn.Linear(4 * C, C)

        def forward(self, x):
            return self.proj(F.gelu(self.fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Parameter(torch.empty(V, C))
            self.wpe = nn.Parameter(torch.empty(T, C))
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C, eps=1e-5)
            for name, prm in self.named_parameters():
                if name.endswith("proj.weight"):  # into the residual stream
                    nn.init.normal_(prm, 0.0, 0.02 / math.sqrt(2 * L))
                elif prm.dim() == 2:
                    nn.init.normal_(prm, 0.0, 0.02)
                elif name.endswith("bias"):
                    nn.init.zeros_(prm)
                else:
                    nn.init.ones_(prm)

        def forward(self, x, y):  # x, y (n,T) int64
            h = F.embedding(x, self.wte) + self.wpe[: x.shape[1]]
            for blk in self.blocks:
                h = blk(h)
            logits = self.lnf(h) @ self.wte.t()  # (n,T,V), the tied head
            return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    return GPT()


def main(argv):
    args = parse_args(argv)  # before torch: bad arguments exit 2 anywhere
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # noqa: BLE001 - any failure means no torch here
        print(f"SKIP: fsdp2_gpt: torch is not importable by {sys.executable} "
              f"({e}); pip install torch to run the FSDP2 baseline")
        return 77
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch 2.4 and 2.5 kept FSDP2 here
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

    if args.backend == "sharc":
        try:
            import sharc.torch  # noqa: F401  (registers the "sharc" backend)
        except Exception as e:  # noqa: BLE001 - ImportError, OSError from ctypes
            print(f"fsdp2_gpt: --backend sharc: cannot import sharc.torch ({e}); "
                  "put python/ on PYTHONPATH (PYTHONPATH=$PWD/python) and point "
                  "SHARC_LIBRARY at a built libsharc.so "
                  f"(now {os.environ.get('SHARC_LIBRARY', 'unset')})", file=sys.stderr)
            return 2

    V, T, L, H, C = PRESETS[args.preset]
    T = args.context or T
    L = args.layers or L
    V = args.vocab or V
    with open(args.data, "rb") as f:
        text = f.read()
    held = max(int(len(text) * 0.1), T + 1)  # sharc-train's --holdout 0.1
    if len(text) < held + T + 1:
        print(f"fsdp2_gpt: --data {args.data} has {len(text)} bytes, too short to "
              f"hold out 10% and keep a window of {T + 1} bytes on each side; use "
              "a longer file or a smaller preset", file=sys.stderr)
        return 2

    cuda = args.device != "cpu" and torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        print(f"fsdp2_gpt: --device cuda, but torch {torch.__version__} (CUDA "
              f"{torch.version.cuda}) sees no usable GPU; check the driver against "
              "that CUDA, or pass --device cpu", file=sys.stderr)
        return 2
    if "RANK" in os.environ:  # torchrun's env:// rendezvous
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        store = None
    else:
        rank, world, local = 0, 1, 0
        fd, path = tempfile.mkstemp(prefix="fsdp2_gpt_store.")
        os.close(fd)
        atexit.register(os.unlink, path)
        store = dist.FileStore(path, 1)
    if args.batch % world:
        if rank == 0:
            print(f"fsdp2_gpt: --batch {args.batch} is not divisible by {world} "
                  "ranks; pass a multiple of the world size", file=sys.stderr)
        return 2
    if cuda:
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = "nccl" if cuda else (args.backend or "gloo")
    kw = {"store": store, "rank": 0, "world_size": 1} if store else {}
    dist.init_process_group(backend, **kw)
    if rank == 0 and not cuda and not args.backend:
        why = "--device cpu" if args.device == "cpu" else "no CUDA device"
        print(f"fsdp2_gpt: {why}: running on the CPU with gloo, to test this "
              "script only (its speed and memory mean nothing)")

    torch.manual_seed(args.seed)  # the same parameters on every rank
    model = build_model(torch, V, T, L, H, C)
    want = sharc_param_shapes(V, T, L, C)
    have = {n: tuple(p.shape) for n, p in model.named_parameters()}
    if have != want:
        print(f"fsdp2_gpt: parameters differ from gpt.c's: {sorted(set(have.items()) ^ set(want.items()))}",
              file=sys.stderr)
        return 1
    nparams = sum(p.numel() for p in model.parameters())
    sharc_count = sum(math.prod(s) for s in want.values())
    assert nparams == sharc_count, (nparams, sharc_count)
    if rank == 0:
        print(f"fsdp2_gpt: {args.preset} (V {V}, T {T}, L {L}, H {H}, C {C}) on {backend}: "
              f"{nparams:,} parameters (gpt.c's count: {sharc_count:,})")

    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    model.to(device)
    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if args.mp == "bf16" else MixedPrecisionPolicy())
    for blk in model.blocks:
        fully_shard(blk, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.999), eps=1e-8)

    data = torch.frombuffer(bytearray(text[: len(text) - held]), dtype=torch.uint8)
    starts = len(data) - T  # windows of T+1 bytes lie in the training text
    per = args.batch // world
    offs = torch.arange(T + 1)
    gen = torch.Generator().manual_seed(args.seed)
    losses = []
    t0 = tstart = time.perf_counter()
    for step in range(args.steps):
        # the global batch is drawn alike on every rank; each takes its part
        at = torch.randint(starts, (args.batch,), generator=gen)[rank * per:(rank + 1) * per]
        win = data[at[:, None] + offs].long().to(device, non_blocking=True)
        if step == args.warmup:
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
        loss = model(win[:, :-1], win[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if args.log_every and rank == 0 and (step + 1) % args.log_every == 0:
            print(f"step {step + 1}/{args.steps}: rank 0 loss {loss.item():.6f}, "
                  f"{time.perf_counter() - tstart:.1f} s", flush=True)
    if cuda:
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - t0
    tokens_per_s = (args.steps - args.warmup) * args.batch * T / elapsed

    # the global loss of each step (equal parts: the mean of the ranks')
    lv = torch.stack(losses).float()
    dist.all_reduce(lv)
    lv = (lv / world).tolist()
    if cuda:
        peak = torch.cuda.max_memory_allocated(device)
        peak_kind = "torch.cuda.max_memory_allocated"
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        peak_kind = ("cpu ru_maxrss (process peak RSS)" if args.backend else
                     "cpu ru_maxrss (process peak RSS; not comparable)")
    peaks = torch.zeros(world, dtype=torch.int64, device=device)
    peaks[rank] = peak
    dist.all_reduce(peaks)
    peaks = peaks.tolist()

    if rank == 0:
        nccl = None
        if cuda and hasattr(torch.cuda, "nccl"):
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        res = {
            "framework": "pytorch-fsdp2", "torch": torch.__version__, "nccl": nccl,
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "backend": backend, "ranks": world, "preset": args.preset,
            "V": V, "T": T, "L": L, "H": H, "C": C, "seed": args.seed,
            "params": nparams, "mp": args.mp, "batch": args.batch,
            "steps": args.steps, "warmup": args.warmup, "lr": args.lr,
            "tokens_per_s": tokens_per_s, "timed_s": elapsed,
            "peak_bytes_per_rank": max(peaks), "peak_bytes_by_rank": peaks,
            "peak_kind": peak_kind, "losses": lv,
        }
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
                f.write("\n")
        print(f"fsdp2_gpt: {res['device']} {backend} x{world} {args.preset} "
              f"(T {T}, L {L}) mp {args.mp} "
              f"batch {args.batch}: {tokens_per_s:.0f} tokens/s over "
              f"{args.steps - args.warmup} steps, peak {max(peaks) / 2**20:.1f} MiB/rank "
              f"({peak_kind}), loss {lv[0]:.4f} -> {lv[-1]:.4f}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

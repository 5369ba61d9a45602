"""A rank killed during collectives through the PyTorch backend: every
survivor's wait() raises sharc.SharcError naming the dead rank, within
seconds, instead of hanging.

    python tests/python/torch_kill_check.py [N]     (default 3 ranks)

Launches N ranks itself (env:// rendezvous on a free loopback port; not
torchrun, whose agent would stop the survivors as soon as one rank dies).
Rank 1 kills itself (SIGKILL) after 20 all-reduces; the others keep
calling all_reduce (async_op=True and blocking in turn) and must fail with
an error whose message names rank 1, in under 10 s. Exit 0 when they all did.
"""

import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def rank_main():
    import torch
    import torch.distributed as dist

    import sharc
    import sharc.torch  # noqa: F401

    dist.init_process_group("sharc")
    rank = dist.get_rank()
    x = torch.ones(1 << 16)
    t_dead = None
    for i in range(100000):
        if rank == 1 and i == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        try:  # async (the waiter thread) and blocking calls in turn
            if i % 2:
                dist.all_reduce(x)
            else:
                dist.all_reduce(x, async_op=True).wait()
        except Exception as e:  # noqa: BLE001  (what wait() raises)
            took = time.monotonic() - (t_dead or time.monotonic())
            ok = isinstance(e, sharc.SharcError) and "rank 1" in str(e)
            print(f"rank {rank}: {'OK' if ok else 'WRONG'} after call {i}: "
                  f"{type(e).__name__}: {e}", flush=True)
            os._exit(0 if ok and took < 10 else 1)
        if i == 19:
            t_dead = time.monotonic()
    print(f"rank {rank}: no error in 100000 calls", flush=True)
    os._exit(1)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n),
                   LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), SHARC_TIMEOUT="30",
                   TORCH_KILL_CHECK_RANK="1")
        procs.append(subprocess.Popen([sys.executable, __file__], env=env))
    bad = 0
    for r, p in enumerate(procs):
        try:
            rc = p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "hung"
        want = -signal.SIGKILL if r == 1 else 0
        if rc != want:
            print(f"torch_kill_check: rank {r} ended with {rc}, want {want}")
            bad += 1
    print(f"torch_kill_check: {'FAILED' if bad else 'passed'} ({n} ranks)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    if os.environ.get("TORCH_KILL_CHECK_RANK"):
        rank_main()
    else:
        main()

"""A tiny distributed training run: an MLP on synthetic data with torch DDP.

Runs unchanged under workbench, Kubeflow's PyTorchJob, torchrun, or alone (world of one).
gloo on CPU, NCCL when each process has a GPU. Prints the loss every step and, at the end,
a checksum of the parameters so ranks can be compared.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time


def say(text: str) -> None:
    """Print one line in one write: under torchrun several ranks share a worker's output,
    and print() (text, then "\\n" as a second write when stdout is unbuffered) lets their
    lines run together."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="steps per epoch")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--save", help="save the final state_dict here (rank 0)")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workbench import run  # a no-op outside a workbench job

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available()
    if world > 1:
        dist.init_process_group("nccl" if use_cuda else "gloo")
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)  # identical initial weights on every rank
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    ).to(device)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None) if world > 1 else model
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    true_w = torch.linspace(-1, 1, 16, device=device)
    gen = torch.Generator(device="cpu").manual_seed(1000 + rank)  # a different shard per rank

    total = args.epochs * args.steps
    start = time.time()
    for step in range(1, total + 1):
        x = torch.randn(args.batch, 16, generator=gen).to(device)
        y = (x @ true_w).unsqueeze(1) + 0.01 * torch.randn(args.batch, 1, generator=gen).to(device)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        say(
            f"rank {rank} step {step}/{total} epoch {(step - 1) // args.steps + 1} loss {loss.item():.6f}"
        )
        run.log(step=step, total=total, loss=loss.item())  # rank 0's curve in the job widget

    flat = torch.cat([p.detach().cpu().flatten() for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]
    say(f"rank {rank} done in {time.time() - start:.2f}s world {world} params {digest}")
    if args.save and rank == 0:
        torch.save(model.state_dict(), args.save)
    if world > 1:
        dist.barrier()  # every rank finished its collectives before anyone tears gloo down
        dist.destroy_process_group()
        # gloo's worker threads may still hold tensors whose release during interpreter
        # finalization aborts the process ("terminate called without an active exception",
        # SIGABRT; ~1 run in 8 on a loaded 2-core machine, under torchrun as under
        # workbench). Flush what we report and leave without finalization.
        run.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()

"""Stand-in for /opt/pytorch-mnist/mnist.py of docker.io/kubeflowkatib/pytorch-mnist (not
pullable here): the same command line (--epochs, --backend) and the same distributed set-up
(env:// from what the training-operator sets), a tiny model on synthetic MNIST-shaped data
instead of the download. Prints the operator's variables so a test can compare them."""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser(description="PyTorch MNIST (workbench test stand-in)")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--backend", default=dist.Backend.GLOO)
args = parser.parse_args()

names = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_NPROC_PER_NODE",
    "PYTHONUNBUFFERED",
)
print("operator env " + json.dumps({k: os.environ.get(k) for k in names}, sort_keys=True))
distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
if distributed:
    dist.init_process_group(backend=args.backend)  # env://, as the katib image does
torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 32), nn.ReLU(), nn.Linear(32, 10))
if distributed:
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(256, 1, 28, 28), torch.randint(0, 10, (256,))
for epoch in range(1, args.epochs + 1):
    for i in range(0, 256, 64):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
        loss.backward()
        opt.step()
    print(f"Train Epoch: {epoch} loss={loss.item():.4f}")
rank = dist.get_rank() if distributed else 0
size = dist.get_world_size() if distributed else 1
print(f"rank {rank} of {size} done")
if distributed:
    dist.destroy_process_group()

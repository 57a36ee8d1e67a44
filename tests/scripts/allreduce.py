"""All-reduce each rank's (RANK + 1) and print what every process saw."""

import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
# One write per line: processes of a worker share its log, and print() would write the
# text and the newline separately (unbuffered), letting lines of two processes interleave.
sys.stdout.write(
    f"allreduce rank={dist.get_rank()} world={dist.get_world_size()} sum={t.item():g} "
    f"local_rank={os.environ.get('LOCAL_RANK')} node={os.environ.get('WORKBENCH_RANK')}\n"
)
sys.stdout.flush()
dist.barrier()
dist.destroy_process_group()
os._exit(0)  # skip interpreter finalization: see workbench/examples/train_ddp.py

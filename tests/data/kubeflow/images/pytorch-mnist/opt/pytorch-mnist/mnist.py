"""Stand-in for /opt/pytorch-mnist/mnist.py of docker.io/kubeflowkatib/pytorch-mnist (not
pullable here): the same command line (--epochs, --backend) and the same distributed
set-up the katib script makes with env:// (rank 0 listens on MASTER_ADDR:MASTER_PORT, every
rank of WORLD_SIZE meets it there), done with plain sockets instead of torch so the test
stays fast (the elastic echo example runs real torch). Prints the variables the
training-operator sets so a test can compare them."""

import argparse
import json
import os
import socket
import time

parser = argparse.ArgumentParser(description="PyTorch MNIST (workbench test stand-in)")
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--backend", default="gloo")
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
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
if rank == 0:  # the rendezvous env:// makes: the master gathers every rank
    with socket.create_server(master) as server:
        seen = [0]
        for _ in range(world - 1):
            conn, _ = server.accept()
            with conn:
                seen.append(int(conn.recv(16)))
                conn.sendall(b"ok")
    assert sorted(seen) == list(range(world)), seen
else:
    for _ in range(600):
        try:
            with socket.create_connection(master, timeout=5) as conn:
                conn.sendall(str(rank).encode())
                assert conn.recv(2) == b"ok"
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    else:
        raise SystemExit(f"rank {rank}: master {master} never answered")
for epoch in range(1, args.epochs + 1):
    print(f"Train Epoch: {epoch} loss={2.3 / epoch:.4f}")
print(f"rank {rank} of {world} done")

"""The distributed environment contract every backend gives every worker.

One function per framework, so a local process, a container and a Kubernetes pod see the
same variables, and a script written for Kubeflow's PyTorchJob/TFJob/MPIJob runs unchanged:

* pytorch: MASTER_ADDR, MASTER_PORT, WORLD_SIZE (= workers x procs per worker), RANK (the
  worker's index, as Kubeflow sets it), LOCAL_RANK, and PET_NNODES, PET_NODE_RANK,
  PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT, PET_RDZV_ENDPOINT, which torchrun
  reads as defaults for its flags, so a bare ``torchrun train.py`` forms the whole world
  (with the static or the c10d rendezvous).
* tensorflow: TF_CONFIG with the worker list and this task's index.
* mpi: an OpenMPI/MPICH hostfile with one line per worker and ``slots`` = procs.
* every framework: WORKBENCH_JOB_NAME, WORKBENCH_RANK, WORKBENCH_WORLD_SIZE,
  WORKBENCH_ATTEMPT, and WORKBENCH_JOB_DIR where the backend has one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class World:
    """Where the workers of one job live and how they meet."""

    workers: int
    procs_per_worker: int
    master_addr: str
    master_port: int
    # One address per worker (all the same host locally; pod DNS names on a cluster).
    hosts: tuple[str, ...]
    # One port per worker for frameworks that need a listener on each (TensorFlow).
    ports: tuple[int, ...]

    @property
    def world_size(self) -> int:
        """Processes across the job."""
        return self.workers * self.procs_per_worker


def pytorch_env(world: World, node_rank: int) -> dict[str, str]:
    """PyTorchJob-compatible variables for worker ``node_rank``."""
    return {
        "MASTER_ADDR": world.master_addr,
        "MASTER_PORT": str(world.master_port),
        "WORLD_SIZE": str(world.world_size),
        "RANK": str(node_rank),
        "LOCAL_RANK": "0",
        "PET_NNODES": str(world.workers),
        "PET_NODE_RANK": str(node_rank),
        "PET_NPROC_PER_NODE": str(world.procs_per_worker),
        "PET_MASTER_ADDR": world.master_addr,
        "PET_MASTER_PORT": str(world.master_port),
        # torchrun's --rdzv-endpoint default: `--rdzv-backend=c10d` (Kubeflow's elastic
        # jobs) meets where the static rendezvous does, never on a fixed port 29400.
        "PET_RDZV_ENDPOINT": f"{world.master_addr}:{world.master_port}",
    }


def pytorch_process_env(world: World, node_rank: int, local_rank: int) -> dict[str, str]:
    """What torchrun would give process ``local_rank`` of a worker (used when the
    command has no launcher of its own but a worker runs several processes)."""
    env = pytorch_env(world, node_rank)
    env.update(
        {
            "RANK": str(node_rank * world.procs_per_worker + local_rank),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(world.procs_per_worker),
            "GROUP_RANK": str(node_rank),
        }
    )
    return env


def tensorflow_env(world: World, node_rank: int) -> dict[str, str]:
    """TFJob-compatible TF_CONFIG for worker ``node_rank`` (worker 0 acts as chief)."""
    cluster = {"worker": [f"{h}:{p}" for h, p in zip(world.hosts, world.ports, strict=True)]}
    config = {
        "cluster": cluster,
        "task": {"type": "worker", "index": node_rank},
        "environment": "cloud",
    }
    return {"TF_CONFIG": json.dumps(config, separators=(",", ":"))}


def mpi_hostfile(world: World) -> str:
    """An MPI hostfile: one line per distinct host with its slots."""
    slots: dict[str, int] = {}
    for host in world.hosts:
        slots[host] = slots.get(host, 0) + world.procs_per_worker
    return "".join(f"{host} slots={n}\n" for host, n in slots.items())


def mpi_env(world: World, node_rank: int, hostfile: str) -> dict[str, str]:
    """Variables that point OpenMPI and MPICH at the hostfile (as MPIJob's launcher gets)."""
    return {
        "OMPI_MCA_orte_default_hostfile": hostfile,
        "OMPI_MCA_rmaps_base_oversubscribe": "true",
        "HYDRA_HOST_FILE": hostfile,
        "WORKBENCH_MPI_HOSTFILE": hostfile,
        "WORKBENCH_MPI_NP": str(world.world_size),
    }


def worker_env(
    framework: str,
    world: World,
    node_rank: int,
    job_name: str,
    attempt: int = 1,
    job_dir: str | None = None,
    hostfile: str | None = None,
) -> dict[str, str]:
    """Everything a worker gets from the contract, for ``framework``."""
    env = {
        "WORKBENCH_JOB_NAME": job_name,
        "WORKBENCH_RANK": str(node_rank),
        "WORKBENCH_WORLD_SIZE": str(world.workers),
        "WORKBENCH_ATTEMPT": str(attempt),
    }
    if job_dir:
        env["WORKBENCH_JOB_DIR"] = job_dir
    if framework == "pytorch":
        env.update(pytorch_env(world, node_rank))
    elif framework == "tensorflow":
        env.update(tensorflow_env(world, node_rank))
    elif framework == "mpi":
        env.update(mpi_env(world, node_rank, hostfile or "/etc/mpi/hostfile"))
    return env

"""``python -m workbench.data.dask_job``: one rank of a Dask cluster that runs as a workbench
job (what ``preprocess(..., cluster=KubeDaskCluster(...))`` submits).

Rank 0 runs the Dask scheduler on the job's master port; every other rank runs a Dask
worker that finds the scheduler at ``MASTER_ADDR:MASTER_PORT`` (the env contract), the way
dask-mpi and dask-jobqueue start theirs. Each rank binds the interface that reaches the
master (its pod's address), never all interfaces.

How it ends: the client marks the work done on the scheduler (:func:`mark_done`) and shuts
it down; rank 0 then exits 0 and the workers, told to close, exit 0: the job Succeeds. A
scheduler that closes any other way (idle for ``--idle-timeout`` seconds: its client went
away) exits 1, and a worker that cannot reach the scheduler within ``--connect-timeout``
seconds exits 1: the job Fails instead of hanging.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

DONE = "_workbench_work_done"  # set on the scheduler object by the client, before shutdown
DASHBOARD_PORT = 8787


def mark_done(dask_scheduler: Any) -> None:
    """Run on the scheduler by the client (``client.run_on_scheduler``): the work is done,
    so the coming shutdown is a success."""
    setattr(dask_scheduler, DONE, True)


def _say(text: str) -> None:
    print(f"workbench: {text}", file=sys.stderr, flush=True)


async def _scheduler(host: str, port: int, idle_timeout: float) -> int:
    from distributed import Scheduler

    async with Scheduler(host=host, port=port, dashboard_address=f"{host}:{DASHBOARD_PORT}",
                         idle_timeout=idle_timeout) as scheduler:  # fmt: skip
        _say(f"dask scheduler listening at {scheduler.address}")
        await scheduler.finished()
    if getattr(scheduler, DONE, False):
        _say("the work is done: scheduler closed")
        return 0
    _say(f"the scheduler closed before its client finished (idle for {idle_timeout:g}s: "
         "the client went away?)")  # fmt: skip
    return 1


async def _worker(address: str, host: str, threads: int, connect_timeout: float) -> int:
    from distributed import Worker

    try:
        worker = Worker(address, host=host, nthreads=threads, death_timeout=connect_timeout)
        async with worker:
            _say(f"dask worker {worker.address} joined the scheduler at {address}")
            await worker.finished()
    except (TimeoutError, OSError) as e:
        _say(f"cannot reach the dask scheduler at {address} within {connect_timeout:g}s "
             f"({type(e).__name__})")  # fmt: skip
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run this pod's rank; returns the exit code."""
    p = argparse.ArgumentParser(prog="python -m workbench.data.dask_job")
    p.add_argument("--threads", type=int, default=1, help="threads per worker")
    p.add_argument("--idle-timeout", type=float, default=300.0,
                   help="seconds the scheduler waits with no work before it gives up")  # fmt: skip
    p.add_argument("--connect-timeout", type=float, default=600.0,
                   help="seconds a worker tries to reach the scheduler")  # fmt: skip
    ns = p.parse_args(argv)
    master, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not master or not port:
        _say("MASTER_ADDR and MASTER_PORT are not set: run this as a workbench job")
        return 2
    rank = int(os.environ.get("WORKBENCH_RANK") or os.environ.get("RANK") or 0)
    from distributed.utils import get_ip

    # The interface that reaches the master: the pod's own address on a cluster (the
    # master's name is this pod's on rank 0), loopback where the master is local.
    host = get_ip(master)
    if rank == 0:
        return asyncio.run(_scheduler(host, int(port), ns.idle_timeout))
    return asyncio.run(_worker(f"tcp://{master}:{port}", host, ns.threads, ns.connect_timeout))


if __name__ == "__main__":
    sys.exit(main())

"""Where a KubernetesBackend.submit's time goes, per phase (issue 12, (e)): the submit
benchmark of bench_kubernetes.py (fake API server in another process), with each phase
timed in wall-clock and in the submitting thread's CPU, per job, warm-up left out.

    PYTHONPATH=$PWD .venv/bin/python bench/kube_submit_phases.py [--jobs 500]
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import time
from typing import Any

from bench import _kube_backend_bench as kb
from workbench.backends import _jobfiles
from workbench.backends.kubernetes import backend as kbackend
from workbench.backends.kubernetes import cluster as kcluster
from workbench.store import JobStore

TIMES: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])


def timed(owner: Any, attr: str, label: str) -> None:
    """Replace ``owner.attr`` with a wrapper adding its wall and thread CPU to TIMES."""
    inner = getattr(owner, attr)

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            entry = TIMES[label]
            entry[0] += time.perf_counter() - t0
            entry[1] += time.thread_time() - c0
            entry[2] += 1

    setattr(owner, attr, wrapper)


class _Clock:
    """The bench's ``time``, clearing TIMES at its one sleep (after the warm-up submit)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        TIMES.clear()


def main() -> None:
    """Run the submit benchmark with the phases timed; print one line per phase."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=500)
    n = ap.parse_args().jobs
    B, C = kbackend.KubernetesBackend, kcluster.Cluster
    for owner, attr, label in [
        (B, "admit", "admit (all)"), (kbackend, "render", "admit: render"),
        (kbackend.capacity, "check_gang", "admit: capacity check"),
        (B, "launch", "launch (all)"), (C, "_post", "launch: POST (the Job)"),
        (C, "own", "launch: PATCH a Secret's owner"),
        (_jobfiles.JobFiles, "write_spec", "launch: spec.yaml"),
        (JobStore, "insert", "launch: store INSERT"),
        (JobStore, "update", "launch: store update (uid, mark)"),
        (kbackend.NamespaceTracker, "_sync", "launch: tracker sync"),
        (B, "get", "launch: get()"),
    ]:  # fmt: skip
        timed(owner, attr, label)
    kb.time = _Clock()  # type: ignore[assignment]
    result = kb.bench_submit_apart(n, baseline=False)
    print(json.dumps({k: result[k] for k in ("jobs_per_second", "cpu_ms_per_job")}))
    for label, (wall, cpu, calls) in TIMES.items():
        print(f"{label:36s} wall {wall / n * 1000:6.2f} ms/job   "
              f"cpu {cpu / n * 1000:6.2f} ms/job   calls {int(calls)}")  # fmt: skip


if __name__ == "__main__":
    main()

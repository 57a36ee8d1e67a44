"""Placing workers on a host's GPUs: whole GPUs, or a share of one for fractional requests."""

from __future__ import annotations

EPS = 1e-9


def place(
    gpus_per_worker: float, workers: int, capacity: list[int], used: dict[int, float]
) -> list[list[int]] | None:
    """GPU indices for each worker, or None when the host cannot fit the job now.

    ``capacity`` lists the host's GPU indices (each worth 1.0); ``used`` maps an index to
    the share other jobs hold. Whole-GPU workers take free GPUs; a fractional worker takes
    the fullest GPU that still has room (packing keeps whole GPUs free for big jobs).
    """
    if gpus_per_worker <= 0:
        return [[] for _ in range(workers)]
    free = {i: 1.0 - used.get(i, 0.0) for i in capacity}
    out: list[list[int]] = []
    for _ in range(workers):
        if gpus_per_worker < 1:
            fits = [i for i in capacity if free[i] + EPS >= gpus_per_worker]
            if not fits:
                return None
            best = min(fits, key=lambda i: (free[i], i))
            free[best] -= gpus_per_worker
            out.append([best])
        else:
            whole = [i for i in capacity if free[i] >= 1.0 - EPS][: int(gpus_per_worker)]
            if len(whole) < int(gpus_per_worker):
                return None
            for i in whole:
                free[i] = 0.0
            out.append(whole)
    return out


def usage(allocations: list[tuple[float, list[list[int]]]]) -> dict[int, float]:
    """Sum the shares held per GPU index from (gpus_per_worker, per-worker indices) pairs."""
    used: dict[int, float] = {}
    for per_worker, workers in allocations:
        share = per_worker if per_worker < 1 else 1.0
        for indices in workers:
            for i in indices:
                used[i] = used.get(i, 0.0) + share
    return used

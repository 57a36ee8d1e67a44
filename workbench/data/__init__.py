"""Datasets: fsspec mounts for jobs, a prefetch cache, browsing and Dask preparation.

``ls/du/head`` browse a store; ``path`` maps a mount's DST to where it is inside a local job
(identity on a cluster); ``preprocess`` maps a function over shards on Dask, locally or on
the cluster as a job (``KubeDaskCluster``).
"""

from __future__ import annotations

from typing import Any

from .browse import Entry, du, head, ls
from .kube_dask import KubeDaskCluster
from .staging import path

__all__ = ["Entry", "KubeDaskCluster", "du", "head", "ls", "path", "preprocess"]


def preprocess(*args: Any, **kwargs: Any) -> Any:
    """Map ``fn(bytes) -> bytes`` over input shards on Dask (see workbench.data.preprocess)."""
    from .preprocess import preprocess as run

    return run(*args, **kwargs)

"""Datasets: fsspec mounts for jobs, a prefetch cache, browsing and Dask preparation.

``ls/du/head`` browse a store; ``path`` maps a mount's DST to where it is inside a local job
(identity on a cluster); ``preprocess`` maps a function over shards on Dask, locally or on
the cluster as a job (``KubeDaskCluster``).
"""

from __future__ import annotations

from .browse import Entry, du, head, ls
from .kube_dask import KubeDaskCluster

# Imported here, not inside a wrapper: the first import of the submodule would otherwise
# replace the package's ``preprocess`` with the module, and a second call would fail
# ("'module' object is not callable"). The module imports dask only when it runs.
from .preprocess import PreprocessResult, preprocess
from .staging import path

__all__ = ["Entry", "KubeDaskCluster", "PreprocessResult", "du", "head", "ls", "path", "preprocess"]

"""Notebook-surface fixtures: training scripts the tests run as real jobs."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._kernel import Kernel

SCALARS_SCRIPT = """
import os, sys, time
from workbench import run
n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
rank = os.environ.get("RANK", "0")
for i in range(1, n + 1):
    run.log(step=i, total=n, loss=1.0 / i, acc=i / n)
    print(f"rank {rank} line {i}", flush=True)
    time.sleep(pause)
print(f"rank {rank} finished", flush=True)
"""

FLAKY_SCRIPT = """
import os, sys
if os.environ["WORKBENCH_ATTEMPT"] == "1" and os.environ["RANK"] == "1":
    print("rank 1 fails on purpose", flush=True)
    sys.exit(3)
print(f"rank {os.environ['RANK']} ok on attempt {os.environ['WORKBENCH_ATTEMPT']}", flush=True)
"""


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    """A folder with small training scripts (scalars.py, flaky.py)."""
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "scalars.py").write_text(textwrap.dedent(SCALARS_SCRIPT))
    (folder / "flaky.py").write_text(textwrap.dedent(FLAKY_SCRIPT))
    return folder


@pytest.fixture
def kernel_env(tmp_path: Path) -> dict[str, str]:
    """Jupyter's and IPython's files for test kernels, kept out of $HOME."""
    env = {}
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        env[var] = str(tmp_path / var.lower())
    return env


@pytest.fixture
def kernel(manager: Any, tmp_path: Path, kernel_env: dict[str, str]) -> Iterator[Kernel]:
    """A real python3 kernel in a notebook folder (tmp_path/nb) with ``%load_ext workbench``."""
    folder = tmp_path / "nb"
    folder.mkdir()
    k = Kernel(folder, env=kernel_env)
    try:
        reply = k.run("%load_ext workbench")
        assert reply.status == "ok", reply.text
        yield k
    finally:
        k.stop()

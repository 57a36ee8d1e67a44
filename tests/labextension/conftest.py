"""The labextension's Node toolchain (jlpm from jupyterlab, node), installed once per run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LABEXT = ROOT / "labextension"


def jlpm() -> str:
    """jlpm beside this Python (jupyterlab ships it), or fail saying what to install."""
    for candidate in (Path(sys.executable).parent / "jlpm", shutil.which("jlpm")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.fail("the labextension tests need jlpm: pip install 'jupyterlab>=4.6'", pytrace=False)


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A command in labextension/, output captured."""
    return subprocess.run(
        args, cwd=LABEXT, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """labextension/node_modules as yarn.lock pins it (installed when missing)."""
    if shutil.which("node") is None:
        pytest.fail("the labextension tests need Node.js: apt-get install -y nodejs", pytrace=False)
    if not (LABEXT / "node_modules" / ".bin" / "vitest").exists():
        done = run(jlpm(), "install", "--immutable", timeout=600)
        assert done.returncode == 0, (
            f"jlpm install failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return LABEXT / "node_modules"

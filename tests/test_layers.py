"""The layer contracts in pyproject.toml ([tool.importlinter]) hold, and fail on a crossing.

``lint-imports`` runs for real: on this checkout (it must pass), and on a copy of the
package with one forbidden import added (it must fail, naming the crossing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Run import-linter's own CLI with this interpreter (the venv's lint-imports script).
LINT = [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"]


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` in ``root`` (its pyproject.toml) against the package under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}  # ahead of any installed workbench
    return subprocess.run(
        [*LINT, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the package and its pyproject.toml, to add a crossing to."""
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "labextension")
    shutil.copytree(REPO / "workbench", tmp_path / "workbench", ignore=ignore)
    return tmp_path


def add_line(root: Path, module: str, line: str) -> None:
    path = root / module
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f"\n{line}\n")


def banned(importer: str, imported: str) -> str:
    """How lint-imports words a layers violation between two of workbench's modules."""
    return f"workbench.{importer} is not allowed to import workbench.{imported}"


def test_the_package_keeps_every_contract() -> None:
    p = lint_imports(REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Contracts: 4 kept, 0 broken." in p.stdout, p.stdout


@pytest.mark.parametrize(
    ("module", "line", "said"),
    [
        # a core layer importing a notebook library
        ("workbench/store.py", "import ipywidgets", "workbench.store -> ipywidgets"),
        ("workbench/manager.py", "import tornado", "workbench.manager -> tornado"),
        # the four crossings of issue 11, put back
        ("workbench/monitor/__init__.py", "from .. import widgets", banned("monitor", "widgets")),
        ("workbench/widgets/_render.py", "from ..api import format_duration", banned("widgets", "api")),
        ("workbench/magics.py", "from .cli import main", banned("magics", "cli")),
        ("workbench/data/staging.py", "from ..backends import _supervisor", banned("data", "backends")),
        # a lower layer importing a higher one
        ("workbench/spec.py", "from . import store", banned("spec", "store")),
        # third-party clients outside their one home
        ("workbench/data/staging.py", "import pynvml", "workbench.data.staging -> pynvml"),
        ("workbench/manager.py", "import kubernetes", "workbench.manager -> kubernetes"),
        # every module sits in a layer, so a new one cannot skip the rules
        ("workbench/helpers.py", "X = 1", "workbench.helpers"),
    ],
)  # fmt: skip
def test_a_crossing_breaks_the_build(copy: Path, module: str, line: str, said: str) -> None:
    assert lint_imports(copy).returncode == 0  # the unchanged copy passes
    add_line(copy, module, line)
    p = lint_imports(copy)
    assert p.returncode != 0, p.stdout
    assert said in p.stdout, p.stdout


def test_the_kubernetes_backend_may_import_the_client(copy: Path) -> None:
    add_line(copy, "workbench/backends/kubernetes/__init__.py", "import kubernetes")
    add_line(copy, "workbench/backends/kubernetes/_watch.py", "import kubernetes.watch")
    p = lint_imports(copy)
    assert p.returncode == 0, p.stdout

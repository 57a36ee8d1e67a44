"""The wheel ships the prebuilt labextension and its settings schema: installed on its own
(into an empty venv), `jupyter labextension list` reports it enabled and OK, with no
`jupyter lab build`."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import LABEXT
from .wheel import EXT, built_wheel, installed_alone


@pytest.mark.slow
def test_wheel_installs_a_prebuilt_enabled_extension(node_modules: Path, tmp_path: Path) -> None:
    """Build the wheel (the hook builds labextension/ when its output is stale), check its
    files, install it alone into an empty venv, and ask JupyterLab about that venv's data."""
    before = _installed_here()
    wheel = built_wheel()
    names = zipfile.ZipFile(wheel).namelist()
    data = [n.split(".data/data/", 1)[1] for n in names if ".data/data/" in n]
    assert f"{EXT}/package.json" in data and f"{EXT}/install.json" in data, data
    assert any(re.fullmatch(rf"{EXT}/static/remoteEntry\.[0-9a-f]+\.js", n) for n in data), data
    assert not [n for n in names if "node_modules" in n or n.startswith("labextension/")]

    prefix = installed_alone()
    # The environment running the tests still has its own install of the package.
    assert _installed_here() == before
    meta = json.loads((prefix / EXT / "package.json").read_text())
    assert meta["name"] == "jupyter-gpu-workbench" and "_build" in meta["jupyterlab"]
    # The Settings Editor's schema ships where JupyterLab looks for it, as written.
    schema = prefix / EXT / "schemas" / "jupyter-gpu-workbench" / "plugin.json"
    assert json.loads(schema.read_text()) == json.loads(
        (LABEXT / "schema" / "plugin.json").read_text()
    )

    # Only the venv's share/jupyter (and the tmp dirs) on Jupyter's path: what the wheel
    # alone provides.
    bindir = Path(sys.executable).parent
    jenv = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_PLATFORM_DIRS": "0",
    }
    listed = subprocess.run(
        [sys.executable, "-m", "jupyterlab.labextensions", "list"],
        env=jenv, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout + listed.stderr)
    assert listed.returncode == 0, out
    # Listed under the wheel's venv (the section after its path), not the test environment's.
    where = str(prefix / "share" / "jupyter" / "labextensions")
    assert where in out, out
    section = out.split(where, 1)[1].split("\n\n", 1)[0]
    line = next((ln for ln in section.splitlines() if "jupyter-gpu-workbench" in ln), "")
    assert re.search(r"jupyter-gpu-workbench v0\.1\.0 enabled\s+OK", line), out
    assert "python, jupyter-gpu-workbench" in line, out


def _installed_here() -> str | None:
    """Where this environment's jupyter-gpu-workbench metadata lives (None: not installed)."""
    try:
        return str(importlib.metadata.distribution("jupyter-gpu-workbench")._path)  # type: ignore[attr-defined]
    except importlib.metadata.PackageNotFoundError:
        return None

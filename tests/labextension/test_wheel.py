"""The wheel ships the prebuilt labextension: installed on its own (into an empty venv),
`jupyter labextension list` reports it enabled and OK, with no `jupyter lab build`."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import ROOT

EXT = "share/jupyter/labextensions/jupyter-gpu-workbench"


@pytest.mark.slow
def test_wheel_installs_a_prebuilt_enabled_extension(node_modules: Path, tmp_path: Path) -> None:
    """Build the wheel (the hook builds labextension/ when its output is stale), check its
    files, install it alone into an empty venv, and ask JupyterLab about that venv's data."""
    # Offline when the build requirements are here (the test extra has them), else pip
    # fetches them into an isolated build environment.
    have_builder = all(importlib.util.find_spec(m) for m in ("hatchling", "hatch_jupyter_builder"))
    isolated = ["--no-build-isolation"] if have_builder else []
    before = _installed_here()
    dist = tmp_path / "dist"
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolated, "-w", str(dist), "."],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("jupyter_gpu_workbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    data = [n.split(".data/data/", 1)[1] for n in names if ".data/data/" in n]
    assert f"{EXT}/package.json" in data and f"{EXT}/install.json" in data, data
    assert any(re.fullmatch(rf"{EXT}/static/remoteEntry\.[0-9a-f]+\.js", n) for n in data), data
    assert not [n for n in names if "node_modules" in n or n.startswith("labextension/")]

    # A fresh, empty venv of its own: never pip-install into the running interpreter's
    # environment (pip --prefix there uninstalls that environment's copy of the package).
    venv = tmp_path / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    target = venv / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(target), "install", "-q", "--no-deps",
         str(wheel)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    prefix = venv
    # The environment running the tests still has its own install of the package.
    assert _installed_here() == before
    meta = json.loads((prefix / EXT / "package.json").read_text())
    assert meta["name"] == "jupyter-gpu-workbench" and "_build" in meta["jupyterlab"]

    # Only the venv's share/jupyter (and the tmp dirs) on Jupyter's path: what the wheel
    # alone provides.
    jenv = {
        **env,
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
    line = next((ln for ln in out.splitlines() if "jupyter-gpu-workbench" in ln), "")
    assert re.search(r"jupyter-gpu-workbench v0\.1\.0 enabled\s+OK", line), out
    assert "python, jupyter-gpu-workbench" in line, out


def _installed_here() -> str | None:
    """Where this environment's jupyter-gpu-workbench metadata lives (None: not installed)."""
    import importlib.metadata

    try:
        return str(importlib.metadata.distribution("jupyter-gpu-workbench")._path)  # type: ignore[attr-defined]
    except importlib.metadata.PackageNotFoundError:
        return None

"""The built wheel, shared by the wheel test and the browser tests: built once per test
session (the build hook runs jlpm when labextension/'s output is stale) and installed on its
own into an empty venv, whose share/jupyter then holds exactly what the wheel ships."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = "jupyter-gpu-workbench"
EXT = f"share/jupyter/labextensions/{EXTENSION}"


def _env() -> dict[str, str]:
    bindir = Path(sys.executable).parent  # jlpm and jupyter for the build hook
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


@functools.cache
def _session_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="workbench-wheel-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


BUILT = ROOT / "workbench" / "labextension"  # the build hook's output (git-ignored)
# What the build reads. The hook's staleness check watches one folder (labextension/src);
# a change to the styles, the settings schema or package.json alone would ship the old build.
INPUTS = ("src", "style", "schema", "package.json")


def _newest(path: Path) -> float:
    if path.is_file():
        return path.stat().st_mtime
    return max((f.stat().st_mtime for f in path.rglob("*") if f.is_file()), default=0.0)


def _drop_stale_build() -> None:
    """Remove the build when any input is newer (the hook's own test), so it builds again."""
    if not BUILT.exists():
        return
    labext = ROOT / "labextension"
    newest_input = max(_newest(labext / name) for name in INPUTS if (labext / name).exists())
    if newest_input > _newest(BUILT):
        shutil.rmtree(BUILT)


@functools.cache
def built_wheel() -> Path:
    """The project's wheel (pip wheel .), built once per session; AssertionError on failure."""
    _drop_stale_build()
    # Offline when the build requirements are here (the test extra has them), else pip
    # fetches them into an isolated build environment.
    have_builder = all(importlib.util.find_spec(m) for m in ("hatchling", "hatch_jupyter_builder"))
    isolated = ["--no-build-isolation"] if have_builder else []
    dist = _session_dir() / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolated, "-w", str(dist), "."],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("jupyter_gpu_workbench-*.whl")
    return wheel


@functools.cache
def installed_alone() -> Path:
    """A fresh, empty venv with only the wheel installed (no dependencies); its prefix.

    Never pip-install into the running interpreter's environment: pip --prefix there
    uninstalls that environment's copy of the package.
    """
    wheel = built_wheel()
    venv = _session_dir() / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
         "--no-deps", str(wheel)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv

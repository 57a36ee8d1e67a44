"""A real JupyterLab server and a real Chromium (Debian's, driven by Python Playwright).

Missing tools FAIL the tests with what to install (``make test`` installs them); they are
never skipped, so a machine without a browser cannot report the widget as checked.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # tests may run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
# Lab's news toast would cover the notebook in screenshots.
LAB_SETTINGS = {"@jupyterlab/apputils-extension/notification": {"fetchNews": "false"}}
START_TIMEOUT = 60.0


def chromium_path() -> str:
    """Debian's chromium (WORKBENCH_CHROMIUM overrides), or fail saying what to install."""
    for candidate in (
        os.environ.get("WORKBENCH_CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail(
        "the browser tests need Chromium: apt-get install -y chromium chromium-driver "
        "(or set WORKBENCH_CHROMIUM to a Chromium binary)",
        pytrace=False,
    )


def _require(module: str, hint: str) -> None:
    try:
        __import__(module)
    except ImportError:
        pytest.fail(f"the browser tests need {module}: {hint}", pytrace=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    """A running JupyterLab: where it serves, its token and the folder it serves."""

    url: str
    token: str
    root: Path
    process: subprocess.Popen[bytes]
    log: Path

    def open_url(self, path: str) -> str:
        """The URL that opens ``path`` (relative to root) in Lab, logged in by token."""
        return f"{self.url}/lab/tree/{path}?token={self.token}"

    def run_first_cells(self, page: Any, path: str) -> Any:
        """Open ``path``, run its first two cells (load the extension, then the magic) and
        return the second cell's locator."""
        page.goto(self.open_url(path))
        # The execution indicator says idle before the kernel connects; the status bar does not.
        page.locator(".jp-StatusBar-TextItem", has_text="Idle").first.wait_for(timeout=60_000)
        page.locator(".jp-Cell").nth(0).click()
        page.keyboard.press("Shift+Enter")
        page.keyboard.press("Shift+Enter")
        return page.locator(".jp-Cell").nth(1)

    def log_text(self) -> str:
        """The server's output so far (for failure messages)."""
        return self.log.read_text(errors="replace")[-4000:]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the server and whatever it started (kernels), by PID."""
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        children = []
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    for child in children:  # a kernel the server did not shut down in time
        try:
            child.kill()
        except psutil.Error:
            pass


@pytest.fixture
def jupyter_lab(tmp_path: Path, wb_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    """``jupyter lab`` on 127.0.0.1 and a free port, every Jupyter/IPython dir in tmp_path."""
    _require("jupyterlab", "pip install jupyterlab (it is in the `test` extra)")
    root = tmp_path / "root"
    root.mkdir()
    jupyter = tmp_path / "jupyter"
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        monkeypatch.setenv(var, str(jupyter / var.lower()))
    settings = jupyter / "lab-settings"
    for plugin, values in LAB_SETTINGS.items():
        path = settings / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    monkeypatch.setenv("JUPYTERLAB_SETTINGS_DIR", str(settings))
    monkeypatch.setenv("JUPYTERLAB_WORKSPACES_DIR", str(jupyter / "workspaces"))
    token, port = secrets.token_hex(16), _free_port()
    log = tmp_path / "jupyter-lab.log"
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}", "--LabApp.news_url=",
    ]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=root)
    lab = Lab(f"http://127.0.0.1:{port}", token, root, process, log)
    try:
        _wait_until_up(lab)
        yield lab
    finally:
        _stop(process)


def _wait_until_up(lab: Lab) -> None:
    deadline = time.time() + START_TIMEOUT
    while time.time() < deadline:
        if lab.process.poll() is not None:
            pytest.fail(f"jupyter lab exited with {lab.process.returncode}:\n{lab.log_text()}")
        try:
            with urllib.request.urlopen(f"{lab.url}/api/status?token={lab.token}", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    pytest.fail(f"jupyter lab did not answer in {START_TIMEOUT:.0f}s:\n{lab.log_text()}")


@pytest.fixture
def panel_extension(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The panel's labextension as the built wheel installs it: the wheel (built once per
    session) is installed alone into an empty venv, and that venv's share/jupyter goes first
    on JUPYTER_PATH for the lab the test starts after this (no copy of a build folder)."""
    from ..labextension.wheel import EXTENSION, installed_alone

    share = installed_alone() / "share" / "jupyter"
    monkeypatch.setenv("JUPYTER_PATH", str(share))
    return share / "labextensions" / EXTENSION


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    """A Playwright page in a fresh headless Chromium profile under tmp_path."""
    executable = chromium_path()
    _require(
        "playwright", "pip install playwright (no `playwright install`: Debian's chromium is used)"
    )
    from playwright.sync_api import sync_playwright

    profile = tmp_path / "chromium-profile"
    env = {**os.environ, "XDG_CONFIG_HOME": str(profile), "XDG_CACHE_HOME": str(profile)}
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=executable,
            args=CHROMIUM_FLAGS,
            headless=True,
            viewport={"width": 1200, "height": 1400},
            env=env,
        )
        try:
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()

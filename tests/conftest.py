"""Shared fixtures: an isolated WORKBENCH_HOME per test and a manager over it."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from workbench.manager import JobManager
from workbench.settings import Settings

# jp_fetch, jp_serverapp, ... for tests/server (pytest accepts pytest_plugins only here).
pytest_plugins = ["pytest_jupyter.jupyter_server"]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ["python", "-m", "workbench.examples.train_ddp"]


@pytest.fixture
def wb_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private WORKBENCH_HOME (and config) for one test."""
    home = tmp_path / "wbhome"
    monkeypatch.setenv("WORKBENCH_HOME", str(home))
    monkeypatch.setenv("WORKBENCH_CONFIG", str(tmp_path / "no-config.yaml"))
    monkeypatch.setenv("WORKBENCH_STOP_GRACE", "3")
    monkeypatch.delenv("WORKBENCH_BACKEND", raising=False)
    monkeypatch.delenv("WORKBENCH_CATALOG", raising=False)
    return home


@pytest.fixture
def manager(wb_home: Path):
    """A JobManager on the private home; cancels whatever a test leaves running."""
    m = JobManager(Settings.load())
    yield m
    for record in m.list(status=["Pending", "Running", "Cancelling"]):
        m.cancel(record.name, wait=15)


def job_processes(name: str) -> list[psutil.Process]:
    """Live processes of job ``name`` under this test's WORKBENCH_HOME (matched on the
    job folder in their environment, so suites running side by side never mix)."""
    home = os.environ.get("WORKBENCH_HOME")
    job_dir = str(Path(home) / "jobs" / name) if home else None
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            env = p.environ()
            if env.get("WORKBENCH_JOB_NAME") != name:
                continue
            if job_dir is None or env.get("WORKBENCH_JOB_DIR") == job_dir:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def wait_for(
    predicate, timeout: float = 30.0, what: str = "condition", every: float = 0.05
) -> None:
    """Poll ``predicate`` until it holds; fail the test naming ``what`` after ``timeout``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def python() -> str:
    """The interpreter the tests run under (its bin dir is what workers get on PATH)."""
    return sys.executable


@pytest.fixture(autouse=True)
def _close_cached_managers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every Kubernetes backend the test made (its own managers', and those a
    test's in-process CLI or API calls left in workbench.api's manager cache), and empty
    that cache: a backend's namespace watches otherwise keep retrying a fake API server
    that has stopped, for the rest of the session (CPU and log noise that slowed later
    timing-sensitive tests)."""
    made: list[Any] = []
    try:
        from workbench.backends.kubernetes.backend import KubernetesBackend
    except ImportError:  # no kubernetes client: no such backend to close
        pass
    else:
        init = KubernetesBackend.__init__

        def tracked(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            made.append(self)

        monkeypatch.setattr(KubernetesBackend, "__init__", tracked)
    yield
    from workbench import api

    for m in list(api._managers.values()):
        made.extend(m._backends.values())
    for backend in made:
        close = getattr(backend, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()
    api._managers.clear()

"""Fixtures that put the fake NVML at the sampler's single seam (in-process or via PYTHONPATH)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.fake_nvml import FakeNvml, ManualClock
from workbench.monitor import _nvml, sampler

FAKE_PKG = Path(__file__).resolve().parent.parent / "fakes" / "nvml_pkg"


def gpu(**steps_and_opts: Any) -> dict[str, Any]:
    """A scenario GPU; keyword ``steps`` is a list of field dicts, the rest are GPU options."""
    return dict(steps_and_opts)


def fake_gpus_in_subprocesses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scenario: dict[str, Any]
) -> None:
    """Supervisors and other children this test starts import the fake as ``pynvml``
    (PYTHONPATH) and sample it quickly."""
    path = tmp_path / "host.json"
    path.write_text(json.dumps(scenario))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(FAKE_PKG), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.setenv("WORKBENCH_FAKE_NVML", str(path))
    monkeypatch.setenv("WORKBENCH_GPU_INTERVAL", "0.1")
    monkeypatch.setenv("WORKBENCH_GPU_RECORD_INTERVAL", "0.1")


@pytest.fixture
def clock() -> ManualClock:
    """A clock tests move by hand."""
    return ManualClock()


@pytest.fixture
def install_fake(monkeypatch: pytest.MonkeyPatch, clock: ManualClock):
    """install_fake(scenario) -> FakeNvml placed at workbench.monitor._nvml.pynvml."""

    def install(scenario: dict[str, Any], use_clock: bool = True) -> FakeNvml:
        fake = FakeNvml(scenario, clock=clock if use_clock else __import__("time").time)
        monkeypatch.setattr(_nvml, "pynvml", fake)
        _nvml.reset()
        sampler.reset_host_sampler()
        return fake

    yield install
    sampler.reset_host_sampler()
    _nvml.reset()


@pytest.fixture
def real_nvml(monkeypatch: pytest.MonkeyPatch):
    """The real nvidia-ml-py at the seam (whatever an earlier test installed is undone)."""
    monkeypatch.setattr(_nvml, "pynvml", None)
    _nvml.reset()
    sampler.reset_host_sampler()
    yield
    sampler.reset_host_sampler()
    _nvml.reset()


@pytest.fixture
def fake_env(tmp_path: Path):
    """fake_env(scenario) -> env for a subprocess that imports the fake as ``pynvml``."""

    def make(scenario: dict[str, Any]) -> dict[str, str]:
        path = tmp_path / f"nvml-scenario-{len(list(tmp_path.glob('nvml-scenario-*')))}.json"
        path.write_text(json.dumps(scenario))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(FAKE_PKG), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        env["WORKBENCH_FAKE_NVML"] = str(path)
        return env

    return make

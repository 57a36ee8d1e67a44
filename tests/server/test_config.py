"""The extension's traits reach what they configure: runtime, catalogue, alert thresholds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError

from tests.server.conftest import body, py, submit, wait_done


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "specs:\n  team.a10:\n    gpus: 1\n    cpu: 12\n    memory: 60Gi\n    price_per_hour: 0.99\n"
    )
    return path


@pytest.fixture
def jp_server_config(manager: Any, catalog: Path) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"workbench": True, "jupyter_server_terminals": False}
        },
        "WorkbenchApp": {
            "job_poll_interval": 0.1,
            "default_runtime": "process",
            "catalog_file": str(catalog),
            "alert_gpu_temperature": 70.0,
        },
    }


async def test_traits_apply(jp_fetch, jp_serverapp):
    specs = {s["name"]: s for s in body(await jp_fetch("workbench", "api", "specs"))["specs"]}
    assert specs["team.a10"]["price_per_hour"] == 0.99  # the configured catalogue file
    assert "gpu.1x" in specs  # added to the packaged one, not replacing it
    created = await submit(jp_fetch, {"name": "rt", "command": py("print('ok')")})
    assert created["spec"]["runtime"] == "process"  # the configured default runtime
    assert (await wait_done(jp_fetch, "rt"))["status"] == "Succeeded"
    gpu = jp_serverapp.web_app.settings["workbench"].gpu
    assert gpu.temperature_alert == 70.0


def test_bad_trait_values_are_refused():
    from workbench.server.app import WorkbenchApp

    app = WorkbenchApp()
    with pytest.raises(TraitError, match="job_poll_interval must be > 0"):
        app.job_poll_interval = -1
    assert app.job_poll_interval == 1.0  # the refused value did not stick

"""`workbench top` shows live per-GPU figures beside the allocation (fake 2-GPU host)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.monitor.conftest import FAKE_PKG
from workbench.backends.local import LocalBackend
from workbench.settings import Settings

HOST = {
    "gpus": [
        {"name": "NVIDIA L4", "memory_total": 24 * 2**30,
         "steps": [{"utilization": 63, "memory_used": 6 * 2**30, "temperature": 71}]},
        {"name": "NVIDIA L4", "memory_total": 24 * 2**30, "not_supported": ["temperature", "utilization"]},
    ]
}  # fmt: skip


def test_nodes_carry_live_figures_none_where_unknown(wb_home, install_fake):
    install_fake(HOST, use_clock=False)
    [node] = LocalBackend(Settings.load()).nodes()
    g0, g1 = node.gpus
    assert (g0.utilization, g0.memory_used, g0.temperature) == (63.0, 6 * 2**30, 71.0)
    assert (g1.utilization, g1.temperature) == (None, None) and g1.memory_used == 0
    assert node.gpu_reason is None
    assert [g.index for g in node.gpus] == [0, 1] and g0.name == "NVIDIA L4"
    wire = node.to_dict()  # what `top -o json` and GET /nodes give
    assert wire["gpus"][0]["temperature"] == 71.0 and wire["labels"] == {}


def test_workbench_top_prints_them(wb_home, tmp_path):
    scenario = tmp_path / "host.json"
    scenario.write_text(json.dumps(HOST))
    env = {
        **__import__("os").environ,
        "PYTHONPATH": str(FAKE_PKG),
        "WORKBENCH_FAKE_NVML": str(scenario),
    }
    p = subprocess.run([sys.executable, "-m", "workbench.cli", "top"], capture_output=True, text=True,
                       env=env, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    header = next(ln for ln in lines if ln.strip().startswith("GPU"))
    assert header.split() == [
        "GPU",
        "NAME",
        "MEMORY",
        "UTIL",
        "MEM",
        "USED",
        "TEMP",
        "ALLOCATED",
        "JOBS",
    ]
    row0 = next(ln for ln in lines if ln.strip().startswith("0 "))
    row1 = next(ln for ln in lines if ln.strip().startswith("1 "))
    assert "63%" in row0 and "6.0 GiB" in row0 and "71 C" in row0
    assert row1.split()[5:] == ["-", "0.0", "GiB", "-", "0", "-"]
    p = subprocess.run([sys.executable, "-m", "workbench.cli", "top", "-o", "json"], capture_output=True,
                       text=True, env=env, timeout=60)  # fmt: skip
    [node] = json.loads(p.stdout)
    assert node["gpus"][0]["temperature"] == 71.0 and node["gpus"][1]["temperature"] is None

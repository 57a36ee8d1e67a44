"""Many processes, one store: concurrent CLI submits on a fresh home all land."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import wait_for
from workbench.manager import JobManager
from workbench.settings import Settings

N = 20


def test_twenty_concurrent_cli_submits_all_recorded(wb_home: Path, tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "workbench"  # the real console script
    env = {**os.environ, "WORKBENCH_HOME": str(wb_home)}
    # A fresh home: every process races to create jobs.db, switch it to WAL and migrate it.
    assert not (wb_home / "jobs.db").exists()
    cmd = [str(exe), "submit", "--runtime", "process", "--workdir", str(tmp_path)]
    procs = [
        subprocess.Popen(
            [*cmd, "--name", f"c{i:02d}", "--", "python", "-c", "pass"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(N)
    ]
    results = [(p, *p.communicate(timeout=300)) for p in procs]
    for p, out, err in results:
        assert p.returncode == 0, (out, err)
        assert "locked" not in out + err and "Traceback" not in err, (out, err)
    manager = JobManager(Settings.load())
    names = {r.name for r in manager.list()}
    assert names == {f"c{i:02d}" for i in range(N)}
    assert manager.store.count() == N
    # Every job ran to its end under its own supervisor, which wrote to the same store.
    wait_for(lambda: all(r.status.terminal for r in manager.list()), timeout=240, what="all ended")
    assert {r.status.value for r in manager.list()} == {"Succeeded"}

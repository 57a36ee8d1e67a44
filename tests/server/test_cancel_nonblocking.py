"""Cancel never blocks the API, and the server settles a job whose supervisor died by
itself: a real Jupyter server, real supervisors, real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from tests.conftest import job_processes
from tests.server.conftest import body, py, submit, wait_done
from workbench.store import JobStore

GRACE = 10.0
STUBBORN = py(
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('up', flush=True); time.sleep(600)"
)


@pytest.fixture
def jp_server_config(manager: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The shared server config, with a grace period long enough to see any blocking."""
    monkeypatch.setenv("WORKBENCH_STOP_GRACE", str(GRACE))
    return {
        "ServerApp": {
            "jpserver_extensions": {"workbench": True, "jupyter_server_terminals": False}
        },
        "WorkbenchApp": {"job_poll_interval": 0.1, "api_threads": 8},
    }


async def until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_concurrent_deletes_of_stubborn_jobs_do_not_block_the_api(jp_fetch, wb_home):
    names = [f"stub-{i}" for i in range(8)]  # as many as the API has threads
    for name in names:
        await submit(jp_fetch, {"name": name, "command": STUBBORN})
    await until(
        lambda: (
            all(job_processes(n) for n in names)
            and all(
                "up" in (wb_home / "jobs" / n / "logs" / "rank-0.log").read_text() for n in names
            )
        ),
        timeout=120,
        what="every job up and ignoring SIGTERM",
    )
    deletes = [
        asyncio.ensure_future(jp_fetch("workbench", "api", "jobs", n, method="DELETE"))
        for n in names
    ]
    store = JobStore(wb_home / "jobs.db")
    await until(
        lambda: all(store.row(n)["cancel_requested"] for n in names),
        timeout=10,
        what="every cancel requested",
    )
    started = time.monotonic()
    r = await jp_fetch("workbench", "api", "jobs", params={"limit": "1"})
    took = time.monotonic() - started
    assert r.code == 200
    assert took < 2.0, f"GET /jobs took {took:.1f} s behind {len(names)} cancels"
    replies = await asyncio.gather(*deletes)
    # Still stopping (SIGTERM ignored): accepted, the record as it is now, which says so.
    assert {x.code for x in replies} == {202}
    assert {body(x)["status"] for x in replies} == {"Cancelling"}
    # The supervisors escalate on their own after the grace period: every job ends
    # Cancelled with no process left, though nobody waited on the cancel.
    for name in names:
        done = await wait_done(jp_fetch, name, timeout=GRACE + 60)
        assert done["status"] == "Cancelled", done
        assert job_processes(name) == []


async def test_server_fails_a_job_whose_supervisor_was_killed_without_any_reader(jp_fetch, wb_home):
    await submit(jp_fetch, {"name": "lost", "command": STUBBORN, "workers": 2})
    await until(lambda: len(job_processes("lost")) == 2, timeout=60, what="ranks up")
    store = JobStore(wb_home / "jobs.db")
    os.kill(store.row("lost")["details"]["supervisor_pid"], signal.SIGKILL)
    # Nobody calls GET: the server's own watcher notices within a few ticks.
    await until(lambda: store.row("lost")["status"] == "Failed", timeout=5, what="Failed")
    assert all(r["state"] != "Running" and r["finished_at"] for r in store.rank_rows("lost"))
    assert job_processes("lost") == []

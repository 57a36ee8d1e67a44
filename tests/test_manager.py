"""JobManager without HTTP: paging and counts come from the store, not from loading all;
every lookup routes by the row's backend column."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backends.ledger_backend import LedgerBackend
from workbench.backends import register_backend, unregister_backend
from workbench.errors import JobNotFoundError, SpecError
from workbench.manager import JobManager
from workbench.spec import JobRecord, JobStatus, TrainSpec


def test_page_and_counts(manager):
    store = manager.backend().store
    for i in range(7):
        status = JobStatus.SUCCEEDED if i % 2 else JobStatus.FAILED
        store.insert(JobRecord(name=f"j{i}", status=status, backend="local", spec={"workers": 1},
                               image="img", created_at=100.0 + i))  # fmt: skip
    records, total = manager.page(limit=3, offset=2)
    assert [r.name for r in records] == ["j4", "j3", "j2"] and total == 7
    records, total = manager.page(status=["Succeeded"], limit=2)
    assert [r.name for r in records] == ["j5", "j3"] and total == 3
    assert manager.counts() == {
        "Pending": 0,
        "Running": 0,
        "Cancelling": 0,
        "Succeeded": 3,
        "Failed": 4,
        "Cancelled": 0,
    }
    assert [r.name for r in manager.list(limit=2)] == ["j6", "j5"]


# ---- routing by the store's backend column (a second, real backend registered) ----------


@pytest.fixture
def ledger(manager):
    """The ledger backend registered through the registry API, as the manager loads it."""
    register_backend("ledger", "tests.backends.ledger_backend:LedgerBackend")
    try:
        backend = manager.backend("ledger")
        assert isinstance(backend, LedgerBackend) and backend.store is manager.store
        yield backend
    finally:
        unregister_backend("ledger")


def _ledger_job(manager, name: str) -> JobRecord:
    spec = {"name": name, "backend": "ledger", "command": ["python", "train.py"]}
    return manager.submit(TrainSpec.from_dict(spec))


def test_every_backend_shares_the_managers_one_store(manager, ledger):
    assert manager.backend("local").store is manager.store is ledger.store


def test_get_cancel_logs_delete_route_by_the_row(manager, ledger):
    rec = _ledger_job(manager, "on-ledger")
    assert rec.backend == "ledger" and rec.details == {"object": "ledger/on-ledger"}
    ledger.calls.clear()
    # The job's row says "ledger": the configured default (local) is never asked.
    assert manager.get("on-ledger").backend == "ledger"
    assert ("get", "on-ledger") in ledger.calls
    assert list(manager.logs("on-ledger")) == ["Submitted"]
    assert manager.cancel("on-ledger").status is JobStatus.CANCELLED
    assert [c for c in ledger.calls if c[0] in ("logs", "cancel")] == [
        ("logs", "on-ledger"),
        ("cancel", "on-ledger"),
    ]
    manager.delete("on-ledger")
    assert ("delete", "on-ledger") in ledger.calls
    with pytest.raises(JobNotFoundError):
        manager.get("on-ledger")


def test_a_local_row_never_reaches_the_other_backend(manager, ledger):
    manager.store.insert(JobRecord(name="here", status=JobStatus.SUCCEEDED, backend="local",
                                   spec={"workers": 1}, image="img"))  # fmt: skip
    ledger.calls.clear()
    assert manager.get("here").backend == "local"
    manager.delete("here")
    assert ledger.calls == []


def test_paging_and_counts_across_two_backends(manager, ledger):
    for i in range(6):  # interleaved in time: local, ledger, local, ...
        manager.store.insert(
            JobRecord(name=f"m{i}", status=JobStatus.PENDING if i in (3, 5) else JobStatus.SUCCEEDED,
                      backend="ledger" if i % 2 else "local", spec={"workers": 1}, image="img",
                      created_at=200.0 + i)
        )  # fmt: skip
    records, total = manager.page(limit=3, offset=1)
    assert [(r.name, r.backend) for r in records] == [
        ("m4", "local"),
        ("m3", "ledger"),
        ("m2", "local"),
    ]
    assert total == 6
    records, total = manager.page(backend="ledger", limit=2)
    assert [r.name for r in records] == ["m5", "m3"] and total == 3
    records, total = manager.page(status=["Pending"])
    assert [r.name for r in records] == ["m5", "m3"] and total == 2
    # A page reconciles the backends that have active jobs (the Pending ledger jobs).
    assert ("reconcile", "") in ledger.calls
    assert manager.counts()["Succeeded"] == 4 and manager.counts()["Pending"] == 2
    assert [r.name for r in manager.list(status=["Pending"], limit=1, offset=1)] == ["m3"]


def test_a_job_on_another_backend_is_seen_by_a_fresh_manager(manager, ledger):
    _ledger_job(manager, "shared")
    other = JobManager(manager.settings)  # another process's manager on the same home
    assert other.store is not manager.store
    assert other.get("shared").backend == "ledger"
    assert [r.name for r in other.list()] == ["shared"]


def test_unknown_backend_is_a_spec_error_listing_the_known_ones(manager, ledger):
    spec = TrainSpec.from_dict({"backend": "nope", "command": ["python", "t.py"]})
    with pytest.raises(SpecError, match="backend") as e:
        manager.submit(spec)
    assert "local" in str(e.value) and "ledger" in str(e.value)
    with pytest.raises(SpecError, match="use one of local, kubernetes, ledger"):
        manager.backend("nope")


def test_another_process_without_the_backend_still_sees_its_jobs(manager, ledger):
    """A CLI process where the ledger backend is not installed lists and shows its job from
    the one store; acting on it says which backend is missing."""
    _ledger_job(manager, "elsewhere")
    exe = str(Path(sys.executable).parent / "workbench")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)

    out = cli("list", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert [(j["name"], j["backend"]) for j in json.loads(out.stdout)] == [("elsewhere", "ledger")]
    out = cli("get", "elsewhere", "-o", "json")
    assert out.returncode == 0 and json.loads(out.stdout)["details"] == {
        "object": "ledger/elsewhere"
    }
    out = cli("cancel", "elsewhere")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "'ledger'" in out.stderr and "not installed here" in out.stderr


def test_the_local_backend_does_not_answer_for_another_backends_row(manager, ledger):
    _ledger_job(manager, "not-local")
    with pytest.raises(JobNotFoundError):
        manager.backend("local").get("not-local")
    with pytest.raises(JobNotFoundError):
        manager.backend("local").cancel("not-local", wait=0)


def test_backends_lists_every_registered_backend_with_capabilities(manager, ledger):
    by_name = {b["name"]: b for b in manager.backends()}
    assert by_name["local"]["default"] and "process" in by_name["local"]["capabilities"]["runtimes"]
    # A backend that does not override capabilities() declares nothing, and is not default.
    assert by_name["ledger"] == {
        "name": "ledger",
        "default": False,
        "capabilities": {"runtimes": [], "gpu_modes": [], "data_schemes": [], "flavours": []},
        "error": None,
        "hint": None,
    }

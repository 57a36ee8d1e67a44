"""Backends are found through the ``workbench.backends`` entry-point group."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from tests.backends.ledger_backend import LedgerBackend
from workbench.backends import (
    GROUP,
    backend_entries,
    backend_names,
    load_backend,
    rescan_backends,
)
from workbench.backends.local import LocalBackend
from workbench.errors import BackendUnavailableError, SpecError
from workbench.settings import Settings
from workbench.store import JobStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def plugin_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A third party's installed distribution (a real dist-info on sys.path) declaring two
    backends in the group: one that loads and one whose module is missing."""
    info = tmp_path / "site" / "wb_thirdparty-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: wb-thirdparty\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{GROUP}]\n"
        "ledger = tests.backends.ledger_backend:LedgerBackend\n"
        "ledger-extra = tests.backends.ledger_backend:LedgerBackend [cloud]\n"
        "broken = wb_thirdparty_missing_module:Backend\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    rescan_backends()  # as after installing a package
    yield info
    monkeypatch.undo()
    rescan_backends()


def test_pyproject_declares_the_local_backend_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][GROUP]["local"] == "workbench.backends.local:LocalBackend"


def test_local_is_known_without_installed_metadata() -> None:
    # The built-in entry covers an install made before the entry point existed.
    assert "local" in backend_names()


def test_a_third_party_entry_point_loads_with_the_shared_store(plugin_dist, wb_home) -> None:
    assert {"local", "ledger", "broken"} <= set(backend_names())
    store = JobStore(wb_home / "jobs.db")
    backend = load_backend("ledger", settings=Settings.load(), catalog=None, store=store)
    assert isinstance(backend, LedgerBackend) and backend.store is store


def test_an_entry_point_naming_an_extra_loads(plugin_dist, wb_home) -> None:
    # pyproject declares `kubernetes = "...:KubernetesBackend [kubernetes]"`: the extra is
    # not part of the attribute (a clean install failed to load the kubernetes backend).
    store = JobStore(wb_home / "jobs.db")
    backend = load_backend("ledger-extra", settings=Settings.load(), catalog=None, store=store)
    assert isinstance(backend, LedgerBackend)
    assert backend_entries()["ledger-extra"].hint == "pip install wb-thirdparty"


def test_a_backend_that_fails_to_load_names_what_to_install(plugin_dist) -> None:
    assert backend_entries()["broken"].hint == "pip install wb-thirdparty"
    with pytest.raises(BackendUnavailableError) as e:
        load_backend("broken")
    assert e.value.backend == "broken"
    assert "wb_thirdparty_missing_module" in str(e.value)
    assert "pip install wb-thirdparty" in str(e.value)


def test_unknown_backend_is_a_spec_error_listing_the_known(plugin_dist) -> None:
    with pytest.raises(SpecError) as e:
        load_backend("mars")
    assert e.value.field == "backend"
    assert "use one of local" in str(e.value) and "ledger" in str(e.value)


def test_local_backend_takes_the_store_it_is_given(wb_home) -> None:
    store = JobStore(wb_home / "jobs.db")
    backend = load_backend("local", settings=Settings.load(), store=store)
    assert isinstance(backend, LocalBackend) and backend.store is store


def test_entry_points_are_read_once_per_process() -> None:
    """A page of jobs must not rescan every installed distribution (~15 ms each time)."""
    import time

    backend_names()
    start = time.perf_counter()
    for _ in range(100):
        backend_names()
    assert time.perf_counter() - start < 0.2  # 100 rescans would take over a second

"""Backends run TrainSpecs. Found through the ``workbench.backends`` entry-point group (so a
third party can add one), with the built-in local backend always known; imported lazily."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailableError, SpecError

if TYPE_CHECKING:
    from .base import Backend

GROUP = "workbench.backends"
DIST = "jupyter-gpu-workbench"


@dataclass(frozen=True)
class BackendEntry:
    """Where a backend's class lives and what to install when it cannot be imported."""

    name: str
    target: str | type  # "module:Class", or the class itself (registered in-process)
    hint: str | None = None


# Built in: known even where the installed metadata predates the entry point (an editable
# install made before it was added). Entry points of the same name take precedence.
BUILTIN: dict[str, BackendEntry] = {
    "local": BackendEntry("local", "workbench.backends.local:LocalBackend"),
    "kubernetes": BackendEntry(
        "kubernetes",
        "workbench.backends.kubernetes.backend:KubernetesBackend",
        f"pip install '{DIST}[kubernetes]'",
    ),
}
_registered: dict[str, BackendEntry] = {}


def register_backend(name: str, target: str | type, hint: str | None = None) -> None:
    """Make backend ``name`` known in this process (tests, plugins not installed as a
    distribution); an entry point is the way for an installed package."""
    _registered[name] = BackendEntry(name, target, hint)


def unregister_backend(name: str) -> None:
    """Forget a backend registered with register_backend."""
    _registered.pop(name, None)


def _from_entry_point(ep: EntryPoint) -> BackendEntry:
    dist = ep.dist.name if ep.dist is not None else None
    hint = None
    if dist and dist != DIST:
        hint = f"pip install {dist}"
    elif ep.extras:
        hint = f"pip install '{DIST}[{','.join(ep.extras)}]'"
    # module:attr without the "[extra]" an entry point may name (`ep.value` keeps it).
    return BackendEntry(ep.name, f"{ep.module}:{ep.attr}", hint)


@functools.cache
def _installed() -> dict[str, BackendEntry]:
    # Scanning every installed distribution costs ~15 ms: once per process (see rescan).
    return {ep.name: _from_entry_point(ep) for ep in entry_points(group=GROUP)}


def rescan_backends() -> None:
    """Read the installed entry points again (after installing a backend package)."""
    _installed.cache_clear()


def backend_entries() -> dict[str, BackendEntry]:
    """Every known backend: built in, then entry points, then ones registered in-process."""
    return {**BUILTIN, **_installed(), **_registered}


def backend_names() -> tuple[str, ...]:
    """Names a spec's ``backend`` field may take."""
    return tuple(backend_entries())


def load_backend(name: str, **kwargs: Any) -> Backend:
    """Instantiate the backend called ``name``; one that cannot load says what to install."""
    entries = backend_entries()
    if name not in entries:
        raise SpecError("backend", f"unknown backend {name!r}", f"use one of {', '.join(entries)}")
    entry = entries[name]
    cls = entry.target if isinstance(entry.target, type) else _import(entry)
    backend: Backend = cls(**kwargs)
    return backend


def _import(entry: BackendEntry) -> type:
    module_name, _, attr = str(entry.target).partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split(".") if attr else []:
            obj = getattr(obj, part)
    except ImportError as e:
        raise BackendUnavailableError(
            entry.name, f"cannot import {e.name or module_name}", entry.hint
        ) from e
    except AttributeError as e:
        raise BackendUnavailableError(
            entry.name, f"{entry.target} does not exist ({e})", entry.hint
        ) from e
    if not isinstance(obj, type):
        raise BackendUnavailableError(entry.name, f"{entry.target} is not a class", entry.hint)
    return obj

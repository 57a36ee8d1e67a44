"""Backends run TrainSpecs. A tiny registry of name -> class path, imported lazily."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailableError, SpecError

if TYPE_CHECKING:
    from .base import Backend

# name -> (module:class, pip extra that provides its dependencies)
REGISTRY: dict[str, tuple[str, str | None]] = {
    "local": ("workbench.backends.local:LocalBackend", None),
}


def backend_names() -> tuple[str, ...]:
    """Names a spec's ``backend`` field may take."""
    return tuple(REGISTRY)


def load_backend(name: str, **kwargs: Any) -> Backend:
    """Instantiate the backend called ``name``; missing extras give an install hint."""
    if name not in REGISTRY:
        raise SpecError("backend", f"unknown backend {name!r}", f"use one of {', '.join(REGISTRY)}")
    target, extra = REGISTRY[name]
    module_name, _, cls_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        hint = f"pip install 'jupyter-gpu-workbench[{extra}]'" if extra else None
        raise BackendUnavailableError(name, f"cannot import {e.name}", hint) from e
    cls = getattr(module, cls_name)
    backend: Backend = cls(**kwargs)
    return backend

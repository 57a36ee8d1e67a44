"""The single seam between workbench and NVML: every NVML call goes through ``lib()``.

Tests replace the module attribute ``pynvml`` with a fake (tests/fakes/fake_nvml.py); in
subprocesses the same fake is importable as ``pynvml`` from a directory put first on
PYTHONPATH. Nothing else in workbench imports pynvml.
"""

from __future__ import annotations

import enum
import os
import threading
from typing import Any

# The seam: None until first use, then the pynvml module (or a test's fake of it).
pynvml: Any = None

_lock = threading.Lock()
_initialised: tuple[int, int] | None = None  # (pid, id(lib)) that called nvmlInit


class MonitorState(str, enum.Enum):
    """Why GPU monitoring is (or is not) working on this host."""

    OK = "ok"
    NO_LIBRARY = "no_library"
    NO_DRIVER = "no_driver"
    NO_GPU = "no_gpu"
    NO_PERMISSION = "no_permission"
    DISABLED = "disabled"
    ERROR = "error"


class NvmlUnavailable(Exception):
    """NVML cannot be used here; carries the state and a plain-words reason."""

    def __init__(self, state: MonitorState, reason: str) -> None:
        super().__init__(reason)
        self.state = state
        self.reason = reason


def lib() -> Any:
    """The NVML binding in use (pynvml, or the fake a test put at the seam)."""
    global pynvml
    if pynvml is None:
        try:
            import pynvml as real
        except ImportError:  # pragma: no cover - nvidia-ml-py is a core dependency
            raise NvmlUnavailable(
                MonitorState.NO_LIBRARY, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            ) from None
        pynvml = real
    return pynvml


def classify(e: BaseException) -> tuple[MonitorState, str]:
    """Translate an NVML error from nvmlInit into a state and a sentence a person can act on."""
    nv = lib()

    def is_(name: str) -> bool:
        cls = getattr(nv, name, None)
        return isinstance(cls, type) and isinstance(e, cls)

    if is_("NVMLError_LibraryNotFound"):
        return MonitorState.NO_LIBRARY, "no NVIDIA driver on this host (NVML library not found)"
    if is_("NVMLError_DriverNotLoaded"):
        return MonitorState.NO_DRIVER, "the NVIDIA driver is installed but not loaded"
    if is_("NVMLError_NoPermission"):
        return MonitorState.NO_PERMISSION, "no permission to read the GPUs through NVML"
    return MonitorState.ERROR, f"NVML is not usable here: {e}"


def init() -> Any:
    """nvmlInit once per process (and per binding); returns the binding or raises NvmlUnavailable.

    NVML is never shut down here: samplers, the inventory and the agent share one
    initialisation, as NVML's own reference counting expects of a long-lived process.
    """
    global _initialised
    nv = lib()
    key = (os.getpid(), id(nv))
    with _lock:
        if _initialised == key:
            return nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            raise NvmlUnavailable(*classify(e)) from None
        _initialised = key
        return nv


def reset() -> None:
    """Forget the initialisation (tests call this after swapping the binding)."""
    global _initialised
    with _lock:
        _initialised = None


def text(value: Any) -> str:
    """NVML strings arrive as bytes or str depending on the binding's version."""
    return value.decode() if isinstance(value, bytes) else str(value)

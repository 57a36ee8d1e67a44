"""The exceptions every workbench surface raises and translates.

Third-party errors are translated once, at the edge that calls the third party
(``raise SubmitError(...) from e``); surfaces map these classes to exit codes and
HTTP statuses and never print a traceback for them.
"""

from __future__ import annotations


class WorkbenchError(Exception):
    """Base class of every error workbench raises on purpose."""


class SpecError(WorkbenchError, ValueError):
    """Bad user input: names the field and says how to fix it."""

    def __init__(self, field: str, message: str, fix: str | None = None) -> None:
        self.field = field
        self.fix = fix
        text = f"{field}: {message}"
        if fix:
            text += f" ({fix})"
        super().__init__(text)
        self.message = message


class BackendError(WorkbenchError):
    """A backend could not do what was asked; carries the backend's name and detail."""

    def __init__(self, backend: str, detail: str) -> None:
        self.backend = backend
        self.detail = detail
        super().__init__(f"[{backend}] {detail}")


class BackendUnavailableError(BackendError):
    """A backend cannot be used here (missing extra, no kubeconfig, no engine); has a hint."""

    def __init__(self, backend: str, detail: str, hint: str | None = None) -> None:
        self.hint = hint
        super().__init__(backend, detail + (f"; {hint}" if hint else ""))


class SubmitError(BackendError):
    """A valid spec could not be started by the backend."""


class JobNotFoundError(BackendError, LookupError):
    """No job of that name exists."""

    def __init__(self, backend: str, name: str) -> None:
        self.name = name
        super().__init__(backend, f"no job named {name!r}")


class MountError(WorkbenchError):
    """A data mount could not be resolved, fetched or written back."""


class MonitorUnavailableError(WorkbenchError):
    """GPU monitoring is off; ``reason`` says why in plain words."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


__all__ = [
    "BackendError",
    "BackendUnavailableError",
    "JobNotFoundError",
    "MonitorUnavailableError",
    "MountError",
    "SpecError",
    "SubmitError",
    "WorkbenchError",
]

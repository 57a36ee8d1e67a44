"""The Jupyter server extension: REST and WebSocket API over the one JobManager.

Only this package imports tornado, jupyter_server and traitlets; every route calls
``JobManager`` and nothing below it.
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """Tell jupyter_server which ExtensionApp this package provides."""
    from .app import WorkbenchApp

    return [{"module": "workbench.server.app", "app": WorkbenchApp}]

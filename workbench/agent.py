"""Old path of the in-container agent, now ``workbench.monitor.agent``.

Kept because images built by users from docker/README.md before the move carry an
``org.workbench.agent="python -m workbench.agent"`` label, and the runtime runs that label.
"""

from __future__ import annotations

import sys

from .monitor.agent import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())

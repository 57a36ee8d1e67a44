"""Installing the package enables the server extension (jupyter_server_config.d)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def test_extension_is_listed_as_enabled_and_valid(tmp_path: Path) -> None:
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "NO_COLOR": "1"}  # fmt: skip
    jupyter = Path(sys.executable).parent / "jupyter"
    out = subprocess.run([str(jupyter), "server", "extension", "list"], capture_output=True,
                         text=True, env=env, timeout=120)  # fmt: skip
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    assert re.search(r"workbench\s+enabled", text), text
    assert re.search(r"workbench 0\.1\.0\s+OK", text), text
    shipped = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "workbench.json"
    assert shipped.is_file()  # put there by the wheel's shared-data, not by a test fixture

"""The labextension's TypeScript unit tests (vitest): the models, the request layer and the
event stream's reconnect/resume logic, run by `make test` through pytest."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import LABEXT, jlpm, run


def test_typescript_unit_tests_pass(node_modules: Path) -> None:
    """`jlpm test` (vitest run) passes, and it ran every suite (at least the first four:
    lanes add their own)."""
    done = run(jlpm(), "test")
    out = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
    assert done.returncode == 0, out[-6000:]
    files = re.search(r"Test Files\s+(\d+) passed", out)
    suites = len(list((LABEXT / "test").glob("*.test.ts")))
    assert files and int(files.group(1)) == suites >= 4, out[-2000:]
    tests = re.search(r"Tests\s+(\d+) passed", out)
    assert tests and int(tests.group(1)) >= 30, out[-2000:]


def test_typescript_compiles(node_modules: Path) -> None:
    """tsc --noEmit is clean, which includes models.ts's guard that the generated wire types
    fit what the panel reads."""
    done = run(jlpm(), "typecheck")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

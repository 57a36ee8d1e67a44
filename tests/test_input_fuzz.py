"""Hostile values for every spec field through `workbench submit` (flags and -f YAML).

Each must exit 2 with exactly one line on stderr naming the field, never raise, and leave
nothing behind: no job row, no job folder.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.cli import main
from workbench.store import JobStore

# A program that is on no PATH: should a value wrongly pass validation, submit still stops
# before starting anything (and the field assertion names the escape).
PROGRAM = ["no-such-program-wbfuzz", "train.py"]
HUGE_TEXT = ["1e400", "-1e400", "inf", "-inf", "nan", "NaN", "9" * 25, "-" + "9" * 25]

bad_count = st.one_of(
    st.sampled_from([*HUGE_TEXT, "0", "-1", "1.5", "two", "", " ", "1\x00", "0x10", "1e3000"]),
    st.integers(max_value=0).map(str),
    st.integers(min_value=100_000).map(str),
)
# refused in every field: a NUL (argv, env and paths cannot carry it) or a huge string
bad_value = st.one_of(
    st.sampled_from(["a\x00b", "\x00"]),
    st.text(min_size=1, max_size=8).map(lambda t: t + "\x00"),
    st.integers(70_000, 300_000).map(lambda n: "x" * n),
)
# refused in every field but a command argument or env value, which may hold line breaks
bad_text = st.one_of(bad_value, st.sampled_from(["x\n", "a\rb", "\x1b[31m"]))
# flag -> (field named in the error, strategy of values that must be refused)
FLAGS: dict[str, tuple[str, st.SearchStrategy[str]]] = {
    "--workers": ("workers", bad_count),
    "--procs-per-worker": ("procs_per_worker", bad_count),
    "--retry": ("max_retries", st.one_of(st.sampled_from(HUGE_TEXT), st.just("-1"))),
    "--gpus": ("gpus", st.sampled_from([*HUGE_TEXT, "-1", "1.5", "lots", "1\x00"])),
    "--cpu": ("cpu", st.sampled_from([*HUGE_TEXT, "0", "-2", "many", "9999999"])),
    "--timeout": ("timeout", st.sampled_from([*HUGE_TEXT, "0", "-5", "soon", "1h\x00"])),
    "--name": ("name", st.one_of(bad_text, st.sampled_from(["Bad", "job\n", "x" * 51]))),
    "--memory": ("memory", st.one_of(bad_text, st.sampled_from(["16Gi\n", "lots"]))),
    "--image": ("image", st.one_of(bad_text, st.just("reg/a b"))),
    "--spec": ("spec", st.one_of(bad_text, st.just("gpu.99x"))),
    "--workdir": ("working_dir", bad_text),
    "--priority": ("priority", bad_text),
    "--queue": ("queue", bad_text),
    "--backend": ("backend", bad_text),
    "--env": (
        "env",
        st.one_of(
            bad_value.map(lambda v: f"A={v}"),
            st.sampled_from(["A\n=1", "1A=2", "RANK=3", "=x", "noequals"]),
        ),
    ),
    "--data": (
        "data",
        st.one_of(
            bad_text.map(lambda v: f"/src:{v}"),
            st.sampled_from(["/src:/d\x00st", "nodst", "/src:../up"]),
        ),
    ),
}


def assert_nothing_created(home: Path) -> None:
    jobs = home / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir()), list(jobs.iterdir())
    db = home / "jobs.db"
    if db.exists():
        assert JobStore(db).list(status=None, backend=None, limit=None, offset=0) == []


def submit(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, list[str]]:
    code = main(argv)  # any exception fails the test: the CLI must never raise
    out = capsys.readouterr()
    assert out.out == ""
    return code, out.err.splitlines()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(flag=st.sampled_from(sorted(FLAGS)), data=st.data())
def test_submit_flags_refuse_hostile_values(capsys, wb_home, flag, data):
    field, values = FLAGS[flag]
    value = data.draw(values, label=flag)
    code, err = submit(capsys, ["submit", f"{flag}={value}", "--", *PROGRAM])
    assert code == 2, err
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {field}"), err[0]
    assert len(err[0]) < 2000
    assert_nothing_created(wb_home)


# ---- YAML files (submit -f) ------------------------------------------------------------------

HUGE = 10**400
bad_number = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, HUGE, -HUGE, 1.5, 0, -1, True]),
    st.sampled_from(HUGE_TEXT),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
bad_string = st.one_of(
    st.sampled_from([5, 1.5, math.nan, True, [1], {"a": 1}, "a\x00b", "x\n"]),
    st.integers(70_000, 200_000).map(lambda n: "x" * n),
)
YAML_FIELDS: dict[str, tuple[str, st.SearchStrategy[Any]]] = {
    "workers": ("workers", bad_number),
    "gpus": ("gpus", bad_number.filter(lambda v: v != 0)),  # 0 is CPU-only: fine
    "procs_per_worker": ("procs_per_worker", bad_number),
    "max_retries": ("max_retries", bad_number.filter(lambda v: v != 0)),
    "cpu": ("cpu", bad_number.filter(lambda v: v != 1.5)),
    "timeout": ("timeout", bad_number.filter(lambda v: v != 1.5)),
    "name": ("name", bad_string),
    "memory": ("memory", bad_string.filter(lambda v: v != 5)),  # 5 bytes: fine
    "image": ("image", bad_string),
    "instance_spec": ("spec", bad_string),
    "working_dir": ("working_dir", bad_string),
    "priority": ("priority", bad_string),
    "queue": ("queue", bad_string),
    "backend": ("backend", bad_string),
    "runtime": ("runtime", bad_string),
    "framework": ("framework", bad_string),
    "env": (
        "env",
        st.one_of(
            st.sampled_from([[1], "A=1", 5]),
            bad_string.filter(lambda v: not isinstance(v, (int, float)) and v != "x\n").map(
                lambda v: {"A": v}
            ),
            st.just({f"K{i}": "v" for i in range(300)}),
        ),
    ),
    "data": (
        "data",
        st.one_of(
            bad_value.map(lambda v: [f"/s:{v}"]),
            st.sampled_from(
                [5, "a", [5], ["/s:x\n"], ["/s:../up"], [{"src": 1, "dst": "/d"}], ["/s:/d:xx:"]]
            ),
        ),
    ),
    "command": ("command", st.sampled_from([[], [""], ["a\x00"], 5, [["x"]], "a 'b", [None]])),
}


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(key=st.sampled_from(sorted(YAML_FIELDS)), data=st.data())
def test_submit_file_refuses_hostile_values(capsys, wb_home, tmp_path, key, data):
    field, values = YAML_FIELDS[key]
    value = data.draw(values, label=key)
    spec: dict[str, Any] = {"command": PROGRAM, key: value}
    path = tmp_path / "job.yaml"
    # allow_unicode=False: YAML escapes NUL and friends, and reads them back as given
    path.write_text(yaml.safe_dump(spec, allow_unicode=False))
    code, err = submit(capsys, ["submit", "-f", str(path)])
    assert code == 2, err
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {field}"), err[0]
    assert_nothing_created(wb_home)


def test_the_issue_alias_bomb_submits_nothing(capsys, wb_home, tmp_path):
    """~300 bytes that expanded to 1.2 GB and left a 170 MB jobs.db."""
    bomb = "".join(
        f"{x}: &{x} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
        for p, x in zip(["", "a", "b", "c", "d", "e", "f", "g"], "abcdefgh", strict=True)
    )
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb + "command: [python, -c, pass]\nenv: {A: *h}\n")
    assert os.path.getsize(path) < 400
    code, err = submit(capsys, ["submit", "-f", str(path)])
    assert code == 2 and len(err) == 1
    assert err[0].startswith("error: file:") and "anchors/aliases" in err[0]
    assert_nothing_created(wb_home)

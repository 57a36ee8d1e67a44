"""Hostile or careless TrainSpec input: every field's type, size and value bounds, YAML files.

Each rejection is a one-line SpecError naming the field; nothing else (OverflowError,
TypeError, RecursionError, a huge spec) gets through.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench._spec_limits import (
    MAX_ARG,
    MAX_COMMAND,
    MAX_DEPTH,
    MAX_ENV,
    MAX_ENV_VALUE,
    MAX_LABEL,
    MAX_MOUNTS,
    MAX_SPEC,
    MAX_SPEC_FILE,
    MAX_STRING,
)
from workbench.errors import SpecError
from workbench.spec import TrainSpec

HUGE = 10**400  # float() of it raises OverflowError


def check(fields: dict[str, Any]) -> TrainSpec:
    data = {"command": ["python", "train.py"], **fields}
    return TrainSpec.from_dict(data).validate()


def rejected(fields: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as e:
        check(fields)
    text = str(e.value)
    assert "\n" not in text and len(text) < 1000, text
    assert text.startswith(f"{e.value.field}: ")
    return e.value


@pytest.mark.parametrize("field", ["workers", "gpus", "max_retries", "procs_per_worker", "cpu"])
@pytest.mark.parametrize(
    "value", [math.inf, -math.inf, math.nan, "inf", "nan", "1e400", 1e308 * 10, HUGE, -HUGE]
)
def test_numbers_never_overflow(field, value):
    assert rejected({field: value}).field == field


@pytest.mark.parametrize("value", [math.nan, "nan", math.inf, "-inf", HUGE, "1e400"])
def test_timeout_must_be_finite(value):
    assert rejected({"timeout": value}).field == "timeout"


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ({"priority": 5}, "priority", "must be a string, got a number"),
        ({"priority": ["high"]}, "priority", "must be a string, got a list"),
        ({"queue": {"a": 1}}, "queue", "must be a string, got a mapping"),
        ({"backend": 3}, "backend", "must be a string"),
        ({"memory": ["16Gi"]}, "memory", "must be a string, got a list"),
        ({"memory": True}, "memory", "must be a string, got a boolean"),
        ({"memory": "16Gi\n"}, "memory", "control character"),
        ({"env": ["A=1"]}, "env", "must be a mapping"),
        ({"env": {"A": ["x"]}}, "env.A", "must be a string, got a list"),
        ({"env": {"A": None}}, "env.A", "must be a string, got null"),
        ({"env": {"A": math.nan}}, "env.A", "finite"),
        ({"working_dir": 7}, "working_dir", "must be a string, got a number"),
        ({"working_dir": ["/tmp"]}, "working_dir", "must be a string, got a list"),
        ({"instance_spec": ["gpu.1x"]}, "spec", "must be a string"),
        ({"image": 3}, "image", "must be a string"),
        ({"image": "reg/repo:tag\n"}, "image", "control character"),
        ({"image": "reg/re po"}, "image", "is not an image"),
        ({"runtime": ["process"]}, "runtime", "unknown runtime"),
        ({"framework": {"x": 1}}, "framework", "unknown framework"),
        ({"workers": True}, "workers", "got a boolean"),
        ({"gpus": [1]}, "gpus", "must be a number, got a list"),
        ({"data": "a:/b"}, "data", "must be a list"),
        ({"data": [{"src": 1, "dst": "/d"}]}, "data", "must be a string"),
        ({"outputs": [7]}, "outputs", "is not a mount"),
    ],
)
def test_types_are_checked(fields, field, text):
    e = rejected(fields)
    assert e.field == field
    assert text in str(e)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"command": ["python", "a\x00b"]}, "command"),
        ({"command": "python a\x00b"}, "command"),
        ({"env": {"A": "x\x00y"}}, "env.A"),
        ({"data": ["/src:/d\x00st"]}, "data"),
        ({"data": ["s3://b/x\x00:/dst"]}, "data"),
        ({"outputs": ["s3://b/x:/out\x00"]}, "outputs"),
        ({"working_dir": "/tmp/a\x00"}, "working_dir"),
        ({"priority": "hi\x00"}, "priority"),
        ({"name": "job\x00"}, "name"),
    ],
)
def test_nul_bytes_are_refused(fields, field):
    e = rejected(fields)
    assert e.field == field and "NUL" in str(e)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": "mnist\n"}, "name"),
        ({"env": {"LR\n": "1"}}, "env"),
        ({"memory": "1Gi\n"}, "memory"),
        ({"timeout": "30m\n\n"}, None),  # stripped: still a duration
    ],
)
def test_trailing_newline_is_not_a_match(fields, field):
    if field is None:
        assert check(fields).timeout == 1800
    else:
        assert rejected(fields).field == field


def test_lone_surrogates_are_refused():
    # json.loads('"\\ud800"') gives such a string; no file, env or SQLite text takes it
    assert rejected({"env": {"A": "\ud800"}}).field == "env.A"
    assert rejected({"command": ["python", "\udfff"]}).field == "command"


@pytest.mark.parametrize(
    ("fields", "field", "limit"),
    [
        ({"command": ["python", "x" * (MAX_ARG + 1)]}, "command", MAX_ARG),
        ({"command": ["python"] + ["x" * 60_000] * 5}, "command", MAX_COMMAND),
        ({"command": "python " + "x" * MAX_COMMAND}, "command", MAX_COMMAND),
        ({"env": {f"K{i}": "v" for i in range(MAX_ENV + 1)}}, "env", MAX_ENV),
        ({"env": {"A": "v" * (MAX_ENV_VALUE + 1)}}, "env.A", MAX_ENV_VALUE),
        ({"priority": "p" * (MAX_LABEL + 1)}, "priority", MAX_LABEL),
        ({"queue": "q" * 20_000_000}, "queue", MAX_SPEC),
        ({"working_dir": "/" + "d/" * MAX_STRING}, "working_dir", MAX_STRING),
        ({"data": [f"/s{i}:/d{i}" for i in range(MAX_MOUNTS + 1)]}, "data", MAX_MOUNTS),
        ({"image": "r/" + "i" * MAX_STRING}, "image", MAX_STRING),
    ],
)
def test_sizes_are_bounded_and_the_limit_is_named(fields, field, limit):
    e = rejected(fields)
    assert e.field == field
    assert f"at most {limit}" in str(e)


def test_values_at_the_limits_are_accepted():
    s = check(
        {
            "command": ["python", "x" * MAX_ARG],
            "env": {f"K{i}": "v" * 100 for i in range(MAX_ENV)},
            "priority": "p" * MAX_LABEL,
            "data": [f"/s{i}:/d{i}" for i in range(MAX_MOUNTS)],
        }
    )
    assert len(s.env) == MAX_ENV and len(s.command[1]) == MAX_ARG


def test_whole_spec_is_bounded():
    # every field within its own limit, together past MAX_SPEC
    env = {f"K{i}": "v" * MAX_ENV_VALUE for i in range(MAX_ENV)}
    e = rejected({"env": env})
    assert e.field in ("env", "spec") and f"at most {MAX_SPEC}" in str(e)


def test_a_shared_structure_costs_its_budget_not_its_expansion():
    """What YAML aliases build, from the Python API: 9**9 references to one small list."""
    node: Any = ["lol"] * 9
    for _ in range(8):
        node = [node] * 9
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as e:
            TrainSpec.from_dict({"command": ["python"], "env": {"A": node}})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"at most {MAX_SPEC}" in str(e.value) and e.value.field == "env"
    assert peak < 5_000_000


def test_deep_nesting_is_refused():
    node: Any = "x"
    for _ in range(100_000):
        node = [node]
    e = rejected({"env": {"A": node}})
    assert e.field == "env" and f"{MAX_DEPTH} levels" in str(e)


def test_scalars_people_write_in_yaml_still_work():
    s = check({"env": {"LR": 0.1, "N": 3, "DEBUG": True}, "memory": 1024, "workers": "2"})
    assert s.env == {"LR": "0.1", "N": "3", "DEBUG": "True"}
    assert s.memory == "1024" and s.workers == 2
    assert check({"workers": 2.0, "max_retries": "3", "cpu": "0.5"}).cpu == 0.5


def test_unknown_keys_are_shown_short_and_on_one_line():
    assert rejected({"wrokers": 2}).field == "wrokers"
    e = rejected({"a\nb" * 10_000: 1})
    assert e.field == "spec" and "..." in str(e)
    assert rejected({HUGE: 1}).field == "spec"


# ---- YAML files ----------------------------------------------------------------------------

LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
command: [python, train.py]
env: {A: *f}
"""


def test_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path):
    path = tmp_path / "bomb.yaml"
    path.write_text(LAUGHS)
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as e:
            TrainSpec.from_yaml(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert e.value.field == "file"
    assert "anchors/aliases" in str(e.value) and "write the values out" in str(e.value)
    assert peak < 5_000_000


@pytest.mark.parametrize(
    "text",
    [
        "command: &c [python, train.py]\n",  # an anchor alone
        "base: &b {workers: 2}\ncommand: [python]\n<<: *b\n",  # a merge key
    ],
)
def test_yaml_anchors_are_refused(tmp_path: Path, text: str):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match="anchors/aliases"):
        TrainSpec.from_yaml(path)


@pytest.mark.parametrize(
    ("content", "text"),
    [
        (b"command: [python]\n" + b"#" * MAX_SPEC_FILE, f"larger than {MAX_SPEC_FILE} bytes"),
        (b"[" * 100_000, "nests too deeply"),
        (b"command: [python\nworkers: {\n  - x", "is not valid YAML"),
        (b"command: [\xff\xfe]\n", "not UTF-8"),
        (b"command: [python]\nworkers: " + b"9" * 5000 + b"\n", "cannot build"),
        (b"command: [python]\nworkers: 2001-02-30\n", "cannot build"),
        (b"command: [python]\nenv: {A: \x00}\n", "YAML"),
    ],
)
def test_bad_yaml_files_are_one_line_errors(tmp_path: Path, content: bytes, text: str):
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError) as e:
        TrainSpec.from_yaml(path)
    assert e.value.field == "file" and text in str(e.value)
    assert "\n" not in str(e.value)


# ---- property: any value of any field is a valid spec or a one-line SpecError ------------

# Every field TrainSpec has (and its aliases), so a new field is fuzzed without a list to update.
FIELDS = [f.name for f in dataclasses.fields(TrainSpec)]

nasty_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", " ", "\x00", "a\x00", "mnist\n", "\ud800", "-1", "1e400", "nan", "inf"]),
    st.integers(1, 300_000).map(lambda n: "x" * n),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([HUGE, -HUGE, 2**63, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    nasty_text,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(nasty_text, st.integers()), inner)
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(FIELDS), value=values)
def test_any_value_is_a_spec_or_a_one_line_spec_error(field: str, value: Any):
    data: dict[str, Any] = {"command": ["python", "train.py"], field: value}
    try:
        spec = TrainSpec.from_dict(data).validate(backends=("local",))
    except SpecError as e:
        assert "\n" not in str(e) and len(str(e)) < 2000
        return
    # accepted: it must be storable as strict JSON, within the limits, with sane types
    text = json.dumps(spec.to_dict(), allow_nan=False)
    assert len(text) <= MAX_SPEC
    assert isinstance(spec.workers, int) and 1 <= spec.workers
    assert math.isfinite(spec.gpus) and (spec.cpu is None or math.isfinite(spec.cpu))
    assert all(isinstance(v, str) and "\x00" not in v for v in spec.env.values())
    for name in ("name", "memory", "priority", "queue", "backend", "working_dir"):
        v = getattr(spec, name)
        assert v is None or (isinstance(v, str) and "\x00" not in v and "\n" not in v)

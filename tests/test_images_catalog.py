"""docker/ and the catalogue agree: every Dockerfile parses (dockerfile-parse), builds the
versions the catalogue claims, installs the workbench agent as its entrypoint wrapper, and
every workbench image the catalogue names has a Dockerfile (or is marked bring-your-own)."""

from __future__ import annotations

import json
import os
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser

from tests.conftest import ROOT
from tests.containers import images
from workbench.backends._container_engine import AGENT_LABEL
from workbench.catalog import load_catalog
from workbench.monitor.stream import METRIC_PREFIX

DOCKER = ROOT / "docker"
CATALOG = yaml.safe_load((ROOT / "workbench" / "catalog.yaml").read_text())["images"]
BUILDS = images.catalogue_builds()
ENTRYPOINT = "/usr/local/bin/workbench-entrypoint"
AGENT = "python -m workbench.monitor.agent"
# The build arg that carries each framework's version, and the Python package it checks.
VERSION_ARGS = {
    "pytorch": "PYTORCH_VERSION",
    "tensorflow": "TENSORFLOW_VERSION",
    "cpu": "PYTHON_VERSION",
}


def parse(dockerfile: str) -> DockerfileParser:
    """A parser over one Dockerfile of the repo (read-only: no cache, no writes)."""
    return DockerfileParser(str(ROOT / dockerfile), cache_content=True)


def arg_defaults(parser: DockerfileParser) -> tuple[dict[str, str], dict[str, str]]:
    """(ARG defaults before the first FROM, ARG defaults after it), ``${X}`` expanded."""
    before: dict[str, str] = {}
    after: dict[str, str] = {}
    seen_from = False
    for item in parser.structure:
        if item["instruction"] == "FROM":
            seen_from = True
        elif item["instruction"] == "ARG" and "=" in item["value"]:
            key, value = item["value"].split("=", 1)
            scope = after if seen_from else before
            scope[key] = string.Template(value.strip('"')).substitute(before)
    return before, after


def base_image(parser: DockerfileParser, build_args: dict[str, str]) -> str:
    """The image a Dockerfile builds FROM with ``build_args``, as docker would resolve it."""
    before, _ = arg_defaults(parser)
    values = {**before, **build_args}
    # An ARG default may refer to earlier ones (BASE=...:${PYTORCH_VERSION}-cuda...).
    for item in parser.structure:
        if item["instruction"] == "ARG" and "=" in item["value"]:
            key, value = item["value"].split("=", 1)
            if key not in build_args:
                values[key] = string.Template(value.strip('"')).substitute(values)
        if item["instruction"] == "FROM":
            return string.Template(item["value"]).substitute(values)
    raise AssertionError(f"{parser.dockerfile_path} has no FROM")


def instructions(parser: DockerfileParser, name: str) -> list[str]:
    return [i["value"] for i in parser.structure if i["instruction"] == name]


def test_every_dockerfile_parses_and_the_catalogue_builds_it() -> None:
    files = sorted(f"docker/{p.name}" for p in DOCKER.glob("*.Dockerfile"))
    assert len(files) >= 5, files  # base; pytorch and tensorflow, each CPU and CUDA
    for f in files:
        parser = parse(f)
        assert parser.structure and instructions(parser, "FROM") == ["${BASE}"], f
    # No Dockerfile the catalogue does not name, no catalogue entry without its Dockerfile.
    assert sorted({b.dockerfile for b in BUILDS}) == files
    catalogue = load_catalog()
    for b in BUILDS:
        assert catalogue.resolve_image(f"{b.image}:{b.tag}")[0] == b.ref


@pytest.mark.parametrize("build", BUILDS, ids=lambda b: f"{b.image}:{b.tag}")
def test_dockerfile_builds_the_versions_the_catalogue_claims(build: images.Build) -> None:
    parser = parse(build.dockerfile)
    before, after = arg_defaults(parser)
    defaults = {**before, **after}
    for key, value in build.args.items():
        assert defaults.get(key) == value, (build.dockerfile, key, defaults.get(key), value)
    version = build.args[VERSION_ARGS[build.image]]
    # The tag says the version: pytorch:2.13-cpu -> ...:2.13.0-cpu; base:3.11.
    assert build.tag.split("-")[0] == ".".join(version.split(".")[:2])
    assert build.ref.startswith(
        f"localhost/workbench/{'base' if build.image == 'cpu' else build.image}:{version}"
    )
    # The build checks the version it installed against the same build arg.
    arg = VERSION_ARGS[build.image]
    assert any(f"${{{arg}}}" in run and "assert" in run for run in instructions(parser, "RUN")), (
        build
    )
    label = parser.labels.get(f"org.workbench.{build.image if build.image != 'cpu' else 'python'}")
    assert label == version  # the parser substitutes the ARG: the label says the version


@pytest.mark.parametrize("build", BUILDS, ids=lambda b: f"{b.image}:{b.tag}")
def test_cpu_variants_build_on_the_local_base_and_cuda_ones_on_official_images(
    build: images.Build,
) -> None:
    parser = parse(build.dockerfile)
    base = base_image(parser, build.args)
    if build.tag.endswith("-cuda"):
        # The official framework image the catalogue also names, at the same versions.
        assert base.startswith("docker.io/") and base in CATALOG[build.image]["tags"].values()
        for value in build.args.values():
            assert value in base, (base, build.args)
        assert (
            f"cuda{build.args['CUDA_VERSION']}" in build.ref
            if "CUDA_VERSION" in build.args
            else True
        )
    else:
        # No registry needed: `make images` builds FROM the debootstrap image.
        assert base == images.BASE_TAG
        assert build in images.cpu_builds()
    assert {b.dockerfile for b in images.cpu_builds()} == set(images.FRAMEWORK_WHEELS)


@pytest.mark.parametrize("dockerfile", sorted({b.dockerfile for b in BUILDS}))
def test_every_image_installs_workbench_and_the_agent_as_entrypoint(dockerfile: str) -> None:
    parser = parse(dockerfile)
    assert parser.labels.get(AGENT_LABEL) == AGENT  # the local runtime's cue (no double agent)
    assert json.loads(instructions(parser, "ENTRYPOINT")[-1]) == [ENTRYPOINT]
    assert f"docker/workbench-entrypoint.sh {ENTRYPOINT}" in instructions(parser, "COPY")
    assert "workbench/ /tmp/workbench-src/workbench/" in instructions(parser, "COPY")
    runs = " ".join(instructions(parser, "RUN"))
    assert "pip install $PIP_OPTIONS" in runs and "/tmp/workbench-src" in runs
    assert (
        "import" in runs and "workbench.monitor.agent" in runs
    )  # the build fails without the agent


def test_images_without_a_dockerfile_say_bring_your_own() -> None:
    readme = (DOCKER / "README.md").read_text()
    built = {b.image for b in BUILDS}
    byo = {name for name, d in CATALOG.items() if d.get("bring_your_own")}
    assert byo == {"mxnet", "mindspore"}
    assert not byo & built  # an image is either built here or brought by the user
    for name, d in CATALOG.items():
        # Every workbench-built reference has its Dockerfile; the rest are public images.
        local = {tag for tag, ref in d["tags"].items() if ref.startswith("localhost/")}
        assert local == set(d.get("builds") or {}), name
        assert name in built or name in byo, name
    byo_section = readme.split("## Bring your own", 1)[1]
    for name in byo:
        assert (
            name in byo_section.lower()
            and CATALOG[name]["tags"][CATALOG[name]["default"]] in byo_section
        )


def test_docker_readme_table_lists_what_each_image_contains() -> None:
    readme = (DOCKER / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `")]
    for b in BUILDS:
        (row,) = [r for r in rows if f"`{b.image}:{b.tag}`" in r]
        assert Path(b.dockerfile).name in row and b.ref in row
        for value in b.args.values():
            assert value in row, (row, b.args)


def test_make_images_builds_every_cpu_variant() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^images:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe and "tests.containers.images --all" in recipe.group(1)
    assert sorted(b.ref for b in images.cpu_builds()) == sorted(
        b.ref for b in BUILDS if not b.tag.endswith("-cuda")
    )


def _entrypoint(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """docker/workbench-entrypoint.sh run for real (no tty), with this checkout's workbench."""
    bindir = Path(sys.executable).parent
    environ = {
        k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "WORKBENCH_AGENT")
    }
    environ.update(PATH=f"{bindir}{os.pathsep}{environ['PATH']}", PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        ["sh", str(DOCKER / "workbench-entrypoint.sh"), *argv],
        env=environ, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _records(out: str) -> list[dict[str, object]]:
    return [
        json.loads(line.split(METRIC_PREFIX, 1)[1])
        for line in out.splitlines()
        if METRIC_PREFIX in line
    ]


def test_entrypoint_runs_the_command_under_the_agent_once() -> None:
    script = "import sys; print('hello from the job'); sys.exit(3)"
    wrapped = _entrypoint("python3", "-c", script)
    assert wrapped.returncode == 3, wrapped.stderr  # the agent hands back the exit code
    assert "hello from the job" in wrapped.stdout
    (record,) = _records(wrapped.stdout)  # the agent's monitor record: it ran under the agent
    assert record["kind"] == "monitor"
    # The local runtime already adds the agent (image label): no second one.
    again = _entrypoint(*AGENT.split(), "--", "python3", "-c", script)
    assert again.returncode == 3 and len(_records(again.stdout)) == 1, again.stdout
    bare = _entrypoint("python3", "-c", script, WORKBENCH_AGENT="0")
    assert bare.returncode == 3 and _records(bare.stdout) == []

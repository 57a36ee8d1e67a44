"""Build the CPU images of docker/ with Podman (or Docker), cached by tag between runs.

No registry is reachable from CI, so nothing is pulled: a Debian bookworm minbase with
Python comes from debootstrap (the mirror apt already uses), is imported as
``localhost/debian-py:bookworm``, and the catalogue's CPU variants (``builds`` entries in
workbench/catalog.yaml whose Dockerfile builds FROM that local base) are built on top of
it offline, every wheel fetched by the host's pip into the build context first.

``python -m tests.containers.images`` builds what the container tests need (the base and
the PyTorch CPU image); ``--all`` builds every CPU variant (``make images``).
CONTAINER_ENGINE=docker uses Docker instead of Podman.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = Path(__file__).with_name("containers.conf")
BASE_TAG = "localhost/debian-py:bookworm"
TORCH_TAG = "localhost/workbench/pytorch:2.13.0-cpu"  # what catalog.yaml's pytorch:2.13-cpu names
TORCH_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
SOURCE_LABEL = "workbench.source-hash"
# Debian packages in the base: pip to install the worker image's wheels; yaml and psutil
# are workbench's own dependencies, taken from Debian so the build needs less from PyPI.
BASE_PACKAGES = "python3,python3-pip,python3-yaml,python3-psutil,ca-certificates"


# What each CPU Dockerfile installs besides workbench, as pip requirements formatted with
# its build args; the wheels are fetched on the host, so the build needs no index.
FRAMEWORK_WHEELS = {
    "docker/base.Dockerfile": [],
    "docker/pytorch.Dockerfile": ["torch=={PYTORCH_VERSION}", "numpy"],
    "docker/tensorflow.Dockerfile": ["tensorflow-cpu=={TENSORFLOW_VERSION}"],
}


@dataclass(frozen=True)
class Build:
    """One image docker/ builds: catalogue name and tag, reference, Dockerfile, build args."""

    image: str
    tag: str
    ref: str
    dockerfile: str
    args: dict[str, str]


def catalogue_builds(path: Path = REPO / "workbench" / "catalog.yaml") -> list[Build]:
    """Every ``builds`` entry of the packaged catalogue."""
    data = yaml.safe_load(path.read_text())
    found = []
    for name, image in (data.get("images") or {}).items():
        for tag, build in (image.get("builds") or {}).items():
            args = {str(k): str(v) for k, v in (build.get("args") or {}).items()}
            found.append(Build(name, str(tag), str(image["tags"][tag]), build["dockerfile"], args))
    return found


def cpu_builds() -> list[Build]:
    """The builds that need no registry: their Dockerfile is one of FRAMEWORK_WHEELS'."""
    return [b for b in catalogue_builds() if b.dockerfile in FRAMEWORK_WHEELS]


def engine() -> str:
    """``podman`` (default) or ``docker`` (CONTAINER_ENGINE)."""
    return os.environ.get("CONTAINER_ENGINE", "podman")


def podman_env() -> dict[str, str]:
    """The environment every podman call here uses (the repo's containers.conf)."""
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(
    *args: str, check: bool = True, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS`` (or docker's); a failure raises with the engine's own message."""
    proc = subprocess.run(
        [engine(), *args],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{engine()} {' '.join(args[:3])} failed ({proc.returncode}): "
            f"{(proc.stderr or proc.stdout)[-2000:]}"
        )
    return proc


def image_exists(tag: str) -> bool:
    """True when ``tag`` is in the engine's local store."""
    return podman("image", "inspect", "--format", "{{.Id}}", tag, check=False).returncode == 0


def apt_mirror() -> str:
    """The Debian mirror apt on this host already uses (deb822 or one-line format)."""
    candidates = [Path("/etc/apt/sources.list")]
    candidates += sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    candidates += sorted(Path("/etc/apt/sources.list.d").glob("*.list"))
    for path in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        for url in re.findall(r"^\s*URIs:\s*(\S+)", text, re.M) + re.findall(
            r"^\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+\S+", text, re.M
        ):
            if "security" not in url:
                return url
    return "http://deb.debian.org/debian"


def build_base(log: list[str]) -> None:
    """Debian bookworm minbase with Python 3.11, imported as BASE_TAG (~1-2 min)."""
    if shutil.which("debootstrap") is None:
        raise RuntimeError(
            "debootstrap is missing: apt-get install -y debootstrap (`make test` does this as root)"
        )
    with tempfile.TemporaryDirectory(prefix="wb-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        t0 = time.time()
        mirror = apt_mirror()
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}",
             "bookworm", str(root), mirror],
            capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"debootstrap from {mirror} failed: {proc.stdout[-2000:]}")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(
            [engine(), "import", "--change", "CMD=/bin/bash", "-", BASE_TAG],
            stdin=tar.stdout, env=podman_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        tar.wait()
        if imp.returncode != 0:
            raise RuntimeError(f"{engine()} import failed: {imp.stderr[-2000:]}")
        log.append(f"built {BASE_TAG} by debootstrap in {time.time() - t0:.0f}s")


def torch_wheel() -> Path:
    """The local torch CPU wheel (bookworm's Python is 3.11, so the cp311 one)."""
    if TORCH_WHEEL.exists():
        return TORCH_WHEEL
    found = sorted(Path("/opt/wheels").glob("torch-2.13.0*cp311*.whl"))
    if found:
        return found[0]
    with tempfile.TemporaryDirectory() as tmp:  # pip's cache or index, one known wheel
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
             "--index-url", "https://download.pytorch.org/whl/cpu", "torch==2.13.0", "-d", tmp],
            check=True, capture_output=True, timeout=900,
        )  # fmt: skip
        wheel = next(Path(tmp).glob("torch-*.whl"))
        dest = Path(tempfile.gettempdir()) / "workbench-wheels" / wheel.name
        dest.parent.mkdir(exist_ok=True)
        shutil.move(str(wheel), dest)
        return dest


def source_hash(dockerfile: str = "docker/pytorch.Dockerfile") -> str:
    """A digest of what goes into an image from this repo (rebuild on change)."""
    h = hashlib.sha256()
    paths = [
        REPO / "pyproject.toml",
        REPO / dockerfile,
        REPO / "docker" / "workbench-entrypoint.sh",
    ]
    paths += sorted(p for p in (REPO / "workbench").rglob("*.py"))
    paths += [REPO / "workbench" / "catalog.yaml"]
    for p in paths:
        h.update(str(p.relative_to(REPO)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def image_label(tag: str, label: str) -> str:
    """One label of a local image ('' when absent)."""
    fmt = '{{ index .Labels "' + label + '" }}'
    out = podman("image", "inspect", "--format", fmt, tag, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def build_image(build: Build, log: list[str]) -> None:
    """One CPU variant from its Dockerfile on the Debian base, offline, cached by source hash."""
    digest = source_hash(build.dockerfile)
    if image_exists(build.ref) and image_label(build.ref, SOURCE_LABEL) == digest:
        return
    with tempfile.TemporaryDirectory(prefix="wb-ctx-") as tmp:
        ctx = Path(tmp)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(REPO / name, ctx / name)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "labextension")
        shutil.copytree(REPO / "workbench", ctx / "workbench", ignore=ignore)
        shutil.copytree(REPO / "jupyter-config", ctx / "jupyter-config")
        (ctx / "docker" / "wheels").mkdir(parents=True)
        shutil.copy2(REPO / build.dockerfile, ctx / build.dockerfile)
        shutil.copy2(REPO / "docker" / "workbench-entrypoint.sh", ctx / "docker")
        extra = [r.format(**build.args) for r in FRAMEWORK_WHEELS[build.dockerfile]]
        wheelhouse(ctx / "docker" / "wheels", extra)
        build_args = [f"--build-arg={k}={v}" for k, v in build.args.items()]
        t0 = time.time()
        # Offline build: every wheel is in the context (no registry or index from inside).
        podman(
            "build", f"--build-arg=BASE={BASE_TAG}", *build_args,
            "--build-arg", "PIP_OPTIONS=--no-index",
            "--label", f"{SOURCE_LABEL}={digest}", "-f", str(ctx / build.dockerfile),
            "-t", build.ref, str(ctx), timeout=1800,
        )  # fmt: skip
        log.append(f"built {build.ref} from {build.dockerfile} in {time.time() - t0:.0f}s")


def build_torch(log: list[str]) -> None:
    """The PyTorch CPU worker image (what the container tests run jobs in)."""
    (build,) = [b for b in cpu_builds() if b.ref == TORCH_TAG]
    build_image(build, log)


def workbench_requirements() -> list[str]:
    """workbench's own dependencies, from pyproject.toml."""
    import tomllib

    return list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])


def wheelhouse(dest: Path, extra: list[str]) -> None:
    """Every wheel an image installs, fetched by the host's pip (its index/proxy): ``extra``
    (the framework; the local torch CPU wheel is found first), workbench's dependencies,
    and hatchling to build workbench itself."""
    find_links = []
    if any(r.startswith("torch==") for r in extra):
        find_links = ["--find-links", str(torch_wheel().parent)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
         "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
         "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
         "--implementation", "cp", "--abi", "cp311", *find_links,
         "-d", str(dest), *extra, *workbench_requirements(), "hatchling"],
        check=True, capture_output=True, timeout=1800,
    )  # fmt: skip


def ensure_images(everything: bool = False) -> list[str]:
    """Build whatever is missing or stale (the test images, or ``everything`` CPU);
    returns what was built and how long it took."""
    log: list[str] = []
    if not image_exists(BASE_TAG):
        build_base(log)
    if everything:
        for build in cpu_builds():
            build_image(build, log)
    else:
        build_torch(log)
    return log


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every CPU variant (make images)")
    ns = parser.parse_args()
    for line in ensure_images(everything=ns.all) or ["images up to date"]:
        print(line)

"""Build the images the container tests need with Podman, cached by tag between runs.

No registry is reachable from CI, so nothing is pulled: a Debian bookworm minbase with
Python comes from debootstrap (the mirror apt already uses), is imported as
``localhost/debian-py:bookworm``, and the PyTorch CPU worker image is built on top of it
from docker/pytorch.Dockerfile with the local torch wheel. ``python -m
tests.containers.images`` warms the cache by hand.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = Path(__file__).with_name("containers.conf")
BASE_TAG = "localhost/debian-py:bookworm"
TORCH_TAG = "localhost/workbench/pytorch:2.13.0-cpu"  # what catalog.yaml's pytorch:2.13-cpu names
TORCH_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
SOURCE_LABEL = "workbench.source-hash"
# Debian packages in the base: pip to install the worker image's wheels; yaml and psutil
# are workbench's own dependencies, taken from Debian so the build needs less from PyPI.
BASE_PACKAGES = "python3,python3-pip,python3-yaml,python3-psutil,ca-certificates"


def podman_env() -> dict[str, str]:
    """The environment every podman call here uses (the repo's containers.conf)."""
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(
    *args: str, check: bool = True, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS``; a failure raises with podman's own message."""
    proc = subprocess.run(
        ["podman", *args],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"podman {' '.join(args[:3])} failed ({proc.returncode}): "
            f"{(proc.stderr or proc.stdout)[-2000:]}"
        )
    return proc


def image_exists(tag: str) -> bool:
    """True when ``tag`` is in podman's local store."""
    return podman("image", "exists", tag, check=False).returncode == 0


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
            ["podman", "import", "--change", "CMD=/bin/bash", "-", BASE_TAG],
            stdin=tar.stdout, env=podman_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        tar.wait()
        if imp.returncode != 0:
            raise RuntimeError(f"podman import failed: {imp.stderr[-2000:]}")
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


def source_hash() -> str:
    """A digest of what goes into the worker image from this repo (rebuild on change)."""
    h = hashlib.sha256()
    paths = [REPO / "pyproject.toml", REPO / "docker" / "pytorch.Dockerfile"]
    paths += sorted(p for p in (REPO / "workbench").rglob("*.py"))
    for p in paths:
        h.update(str(p.relative_to(REPO)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def image_label(tag: str, label: str) -> str:
    """One label of a local image ('' when absent)."""
    fmt = '{{ index .Labels "' + label + '" }}'
    out = podman("image", "inspect", "--format", fmt, tag, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def build_torch(log: list[str]) -> None:
    """The PyTorch CPU worker image from docker/pytorch.Dockerfile on the Debian base."""
    digest = source_hash()
    if image_exists(TORCH_TAG) and image_label(TORCH_TAG, SOURCE_LABEL) == digest:
        return
    with tempfile.TemporaryDirectory(prefix="wb-ctx-") as tmp:
        ctx = Path(tmp)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(REPO / name, ctx / name)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "labextension")
        shutil.copytree(REPO / "workbench", ctx / "workbench", ignore=ignore)
        shutil.copytree(REPO / "jupyter-config", ctx / "jupyter-config")
        (ctx / "docker" / "wheels").mkdir(parents=True)
        shutil.copy2(REPO / "docker" / "pytorch.Dockerfile", ctx / "docker")
        wheelhouse(ctx / "docker" / "wheels")
        t0 = time.time()
        # Offline build: every wheel is in the context (no registry or index from inside).
        podman(
            "build", "--build-arg", f"BASE_IMAGE={BASE_TAG}",
            "--build-arg", "PIP_OPTIONS=--no-index --no-build-isolation",
            "--label", f"{SOURCE_LABEL}={digest}", "-f", str(ctx / "docker" / "pytorch.Dockerfile"),
            "-t", TORCH_TAG, str(ctx), timeout=1800,
        )  # fmt: skip
        log.append(f"built {TORCH_TAG} in {time.time() - t0:.0f}s")


def wheelhouse(dest: Path) -> None:
    """Every wheel the worker image installs, fetched by the host's pip (its index/proxy):
    the local torch CPU wheel, torch's and workbench's dependencies, and hatchling to build
    workbench itself. Debian already provides PyYAML and psutil."""
    wheel = torch_wheel()
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
         "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
         "--implementation", "cp", "--abi", "cp311", "--find-links", str(wheel.parent),
         "-d", str(dest), "torch==2.13.0", "numpy", "nvidia-ml-py", "hatchling"],
        check=True, capture_output=True, timeout=900,
    )  # fmt: skip


def ensure_images() -> list[str]:
    """Build whatever is missing or stale; returns what was built and how long it took."""
    log: list[str] = []
    if not image_exists(BASE_TAG):
        build_base(log)
    build_torch(log)
    return log


if __name__ == "__main__":
    for line in ensure_images() or ["images up to date"]:
        print(line)

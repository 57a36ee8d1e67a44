"""A real container engine for the container tests: a Podman service on a private socket.

The session fixture builds the images the tests need (cached by tag, see images.py) and
starts ``podman system service`` on a socket in a temp dir, stopped by PID at the end.
Without podman the tests fail with the fix, never skip: the container runtime is a product
feature, and `make test` installs podman (its system-deps target).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containers import images

SERVICE_START_TIMEOUT = 30.0


def _require_podman() -> None:
    if shutil.which("podman") is None:
        pytest.fail(
            "podman is not installed, so the container runtime cannot be tested. Install it "
            "with `apt-get install -y podman runc debootstrap` (`make test` does this as root).",
            pytrace=False,
        )
    probe = images.podman("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False)
    if probe.returncode != 0:
        pytest.fail(f"podman cannot run here: {probe.stderr.strip()[-800:]}", pytrace=False)


@pytest.fixture(scope="session")
def podman_images() -> list[str]:
    """Build (or find cached) localhost/debian-py:bookworm and the PyTorch CPU worker image."""
    _require_podman()
    try:
        return images.ensure_images()
    except Exception as e:
        pytest.fail(f"could not build the test images: {e}", pytrace=False)


@pytest.fixture(scope="session")
def podman_socket(podman_images: list[str]) -> Iterator[str]:
    """``unix://.../podman.sock`` of a Podman service for this session (Docker Engine API)."""
    tmp = Path(tempfile.mkdtemp(prefix="wb-podman-"))
    sock = tmp / "podman.sock"
    url = f"unix://{sock}"
    log = open(tmp / "service.log", "wb")
    proc = subprocess.Popen(
        ["podman", "system", "service", "--time=0", url],
        env=images.podman_env(),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for_engine(url, proc, tmp / "service.log")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_for_engine(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    import docker

    deadline = time.time() + SERVICE_START_TIMEOUT
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"podman system service exited: {log.read_text()[-800:]}", pytrace=False)
        if os.path.exists(url[len("unix://") :]):
            try:
                client = docker.DockerClient(base_url=url, timeout=5)
                client.ping()
                client.close()
                return
            except Exception:
                pass
        time.sleep(0.1)
    pytest.fail(f"podman system service did not answer on {url} in {SERVICE_START_TIMEOUT:g}s")


@pytest.fixture
def engine(podman_socket: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point this test (and the supervisors it starts) at the session's Podman service."""
    monkeypatch.setenv("DOCKER_HOST", podman_socket)
    monkeypatch.setenv("CONTAINERS_CONF", str(images.CONTAINERS_CONF))
    return podman_socket


@pytest.fixture
def docker_client(podman_socket: str) -> Iterator[object]:
    """A docker SDK client on the session's engine (to look for leftovers by label)."""
    import docker

    client = docker.DockerClient(base_url=podman_socket, timeout=60)
    yield client
    client.close()

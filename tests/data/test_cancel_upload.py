"""Cancel never cuts off the output upload: a slow store keeps the supervisor, not the ranks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from tests.conftest import job_processes, wait_for
from tests.data.conftest import free_port
from workbench.spec import JobStatus, Mount, TrainSpec

JOB = "open('ckpt/model.txt', 'w').write('weights')\nprint('saved', flush=True)\nimport time; time.sleep(600)\n"


@pytest.fixture
def own_moto(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """moto in a process of its own, so the test can freeze it (SIGSTOP) mid-upload."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _listening(port), 30, "moto to listen")
        for k in list(os.environ):
            if k.startswith("AWS_"):
                monkeypatch.delenv(k)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket="outputs")
        yield proc, s3
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=30)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def test_cancel_during_a_slow_upload_loses_nothing(manager, own_moto, tmp_path: Path) -> None:
    proc, s3 = own_moto
    (tmp_path / "job.py").write_text(JOB)
    spec = TrainSpec(command=["python", "job.py"], working_dir=str(tmp_path), name="slowup",
                     outputs=[Mount("s3://outputs/run1", "ckpt", "rw")])  # fmt: skip
    manager.submit(spec)
    wait_for(lambda: "saved" in list(manager.logs("slowup")), 60, "the checkpoint")
    proc.send_signal(signal.SIGSTOP)  # the store stops answering: the upload will hang
    try:
        started = time.time()
        manager.cancel("slowup", wait=0)  # asks and returns at once
        assert time.time() - started < 5
        wait_for(lambda: job_processes("slowup") == [], 30, "every rank gone")
        # The supervisor is still sending outputs to the stalled store: not killed.
        assert not manager.get("slowup").status.terminal
        row = manager.backend().store.row("slowup")
        assert row is not None and row["cancel_requested"] == 1
    finally:
        proc.send_signal(signal.SIGCONT)
    record = manager.wait("slowup", timeout=120)
    assert record.status is JobStatus.CANCELLED
    body = s3.get_object(Bucket="outputs", Key="run1/model.txt")["Body"].read()
    assert body == b"weights"

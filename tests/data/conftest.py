"""Real object stores on 127.0.0.1: moto's S3 server, and the OSS bridge in front of it."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import boto3
import pytest

from tests.fakes.oss_proxy import OssProxy

OSS_KEY = "oss-test-key"
OSS_SECRET = "oss-test-secret-value"  # a test credential for the local bridge


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's ThreadedMotoServer on 127.0.0.1, one per test session."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A boto3 S3 client; the process env points s3fs (and jobs) at moto."""
    for k in list(os.environ):
        if k.startswith(("AWS_", "OSS_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing-secret")  # fmt: skip


@pytest.fixture
def bucket(s3) -> str:  # type: ignore[no-untyped-def]
    """A fresh, empty bucket."""
    name = f"wb-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def oss_endpoint(moto_endpoint: str) -> Iterator[str]:
    """An OSS-protocol endpoint (stateless bridge over the moto server)."""
    proxy = OssProxy(moto_endpoint, access_key=OSS_KEY).start()
    yield proxy.endpoint
    proxy.stop()


@pytest.fixture
def oss(s3, oss_endpoint: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """OSS credentials/endpoint in the env; returns the boto3 client on the same data."""
    monkeypatch.setenv("OSS_ACCESS_KEY_ID", OSS_KEY)
    monkeypatch.setenv("OSS_ACCESS_KEY_SECRET", OSS_SECRET)
    monkeypatch.setenv("OSS_ENDPOINT", oss_endpoint)
    return s3


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def moto_with_auth() -> Iterator[dict[str, str]]:
    """A second moto server (own process) that enforces IAM after its first 4 actions.

    Those 4 set up a bucket with one object and a user with keys but no policy, so
    unknown keys get InvalidAccessKeyId and that user gets AccessDenied.
    """
    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "4"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        kw = {"endpoint_url": endpoint, "region_name": "us-east-1",
              "aws_access_key_id": "setup", "aws_secret_access_key": "setup"}  # fmt: skip
        s3 = boto3.client("s3", **kw)
        s3.create_bucket(Bucket="locked")
        s3.put_object(Bucket="locked", Key="x/a.txt", Body=b"secret data")
        iam = boto3.client("iam", **kw)
        iam.create_user(UserName="nobody")
        key = iam.create_access_key(UserName="nobody")["AccessKey"]
        yield {"endpoint": endpoint, "key": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
    finally:
        proc.terminate()
        proc.wait(10)

"""Fixtures for the Kubernetes tests: a fake API server and official clients aimed at it."""

from __future__ import annotations

from collections.abc import Iterator

import kubernetes  # the test extra installs it: a missing client fails, never skips
import pytest

from tests.fakes.kube_apiserver import FakeKubeAPIServer


@pytest.fixture
def kube_fake() -> Iterator[FakeKubeAPIServer]:
    """A running fake API server (stopped after the test)."""
    fake = FakeKubeAPIServer().start()
    yield fake
    fake.stop()


@pytest.fixture
def api_client(kube_fake: FakeKubeAPIServer) -> Iterator[kubernetes.client.ApiClient]:
    """The official client's ApiClient, configured for the fake."""
    config = kubernetes.client.Configuration(host=kube_fake.url)
    with kubernetes.client.ApiClient(config) as client:
        yield client

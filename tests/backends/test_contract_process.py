"""The BackendContract on the local backend's process runtime."""

from __future__ import annotations

import pytest

from tests.backends.contract import BackendContract
from workbench.manager import JobManager


class TestProcessContract(BackendContract):
    """Every contract case, each rank a local process."""

    runtime = "process"

    @pytest.fixture
    def jobs(self, manager: JobManager) -> JobManager:
        """The test's private manager (conftest), local backend."""
        return manager

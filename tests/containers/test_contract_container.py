"""The BackendContract on the local backend's container runtime (the session's Podman),
plus what only a container must do."""

from __future__ import annotations

import pytest

from tests.backends.contract import BackendContract
from workbench.manager import JobManager
from workbench.spec import JobStatus

pytestmark = pytest.mark.timeout(1800)  # the first run builds the images (minutes)


class TestContainerContract(BackendContract):
    """Every contract case, each rank a Podman container."""

    runtime = "container"

    @pytest.fixture
    def jobs(self, manager: JobManager, engine: str) -> JobManager:
        """The test's private manager, its supervisors pointed at the session's Podman."""
        return manager

    def test_host_virtualenv_stays_on_the_host(self, jobs: JobManager) -> None:
        code = "import os\nprint('VENV=' + os.environ.get('VIRTUAL_ENV', '-'))"
        self.submit(jobs, ["python", "-c", code], name="venv")
        done = self.finish(jobs, "venv")
        assert done.status is JobStatus.SUCCEEDED, done.message
        for rank in (0, 1):
            assert list(jobs.logs("venv", rank=rank)) == ["VENV=-"]

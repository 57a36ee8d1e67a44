"""The live view's feed reads metrics only through JobManager.metrics, incrementally: a
poll costs the records reported since the last one, and a flood is sampled, not read."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.conftest import wait_for
from workbench.monitor.metrics import MAX_BACKLOG, READ_CHUNK, read_job_metrics
from workbench.spec import JobStatus, TrainSpec
from workbench.widgets._feed import JobFeed

SCRIPT = """
import os, time
from workbench import run
go = os.environ["GO_FILE"]
for i in range(1, 4):
    run.log(step=i, total=6, loss=1.0 / i)
run.flush()
while not os.path.exists(go):
    time.sleep(0.05)
for i in range(4, 7):
    run.log(step=i, total=6, loss=1.0 / i)
"""


class CountingManager:
    """The real manager, counting the records each metrics() call hands back."""

    def __init__(self, manager) -> None:
        self.manager = manager
        self.calls: list[tuple[str | None, int]] = []

    def __getattr__(self, name):
        return getattr(self.manager, name)

    def metrics(self, name, limit=None, since=None):
        got = self.manager.metrics(name, limit=limit, since=since)
        self.calls.append((since, len(got["scalars"]) + len(got["gpu"])))
        return got


def test_feed_polls_read_only_new_records_through_the_manager(manager, tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    go = tmp_path / "go"
    spec = {"command": ["python", str(tmp_path / "s.py")], "name": "feed",
            "env": {"GO_FILE": str(go), "WORKBENCH_RUN_INTERVAL": "0"}}  # fmt: skip
    manager.submit(TrainSpec.from_dict(spec))
    counting = CountingManager(manager)
    feed = JobFeed(counting, "feed")  # type: ignore[arg-type]
    wait_for(lambda: feed.poll() and feed.progress.step == 3, 60, "the first three steps")
    assert feed.series["loss"].steps == [1.0, 2.0, 3.0]
    counting.calls.clear()
    feed.poll()
    feed.poll()
    assert [n for _, n in counting.calls] == [0, 0]  # nothing new: nothing read again
    assert all(since for since, _ in counting.calls)  # each poll passes the last cursor
    go.write_text("")
    assert manager.wait("feed", timeout=60).status is JobStatus.SUCCEEDED
    counting.calls.clear()
    feed.poll()
    assert [n for _, n in counting.calls] == [3]
    assert feed.series["loss"].steps == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert feed.progress.step == 6 and feed.progress.total == 6


def test_an_incremental_read_of_a_flood_costs_a_bounded_chunk(tmp_path):
    folder = tmp_path / "metrics"
    folder.mkdir()
    line = json.dumps({"time": 1.0, "rank": 0, "step": 0, "total": None, "loss": 0.5}) + "\n"
    n = (MAX_BACKLOG * 3) // len(line)
    (folder / "scalars-rank0.jsonl").write_text(line * n)
    started = time.process_time()
    got = read_job_metrics(tmp_path, since="")
    took = time.process_time() - started
    # Only the newest READ_CHUNK bytes are parsed (whole lines), not 12 MiB.
    assert 0 < len(got["scalars"]) <= READ_CHUNK // len(line)
    assert got["cursor"] == f"scalars-rank0.jsonl={len(line) * n}"
    assert read_job_metrics(tmp_path, since=got["cursor"])["scalars"] == []
    assert took < 1.0
    # A torn last line waits for its newline.
    with open(folder / "scalars-rank0.jsonl", "a") as f:
        f.write(line + line[:10])
    more = read_job_metrics(tmp_path, since=got["cursor"])
    assert len(more["scalars"]) == 1
    assert more["cursor"] == f"scalars-rank0.jsonl={len(line) * (n + 1)}"


def test_a_bad_cursor_is_a_spec_error_naming_since(manager, tmp_path):
    import pytest

    from workbench.errors import SpecError

    (tmp_path / "m").mkdir()
    with pytest.raises(SpecError, match="since"):
        read_job_metrics(Path(tmp_path), since="../../etc/passwd=0")

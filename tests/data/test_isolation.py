"""Two jobs, one working dir, one relative DST: a live job's data is never swapped under it.

Real jobs under the detached supervisor. The first job reads its DST, waits for the test,
reads it again; a second job asking for the same DST must be refused naming the first,
and once the first has ended (or been deleted) a third takes the DST over.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import wait_for
from workbench.data.staging import JobData, link_owner, store_active
from workbench.errors import MountError
from workbench.spec import Mount, TrainSpec

# Reads inp/file.txt, waits for the test's go-file, reads it again: both reads go to seen-TAG.
READER = """
import pathlib, sys, time
tag = sys.argv[1]
seen = pathlib.Path(f"seen-{tag}.txt")
seen.write_text(pathlib.Path("inp/file.txt").read_text() + "\\n")
while not pathlib.Path(f"go-{tag}").exists():
    time.sleep(0.05)
seen.write_text(seen.read_text() + pathlib.Path("inp/file.txt").read_text() + "\\n")
"""


def _spec(work: Path, src: str, tag: str) -> TrainSpec:
    return TrainSpec(command=["python", "reader.py", tag], working_dir=str(work),
                     data=[Mount(src, "inp")])  # fmt: skip


def _reads(work: Path, tag: str) -> list[str]:
    return (work / f"seen-{tag}.txt").read_text().split()


def _started(manager, work: Path, name: str, tag: str) -> None:  # type: ignore[no-untyped-def]
    def first_read_done() -> bool:
        assert not manager.get(name).status.terminal, manager.get(name).message
        return (work / f"seen-{tag}.txt").exists()

    wait_for(first_read_done, timeout=90, what=f"job {name} to read its data")


def _finish(manager, work: Path, name: str, tag: str):  # type: ignore[no-untyped-def]
    (work / f"go-{tag}").touch()
    record = manager.wait(name, timeout=90)
    assert record.status.value == "Succeeded", (record.message, [e.message for e in record.events])
    return record


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The shared working directory with the reader script."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "reader.py").write_text(READER)
    return folder


def _local_sources(tmp_path: Path) -> tuple[str, str]:
    for tag in ("A", "B"):
        (tmp_path / f"src{tag}").mkdir()
        (tmp_path / f"src{tag}" / "file.txt").write_text(f"data-{tag}")
    return str(tmp_path / "srcA"), str(tmp_path / "srcB")


def test_live_job_keeps_its_local_dst(manager, work: Path, tmp_path: Path) -> None:
    """Local sources: the second job is refused naming the first; after the first is
    deleted (its link now dangles) a third job reclaims the DST and reads its own data."""
    src_a, src_b = _local_sources(tmp_path)
    first = manager.submit(_spec(work, src_a, "1"))
    _started(manager, work, first.name, "1")

    with pytest.raises(MountError, match=f"in use by job '{first.name}'"):
        manager.submit(_spec(work, src_b, "2"))
    assert [r.name for r in manager.list()] == [first.name]  # nothing half-created

    _finish(manager, work, first.name, "1")
    assert _reads(work, "1") == ["data-A", "data-A"]  # never swapped mid-run

    manager.delete(first.name)  # the link into its folder now dangles: stale, reclaimed
    third = manager.submit(_spec(work, src_b, "3"))
    _started(manager, work, third.name, "3")
    _finish(manager, work, third.name, "3")
    assert _reads(work, "3") == ["data-B", "data-B"]
    assert link_owner(work / "inp", Path(os.environ["WORKBENCH_HOME"])) == third.name


def test_live_job_keeps_its_object_store_dst(manager, s3, bucket: str, work: Path) -> None:
    """Object-store sources: the same DST from another prefix is refused while the first
    job runs, and taken over by a third job once the first has finished."""
    for tag in ("A", "B"):
        s3.put_object(Bucket=bucket, Key=f"{tag}/file.txt", Body=f"data-{tag}".encode())
    first = manager.submit(_spec(work, f"s3://{bucket}/A", "1"))
    _started(manager, work, first.name, "1")

    with pytest.raises(MountError, match=f"in use by job '{first.name}'"):
        manager.submit(_spec(work, f"s3://{bucket}/B", "2"))

    _finish(manager, work, first.name, "1")
    assert _reads(work, "1") == ["data-A", "data-A"]

    third = manager.submit(_spec(work, f"s3://{bucket}/B", "3"))  # finished job: reclaimed
    _started(manager, work, third.name, "3")
    _finish(manager, work, third.name, "3")
    assert _reads(work, "3") == ["data-B", "data-B"]


def test_staging_refuses_a_dst_taken_after_submit(manager, work: Path, tmp_path: Path) -> None:
    """Two jobs can both pass the submit check before either stages; the one that stages
    second is refused under the lock, and the live job's link is left as it was."""
    src_a, src_b = _local_sources(tmp_path)
    first = manager.submit(_spec(work, src_a, "1"))
    _started(manager, work, first.name, "1")
    link_before = os.readlink(work / "inp")

    home = Path(os.environ["WORKBENCH_HOME"])
    job_dir = home / "jobs" / "late-job"
    job_dir.mkdir()
    store = manager.backend("local").store
    late = JobData(_spec(work, src_b, "2"), job_dir, home, active=store_active(store))
    with pytest.raises(MountError, match=f"in use by job '{first.name}'"):
        late.stage()
    assert os.readlink(work / "inp") == link_before
    _finish(manager, work, first.name, "1")
    assert _reads(work, "1") == ["data-A", "data-A"]


def test_users_own_files_and_links_are_never_taken(manager, work: Path, tmp_path: Path) -> None:
    """A DST that is the user's folder or a link workbench did not make stays refused."""
    src_a, _ = _local_sources(tmp_path)
    (work / "inp").symlink_to(tmp_path / "srcB")
    with pytest.raises(MountError, match="symlink workbench did not make"):
        manager.submit(_spec(work, src_a, "1"))
    (work / "inp").unlink()
    (work / "inp").mkdir()
    with pytest.raises(MountError, match="already exists"):
        manager.submit(_spec(work, src_a, "1"))

"""JobManager without HTTP: paging and counts come from the store, not from loading all."""

from __future__ import annotations

from workbench.spec import JobRecord, JobStatus


def test_page_and_counts(manager):
    store = manager.backend().store
    for i in range(7):
        status = JobStatus.SUCCEEDED if i % 2 else JobStatus.FAILED
        store.insert(JobRecord(name=f"j{i}", status=status, backend="local", spec={"workers": 1},
                               image="img", created_at=100.0 + i))  # fmt: skip
    records, total = manager.page(limit=3, offset=2)
    assert [r.name for r in records] == ["j4", "j3", "j2"] and total == 7
    records, total = manager.page(status=["Succeeded"], limit=2)
    assert [r.name for r in records] == ["j5", "j3"] and total == 3
    assert manager.counts() == {
        "Pending": 0,
        "Running": 0,
        "Succeeded": 3,
        "Failed": 4,
        "Cancelled": 0,
    }
    assert [r.name for r in manager.list(limit=2)] == ["j6", "j5"]

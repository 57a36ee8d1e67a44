"""A minimal second backend for routing tests: it runs nothing, it only keeps its jobs in
the JobManager's store (as a cluster backend would after creating its objects) and notes
every call, so a test can tell which backend the manager routed to."""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Iterator

from workbench.backends.base import Backend, NodeInfo, rank_prefixed
from workbench.catalog import Catalog
from workbench.errors import JobNotFoundError, SpecError
from workbench.plan import Plan
from workbench.settings import Settings
from workbench.spec import JobEvent, JobRecord, JobStatus, RankState, TrainSpec
from workbench.store import JobStore


class LedgerBackend(Backend):
    """Jobs as rows only; cancel ends them at once; logs are the job's events."""

    name = "ledger"

    def __init__(
        self,
        settings: Settings | None = None,
        catalog: Catalog | None = None,
        store: JobStore | None = None,
    ) -> None:
        if store is None:
            raise TypeError("LedgerBackend needs the manager's store")
        self.store = store
        self.calls: builtins.list[tuple[str, str]] = []

    def _record(self, name: str) -> JobRecord:
        record = self.store.get(name)
        if record is None or record.backend != self.name:
            raise JobNotFoundError(self.name, name)
        return record

    def admit(self, spec: TrainSpec) -> Plan:
        """Check the name only (a ledger has room for everything); nothing is written."""
        assert spec.name is not None
        self.validate_options(spec.backend_options)
        self.calls.append(("admit", spec.name))
        if self.store.exists(spec.name):
            raise SpecError("name", f"a job named {spec.name!r} already exists", "pick another")
        return Plan(
            backend=self.name, name=spec.name, spec=spec, runtime="ledger", image=spec.image
        )

    def launch(self, plan: Plan) -> JobRecord:
        """Record the job Pending, with a made-up object name in its details."""
        spec = plan.spec
        self.calls.append(("submit", plan.name))
        self.store.insert(
            JobRecord(
                name=plan.name,
                status=JobStatus.PENDING,
                backend=self.name,
                spec=spec.redacted().to_dict(),
                image=spec.image,
                details={"object": f"ledger/{plan.name}"},
                events=[JobEvent(time.time(), "Submitted", "noted in the ledger")],
            )
        )
        return self._record(plan.name)

    def get(self, name: str) -> JobRecord:
        """The stored record."""
        self.calls.append(("get", name))
        return self._record(name)

    def reconcile(self) -> int:
        """Nothing runs, so nothing drifts."""
        self.calls.append(("reconcile", ""))
        return 0

    def cancel(self, name: str, wait: float = 30.0) -> JobRecord:
        """End the job at once."""
        self.calls.append(("cancel", name))
        self._record(name)
        self.store.finish_if_active(
            name,
            JobStatus.CANCELLED,
            "cancelled by user",
            JobEvent(time.time(), "Cancelled", "cancelled by user", "warning"),
            RankState.STOPPED,
        )
        return self._record(name)

    def logs(
        self,
        name: str,
        rank: int | None = 0,
        follow: bool = False,
        tail: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[str]:
        """The job's event reasons, as rank 0's output."""
        self.calls.append(("logs", name))
        if rank not in (None, 0):
            raise SpecError("rank", f"job {name!r} has rank 0 only", f"got {rank}")
        lines = [e.reason for e in self._record(name).events]
        return iter([rank_prefixed(0, x) for x in lines] if rank is None else lines)

    def delete(self, name: str) -> None:
        """Forget the job."""
        self.calls.append(("delete", name))
        self._record(name)
        self.store.delete(name)

    def rerun_spec(self, name: str) -> TrainSpec:
        """The stored spec."""
        spec = TrainSpec.from_dict(self._record(name).spec)
        spec.name = None
        return spec

    def nodes(self) -> builtins.list[NodeInfo]:
        """No hosts."""
        return []

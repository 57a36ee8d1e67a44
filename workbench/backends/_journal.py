"""The local backend's JobJournal: one job's rows in the JobStore."""

from __future__ import annotations

from ..spec import JobEvent
from ..store import JobStore


class StoreJournal:
    """Writes a job's message and events to the store; reads its ranks' pids from it."""

    def __init__(self, store: JobStore, name: str) -> None:
        self.store = store
        self.name = name

    def set_message(self, text: str) -> None:
        """Replace the job's message column."""
        self.store.update(self.name, message=text)

    def add_event(self, event: JobEvent) -> None:
        """Append an event to the job."""
        self.store.add_event(self.name, event)

    def rank_pids(self) -> dict[int, int]:
        """Lead pid of each rank that has one (a rank restarts with a new pid on a retry)."""
        rows = self.store.rank_rows(self.name)
        return {r["details"]["pid"]: r["rank"] for r in rows if r["details"].get("pid")}

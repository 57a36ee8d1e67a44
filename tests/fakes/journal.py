"""An in-memory JobJournal: what a backend hands staging and the GPU recorder, kept in lists."""

from __future__ import annotations

from workbench.spec import JobEvent


class ListJournal:
    """A JobJournal that keeps what it is told."""

    def __init__(self, pids: dict[int, int] | None = None) -> None:
        self.messages: list[str] = []
        self.events: list[JobEvent] = []
        self.pids = pids or {}

    def set_message(self, text: str) -> None:
        self.messages.append(text)

    def add_event(self, event: JobEvent) -> None:
        self.events.append(event)

    def rank_pids(self) -> dict[int, int]:
        return dict(self.pids)

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]

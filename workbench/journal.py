"""What a job's in-process helpers (data staging, the GPU recorder) may say about the job.

The backend that runs the job passes one in; the helpers never see its supervisor or store.
"""

from __future__ import annotations

from typing import Protocol

from .spec import JobEvent

__all__ = ["JobJournal"]


class JobJournal(Protocol):
    """One job's progress line, events and rank processes, as its backend records them."""

    def set_message(self, text: str) -> None:
        """Replace the job's one-line progress message ("" clears it)."""

    def add_event(self, event: JobEvent) -> None:
        """Append an event to the job's history."""

    def rank_pids(self) -> dict[int, int]:
        """``{lead process id: rank}`` for the ranks running now (empty when unknown)."""

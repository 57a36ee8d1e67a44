"""Bridging a blocking line iterator (``JobManager.logs``) onto the event loop.

Each follower gets one reader thread that pulls lines and hands them over in batches,
so a slow log file or a sleeping ``follow`` never occupies the event loop or the shared
API thread pool, and the loop is woken once per batch rather than once per line.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator


class LineFeed:
    """Lines produced by a reader thread, consumed as batches by a coroutine."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._lines: deque[str] = deque()
        self._ready = asyncio.Event()
        self._done = False
        self.error: BaseException | None = None
        self.stopped = threading.Event()

    def _wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the loop is closed: the server is going away
            self.stopped.set()

    def put(self, line: str) -> None:
        """Add a line (reader thread); wakes the consumer only when the buffer was empty."""
        with self._lock:
            was_empty = not self._lines
            self._lines.append(line)
        if was_empty:
            self._wake()

    def close(self, error: BaseException | None = None) -> None:
        """No more lines (reader thread)."""
        with self._lock:
            self._done = True
            self.error = error
        self._wake()

    async def batches(self) -> AsyncIterator[list[str]]:
        """Lists of lines as they arrive, until the reader closes the feed."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            with self._lock:
                batch = list(self._lines)
                self._lines.clear()
                done = self._done
            if batch:
                yield batch
            if done:
                return


def start_reader(lines: Iterator[str], feed: LineFeed, name: str) -> threading.Thread:
    """Pump ``lines`` into ``feed`` on a daemon thread until exhausted or ``feed.stopped``."""

    def pump() -> None:
        error: BaseException | None = None
        try:
            for line in lines:
                if feed.stopped.is_set():
                    break
                feed.put(line)
        except (
            Exception
        ) as e:  # handed to the handler, which logs it; the thread must not die silently
            error = e
        finally:
            close = getattr(lines, "close", None)
            if close is not None:
                close()
            feed.close(error)

    thread = threading.Thread(target=pump, name=name, daemon=True)
    thread.start()
    return thread

"""Bridging a blocking line iterator (``JobManager.logs``) onto the event loop, bounded.

Each log stream gets one reader thread that pulls lines and hands them over in batches,
so a slow log file or a sleeping ``follow`` never occupies the event loop or the shared
API thread pool, and the loop is woken once per batch rather than once per line. The feed
holds at most ``FEED_LIMIT`` characters: when the client reads slowly the handler's
``flush`` waits, the feed fills and the reader thread blocks, so a follower costs the
server a bounded amount of memory however big the log is.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator

FEED_LIMIT = 1024 * 1024  # characters buffered per stream before the reader waits


class LineFeed:
    """Lines produced by a reader thread, consumed as batches by a coroutine; bounded."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int = FEED_LIMIT) -> None:
        self._loop = loop
        self.limit = limit
        self._cond = threading.Condition()
        self._lines: deque[str] = deque()
        self.buffered = 0  # characters waiting for the consumer
        self.peak = 0  # the most ever waiting (what tests and benchmarks read)
        self._ready = asyncio.Event()
        self._done = False
        self.error: BaseException | None = None
        self.stopped = threading.Event()  # the client went away: the reader should end

    def _wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the loop is closed: the server is going away
            self.stop()

    def stop(self) -> None:
        """The consumer is gone (any thread): unblock and end the reader."""
        self.stopped.set()
        with self._cond:
            self._cond.notify_all()

    def put(self, line: str) -> bool:
        """Add a line (reader thread), waiting while the feed is full; False once stopped."""
        with self._cond:
            while self.buffered >= self.limit and not self.stopped.is_set():
                self._cond.wait(0.5)  # the timeout only guards against a missed notify
            if self.stopped.is_set():
                return False
            was_empty = not self._lines
            self._lines.append(line)
            self.buffered += len(line) + 1
            self.peak = max(self.peak, self.buffered)
        if was_empty:
            self._wake()
        return True

    def close(self, error: BaseException | None = None) -> None:
        """No more lines (reader thread)."""
        with self._cond:
            self._done = True
            self.error = error
        self._wake()

    async def batches(self) -> AsyncIterator[list[str]]:
        """Lists of lines as they arrive, until the reader closes the feed."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            with self._cond:
                batch = list(self._lines)
                self._lines.clear()
                self.buffered = 0
                done = self._done
                self._cond.notify_all()  # room again: a waiting reader goes on
            if batch:
                yield batch
            if done:
                return


def start_reader(lines: Iterator[str], feed: LineFeed, name: str) -> threading.Thread:
    """Pump ``lines`` into ``feed`` on a daemon thread until exhausted or ``feed.stopped``.

    ``lines`` should watch ``feed.stopped`` too (``JobManager.logs(stop=...)``), so that
    it ends inside a long read and not only between lines.
    """

    def pump() -> None:
        error: BaseException | None = None
        try:
            for line in lines:
                if not feed.put(line):
                    break
        except Exception as e:  # handed to the handler, which logs it; never die silently
            error = e
        finally:
            close = getattr(lines, "close", None)
            if close is not None:
                close()
            feed.close(error)

    thread = threading.Thread(target=pump, name=name, daemon=True)
    thread.start()
    return thread

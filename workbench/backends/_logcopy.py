"""The local supervisor's log copier: every rank's stdout and stderr go to a pipe that one
thread reads, writing the user's bytes to the rank's log unchanged and the framed metric
records (``workbench.run.log``, the agent's GPU samples) to the job's metric files.

Plain output costs one memchr per read (``MetricByteSplitter``'s fast path). The read
ends live only in the supervisor (pipes are close-on-exec), so if the supervisor dies
(even by SIGKILL) a rank's next write fails with EPIPE instead of blocking on a full pipe.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..monitor.metrics import MetricSink
from ..monitor.stream import MetricByteSplitter

READ_SIZE = 256 * 1024
PIPE_SIZE = 1024 * 1024  # fewer wake-ups for a chatty rank; the kernel caps it if it must


@dataclass
class _Stream:
    rank: int
    log_fd: int
    sink: MetricSink
    splitter: MetricByteSplitter = field(default_factory=MetricByteSplitter)


class LogCopier:
    """Copies ranks' output pipes to their log files on one daemon thread."""

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._open: dict[int, _Stream] = {}  # read fd -> stream
        self._idle = threading.Condition(self._lock)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name="workbench-log-copier", daemon=True)
        self._thread.start()

    def pipe(self, rank: int, log_fd: int) -> int:
        """A new pipe whose output is copied to ``log_fd`` (duplicated here; the caller
        keeps its own); returns the write end for the rank's stdout and stderr, which
        the caller closes once the rank's processes hold it."""
        r, w = os.pipe()
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        os.set_blocking(r, False)
        stream = _Stream(rank, os.dup(log_fd), MetricSink(self.job_dir, rank))
        with self._lock:
            self._open[r] = stream
            self._selector.register(r, selectors.EVENT_READ, stream)
        self._wake()
        return w

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every pipe has ended (its writers are gone and all is copied); after
        ``timeout`` close what is left (a stray process holding a pipe open). True when
        every pipe ended by itself."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._open:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            ended = not self._open
        if not ended:
            self._wake(b"c")  # the thread copies what is buffered, then closes
            with self._idle:
                self._idle.wait_for(lambda: not self._open, timeout=2.0)
        return ended

    def _wake(self, what: bytes = b"w") -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, what)

    def _loop(self) -> None:
        while True:
            for key, _ in self._selector.select():
                if key.data is None:
                    if b"c" in self._read_wake():
                        self._close_all()
                    continue
                self._copy(key.fd, key.data)

    def _read_wake(self) -> bytes:
        got = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._wake_r, 512):
                got += chunk
        return got

    def _copy(self, fd: int, stream: _Stream) -> None:
        try:
            chunk = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._end(fd, stream)
            return
        user, records = stream.splitter.split_frames(chunk)
        try:
            _write_all(stream.log_fd, user)
        except OSError:
            # The log cannot take more (a full disk): end the pipe, so the rank's own next
            # write fails as it did when it wrote its log itself, and the job ends with it.
            self._end(fd, stream)
            return
        stream.sink.write(records)

    def _close_all(self) -> None:
        for fd, stream in list(self._open.items()):
            for _ in range(PIPE_SIZE // READ_SIZE + 1):  # what the pipe holds: the log's
                try:
                    chunk = os.read(fd, READ_SIZE)
                except OSError:
                    break
                if not chunk:
                    break
                user, records = stream.splitter.split_frames(chunk)
                with contextlib.suppress(OSError):
                    _write_all(stream.log_fd, user)
                stream.sink.write(records)
            self._end(fd, stream)

    def _end(self, fd: int, stream: _Stream) -> None:
        with contextlib.suppress(OSError):
            _write_all(stream.log_fd, stream.splitter.close())
        with self._lock:
            self._selector.unregister(fd)
            self._open.pop(fd, None)
            self._idle.notify_all()
        for f in (fd, stream.log_fd):
            with contextlib.suppress(OSError):
                os.close(f)
        stream.sink.close()


def _write_all(fd: int, data: bytes) -> None:
    """Append all of ``data`` to a log; OSError (a full disk) goes to the caller."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]

"""Reading rank logs for display: tail from the end, follow forward, bounded memory.

A displayed line is what a terminal would show: text up to ``\\n``, where a ``\\r`` followed
by more text overwrites what came before it (progress bars), so only the last
``\\r``-segment of a line shows; ``\\r\\n`` is a plain newline. One displayed line is cut
at ``MAX_LINE`` bytes (with ``CUT_MARK``), so a 50 MB line without a separator never sits
in memory. A tail counts newlines backwards in fixed blocks (no rereading, no growing buffer)
and then reads forward from there, so it costs the bytes of the lines it returns; text a
``\r`` overwrote is scanned at memchr speed but never kept. Readers check
``stop`` once per block, so an abandoned reader ends promptly even inside a huge line.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from ..monitor.stream import strip_metric_text
from .base import rank_prefixed

MAX_LINE = 64 * 1024
BLOCK = 64 * 1024
CHUNK = 256 * 1024
CUT_MARK = " [workbench: line cut at 64 KiB]"
# A live view's tail reads at most this much from the end of a log, whatever the file holds.
VIEW_SCAN = 1024 * 1024
HEAD_MARK = "\u2026 "  # a displayed line whose start lies before the bytes a view read


def user_lines(lines: list[str]) -> list[str]:
    """``lines`` without metric records: the copier keeps them out of logs, and a record
    that reached a log anyway (a torn copy, an older job) is never shown to a user."""
    return [y for x in lines if (y := strip_metric_text(x)) is not None]


def _text(data: bytes, cut: bool) -> str:
    return data.decode("utf-8", "replace") + (CUT_MARK if cut else "")


def _shown(line: bytes) -> str:
    """The displayed form of one complete line (no ``\\n``)."""
    end = len(line)
    if b"\r" in line:
        end = len(line.rstrip(b"\r"))
        line = line[line.rfind(b"\r", 0, end) + 1 : end]
    if len(line) > MAX_LINE:
        return _text(line[:MAX_LINE], True)
    return line.decode("utf-8", "replace")


class LineAssembler:
    """Turns chunks of bytes into displayed lines, holding at most MAX_LINE bytes between."""

    def __init__(self) -> None:
        self.buf = bytearray()  # the current line's visible segment, at most MAX_LINE
        self.cut = False  # that segment was longer than MAX_LINE
        self.cr = False  # the last bytes were '\r': the next text starts a new segment

    def _append(self, data: bytes) -> None:
        if not data:
            return
        end = len(data.rstrip(b"\r"))
        k = data.rfind(b"\r", 0, end)
        if k >= 0 or (self.cr and end > 0):  # what came before is overwritten
            self.buf.clear()
            self.cut = False
        text = data[k + 1 : end]
        self.cr = end < len(data)
        room = MAX_LINE - len(self.buf)
        if len(text) > room:
            self.buf += text[:room]
            self.cut = True
        else:
            self.buf += text

    def _take(self) -> str:
        line = _text(bytes(self.buf), self.cut)
        self.buf.clear()
        self.cut = self.cr = False
        return line

    def feed(self, chunk: bytes) -> list[str]:
        """Complete lines in ``chunk`` (joined to what came before); keeps the partial rest."""
        parts = chunk.split(b"\n")
        if len(parts) == 1:
            self._append(chunk)
            return []
        self._append(parts[0])
        out = [self._take()]
        if b"\r" in chunk or max(map(len, parts)) > MAX_LINE:
            out.extend(_shown(p) for p in parts[1:-1])
        else:  # the common case: plain short lines, decoded in one pass
            out.extend(p.decode("utf-8", "replace") for p in parts[1:-1])
        self._append(parts[-1])
        return out

    def flush(self) -> str | None:
        """The unterminated last line, if it shows anything."""
        return self._take() if self.buf or self.cut else None


def tail_offset(f: BinaryIO, n: int) -> int:
    """Byte offset where the last ``n`` lines start: counts ``\\n`` backwards, block by block.

    Costs the bytes of those lines plus one block; an unterminated last line counts as one.
    """
    pos = f.seek(0, os.SEEK_END)
    while pos > 0:  # a trailing run of '\r' with no newline yet shows nothing: not a line
        lo = max(0, pos - BLOCK)
        f.seek(lo)
        kept = len(f.read(pos - lo).rstrip(b"\r"))
        pos = lo + kept
        if kept:
            break
    if pos:
        f.seek(pos - 1)
        pos -= f.read(1) == b"\n"  # the final newline ends the last line, it starts none
    seen = 0
    while pos > 0:
        lo = max(0, pos - BLOCK)
        f.seek(lo)
        data = f.read(pos - lo)
        count = data.count(b"\n")
        if seen + count >= n:
            idx = len(data)
            for _ in range(n - seen):
                idx = data.rfind(b"\n", 0, idx)
            return lo + idx + 1
        seen += count
        pos = lo
    return 0


def tail_view(path: Path, n: int, max_bytes: int = VIEW_SCAN) -> list[str]:
    """The last ``n`` displayed lines of a log, reading at most ``max_bytes`` from its end.

    For a live view polled every second: a 20 MB progress bar rewritten with ``\r`` costs
    the same as a short log. A line that started before those bytes shows its end after
    ``HEAD_MARK``, unless a ``\r`` inside them tells what a terminal shows for it.
    """
    if n <= 0:
        return []
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return []
    with f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        f.seek(start)
        data = f.read(size - start)
    idx = len(data) - data.endswith(b"\n")  # the final newline ends the last line
    for _ in range(n):
        idx = data.rfind(b"\n", 0, idx)
        if idx < 0:
            break
    asm = LineAssembler()
    if idx >= 0:
        lines = asm.feed(data[idx + 1 :])
    else:
        head_end = data.find(b"\n")
        head = data if head_end < 0 else data[:head_end]
        visible = len(head.rstrip(b"\r"))
        lines = asm.feed(data)
        if start > 0 and head.rfind(b"\r", 0, visible) < 0 and visible:
            # The bytes read begin inside a line and no '\r' says where its shown text
            # starts: mark it as the end of a longer line.
            if head_end >= 0 and lines:
                lines[0] = HEAD_MARK + lines[0]
            elif head_end < 0 and asm.buf:
                asm.buf[:0] = HEAD_MARK.encode()
    last = asm.flush()
    if last is not None:
        lines.append(last)
    if b"\x1f" in data:
        lines = user_lines(lines)
    return lines[-n:]


class RankReader:
    """One rank's log, read forward from its tail (or its start) in CHUNK-sized reads."""

    def __init__(self, rank: int, path: Path, tail_lines: int | None) -> None:
        self.rank, self.path, self.tail = rank, path, tail_lines
        self.f: BinaryIO | None = None
        self.asm = LineAssembler()

    def open(self) -> bool:
        """Open the file and seek to where the tail starts; False while it does not exist."""
        if self.f is not None:
            return True
        try:
            self.f = open(self.path, "rb")
        except FileNotFoundError:
            return False
        if self.tail == 0:  # only what comes next
            self.f.seek(0, os.SEEK_END)
        elif self.tail is not None:
            self.f.seek(tail_offset(self.f, self.tail))
        return True

    def read(self) -> list[str] | None:
        """Lines completed by the next chunk; None at the end of the file for now."""
        assert self.f is not None
        chunk = self.f.read(CHUNK)
        if not chunk:
            return None
        lines = self.asm.feed(chunk)
        return user_lines(lines) if b"\x1f" in chunk else lines

    def close(self) -> list[str]:
        """The unterminated last line (the writer is done), and release the file."""
        if self.f is not None:
            self.f.close()
            self.f = None
        last = self.asm.flush()
        return [] if last is None else user_lines([last])


def read_logs(
    paths: Sequence[tuple[int, Path]],
    follow: bool,
    tail_lines: int | None,
    finished: Callable[[], bool],
    stop: threading.Event | None = None,
    prefix: bool = False,
) -> Iterator[str]:
    """Displayed lines of each rank's log; with ``prefix``, each line says its rank.

    Without follow, ranks come one after another (``tail_lines`` per rank, as ``kubectl
    logs --prefix`` and ``docker compose logs --tail`` do). With follow, each rank's
    backlog comes rank by rank, then new lines as they arrive, polling every file.
    """
    stop = stop or threading.Event()
    readers = [RankReader(rank, path, tail_lines) for rank, path in paths]

    def show(reader: RankReader, lines: list[str]) -> list[str]:
        return [rank_prefixed(reader.rank, x) for x in lines] if prefix else lines

    moved = False  # some bytes were read in this pass (a long line may complete none)

    def drain(reader: RankReader, budget: int | None) -> Iterator[str]:
        """Read ``reader`` until the end for now (or ``budget`` chunks); yields lines."""
        nonlocal moved
        if not reader.open():
            return
        while budget is None or budget > 0:
            if stop.is_set():
                return
            lines = reader.read()
            if lines is None:
                return
            moved = True
            yield from show(reader, lines)
            budget = None if budget is None else budget - 1

    try:
        if not follow:
            for r in readers:
                yield from drain(r, None)
                yield from show(r, r.close())
            return
        idle = 0.05
        budget: int | None = None  # the first pass reads every backlog whole
        while not stop.is_set():
            done = finished()  # asked before reading, so nothing written after is missed
            moved = False
            for r in readers:
                yield from drain(r, budget)
                if stop.is_set():
                    return
            budget = 4  # then round-robin, so one chatty rank cannot starve the others
            if done and not moved:
                for r in readers:
                    yield from show(r, r.close())
                return
            if moved:
                idle = 0.05
            else:
                stop.wait(idle)
                idle = min(idle * 2, 0.5)
    finally:
        for r in readers:
            if r.f is not None:
                r.f.close()

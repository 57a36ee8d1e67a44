"""Metric records carried inside a job's own output stream, and picking them back out.

The in-container agent writes each record as one line ``METRIC_PREFIX + compact JSON``
between the user's lines (never inside one), so any cluster's log API carries them and a
backend separates them again with ``split_metric_lines`` without touching user lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# ASCII unit separator + a tag: no sane program prints this at the start of a line. Not
# \x1e (record separator): str.splitlines() breaks lines there and would cut the record off.
METRIC_PREFIX = "\x1f@wb-metric "
# How workbench.run starts each scalar record's JSON (json.dumps' default separators).
SCALARS_HEAD = b'{"kind": "scalars", '
# `kubectl logs --timestamps` and some log shippers put an RFC 3339 time first.
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:?\d\d)? ")


def format_metric_line(record: dict[str, Any]) -> str:
    """One output line (with its newline) carrying ``record``; JSON escapes any newline."""
    return METRIC_PREFIX + json.dumps(record, separators=(",", ":"), default=str) + "\n"


def parse_metric_line(line: str) -> dict[str, Any] | None:
    """The record a line carries, or None when it is a user line."""
    return _split_line(line)[1]


def _split_line(line: str) -> tuple[str | None, dict[str, Any] | None]:
    """(user text, record) of one text line. A record may follow a timestamp (log APIs) or
    be glued after a user's partial line (the record's writer does not wait for the user's
    newline): that text stays the user's, as a line of its own."""
    at = line.find(METRIC_PREFIX)
    if at < 0:
        return line, None
    try:
        record = json.loads(line[at + len(METRIC_PREFIX) :].rstrip("\r\n"))
    except ValueError:
        record = None  # a torn or foreign line stays the user's: never lose output
    if not isinstance(record, dict):
        return line, None
    head = line[:at]
    if not head or _TIMESTAMP.fullmatch(head):
        return None, record
    return head, record


def split_metric_lines(lines: Iterable[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """Separate a mixed stream into (user lines unchanged, metric records in order)."""
    user: list[str] = []
    records: list[dict[str, Any]] = []
    for line in lines:
        text, record = _split_line(line)
        if text is not None:
            user.append(text)
        if record is not None:
            records.append(record)
    return user, records


def filter_metric_lines(
    lines: Iterable[str], on_record: Callable[[dict[str, Any]], None]
) -> Iterator[str]:
    """Streaming form for followed logs: yields user lines, hands records to ``on_record``."""
    for line in lines:
        text, record = _split_line(line)
        if record is not None:
            on_record(record)
        if text is not None:
            yield text


class MetricByteSplitter:
    """Streaming byte form for a log copier relaying a rank's raw output: user bytes pass
    through at once (a partial line is not held back), whole metric records are split off.

    A record is ``METRIC_PREFIX ... \\n`` wherever it starts: a writer's record may land
    after a user line in progress (``print(..., end="")``, a block-buffered stdout), so the
    user's text before it and after it are joined again and neither is lost. Only a
    possible record is ever held: a trailing piece of the prefix, or a record whose newline
    has not come yet (at most ``MAX_RECORD`` bytes, after that it is the user's)."""

    PREFIX = METRIC_PREFIX.encode()
    MAX_RECORD = 1024 * 1024

    def __init__(self, on_record: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.on_record = on_record
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        """The user bytes of ``chunk`` (plus whatever earlier chunks held back); records go
        to ``on_record``."""
        user, records = self.split(chunk)
        if self.on_record is not None:
            for record in records:
                self.on_record(record)
        return user

    def split(self, chunk: bytes) -> tuple[bytes, list[dict[str, Any]]]:
        """(user bytes, records) of ``chunk``, joined to what earlier chunks held back."""
        user, frames = self.split_frames(chunk)
        records = [f if isinstance(f, dict) else _decode_record(f) for f in frames]
        return user, [r for r in records if r is not None]

    def split_frames(self, chunk: bytes) -> tuple[bytes, list[dict[str, Any] | bytes]]:
        """As ``split``, but run.log's scalar records stay raw JSON bytes (they start with
        ``SCALARS_HEAD``): a copier appends them as they are, with no parse per record."""
        if not self._held and b"\x1f" not in chunk:
            return chunk, []  # the common case: plain output costs one memchr
        buf, self._held = self._held + chunk, b""
        out = bytearray()
        records: list[dict[str, Any] | bytes] = []
        pos = 0
        while True:
            at = buf.find(self.PREFIX, pos)
            if at < 0:
                keep = self._partial_prefix(buf, pos)
                out += buf[pos:keep]
                self._held = buf[keep:]
                break
            out += buf[pos:at]
            nl = buf.find(b"\n", at)
            if nl < 0:
                if len(buf) - at > self.MAX_RECORD:  # no newline in sight: not a record
                    out += buf[at:]
                else:
                    self._held = buf[at:]
                break
            payload = buf[at + len(self.PREFIX) : nl]
            if payload.startswith(SCALARS_HEAD) and payload.endswith(b"}"):
                records.append(payload)  # workbench.run's own frame: kept raw
            elif (record := _decode_record(payload)) is not None:
                records.append(record)
            else:
                out += buf[at : nl + 1]  # looked like one, was not: it stays the user's
            pos = nl + 1
        return bytes(out), records

    def _partial_prefix(self, buf: bytes, pos: int) -> int:
        """Where a trailing piece of the prefix starts (len(buf) when there is none)."""
        start = max(pos, len(buf) - len(self.PREFIX) + 1)
        while True:
            k = buf.find(b"\x1f", start)
            if k < 0:
                return len(buf)
            if self.PREFIX.startswith(buf[k:]):
                return k
            start = k + 1

    def close(self) -> bytes:
        """Whatever is still held (the stream ended inside a would-be record)."""
        rest, self._held = self._held, b""
        return rest


def scalars_line(payload: bytes) -> bytes:
    """A raw run.log frame's JSON as a scalars-file line: its ``kind`` key dropped."""
    return b"{" + payload[len(SCALARS_HEAD) :] + b"\n"


def _decode_record(payload: bytes) -> dict[str, Any] | None:
    """The record a framed line's payload (after the prefix, before the newline) carries."""
    try:
        record = json.loads(payload.rstrip(b"\r"))
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def strip_metric_text(line: str) -> str | None:
    """A displayed line without any record glued into it; None when nothing else is left."""
    if METRIC_PREFIX not in line:
        return line
    user, records = MetricByteSplitter().split(line.encode() + b"\n")
    text = user.decode("utf-8", "replace")
    if records and not text.strip("\n"):
        return None
    return text[:-1] if text.endswith("\n") else text

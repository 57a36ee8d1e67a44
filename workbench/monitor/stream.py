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
# `kubectl logs --timestamps` and some log shippers put an RFC 3339 time first.
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:?\d\d)? ")


def format_metric_line(record: dict[str, Any]) -> str:
    """One output line (with its newline) carrying ``record``; JSON escapes any newline."""
    return METRIC_PREFIX + json.dumps(record, separators=(",", ":"), default=str) + "\n"


def parse_metric_line(line: str) -> dict[str, Any] | None:
    """The record a line carries, or None when it is a user line."""
    at = line.find(METRIC_PREFIX)
    if at < 0 or (at > 0 and not _TIMESTAMP.fullmatch(line[:at])):
        return None
    try:
        record = json.loads(line[at + len(METRIC_PREFIX) :].rstrip("\r\n"))
    except ValueError:
        return None  # a torn or foreign line stays the user's: never lose output
    return record if isinstance(record, dict) else None


def split_metric_lines(lines: Iterable[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """Separate a mixed stream into (user lines unchanged, metric records in order)."""
    user: list[str] = []
    records: list[dict[str, Any]] = []
    for line in lines:
        record = parse_metric_line(line)
        if record is None:
            user.append(line)
        else:
            records.append(record)
    return user, records


def filter_metric_lines(
    lines: Iterable[str], on_record: Callable[[dict[str, Any]], None]
) -> Iterator[str]:
    """Streaming form for followed logs: yields user lines, hands records to ``on_record``."""
    for line in lines:
        record = parse_metric_line(line)
        if record is None:
            yield line
        else:
            on_record(record)


class MetricByteSplitter:
    """Streaming byte form for a wrapper relaying a child's raw output: user bytes pass
    through at once (a partial line is not held back), whole metric lines go to
    ``on_record``. Records only ever start at a line start, so only there is anything held,
    and only while it could still be a record."""

    PREFIX = METRIC_PREFIX.encode()

    def __init__(self, on_record: Callable[[dict[str, Any]], None]) -> None:
        self.on_record = on_record
        self._buf = b""
        self._at_line_start = True

    def feed(self, chunk: bytes) -> bytes:
        """The user bytes of ``chunk`` (plus whatever earlier chunks held back)."""
        self._buf += chunk
        out = bytearray()
        while self._buf:
            if not self._at_line_start:
                nl = self._buf.find(b"\n")
                if nl < 0:
                    out += self._buf
                    self._buf = b""
                    break
                out += self._buf[: nl + 1]
                self._buf = self._buf[nl + 1 :]
                self._at_line_start = True
            elif self._buf.startswith(self.PREFIX):
                nl = self._buf.find(b"\n")
                if nl < 0:
                    break  # the rest of the record is on its way
                line, self._buf = self._buf[: nl + 1], self._buf[nl + 1 :]
                record = parse_metric_line(line.decode("utf-8", "replace"))
                if record is None:
                    out += line  # looked like one, was not: it stays the user's
                else:
                    self.on_record(record)
            elif self.PREFIX.startswith(self._buf):
                break  # too short to tell yet
            else:
                self._at_line_start = False
        return bytes(out)

    def close(self) -> bytes:
        """Whatever is still held (the stream ended mid-line)."""
        rest, self._buf = self._buf, b""
        return rest

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

"""Reading logs for display: terminal '\\r' rules, tail cost, bounded memory, stop, all ranks."""

from __future__ import annotations

import queue
import threading
import time
import tracemalloc
from collections import deque
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import wait_for
from workbench.backends import _logread
from workbench.backends._logread import CUT_MARK, MAX_LINE, read_logs
from workbench.backends.base import split_rank_prefix


def read(path: Path, tail: int | None = None) -> list[str]:
    return list(read_logs([(0, path)], follow=False, tail_lines=tail, finished=lambda: True))


def shown(data: bytes, cap: int = MAX_LINE) -> list[str]:
    """Reference: what a terminal shows, one complete line at a time, cut at ``cap``."""
    *lines, rest = data.split(b"\n")
    if rest.rstrip(b"\r"):
        lines.append(rest)
    out = []
    for line in lines:
        line = line.rstrip(b"\r")
        line = line[line.rfind(b"\r") + 1 :]
        out.append(line[:cap].decode("utf-8", "replace") + (CUT_MARK if len(line) > cap else ""))
    return out


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"a\nb\n", ["a", "b"]),
        (b"a\r\nb\r\n", ["a", "b"]),  # CRLF is a plain newline
        (b"0%\r50%\r100%\ndone\n", ["100%", "done"]),  # progress: the last state shows
        (b"0%\r50%\r", ["50%"]),  # unterminated: what the terminal shows now
        (b"x\n\r\r\n\n", ["x", "", ""]),
        (b"tail without newline", ["tail without newline"]),
        (b"caf\xc3\xa9 \xff\n", ["café \ufffd"]),
    ],
)
def test_terminal_rules(tmp_path, data, expected):
    path = tmp_path / "rank-0.log"
    path.write_bytes(data)
    assert read(path) == expected
    for n in range(len(expected) + 2):
        assert read(path, tail=n) == (expected[-n:] if n else [])


# A small cap, so generated data exercises cutting; bytes that matter: \r, \n, UTF-8.
LOG_BYTES = st.lists(
    st.sampled_from([b"a", b"bc", b"\r", b"\n", b"\r\n", b"\xc3\xa9", b"0123456789"]),
    max_size=60,
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(data=LOG_BYTES, sizes=st.lists(st.integers(1, 9), min_size=1, max_size=8))
def test_any_chunking_gives_what_a_terminal_shows(data, sizes):
    with mock.patch.object(_logread, "MAX_LINE", 7):
        asm = _logread.LineAssembler()
        out, i, k = [], 0, 0
        while i < len(data):
            out += asm.feed(data[i : i + sizes[k % len(sizes)]])
            i += sizes[k % len(sizes)]
            k += 1
        last = asm.flush()
        out += [] if last is None else [last]
    assert out == shown(data, cap=7)


@settings(max_examples=150, deadline=None)
@given(data=LOG_BYTES, n=st.integers(0, 12), block=st.integers(1, 8))
def test_tail_is_the_end_of_the_whole(tmp_path_factory, data, n, block):
    path = tmp_path_factory.getbasetemp() / "tail-property.log"
    path.write_bytes(data)
    with mock.patch.object(_logread, "BLOCK", block), mock.patch.object(_logread, "CHUNK", 3):
        whole = read(path)
        assert read(path, tail=n) == (whole[-n:] if n else [])


def _big_log(path: Path, lines: int) -> None:
    with open(path, "wb") as f:
        for start in range(0, lines, 100_000):
            f.write(b"".join(b"step %07d loss 0.25\n" % i for i in range(start, start + 100_000)))


def _cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def test_tail_costs_the_lines_it_returns_not_more(tmp_path):
    """Regression: the tail grew its buffer block by block (quadratic): --tail 1000000 of
    2 M lines took 107 s against 2.8 s for the whole file."""
    path = tmp_path / "rank-0.log"
    _big_log(path, 600_000)  # 13 MB
    half = 300_000
    deque(read_logs([(0, path)], False, None, lambda: True), maxlen=0)  # warm the page cache
    whole = _cpu(lambda: deque(read_logs([(0, path)], False, None, lambda: True), maxlen=0))
    tail_half = _cpu(lambda: deque(read_logs([(0, path)], False, half, lambda: True), maxlen=0))
    tail_few = _cpu(lambda: deque(read_logs([(0, path)], False, 10, lambda: True), maxlen=0))
    assert tail_half < whole, (tail_half, whole)  # measured ~0.55 x whole; was ~10 x
    assert tail_few < whole / 20, (tail_few, whole)
    assert read(path, tail=2) == ["step 0599998 loss 0.25", "step 0599999 loss 0.25"]
    # Memory: what the reader holds does not grow with the lines it skips or returns.
    tracemalloc.start()
    try:
        deque(read_logs([(0, path)], False, half, lambda: True), maxlen=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak  # one block + one chunk of lines; was > 13 MB


def test_carriage_return_log_tail_is_small_and_bounded(tmp_path):
    """Regression: 51 MB of '\\r' progress with no newline: --tail 5 took 24 s and printed
    51 MB. A terminal shows the last state; memory stays at one chunk."""
    path = tmp_path / "rank-0.log"
    progress = b"".join(b"\r%8d/3000000 it" % i for i in range(50_000))  # ~1 MB
    with open(path, "wb") as f:
        for _ in range(30):  # 30 MB, no newline
            f.write(progress)
        f.write(b"\r 3000000/3000000 it")
    tracemalloc.start()
    try:
        t0 = time.process_time()
        lines = read(path, tail=5)
        cpu = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == [" 3000000/3000000 it"]
    assert peak < 2 * 1024 * 1024, peak
    assert cpu < 2.0, cpu  # a scan at memchr speed (~0.1 s here); was quadratic


def test_one_huge_line_is_cut_not_held(tmp_path):
    path = tmp_path / "rank-0.log"
    path.write_bytes(b"x" * (3 * 1024 * 1024) + b"\nafter\n")
    tracemalloc.start()
    try:
        lines = read(path, tail=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == ["x" * MAX_LINE + CUT_MARK, "after"]
    assert peak < 2 * 1024 * 1024, peak


def test_stop_ends_a_reader_inside_a_huge_line(tmp_path):
    """The reader checks ``stop`` per block, not per line: a line-less log cannot pin it."""
    path = tmp_path / "rank-0.log"
    with open(path, "wb") as f:
        for _ in range(40):  # 40 MB of one unterminated line
            f.write(b"\r" + b"y" * (1024 * 1024))
    stop = threading.Event()
    started = threading.Event()

    def finished() -> bool:
        started.set()
        return False  # the job runs on: only stop ends this follower

    def consume() -> None:
        for _ in read_logs([(0, path)], True, None, finished, stop=stop):
            pass

    t = threading.Thread(target=consume, name="test-reader")
    t.start()
    started.wait(10)
    stop.set()
    t.join(2.0)
    assert not t.is_alive()


def test_all_ranks_without_follow_come_rank_by_rank_with_tail_per_rank(tmp_path):
    paths = []
    for rank in range(3):
        path = tmp_path / f"rank-{rank}.log"
        path.write_bytes(b"".join(b"r%d line %d\n" % (rank, i) for i in range(4)))
        paths.append((rank, path))
    got = list(read_logs(paths, False, 2, lambda: True, prefix=True))
    assert got == [f"[rank {r}] r{r} line {i}" for r in range(3) for i in (2, 3)]
    assert [split_rank_prefix(x) for x in got[:2]] == [(0, "r0 line 2"), (0, "r0 line 3")]


def test_all_ranks_follow_interleaves_in_arrival_order(tmp_path):
    paths = [(r, tmp_path / f"rank-{r}.log") for r in range(2)]
    paths[0][1].write_bytes(b"backlog 0\n")  # rank 1's file does not exist yet
    done, stop = threading.Event(), threading.Event()
    seen: queue.Queue[str] = queue.Queue()

    def consume() -> None:
        for line in read_logs(paths, True, None, done.is_set, stop=stop, prefix=True):
            seen.put(line)

    t = threading.Thread(target=consume)
    t.start()
    got: list[str] = []

    def write_and_see(rank: int, text: str) -> None:
        with open(paths[rank][1], "ab") as f:
            f.write(text.encode() + b"\n")
        got.append(seen.get(timeout=10))

    try:
        got.append(seen.get(timeout=10))
        write_and_see(1, "one")
        write_and_see(0, "two")
        write_and_see(1, "three")
        with open(paths[0][1], "ab") as f:
            f.write(b"unterminated at the end")
        done.set()
        t.join(10)
        assert not t.is_alive()
    finally:
        stop.set()
        t.join(5)
    while not seen.empty():
        got.append(seen.get())
    assert got == [
        "[rank 0] backlog 0",
        "[rank 1] one",
        "[rank 0] two",
        "[rank 1] three",
        "[rank 0] unterminated at the end",
    ]


def test_follow_with_tail_keeps_a_partial_last_line_whole(tmp_path):
    path = tmp_path / "rank-0.log"
    path.write_bytes(b"a\nb\nhalf")
    done = threading.Event()
    out: list[str] = []

    def consume() -> None:
        for line in read_logs([(0, path)], True, 2, done.is_set):
            out.append(line)

    t = threading.Thread(target=consume)
    t.start()
    wait_for(lambda: out == ["b"], 10, "the complete line of the tail")
    with open(path, "ab") as f:
        f.write(b" and the rest\n")
    done.set()
    t.join(10)
    assert out == ["b", "half and the rest"]

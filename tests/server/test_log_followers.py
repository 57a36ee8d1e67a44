"""Log streams: 50 followers at once, slow and vanishing clients, every rank at once."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from tests.server.conftest import py, submit, wait_done
from workbench.backends._jobfiles import JobFiles

LINES = 150
WRITER = f"import time\nfor i in range({LINES}):\n    print(f'step {{i}}', flush=True)\n    time.sleep(0.02)"


async def test_fifty_followers_and_a_busy_client(
    jp_fetch, http_server, jp_http_port, jp_base_url, jp_auth_header
):
    await submit(jp_fetch, {"name": "chatty", "command": py(WRITER)})
    # A client of its own with room for every stream at once (the default allows 10).
    client = AsyncHTTPClient(force_instance=True, max_clients=64)
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}workbench/api/"
    received: list[list[bytes]] = [[] for _ in range(50)]

    async def follow(i: int) -> None:
        request = HTTPRequest(
            base + "jobs/chatty/logs?follow=true", headers=jp_auth_header, request_timeout=120,
            streaming_callback=received[i].append,
        )  # fmt: skip
        response = await client.fetch(request)
        assert response.code == 200

    async def busy() -> list[float]:
        latencies = []
        for k in range(2):
            await submit(jp_fetch, {"name": f"side-{k}", "command": py("print('side')")})
        for _ in range(10):
            t0 = time.perf_counter()
            r = await jp_fetch("workbench", "api", "jobs", params={"limit": 5})
            latencies.append(time.perf_counter() - t0)
            assert json.loads(r.body)["total"] == 3
            await asyncio.sleep(0.1)
        return latencies

    try:
        results = await asyncio.gather(*(follow(i) for i in range(50)), busy())
    finally:
        client.close()
    latencies = results[-1]
    expected = [f"step {i}" for i in range(LINES)]
    for i, chunks in enumerate(received):
        assert b"".join(chunks).decode().splitlines() == expected, f"follower {i}"
    # The server stayed responsive while 50 streams were open.
    assert max(latencies) < 2.0, latencies


async def test_follow_streams_before_the_job_ends(
    jp_fetch, http_server, jp_http_port, jp_base_url, jp_auth_header
):
    code = "import time\nprint('first', flush=True)\ntime.sleep(3)\nprint('last', flush=True)"
    await submit(jp_fetch, {"name": "slow-talker", "command": py(code)})
    client = AsyncHTTPClient(force_instance=True)
    first_seen = asyncio.get_running_loop().create_future()
    chunks: list[bytes] = []

    def on_chunk(chunk: bytes) -> None:
        chunks.append(chunk)
        if b"first" in chunk and not first_seen.done():
            first_seen.set_result(time.monotonic())

    url = (
        f"http://127.0.0.1:{jp_http_port}{jp_base_url}workbench/api/jobs/slow-talker/logs?follow=1"
    )
    fetch = asyncio.ensure_future(
        client.fetch(
            HTTPRequest(
                url, headers=jp_auth_header, streaming_callback=on_chunk, request_timeout=60
            )
        )
    )
    seen_at = await asyncio.wait_for(first_seen, 30)
    assert not fetch.done()  # 'first' arrived while the job (and the stream) was still going
    await fetch
    assert time.monotonic() - seen_at > 1.0
    assert b"".join(chunks).decode().splitlines() == ["first", "last"]
    client.close()


# ---- logs at scale: bounded memory per stream, prompt stop, every rank -------------------


def _log_of(manager, name: str) -> Path:
    return JobFiles(Path(manager.get(name).job_dir)).log_path(0)


def _reader_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"workbench-logs-{name}-")]


def _open_stalled(port: int, path: str, headers: dict[str, str], first: int) -> socket.socket:
    """A client that sends the GET, reads ``first`` bytes, then stops reading."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.settimeout(60)
    sock.connect(("127.0.0.1", port))
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode())
    got = 0
    while got < first:
        data = sock.recv(16 * 1024)
        assert data, "the server closed the stream early"
        got += len(data)
    return sock


async def _wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("follow", [False, True])
async def test_a_slow_reader_keeps_the_server_memory_bounded(
    jp_fetch, http_server, jp_http_port, jp_base_url, jp_auth_header, manager, follow
):
    """Regression: the feed had no bound (one slow follower of a 200 MB log took the server
    from 75 MB to 609 MB) and a plain GET buffered the whole log before its first byte."""
    await submit(jp_fetch, {"name": "big", "command": py("print('x')")})
    await wait_done(jp_fetch, "big")
    with open(_log_of(manager, "big"), "wb") as f:  # 24 MB, 1.2 M short lines
        for start in range(0, 1_200_000, 100_000):
            f.write(b"".join(b"line %07d of many\n" % i for i in range(start, start + 100_000)))
    gc.collect()
    me = psutil.Process()
    base = me.memory_info().rss
    url = f"{jp_base_url}workbench/api/jobs/big/logs?follow={str(follow).lower()}"
    sock = await asyncio.to_thread(_open_stalled, jp_http_port, url, jp_auth_header, 256 * 1024)
    try:
        peak = base
        for _ in range(30):  # the reader had 3 s to run ahead of the stalled client
            await asyncio.sleep(0.1)
            peak = max(peak, me.memory_info().rss)
        assert peak - base < 16 * 1024 * 1024, f"server grew {(peak - base) >> 20} MB"
        assert _reader_threads("big"), "the reader should wait for the client, not finish"
    finally:
        sock.close()
    # The reader was blocked on the full feed: the disconnect releases it at once.
    await _wait_until(lambda: not _reader_threads("big"), 2.0, "the reader thread to end")


async def test_a_client_that_leaves_mid_line_stops_the_reader(
    jp_fetch, http_server, jp_http_port, jp_base_url, jp_auth_header, manager
):
    """Regression: ``stopped`` was checked only between lines, so a reader inside 30 MB of
    '\\r' progress kept a CPU busy long after its client had gone."""
    await submit(jp_fetch, {"name": "bar", "command": py("import time; time.sleep(120)")})
    progress = b"".join(b"\r%8d/3000000 it" % i for i in range(50_000))  # ~1 MB
    with open(_log_of(manager, "bar"), "ab") as f:
        for _ in range(30):
            f.write(progress)
    sock = socket.create_connection(("127.0.0.1", jp_http_port))
    head = "".join(f"{k}: {v}\r\n" for k, v in jp_auth_header.items())
    url = f"{jp_base_url}workbench/api/jobs/bar/logs?follow=true"
    sock.sendall(f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode())
    await _wait_until(lambda: bool(_reader_threads("bar")), 10, "the reader thread")
    await asyncio.sleep(0.3)  # it is busy in the file (or polling it) now
    sock.close()
    await _wait_until(lambda: not _reader_threads("bar"), 2.0, "the reader thread to end")
    manager.cancel("bar", wait=15)


async def test_every_rank_prefixed_with_tail_per_rank(jp_fetch):
    code = "import os\nfor i in range(3):\n    print(f'r{os.environ[\"RANK\"]} {i}', flush=True)"
    await submit(jp_fetch, {"name": "pair", "command": py(code), "workers": 2})
    await wait_done(jp_fetch, "pair")
    r = await jp_fetch(
        "workbench", "api", "jobs", "pair", "logs", params={"rank": "all", "tail": 2}
    )
    assert r.body.decode().splitlines() == [
        "[rank 0] r0 1", "[rank 0] r0 2", "[rank 1] r1 1", "[rank 1] r1 2",
    ]  # fmt: skip
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("workbench", "api", "jobs", "pair", "logs", params={"rank": "both"})
    assert e.value.code == 400
    assert json.loads(e.value.response.body)["field"] == "rank"

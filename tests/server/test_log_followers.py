"""50 clients follow one job's log at once while another client submits and lists."""

from __future__ import annotations

import asyncio
import json
import time

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from tests.server.conftest import py, submit

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

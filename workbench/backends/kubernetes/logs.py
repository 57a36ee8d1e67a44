"""Pod logs for the Kubernetes backend: one rank or every rank, read or followed live
(``logcopy`` saves them into the job folder when an attempt ends).

Lines come from the official client's ``read_namespaced_pod_log`` (streamed with
``_preload_content=False``, so a long log never sits in memory) and are cut into displayed
lines the way local logs are (``_logread.LineAssembler``: ``\\r`` progress bars, 64 KiB
cap). Metric records framed in the output (``monitor.stream``) are never shown: they go to
an ``on_record`` callback.

A followed stream that ends while its pod still runs (an API server restart, a dropped
connection, a proxy's idle timeout) is re-opened and the lines already given are skipped,
so nothing is lost or repeated; only a pod that ended (or is gone) ends the stream.
Re-opening re-reads the log from its start (the log API has no byte offset; ``sinceTime``
has one-second resolution), which is the price of exactness on a rare path.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client.rest import ApiException

from ...monitor.stream import filter_metric_lines, parse_metric_line
from .._logread import LineAssembler, read_logs
from ..base import rank_prefixed

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
CHUNK = 64 * 1024
QUEUE_LINES = 1024  # merged follow: lines waiting for the reader, per job (bounded memory)

OnRecord = Callable[[dict[str, Any]], None]


def _drop(_: dict[str, Any]) -> None:
    return None


# ---- one pod ---------------------------------------------------------------------------------
def _open(core_api: Any, namespace: str, pod: str, container: str | None, *, follow: bool,
          tail: int | None, read_timeout: float | None) -> Any:  # fmt: skip
    kwargs: dict[str, Any] = {"follow": follow, "_preload_content": False}
    if container:
        kwargs["container"] = container
    if tail is not None:
        kwargs["tail_lines"] = tail
    if read_timeout is not None:  # a followed log may rightly be silent for hours
        kwargs["_request_timeout"] = (10.0, read_timeout)
    return core_api.read_namespaced_pod_log(pod, namespace, **kwargs)


def _chunks(resp: Any) -> Iterator[bytes]:
    """The body as it arrives: each chunk of a followed (chunked) stream at once, a plain
    body in CHUNK-sized reads (a fixed size would wait for a chunked stream to fill it)."""
    yield from resp.stream(None if getattr(resp, "chunked", False) else CHUNK,
                           decode_content=False)  # fmt: skip


def _release(resp: Any) -> None:
    with contextlib.suppress(Exception):
        resp.release_conn()


def _shut(resp: Any) -> None:
    """Unblock a read waiting on ``resp`` (the reader was told to stop)."""
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    with contextlib.suppress(OSError, AttributeError):
        if sock is not None:
            sock.shutdown(2)


def pod_phase(core_api: Any, namespace: str, pod: str) -> str | None:
    """The pod's phase, or None when it is gone."""
    try:
        obj = core_api.read_namespaced_pod(pod, namespace, _preload_content=False)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    phase: str = (json.loads(obj.data).get("status") or {}).get("phase") or "Pending"
    return phase


def _read_lines(resp: Any, stop: threading.Event) -> Iterator[str]:
    """Displayed lines of a whole (not followed) log response, the last one included."""
    asm = LineAssembler()
    try:
        for chunk in _chunks(resp):
            if stop.is_set():
                return
            yield from asm.feed(chunk)
        last = asm.flush()
        if last is not None:
            yield last
    finally:
        _release(resp)


def pod_lines(
    core_api: Any,
    namespace: str,
    pod: str,
    follow: bool = False,
    tail: int | None = None,
    stop: threading.Event | None = None,
    *,
    on_record: OnRecord | None = None,
    container: str | None = None,
    retry_wait: float = 0.5,
) -> Iterator[str]:
    """Displayed lines (no newline) of one pod's log; metric records go to ``on_record``.

    Without ``follow``: the log as it is (its last ``tail`` lines). With ``follow``: then
    every new line until the pod ends, is deleted, or ``stop`` is set (a blocked read is
    woken at once). A 404 ends the stream; other API errors are raised.
    """
    stop = stop or threading.Event()
    record = on_record or _drop
    if follow:
        given, last = 0, list[str]()
        if tail is not None:
            # The tail, and where it ends in the whole log (re-opening skips by count).
            given, last = _whole_tail(core_api, namespace, pod, container, tail, stop)
        yield from last
        lines = _follow(core_api, namespace, pod, container, given, stop, retry_wait)
        yield from filter_metric_lines(lines, record)
    elif tail is None:
        yield from filter_metric_lines(_read(core_api, namespace, pod, container, None, stop),
                                       record)  # fmt: skip
    else:
        yield from _tail(core_api, namespace, pod, container, tail, stop, record)


def _read(core_api: Any, namespace: str, pod: str, container: str | None, tail: int | None,
          stop: threading.Event) -> Iterator[str]:  # fmt: skip
    """The log as it is now (its last ``tail`` lines); nothing for a pod that is gone or
    whose container has not started (the API answers 404 and 400)."""
    try:
        resp = _open(core_api, namespace, pod, container, follow=False, tail=tail,
                     read_timeout=60.0)  # fmt: skip
    except ApiException as e:
        if e.status in (400, 404):
            return
        raise
    yield from _read_lines(resp, stop)


def _tail(core_api: Any, namespace: str, pod: str, container: str | None, n: int,
          stop: threading.Event, on_record: OnRecord) -> Iterator[str]:  # fmt: skip
    """The last ``n`` user lines: metric records in between do not count, so the window
    the server tails grows until it holds ``n`` user lines or the whole log."""
    if n <= 0:
        return
    window = n
    while True:
        lines = list(_read(core_api, namespace, pod, container, window, stop))
        records: list[dict[str, Any]] = []
        user = list(filter_metric_lines(lines, records.append))
        if len(user) >= n or len(lines) < window or stop.is_set():
            for r in records:
                on_record(r)
            yield from user[-n:]
            return
        window *= 4


def _whole_tail(core_api: Any, namespace: str, pod: str, container: str | None, n: int,
                stop: threading.Event) -> tuple[int, list[str]]:  # fmt: skip
    """(complete lines in the whole log, its last ``n`` user lines), in one bounded pass."""
    count, last = 0, deque[str](maxlen=max(n, 0))
    try:
        resp = _open(core_api, namespace, pod, container, follow=False, tail=None,
                     read_timeout=60.0)  # fmt: skip
    except ApiException as e:
        if e.status in (400, 404):
            return 0, []
        raise
    asm = LineAssembler()
    try:
        for chunk in _chunks(resp):
            for line in asm.feed(chunk):
                count += 1
                if parse_metric_line(line) is None:
                    last.append(line)
            if stop.is_set():
                break
    finally:
        _release(resp)
    return count, list(last)


def _follow(core_api: Any, namespace: str, pod: str, container: str | None, given: int,
            stop: threading.Event, retry_wait: float) -> Iterator[str]:  # fmt: skip
    current: list[Any] = [None]
    done = threading.Event()

    def waker() -> None:  # a silent pod leaves the reader blocked in recv(): wake it on stop
        while not stop.wait(0.2):
            if done.is_set():
                return
        resp = current[0]
        if resp is not None:
            _shut(resp)

    threading.Thread(target=waker, name=f"log-stop-{pod}", daemon=True).start()
    idle = 0  # re-opens in a row that brought no new line: back off
    try:
        while not stop.is_set():
            asm, seen, dropped, before = LineAssembler(), 0, False, given
            try:
                resp = _open(core_api, namespace, pod, container, follow=True, tail=None,
                             read_timeout=None)  # fmt: skip
            except ApiException as e:
                if e.status == 404:
                    return
                if not _transient(e):  # 400: the container is still waiting to start
                    raise
                resp = None
            except (urllib3.exceptions.HTTPError, OSError):
                resp = None  # the API server is restarting or out of reach: try again
            if resp is not None:
                current[0] = resp
                try:
                    for chunk in _chunks(resp):
                        for line in asm.feed(chunk):
                            seen += 1
                            if seen > given:
                                given = seen
                                yield line
                        if stop.is_set():
                            return
                except (urllib3.exceptions.HTTPError, OSError):
                    dropped = True  # re-open below, unless the pod is done
                finally:
                    current[0] = None
                    _release(resp)
            if stop.is_set():
                return
            try:
                phase = pod_phase(core_api, namespace, pod)
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
                if isinstance(e, ApiException) and not _transient(e):
                    raise
                phase, dropped = "Unknown", True
            if phase is None or phase in TERMINAL_PHASES:
                # The container has exited, so its log is complete. A stream that ended
                # cleanly held all of it (the server ends a follow when the container
                # exits); otherwise catch up on what the lost connection missed.
                if resp is None or dropped:
                    yield from _rest(core_api, namespace, pod, container, given, stop)
                else:
                    last = asm.flush()
                    if last is not None:
                        yield last
                return
            idle = 0 if given > before else idle + 1
            if idle:
                stop.wait(min(5.0, retry_wait * 2 ** min(idle - 1, 4)))
    finally:
        done.set()


def _transient(e: ApiException) -> bool:
    """An answer worth retrying: not started yet (400), throttled (429), server trouble."""
    return e.status in (400, 429) or (e.status or 0) >= 500


def _rest(core_api: Any, namespace: str, pod: str, container: str | None, given: int,
          stop: threading.Event) -> Iterator[str]:  # fmt: skip
    """Lines of an ended pod's whole log after the first ``given``."""
    try:
        resp = _open(core_api, namespace, pod, container, follow=False, tail=None,
                     read_timeout=60.0)  # fmt: skip
    except ApiException as e:
        if e.status in (400, 404):
            return
        raise
    for i, line in enumerate(_read_lines(resp, stop), start=1):
        if i > given:
            yield line


# ---- ranks -----------------------------------------------------------------------------------
def rank_logs(
    core_api: Any,
    namespace: str,
    pods_by_rank: Callable[[], dict[int, str]],
    rank: int | None = 0,
    follow: bool = False,
    tail: int | None = None,
    stop: threading.Event | None = None,
    *,
    on_record: Callable[[int, dict[str, Any]], None] | None = None,
    container: str | None = None,
    finished: Callable[[], bool] | None = None,
    poll: float = 0.5,
    world: int | None = None,
    saved: dict[int, Path] | None = None,
    announce: Callable[[int, str], str | None] | None = None,
) -> Iterator[str]:
    """One rank's lines, or every rank's (``rank=None``) merged, each ``rank_prefixed``.

    ``pods_by_rank()`` names each rank's current pod; ``world`` (ranks 0..world-1) lets
    every-rank follow start before the pods exist. ``saved`` names files holding a rank's
    earlier attempts (a gang retry's copies): their lines come first. Following one rank waits for its
    pod to appear (until ``finished()`` or ``stop``), and moves on to a new pod for the rank
    (a retry) when the one it followed ends; ``announce(rank, pod)`` may give a line to
    show before each pod's lines (a gang retry's attempt marker). Every rank: one reader thread per rank feeds
    a bounded queue, so a slow consumer holds the readers back instead of growing memory.
    """
    stop = stop or threading.Event()
    if rank is not None:
        record = _for_rank(on_record, rank)
        yield from _one_rank(core_api, namespace, pods_by_rank, rank, follow, tail, stop,
                             record, container, finished, poll, saved.get(rank) if saved else None,
                             announce)  # fmt: skip
        return
    pods = pods_by_rank()
    ranks = list(range(world)) if world is not None else sorted(pods)
    if not follow:
        for r in ranks:  # one after another, as kubectl logs --prefix shows them
            for line in _one_rank(core_api, namespace, lambda: pods, r, False, tail, stop,
                                  _for_rank(on_record, r), container, finished, poll,
                                  (saved or {}).get(r)):  # fmt: skip
                yield rank_prefixed(r, line)
        return
    inner = threading.Event()  # ends the readers when the consumer stops or goes away
    q: queue.Queue[tuple[int, str | None]] = queue.Queue(maxsize=QUEUE_LINES)

    def reader(r: int) -> None:
        try:
            for line in _one_rank(core_api, namespace, pods_by_rank, r, True, tail, inner,
                                  _for_rank(on_record, r), container, finished, poll,
                                  (saved or {}).get(r), announce):  # fmt: skip
                while not inner.is_set():
                    try:
                        q.put((r, line), timeout=0.2)
                        break
                    except queue.Full:
                        continue
        except Exception as e:  # one rank's failure must not end the others' stream
            _put_end(q, inner, (r, f"[workbench] log of rank {r} ended: {type(e).__name__}: {e}"))
        finally:
            _put_end(q, inner, (r, None))

    threads = [threading.Thread(target=reader, args=(r,), name=f"log-rank-{r}", daemon=True)
               for r in ranks]  # fmt: skip
    for t in threads:
        t.start()
    open_ranks = len(threads)
    try:
        while open_ranks and not stop.is_set():
            try:
                r, item = q.get(timeout=0.2)
            except queue.Empty:
                continue
            if item is None:
                open_ranks -= 1
            else:
                yield rank_prefixed(r, item)
    finally:
        inner.set()


def _saved_lines(path: Path | None, tail: int | None, stop: threading.Event) -> Iterator[str]:
    if path is None or not path.exists():
        return iter(())
    return read_logs([(0, path)], False, tail, lambda: True, stop)


def _put_end(q: queue.Queue[tuple[int, str | None]], inner: threading.Event,
             item: tuple[int, str | None]) -> None:  # fmt: skip
    while not inner.is_set():
        try:
            q.put(item, timeout=0.2)
            return
        except queue.Full:
            continue


def _for_rank(on_record: Callable[[int, dict[str, Any]], None] | None, rank: int) -> OnRecord:
    if on_record is None:
        return _drop
    return lambda record: on_record(rank, record)


def _one_rank(core_api: Any, namespace: str, pods_by_rank: Callable[[], dict[int, str]],
              rank: int, follow: bool, tail: int | None, stop: threading.Event,
              on_record: OnRecord, container: str | None, finished: Callable[[], bool] | None,
              poll: float, saved: Path | None = None,
              announce: Callable[[int, str], str | None] | None = None) -> Iterator[str]:  # fmt: skip
    pod = pods_by_rank().get(rank)
    earlier = _saved_lines(saved, tail, stop)
    if not follow:
        now: Iterator[str] = iter(())
        if pod is not None:  # with earlier attempts the tail spans both: read the pod whole
            now = pod_lines(core_api, namespace, pod, False, tail if saved is None else None,
                            stop, on_record=on_record, container=container)  # fmt: skip
        both = itertools.chain(earlier, now)
        yield from deque(both, maxlen=tail) if tail is not None and saved is not None else both
        return
    yield from earlier
    done: set[str] = set()
    while not stop.is_set():
        if pod is None or pod in done:
            if finished is None or finished():
                return
            stop.wait(poll)
            pod = pods_by_rank().get(rank)
            continue
        if announce is not None:  # e.g. the attempt marker before a gang retry's pod
            marker = announce(rank, pod)
            if marker is not None:
                yield marker
        yield from pod_lines(core_api, namespace, pod, True, tail, stop,
                             on_record=on_record, container=container)  # fmt: skip
        done.add(pod)
        tail = None  # a retry's pod is shown whole
        pod = pods_by_rank().get(rank)

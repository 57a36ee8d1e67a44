"""The KubernetesBackend parts of bench_kubernetes.py: submit, status and latency through
the backend (store included), against the fake API server. See bench_kubernetes.py."""

from __future__ import annotations

import collections
import concurrent.futures
import multiprocessing
import random
import re
import statistics
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml

from tests.fakes.kube_apiserver import FakeKubeAPIServer
from workbench.backends.kubernetes.backend import KubernetesBackend
from workbench.backends.kubernetes.manifests import INDEX_ANNOTATION, LABEL_JOB
from workbench.settings import Settings
from workbench.spec import JobStatus, TrainSpec

NS = "bench"
PODS, NODES = ("", "v1", "pods"), ("", "v1", "nodes")


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank), in milliseconds for seconds given."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1000, 2)


def backend_on(url: str, home: Path) -> KubernetesBackend:
    """A KubernetesBackend on its own home, its kubeconfig aimed at the fake at ``url``."""
    kubeconfig = home / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}]}))  # fmt: skip
    settings = Settings.load(home=str(home), backend="kubernetes", kubernetes={
        "kubeconfig": str(kubeconfig), "namespace": NS, "flavor": "indexed"})  # fmt: skip
    return KubernetesBackend(settings)


def add_nodes(fake: FakeKubeAPIServer, n: int = 4) -> None:
    """Nodes with GPUs, so admit's capacity check has something to check."""
    res = {"cpu": "96", "memory": "768Gi", "nvidia.com/gpu": "8"}
    for i in range(n):
        fake.state.create(NODES, None, {"metadata": {"name": f"node-{i}"},
                                        "status": {"capacity": res, "allocatable": res}})  # fmt: skip


def request_kind(method: str, path: str) -> str:
    """``POST /apis/batch/v1/namespaces/bench/jobs`` -> ``POST jobs``; watches marked."""
    base, _, query = path.partition("?")
    parts = [p for p in base.split("/") if p]
    plural = next((p for p in reversed(parts) if not re.search(r"\d", p) and p not in (
        NS, "namespaces", "api", "apis", "v1", "batch")), base)  # fmt: skip
    if "watch=true" in query:
        return f"WATCH {plural}"
    named = parts[-1] != plural
    return f"{method} {plural}{'/NAME' if named else ''}"


def _serve(conn: Connection) -> None:
    """The fake in a process of its own, so the client's figures are the client's: it
    answers "url", ("since", i) -> requests served from the i-th on, "cpu" -> its own CPU
    seconds so far (every thread), and "stop"."""
    fake = FakeKubeAPIServer().start()
    add_nodes(fake)
    while True:
        cmd = conn.recv()
        if cmd == "url":
            conn.send(fake.url)
        elif isinstance(cmd, tuple) and cmd[0] == "since":
            with fake.state.lock:
                conn.send(list(fake.state.requests[cmd[1] :]))
        elif cmd == "cpu":
            conn.send(time.process_time())
        else:
            break
    fake.stop()


def bench_submit_apart(n: int, threads: int = 1, baseline: bool = True) -> dict[str, Any]:
    """(d) and (e) with the fake server in another process; with one thread, the typed
    client's baseline around it unless ``baseline`` is False."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(there,), daemon=True)
    proc.start()
    try:
        here.send("url")
        url = here.recv()

        def since(i: int) -> list[tuple[str, str]]:
            here.send(("since", i))
            got: list[tuple[str, str]] = here.recv()
            return got

        def server_cpu() -> float:
            here.send("cpu")
            got: float = here.recv()
            return got

        with tempfile.TemporaryDirectory() as tmp:
            backend = backend_on(url, Path(tmp))
            try:
                if threads > 1 or not baseline:
                    return bench_submit(since, backend, n, threads, server_cpu)
                # The baseline in two halves, before and after, so that drift in this
                # machine's speed falls on both alike.
                first = bench_typed_client(backend, n // 2, "raw-a")
                out = bench_submit(since, backend, n, threads, server_cpu)
                second = bench_typed_client(backend, n - n // 2, "raw-b")
                took, cpu = first[0] + second[0], first[1] + second[1]
                out["baseline_typed_client"] = {"jobs": n, "jobs_per_second": round(n / took, 1),
                                                "cpu_ms_per_job": round(cpu / n * 1000, 2)}  # fmt: skip
                out["ratio_jobs_per_second_over_baseline"] = round(
                    out["jobs_per_second"] / out["baseline_typed_client"]["jobs_per_second"], 2
                )
                return out
            finally:
                backend.close()
    finally:
        here.send("stop")
        proc.join(10)


def bench_typed_client(backend: KubernetesBackend, n: int, prefix: str) -> tuple[float, float]:
    """What a user of the official client writes instead, against the same server: the
    same objects per job, the Job (rendered beforehand, outside the clock; the namespace's
    shared Service exists, as it does for the backend after its warm-up submit), created
    with the typed ``create_namespaced_job``; no store, no files, no checks. Without
    workbench's label, so the backend's watches in this process skip them. Returns
    (wall seconds, CPU seconds)."""
    from kubernetes import client

    api = backend.cluster.api
    batch = client.BatchV1Api(api)
    bodies = []
    for i in range(n):
        spec = TrainSpec.from_dict({"name": f"{prefix}-{i:04d}", "command": ["python", "train.py"],
                                    "image": "pytorch", "workers": 2, "gpus": i % 2})  # fmt: skip
        _shared, job = backend.admit(spec).backend_state["rendered"].manifests
        job["metadata"]["labels"] = {"app": spec.name}
        bodies.append(job)
    t0, cpu0 = time.perf_counter(), time.process_time()
    for job in bodies:
        batch.create_namespaced_job(NS, job)
    return time.perf_counter() - t0, time.process_time() - cpu0


def bench_submit(since: Any, backend: KubernetesBackend, n: int, threads: int = 1,
                 server_cpu: Any = None) -> dict[str, Any]:  # fmt: skip
    """(d) requests per submitted job and (e) client-side submission throughput, one
    submit after another or from ``threads`` threads at once (as the server's request
    handlers submit); ``since(i)`` gives the requests the server saw from the i-th on,
    ``server_cpu()`` (when the server runs apart) its process's CPU seconds."""
    specs = [TrainSpec.from_dict({"name": f"job-{i:04d}", "command": ["python", "train.py"],
                                  "image": "pytorch", "workers": 2, "gpus": i % 2})
             for i in range(n)]  # fmt: skip
    backend.submit(TrainSpec.from_dict({"name": "warm-up", "command": ["python", "x.py"],
                                        "image": "pytorch"}))  # fmt: skip
    time.sleep(0.5)  # the namespace's watches are up (their list + watch requests are once)
    before = len(since(0))
    server0 = server_cpu() if server_cpu else 0.0
    t0, cpu0 = time.perf_counter(), time.process_time()
    if threads == 1:
        for s in specs:
            backend.submit(s)
    else:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            list(pool.map(backend.submit, specs))  # re-raises the first failure
    took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    server = server_cpu() - server0 if server_cpu else None
    stored = backend.store.count(backend=backend.name) - 1  # the warm-up's left out
    assert stored == n, f"{stored} of {n} jobs stored"
    made = since(before)
    kinds = collections.Counter(request_kind(m, p) for m, p in made)
    per_job = {k: round(v / n, 2) for k, v in sorted(kinds.items()) if not k.startswith("WATCH")}
    return {
        "jobs": n,
        "threads": threads,
        "objects_created_per_job": 1,  # the Job (no credentials; the Service is shared)
        "requests_per_job": round(sum(per_job.values()), 2),
        "by_kind_per_job": per_job,
        "seconds": round(took, 2),
        "jobs_per_second": round(n / took, 1),
        # CPU of this whole process per job (its watch threads too; the server's as well
        # when it runs in-process): what one core could do without other load
        "cpu_ms_per_job": round(cpu / n * 1000, 2),
        "jobs_per_cpu_second": round(n / cpu, 1),
        # the fake server's own CPU per job (its process, every thread), when it runs apart:
        # what the server's side of the round trips costs, on the other core
        **({"server_cpu_ms_per_job": round(server / n * 1000, 2)} if server is not None else {}),
    }


def add_pods(fake: FakeKubeAPIServer, backend: KubernetesBackend, names: list[str]) -> None:
    """One Pending pod per job, as the Job controller makes them (no kubelet runs them)."""
    for name in names:
        uid = backend.store.row(name)["details"]["uid"]  # type: ignore[index]
        fake.state.create(PODS, NS, {"metadata": {
            "name": f"{name}-0-abcde", "labels": {LABEL_JOB: name},
            "annotations": {INDEX_ANNOTATION: "0"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                 "uid": uid, "controller": True}]},
            "spec": {"nodeName": "node-0", "containers": [{"name": "main", "image": "i"}]}})  # fmt: skip


def bench_latency(fake: FakeKubeAPIServer, backend: KubernetesBackend, names: list[str],
                  changes: int) -> dict[str, Any]:  # fmt: skip
    """(f) a pod's Pending -> Running on the server until the job's row says Running
    (read from the store, polled every 1 ms, as a surface reads it)."""
    lat: list[float] = []
    now = "2026-12-01T18:00:00Z"
    for name in names[:changes]:
        t0 = time.perf_counter()
        fake.set_pod_phase(NS, f"{name}-0-abcde", "Running", startTime=now, containerStatuses=[
            {"name": "main", "restartCount": 0, "state": {"running": {"startedAt": now}}}])  # fmt: skip
        deadline = t0 + 10
        while backend.store.row(name)["status"] != JobStatus.RUNNING.value:  # type: ignore[index]
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{name} not Running after 10 s")
            time.sleep(0.001)
        lat.append(time.perf_counter() - t0)
    return {"changes": len(lat), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "max_ms": pct(lat, 100), "mean_ms": round(statistics.mean(lat) * 1000, 2)}  # fmt: skip


def bench_keep_current(fake: FakeKubeAPIServer, backend: KubernetesBackend, poller:
                       KubernetesBackend, names: list[str], seconds: float) -> dict[str, Any]:  # fmt: skip
    """(a) requests to keep the running jobs current: the backend's namespace watches vs. a
    backend without them (get() reads the workload and its pods), each job once a second,
    while a controller bumps 10 pods' restartCount every second."""
    truth: dict[str, int] = {}
    lock = threading.Lock()

    def controller(stop: threading.Event) -> None:
        rng, tick = random.Random(7), 0
        while not stop.wait(1.0):
            tick += 1
            for name in rng.sample(names, 10):
                pod = fake.state.get(PODS, NS, f"{name}-0-abcde")
                status = pod["status"]
                status["containerStatuses"][0]["restartCount"] = tick
                fake.state.patch(PODS, NS, pod["metadata"]["name"], {"status": status},
                                 subresource="status")  # fmt: skip
                with lock:
                    truth[name] = tick

    def restarts(name: str) -> int:
        (rank,) = backend.store.rank_rows(name)
        return int((rank.get("details") or {}).get("pod_restarts", 0))

    def window(measure: Any) -> dict[str, Any]:
        stop = threading.Event()
        t = threading.Thread(target=controller, args=(stop,), daemon=True)
        before = len(fake.state.requests)
        t.start()
        extra = measure()
        stop.set()
        t.join()
        time.sleep(0.5)  # the last change reaches the store
        with lock:
            stale = sum(restarts(k) != v for k, v in truth.items())
        return {"requests": len(fake.state.requests) - before, "stale_jobs_at_end": stale, **extra}

    def watching() -> dict[str, Any]:
        time.sleep(seconds)
        return {}

    watched = window(watching)
    truth.clear()

    def polling() -> dict[str, Any]:
        sweeps, late, took = 0, 0, []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            for name in names:
                poller.get(name)  # no watch in this backend: one read of the cluster
            took.append(time.monotonic() - t0)
            sweeps += 1
            late += took[-1] > 1.0
            time.sleep(max(0.0, 1.0 - took[-1]))
        return {"sweeps": sweeps, "sweeps_over_1s": late,
                "sweep_seconds_p50": round(statistics.median(took), 2)}  # fmt: skip

    polled = window(polling)
    needed = 2 * len(names) * seconds  # workload + pods, per job, once a second
    return {
        "jobs": len(names), "seconds": seconds, "watch": watched, "polling": polled,
        "polling_requests_needed": int(needed),
        "ratio_needed_over_watch": round(needed / max(1, watched["requests"]), 1),
        "ratio_made_over_watch": round(polled["requests"] / max(1, watched["requests"]), 1),
    }  # fmt: skip


def run(jobs: int, seconds: float, changes: int, parts: set[str]) -> dict[str, Any]:
    """Every backend part asked for (a: keep current, d+e: submit, f: latency); the
    in-process submit runs always (it makes the jobs a and f use)."""
    out: dict[str, Any] = {}
    fake = FakeKubeAPIServer().start()
    fake.state.faults.bookmark_interval = 10.0  # nearer a real server's ~1/min
    add_nodes(fake)
    if parts & {"d", "e"}:
        out["d_e_submit_server_apart"] = bench_submit_apart(jobs)
        # Several submits in flight overlap one's round trips with another's client work
        # (a server's request handlers, or a sweep submitted from a thread pool).
        for threads in (2, 4):
            out[f"e_submit_server_apart_{threads}_threads"] = bench_submit_apart(jobs, threads)
    with tempfile.TemporaryDirectory() as tmp:
        backend = backend_on(fake.url, Path(tmp))
        try:
            out["d_e_submit_server_in_process"] = bench_submit(
                lambda i: fake.state.requests[i:], backend, jobs
            )
            names = [f"job-{i:04d}" for i in range(jobs)]
            add_pods(fake, backend, names)
            if "f" in parts:
                out["f_latency_to_store"] = bench_latency(fake, backend, names, min(changes, jobs))
            for name in names[changes:]:  # every job running before the status window
                fake.set_pod_phase(NS, f"{name}-0-abcde", "Running", containerStatuses=[
                    {"name": "main", "restartCount": 0, "state": {"running": {}}}])  # fmt: skip
            if "a" in parts:
                time.sleep(1.0)
                poller = KubernetesBackend(backend.settings, store=backend.store)
                try:
                    out["a_requests"] = bench_keep_current(fake, backend, poller, names, seconds)
                finally:
                    poller.close()
        finally:
            backend.close()
            fake.stop()
    return out

"""Kubernetes status, latency and manifests, against the fake API server (tests/fakes), not a
real cluster: none can run where this project is developed.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_kubernetes.py [--jobs 500] [--seconds 60]
        [--changes 500] [--manifests 1000] [--only a,b,c]

(a) Requests to keep --jobs running jobs' status current for --seconds: one
    NamespaceWatch per resource (batch Jobs and their pods, label-selected), against a
    naive client that reads every job's status once a second. Meanwhile a "controller"
    changes 10 jobs' status every second; both views are checked against the server's
    truth at the end. Requests are counted by the fake server (every request it served).
(b) Latency from a pod status change written on the server to NamespaceWatch's callback,
    --changes changes one after another (p50/p99), then all at once (time until the last
    is delivered). The fake runs in this process, so both ends share one clock (and the GIL:
    a real API server in its own process would not compete with the client for it).
(c) render() + validation per job, --manifests jobs per flavour (gpus 0/1/2, mounts
    none/pvc/nas/s3 in turn): rendering alone, and kubernetes-validate strict (core kinds)
    + jsonschema against the CRD (PyTorchJob), as tests/kubernetes/test_manifests.py does.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client

from tests.fakes.kube_apiserver import FakeKubeAPIServer
from workbench.backends.kubernetes import watch

NS = "bench"
SELECTOR = "app.kubernetes.io/managed-by=workbench"
JOBS = ("batch", "v1", "jobs")
PODS = ("", "v1", "pods")


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank), in milliseconds for seconds given."""
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1000, 2)


def populate(fake: FakeKubeAPIServer, n: int) -> None:
    """n running Jobs, one running pod each, labelled as the backend labels them."""
    labels = {"app.kubernetes.io/managed-by": "workbench"}
    for i in range(n):
        name = f"job-{i:04d}"
        fake.state.create(JOBS, NS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": name, "labels": labels}, "spec": {"template": {}}})  # fmt: skip
        fake.state.patch(
            JOBS, NS, name, {"status": {"active": 1, "ready": 0}}, subresource="status"
        )
        fake.state.create(PODS, NS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{name}-0", "labels": {**labels, "job-name": name}},
            "spec": {"containers": [{"name": "main", "image": "x"}]}})  # fmt: skip
        fake.set_pod_phase(NS, f"{name}-0", "Running")


def bench_requests(
    fake: FakeKubeAPIServer, api: client.ApiClient, n: int, seconds: float
) -> dict[str, Any]:
    """(a): a watch per resource against polling every job every second."""
    names = [f"job-{i:04d}" for i in range(n)]
    ready: dict[str, int] = {}  # the server's truth: status.ready per job
    lock = threading.Lock()

    def controller(stop: threading.Event) -> None:
        rng = random.Random(7)
        tick = 0
        while not stop.wait(1.0):
            tick += 1
            for name in rng.sample(names, 10):
                fake.state.patch(JOBS, NS, name, {"status": {"ready": tick}}, subresource="status")
                with lock:
                    ready[name] = tick

    def run_window(measure: Any) -> dict[str, Any]:
        stop = threading.Event()
        t = threading.Thread(target=controller, args=(stop,), daemon=True)
        before = len(fake.state.requests)
        t.start()
        extra = measure(stop)
        stop.set()
        t.join()
        return {"requests": len(fake.state.requests) - before, **extra}

    # -- one watch per resource --
    seen: dict[str, int] = {}

    def on_job(ev: watch.WatchEvent) -> None:
        seen[ev.name] = (ev.object.get("status") or {}).get("ready", 0)

    def with_watch(stop: threading.Event) -> dict[str, Any]:
        jw = watch.jobs(api, NS, on_job, SELECTOR).start()
        pw = watch.pods(api, NS, lambda ev: None, SELECTOR).start()
        jw.wait_synced(30)
        pw.wait_synced(30)
        time.sleep(seconds)
        stop.set()
        time.sleep(0.5)  # the last changes reach the callback
        jw.stop()
        pw.stop()
        return {"watch_stats": {"jobs": vars(jw.stats), "pods": vars(pw.stats)}}

    watched = run_window(with_watch)
    with lock:
        truth = dict(ready)
    watched["matches_server"] = all(seen.get(k, 0) == v for k, v in truth.items())
    ready.clear()

    # -- the naive client: every job's status, every second --
    batch = client.BatchV1Api(api)
    polled: dict[str, int] = {}

    def with_polling(stop: threading.Event) -> dict[str, Any]:
        sweeps, late, durations = 0, 0, []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.monotonic()
            for name in names:
                obj = batch.read_namespaced_job_status(name, NS, _preload_content=False)
                polled[name] = (json.loads(obj.data).get("status") or {}).get("ready", 0)
            took = time.monotonic() - start
            durations.append(took)
            sweeps += 1
            if took > 1.0:
                late += 1
            else:
                time.sleep(1.0 - took)
        return {"sweeps": sweeps, "sweeps_over_1s": late,
                "sweep_seconds_p50": round(statistics.median(durations), 3)}  # fmt: skip

    polling = run_window(with_polling)
    with lock:
        truth = dict(ready)
    # The last sweep may predate the last change: compare what it could have seen.
    polling["stale_jobs_at_end"] = sum(polled.get(k, 0) != v for k, v in truth.items())
    needed = n * seconds  # what once a second costs, whether or not the client keeps up
    return {
        "jobs": n,
        "seconds": seconds,
        "watch": watched,
        "polling": polling,
        "polling_requests_needed": int(needed),
        "ratio_needed_over_watch": round(needed / max(1, watched["requests"]), 1),
        "ratio_made_over_watch": round(polling["requests"] / max(1, watched["requests"]), 1),
    }


def bench_latency(
    fake: FakeKubeAPIServer, api: client.ApiClient, n: int, changes: int
) -> dict[str, Any]:
    """(b): pod status change on the server -> NamespaceWatch callback."""
    arrived: dict[tuple[str, str], float] = {}
    cond = threading.Condition()

    def on_pod(ev: watch.WatchEvent) -> None:
        msg = (ev.object.get("status") or {}).get("message")
        with cond:
            arrived[(ev.name, str(msg))] = time.perf_counter()
            cond.notify_all()

    pw = watch.pods(api, NS, on_pod, SELECTOR).start()
    pw.wait_synced(30)
    names = [f"job-{i:04d}-0" for i in range(n)]
    one_by_one: list[float] = []
    for i in range(changes):
        name, msg = names[i % n], f"seq-{i}"
        t0 = time.perf_counter()
        fake.set_pod_phase(NS, name, "Running", message=msg)
        with cond:
            cond.wait_for(lambda name=name, msg=msg: (name, msg) in arrived, 10)
        one_by_one.append(arrived[(name, msg)] - t0)
    t0 = time.perf_counter()
    for i in range(changes):
        fake.set_pod_phase(NS, names[i % n], "Running", message=f"burst-{i}")
    with cond:
        cond.wait_for(lambda: sum(k[1].startswith("burst-") for k in arrived) >= changes, 60)
    burst = max(v for k, v in arrived.items() if k[1].startswith("burst-")) - t0
    pw.stop()
    return {
        "changes": changes,
        "sequential_ms": {
            "p50": pct(one_by_one, 50),
            "p99": pct(one_by_one, 99),
            "max": pct(one_by_one, 100),
        },
        "burst_all_delivered_ms": round(burst * 1000, 1),
        "watch_requests": pw.stats.lists + pw.stats.watches,
    }


def bench_manifests(count: int) -> dict[str, Any]:
    """(c): render + validate, per job."""
    from tests.kubernetes.test_manifests import OPTIONS, crd_validator, validate
    from workbench.backends.kubernetes.manifests import render
    from workbench.catalog import load_catalog
    from workbench.spec import TrainSpec

    catalog = load_catalog()
    mounts = [[], ["pvc://datasets/imagenet:/data"], ["nas://10.0.0.5/exports/x:/data:ro"],
              ["s3://bucket-a/train:/data"]]  # fmt: skip
    crd_validator("PyTorchJob")  # built once (seconds), as the tests do
    out: dict[str, Any] = {}
    for flavor in ("indexed", "kubeflow"):
        specs = [TrainSpec.from_dict({"name": f"job-{i}", "command": ["torchrun", "train.py"],
                                      "image": "pytorch", "workers": 1 + i % 4, "gpus": i % 3,
                                      "data": mounts[i % 4], "env": {"LR": "0.1"}}).validate(catalog)
                 for i in range(count)]  # fmt: skip
        t0 = time.perf_counter()
        jobs = [render(s, catalog.spec(s.instance_spec or ""), s.image_ref(catalog), OPTIONS, flavor)
                for s in specs]  # fmt: skip
        rendered_s = time.perf_counter() - t0
        objects = [o for j in jobs for o in j.display_manifests()]
        t0 = time.perf_counter()
        for o in objects:
            validate(o)
        validated_s = time.perf_counter() - t0
        out[flavor] = {
            "jobs": count,
            "objects": len(objects),
            "render_ms_per_job": round(rendered_s / count * 1000, 3),
            "validate_ms_per_object": round(validated_s / len(objects) * 1000, 3),
            "render_and_validate_ms_per_job": round((rendered_s + validated_s) / count * 1000, 3),
        }
    return out


def main() -> None:
    """Run the parts asked for and print the figures."""
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--changes", type=int, default=500)
    p.add_argument("--manifests", type=int, default=1000)
    p.add_argument("--only", default="a,b,c")
    args = p.parse_args()
    parts = set(args.only.split(","))
    result: dict[str, Any] = {"against": "the fake API server (tests/fakes), in this process"}
    if parts & {"a", "b"}:
        fake = FakeKubeAPIServer().start()
        fake.state.faults.bookmark_interval = 10.0  # nearer a real server's ~1/min
        try:
            populate(fake, args.jobs)
            with client.ApiClient(client.Configuration(host=fake.url)) as api:
                if "a" in parts:
                    result["a_requests"] = bench_requests(fake, api, args.jobs, args.seconds)
                if "b" in parts:
                    result["b_latency"] = bench_latency(fake, api, args.jobs, args.changes)
        finally:
            fake.stop()
    if "c" in parts:
        result["c_manifests"] = bench_manifests(args.manifests)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

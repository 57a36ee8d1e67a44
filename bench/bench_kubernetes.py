"""Kubernetes submit, status, latency and manifests, against the fake API server
(tests/fakes), not a real cluster: none can run where this project is developed.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_kubernetes.py [--jobs 500] [--seconds 60]
        [--changes 500] [--manifests 1000] [--only a,b,c,d,e,f]

Through KubernetesBackend (its store included; bench/_kube_backend_bench.py):
(d) API requests per submitted job, counted at the fake server, by kind.
(e) Client-side submission throughput: --jobs KubernetesBackend.submit calls in a row, with
    the fake server in another process (so the figure is the client's), and in-process;
    from 4 threads at once; and, as the baseline, the official client's typed create calls
    for the same manifests against the same server (half before, half after).
(f) Latency from a pod's Pending -> Running written on the server to the job's row in the
    store saying Running (the store polled every 1 ms, as a surface reads it).
(a) Requests to keep --jobs running jobs current for --seconds: the backend's namespace
    watches (pods, Jobs, PyTorchJobs, Events) against a backend without them, whose get()
    reads each job's workload and pods, once a second per job. Meanwhile a "controller"
    bumps 10 pods' restartCount every second; both are checked against the server's truth
    (the rank rows' pod_restarts) at the end.
The watch layer alone:
(b) Latency from a pod status change written on the server to NamespaceWatch's callback,
    --changes changes one after another (p50/p99), then all at once (time until the last
    is delivered). The fake runs in this process, so both ends share one clock (and the GIL:
    a real API server in its own process would not compete with the client for it).
(c) render() + validation per job, --manifests jobs per flavour in manifests.FLAVORS and
    per export kind in manifests.KINDS where it exists (gpus 0/1/2, mounts none/pvc/nas/s3
    in turn): rendering alone, and kubernetes-validate strict (core kinds) + jsonschema
    against the CRD (custom kinds), as tests/kubernetes/test_manifests.py does.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

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
    """(c): render + validate, per job, for every flavour (and export kind, where the
    module has KINDS and render_as); a flavour this branch cannot render yet is reported."""
    from tests.kubernetes.test_manifests import OPTIONS
    from tests.kubernetes.test_manifests import validate as validate_core_and_kubeflow
    from tests.kubernetes.test_volcano import validate_volcano

    def validate(obj: dict[str, Any]) -> None:
        """As the tests check each kind: Volcano's Job against its own CRD."""
        if obj["apiVersion"].startswith("batch.volcano.sh/"):
            validate_volcano(obj)
        else:
            validate_core_and_kubeflow(obj)

    from workbench.backends.kubernetes import manifests
    from workbench.catalog import load_catalog
    from workbench.errors import SpecError
    from workbench.spec import TrainSpec

    catalog = load_catalog()
    mounts = [[], ["pvc://datasets/imagenet:/data"], ["nas://10.0.0.5/exports/x:/data:ro"],
              ["s3://bucket-a/train:/data"]]  # fmt: skip
    specs = [TrainSpec.from_dict({"name": f"job-{i}", "command": ["torchrun", "train.py"],
                                  "image": "pytorch", "workers": 1 + i % 4, "gpus": i % 3,
                                  "data": mounts[i % 4], "env": {"LR": "0.1"}}).validate(catalog)
             for i in range(count)]  # fmt: skip
    targets: list[tuple[str, Any]] = [
        (f"flavor {f}", lambda s, f=f: manifests.render(
            s, catalog.spec(s.instance_spec or ""), s.image_ref(catalog), OPTIONS, f))
        for f in manifests.FLAVORS
    ]  # fmt: skip
    render_as = getattr(manifests, "render_as", None)
    for kind in getattr(manifests, "KINDS", ()) if render_as else ():
        targets.append((f"kind {kind}", lambda s, k=kind: render_as(
            s, catalog.spec(s.instance_spec or ""), s.image_ref(catalog), OPTIONS, k)))  # fmt: skip
    out: dict[str, Any] = {}
    for label, render in targets:
        t0 = time.perf_counter()
        try:
            jobs = [render(s) for s in specs]
        except SpecError as e:
            out[label] = {"not rendered": str(e)}
            continue
        rendered_s = time.perf_counter() - t0
        objects = [o for j in jobs for o in j.display_manifests()]
        for o in {(o["apiVersion"], o["kind"]): o for o in objects}.values():
            validate(o)  # builds each kind's validator once (seconds for a CRD), untimed
        t0 = time.perf_counter()
        for o in objects:
            validate(o)
        validated_s = time.perf_counter() - t0
        out[label] = {
            "jobs": count,
            "objects": len(objects),
            "kinds": sorted({o["kind"] for o in objects}),
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
    p.add_argument("--only", default="a,b,c,d,e,f")
    args = p.parse_args()
    parts = set(args.only.split(","))
    result: dict[str, Any] = {"against": "the fake API server (tests/fakes)"}
    if parts & {"a", "d", "e", "f"}:
        from _kube_backend_bench import run

        result["through_the_backend"] = run(args.jobs, args.seconds, args.changes, parts)
    if "b" in parts:
        fake = FakeKubeAPIServer().start()
        fake.state.faults.bookmark_interval = 10.0  # nearer a real server's ~1/min
        try:
            populate(fake, args.jobs)
            with client.ApiClient(client.Configuration(host=fake.url)) as api:
                result["b_latency_to_watch_callback"] = bench_latency(
                    fake, api, args.jobs, args.changes
                )
        finally:
            fake.stop()
    if "c" in parts:
        result["c_manifests"] = bench_manifests(args.manifests)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

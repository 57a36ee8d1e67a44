"""The ``volcano`` flavour: Volcano Jobs validate against Volcano's CRD (pod templates
strictly as core kinds) and give every rank the local env contract through Volcano's own
variables; against the fake Volcano (tests/fakes/kube_volcano.py) a gang that cannot fit
creates no pod and waits with Volcano's reason, and a 2-worker torch DDP job completes."""

from __future__ import annotations

import copy
import functools
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.backends.contract import BackendContract
from tests.conftest import wait_for
from tests.fakes.kube_apiserver import FakeKubeAPIServer
from tests.fakes.kube_kubelet import FakeCluster, expand
from tests.fakes.kube_volcano import PODGROUPS, hosts_data
from tests.kubernetes.test_backend import NS, spec, write_kubeconfig
from tests.kubernetes.test_manifests import (
    CRDS,
    ENV_TOKEN,
    K8S_VERSION,
    S3_KEY,
    S3_SECRET,
    _strict,
    make,
    rendered,
)
from workbench.contract import World, worker_env
from workbench.errors import SpecError
from workbench.manager import JobManager
from workbench.settings import Settings
from workbench.spec import JobStatus, TrainSpec

PODS = ("", "v1", "pods")


@functools.cache
def volcano_validator(plural: str, version: str) -> jsonschema.Draft7Validator:
    """Volcano's CRD schema, strict as the API server's pruning (unknown fields fail)."""
    doc = yaml.safe_load((CRDS / f"{plural}.yaml").read_text())
    schema = next(v for v in doc["spec"]["versions"] if v["name"] == version)["schema"]
    return jsonschema.Draft7Validator(_strict(copy.deepcopy(schema["openAPIV3Schema"])))


def validate_volcano(obj: dict[str, Any]) -> None:
    """The Job against batch.volcano.sh_jobs (v1alpha1), each task's pod template strictly
    as a core PodTemplate of Kubernetes 1.37."""
    assert obj["apiVersion"] == "batch.volcano.sh/v1alpha1" and obj["kind"] == "Job"
    volcano_validator("batch.volcano.sh_jobs", "v1alpha1").validate(obj)
    for task in obj["spec"]["tasks"]:
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                   "template": task["template"]}  # fmt: skip
        kubernetes_validate.validate(wrapped, K8S_VERSION, strict=True)


@pytest.mark.parametrize(("gpus", "mounts"), [(0, "none"), (1, "pvc"), (2, "nas"), (1, "s3")])
def test_volcano_job_validates_and_is_one_gang(gpus: int, mounts: str) -> None:
    s = make(workers=3, gpus=gpus, mounts=mounts, queue="research")
    job = rendered(s, "volcano")
    (obj,) = job.manifests
    validate_volcano(obj)
    spec_ = obj["spec"]
    assert spec_["minAvailable"] == 3 and spec_["schedulerName"] == "volcano"
    assert spec_["queue"] == "research" and spec_["priorityClassName"] == "high"
    assert set(spec_["plugins"]) == {"svc", "env"}
    (task,) = spec_["tasks"]
    assert (task["name"], task["replicas"], task["minAvailable"]) == ("worker", 3, 3)
    pod = task["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["priorityClassName"] == "high"
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits.get("nvidia.com/gpu") == (str(gpus) if gpus else None)
    dumped = job.to_yaml() + json.dumps(job.manifests)
    for value in (S3_KEY, S3_SECRET, ENV_TOKEN):
        assert value not in dumped
    # The config's queue stands in when the spec names none; Volcano's default otherwise.
    assert "queue" not in rendered(make(), "volcano").manifests[0]["spec"]


def test_volcano_pods_get_the_local_env_contract_from_volcanos_variables(tmp_path: Path) -> None:
    """Each rank's env as Volcano's env and svc plugins leave it, through the rendered
    shell prologue run by a real sh: the same variables a local job gets."""
    procs = 2
    s = make(workers=3, gpus=procs, procs_per_worker=procs)
    job = rendered(s, "volcano").manifests[0]
    main = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    hosts = tuple(f"mnist-1-worker-{i}.mnist-1" for i in range(3))
    world = World(3, procs, hosts[0], 23456, hosts, (23456,) * 3)
    plugins = hosts_data(job)  # what the svc plugin's ConfigMap holds
    assert plugins["worker.host"].splitlines() == list(hosts)
    static = {e["name"]: e["value"] for e in main["env"] if "value" in e}
    for index in range(3):
        for from_file in (False, True):
            env = {"PATH": os.environ["PATH"], **static, "VC_TASK_INDEX": str(index),
                   "VC_WORKER_NUM": plugins["VC_WORKER_NUM"]}  # fmt: skip
            if not from_file:
                env["VC_WORKER_HOSTS"] = plugins["VC_WORKER_HOSTS"]
            argv = [expand(a, env) for a in main["command"][:3]] + ["env"]
            if from_file:  # --inject-hosts-env=false: the prologue reads the mounted file
                hosts_file = tmp_path / "worker.host"
                hosts_file.write_text(plugins["worker.host"])
                argv[2] = argv[2].replace("/etc/volcano/worker.host", str(hosts_file))
            out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
            seen = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
            expected = worker_env("pytorch", world, index, "mnist-1")
            assert {k: seen.get(k) for k in expected} == expected, (index, from_file)
            assert seen["WORLD_SIZE"] == "6" and seen["PET_NNODES"] == "3"


def test_volcano_validation_and_names_catch_bad_input() -> None:
    obj = copy.deepcopy(rendered(make(), "volcano").manifests[0])
    validate_volcano(obj)
    for breakage in (lambda o: o["spec"].update(minAvailable="2"),
                     lambda o: o["spec"]["tasks"][0].update(replica=2),
                     lambda o: o["spec"]["tasks"][0]["template"]["spec"]["containers"][0].update(envv=[])):  # fmt: skip
        broken = copy.deepcopy(obj)
        breakage(broken)
        with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
            validate_volcano(broken)
    with pytest.raises(SpecError) as e:
        rendered(make(queue="Research_Q"), "volcano")
    assert e.value.field == "queue"
    with pytest.raises(SpecError) as e:  # the svc plugin's Service is named after the job
        rendered(make(name="7b-run"), "volcano")
    assert e.value.field == "name" and "volcano" in str(e.value)


# ---- the gang's life on the fake Volcano: the BackendContract's gang cases ---------------------
class TestVolcanoGangContract(BackendContract):
    """The BackendContract's gang cases (a failed rank stops the gang, retries restart it
    whole with the next WORKBENCH_ATTEMPT, cancel stops every rank) on Volcano Jobs. The
    whole suite passes too (10 cases, ~25 s); the others are left out here (set to None,
    which pytest does not collect) to keep the added time small."""

    runtime = "pod"
    test_submit_runs_to_succeeded = None  # type: ignore[assignment]
    test_change_feed_reports_pending_running_succeeded = None  # type: ignore[assignment]
    test_retries_exhausted_fail_the_job = None  # type: ignore[assignment]
    test_admit_has_no_side_effects_and_launch_runs_the_plan = None  # type: ignore[assignment]
    test_logs_of_one_rank_and_of_every_rank = None  # type: ignore[assignment]
    test_logs_follow_until_the_job_ends = None  # type: ignore[assignment]
    test_env_contract_reaches_every_rank = None  # type: ignore[assignment]

    @pytest.fixture
    def jobs(self, volcano_jobs: JobManager) -> JobManager:
        """The Volcano manager of this module."""
        return volcano_jobs


# ---- fractional GPUs ------------------------------------------------------------------------
def _limits(job: Any) -> dict[str, str]:
    pod = job.manifests[-1]["spec"]
    tmpl = pod["template"] if "template" in pod else pod["tasks"][0]["template"]
    return dict(tmpl["spec"]["containers"][0]["resources"]["limits"])


def test_fractional_gpus_per_sharing_scheme() -> None:
    from workbench.backends.kubernetes.manifests import ClusterOptions, render
    from workbench.catalog import load_catalog

    catalog = load_catalog()
    half = make(gpus=0.5, instance_spec="gpu.0.5x")
    quarter = make(gpus=0.25, instance_spec="gpu.1x")

    def out(s: TrainSpec, scheme: str, flavor: str = "indexed") -> Any:
        opts = ClusterOptions(namespace=NS, gpu_sharing=scheme)
        return render(s, catalog.spec(s.instance_spec or ""), "img", opts, flavor)

    with pytest.raises(SpecError) as e:
        out(half, "none")
    assert e.value.field == "gpus" and "gpu_sharing" in str(e.value)
    # gpu.0.5x is half an A10 listed at 12Gi: the share is 12 GiB of a 24 GiB GPU.
    assert _limits(out(half, "gpushare")) == {"memory": "15Gi", "aliyun.com/gpu-mem": "12"}
    assert _limits(out(quarter, "gpushare"))["aliyun.com/gpu-mem"] == "6"
    hami = _limits(out(half, "hami", "volcano"))
    assert {k: hami[k] for k in hami if k != "memory"} == {
        "nvidia.com/gpu": "1", "nvidia.com/gpumem": "12288", "nvidia.com/gpucores": "50"}  # fmt: skip
    validate_volcano(out(half, "hami", "volcano").manifests[0])
    job = out(half, "gpushare", "kubeflow").manifests[0]
    assert job["kind"] == "PyTorchJob"  # every flavour takes the share


# ---- against the fake Volcano -------------------------------------------------------------
@pytest.fixture
def volcano_jobs(kube_fake: FakeKubeAPIServer, wb_home: Path, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[JobManager]:  # fmt: skip
    """A manager on a fake cluster that serves Volcano (2 nodes x 2 GPUs)."""
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc", kube_fake.url)))
    monkeypatch.setenv("WORKBENCH_K8S_NAMESPACE", NS)
    cluster = FakeCluster(kube_fake, tmp_path / "cluster", grace=2, volcano=True,
                          nodes={"node-a": 2, "node-b": 2}).start()  # fmt: skip
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    m = JobManager(Settings.load(backend="kubernetes", kubernetes={
        "flavor": "volcano", "volcano_queue": "research", "master_port": port}))  # fmt: skip
    yield m
    for record in m.list(status=["Pending", "Running", "Cancelling"]):
        m.cancel(record.name, wait=15)
    m.backend("kubernetes").close()  # type: ignore[attr-defined]
    cluster.stop()


def gang_diagnosis(m: JobManager, state: Any) -> str:
    """What the fake cluster and the backend's watches held when the gang test timed out."""
    import threading

    from tests.fakes.kube_volcano import VCJOBS

    backend = m.backend("kubernetes")
    trackers = {str(k): {"alive": t.alive, "podgroups": sorted(t.podgroups),
                         "workloads": sorted(t.workloads),
                         "watches": [(w._thread.name if w._thread else None,
                                      bool(w._thread and w._thread.is_alive())) for w in t.watches]}
                for k, t in getattr(backend, "_trackers", {}).items()}  # fmt: skip
    out = {
        "records": {
            n: {
                k: v
                for k, v in m.get(n).to_dict().items()
                if k in ("status", "reason", "message", "events", "ranks", "details")
            }
            for n in ("holder", "vddp")
        },
        "podgroups": state.list(PODGROUPS, None)[0],
        "vcjobs": [(j["metadata"]["name"], j.get("status")) for j in state.list(VCJOBS, None)[0]],
        "pods": [
            (
                p["metadata"]["name"],
                p.get("spec", {}).get("nodeName"),
                (p.get("status") or {}).get("phase"),
            )
            for p in state.list(PODS, None)[0]
        ],
        "nodes": [
            (n["metadata"]["name"], n.get("status", {}).get("allocatable"))
            for n in state.list(("", "v1", "nodes"), None)[0]
        ],
        "trackers": trackers,
        "threads": sorted(t.name for t in threading.enumerate()),
    }
    return "timed out waiting for Unschedulable:\n" + json.dumps(out, indent=1, default=str)


def test_gang_waits_whole_with_volcanos_reason_then_torch_ddp_completes(
    volcano_jobs: JobManager, kube_fake: FakeKubeAPIServer
) -> None:
    """A 2-worker torch DDP gang that does not fit waits Pending with Volcano's reason and
    no pod; once the GPU it needs is freed the whole gang starts and trains to the end."""
    m, state = volcano_jobs, kube_fake.state
    m.submit(spec(["python", "sleeper.py"], name="holder", gpus=1, workers=1))
    wait_for(lambda: m.get("holder").status is JobStatus.RUNNING, timeout=60, what="holder runs")
    assert m.get("holder").details["queue"] == "research"  # the config's volcano_queue
    gang = m.submit(TrainSpec.from_dict({
        "name": "vddp", "image": "pytorch:2.13-cpu", "workers": 2, "gpus": 2, "procs_per_worker": 1,
        "queue": "urgent",
        "command": ["python", "-m", "workbench.examples.train_ddp", "--epochs", "1", "--steps", "5"]}))  # fmt: skip
    assert gang.details["kind"] == "Job.batch.volcano.sh" and gang.details["queue"] == "urgent"
    try:
        wait_for(lambda: m.get("vddp").reason == "Unschedulable", timeout=60, what="Unschedulable")
    except AssertionError:
        raise AssertionError(gang_diagnosis(m, state)) from None
    record = m.get("vddp")
    assert record.status is JobStatus.PENDING
    assert record.message == "resource in cluster is overused: overused nvidia.com/gpu"
    assert record.to_dict()["reason"] == "Unschedulable"
    (pg,) = state.list(PODGROUPS, NS, "workbench.io/job=vddp")[0]
    volcano_validator("scheduling.volcano.sh_podgroups", "v1beta1").validate(pg)
    assert pg["status"]["phase"] == "Pending" and pg["spec"]["minMember"] == 2
    assert pg["spec"]["queue"] == "urgent"
    # Never half-started: no pod of the gang exists while it waits.
    assert state.list(PODS, NS, "workbench.io/job=vddp")[0] == []
    assert all(r.state.value == "Pending" for r in record.ranks)
    m.cancel("holder", wait=30)  # frees the GPU: the whole gang is admitted and runs
    done = m.wait("vddp", timeout=120)
    logs = list(m.logs("vddp", rank=None))
    assert done.status is JobStatus.SUCCEEDED, (logs, [e.to_dict() for e in done.events])
    finals = [x for x in logs if " done " in x]
    assert len(finals) == 2 and all(" world 2 " in x for x in finals), logs
    assert {r.node for r in done.ranks} == {"node-a", "node-b"}
    assert done.reason == "Succeeded" and not done.message.startswith("resource in cluster")
    reasons = [e.reason for e in done.events]
    assert reasons.index("Unschedulable") < reasons.index("Started"), reasons


# ---- GPU shares on the fake cluster: capacity check and `top` -------------------------------
SHARED_NODES = {
    "node-a": {"resources": {"aliyun.com/gpu-mem": "48", "aliyun.com/gpu-count": "2"},
               "labels": {"nvidia.com/gpu.product": "NVIDIA-A10"}},
    "node-b": {"resources": {"nvidia.com/gpu": "20", "nvidia.com/gpumem": "49152",
                             "nvidia.com/gpucores": "200"},
               "labels": {"nvidia.com/gpu.product": "NVIDIA-A10", "nvidia.com/gpu.count": "2"}},
}  # fmt: skip


def test_gpu_shares_are_checked_placed_and_shown_by_top(
    kube_fake: FakeKubeAPIServer, wb_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workbench.tables import top_text

    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc", kube_fake.url)))
    monkeypatch.setenv("WORKBENCH_K8S_NAMESPACE", NS)
    cluster = FakeCluster(kube_fake, tmp_path / "cluster", grace=2, volcano=True,
                          nodes={"node-a": 0, "node-b": 0}, node_extra=SHARED_NODES).start()  # fmt: skip
    managers = {scheme: JobManager(Settings.load(backend="kubernetes", kubernetes={
        "flavor": "volcano", "gpu_sharing": scheme})) for scheme in ("gpushare", "hami")}  # fmt: skip
    half = {"gpus": 0.5, "instance_spec": "gpu.0.5x"}
    try:
        gpushare, hami = managers["gpushare"], managers["hami"]
        with pytest.raises(SpecError) as e:  # 4 x 12 GiB is all node-a has
            gpushare.admit(spec(["python", "sleeper.py"], name="wide", workers=5, **half))
        assert e.value.field == "workers" and "at most 4" in str(e.value)
        gpushare.submit(spec(["python", "sleeper.py"], name="sh", workers=3, **half))
        hami.submit(spec(["python", "sleeper.py"], name="hm", workers=1, **half))
        for m, name in ((gpushare, "sh"), (hami, "hm")):
            wait_for(lambda m=m, name=name: m.get(name).status is JobStatus.RUNNING, timeout=60,
                     what=f"{name} runs")  # fmt: skip
        nodes = {n.name: n for n in gpushare.nodes(backend="kubernetes")}
        a, b = nodes["node-a"], nodes["node-b"]
        assert [g.memory_total for g in a.gpus] == [24 * 2**30] * 2
        assert [(g.allocated, [(h.job, h.rank, h.share) for h in g.holders]) for g in a.gpus] == [
            (1.0, [("sh", 0, 0.5), ("sh", 1, 0.5)]), (0.5, [("sh", 2, 0.5)])]  # fmt: skip
        assert [(g.allocated, [(h.job, h.share) for h in g.holders]) for g in b.gpus] == [
            (0.5, [("hm", 0.5)]), (0.0, [])]  # fmt: skip
        assert [(j.name, j.gpus_total) for j in a.active_jobs] == [("sh", 1.5)]
        text = top_text([a, b])
        assert "sh/0 (0.5), sh/1 (0.5)" in text and "hm/0 (0.5)" in text
        assert "GPU shares: 36.0 of 48.0 GiB GPU memory held, 1.5 of 2 GPUs" in text
        assert "GPU shares: 12.0 of 48.0 GiB GPU memory held, 0.5 of 2 GPUs" in text
    finally:
        for m in managers.values():
            for record in m.list(status=["Pending", "Running", "Cancelling"]):
                m.cancel(record.name, wait=15)
            m.backend("kubernetes").close()  # type: ignore[attr-defined]
        cluster.stop()


# ---- CSI volumes from the driver table ------------------------------------------------------
OSS_AK, OSS_SK = "LTAI5tExampleKey9", "oss/secret+Value=9"


def test_csi_volumes_from_the_driver_table_keep_credentials_in_the_secret() -> None:
    from urllib.parse import quote

    from workbench.backends.kubernetes.config import load_settings
    from workbench.backends.kubernetes.manifests import ClusterOptions, render
    from workbench.catalog import load_catalog

    catalog = load_catalog()
    table = load_settings({"csi_drivers": {
        "oss": {"volume_attributes": {"url": "oss-cn-hangzhou-internal.aliyuncs.com"}},
        "cpfs": {"driver": "nasplugin.csi.alibabacloud.com",
                 "volume_attributes": {"server": "{host}", "path": "/{path}", "vers": "3"}},
    }}).csi_drivers  # fmt: skip
    data = [f"oss://{OSS_AK}:{quote(OSS_SK, safe='')}@imagenet/train:/data",
            "cpfs://cpfs-0123.cn-hangzhou.cpfs.aliyuncs.com/share/ckpt:/ckpt:rw",
            "nas://0a1b.cn-hangzhou.nas.aliyuncs.com/exports/x:/nas"]  # fmt: skip

    def out(csi: Any, flavor: str, **extra: Any) -> Any:
        s = make(**{"data": data, **extra})
        opts = ClusterOptions(namespace=NS, csi_drivers=csi)
        return render(s, catalog.spec(s.instance_spec or ""), "img", opts, flavor)

    for flavor in ("indexed", "volcano"):
        job = out(table, flavor)
        obj = job.manifests[-1]
        tmpl = (
            obj["spec"]["template"] if flavor == "indexed" else obj["spec"]["tasks"][0]["template"]
        )
        pod = tmpl["spec"]
        if flavor == "volcano":
            validate_volcano(obj)
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        oss, cpfs, nas = pod["volumes"]
        assert oss["csi"] == {
            "driver": "ossplugin.csi.alibabacloud.com", "readOnly": True,
            "volumeAttributes": {"bucket": "imagenet", "path": "/train",
                                 "otherOpts": "-o max_stat_cache_size=0 -o allow_other",
                                 "url": "oss-cn-hangzhou-internal.aliyuncs.com"},
            "nodePublishSecretRef": {"name": "mnist-1-credentials"}}  # fmt: skip
        assert cpfs["csi"] == {"driver": "nasplugin.csi.alibabacloud.com", "readOnly": False,
                               "volumeAttributes": {"server": "cpfs-0123.cn-hangzhou.cpfs.aliyuncs.com",
                                                    "path": "/share/ckpt", "vers": "3"}}  # fmt: skip
        assert nas["nfs"] == {"server": "0a1b.cn-hangzhou.nas.aliyuncs.com", "path": "/exports/x",
                              "readOnly": True}  # fmt: skip
        assert not [c for c in pod.get("initContainers", []) if c["name"].startswith("prefetch")]
        assert job.secret["stringData"]["akId"] == OSS_AK
        assert job.secret["stringData"]["akSecret"] == OSS_SK
        dumped = job.to_yaml() + json.dumps(job.manifests)
        for value in (OSS_AK, OSS_SK, quote(OSS_SK, safe=""), ENV_TOKEN):
            assert value not in dumped
    # The endpoint may come from the job's env instead of the table.
    bare = load_settings({"csi_drivers": {"oss": None}}).csi_drivers
    env_job = out(
        bare, "indexed", data=data[:1], env={"OSS_ENDPOINT": "oss-cn-beijing.aliyuncs.com"}
    )
    vol = env_job.manifests[-1]["spec"]["template"]["spec"]["volumes"][0]
    assert vol["csi"]["volumeAttributes"]["url"] == "oss-cn-beijing.aliyuncs.com"
    with pytest.raises(SpecError) as e:
        out(bare, "indexed", data=data[:1])
    assert e.value.field == "data" and "OSS_ENDPOINT" in str(e.value)
    # Without a driver for the scheme: the portable init-container copy stays the default.
    default = out({}, "indexed", data=data[:1])
    pod = default.manifests[-1]["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "data-0", "emptyDir": {}}
    assert [c["name"] for c in pod["initContainers"]] == ["wait-for-master", "prefetch-data-0"]


@pytest.mark.parametrize(("table", "field"), [
    ({"oss": {"volume_attributes": {"akSecret": "x"}}}, "kubernetes.csi_drivers.oss.volume_attributes.akSecret"),
    ({"cpfs": {"volume_attributes": {"server": "{host}"}}}, "kubernetes.csi_drivers.cpfs.driver"),
    ({"oss": {"drvier": "x"}}, "kubernetes.csi_drivers.oss.drvier"),
    ({"pvc": {"driver": "x"}}, "kubernetes.csi_drivers.pvc"),
])  # fmt: skip
def test_bad_driver_tables_and_sharing_schemes_name_the_setting(table: Any, field: str) -> None:
    from workbench.backends.kubernetes.config import load_settings

    with pytest.raises(SpecError) as e:
        load_settings({"csi_drivers": table})
    assert e.value.field == field
    with pytest.raises(SpecError) as e:
        load_settings({"gpu_sharing": "mig"})
    assert e.value.field == "kubernetes.gpu_sharing"


def test_volcano_status_from_the_phase_and_the_podgroup() -> None:
    from workbench.backends.kubernetes.status import job_view

    def job(phase: str) -> dict[str, Any]:
        return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "status": {"state": {"phase": phase}}}  # fmt: skip

    def pod(rank: int, phase: str, code: int | None = None) -> dict[str, Any]:
        state = {"terminated": {"exitCode": code}} if code is not None else {"running": {}}
        return {"metadata": {"name": f"j-worker-{rank}", "annotations": {"volcano.sh/task-index": str(rank)}},
                "spec": {"containers": [{"name": "worker"}], "nodeName": "n"},
                "status": {"phase": phase, "containerStatuses": [{"name": "worker", "state": state}]}}  # fmt: skip

    queued = {"spec": {"queue": "research"}, "status": {"phase": "Pending"}}
    held = {"spec": {"queue": "research"}, "status": {"phase": "Pending", "conditions": [
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
         "message": "resource in cluster is overused: overused nvidia.com/gpu"}]}}  # fmt: skip
    view = job_view(job("Pending"), [], queued)
    assert (view.status, view.reason, view.message) == (
        JobStatus.PENDING,
        "Queued",
        "waiting in Volcano queue research",
    )
    view = job_view(job("Pending"), [], held)
    assert (view.status, view.reason) == (JobStatus.PENDING, "Unschedulable")
    assert view.message == "resource in cluster is overused: overused nvidia.com/gpu"
    assert (
        job_view(job("Running"), [pod(0, "Running"), pod(1, "Running")]).status is JobStatus.RUNNING
    )
    view = job_view(job("Terminated"), [pod(0, "Failed", 3), pod(1, "Failed", 137)])
    assert (view.status, view.message) == (JobStatus.FAILED, "rank 0 exited with code 3")
    assert job_view(job("Completed"), [pod(0, "Succeeded", 0)]).status is JobStatus.SUCCEEDED
    assert sorted(job_view(job("Running"), [pod(1, "Running"), pod(0, "Running")]).ranks) == [0, 1]


def test_volcano_flavour_needs_a_cluster_that_serves_it(
    kube_fake: FakeKubeAPIServer, wb_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kc", kube_fake.url)))
    m = JobManager(Settings.load(backend="kubernetes", kubernetes={"flavor": "volcano"}))
    with pytest.raises(SpecError) as e:  # the fake serves batch/v1 and kubeflow.org only
        m.admit(spec(["python", "x.py"], name="novc"))
    assert e.value.field == "backend_options.flavor" and "Volcano" in str(e.value)
    assert m.backend("kubernetes").capabilities().flavours == ("indexed", "kubeflow")


def test_a_rank_deleted_before_it_was_seen_ends_stopped(tmp_path: Path) -> None:
    """Volcano's TerminateJob can delete rank 0's pod before the watch saw it (rank 1
    failed at once): the job still ends with both ranks, rank 0 Stopped."""
    from workbench.backends.kubernetes.tracker import JobSync
    from workbench.spec import JobRecord, RankState
    from workbench.store import JobStore

    store = JobStore(tmp_path / "jobs.db")
    record = JobRecord(name="g", status=JobStatus.PENDING, backend="kubernetes", image="i",
                       spec={"workers": 2, "command": ["x"]}, details={"namespace": NS})  # fmt: skip
    with store.adding(record):
        pass
    sync = JobSync(store, cluster=None, save_logs=lambda *a: None)  # type: ignore[arg-type]
    terminated = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {},
                  "status": {"state": {"phase": "Terminated"}}}  # fmt: skip
    failed = {"metadata": {"name": "g-worker-1", "annotations": {"volcano.sh/task-index": "1"}},
              "spec": {"containers": [{"name": "worker"}], "nodeName": "n"},
              "status": {"phase": "Failed", "containerStatuses": [{"name": "worker", "state": {
                  "terminated": {"exitCode": 3}}}]}}  # fmt: skip
    sync.sync("g", terminated, [failed], gone=False, fresh=True)
    done = store.get("g")
    assert done is not None and done.status is JobStatus.FAILED
    assert [(r.rank, r.state) for r in done.ranks] == [
        (0, RankState.STOPPED),
        (1, RankState.FAILED),
    ]

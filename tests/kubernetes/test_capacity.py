"""The capacity check before submit: GPUs, CPU and memory against what each node has free,
taints the job does not tolerate, node selectors; the refusal names the reason per node kind.
Pure cases over node and pod dicts, and one through the backend against the fake cluster."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.kube_apiserver import FakeKubeAPIServer
from tests.kubernetes import test_backend
from workbench.backends.kubernetes.capacity import (
    check_gang,
    gang_pods,
    node_free,
    pod_requests,
    tolerated,
)
from workbench.errors import SpecError
from workbench.manager import JobManager
from workbench.settings import Settings
from workbench.spec import TrainSpec

# The backend tests' fixtures: a kubeconfig at the fake, the fake cluster, a manager.
cluster = test_backend.cluster
kube_env = test_backend.kube_env


GPU = "nvidia.com/gpu"


def node(name: str, kind: str, cpu: str = "16", memory: str = "64Gi", gpus: int = 0,
         taints: list[dict[str, str]] | None = None, **labels: str) -> dict[str, Any]:  # fmt: skip
    alloc = {"cpu": cpu, "memory": memory, GPU: str(gpus)}
    return {"metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": kind,
                                                  **labels}},
            "spec": {"taints": taints or []}, "status": {"allocatable": alloc, "capacity": alloc}}  # fmt: skip


def pod(cpu: str = "1", memory: str = "1Gi", gpus: int = 0, **extra: Any) -> dict[str, Any]:
    limits = {GPU: str(gpus)} if gpus else {}
    return {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory},
                                                          "limits": limits}}], **extra}  # fmt: skip


def job(workers: int, **pod_kw: Any) -> dict[str, Any]:
    """An Indexed Job of ``workers`` pods."""
    return {"kind": "Job", "spec": {"completions": workers, "template": {"spec": pod(**pod_kw)}}}


def refused(nodes: list[dict[str, Any]], workload: dict[str, Any], gpus: int = 0,
            pods: list[dict[str, Any]] | None = None) -> SpecError:  # fmt: skip
    spec = TrainSpec.from_dict({"command": ["x"], "gpus": gpus, "workers": 1})
    with pytest.raises(SpecError) as e:
        check_gang(nodes, spec, {}, [], workload=workload, pods=pods or [])
    return e.value


def fits(nodes: list[dict[str, Any]], workload: dict[str, Any],
         pods: list[dict[str, Any]] | None = None) -> None:  # fmt: skip
    check_gang(nodes, TrainSpec.from_dict({"command": ["x"]}), {}, [], workload=workload,
               pods=pods or [])  # fmt: skip


def running_pod(node_name: str, cpu: str, memory: str = "0", workbench: bool = False,
                phase: str = "Running") -> dict[str, Any]:  # fmt: skip
    labels = {"workbench.io/job": "other"} if workbench else {}
    return {"metadata": {"name": f"p-{node_name}-{cpu}", "labels": labels},
            "spec": {"nodeName": node_name, **pod(cpu=cpu, memory=memory)},
            "status": {"phase": phase}}  # fmt: skip


def test_requests_sum_containers_and_take_the_largest_init() -> None:
    spec = {"containers": [{"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                           {"resources": {"limits": {"cpu": "1", GPU: "2"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "4"}}}]}  # fmt: skip
    assert pod_requests(spec) == {"cpu": 4.0, "memory": 2.0**30, GPU: 2.0}


def test_gang_pods_of_each_workload_kind() -> None:
    assert len(gang_pods(job(3))) == 3
    ptj = {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": pod()}},
                                            "Worker": {"replicas": 2, "template": {"spec": pod()}}}}}  # fmt: skip
    assert len(gang_pods(ptj)) == 3
    vcjob = {"spec": {"tasks": [{"replicas": 4, "template": {"spec": pod()}}]}}
    assert len(gang_pods(vcjob)) == 4


@pytest.mark.parametrize(("taint", "tolerations", "ok"), [
    ({"key": "gpu", "value": "yes", "effect": "NoSchedule"}, [], False),
    ({"key": "gpu", "value": "yes", "effect": "NoSchedule"},
     [{"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}], True),
    ({"key": "gpu", "value": "yes", "effect": "NoSchedule"},
     [{"key": "gpu", "operator": "Equal", "value": "no"}], False),
    ({"key": "gpu", "effect": "NoExecute"}, [{"key": "gpu", "operator": "Exists"}], True),
    ({"key": "gpu", "effect": "NoExecute"},
     [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}], False),
    ({"key": "any", "effect": "NoSchedule"}, [{"operator": "Exists"}], True),
])  # fmt: skip
def test_toleration_matching(taint: dict[str, str], tolerations: list[dict[str, str]],
                             ok: bool) -> None:  # fmt: skip
    assert tolerated(taint, tolerations) is ok


def test_free_is_allocatable_less_other_pods_requests() -> None:
    n = node("a", "m5.4xlarge", cpu="16", memory="64Gi")
    pods = [running_pod("a", "6", "8Gi"), running_pod("a", "4", workbench=True),
            running_pod("a", "4", phase="Succeeded"), running_pod("b", "4")]  # fmt: skip
    free = node_free(n, pods)
    assert free["cpu"] == 10.0 and free["memory"] == 56 * 2.0**30


def test_cpu_and_memory_refusals_name_each_node_kind() -> None:
    nodes = [node("c1", "cpu-small", cpu="4", memory="16Gi"),
             node("c2", "cpu-small", cpu="4", memory="16Gi"),
             node("m1", "mem-big", cpu="64", memory="32Gi")]  # fmt: skip
    e = refused(nodes, job(1, cpu="8", memory="64Gi"))
    assert e.field == "memory"
    assert "cpu-small (2 nodes): cpu: 8 asked, 4 free" in str(e)
    assert "mem-big (1 node): memory: 64Gi asked, 32Gi free" in str(e)
    e = refused(nodes, job(1, cpu="80", memory="1Gi"))
    assert e.field == "cpu" and "mem-big (1 node): cpu: 80 asked, 64 free" in str(e)
    fits(nodes, job(1, cpu="8", memory="1Gi"))


def test_daemons_and_other_tenants_pods_count_workbench_pods_do_not() -> None:
    nodes = [node("a", "m5", cpu="8")]
    fits(nodes, job(1, cpu="6"), pods=[running_pod("a", "4", workbench=True)])
    e = refused(nodes, job(1, cpu="6"), pods=[running_pod("a", "4")])
    assert e.field == "cpu" and "m5 (1 node): cpu: 6 asked, 4 free" in str(e)


def test_untolerated_taints_and_selectors_leave_no_node() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    nodes = [node("g1", "a100", gpus=8, taints=[taint]), node("g2", "a100", gpus=8, taints=[taint]),
             node("c1", "cpu-pool", taints=[{"key": "spot", "effect": "NoExecute"}]),
             node("c2", "cpu-pool", taints=[{"key": "spot", "effect": "PreferNoSchedule"}])]  # fmt: skip
    e = refused(nodes, job(1, gpus=1), gpus=1)
    assert e.field == "gpus"  # c2 is schedulable but has no GPU
    assert "a100 (2 nodes): taint nvidia.com/gpu=present:NoSchedule is not tolerated" in str(e)
    assert "cpu-pool (1 node): taint spot:NoExecute is not tolerated" in str(e)
    assert "cpu-pool (1 node): nvidia.com/gpu: 1 asked, 0 free" in str(e)
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    fits(nodes, job(2, gpus=8, tolerations=[toleration]))
    e = refused(nodes, job(1, gpus=1, nodeSelector={"pool": "tpu"}, tolerations=[toleration]))
    assert e.field == "instance_spec" and "no schedulable node matching {'pool': 'tpu'}" in str(e)
    assert "labels do not match the node selector {'pool': 'tpu'}" in str(e)


def test_a_gang_wider_than_the_nodes_hold_is_refused_with_the_count() -> None:
    nodes = [node("a", "m5", cpu="8"), node("b", "m5", cpu="8")]
    fits(nodes, job(4, cpu="4"))
    e = refused(nodes, job(5, cpu="4"))
    assert e.field == "workers" and "hold at most 4 such workers" in str(e)


@pytest.mark.usefixtures("kube_env", "cluster")
def test_capacity_through_the_backend(kube_fake: FakeKubeAPIServer) -> None:
    """Against the fake: a taint on node-a and a daemon holding most of node-b's CPU
    refuse a 1-GPU, 8-CPU worker, naming both nodes' reasons; tolerating the taint fits."""
    nodes = ("", "v1", "nodes")
    kube_fake.state.patch(nodes, None, "node-a", {"spec": {"taints": [
        {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}})  # fmt: skip
    kube_fake.state.create(("", "v1", "pods"), "kube-system", {
        "metadata": {"name": "daemon-b"}, "spec": {"nodeName": "node-b", **pod(cpu="44")},
        "status": {"phase": "Running"}})  # fmt: skip
    s = {"command": ["python", "x.py"], "name": "fit", "image": "pytorch:2.13-cpu", "gpus": 1,
         "cpu": 8, "workers": 1, "instance_spec": "gpu.1x"}  # fmt: skip
    m = JobManager(Settings.load(backend="kubernetes", kubernetes={"flavor": "indexed"}))
    with pytest.raises(SpecError) as e:
        m.admit(TrainSpec.from_dict(s))
    assert e.value.field == "cpu"
    assert "node-a (1 node): taint dedicated=infer:NoSchedule is not tolerated" in str(e.value)
    assert "node-b (1 node): cpu: 8 asked, 4 free" in str(e.value)
    m = JobManager(Settings.load(backend="kubernetes", kubernetes={"flavor": "indexed",
        "instance_specs": {"gpu.1x": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}}))  # fmt: skip
    assert m.admit(TrainSpec.from_dict(s)).warnings == []

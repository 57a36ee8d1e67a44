"""Kubeflow manifests in: what each field of a PyTorchJob, TFJob and MPIJob becomes, and
the SpecError (naming the field's path and the fix) for what workbench cannot honour.

Fast: no job runs here (tests/backends/test_kubeflow_local.py runs them)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from workbench.cli import main
from workbench.errors import SpecError
from workbench.kubeflow_manifest import LAUNCHER_WRAPPER, from_manifest, load_spec_file
from workbench.manager import JobManager

DATA = Path(__file__).resolve().parent / "data" / "kubeflow"
SIMPLE = DATA / "simple.yaml"
ECHO = DATA / "echo.yaml"


def pytorchjob(**spec: Any) -> dict[str, Any]:
    container = {
        "name": "pytorch",
        "image": "registry.example/team/train:1",
        "command": ["python", "train.py"],
        "args": ["--lr", "$(LR)", "--cost", "$$(not-a-var)"],
        "env": [{"name": "LR", "value": "0.1"}, {"name": "MASTER_ADDR", "value": "mine"}],
        "resources": {
            "limits": {"nvidia.com/gpu": 2, "memory": "8Gi"},
            "requests": {"cpu": "500m"},
        },
        "workingDir": "/workspace",
        "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
    }

    def replica(n: int) -> dict[str, Any]:
        return {
            "replicas": n,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [copy.deepcopy(container)]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mnist", "namespace": "team-a", "labels": {"a": "b"}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)}, **spec},
    }


def test_the_kubeflow_examples_become_specs_as_the_operator_would_run_them() -> None:
    simple = load_spec_file(SIMPLE)
    assert (simple.name, simple.workers, simple.framework) == ("pytorch-simple", 2, "pytorch")
    assert simple.command == ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
    assert simple.image == "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
    assert simple.max_retries == 0 and simple.env == {}
    echo = load_spec_file(ECHO)
    assert echo.workers == 2  # a fixed world of the replicas, within minReplicas..maxReplicas
    assert echo.command == [
        "python",
        "-m",
        "torch.distributed.run",
        "--rdzv_backend=c10d",
        "./echo.py",
    ]
    # what the operator sets from elasticPolicy, beside the manifest's own LOGLEVEL
    assert echo.env == {"LOGLEVEL": "DEBUG", "PET_RDZV_BACKEND": "c10d", "PET_MAX_RESTARTS": "100"}
    # an image map: the folder stands in for the image's files
    root = DATA / "images" / "pytorch-mnist"
    mapped = load_spec_file(SIMPLE, {simple.image: str(root)})
    assert mapped.command[1] == str(root / "opt/pytorch-mnist/mnist.py")
    assert (mapped.working_dir, mapped.runtime) == (str(root), "process")


def test_every_mapped_field_lands_in_the_spec() -> None:
    spec = from_manifest(
        pytorchjob(
            nprocPerNode="2",
            runPolicy={
                "backoffLimit": 3,
                "activeDeadlineSeconds": 600,
                "cleanPodPolicy": "None",
                "schedulingPolicy": {"queue": "research", "priorityClass": "high"},
            },
        ),
        backend="kubernetes",
    ).validate()
    assert spec.workers == 4 and spec.procs_per_worker == 2 and spec.world_size == 8
    assert (spec.gpus, spec.cpu, spec.memory) == (2, 0.5, "8Gi")
    assert (spec.max_retries, spec.timeout, spec.queue, spec.priority) == (
        3,
        600,
        "research",
        "high",
    )
    # $(LR) expanded from the container's env, $$ an escaped $; the operator's own
    # variables come from the contract, so the manifest's MASTER_ADDR is dropped
    assert spec.command == ["python", "train.py", "--lr", "0.1", "--cost", "$(not-a-var)"]
    assert spec.env == {"LR": "0.1"} and spec.working_dir == "/workspace"
    assert spec.backend_options == {"flavor": "kubeflow", "namespace": "team-a"}


def test_tfjob_and_mpijob_map_to_their_frameworks() -> None:
    job = pytorchjob()
    workers = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    tf = {**job, "kind": "TFJob", "spec": {"tfReplicaSpecs": {"Worker": workers}}}
    assert (from_manifest(tf).framework, from_manifest(tf).workers) == ("tensorflow", 3)
    launcher = copy.deepcopy(workers)
    launcher["replicas"] = 1
    launcher["template"]["spec"]["containers"][0].update(
        command=["mpirun", "-np", "6", "python", "/train.py"], args=[], resources={}
    )
    mpi = {
        **job,
        "kind": "MPIJob",
        "spec": {"slotsPerWorker": 2, "mpiReplicaSpecs": {"Launcher": launcher, "Worker": workers}},
    }
    spec = from_manifest(mpi)
    assert (spec.framework, spec.workers, spec.procs_per_worker, spec.gpus) == ("mpi", 3, 2, 2)
    # worker 0 runs the launcher's mpirun; the others stand in for sshd workers
    assert spec.command == [*LAUNCHER_WRAPPER, "mpirun", "-np", "6", "python", "/train.py"]


W = "spec.pytorchReplicaSpecs.Worker"
C = f"{W}.template.spec.containers[0]"


def _set(path: list[Any], value: Any) -> Any:
    def change(job: dict[str, Any]) -> None:
        node: Any = job
        for key in path[:-1]:
            node = node[key]
        if value is _DELETE:
            del node[path[-1]]
        elif isinstance(node, list) and path[-1] == len(node):
            node.append(value)
        else:
            node[path[-1]] = value

    return change


_DELETE = object()
_W = ["spec", "pytorchReplicaSpecs", "Worker"]
_POD = [*_W, "template", "spec"]
_C = [*_POD, "containers", 0]
_M = ["spec", "pytorchReplicaSpecs", "Master"]
GPU_MEM = "aliyun.com/gpu-mem"
BAD = [
    (_set([*_POD, "affinity"], {"nodeAffinity": {}}), f"{W}.template.spec.affinity", "places workers"),
    (_set([*_POD, "volumes"], []), f"{W}.template.spec.volumes", "--data SRC:DST"),
    (_set([*_C, "env", 0], {"name": "LR", "valueFrom": {"secretKeyRef": {}}}), f"{C}.env[0].valueFrom", "--env"),
    (_set([*_C, "securityContext"], {}), f"{C}.securityContext", "remove it"),
    (_set([*_C, "resources", "limits", GPU_MEM], 8), f"{C}.resources.limits.{GPU_MEM}", "nvidia.com/gpu"),
    (lambda j: [_set([*_C, k], _DELETE)(j) for k in ("command", "args")], f"{C}.command", "entrypoint"),
    (_set([*_C, "image"], "registry.example/other:2"), f"{C}.image", "make them equal"),
    (_set([*_POD, "containers", 1], {"name": "side", "image": "x"}), f"{C[:-3]}[1]", "training container"),
    (_set([*_W, "restartPolicy"], "Always"), f"{W}.restartPolicy", "backoffLimit"),
    (_set([*_M, "replicas"], 2), "spec.pytorchReplicaSpecs.Master.replicas", "one Master"),
    (_set(["spec", "pytorchReplicaSpecs", "Launcher"], {}), "spec.pytorchReplicaSpecs.Launcher", "remove it"),
    (_set(["spec", "elasticPolicy"], {"minReplicas": 5, "maxReplicas": 8}), "spec.elasticPolicy.minReplicas", "within"),
    (_set(["spec", "elasticPolicy"], {"rdzvHost": "x"}), "spec.elasticPolicy.rdzvHost", "rendezvous endpoint"),
    (_set(["spec", "elasticPolicy"], {"rdzvBackend": "etcd"}), "spec.elasticPolicy.rdzvBackend", "c10d"),
    (_set(["spec", "runPolicy"], {"suspend": True}), "spec.runPolicy.suspend", "remove it"),
    (_set(["spec", "successPolicy"], "x"), "spec.successPolicy", "remove it"),
    (_set(["apiVersion"], "kubeflow.org/v2"), "apiVersion", "kubeflow.org/v1"),
    (_set(["kind"], "JAXJob"), "kind", "PyTorchJob, TFJob, MPIJob"),
]  # fmt: skip


@pytest.mark.parametrize(("breakage", "field", "fix"), BAD, ids=[b[1] for b in BAD])
def test_what_workbench_cannot_honour_names_its_path_and_the_fix(
    breakage: Any, field: str, fix: str
) -> None:
    job = pytorchjob()
    breakage(job)
    with pytest.raises(SpecError) as e:
        from_manifest(job)
    assert e.value.field == field and fix in (e.value.fix or ""), str(e.value)


def test_a_tfjob_chief_or_ps_is_refused_with_the_fold_in_fix() -> None:
    job = pytorchjob()
    replicas = job["spec"].pop("pytorchReplicaSpecs")
    job.update(
        kind="TFJob",
        spec={"tfReplicaSpecs": {"Worker": replicas["Worker"], "PS": replicas["Worker"]}},
    )
    with pytest.raises(SpecError) as e:
        from_manifest(job)
    assert e.value.field == "spec.tfReplicaSpecs.PS" and "fold it into Worker" in (
        e.value.fix or ""
    )


def test_the_cli_refuses_in_one_line_and_creates_nothing(
    manager: JobManager, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = []
    bad = tmp_path / "job.yaml"
    bad.write_text(yaml.safe_dump(job))
    assert main(["submit", "-f", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {W}.template.spec.tolerations: is not supported" in err
    # Kubeflow's example, unchanged, names an image this machine cannot pull: without a map
    # the refusal names the image, its script and the flag that fixes it
    assert main(["submit", "-f", str(SIMPLE), "--runtime", "process"]) == 2
    err = capsys.readouterr().err
    assert "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727 cannot be pulled here" in err
    assert "/opt/pytorch-mnist/mnist.py" in err and "--image-map IMAGE=DIR" in err
    assert main(["submit", "-f", str(SIMPLE), "--image-map", "nonsense"]) == 2
    assert "image_map" in capsys.readouterr().err
    assert manager.list() == []


def test_on_the_kubernetes_backend_a_manifest_stays_its_kind_in_its_namespace(
    manager: JobManager,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # no cluster: a dry run only
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["submit", "-f", str(SIMPLE), "--backend", "kubernetes", "--dry-run"]) == 0
    (job,) = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]
    assert (job["kind"], job["metadata"]["namespace"]) == ("PyTorchJob", "kubeflow")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert {k: r["replicas"] for k, r in replicas.items()} == {"Master": 1, "Worker": 1}
    (main_container,) = replicas["Master"]["template"]["spec"]["containers"]
    assert main_container["image"] == "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
    assert main_container["command"][-3:] == [
        "python3",
        "/opt/pytorch-mnist/mnist.py",
        "--epochs=1",
    ]
    assert manager.list() == []

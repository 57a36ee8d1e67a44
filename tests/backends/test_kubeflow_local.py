"""Kubeflow manifests in and out on the local backend, with real jobs: Kubeflow's own
examples run unchanged, and a local job exported as a PyTorchJob and submitted back gives
every rank the same env. Exports of every kind validate against the upstream CRDs."""

from __future__ import annotations

import copy
import functools
import json
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.fakes.kube_pytorchjob import operator_env  # training-operator v1.9's env: the oracle
from tests.kubernetes.test_manifests import K8S_VERSION, _strict
from workbench.api import export
from workbench.backends.kubernetes.manifests import KINDS
from workbench.catalog import load_catalog
from workbench.cli import main
from workbench.manager import JobManager
from workbench.spec import JobRecord, JobStatus, TrainSpec

DATA = Path(__file__).resolve().parents[1] / "data" / "kubeflow"
CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-crds"
MNIST = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
ECHO = "kubeflow/pytorch-elastic-example-echo:latest"
TOKEN = "hf_secretvalue_kfio_123"


@pytest.mark.slow
def test_kubeflows_own_examples_run_on_the_local_backend_unchanged(
    manager: JobManager, capsys: pytest.CaptureFixture[str]
) -> None:
    images = DATA / "images"
    for manifest, image, folder in (
        ("simple.yaml", MNIST, "pytorch-mnist"),
        ("echo.yaml", ECHO, "pytorch-elastic-example-echo"),
    ):
        argv = ["submit", "-f", str(DATA / manifest), "--image-map", f"{image}={images / folder}"]
        assert main(argv) == 0, capsys.readouterr().err
    simple = manager.wait("pytorch-simple", timeout=240)
    echo = manager.wait("elastic-example-echo", timeout=240)
    assert simple.status is echo.status is JobStatus.SUCCEEDED, (simple.message, echo.message)
    # simple.yaml: every rank sees what training-operator v1.9 would set (its master's
    # Service name is this host's loopback here, the port the one workbench picked)
    seen = {}
    for line in manager.logs("pytorch-simple", rank=None):
        if "operator env " in line:
            env = json.loads(line.split("operator env ", 1)[1])
            seen[int(env["RANK"])] = env
    assert sorted(seen) == [0, 1] and "rank 1 of 2 done" in "\n".join(
        manager.logs("pytorch-simple", rank=1)
    )
    job = yaml.safe_load((DATA / "simple.yaml").read_text())
    port = int(seen[0]["MASTER_PORT"])
    for replica in job["spec"]["pytorchReplicaSpecs"].values():  # the operator's defaulter adds it
        replica["template"]["spec"]["containers"][0]["ports"] = [
            {"name": "pytorchjob-port", "containerPort": port}
        ]
    for rank, (rtype, index) in enumerate([("master", 0), ("worker", 0)]):
        expected = {e["name"]: e["value"] for e in operator_env(job, rtype, index)}
        expected = {
            k: v.replace("pytorch-simple-master-0", "127.0.0.1") for k, v in expected.items()
        }
        assert {k: seen[rank].get(k) for k in expected} == expected
    # echo.yaml: torchrun's c10d rendezvous (elasticPolicy) formed one world of 2 at the
    # job's master, with the operator's maxRestarts
    logs = "\n".join(manager.logs("elastic-example-echo", rank=None))
    for rank in (0, 1):
        assert f"after init process group, rank={rank}, world_size = 2" in logs
    assert len(set(re.findall(r"rdzv_endpoint\s*: (127\.0\.0\.1:\d+)", logs))) == 1
    assert re.search(r"rdzv_backend\s*: c10d", logs) and re.search(r"max_restarts\s*: 100", logs)


ENV_SCRIPT = """
import json, os
keys = sorted(k for k in os.environ if k.startswith(("PET_", "MASTER_", "WORKBENCH_RANK",
              "WORKBENCH_WORLD_SIZE")) or k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LR"))
line = "env " + json.dumps({k: os.environ[k] for k in keys}, sort_keys=True) + "\\n"
os.write(1, line.encode())  # one write: the worker's two processes share its log pipe
"""


def _worker_env(manager: JobManager, name: str, worker: int) -> list[dict[str, str]]:
    """What each process of one worker saw, ordered by RANK, ports aside."""
    seen = []
    for line in manager.logs(name, rank=worker):
        if line.startswith("env "):
            env = json.loads(line[4:])
            port = env.pop("MASTER_PORT")  # each job picks a fresh free port
            assert env.pop("PET_MASTER_PORT") == port
            assert env.pop("PET_RDZV_ENDPOINT") == f"127.0.0.1:{port}"
            seen.append(env)
    return sorted(seen, key=lambda e: int(e["RANK"]))


@pytest.mark.slow
def test_a_local_job_exported_as_a_pytorchjob_runs_back_with_the_same_env(
    manager: JobManager, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "show_env.py").write_text(ENV_SCRIPT)
    spec = TrainSpec(
        command=[sys.executable, "show_env.py"],
        name="orig",
        workers=2,
        procs_per_worker=2,  # the script is its own launcher: one process per worker
        env={"LR": "0.1"},
        working_dir=str(tmp_path),
        runtime="process",
    )
    assert manager.wait(manager.submit(spec).name, timeout=120).status is JobStatus.SUCCEEDED
    assert main(["export", "orig"]) == 0
    text = capsys.readouterr().out
    (manifest,) = yaml.safe_load_all(text)
    validate(manifest)
    (tmp_path / "orig.yaml").write_text(text)
    argv = ["submit", "-f", str(tmp_path / "orig.yaml"), "--name", "back", "--runtime", "process"]
    assert main(argv) == 0, capsys.readouterr().err
    back = manager.wait("back", timeout=120)
    assert back.status is JobStatus.SUCCEEDED and back.workers == 2
    for worker in (0, 1):
        original = _worker_env(manager, "orig", worker)
        # two processes per worker (workbench spawns them, as torchrun would): global ranks
        assert [e["RANK"] for e in original] == [str(2 * worker), str(2 * worker + 1)]
        for local, env in enumerate(original):
            assert (env["LOCAL_RANK"], env["WORKBENCH_RANK"]) == (str(local), str(worker))
            assert env["WORLD_SIZE"] == "4" and env["PET_NNODES"] == "2" and env["LR"] == "0.1"
            assert (env["PET_NODE_RANK"], env["PET_NPROC_PER_NODE"]) == (str(worker), "2")
        assert _worker_env(manager, "back", worker) == original


@pytest.mark.parametrize("kind", KINDS)
def test_every_export_kind_validates_and_masks_secrets(kind: str, manager: JobManager) -> None:
    catalog = load_catalog()
    spec = TrainSpec(
        command=["python", "train.py", "--epochs", "1"],
        name="exp",
        workers=2,
        gpus=1,
        env={"LR": "0.1", "HF_TOKEN": TOKEN},
        working_dir="/work",
    ).validate(catalog)
    record = JobRecord(
        name="exp",
        status=JobStatus.SUCCEEDED,
        backend="local",
        spec=spec.redacted().to_dict(),  # what the store keeps
        image=spec.image_ref(catalog),
    )
    manager.store.insert(record)
    text = export("exp", kind, manager=manager)
    assert TOKEN not in text
    objects = list(yaml.safe_load_all(text))
    secrets = [o for o in objects if o["kind"] == "Secret"]
    assert [s["stringData"] for s in secrets] == [{"HF_TOKEN": "***"}]
    for obj in objects:
        validate(obj)


# ---- validation against Kubernetes' schemas and the upstream CRDs ----------------------------
CRD_FILES = {
    "PyTorchJob": "kubeflow.org_pytorchjobs.yaml",
    "TFJob": "kubeflow.org_tfjobs.yaml",
    "MPIJob": "kubeflow.org_mpijobs.yaml",
    "Job": "batch.volcano.sh_jobs.yaml",
}


@functools.cache
def _crd(kind: str) -> jsonschema.Draft7Validator:
    doc = yaml.safe_load((CRDS / CRD_FILES[kind]).read_text())
    version = next(v for v in doc["spec"]["versions"] if v.get("storage", True))
    return jsonschema.Draft7Validator(_strict(copy.deepcopy(version["schema"]["openAPIV3Schema"])))


def _templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]
    if obj["apiVersion"] == "batch.volcano.sh/v1alpha1":
        return [t["template"] for t in spec["tasks"]]
    (key,) = [k for k in spec if k.endswith("ReplicaSpecs")]
    return [r["template"] for r in spec[key].values()]


def validate(obj: dict[str, Any]) -> None:
    """Core kinds strictly against Kubernetes; custom resources against their CRD, each pod
    template inside strictly as a core PodTemplate."""
    import kubernetes_validate

    if obj["apiVersion"] in ("v1", "batch/v1"):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        return
    _crd(obj["kind"]).validate(obj)
    for tmpl in _templates(obj):
        wrapped = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "t"},
            "template": tmpl,
        }
        kubernetes_validate.validate(wrapped, K8S_VERSION, strict=True)

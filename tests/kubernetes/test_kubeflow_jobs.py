"""A real 2-worker TFJob and MPIJob end to end: JobManager -> KubernetesBackend -> the fake
API server -> the fake training-operator (tests/fakes/kube_tfjob.py, kube_mpijob.py) -> the
fake kubelet running each pod as a local process.

* TFJob: TensorFlow's MultiWorkerMirroredStrategy on CPU, in the TensorFlow venv
  (`make tf-venv`: .venv-tf with tensorflow-cpu), forming its world from the TF_CONFIG
  the operator sets (Chief + Worker), an all-reduce and SGD steps that leave both replicas
  with the same weights.
* MPIJob: the launcher's mpirun (Debian's Open MPI) starts the ranks in the worker pods
  through the operator's kubexec.sh / kubectl exec; mpi4py all-reduces across them.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.kube_apiserver import FakeKubeAPIServer
from tests.fakes.kube_kubectl import exec_log
from tests.fakes.kube_kubelet import FakeCluster
from tests.kubernetes.test_backend import kube_env, write_kubeconfig  # noqa: F401 - fixture
from workbench.backends.kubernetes.status import job_view, ranks_of
from workbench.manager import JobManager
from workbench.settings import Settings
from workbench.spec import JobStatus, RankState, TrainSpec

REPO = Path(__file__).resolve().parents[2]
TF_PYTHON = REPO / ".venv-tf" / "bin" / "python"

TF_SCRIPT = """
import json, os
import tensorflow as tf

config = json.loads(os.environ["TF_CONFIG"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    w = tf.Variable([1.0, -1.0])
rank = int(os.environ["WORKBENCH_RANK"])

@tf.function
def step():
    def replica_fn():
        # each replica's gradient differs by rank; MWMS all-reduces them
        grad = tf.constant([float(rank + 1), 0.5]) * w
        ctx = tf.distribute.get_replica_context()
        total = ctx.all_reduce("SUM", grad)
        w.assign_sub(0.1 * total)
        return ctx.all_reduce("SUM", tf.constant(float(rank + 1)))
    return strategy.run(replica_fn)

for _ in range(3):
    s = step()
task = config["task"]
print(f"tf rank {rank} task {task['type']}/{task['index']} replicas "
      f"{strategy.num_replicas_in_sync} sum {float(s):g} w {w.numpy().round(6).tolist()}",
      flush=True)
"""

MPI_SCRIPT = """
import os
from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
print(f"mpi rank {comm.Get_rank()} of {comm.Get_size()} sum {total} "
      f"pod-rank {os.environ['WORKBENCH_RANK']} job {os.environ['WORKBENCH_JOB_NAME']}",
      flush=True)
"""


@pytest.fixture
def kubeflow(kube_env: Path, kube_fake: FakeKubeAPIServer,  # noqa: F811
             tmp_path: Path) -> Iterator[JobManager]:  # fmt: skip
    """A manager whose jobs go to the fake cluster as Kubeflow jobs."""
    cluster = FakeCluster(kube_fake, tmp_path / "cluster", grace=2).start()
    m = JobManager(Settings.load(backend="kubernetes", kubernetes={"flavor": "kubeflow"}))
    yield m
    for record in m.list(status=["Pending", "Running", "Cancelling"]):
        m.cancel(record.name, wait=15)
    m.backend("kubernetes").close()  # type: ignore[attr-defined]
    cluster.stop()


@pytest.mark.slow
def test_tfjob_multi_worker_mirrored_strategy(kubeflow: JobManager, tmp_path: Path) -> None:
    assert TF_PYTHON.exists(), "TensorFlow's venv is missing: run `make tf-venv`"
    script = tmp_path / "mwms.py"
    script.write_text(textwrap.dedent(TF_SCRIPT))
    kubeflow.submit(TrainSpec.from_dict({
        "name": "tf-mwms", "image": "tensorflow:2.19-cpu", "workers": 2,
        "command": [str(TF_PYTHON), str(script)],
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
    }))  # fmt: skip
    record = kubeflow.get("tf-mwms")
    assert (record.details["kind"], record.details["flavor"]) == ("TFJob", "kubeflow")
    done = kubeflow.wait("tf-mwms", timeout=180)
    logs = list(kubeflow.logs("tf-mwms", rank=None))
    assert done.status is JobStatus.SUCCEEDED, logs
    finals = sorted(line.split("tf ", 1)[1] for line in logs if "tf rank " in line)
    assert [f.split(" replicas")[0] for f in finals] == [
        "rank 0 task chief/0", "rank 1 task worker/0"
    ], logs  # fmt: skip
    # both replicas took part in every all-reduce and hold the same weights
    assert all(" replicas 2 sum 3 " in f for f in finals), finals
    assert len({f.split(" w ")[1] for f in finals}) == 1, finals
    assert [r.state for r in done.ranks] == [RankState.SUCCEEDED] * 2


@pytest.mark.slow
def test_mpijob_allreduce_through_the_launchers_mpirun(kubeflow: JobManager,
                                                        tmp_path: Path) -> None:  # fmt: skip
    assert shutil.which("mpirun"), "mpirun is missing: `make system-deps` installs openmpi-bin"
    script = tmp_path / "allreduce.py"
    script.write_text(textwrap.dedent(MPI_SCRIPT))
    kubeflow.submit(TrainSpec.from_dict({
        "name": "mpi-ar", "image": "cpu", "framework": "mpi", "workers": 2,
        "command": ["python", str(script)],
    }))  # fmt: skip
    assert kubeflow.get("mpi-ar").details["kind"] == "MPIJob"
    done = kubeflow.wait("mpi-ar", timeout=120)
    logs = list(kubeflow.logs("mpi-ar", rank=0))  # the launcher's: every rank's output
    assert done.status is JobStatus.SUCCEEDED, logs
    # the launcher's stderr (the rsh agents' traces) shares its log: a trace may precede a line
    finals = sorted(line[line.index("mpi rank ") :] for line in logs if "mpi rank " in line)
    assert finals == [
        "mpi rank 0 of 2 sum 3 pod-rank 0 job mpi-ar",
        "mpi rank 1 of 2 sum 3 pod-rank 1 job mpi-ar",
    ], logs
    # mpirun reached each worker through the operator's rsh agent (kubexec.sh → kubectl exec)
    execs = exec_log(tmp_path / "cluster" / "exec")
    assert sorted(str(e["pod"]) for e in execs) == ["mpi-ar-worker-0", "mpi-ar-worker-1"], execs
    assert all(e["command"][:2] == ["/bin/sh", "-c"] for e in execs), execs  # type: ignore[index]
    assert [r.state for r in done.ranks] == [RankState.SUCCEEDED] * 2


def _pod(name: str, owner: str, rtype: str, index: int | None, phase: str,
         code: int | None = None) -> dict[str, Any]:  # fmt: skip
    labels = {"training.kubeflow.org/replica-type": rtype}
    if index is not None:
        labels["training.kubeflow.org/replica-index"] = str(index)
    state = {"terminated": {"exitCode": code, "finishedAt": f"2026-12-01T10:00:0{index or 0}Z"}}
    return {"metadata": {"name": name, "labels": labels, "resourceVersion": "1",
                         "ownerReferences": [{"kind": owner, "controller": True, "uid": "u"}]},
            "spec": {"containers": [{"name": "main"}]},
            "status": {"phase": phase, "startTime": "2026-12-01T09:59:00Z",
                       "containerStatuses": [{"name": "main", "restartCount": 0,
                                              "state": state if code is not None else {}}]}}  # fmt: skip


def test_status_of_tfjob_and_mpijob_pods() -> None:
    """Chief is rank 0 and Worker i rank i + 1; an MPIJob's ranks are its workers, the
    launcher's log is rank 0's, its success every rank's and its failure rank 0's."""
    tf = [_pod("j-worker-0", "TFJob", "worker", 0, "Running"),
          _pod("j-chief-0", "TFJob", "chief", 0, "Succeeded", 0)]  # fmt: skip
    assert {r: (v.pod, v.state) for r, v in ranks_of(tf).items()} == {
        0: ("j-chief-0", RankState.SUCCEEDED), 1: ("j-worker-0", RankState.RUNNING)}  # fmt: skip
    workers = [_pod(f"m-worker-{i}", "MPIJob", "worker", i, "Running") for i in range(2)]
    running = ranks_of([*workers, _pod("m-launcher", "MPIJob", "launcher", None, "Running")])
    assert [(v.pod, v.log_pod, v.state) for v in running.values()] == [
        ("m-worker-0", "m-launcher", RankState.RUNNING), ("m-worker-1", None, RankState.RUNNING)]  # fmt: skip
    ok = _pod("m-launcher", "MPIJob", "launcher", None, "Succeeded", 0)
    for pods in ([*workers, ok], [ok]):  # the workers are deleted once the launcher ends
        view = job_view({"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}, pods)
        assert view.status is JobStatus.SUCCEEDED
        assert all(v.state is RankState.SUCCEEDED and v.exit_code == 0 for v in view.ranks.values())
    failed = _pod("m-launcher", "MPIJob", "launcher", None, "Failed", 3)
    view = job_view({"status": {"conditions": [{"type": "Failed", "status": "True",
                                                "reason": "MPIJobFailed"}]}}, [*workers, failed])  # fmt: skip
    assert (view.status, view.reason, view.message) == (
        JobStatus.FAILED, "MPIJobFailed", "rank 0 exited with code 3")  # fmt: skip
    assert view.ranks[1].state is RankState.RUNNING  # stopped with the gang, not "failed"

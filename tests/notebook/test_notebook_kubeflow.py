"""notebooks/06-from-kubeflow.ipynb runs top to bottom in a real kernel (nbclient): a
Kubeflow PyTorchJob manifest runs on the local backend, then exports back as a PyTorchJob
and a Volcano Job that validate against the upstream CRDs."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient import NotebookClient

from tests.backends.test_kubeflow_local import validate
from tests.notebook._kernel import output_text
from workbench.manager import JobManager
from workbench.spec import JobStatus

from ..conftest import ROOT

pytestmark = pytest.mark.slow


def test_from_kubeflow(
    manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    nb = nbformat.read(ROOT / "notebooks" / "06-from-kubeflow.ipynb", as_version=4)
    client = NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = {
        c.source: "\n".join(output_text(o) for o in c.get("outputs", []))
        for c in nb.cells
        if c.cell_type == "code"
    }
    text = "\n".join(outputs.values())
    assert "Traceback" not in text, text
    (job,) = manager.list()
    assert job.name == "mnist-kf" and job.status is JobStatus.SUCCEEDED and job.workers == 2
    assert "workers: 2 | retries: 1 | framework: pytorch" in text
    assert (
        "refused: spec.pytorchReplicaSpecs.Worker.template.spec.affinity: is not supported" in text
    )
    # each rank saw the operator's variables; $(EPOCHS) was expanded to 2 epochs
    for rank in (0, 1):
        assert f"rank {rank} of 2: master 127.0.0.1, PET_NNODES 2, LR 0.01" in text
        assert f"[rank {rank}] rank {rank} epoch 2 loss" in text
    (pytorchjob,) = [out for src, out in outputs.items() if "'pytorchjob')" in src]
    (exported,) = yaml.safe_load_all(pytorchjob)
    validate(exported)
    assert exported["kind"] == "PyTorchJob" and exported["metadata"]["name"] == "mnist-kf"
    (volcano,) = [out for src, out in outputs.items() if "'volcano')" in src]
    objects = list(yaml.safe_load_all(volcano))
    assert "Job" in [o["kind"] for o in objects if o["apiVersion"].startswith("batch.volcano")]
    for obj in objects:
        validate(obj)

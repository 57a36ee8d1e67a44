"""The example notebook runs top to bottom in a real kernel (nbclient) on the local backend."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.notebook._kernel import output_text
from workbench.manager import JobManager

from ..conftest import ROOT

NOTEBOOK = ROOT / "notebooks" / "train_ddp_magics.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.mark.slow
def test_example_notebook_runs_in_a_real_kernel(
    manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keep Jupyter's and IPython's files out of $HOME; the kernel inherits WORKBENCH_HOME.
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
        store_widget_state=True,
    )  # fmt: skip
    client.execute()

    outputs = {
        i: [output_text(o) for o in cell.get("outputs", [])] for i, cell in enumerate(nb.cells)
    }
    everything = "\n".join(t for texts in outputs.values() for t in texts)
    assert "Error" not in everything and "Traceback" not in everything, everything

    # The job cell shows the live widget, with the text form beside it for text-only viewers.
    job_cell = next(c for c in nb.cells if "%gpu_train --workers 2 --image" in c.source)
    (result,) = [o for o in job_cell.outputs if o.output_type == "display_data"]
    assert WIDGET_VIEW in result.data and result.data["text/plain"].startswith("Job ")
    model_id = result.data[WIDGET_VIEW]["model_id"]
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert state[model_id]["model_name"] == "VBoxModel"

    # The job's result, in the outputs: it succeeded, both ranks agree, the scalars came back.
    records = manager.list()
    ddp = next(r for r in records if "workbench.examples.train_ddp" in r.spec["command"])
    assert ddp.status.value == "Succeeded" and ddp.workers == 2
    assert re.search(rf"{ddp.name}: Succeeded, [\d.]+s, cost \$\d", everything)
    digests = re.findall(r"rank [01] done .* params ([0-9a-f]{16})", everything)
    assert len(digests) == 2 and len(set(digests)) == 1
    assert "step 50/50 loss " in everything
    assert re.search(rf"^{ddp.name}\s+Succeeded\s+2", everything, re.M)
    # The %%gpu_train cell body ran as the script on both ranks.
    assert "rank 1 of 2 says hello" in everything
    assert all(r.status.value == "Succeeded" for r in records) and len(records) == 2

"""The example notebooks (notebooks/0*.ipynb) run top to bottom in a real kernel (nbclient) on
the local backend with small data, and their outputs show what each one promises."""

from __future__ import annotations

import ast
import re
import shutil
import socket
from pathlib import Path
from typing import Any

import kubernetes_validate
import nbformat
import pytest
import yaml
from nbclient import NotebookClient

from tests.notebook._kernel import output_text
from workbench.manager import JobManager
from workbench.monitor import sampler as sampler_mod

from ..conftest import ROOT, job_processes

NOTEBOOKS = ROOT / "notebooks"
EXAMPLES = sorted(p.name for p in NOTEBOOKS.glob("0*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

pytestmark = pytest.mark.slow


class Ran:
    """An executed notebook: its cells' text outputs and its stored widget state."""

    def __init__(self, nb: Any) -> None:
        self.nb = nb
        self.text = "\n".join(output_text(o) for c in nb.cells for o in c.get("outputs", []))
        self.widgets: dict[str, Any] = (
            nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
        )

    def cell(self, fragment: str) -> Any:
        (found,) = [c for c in self.nb.cells if c.cell_type == "code" and fragment in c.source]
        return found

    def widget_html(self) -> str:
        """Every HTML widget's value (charts, status, GPU cards) as one string."""
        return "\n".join(
            str(m["state"].get("value", ""))
            for m in self.widgets.values()
            if m["model_name"] == "HTMLModel"
        )


def run_notebook(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ran:
    # Jupyter's and IPython's files stay out of $HOME; the kernel inherits WORKBENCH_HOME.
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
        store_widget_state=True,
    )  # fmt: skip
    client.execute()
    ran = Ran(nb)
    assert "Traceback" not in ran.text and "Error" not in ran.text, ran.text
    return ran


def test_the_example_notebooks_are_committed_without_outputs() -> None:
    assert EXAMPLES == [
        "01-quickstart.ipynb",
        "02-data.ipynb",
        "03-monitoring.ipynb",
        "04-frameworks.ipynb",
        "05-cluster.ipynb",
        "06-from-kubeflow.ipynb",  # tested in test_notebook_kubeflow.py
    ]
    for name in EXAMPLES:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        assert nb.cells[0].cell_type == "markdown" and "What you get" in nb.cells[0].source
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, (name, cell.source[:60])


def test_quickstart(manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = run_notebook("01-quickstart.ipynb", tmp_path, monkeypatch)
    # The %%gpu_train cell shows the live widget (and the text form beside it).
    (result,) = [o for o in ran.cell("%%gpu_train").outputs if o.output_type == "display_data"]
    assert WIDGET_VIEW in result.data and result.data["text/plain"].startswith("Job ")
    assert ran.widgets[result.data[WIDGET_VIEW]["model_id"]]["model_name"] == "VBoxModel"
    first, cancelled, rerun = sorted(manager.list(), key=lambda r: r.created_at)
    assert (first.status.value, cancelled.status.value, rerun.status.value) == (
        "Succeeded",
        "Cancelled",
        "Succeeded",
    )
    assert first.workers == cancelled.workers == rerun.workers == 2
    assert re.search(
        rf"{first.name}: Succeeded in [\d.]+s, cost \$[\d.]+, ranks \['Succeeded', 'Succeeded'\]",
        ran.text,
    )
    # Logs of both ranks: DDP kept them in step (the same weights at the end).
    sums = re.findall(r"rank ([01]) done: weights sum (-?[\d.]+)", ran.text)
    assert sorted(r for r, _ in sums[:2]) == ["0", "1"] and len({s for _, s in sums}) == 1, sums
    assert re.search(r"rank 1/2 step 40/40 loss [\d.]+", ran.text)
    # Cancel: the cancel magic said so, the job is Cancelled, none of its processes lives.
    assert f"job {cancelled.name}: Cancelled" in ran.text
    assert re.search(r"training: rank 1/2 step \d+/100000 loss", ran.text)
    assert job_processes(cancelled.name) == []
    # Re-run: the same spec and script snapshot as a new job.
    assert rerun.name == f"{first.name}-r1" and rerun.spec["command"][2:] == ["40"]
    snapshot, cell_script = (Path(r.spec["command"][1]) for r in (rerun, first))
    assert snapshot != cell_script and snapshot.read_text() == cell_script.read_text()
    assert f"{rerun.name}: Succeeded rank 0 done: weights sum {sums[0][1]}" in ran.text
    # The figure: the widget's loss chart (an SVG) was drawn from what the script logged.
    assert manager.metrics(first.name)["scalars"][-1]["step"] == 40
    assert "<svg" in ran.widget_html() and "loss" in ran.widget_html()
    assert re.search(rf"^{cancelled.name}\s+Cancelled\s+2", ran.text, re.M)


def test_data(manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = run_notebook("02-data.ipynb", tmp_path, monkeypatch)
    port = int(re.search(r"S3 server on http://127\.0\.0\.1:(\d+)", ran.text).group(1))  # type: ignore[union-attr]
    assert ran.text.count("s3://demo-data/raw/part-") >= 4 and "'files': 4" in ran.text
    # Dask wrote one standardised shard per CSV file, with a progress bar.
    assert "preprocess:" in ran.text and "Dask dashboard: http://127.0.0.1:" in ran.text
    assert (
        "4 shards: " + " ".join(f"s3://demo-data/shards/part-{i}.npy" for i in range(4)) in ran.text
    )
    (job,) = manager.list()
    assert job.status.value == "Succeeded" and job.workers == 2
    assert (
        "Staged: s3://demo-data/shards -> shards: 4 file(s)" in ran.text and "fetched 4" in ran.text
    )
    assert "OutputsUploaded: 1 file(s)" in ran.text and "-> s3://demo-data/runs/first" in ran.text
    assert re.search(r"rank 0: 2 shards, 1000 rows, final loss [\d.]+", ran.text)
    assert re.search(r"rank 1: 2 shards, 1000 rows, final loss [\d.]+", ran.text)
    # The checkpoint came back from the bucket and learned the generating weights
    # (w = linspace(-1, 1, 8) on features standardised from std 2: about -2 .. +2).
    assert "s3://demo-data/runs/first/model.pt" in ran.text
    assert "checkpoint: {'weight': (1, 8), 'bias': (1,)}" in ran.text
    learned = [float(v) for v in re.search(r"learned w: (.*)", ran.text).group(1).split()]  # type: ignore[union-attr]
    assert learned == sorted(learned) and abs(learned[0] + 2) < 0.4 and abs(learned[-1] - 2) < 0.4
    # The notebook stopped its S3 server.
    assert "stopped" in ran.text
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_monitoring(manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sampler_mod.reset_host_sampler()
    host = sampler_mod.get_host_sampler()  # what this machine's NVML says, here as in the kernel
    expected = f"monitor: {host.state.value} - {host.reason or 'ok'}"
    sampler_mod.reset_host_sampler()
    ran = run_notebook("03-monitoring.ipynb", tmp_path, monkeypatch)
    assert expected in ran.text
    html = ran.widget_html()
    if host.reason:  # no GPU: the monitor widget says why
        assert f"<b>GPU monitor</b>: {host.reason}" in html
        assert f"GPUs: none - {host.reason}" in ran.text
    # The fake NVML part (this checkout has tests/fakes): a card, an alert, a GPU job.
    assert f"fake NVML from {ROOT / 'tests' / 'fakes'}" in ran.text
    assert "<b>GPU 0</b> NVIDIA A10" in html and "<b>GPU monitor</b>: 1 GPU(s)" in html
    assert "alert [warning] temperature: GPU 0 is at 88 C (alert at 85 C)" in ran.text
    (job,) = manager.list()
    assert job.status.value == "Succeeded" and job.spec["instance_spec"] == "gpu.1x"
    reasons = [e.reason for e in job.events]
    assert "GpuAlert:temperature" in reasons and "GpuAlert:idle" in reasons
    assert "event GpuAlert:idle: GPU 0 has been under 5% busy" in ran.text
    n, pct = (
        int(x) for x in re.search(r"(\d+) GPU samples, (\d+)% of them idle", ran.text).groups()
    )  # type: ignore[union-attr]
    assert n >= 5 and 0 < pct < 100
    cost, waste = (
        float(x)
        for x in re.search(
            r"cost \$([\d.]+), of which idle-GPU waste \$([\d.]+)", ran.text
        ).groups()
    )  # type: ignore[union-attr]
    assert cost == pytest.approx(job.cost(), abs=1e-5) and 0 < waste < cost


def test_frameworks(manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = run_notebook("04-frameworks.ipynb", tmp_path, monkeypatch)
    jobs = sorted(manager.list(), key=lambda r: r.created_at)
    assert [j.status.value for j in jobs] == ["Succeeded"] * 3
    torchrun, tf, mpi = jobs
    assert torchrun.spec["command"][0] == "torchrun" and torchrun.spec["procs_per_worker"] == 2
    # torchrun in each of 2 workers formed one world of 4 with identical parameters.
    done = re.findall(
        r"worker ([01]): rank (\d) done in [\d.]+s world (\d) params ([0-9a-f]{16})", ran.text
    )
    assert sorted((w, r) for w, r, _, _ in done) == [("0", "0"), ("0", "1"), ("1", "2"), ("1", "3")]
    assert {world for _, _, world, _ in done} == {"4"} and len({d for *_, d in done}) == 1
    # TF_CONFIG: one cluster of two workers, each task its own index.
    configs = [
        (ast.literal_eval(task), ast.literal_eval(cluster))
        for task, cluster in re.findall(r"TF_CONFIG task (\{.*?\}) cluster (\{.*\})", ran.text)
    ]
    assert sorted(t["index"] for t, _ in configs) == [0, 1] and {t["type"] for t, _ in configs} == {
        "worker"
    }
    (cluster,) = {tuple(c["worker"]) for _, c in configs}
    assert len(cluster) == 2 and all(w.startswith("127.0.0.1:") for w in cluster)
    assert tf.spec["framework"] == "tensorflow" and mpi.spec["framework"] == "mpi"
    # MPI: the contract's hostfile, 2 workers x 2 slots on this one host.
    assert "worker 0 np 4" in ran.text and "hostfile: 127.0.0.1 slots=4" in ran.text
    assert f"mpirun: {shutil.which('mpirun') or 'not installed here'}" in ran.text


def test_cluster(manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No cluster: no KUBECONFIG and a HOME without ~/.kube, so every cell is a dry run.
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ran = run_notebook("05-cluster.ipynb", tmp_path, monkeypatch)
    assert "cluster configured: False" in ran.text
    assert manager.list() == []  # dry runs create nothing
    assert "Dry run: nothing was created" in ran.text and "1 GPU(s) per worker" in ran.text
    # The printed manifests are what a cluster would get: valid objects, GPUs as limits.
    (printed,) = [o for o in ran.cell("safe_dump_all").outputs if o.output_type == "stream"]
    objects = list(yaml.safe_load_all(printed.text))
    assert [o["kind"] for o in objects] == ["Service", "Job"]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
    job = objects[1]["spec"]
    assert job["completionMode"] == "Indexed" and job["completions"] == 2
    (main,) = [c for c in job["template"]["spec"]["containers"] if c.get("workingDir")]
    assert main["resources"]["limits"]["nvidia.com/gpu"] in (1, "1")
    assert "kind: PyTorchJob" in ran.text and "Master:" in ran.text
    assert "prefetch-data-0 : python -m workbench.data prefetch s3://datasets/mnist" in ran.text
    assert "No cluster configured" in ran.text

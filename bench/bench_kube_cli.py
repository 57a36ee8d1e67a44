"""How long the everyday CLI verbs take with the Kubernetes backend, against the fake API
server (tests/fakes) in another process, as a user runs them: a new `workbench` process
per command, `kubernetes-validate` (a test dependency that pulls in jsonschema's grammar
compile) hidden, as in a user's install.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_kube_cli.py [--runs 5]

Each verb's median wall time over --runs, next to what a user of the official client
runs instead to look at a job: a Python one-liner that loads the kubeconfig and reads the
Job and its pods with the typed CoreV1Api/BatchV1Api (the ratio is workbench over it),
and `workbench list` on the local backend (the CLI's own start). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench import _kube_backend_bench as kb
from workbench.spec import TrainSpec

# A user's install has no kubernetes-validate: `import kubernetes` would import it (and
# jsonschema's rfc3987 grammar, 2+ s) where it is installed, as in this test venv.
HIDE = "import sys; sys.modules['kubernetes_validate'] = None; "
CLI = HIDE + "import sys, runpy; sys.argv = ['workbench'] + sys.argv[1:]; " \
      "runpy.run_module('workbench.cli', run_name='__main__')"  # fmt: skip
TYPED = (
    HIDE
    + """
from kubernetes import client, config
config.load_kube_config()
job = client.BatchV1Api().read_namespaced_job('job-1', '{ns}')
pods = client.CoreV1Api().list_namespaced_pod('{ns}', label_selector='workbench.io/job=job-1')
print(job.metadata.name, len(pods.items))
"""
)


def median_wall(argv: list[str], env: dict[str, str], runs: int) -> float:
    """Median seconds of ``argv`` over ``runs`` (each must exit 0)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise SystemExit(f"{argv} failed: {done.stderr[-2000:]}")
    return round(statistics.median(times), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=kb._serve, args=(there,), daemon=True)
    proc.start()
    try:
        here.send("url")
        url = here.recv()
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            backend = kb.backend_on(url, home)
            for i in range(3):
                spec = {"name": f"job-{i}", "workers": 2, "command": ["python", "train.py"],
                        "image": "pytorch"}  # fmt: skip
                backend.submit(TrainSpec.from_dict(spec))
            backend.close()
            config = home / "config.yaml"
            config.write_text(yaml.safe_dump({"backend": "kubernetes", "kubernetes": {
                "kubeconfig": str(home / "kubeconfig"), "namespace": kb.NS, "flavor": "indexed"}}))  # fmt: skip
            env = {**os.environ, "WORKBENCH_HOME": str(home), "WORKBENCH_CONFIG": str(config),
                   "KUBECONFIG": str(home / "kubeconfig")}  # fmt: skip
            py = [sys.executable, "-c"]
            out: dict[str, object] = {"runs": runs, "median_seconds": {}}
            med: dict[str, float] = out["median_seconds"]  # type: ignore[assignment]
            for verb in (
                ["list"],
                ["get", "job-1"],
                ["logs", "job-1"],
                ["top", "--backend", "kubernetes"],
            ):
                med[f"workbench {' '.join(verb)}"] = median_wall([*py, CLI, *verb], env, runs)
            med["workbench cancel (once)"] = median_wall([*py, CLI, "cancel", "job-2"], env, 1)
            med["typed client: read the Job + list its pods"] = median_wall(
                [*py, TYPED.format(ns=kb.NS)], env, runs)  # fmt: skip
            local = {**env, "WORKBENCH_CONFIG": str(home / "none.yaml")}
            med["workbench list (local backend)"] = median_wall([*py, CLI, "list"], local, runs)
            typed = med["typed client: read the Job + list its pods"]
            out["ratio_over_typed_client"] = {k: round(v / typed, 2) for k, v in med.items()
                                              if k.startswith("workbench") and "local" not in k}  # fmt: skip
            print(json.dumps(out, indent=2))
    finally:
        here.send("stop")
        proc.join(10)


if __name__ == "__main__":
    main()

"""Container launch overhead of the local backend, in one run, as ratios.

    .venv/bin/python bench/bench_containers.py [--repeat 3]

Needs podman (see docs/containers.md); builds or reuses the test images, starts a Podman
service on a private socket and stops it at the end. For the same 2-worker job:

P) `workbench submit --runtime process --workers 2 --wait -- CMD`
C) `workbench submit --runtime container --image pytorch:2.13-cpu --workers 2 --wait -- CMD`
H) by hand: two `podman run --rm --network host -e RANK=.. ... IMAGE CMD` started together,
   waited for (what a user runs instead, without workbench)

for CMD = a trivial program (`python -c pass`: pure launch overhead) and the DDP example
(`python -m workbench.examples.train_ddp --epochs 1 --steps 20`). Runs alternate P/C/H so
machine noise hits all three; reports medians, C/P and C/H.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.containers import images  # noqa: E402  (the same image recipe as the tests)

BIN = Path(sys.executable).parent
JOBS = {
    "trivial": ["python", "-c", "pass"],
    "ddp": ["python", "-m", "workbench.examples.train_ddp", "--epochs", "1", "--steps", "20"],
}


def start_service(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A Podman service on a private socket (Docker Engine API)."""
    import docker

    url = f"unix://{tmp / 'podman.sock'}"
    proc = subprocess.Popen(
        ["podman", "system", "service", "--time=0", url], env=images.podman_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            docker.DockerClient(base_url=url, timeout=5).ping()
            return proc, url
        except Exception:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("podman system service did not answer")


def run_workbench(env: dict[str, str], name: str, runtime: str, cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [str(BIN / "workbench"), "submit", "--name", name, "--workers", "2", "--runtime", runtime,
         "--image", "pytorch:2.13-cpu", "--wait", "--", *cmd],
        check=True, env=env, stdout=subprocess.DEVNULL, cwd=env["BENCH_WORKDIR"],
    )  # fmt: skip
    return time.perf_counter() - t0


def run_by_hand(cmd: list[str], workdir: str) -> float:
    """Two `podman run` containers forming the same 2-rank world, as a user would."""
    port = _free_port()
    t0 = time.perf_counter()
    procs = []
    for rank in (0, 1):
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
               "RANK": str(rank), "LOCAL_RANK": "0"}  # fmt: skip
        flags = [f for k, v in env.items() for f in ("-e", f"{k}={v}")]
        procs.append(
            subprocess.Popen(
                [
                    "podman",
                    "run",
                    "--rm",
                    "--network",
                    "host",
                    "--ipc",
                    "host",
                    "--init",
                    "-v",
                    f"{workdir}:{workdir}",
                    "-w",
                    workdir,
                    *flags,
                    images.TORCH_TAG,
                    *cmd,
                ],
                env=images.podman_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"podman run failed: {codes}")
    return time.perf_counter() - t0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    """Run the comparison and print a JSON summary."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    built = images.ensure_images()
    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-containers-"))
    service, url = start_service(tmp)
    workdir = tmp / "work"
    workdir.mkdir()
    env = {**images.podman_env(), "WORKBENCH_HOME": str(tmp / "home"),
           "WORKBENCH_CONFIG": str(tmp / "none.yaml"), "DOCKER_HOST": url,
           "BENCH_WORKDIR": str(workdir)}  # fmt: skip
    results: dict[str, dict[str, float]] = {}
    try:
        for label, cmd in JOBS.items():
            runs: dict[str, list[float]] = {"process": [], "container": [], "podman_run": []}
            for i in range(args.repeat):
                runs["process"].append(run_workbench(env, f"{label}-p{i}", "process", cmd))
                runs["container"].append(run_workbench(env, f"{label}-c{i}", "container", cmd))
                runs["podman_run"].append(run_by_hand(cmd, str(workdir)))
            med = {k: statistics.median(v) for k, v in runs.items()}
            results[label] = {
                **{f"{k}_s": round(v, 2) for k, v in med.items()},
                "container_over_process": round(med["container"] / med["process"], 2),
                "container_over_podman_run": round(med["container"] / med["podman_run"], 2),
                "container_minus_process_s": round(med["container"] - med["process"], 2),
            }
            print(label, json.dumps(results[label]), flush=True)
    finally:
        service.terminate()
        service.wait(timeout=15)
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"repeat": args.repeat, "cpus": os.cpu_count(), "images": built,
                      "results": results}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

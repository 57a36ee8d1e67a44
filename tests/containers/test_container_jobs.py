"""Jobs whose workers are Podman containers: DDP, mounts at DST, cleanup, clear errors."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import psutil
import pytest

from tests.conftest import EXAMPLE, job_processes, wait_for
from workbench.backends import _container_engine as engine_mod
from workbench.errors import BackendUnavailableError, SpecError, SubmitError
from workbench.monitor.metrics import read_jsonl
from workbench.spec import JobStatus, RankState, TrainSpec

IMAGE = "pytorch:2.13-cpu"
IMAGE_REF = "localhost/workbench/pytorch:2.13.0-cpu"

pytestmark = pytest.mark.timeout(1800)  # the first run builds the images (minutes)


def submit(manager, command, tmp_path, **kw):
    kw.setdefault("working_dir", str(tmp_path))
    kw.setdefault("image", IMAGE)
    kw.setdefault("runtime", "container")
    return manager.submit(TrainSpec.from_dict({"command": command, **kw}))


def labelled(client, name):
    return client.containers.list(all=True, filters={"label": f"workbench.job={name}"})


@pytest.mark.slow
def test_two_worker_ddp_runs_in_two_containers(manager, engine, docker_client, tmp_path):
    r = submit(manager, [*EXAMPLE, "--epochs", "1", "--steps", "5"], tmp_path, name="ddp",
               workers=2)  # fmt: skip
    assert r.runtime == "container" and r.image == IMAGE_REF
    assert "runs as containers on podman" in r.events[0].message
    seen: dict[str, dict[str, str]] = {}

    def both_up():
        for c in labelled(docker_client, "ddp"):
            seen[c.name] = c.labels
        return len(seen) == 2 or manager.get("ddp").status.terminal

    wait_for(both_up, 90, "two containers")
    done = manager.wait("ddp", timeout=120)
    logs = {k: list(manager.logs("ddp", rank=k)) for k in (0, 1)}
    assert done.status is JobStatus.SUCCEEDED, (done.message, logs)
    assert sorted(v["workbench.rank"] for v in seen.values()) == ["0", "1"]
    assert {v["workbench.job"] for v in seen.values()} == {"ddp"}
    assert {v["workbench.attempt"] for v in seen.values()} == {"1"}
    digests = []
    for rank in (0, 1):
        (line,) = [x for x in logs[rank] if " done in " in x]
        assert "world 2" in line
        digests.append(line.split("params ")[1])
    assert digests[0] == digests[1]  # both ranks end with identical parameters
    assert labelled(docker_client, "ddp") == []  # removed when the job ended
    # Each rank ran under the monitoring agent (the image's label asks for it): its records
    # went to the job's metrics, none into the user's log.
    assert not any("@wb-metric" in x for rank in (0, 1) for x in logs[rank])
    for rank in (0, 1):
        records = read_jsonl(Path(done.job_dir) / "metrics" / f"agent-rank{rank}.jsonl")
        assert records and records[0]["kind"] == "monitor" and records[0]["rank"] == rank
        assert "no GPUs are visible to this job" in records[0]["reason"]


# stdout only: the engine copies a container's stdout and stderr from two pipes, so their
# relative order is not kept (the process runtime's test covers stderr).
REPORTER = """
import os
os.environ.pop("WORKBENCH_JOB_DIR")  # as in a pod on another node: no job folder
from workbench import run
rank = int(os.environ["WORKBENCH_RANK"])
print("in container:", os.path.exists("/run/.containerenv"), flush=True)
for i in range(1, 4):
    print(f"rank {rank} step {i} ...", end="", flush=True)  # a record lands mid-line
    run.log(step=i, total=3, loss=1.0 / i, rank=None)
    run.flush()
    print(" ok", flush=True)
"""


def test_run_log_in_a_container_reaches_the_manager_and_never_the_logs(manager, engine, tmp_path):
    # The container's stream is the only way out (what a pod on another node has): the
    # container copier splits run.log's records off into the job's metrics.
    (tmp_path / "reporter.py").write_text(REPORTER)
    submit(manager, ["python", "reporter.py"], tmp_path, name="crep", workers=2,
           env={"WORKBENCH_RUN_INTERVAL": "0"})  # fmt: skip
    done = manager.wait("crep", timeout=120)
    every = list(manager.logs("crep", rank=None))
    assert done.status is JobStatus.SUCCEEDED, (done.message, every)
    for rank in (0, 1):
        want = ["in container: True", *(f"rank {rank} step {i} ... ok" for i in (1, 2, 3))]
        assert list(manager.logs("crep", rank=rank)) == want
        assert list(manager.logs("crep", rank=rank, tail=2)) == want[-2:]
        assert list(manager.logs("crep", rank=rank, follow=True)) == want
    assert not any("\x1f" in x or "wb-metric" in x for x in every)
    scalars = manager.metrics("crep")["scalars"]
    assert sorted((x["rank"], x["step"]) for x in scalars) == [
        (r, s) for r in (0, 1) for s in (1, 2, 3)
    ]
    assert all(x["loss"] == 1.0 / x["step"] and "kind" not in x for x in scalars)


def test_data_mount_at_absolute_dst_inside_the_container(manager, engine, tmp_path):
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "hello.txt").write_text("hello from the host\n")
    script = (
        "import os, sys\n"
        "print('read:', open('/data/hello.txt').read().strip())\n"
        "print('python:', sys.executable)\n"
        "print('in container:', os.path.exists('/run/.containerenv'))\n"
        "print('mounts env:', os.environ.get('WORKBENCH_MOUNTS', '-'))\n"
        "try:\n    open('/data/new.txt', 'w')\nexcept OSError as e:\n    print('write:', e.errno)\n"
    )
    (tmp_path / "read_data.py").write_text(script)
    submit(manager, ["python", "read_data.py"], tmp_path, name="mount", workers=2,
           data=[f"{data}:/data"])  # fmt: skip
    done = manager.wait("mount", timeout=90)
    for rank in (0, 1):
        lines = list(manager.logs("mount", rank=rank))
        assert done.status is JobStatus.SUCCEEDED, (done.message, lines)
        assert "read: hello from the host" in lines
        assert "in container: True" in lines
        assert "python: /usr/local/bin/python" in lines  # the image's Python, not the host venv
        assert "mounts env: -" in lines  # /data is /data: nothing to remap
        assert "write: 30" in lines  # EROFS: a data mount is read-only unless :rw
    assert not (data / "new.txt").exists()


def test_cancel_leaves_no_container_and_no_process(manager, engine, docker_client, tmp_path):
    submit(manager, ["python", "-c", "import time; time.sleep(600)"], tmp_path, name="stop",
           workers=2)  # fmt: skip
    wait_for(lambda: len(labelled(docker_client, "stop")) == 2, 90, "two containers")
    wait_for(lambda: all(c.status == "running" for c in labelled(docker_client, "stop")), 30)
    done = manager.cancel("stop")
    assert done.status is JobStatus.CANCELLED
    assert {x.state for x in done.ranks} == {RankState.STOPPED}
    assert labelled(docker_client, "stop") == []
    assert job_processes("stop") == []  # wrappers and in-container processes alike


def test_killed_wrapper_leaks_no_container(manager, engine, docker_client, tmp_path):
    """SIGKILL to a rank's wrapper fails the rank; the supervisor's sweep removes containers."""
    submit(manager, ["python", "-c", "import time; time.sleep(600)"], tmp_path, name="leak",
           workers=2)  # fmt: skip
    wait_for(lambda: len(labelled(docker_client, "leak")) == 2, 90, "two containers")
    wait_for(lambda: all(c.status == "running" for c in labelled(docker_client, "leak")), 30)
    wrapper = psutil.Process(manager.get("leak").ranks[1].pid)
    assert "workbench.backends._container_rank" in " ".join(wrapper.cmdline())
    os.kill(wrapper.pid, signal.SIGKILL)
    done = manager.wait("leak", timeout=60)
    assert done.status is JobStatus.FAILED
    assert done.message == "rank 1 was killed by SIGKILL"
    assert labelled(docker_client, "leak") == []
    assert job_processes("leak") == []


def test_missing_image_fails_before_anything_starts(manager, engine, wb_home, tmp_path):
    with pytest.raises(SubmitError) as e:
        submit(manager, ["python", "-c", "1"], tmp_path, name="noimg",
               image="localhost/workbench/nope:1")  # fmt: skip
    text = str(e.value)
    assert "image localhost/workbench/nope:1 is not on this machine" in text
    assert "docker/README.md" in text and "--runtime process" in text
    assert manager.list() == []
    assert not (wb_home / "jobs" / "noimg").exists()


def test_unreachable_engine(manager, wb_home, tmp_path, monkeypatch):
    sock = tmp_path / "nothing-here.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    with pytest.raises(BackendUnavailableError) as e:
        submit(manager, ["python", "-c", "1"], tmp_path, name="noengine")
    assert "no container engine answers" in str(e.value) and str(sock) in str(e.value)
    assert "--runtime process" in str(e.value)
    assert manager.list() == []
    # auto falls back to processes, and says so
    r = submit(manager, ["python", "-c", "print('ran')"], tmp_path, name="auto", runtime="auto")
    assert r.runtime == "process"
    assert manager.wait("auto", timeout=60).status is JobStatus.SUCCEEDED
    assert list(manager.logs("auto")) == ["ran"]


def test_auto_picks_containers_when_an_engine_answers(manager, engine, tmp_path):
    code = "import os; print('container' if os.path.exists('/run/.containerenv') else 'host')"
    r = submit(manager, ["python", "-c", code], tmp_path, name="auto", runtime="auto")
    assert r.runtime == "container"
    assert manager.wait("auto", timeout=90).status is JobStatus.SUCCEEDED
    assert list(manager.logs("auto")) == ["container"]


def test_gpu_request_on_an_engine_without_cdi_is_refused(manager, engine, wb_home, tmp_path):
    assert engine_mod.nvidia_cdi_specs() == []  # this host has no NVIDIA CDI spec
    with pytest.raises(SubmitError, match=r"no NVIDIA CDI spec.*nvidia-ctk cdi generate"):
        submit(manager, ["python", "-c", "1"], tmp_path, name="gpu", gpus=1)
    assert manager.list() == []


def test_bad_runtime_is_a_spec_error(manager, tmp_path):
    with pytest.raises(SpecError) as e:
        submit(manager, ["python", "-c", "1"], tmp_path, runtime="vm")
    assert e.value.field == "runtime"


def test_gpu_options_pass_exactly_the_ranks_gpus():
    """Request construction only: this host has no GPU for the engine to pass."""
    cdi = engine_mod.ContainerPlan("unix:///x", "podman", "img", gpu_mode="cdi")
    assert engine_mod.gpu_options(cdi, ["2", "5"]) == {
        "devices": ["nvidia.com/gpu=2", "nvidia.com/gpu=5"]
    }
    dr = engine_mod.ContainerPlan("unix:///x", "docker", "img", gpu_mode="device_requests")
    (request,) = engine_mod.gpu_options(dr, ["3"])["device_requests"]
    assert request["DeviceIDs"] == ["3"] and request["Capabilities"] == [["gpu"]]
    assert engine_mod.gpu_options(dr, []) == {}


def test_plan_is_saved_in_the_job_folder(manager, engine, tmp_path):
    r = submit(manager, ["python", "-c", "1"], tmp_path, name="plan")
    plan = json.loads((Path(r.job_dir or "") / "container.json").read_text())
    assert plan["engine"] == engine and plan["flavour"] == "podman"
    assert plan["image"] == IMAGE_REF and plan["pull"] is False
    assert manager.wait("plan", timeout=90).status is JobStatus.SUCCEEDED
    assert re.search(r"runtime: container", _describe(manager.get("plan")))


def _describe(record):
    from workbench.cli import _describe as describe

    return describe(record)


def test_output_at_absolute_dst_is_collected_when_the_job_ends(manager, engine, tmp_path):
    dest = tmp_path / "collected"
    dest.mkdir()
    code = "import os; open('/out/rank-%s.txt' % os.environ['RANK'], 'w').write('done')"
    submit(manager, ["python", "-c", code], tmp_path, name="outs", workers=2,
           outputs=[f"{dest}:/out:rw"])  # fmt: skip
    done = manager.wait("outs", timeout=90)
    assert done.status is JobStatus.SUCCEEDED, (done.message, list(manager.logs("outs")))
    assert sorted(p.name for p in dest.iterdir()) == ["rank-0.txt", "rank-1.txt"]
    assert (dest / "rank-1.txt").read_text() == "done"
    assert "OutputsUploaded" in [e.reason for e in done.events]

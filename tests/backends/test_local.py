"""The local backend with real processes: DDP, torchrun, gang failure, retries, cancel, detach."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import EXAMPLE, job_processes, wait_for
from workbench.errors import JobNotFoundError, SpecError, SubmitError
from workbench.spec import JobStatus, RankState, TrainSpec

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def submit(manager, command, **kw):
    kw.setdefault("working_dir", str(SCRIPTS))
    return manager.submit(TrainSpec.from_dict({"command": command, **kw}))


def logs(manager, name, rank=0):
    return list(manager.logs(name, rank=rank))


@pytest.mark.slow
def test_two_worker_ddp_trains_and_ranks_agree(manager):
    r = submit(manager, [*EXAMPLE, "--epochs", "3", "--steps", "15"], name="ddp", workers=2)
    assert not r.status.terminal  # submit returns at once, long before the job ends
    done = manager.wait("ddp", timeout=120)
    assert done.status is JobStatus.SUCCEEDED, (
        done.message,
        logs(manager, "ddp"),
        logs(manager, "ddp", 1),
    )
    assert [x.state for x in done.ranks] == [RankState.SUCCEEDED, RankState.SUCCEEDED]
    assert [x.exit_code for x in done.ranks] == [0, 0]
    digests = []
    for rank in (0, 1):
        lines = logs(manager, "ddp", rank)
        losses = [float(m.group(1)) for line in lines if (m := re.search(r"loss ([0-9.]+)", line))]
        assert len(losses) == 45
        assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 / 3, losses  # loss goes down
        (done_line,) = [line for line in lines if " done in " in line]
        assert "world 2" in done_line
        digests.append(done_line.split("params ")[1])
    assert digests[0] == digests[1]  # identical parameters on both ranks
    assert done.started_at and done.finished_at and done.finished_at >= done.started_at
    assert done.cost() == 0  # a local job costs this host's configured price, $0 by default


@pytest.mark.slow
def test_unmodified_torchrun_forms_world_of_four(manager):
    submit(manager, ["torchrun", "allreduce.py"], name="trun", workers=2, procs_per_worker=2)
    done = manager.wait("trun", timeout=180)
    lines = [
        line
        for rank in (0, 1)
        for line in logs(manager, "trun", rank)
        if line.startswith("allreduce")
    ]
    assert done.status is JobStatus.SUCCEEDED, (done.message, lines)
    assert sorted(re.search(r"rank=(\d)", x).group(1) for x in lines) == ["0", "1", "2", "3"]
    assert all("world=4 sum=10" in x for x in lines)  # 1+2+3+4 over all four processes
    # torchrun set LOCAL_RANK per process; the worker index came from the contract
    assert {re.search(r"node=(\d)", x).group(1) for x in lines} == {"0", "1"}


@pytest.mark.slow
def test_processes_per_worker_without_a_launcher(manager):
    submit(manager, ["python", "allreduce.py"], name="auto", workers=1, procs_per_worker=2)
    done = manager.wait("auto", timeout=120)
    lines = [line for line in logs(manager, "auto") if line.startswith("allreduce")]
    assert done.status is JobStatus.SUCCEEDED, (done.message, lines)
    assert sorted(re.search(r"local_rank=(\d)", x).group(1) for x in lines) == ["0", "1"]
    assert all("world=2 sum=3" in x for x in lines)


def test_contract_env_reaches_every_rank(manager):
    submit(manager, ["python", "show_env.py"], name="env", workers=3, env={"LR": "0.1"})
    done = manager.wait("env", timeout=60)
    assert done.status is JobStatus.SUCCEEDED
    envs = [json.loads(logs(manager, "env", r)[0][4:]) for r in range(3)]
    ports = {e["MASTER_PORT"] for e in envs}
    assert len(ports) == 1
    for r, e in enumerate(envs):
        assert e["RANK"] == e["PET_NODE_RANK"] == e["WORKBENCH_RANK"] == str(r)
        assert e["WORLD_SIZE"] == "3" and e["PET_NNODES"] == "3" and e["PET_NPROC_PER_NODE"] == "1"
        assert e["MASTER_ADDR"] == e["PET_MASTER_ADDR"] == "127.0.0.1"
        assert e["CUDA_VISIBLE_DEVICES"] == ""  # a CPU job sees no GPU, as in a pod without GPUs
        assert e["LR"] == "0.1" and e["WORKBENCH_JOB_NAME"] == "env"


def test_tensorflow_and_mpi_contracts(manager):
    submit(manager, ["python", "show_env.py"], name="tf", workers=2, framework="tensorflow")
    submit(manager, ["python", "show_env.py"], name="mpi", workers=1, framework="mpi")
    assert manager.wait("tf", timeout=60).status is JobStatus.SUCCEEDED
    assert manager.wait("mpi", timeout=60).status is JobStatus.SUCCEEDED
    tf = [json.loads(json.loads(logs(manager, "tf", r)[0][4:])["TF_CONFIG"]) for r in (0, 1)]
    assert tf[0]["cluster"] == tf[1]["cluster"] and len(tf[0]["cluster"]["worker"]) == 2
    assert [c["task"]["index"] for c in tf] == [0, 1]
    mpi = json.loads(logs(manager, "mpi")[0][4:])
    assert Path(mpi["OMPI_MCA_orte_default_hostfile"]).read_text() == "127.0.0.1 slots=1\n"


# Gang failure, retries, cancel, logs and env on both runtimes: tests/backends/contract.py


def test_retries_exhausted_fail_the_job(manager):
    submit(
        manager,
        ["python", "fail_rank.py"],
        name="exhaust",
        workers=1,
        max_retries=1,
        env={"FAIL_RANK": "0"},
    )
    done = manager.wait("exhaust", timeout=60)
    assert done.status is JobStatus.FAILED and done.attempt == 2


def _groups_alive(pgids):
    alive = []
    for g in pgids:
        try:
            os.killpg(g, 0)
            alive.append(g)
        except ProcessLookupError:
            pass
    return alive


def test_cancel_leaves_no_process_alive(manager):
    submit(manager, ["python", "sleeper.py"], name="sleepy", workers=2, env={"IGNORE_TERM": "1"})
    wait_for(
        lambda: all("sleeping" in " ".join(logs(manager, "sleepy", r)) for r in (0, 1)),
        what="ranks up",
    )
    procs = job_processes("sleepy")
    assert len(procs) == 4  # two ranks, each with a grandchild
    pgids = {os.getpgid(p.pid) for p in procs}
    record = manager.cancel("sleepy")
    assert record.status is JobStatus.CANCELLED
    assert all(x.state is RankState.STOPPED for x in record.ranks)
    assert job_processes("sleepy") == []
    assert _groups_alive(pgids) == []
    assert "Cancelled" in [e.reason for e in record.events]
    assert manager.cancel("sleepy").status is JobStatus.CANCELLED  # idempotent


def test_timeout_fails_the_job(manager):
    submit(manager, ["python", "sleeper.py"], name="slow", workers=1, timeout=2)
    done = manager.wait("slow", timeout=60)
    assert done.status is JobStatus.FAILED
    assert done.message == "timed out after 2s"
    assert job_processes("slow") == []


def test_lost_supervisor_fails_the_job_and_kills_ranks(manager):
    submit(manager, ["python", "sleeper.py"], name="orphan", workers=1)
    wait_for(lambda: manager.get("orphan").status is JobStatus.RUNNING, what="running")
    backend = manager.backend()
    row = backend.store.row("orphan")
    os.kill(row["details"]["supervisor_pid"], signal.SIGKILL)
    wait_for(
        lambda: (
            not psutil.pid_exists(row["details"]["supervisor_pid"])
            or psutil.Process(row["details"]["supervisor_pid"]).status() == psutil.STATUS_ZOMBIE
        ),
        what="supervisor gone",
    )
    record = manager.get("orphan")
    assert record.status is JobStatus.FAILED
    assert "supervisor process ended unexpectedly" in record.message
    wait_for(lambda: job_processes("orphan") == [], what="ranks killed")


def test_job_outlives_the_process_that_submitted_it(wb_home, tmp_path):
    code = (
        "import workbench, sys;"
        f"j = workbench.submit(['python', 'fail_rank.py'], name='detached', workers=2, working_dir={str(SCRIPTS)!r},"
        " env={'FAIL_RANK': '9', 'OTHER_SLEEP': '1.5'});"
        "print(j.name)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "detached"
    # the submitter has exited; a new process (the CLI) follows the job to its end
    cli = [sys.executable, "-m", "workbench.cli"]
    got = subprocess.run(
        [*cli, "get", "detached", "-o", "json"], capture_output=True, text=True, timeout=60
    )
    # Usually still active here; on a loaded machine it may already have ended.
    assert json.loads(got.stdout)["status"] in ("Pending", "Running", "Succeeded")
    deadline = time.time() + 60
    while time.time() < deadline:
        got = subprocess.run(
            [*cli, "get", "detached", "-o", "json"], capture_output=True, text=True, timeout=60
        )
        if json.loads(got.stdout)["status"] == "Succeeded":
            break
        time.sleep(0.3)
    data = json.loads(got.stdout)
    assert data["status"] == "Succeeded" and [r["exit_code"] for r in data["ranks"]] == [0, 0]
    # and through the Python API of yet another process
    api = subprocess.run(
        [sys.executable, "-c", "import workbench; print(workbench.get('detached').status.value)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert api.stdout.strip() == "Succeeded"


def test_logs_tail_and_follow(manager):
    submit(
        manager,
        [
            "python",
            "-c",
            "import time\nfor i in range(30):\n print('line', i, flush=True); time.sleep(0.02)",
        ],
        name="chatty",
        workers=1,
    )
    followed = list(manager.logs("chatty", follow=True))
    assert followed == [f"line {i}" for i in range(30)]
    assert list(manager.logs("chatty", tail=3)) == ["line 27", "line 28", "line 29"]
    with pytest.raises(SpecError, match=r"ranks 0\.\.0"):
        manager.logs("chatty", rank=1)


def test_rerun_runs_the_snapshot_exactly(manager, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('version one')\n")
    submit(manager, ["python", "train.py"], name="orig", working_dir=str(tmp_path))
    assert manager.wait("orig", timeout=60).status is JobStatus.SUCCEEDED
    script.write_text("print('version two')\n")  # the user edits the script afterwards
    again = manager.rerun("orig")
    assert again.name == "orig-r1"
    assert manager.wait("orig-r1", timeout=60).status is JobStatus.SUCCEEDED
    assert logs(manager, "orig-r1") == ["version one"]


def test_secrets_reach_the_worker_but_not_the_disk(manager, wb_home):
    submit(manager, ["python", "show_env.py"], name="sec", env={"MY_SECRET_TOKEN": "hunter2-xyz"})
    done = manager.wait("sec", timeout=60)
    assert json.loads(logs(manager, "sec")[0][4:])["MY_SECRET_TOKEN"] == "hunter2-xyz"
    assert done.spec["env"]["MY_SECRET_TOKEN"] == "***"
    assert "hunter2-xyz" not in json.dumps(done.to_dict())
    for path in wb_home.rglob("*"):
        if path.is_file() and path.name not in ("secret-env.json", "rank-0.log"):
            assert b"hunter2-xyz" not in path.read_bytes(), path
    secret = wb_home / "jobs" / "sec" / "secret-env.json"
    assert secret.stat().st_mode & 0o077 == 0  # only the user can read it


def test_submit_errors(manager, tmp_path):
    with pytest.raises(SpecError, match="'no-such-program' is not on PATH"):
        submit(manager, ["no-such-program"], name="nope")
    with pytest.raises(SpecError, match="working_dir"):
        submit(manager, ["python", "x.py"], working_dir=str(tmp_path / "missing"))
    with pytest.raises(SubmitError) as e:
        submit(manager, ["python", "sleeper.py"], gpus=1)
    assert "no NVIDIA driver on this host" in str(e.value) and "--gpus 0" in str(e.value)
    submit(manager, ["python", "-c", "pass"], name="taken")
    with pytest.raises(SpecError, match="a job named 'taken' already exists"):
        submit(manager, ["python", "-c", "pass"], name="taken")
    with pytest.raises(SpecError, match=r"script 'x\.py' does not exist"):
        submit(manager, ["python", "x.py"], name="no-script")
    assert all(r.name != "no-script" for r in manager.list())  # nothing was created
    with pytest.raises(JobNotFoundError):
        manager.get("ghost")


def test_delete_only_finished_jobs(manager):
    submit(manager, ["python", "sleeper.py"], name="busy")
    with pytest.raises(SpecError, match="cancel it before deleting"):
        manager.delete("busy")
    manager.cancel("busy")
    job_dir = Path(manager.get("busy").job_dir)
    manager.delete("busy")
    assert not job_dir.exists()
    with pytest.raises(JobNotFoundError):
        manager.get("busy")


def test_generated_names_and_listing(manager):
    r = submit(manager, ["python", "show_env.py"])
    assert re.fullmatch(r"show-env-[0-9a-f]{5}", r.name)
    manager.wait(r.name, timeout=60)
    assert [x.name for x in manager.list()] == [r.name]
    assert manager.list(status=["Running"]) == []
    assert manager.counts()["Succeeded"] == 1

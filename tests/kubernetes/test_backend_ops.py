"""Operations on the Kubernetes backend against the fake cluster: a log follower that
rides out a gang restart, and cluster jobs on every surface as local jobs show them."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.fakes.kube_kubelet import FakeCluster
from tests.kubernetes import test_backend
from workbench.backends._jobfiles import SECRET_FILE
from workbench.backends.kubernetes.backend import ORIGIN
from workbench.backends.kubernetes.cluster import Cluster
from workbench.cli import main as cli_main
from workbench.errors import SubmitError
from workbench.manager import JobManager
from workbench.settings import Settings
from workbench.spec import JobStatus, TrainSpec

# The backend tests' fixtures: a kubeconfig at the fake, the fake cluster, a manager.
cluster = test_backend.cluster
jobs = test_backend.jobs
kube_env = test_backend.kube_env
spec = test_backend.spec
jp_server_config = test_backend.jp_server_config


MARK = "[workbench] ---- attempt 2 ----"
LINES = [f"rank 0 line {i}" for i in range(4)]


def test_follow_continues_across_a_gang_restart(jobs: JobManager, cluster: FakeCluster) -> None:
    """The kubelet kills rank 0's first pod after its second line; the gang is retried
    (new workload, new pods) and one ``logs(follow=True)`` shows attempt 1, the attempt
    marker, then attempt 2 to its end, as the copy saved in the job folder holds them."""
    cluster.fail_pod_once("phoenix", 0, after="rank 0 line 1")
    jobs.submit(spec(["python", "rank_lines.py"], name="phoenix", workers=1, max_retries=1,
                     env={"LINES": "4", "GAP": "0.3"}))  # fmt: skip
    followed: list[str] = []
    done = threading.Event()

    def follow() -> None:
        followed.extend(jobs.logs("phoenix", rank=0, follow=True))
        done.set()

    threading.Thread(target=follow, daemon=True).start()
    final = jobs.wait("phoenix", timeout=90)
    assert final.status is JobStatus.SUCCEEDED and final.attempt == 2
    assert done.wait(30), f"the follower did not end: {followed}"
    assert MARK in followed, followed
    first, second = followed[: followed.index(MARK)], followed[followed.index(MARK) + 1 :]
    assert first == LINES[: len(first)] and len(first) >= 2, followed  # killed after line 1
    assert second == LINES, followed
    assert list(jobs.logs("phoenix", rank=0)) == followed  # the same as the saved copy
    events = [e.reason for e in final.events]
    assert "Restarting" in events and "RankFailed" in events
    copy = Path(final.job_dir or "") / "logs" / "rank-0.log"
    assert copy.read_text().splitlines() == followed
    # The second attempt's workload says whose it is, as the first's did.
    backend = jobs.backend("kubernetes")
    job = cluster.state.get(("batch", "v1", "jobs"), test_backend.NS, "phoenix")
    assert job["metadata"]["uid"] == final.details["uid"]
    assert job["metadata"]["annotations"][ORIGIN] == backend.origin  # type: ignore[attr-defined]


def test_a_cluster_jobs_folder_is_made_when_it_has_something_to_hold(
    jobs: JobManager, cluster: FakeCluster, tmp_path: Path
) -> None:
    """Without credentials or retries, submit makes no folder (the row holds the spec);
    the job's end makes it, private, with spec.yaml (the row's spec) and the copied logs.
    With credentials the folder is made at submit, for rerun's 0600 copy of them."""
    gate = tmp_path / "go"  # the job cannot end (and make its folder) before the check
    plain = jobs.submit(spec(["python", "-c", GATED], name="plain-dir", workers=1,
                             env={"GATE": str(gate)}))  # fmt: skip
    job_dir = Path(plain.job_dir or "")
    assert plain.job_dir and not job_dir.exists()
    gate.touch()
    final = jobs.wait("plain-dir", timeout=90)
    assert final.status is JobStatus.SUCCEEDED, final.message
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((job_dir / "spec.yaml").stat().st_mode) == 0o600
    assert TrainSpec.from_yaml(job_dir / "spec.yaml").to_dict() == final.spec
    assert (job_dir / "logs" / "rank-0.log").read_text().splitlines() == [
        "rank 0 line 0", "rank 0 line 1"]  # fmt: skip

    token = jobs.submit(spec(["python", "-c", "print('hi')"], name="token-dir", workers=1,
                             env={"HF_TOKEN": "hf_secret123"}))  # fmt: skip
    token_dir = Path(token.job_dir or "")
    assert stat.S_IMODE(token_dir.stat().st_mode) == 0o700
    assert "hf_secret123" not in (token_dir / "spec.yaml").read_text()
    saved = token_dir / SECRET_FILE
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600 and "hf_secret123" in saved.read_text()
    assert jobs.backend("kubernetes").rerun_spec("token-dir").env["HF_TOKEN"] == "hf_secret123"
    assert jobs.wait("token-dir", timeout=90).status is JobStatus.SUCCEEDED


def test_a_cancelled_cluster_jobs_logs_outlive_its_pods(
    jobs: JobManager, cluster: FakeCluster
) -> None:
    """Cancel copies each rank's log into the job folder before it deletes the workload
    (its pods go with it): what a cancelled job printed stays readable once they are gone."""
    script = ("import os, time\n"
              "print(f\"rank {os.environ['WORKBENCH_RANK']} working\", flush=True)\n"
              "time.sleep(300)\n")  # fmt: skip
    jobs.submit(spec(["python", "-c", script], name="cut-short"))

    def both_printed() -> bool:
        return sorted(jobs.logs("cut-short", rank=None)) == [
            "[rank 0] rank 0 working", "[rank 1] rank 1 working"]  # fmt: skip

    wait_for(both_printed, timeout=60, what="both ranks' first line in their pods' logs")
    record = jobs.cancel("cut-short", wait=0)
    logs = Path(record.job_dir or "") / "logs"
    assert [(logs / f"rank-{r}.log").read_text() for r in (0, 1)] == [
        "rank 0 working\n", "rank 1 working\n"]  # fmt: skip
    assert jobs.wait("cut-short", timeout=60).status is JobStatus.CANCELLED
    pods = ("", "v1", "pods")
    wait_for(lambda: not cluster.state.list(pods, test_backend.NS, "workbench.io/job=cut-short")[0],
             timeout=30, what="the job's pods to be gone")  # fmt: skip
    assert sorted(jobs.logs("cut-short", rank=None)) == [
        "[rank 0] rank 0 working", "[rank 1] rank 1 working"]  # fmt: skip


def test_a_cancel_the_cluster_refuses_leaves_the_job_and_its_logs_to_end_as_they_would(
    jobs: JobManager, cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete refused (RBAC without delete): the job runs on, its row back to Running
    with a CancelFailed event, and the log copy made for the cancel forgotten, so the
    job's end copies the whole log (not the part printed before the cancel)."""
    gate = tmp_path / "go"
    script = ("import os, pathlib, time\nprint('before', flush=True)\n"
              "while not pathlib.Path(os.environ['GATE']).exists():\n    time.sleep(0.05)\n"
              "print('after', flush=True)\n")  # fmt: skip
    jobs.submit(spec(["python", "-c", script], name="refused", workers=1,
                     env={"GATE": str(gate)}))  # fmt: skip
    wait_for(lambda: list(jobs.logs("refused")) == ["before"], timeout=60, what="the first line")

    def forbidden(self: Cluster, namespace: str, kind: str, name: str) -> bool:
        raise SubmitError("kubernetes", f"deleting {kind} {name}: 403 jobs is forbidden")

    monkeypatch.setattr(Cluster, "delete_workload", forbidden)
    with pytest.raises(SubmitError, match=r"403 jobs is forbidden.*was not cancelled"):
        jobs.cancel("refused", wait=0)
    record = jobs.get("refused")
    assert record.status is JobStatus.RUNNING and record.events[-1].reason == "CancelFailed"
    logs = Path(record.job_dir or "") / "logs"
    assert not list(logs.glob(".copied-*"))  # the cancel's copy is not taken as the end's
    monkeypatch.undo()
    gate.touch()
    assert jobs.wait("refused", timeout=90).status is JobStatus.SUCCEEDED
    assert (logs / "rank-0.log").read_text() == "before\nafter\n"


# ---- surfaces ---------------------------------------------------------------------------------
GATED = ("import os, pathlib, time\n"
         "gate = pathlib.Path(os.environ['GATE'])\n"
         "while not gate.exists():\n    time.sleep(0.05)\n"
         "r = os.environ['WORKBENCH_RANK']\n"
         "print(f'rank {r} line 0', flush=True)\nprint(f'rank {r} line 1', flush=True)\n")  # fmt: skip
RECORD_KEYS = ("name", "status", "backend", "ranks", "events", "created_at", "started_at",
               "finished_at", "spec", "image", "attempt", "details")  # fmt: skip


def _shape(record: dict[str, Any]) -> dict[str, Any]:
    """What a surface shows the same for a local and a cluster job."""
    return {"status": record["status"], "workers": len(record["ranks"]),
            "ranks": [(r["rank"], r["state"], r["exit_code"]) for r in record["ranks"]],
            "keys": sorted(k for k in RECORD_KEYS if record.get(k) is not None),
            "rank_keys": sorted(record["ranks"][0])}  # fmt: skip


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``workbench ARGV`` in this process (the CLI's main): its stdout."""
    capsys.readouterr()
    assert cli_main(list(argv)) == 0
    return capsys.readouterr().out


async def test_a_cluster_job_shows_on_every_surface_as_a_local_one(
    jp_fetch: Any,
    jp_server_config: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    """The same 2-rank job, once local and once on the fake cluster: the job widget,
    %gpu_jobs, %gpu_top, `workbench list/get/logs/top --backend` and GET
    /workbench/api/jobs/NAME show both alike (fields, ranks, logs), while running and when
    done."""
    from IPython.core.interactiveshell import InteractiveShell

    from tests.server.conftest import validate_response
    from workbench.api import Job
    from workbench.widgets.job import JobWidget

    m = JobManager(Settings.load())
    gate = tmp_path / "gate"

    def release() -> None:  # a failed assert leaves no supervisor waiting for the gate
        gate.touch()
        for record in m.list(status=["Pending", "Running", "Cancelling"]):
            m.cancel(record.name, wait=15)

    request.addfinalizer(release)
    for name, backend in (("here", "local"), ("there", "kubernetes")):
        m.submit(TrainSpec.from_dict({"name": name, "backend": backend, "workers": 2,
                                      "command": ["python", "-c", GATED],
                                      "env": {"GATE": str(gate)}}))  # fmt: skip
    deadline = time.monotonic() + 90
    while {r.status for r in m.list()} != {JobStatus.RUNNING} or any(
        rank.state.value != "Running" for r in m.list() for rank in r.ranks
    ):
        assert time.monotonic() < deadline, [(r.name, r.status) for r in m.list()]
        await asyncio.sleep(0.1)
    # While running: `top job` lists both; `top` shows the cluster's nodes holding its pods.
    active = {r["name"]: r for r in json.loads(_cli(capsys, "top", "job", "-o", "json"))}
    assert sorted(active) == ["here", "there"]
    assert _shape(active["here"]) == _shape(active["there"])
    here = json.loads(_cli(capsys, "top", "-o", "json"))  # the default backend's nodes
    nodes = json.loads(_cli(capsys, "top", "--backend", "kubernetes", "-o", "json"))
    on_cluster = [j["name"] for n in nodes for j in n["active_jobs"]]
    assert {n["backend"] for n in nodes} == {"kubernetes"} and on_cluster == ["there"]
    assert [n["backend"] for n in here] == ["local"] and sorted(here[0]) == sorted(nodes[0])
    text = _cli(capsys, "top", "--backend", "kubernetes")
    assert f"Host {nodes[0]['name']} (kubernetes)" in text and "(local)" not in text
    cluster_jobs = json.loads(_cli(capsys, "top", "job", "--backend", "kubernetes", "-o", "json"))
    assert [r["name"] for r in cluster_jobs] == ["there"]
    assert cli_main(["top", "--backend", "nosuch"]) == 2  # one line naming the field
    assert "backend" in capsys.readouterr().err
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "workbench")
    capsys.readouterr()
    shell.run_line_magic("gpu_top", "--backend kubernetes")
    magic_top = capsys.readouterr().out
    assert f"Host {nodes[0]['name']} (kubernetes)" in magic_top and "(local)" not in magic_top
    gate.touch()
    deadline = time.monotonic() + 90
    while {r.status for r in m.list()} != {JobStatus.SUCCEEDED}:
        assert time.monotonic() < deadline, [(r.name, r.status) for r in m.list()]
        await asyncio.sleep(0.1)

    # the REST API
    got = {}
    for name in ("here", "there"):
        r = await jp_fetch("workbench", "api", "jobs", name)
        validate_response(("workbench", "api", "jobs", name), "GET", r)
        got[name] = json.loads(r.body)
        logs = await jp_fetch("workbench", "api", "jobs", name, "logs", params={"rank": 1})
        assert logs.body.decode().splitlines() == ["rank 1 line 0", "rank 1 line 1"]
    assert _shape(got["here"]) == _shape(got["there"])
    assert got["there"]["backend"] == "kubernetes" and got["here"]["backend"] == "local"
    # the CLI
    table = _cli(capsys, "list").splitlines()
    rows = {line.split()[0]: line.split() for line in table[1:] if line.strip()}
    assert len(rows["here"]) == len(rows["there"]) and "Succeeded" in rows["there"]
    for name in ("here", "there"):
        assert _shape(json.loads(_cli(capsys, "get", name, "-o", "json"))) == _shape(got["here"])
        assert _cli(capsys, "logs", name, "--all").splitlines() == [
            "[rank 0] rank 0 line 0", "[rank 0] rank 0 line 1",
            "[rank 1] rank 1 line 0", "[rank 1] rank 1 line 1"]  # fmt: skip
    # %gpu_jobs
    capsys.readouterr()
    shell.run_line_magic("gpu_jobs", "")
    magic = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]
             if line.strip()}  # fmt: skip
    assert len(magic["here"]) == len(magic["there"]) == len(rows["there"])  # same columns
    assert magic["there"][:2] == rows["there"][:2] == ["there", "Succeeded"]
    # the job widget
    views = {}
    for name in ("here", "there"):
        wdg = JobWidget(Job(name, m))
        try:
            status = str(wdg.status.get_state()["value"])
            views[name] = (re.findall(r'data-status="(\w+)"', status)[:1],
                           re.findall(r'<tr data-rank="(\d+)"', status),
                           re.sub(r"<[^>]+>", " ", str(wdg.logs.get_state()["value"])).split())  # fmt: skip
        finally:
            wdg.close()
    assert views["here"] == views["there"] == (["Succeeded"], ["0", "1"], views["here"][2])
    assert "line" in views["there"][2]


# ---- the in-image agent's GPU alerts ----------------------------------------------------------
def test_agent_alerts_in_a_pod_become_job_events_once(
    jobs: JobManager, cluster: FakeCluster, tmp_path: Path
) -> None:
    """A pod whose output carries the agent's alert frames (raised, then cleared): the
    job's events show both, named as the local host recorder names them, once each, even
    when the copy is redone; the frames stay out of the log and land in agent-rank0.jsonl."""
    from workbench.monitor.alerts import Alert
    from workbench.monitor.stream import format_metric_line

    alert = Alert("temperature", 0, "GPU-1", "warning", "GPU 0 at 91 C (>= 85 C)", 91.0, 85.0,
                  since=1000.5)  # fmt: skip
    cleared = Alert(**{**alert.to_dict(), "cleared": 1060.25})
    base = {"v": 1, "host": "pod", "rank": 0, "job": "hot", "kind": "alert"}
    frames = tmp_path / "frames.txt"
    frames.write_text("before\n" + "".join(
        format_metric_line({**base, "active": a.cleared is None, "alert": a.to_dict()})
        for a in (alert, cleared)) + "after\n")  # fmt: skip
    echo = "import os, sys; sys.stdout.write(open(os.environ['FRAMES']).read())"
    jobs.submit(spec(["python", "-c", echo], name="hot", workers=1, env={"FRAMES": str(frames)}))
    final = jobs.wait("hot", timeout=90)
    assert final.status is JobStatus.SUCCEEDED, final.message

    def alerts() -> list[tuple[float, str, str, str]]:
        return [(e.time, e.reason, e.message, e.level) for e in jobs.get("hot").events
                if e.reason.startswith("GpuAlert")]  # fmt: skip

    want = [(1000.5, "GpuAlert:temperature", "rank 0: GPU 0 at 91 C (>= 85 C)", "warning"),
            (1060.25, "GpuAlertCleared:temperature", "rank 0: cleared: GPU 0 at 91 C (>= 85 C)",
             "info")]  # fmt: skip
    assert alerts() == want
    assert list(jobs.logs("hot", rank=0)) == ["before", "after"]
    job_dir = Path(final.job_dir or "")
    records = [
        json.loads(x) for x in (job_dir / "metrics" / "agent-rank0.jsonl").read_text().splitlines()
    ]
    assert [(r["kind"], r["active"]) for r in records] == [("alert", True), ("alert", False)]

    # A copy cut short (no marker) is redone: the same records, no second set of events.
    backend: Any = jobs.backend("kubernetes")
    _, pod_logs, sync = backend._of(final)
    mark = job_dir / "logs" / ".copied-rank-0"
    mark.unlink()
    again = pod_logs.save(final.details["namespace"], str(job_dir),
                          pod_logs.pods_by_rank(final), final.attempt)  # fmt: skip
    assert mark.exists() and [e.reason for e in again] == [w[1] for w in want]  # read again
    sync._add_alerts("hot", again)
    assert alerts() == want


def test_every_verb_says_the_cluster_did_not_answer_without_a_traceback(
    jobs: JobManager, cluster: FakeCluster, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """With the API server gone (a kubeconfig at a closed port), what reads the store
    (list, get) shows the stored job; what needs the cluster (logs, top, cancel) ends
    with one `error:` line naming the cause, exit 1, and no traceback; a cancel that
    could not be sent leaves the job as it was, to end as it really ends."""
    gate = tmp_path / "go"
    jobs.submit(spec(["python", "-c", GATED], name="far-away", workers=1,
                     env={"GATE": str(gate)}))  # fmt: skip
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("KUBECONFIG", str(test_backend.write_kubeconfig(
        tmp_path / "gone.yaml", f"http://127.0.0.1:{port}")))  # fmt: skip
    capsys.readouterr()
    for argv in (["list"], ["get", "far-away"]):
        assert cli_main(argv) == 0, argv
        assert "far-away" in capsys.readouterr().out
    for argv in (["logs", "far-away"], ["logs", "far-away", "--all"], ["top", "--backend", "kubernetes"],
                 ["cancel", "far-away"]):  # fmt: skip
        assert cli_main(argv) == 1, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.startswith("error: [kubernetes] "), (argv, err)
        assert "did not answer" in err and "Connection refused" in err, (argv, err)
    # The cancel never reached the job: its row says so, instead of Cancelling for ever.
    assert "was not cancelled" in err
    record = jobs.get("far-away")
    assert record.status in (JobStatus.PENDING, JobStatus.RUNNING), record.status
    assert (
        record.events[-1].reason == "CancelFailed" and "did not answer" in record.events[-1].message
    )
    monkeypatch.undo()  # the fixture's cancel reaches the fake again
    gate.touch()
    assert jobs.wait("far-away", timeout=90).status is JobStatus.SUCCEEDED

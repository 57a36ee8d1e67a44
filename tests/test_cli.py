"""The `workbench` CLI: verbs, -o json, exit codes, and every validation error's message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import main

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "-1"], "error: workers: must be at least 1, got -1"),
        (["--workers", "x"], "error: workers: must be a whole number, got 'x'"),
        (
            ["--image", "pytorchx"],
            "error: image: unknown image 'pytorchx' (use one of cpu, mindspore, mxnet, pytorch, tensorflow",
        ),
        (["--spec", "gpu.3x"], "error: spec: unknown instance spec 'gpu.3x'"),
        (["--env", "1X=2"], "error: env.1X: is not a valid variable name"),
        (["--env", "NOEQUALS"], "error: env: 'NOEQUALS' is not K=V"),
        (["--data", "nodest"], "error: data: malformed mount 'nodest' (write SRC:DST[:ro|rw]"),
        (["--name", "Bad_Name"], "error: name: 'Bad_Name' is not a valid job name"),
        (
            ["--gpus", "4", "--spec", "gpu.2x"],
            "error: gpus: 4 GPUs per worker is more than spec gpu.2x offers (2)",
        ),
        (["--timeout", "later"], "error: timeout: 'later' is not a duration"),
        (["--output", "nourl"], "error: output: 'nourl' is not DST:URL"),
    ],
)
def test_submit_validation_errors(capsys, wb_home, flags, message):
    code, out, err = cli(capsys, "submit", *flags, "--", "python", "train.py")
    assert code == 2
    assert err.strip().startswith(message), err
    assert "Traceback" not in err and out == ""


def test_submit_needs_a_command(capsys, wb_home):
    code, _, err = cli(capsys, "submit", "--workers", "2")
    assert code == 2 and "error: command: is missing" in err


def test_gpu_job_on_a_host_without_gpus(capsys, wb_home):
    code, _, err = cli(capsys, "submit", "--gpus", "1", "--", "python", "-c", "pass")
    assert code == 1
    assert "no NVIDIA driver on this host" in err and "--gpus 0" in err


def test_submit_wait_list_get_logs_json(capsys, wb_home):
    code, out, _ = cli(
        capsys,
        "submit",
        "--name",
        "ok",
        "--workers",
        "2",
        "--workdir",
        str(SCRIPTS),
        "--wait",
        "--env",
        "FAIL_RANK=9",
        "--",
        "python",
        "fail_rank.py",
    )
    assert code == 0, out
    assert "Job ok: Succeeded" in out
    code, out, _ = cli(
        capsys,
        "submit",
        "--name",
        "bad",
        "--workdir",
        str(SCRIPTS),
        "--wait",
        "--env",
        "FAIL_RANK=0",
        "--",
        "python",
        "fail_rank.py",
    )
    assert code == 1 and "Job bad: Failed" in out and "rank 0 exited with code 3" in out
    code, out, _ = cli(capsys, "list")
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "WORKERS", "GPUS(TOTAL)", "AGE", "COST"]
    assert [ln.split()[:3] for ln in lines[1:]] == [
        ["bad", "Failed", "1"],
        ["ok", "Succeeded", "2"],
    ]
    code, out, _ = cli(capsys, "list", "-o", "json", "--status", "Failed")
    assert [j["name"] for j in json.loads(out)] == ["bad"]
    code, out, _ = cli(capsys, "get", "ok", "-o", "json")
    data = json.loads(out)
    assert data["status"] == "Succeeded" and [r["exit_code"] for r in data["ranks"]] == [0, 0]
    assert {"name", "status", "cost", "ranks", "events", "spec", "attempt"} <= set(data)
    # the wire model: local state under details, one name per GPU quantity
    assert {"job_dir", "runtime", "gpus"}.isdisjoint(data) and data["details"]["job_dir"]
    assert (data["gpus_per_worker"], data["gpus_total"], data["reason"]) == (0, 0, "Succeeded")
    code, out, _ = cli(capsys, "get", "bad")
    assert "Status:     Failed  (rank 0 exited with code 3)" in out
    assert "GPUs:       0 per worker, 0 in the job" in out
    assert "GPU DEVICES" in out
    assert "not pulled: workers run as local processes" in out
    assert "RankFailed" in out
    code, out, _ = cli(capsys, "logs", "ok", "--rank", "1")
    assert out.splitlines() == ["rank 1 attempt 1 started", "rank 1 finished"]
    code, out, _ = cli(capsys, "logs", "ok", "-f", "-r", "0", "--tail", "1")
    assert out.splitlines() == ["rank 0 finished"]
    code, out, _ = cli(capsys, "logs", "ok", "-r", "1", "-o", "json")
    assert [json.loads(x) for x in out.splitlines()] == [
        {"job": "ok", "rank": 1, "line": "rank 1 attempt 1 started"},
        {"job": "ok", "rank": 1, "line": "rank 1 finished"},
    ]
    code, out, _ = cli(capsys, "logs", "ok", "--all", "--tail", "1")
    assert out.splitlines() == ["[rank 0] rank 0 finished", "[rank 1] rank 1 finished"]
    code, out, _ = cli(capsys, "logs", "ok", "-a", "-t", "1", "-o", "json")
    assert [json.loads(x) for x in out.splitlines()] == [
        {"job": "ok", "rank": 0, "line": "rank 0 finished"},
        {"job": "ok", "rank": 1, "line": "rank 1 finished"},
    ]
    code, out, err = cli(capsys, "logs", "ok", "--tail", "-1")
    assert code == 2 and err.strip() == "error: tail: got -1 (give a number of lines >= 0)"
    assert out == ""


def test_submit_from_file_with_flag_override(capsys, wb_home, tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(
        f"name: fromfile\ncommand: [python, fail_rank.py]\nworkers: 1\nworkdir: {SCRIPTS}\n"
        "env: {FAIL_RANK: '7'}\n"
    )
    code, out, _ = cli(
        capsys, "submit", "-f", str(f), "--workers", "2", "--wait", "--format", "json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["name"] == "fromfile" and data["workers"] == 2 and data["status"] == "Succeeded"


def test_cancel_get_unknown_and_catalogue(capsys, wb_home):
    code, out, _ = cli(
        capsys, "submit", "--name", "long", "--workdir", str(SCRIPTS), "--", "python", "sleeper.py"
    )
    assert code == 0
    code, out, _ = cli(capsys, "cancel", "long")
    assert code == 0 and out.strip() == "job long: Cancelled"
    code, _, err = cli(capsys, "get", "nosuch")
    assert code == 1 and err.strip() == "error: [local] no job named 'nosuch'"
    code, out, _ = cli(capsys, "images")
    assert "pytorch:2.13 (default)" in out
    code, out, _ = cli(capsys, "specs", "-o", "json")
    assert json.loads(out)["gpu.1x"]["price_per_hour"] > 0
    code, out, _ = cli(capsys, "top")
    assert "GPUs: none - no NVIDIA driver on this host" in out
    code, out, _ = cli(capsys, "top", "-o", "json")
    assert json.loads(out)[0]["gpu_reason"].startswith("no NVIDIA driver")


def test_console_script_runs(wb_home):
    exe = Path(sys.executable).parent / "workbench"
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("workbench ")


def test_json_output_stays_strict_json_with_a_stored_nan(capsys, manager):
    """A record an older version stored with NaN: `-o json` must still parse anywhere."""
    import math

    from workbench.spec import JobRecord, JobStatus

    manager.backend().store.insert(
        JobRecord(
            name="old-nan",
            status=JobStatus.SUCCEEDED,
            backend="local",
            spec={"command": ["true"], "cpu": math.nan, "gpus": math.inf},
            image="x",
        )
    )

    def strict(text: str):
        def refuse(token: str):
            raise ValueError(f"not JSON: {token}")

        return json.loads(text, parse_constant=refuse)

    for verb in (["list"], ["get", "old-nan"]):
        code, out, _ = cli(capsys, *verb, "-o", "json")
        assert code == 0
        data = strict(out)
        job = data[0] if isinstance(data, list) else data
        assert job["spec"]["cpu"] is None and job["spec"]["gpus"] is None


def test_list_status_filter_names_the_valid_states(capsys, manager):
    code, out, err = cli(capsys, "list", "--status", "Bogus")
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: status: unknown status 'Bogus' "
        "(use one of Pending, Running, Cancelling, Succeeded, Failed, Cancelled)"
    )
    code, out, _ = cli(capsys, "list", "--status", "running,PENDING")
    assert code == 0 and out.startswith("No jobs")

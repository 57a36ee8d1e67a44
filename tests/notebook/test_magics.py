"""The %gpu_* magics in a real IPython InteractiveShell against the local backend."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from workbench.api import Job
from workbench.manager import JobManager

from ..conftest import job_processes


@pytest.fixture
def shell(
    manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[InteractiveShell]:
    """An IPython shell with ``%load_ext workbench`` done, working in a temp folder."""
    monkeypatch.chdir(tmp_path)
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "workbench")
    yield sh


@pytest.mark.slow
def test_gpu_train_follows_a_real_two_worker_job(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.time()
    result = shell.run_cell(
        "job = %gpu_train --workers 2 --name mag-ddp "
        "python -m workbench.examples.train_ddp --epochs 1 --steps 5\njob"
    )
    returned = time.time()
    assert result.error_in_exec is None, result.error_in_exec
    job = shell.user_ns["job"]
    assert isinstance(job, Job) and job.name == "mag-ddp" and result.result is job
    record = job.wait(timeout=120)
    # The magic returned at once, long before the job ended (torch's import alone takes a while).
    assert (
        returned - started < 3 and record.finished_at is not None and record.finished_at > returned
    )
    assert record.status.value == "Succeeded", record.message
    assert [r.exit_code for r in record.ranks] == [0, 0]
    capsys.readouterr()

    shell.run_line_magic("gpu_logs", "mag-ddp --rank 0")
    shell.run_line_magic("gpu_logs", "mag-ddp -r 1 --tail 3")
    out = capsys.readouterr().out
    assert "rank 0 step 5/5" in out and re.search(r"rank 0 done .* params [0-9a-f]{16}", out)
    assert re.search(r"rank 1 done .* params [0-9a-f]{16}", out)
    digests = set(re.findall(r"params ([0-9a-f]{16})", out))
    assert len(digests) == 1  # DDP kept both ranks' weights identical
    shell.run_line_magic("gpu_logs", "mag-ddp --all --tail 1")  # every rank, one line each
    last = capsys.readouterr().out.splitlines()
    assert [line.split(" done ")[0] for line in last] == ["[rank 0] rank 0", "[rank 1] rank 1"]

    shell.run_line_magic("gpu_jobs", "")
    table = capsys.readouterr().out
    assert re.search(r"^mag-ddp\s+Succeeded\s+2\s+0\s+\S+\s+\$\d", table, re.M)
    # Outside a widget frontend the Job prints its text form.
    assert repr(job).startswith("Job mag-ddp: Succeeded | 2 worker(s)")
    assert job._repr_mimebundle_() == {"text/plain": repr(job)}


def test_cell_magic_runs_the_body_as_the_script(
    shell: InteractiveShell, manager: JobManager
) -> None:
    shell.run_cell_magic(
        "gpu_train",
        "--workers 2 --name cell-job -- --greeting hi",
        "import os, sys\nprint('body says', sys.argv[1:], 'rank', os.environ['RANK'])\n",
    )
    record = manager.wait("cell-job", timeout=60)
    assert record.status.value == "Succeeded", record.message
    for rank in (0, 1):
        lines = list(manager.logs("cell-job", rank=rank))
        assert lines == [f"body says ['--greeting', 'hi'] rank {rank}"]
    command = record.spec["command"]
    assert command[0] == "python" and Path(command[1]).read_text().startswith("import os, sys")


def test_cancel_magic_stops_every_process(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    job = shell.run_line_magic(
        "gpu_train", "--workers 2 --name mag-long -- python -c 'import time; time.sleep(60)'"
    )
    deadline_record = job.wait(timeout=0.5)
    assert not deadline_record.status.terminal
    shell.run_line_magic("gpu_cancel", "mag-long")
    assert "job mag-long: Cancelled" in capsys.readouterr().out
    assert job.status.value == "Cancelled"
    assert job_processes("mag-long") == []


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ("--workers two train.py", "workers"),
        ("--bogus 1 train.py", "--bogus"),
        ("--workers", "--workers"),
        ("--env NOEQUALS train.py", "env"),
        ("--gpus 1 -- python -c pass", "GPU"),
        ("--framework jax train.py", "--framework"),
        ("--workers 2", "no program"),
        ("--name 'unclosed", "quotes"),
    ],
)
def test_bad_flags_are_a_short_usage_error(shell: InteractiveShell, line: str, names: str) -> None:
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("gpu_train", line)
    message = str(info.value)
    assert names in message
    assert message.startswith("%gpu_train:") and "Traceback" not in message
    assert len(message.splitlines()) <= 2


def test_other_magics_give_usage_errors_not_tracebacks(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="no job named 'nosuch'"):
        shell.run_line_magic("gpu_logs", "nosuch")
    with pytest.raises(UsageError, match="required: name"):
        shell.run_line_magic("gpu_logs", "")
    with pytest.raises(UsageError, match="rank"):
        shell.run_line_magic("gpu_logs", "x --rank one")
    with pytest.raises(UsageError, match="not allowed with"):
        shell.run_line_magic("gpu_logs", "x --all --rank 1")
    with pytest.raises(UsageError, match="no job named"):
        shell.run_line_magic("gpu_cancel", "ghost")
    # In a notebook the same error shows as one line: run_cell reports it, no traceback.
    result = shell.run_cell("%gpu_train --workers two train.py")
    assert isinstance(result.error_in_exec, UsageError)


def test_gpu_top_says_why_there_are_no_gpus(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("gpu_top", "")
    out = capsys.readouterr().out
    assert out.startswith("Host ") and "GPU" in out and "Active jobs: 0" in out


def test_api_and_text_display_need_no_ipython_or_ipywidgets(
    manager: JobManager, tmp_path: Path
) -> None:
    import subprocess
    import sys

    code = (
        "import sys, workbench\n"
        "job = workbench.submit(['python', '-c', 'pass'], name='plain', wait=True)\n"
        "bundle = job._repr_mimebundle_()\n"
        "print(sorted(bundle), bundle['text/plain'].split('|')[0].strip())\n"
        "print([m for m in ('IPython', 'ipywidgets', 'traitlets') if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    assert out == ["['text/plain'] Job plain: Succeeded", "[]"]


def test_gpu_monitor_magic_says_plainly_there_is_no_gpu(shell: InteractiveShell) -> None:
    widget = shell.run_line_magic("gpu_monitor", "")
    try:
        assert "no NVIDIA driver on this host" in widget.header.value
    finally:
        widget.close()
    with pytest.raises(UsageError, match="gpu_monitor"):
        shell.run_line_magic("gpu_monitor", "--bogus")

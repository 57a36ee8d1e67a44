"""Issue 16: the magics, the Job handle and the widget as a data scientist meets them, driven
in a real kernel over jupyter_client (one regression test per item)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from workbench.manager import JobManager

from ..conftest import wait_for
from ._kernel import Kernel, Reply

SLEEPER = "python -c 'import time; time.sleep(120)'"


def _one_line_error(reply: Reply, *fragments: str) -> str:
    """The cell failed with one line, ``UsageError: ...``, that holds every fragment."""
    # (IPython reports some UsageErrors with status "ok": the one line is what the user sees.)
    assert not reply.traceback and not reply.results, reply.text
    message = reply.stderr.strip()
    assert message.startswith("UsageError: ") and "\n" not in message, reply.text
    for fragment in fragments:
        assert fragment in message, message
    return message


# ---- progress bars in the widget ------------------------------------------------------------
TQDM_JOB = """
import sys, time
from tqdm import tqdm
print("\\x1b[31mred text\\x1b[0m and \\x1b[1mbold\\x1b[0m", flush=True)
for _ in tqdm(range(80), file=sys.stdout, mininterval=0, ncols=60):
    time.sleep(0.01)
print("done", flush=True)
"""


def test_widget_shows_the_newest_state_of_a_tqdm_bar_without_colour_codes(
    kernel: Kernel, tmp_path: Path
) -> None:
    (tmp_path / "nb" / "tq.py").write_text(TQDM_JOB)
    reply = kernel.run("job = %gpu_train --name tq tq.py\njob")
    assert reply.status == "ok", reply.text
    reply = kernel.run(
        "job.wait(timeout=60)\nw = job._widget\n"
        "import time\nwhile w.polling: time.sleep(0.05)\nprint(repr(w.logs.value))"
    )
    view = reply.stdout
    assert reply.status == "ok" and "Succeeded" in kernel.value("job.status.value"), reply.text
    # The bar's last state, not its first 300 characters ("6/80 8%" before the fix).
    assert "80/80" in view and "100%" in view and "6/80" not in view, view
    assert "red text and bold" in view and "\\x1b" not in view and "[31m" not in view, view


def test_a_huge_progress_log_costs_the_widget_what_it_shows(kernel: Kernel, tmp_path: Path) -> None:
    # A 2 GiB log (sparse: the job grows its own log file, which the supervisor's copier
    # appends to), then a progress bar drawn with '\r' and no newline. Each widget poll
    # reads a bounded tail, not the file.
    (tmp_path / "nb" / "big.py").write_text(
        textwrap.dedent(
            """
            import os, sys, time
            log = os.path.join(os.environ["WORKBENCH_JOB_DIR"], "logs", "rank-0.log")
            os.truncate(log, 2 * 2**30)
            for i in range(1, 101):
                os.write(1, f"\\rstep {i}/100".encode())
            time.sleep(120)
            """
        )
    )
    reply = kernel.run("job = %gpu_train --name big big.py\njob")
    assert reply.status == "ok", reply.text
    reply = kernel.run(
        "import time\nw = job._widget\n"
        "while 'step 100/100' not in w.logs.value: time.sleep(0.1)\n"
        "t = time.perf_counter(); w.refresh(); print(time.perf_counter() - t)\n"
        "print(repr(w.logs.value))",
        timeout=120,
    )
    assert reply.status == "ok", reply.text
    seconds = float(reply.stdout.splitlines()[0])
    assert seconds < 0.5, seconds  # reading the 2 GiB took seconds before the fix
    assert "step 100/100" in reply.stdout and "step 99/100" not in reply.stdout
    assert kernel.run("job.cancel()").status == "ok"


# ---- races and interrupts -------------------------------------------------------------------
def test_two_kernels_racing_for_one_name_get_only_clean_outcomes(
    manager: JobManager, tmp_path: Path, kernel_env: dict[str, str]
) -> None:
    folder = tmp_path / "nb"
    folder.mkdir()
    kernels = [Kernel(folder, env=kernel_env) for _ in range(2)]
    try:
        for k in kernels:
            assert k.run("%load_ext workbench\nimport os").status == "ok"
        outcomes: list[str] = []
        for i in range(20):
            home = tmp_path / f"race-home-{i}"  # a fresh store each round, made by the race
            for k in kernels:
                assert k.run(f"os.environ['WORKBENCH_HOME'] = {str(home)!r}").status == "ok"
            cell = f"%%gpu_train --name race-{i}\nprint('round {i}')\n"
            ids = [k.send(cell) for k in kernels]  # both at the same instant
            replies = [k.collect(m, timeout=120) for k, m in zip(kernels, ids, strict=True)]
            won = [r for r in replies if r.status == "ok"]
            lost = [r for r in replies if r.status != "ok"]
            assert len(won) == 1 and len(lost) == 1, [r.text for r in replies]
            _one_line_error(lost[0], f"'race-{i}' already exists")
            assert f"Job race-{i}" in won[0].text, won[0].text
            outcomes.append("clean")
        assert outcomes == ["clean"] * 20
    finally:
        for k in kernels:
            k.run("import workbench\n[j.cancel() for j in workbench.jobs(['Pending', 'Running'])]")
            k.stop()


def test_interrupting_wait_keeps_the_handle_and_says_one_line(
    kernel: Kernel, manager: JobManager
) -> None:
    msg = kernel.send(f"job = %gpu_train --wait --name waited {SLEEPER}")
    wait_for(lambda: _status(manager, "waited") == "Running", timeout=60, what="job running")
    time.sleep(0.3)  # let the kernel enter its wait loop
    kernel.interrupt()
    reply = kernel.collect(msg, timeout=30)
    assert reply.status == "ok" and "KeyboardInterrupt" not in reply.text, reply.text
    assert reply.stdout.strip().count("\n") == 0 and "goes on" in reply.stdout, reply.stdout
    assert kernel.value("job.name") == "waited"
    assert manager.get("waited").status.value == "Running"  # the wait stopped, not the job


def _status(manager: JobManager, name: str) -> str | None:
    try:
        return manager.get(name).status.value
    except Exception:
        return None


# ---- checks at submit -----------------------------------------------------------------------
@pytest.mark.parametrize("line", ["missing.py", "python missing.py", "python -u missing.py"])
def test_a_missing_script_is_refused_at_submit(
    kernel: Kernel, manager: JobManager, line: str
) -> None:
    reply = kernel.run(f"%gpu_train --name miss {line}")
    _one_line_error(reply, "command", "missing.py", "does not exist")
    assert manager.list() == []  # nothing submitted, nothing half-made


def test_the_cli_refuses_a_missing_script_too(manager: JobManager, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "submit", "--", "python", "missing.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc
    assert "missing.py" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert manager.list() == []


def test_a_cell_job_imports_from_the_notebook_folder(
    kernel: Kernel, manager: JobManager, tmp_path: Path
) -> None:
    (tmp_path / "nb" / "helper.py").write_text("ANSWER = 42\n")
    reply = kernel.run(
        "%%gpu_train --name imports\nimport helper\nprint('answer', helper.ANSWER)\n"
    )
    assert reply.status == "ok", reply.text
    record = manager.wait("imports", timeout=60)
    assert record.status.value == "Succeeded", list(manager.logs("imports"))
    assert "answer 42" in list(manager.logs("imports"))


def test_a_cell_job_is_named_after_the_notebook_and_cell(
    manager: JobManager, tmp_path: Path, kernel_env: dict[str, str]
) -> None:
    folder = tmp_path / "nb"
    folder.mkdir()
    env = {**kernel_env, "JPY_SESSION_NAME": str(folder / "My Analysis.ipynb")}
    k = Kernel(folder, env=env)
    try:
        assert k.run("%load_ext workbench").status == "ok"
        reply = k.run("%%gpu_train\nprint('hi')\n")  # In [2]
        assert reply.status == "ok", reply.text
        (record,) = [r for r in manager.list()]
        assert record.name.startswith("my-analysis-cell2-"), record.name
    finally:
        k.stop()


# ---- what the widget and the magics show ----------------------------------------------------
GRADS_JOB = """
from workbench import run
for step in range(1, 6):
    run.log(step=step, **{f"grad_norm_{i:03d}": step * i for i in range(300)}, loss=1.0 / step)
"""


def test_chart_draws_loss_among_300_series_and_says_how_many_are_hidden(
    kernel: Kernel, tmp_path: Path
) -> None:
    (tmp_path / "nb" / "grads.py").write_text(GRADS_JOB)
    assert kernel.run("job = %gpu_train --name grads grads.py\njob").status == "ok"
    reply = kernel.run(
        "job.wait(timeout=60)\nw = job._widget\n"
        "import time\nwhile w.polling: time.sleep(0.05)\nprint(repr(w.chart.value))"
    )
    assert reply.status == "ok", reply.text
    chart = reply.stdout
    assert 'data-chart="loss"' in chart and chart.count("data-chart=") == 1, chart[:500]
    assert 'data-hidden-series="300"' in chart, chart[-400:]
    assert kernel.value("sorted(w.series_picker.value)") == ["loss"]
    reply = kernel.run("w.show_series(['grad_norm_007', 'loss'])\nprint(repr(w.chart.value))")
    assert (
        'data-chart="grad_norm_007"' in reply.stdout and 'data-hidden-series="299"' in reply.stdout
    )


def test_print_and_repr_of_a_handle_are_current(kernel: Kernel, manager: JobManager) -> None:
    assert kernel.run(f"job = %gpu_train --name fresh {SLEEPER}").status == "ok"
    manager.cancel("fresh", wait=30)
    reply = kernel.run("print(job)\nprint(repr(job))")
    assert reply.stdout.count("Job fresh: Cancelled") == 2, reply.stdout


def test_cancel_goes_on_past_an_unknown_name_and_says_when_nothing_was_cancelled(
    kernel: Kernel, manager: JobManager
) -> None:
    assert kernel.run(f"%gpu_train --name keep {SLEEPER}").status == "ok"
    assert kernel.run("%gpu_train --name quick python -c pass").status == "ok"
    manager.wait("quick", timeout=60)
    reply = kernel.run("%gpu_cancel nosuch keep quick")
    _one_line_error(reply, "nosuch")
    assert "job keep: " in reply.stdout and manager.wait("keep", timeout=30).status.value == (
        "Cancelled"
    )
    assert "job quick: already Succeeded; nothing to cancel" in reply.stdout, reply.stdout


def test_jobs_status_filter_names_the_valid_states_and_hints_the_magic(kernel: Kernel) -> None:
    reply = kernel.run("%gpu_jobs --status Bogus")
    _one_line_error(reply, "Bogus", "Pending", "Running", "Succeeded", "Failed", "Cancelled")
    reply = kernel.run("%gpu_jobs --status running")
    assert reply.status == "ok" and "No jobs in status Running" in reply.stdout, reply.text
    assert "%gpu_train" in reply.stdout and "workbench submit" not in reply.stdout


def test_logs_magic_has_a_default_tail_and_refuses_a_negative_one(
    kernel: Kernel, manager: JobManager
) -> None:
    code = "for i in range(5000): print('line', i)"
    assert kernel.run(f'%gpu_train --name chatty python -c "{code}"').status == "ok"
    manager.wait("chatty", timeout=60)
    reply = kernel.run("%gpu_logs chatty")
    lines = reply.stdout.splitlines()
    assert len(lines) == 201 and lines[0] == "line 4800" and lines[-2] == "line 4999", lines[:3]
    assert "--tail N for more" in lines[-1]
    assert len(kernel.run("%gpu_logs chatty --tail 7").stdout.splitlines()) == 7
    _one_line_error(kernel.run("%gpu_logs chatty --tail -3"), "tail", "-3")


def test_handles_delete_and_display_logs_and_records_briefly(
    kernel: Kernel, manager: JobManager
) -> None:
    assert kernel.run("job = %gpu_train --name twice python -c \"print('hello')\"").status == "ok"
    assert kernel.run("r = job.wait(timeout=60)").status == "ok"
    reply = kernel.run("job.logs()")
    assert reply.results[0]["text/plain"] == "hello", reply.results
    reply = kernel.run("job.wait()")
    text = reply.results[0]["text/plain"]
    assert text.startswith("JobRecord(name='twice', status=Succeeded") and len(text) < 200, text
    # Re-running the named cell: the hint is the magic, which exists.
    reply = kernel.run("%gpu_train --name twice python -c pass")
    _one_line_error(reply, "already exists", "`%gpu_delete twice`")
    assert kernel.run("%gpu_delete twice").stdout.strip() == "job twice: deleted"
    assert kernel.run("%gpu_train --name twice python -c pass").status == "ok"
    manager.wait("twice", timeout=60)
    assert kernel.run("job.delete()").status == "ok" and manager.list() == []


def test_a_local_job_costs_what_this_host_is_configured_to_cost(
    kernel: Kernel, manager: JobManager, tmp_path: Path
) -> None:
    assert kernel.run("job = %gpu_train --name free python -c pass").status == "ok"
    assert kernel.value("job.record.price_per_hour") == 0.0
    home = tmp_path / "priced-home"
    reply = kernel.run(
        f"import os\nos.environ['WORKBENCH_HOME'] = {str(home)!r}\n"
        "os.environ['WORKBENCH_LOCAL_PRICE'] = '0.5'\n"
        "job2 = %gpu_train --name priced python -c pass"
    )
    assert reply.status == "ok", reply.text
    assert kernel.value("job2.record.price_per_hour") == 0.5
    kernel.run("job2.wait(timeout=60)")


RAISER = """
import os, time
from pathlib import Path
go = Path(os.environ["GO_FILE"])
while not go.exists():
    time.sleep(0.02)
raise RuntimeError(f"rank {os.environ['RANK']} fails")
"""


def test_ranks_failing_together_are_both_failed(
    kernel: Kernel, manager: JobManager, tmp_path: Path
) -> None:
    (tmp_path / "nb" / "raiser.py").write_text(RAISER)
    go = tmp_path / "go"
    reply = kernel.run(f"job = %gpu_train --workers 2 --name together -e GO_FILE={go} raiser.py")
    assert reply.status == "ok", reply.text
    wait_for(
        lambda: (
            all(r.pid for r in manager.get("together").ranks)
            and len(manager.get("together").ranks) == 2
        ),
        timeout=60,
        what="both ranks started",
    )
    pid = manager.backend().store.row("together")["details"]["supervisor_pid"]  # type: ignore[attr-defined]
    pids = [r.pid for r in manager.get("together").ranks]
    # Hold the supervisor so both ranks have ended before it looks: they failed together.
    os.kill(pid, signal.SIGSTOP)
    try:
        go.touch()
        wait_for(
            lambda: all(psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in pids),
            timeout=30,
            what="both ranks exited",
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    record = manager.wait("together", timeout=60)
    assert record.status.value == "Failed"
    assert [(r.state.value, r.exit_code) for r in record.ranks] == [("Failed", 1), ("Failed", 1)]
    assert "0:Failed(1), 1:Failed(1)" in kernel.run("print(repr(job))").stdout


def test_a_saved_notebook_shows_how_the_job_ended(
    manager: JobManager, tmp_path: Path, kernel_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat
    from nbclient import NotebookClient

    for var, value in kernel_env.items():
        monkeypatch.setenv(var, value)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext workbench"),
        nbformat.v4.new_code_cell(
            "job = %gpu_train --name saved python -c 'import time; time.sleep(1)'\njob"
        ),
        nbformat.v4.new_code_cell(
            "import time\njob.wait(timeout=60)\nwhile job._widget.polling: time.sleep(0.05)"
        ),
    ]
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    (shown,) = nb.cells[1].outputs
    # The first snapshot said Pending/Running; the saved text is the end state, beside the widget.
    assert shown["data"]["text/plain"].startswith("Job saved: Succeeded"), shown
    assert "application/vnd.jupyter.widget-view+json" in shown["data"]


def test_cell_scripts_written_at_once_by_many_writers_all_succeed(tmp_path: Path) -> None:
    # The race test's kernels rarely collide in the few microseconds that matter; threads
    # writing the same cells at once do (one shared .tmp per cell lost the rename before).
    import threading

    from workbench.magics import cell_script

    errors: list[BaseException] = []
    for i in range(100):
        body = f"print({i})\n"
        barrier = threading.Barrier(4)

        def write(body: str = body, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                assert cell_script(body, tmp_path).read_text() == body
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=write) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert not list((tmp_path / "cells").glob("*.tmp"))

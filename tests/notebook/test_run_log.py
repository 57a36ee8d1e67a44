"""workbench.run.log: no-op outside a job; inside, whole framed lines in the rank's output
stream (never torn by other writers), rank filter, merge, and never a broken training."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from workbench.monitor.stream import METRIC_PREFIX, MetricByteSplitter, split_metric_lines


def _env(env: dict[str, str]) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("WORKBENCH_", "RANK"))}
    full.update(env)
    return full


def _run(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (run.py reads its env once per process)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=_env(env), cwd=cwd, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip


def _records(stdout: str) -> list[dict]:
    """The scalar records a rank framed into its output (as the log copier sees them)."""
    _, records = split_metric_lines(stdout.splitlines())
    assert all(r.pop("kind") == "scalars" for r in records)
    return records


JOB = {"WORKBENCH_JOB_NAME": "j", "WORKBENCH_RANK": "0"}


def test_outside_a_job_is_a_noop(tmp_path: Path) -> None:
    out = _run(
        """
        import os
        from workbench import run
        for i in range(1000):
            run.log(step=i, total=1000, loss=0.5)
        run.flush()
        print(run.enabled(), sorted(os.listdir('.')))
        """,
        {},
        tmp_path,
    )
    assert out.stdout == "False []\n"  # nothing framed into the output either


def test_inside_every_record_is_a_whole_framed_line_in_the_output(tmp_path: Path) -> None:
    out = _run(
        """
        import math
        from workbench import run
        for i in range(1, 501):
            run.log(step=i, total=500, loss=1.0 / i, acc=i / 500)
        run.log(step=501, note="text", bad=math.nan, flag=True, kind="mine")
        """,
        {**JOB, "WORKBENCH_RUN_INTERVAL": "0"},
        tmp_path,
    )  # no explicit flush: the exit handler writes the rest
    assert out.stdout.endswith("\n")
    assert all(line.startswith(METRIC_PREFIX) for line in out.stdout.splitlines())
    records = _records(out.stdout)
    assert len(records) == 501
    assert [r["step"] for r in records] == list(range(1, 502))
    assert records[9] == {"time": records[9]["time"], "rank": 0, "step": 10, "total": 500,
                          "loss": 0.1, "acc": 0.02}  # fmt: skip
    assert set(records[0]) == {"time", "rank", "step", "total", "loss", "acc"}
    assert (
        records[-1]["note"] == "text" and records[-1]["bad"] is None and records[-1]["flag"] is True
    )
    assert "kind" not in records[-1]  # the frame's own key: a scalar of that name is dropped
    assert not list(tmp_path.iterdir())  # nothing written beside the stream


def test_records_stay_whole_among_other_writers_on_the_same_pipe(tmp_path: Path) -> None:
    # A thread prints partial lines byte by byte while records flush in big batches: on a
    # pipe each write of whole lines up to PIPE_BUF is atomic, so no user byte lands inside
    # a record, and a record glued after a partial user line is split off whole.
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(
            """
            import os, threading
            from workbench import run
            def chatter():
                for i in range(3000):
                    os.write(1, b"u%d" % i)
                    os.write(1, b".\\n" if i % 7 == 0 else b" ")
            t = threading.Thread(target=chatter)
            t.start()
            for i in range(20000):
                run.log(step=i, loss=float(i), rank=None, padding="x" * 40)
                if i % 2000 == 0:
                    run.flush()
            t.join()
            run.flush()
            os.write(1, b"\\n")
            """)],
        env=_env({**JOB, "WORKBENCH_RUN_INTERVAL": "0"}), cwd=tmp_path, capture_output=True,
        timeout=120, check=True,
    )  # fmt: skip
    splitter = MetricByteSplitter()
    user, records = splitter.split(out.stdout)
    user += splitter.close()
    assert [r["step"] for r in records] == list(range(20000))
    words = user.replace(b".\n", b" ").split()
    assert words == [b"u%d" % i for i in range(3000)]  # every user byte, in order


def test_a_broken_output_never_breaks_training(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from workbench import run
        for i in range(5000):
            run.log(step=i, loss=1.0, rank=None)
            if i % 500 == 0:
                run.flush()
        run.flush()
        sys.stderr.write("trained\\n")
        """
    )
    # Nobody reads the pipe any more (the copier died): writes fail with EPIPE, quietly.
    p = subprocess.Popen([sys.executable, "-c", code], env=_env({**JOB, "WORKBENCH_RUN_INTERVAL": "0"}),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)  # fmt: skip
    assert p.stdout is not None
    p.stdout.close()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0 and err.decode().strip() == "trained", err
    # No stdout at all (fd 1 closed): calls are no-ops.
    closed = subprocess.run([sys.executable, "-c", code], env=_env(JOB), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=tmp_path, timeout=60,
                            preexec_fn=lambda: os.close(1))  # fmt: skip
    assert closed.returncode == 0 and closed.stderr.decode().strip() == "trained"


def test_rank_filter_rank_zero_by_default(tmp_path: Path) -> None:
    code = """
        from workbench import run
        for i in range(1, 21):
            run.log(step=i, loss=float(i))               # rank 0 only (the default)
            run.log(step=i, rank=None, mine=float(i))    # every rank
            run.log(step=i, rank=1, only_one=float(i))   # rank 1 only
        """
    env = {"WORKBENCH_JOB_DIR": str(tmp_path / "job"), "WORKBENCH_RUN_INTERVAL": "0"}
    r0 = _records(_run(code, {**env, "WORKBENCH_RANK": "0"}, tmp_path).stdout)
    r1 = _records(_run(code, {**env, "WORKBENCH_RANK": "1"}, tmp_path).stdout)
    # Calls at the same step within a slot merge; interval 0 keeps each call apart.
    assert {k for r in r0 for k in r} == {"time", "rank", "step", "total", "loss", "mine"}
    assert {k for r in r1 for k in r} == {"time", "rank", "step", "total", "mine", "only_one"}
    assert {r["rank"] for r in r0} == {0} and {r["rank"] for r in r1} == {1}
    assert len(r0) == 40 and len(r1) == 40


def test_default_interval_keeps_the_latest_per_slot_and_merges_a_step(tmp_path: Path) -> None:
    out = _run(
        """
        import time
        from workbench import run
        for i in range(1, 100001):
            run.log(step=i, total=100000, loss=1.0 / i)
        run.log(step=100000, acc=0.99)   # same step, same slot: merged into one record
        time.sleep(1.5)                  # the flusher thread writes within a second
        print("slept", flush=True)
        """,
        JOB,
        tmp_path,
    )
    before_exit = out.stdout.split("slept\n")[0]
    records = _records(before_exit)
    assert 1 <= len(records) < 100000  # thinned to one record per 20 ms slot
    steps = [r["step"] for r in records]
    assert steps == sorted(steps)
    assert (
        records[-1]["step"] == 100000
        and records[-1]["acc"] == 0.99
        and records[-1]["loss"] == 1e-05
    )


def test_flusher_writes_a_quiet_scripts_record_without_exit(tmp_path: Path) -> None:
    code = (
        "from workbench import run; import time; run.log(step=1, total=2, loss=0.5); time.sleep(60)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], env=_env(JOB), stdout=subprocess.PIPE,
                         cwd=tmp_path)  # fmt: skip
    try:
        assert p.stdout is not None
        started = time.monotonic()
        line = p.stdout.readline().decode()  # arrives while the script still sleeps
        assert time.monotonic() - started < 10
        assert p.poll() is None
        assert _records(line)[0]["loss"] == 0.5
    finally:
        p.kill()
        p.wait()


def test_import_is_cheap_and_light(tmp_path: Path) -> None:
    out = _run(
        """
        import sys
        from workbench import run
        heavy = [m for m in ("workbench.api", "workbench.manager", "yaml", "IPython", "ipywidgets")
                 if m in sys.modules]
        print(heavy)
        """,
        {},
        tmp_path,
    )
    assert out.stdout.strip() == "[]"

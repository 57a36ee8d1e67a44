"""workbench.run.log: no-op outside a job; inside, whole JSON lines, rank filter, merge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from workbench.monitor.metrics import read_job_metrics


def _run(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (run.py reads its env once per process)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("WORKBENCH_", "RANK"))}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full, cwd=cwd, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip


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
    assert out.stdout.strip() == "False []"


def test_inside_every_record_is_a_whole_json_line(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    _run(
        """
        import math
        from workbench import run
        for i in range(1, 501):
            run.log(step=i, total=500, loss=1.0 / i, acc=i / 500)
        run.log(step=501, note="text", bad=math.nan, flag=True)
        """,
        {"WORKBENCH_JOB_DIR": str(job_dir), "WORKBENCH_RANK": "0", "WORKBENCH_RUN_INTERVAL": "0"},
        tmp_path,
    )  # no explicit flush: the exit handler writes the rest
    raw = (job_dir / "metrics" / "scalars-rank0.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    records = [json.loads(line) for line in raw.splitlines()]
    assert len(records) == 501
    assert [r["step"] for r in records] == list(range(1, 502))
    assert records[9] == {
        **records[9],
        "rank": 0,
        "step": 10,
        "total": 500,
        "loss": 0.1,
        "acc": 0.02,
    }
    assert set(records[0]) == {"time", "rank", "step", "total", "loss", "acc"}
    assert (
        records[-1]["note"] == "text" and records[-1]["bad"] is None and records[-1]["flag"] is True
    )
    # The reader every surface uses sees the same records.
    assert [r["step"] for r in read_job_metrics(job_dir)["scalars"]] == list(range(1, 502))


def test_rank_filter_rank_zero_by_default(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    code = """
        from workbench import run
        for i in range(1, 21):
            run.log(step=i, loss=float(i))               # rank 0 only (the default)
            run.log(step=i, rank=None, mine=float(i))    # every rank
            run.log(step=i, rank=1, only_one=float(i))   # rank 1 only
        """
    env = {"WORKBENCH_JOB_DIR": str(job_dir), "WORKBENCH_RUN_INTERVAL": "0"}
    _run(code, {**env, "WORKBENCH_RANK": "0"}, tmp_path)
    _run(code, {**env, "WORKBENCH_RANK": "1"}, tmp_path)
    r0 = [
        json.loads(x)
        for x in (job_dir / "metrics" / "scalars-rank0.jsonl").read_text().splitlines()
    ]
    r1 = [
        json.loads(x)
        for x in (job_dir / "metrics" / "scalars-rank1.jsonl").read_text().splitlines()
    ]
    # Calls at the same step within a slot merge; interval 0 keeps each call apart.
    assert {k for r in r0 for k in r} == {"time", "rank", "step", "total", "loss", "mine"}
    assert {k for r in r1 for k in r} == {"time", "rank", "step", "total", "mine", "only_one"}
    assert {r["rank"] for r in r0} == {0} and {r["rank"] for r in r1} == {1}
    assert len(r0) == 40 and len(r1) == 40


def test_default_interval_keeps_the_latest_per_slot_and_merges_a_step(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    _run(
        """
        import time
        from workbench import run
        for i in range(1, 100001):
            run.log(step=i, total=100000, loss=1.0 / i)
        run.log(step=100000, acc=0.99)   # same step, same slot: merged into one record
        time.sleep(1.5)                  # the flusher thread writes within a second
        import os
        print(os.path.getsize(os.environ["WORKBENCH_JOB_DIR"] + "/metrics/scalars-rank0.jsonl") > 0)
        """,
        {"WORKBENCH_JOB_DIR": str(job_dir), "WORKBENCH_RANK": "0"},
        tmp_path,
    )
    records = [
        json.loads(x)
        for x in (job_dir / "metrics" / "scalars-rank0.jsonl").read_text().splitlines()
    ]
    assert 1 <= len(records) < 100000  # thinned to one record per 20 ms slot
    steps = [r["step"] for r in records]
    assert steps == sorted(steps)
    assert (
        records[-1]["step"] == 100000
        and records[-1]["acc"] == 0.99
        and records[-1]["loss"] == 1e-05
    )


def test_flusher_writes_a_quiet_scripts_record_without_exit(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    out = _run(
        """
        import os, time
        from workbench import run
        run.log(step=1, total=2, loss=0.5)
        path = os.environ["WORKBENCH_JOB_DIR"] + "/metrics/scalars-rank0.jsonl"
        deadline = time.time() + 5
        while time.time() < deadline and not (os.path.exists(path) and os.path.getsize(path)):
            time.sleep(0.05)
        print(open(path).read().count("\\n"))
        """,
        {"WORKBENCH_JOB_DIR": str(job_dir), "WORKBENCH_RANK": "0"},
        tmp_path,
    )
    assert out.stdout.strip() == "1"


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

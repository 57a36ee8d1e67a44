"""The in-container agent wraps a real child: exit codes, signals, and metrics in the stream."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from workbench.monitor import METRIC_PREFIX, format_metric_line, split_metric_lines
from workbench.monitor.stream import filter_metric_lines

AGENT = [sys.executable, "-m", "workbench.monitor.agent"]


def agent(args, env=None, timeout=30):
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_exit_code_and_output_are_forwarded():
    p = agent(
        [
            "--",
            sys.executable,
            "-c",
            "import sys; print('hello'); print('err', file=sys.stderr); sys.exit(3)",
        ]
    )
    assert p.returncode == 3
    user, _ = split_metric_lines(p.stdout.splitlines())
    assert user == ["hello"]
    assert p.stderr.strip() == "err"  # the child's stderr is its own, untouched


def test_the_old_module_path_still_runs_the_agent():
    # Images labelled org.workbench.agent="python -m workbench.agent" (before the agent moved
    # to workbench.monitor) run that label as each rank's command.
    p = subprocess.run(
        [sys.executable, "-m", "workbench.agent", "--", sys.executable, "-c", "raise SystemExit(4)"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert p.returncode == 4, p.stderr
    _, records = split_metric_lines(p.stdout.splitlines())
    assert [r["kind"] for r in records] == ["monitor"]  # it ran under the agent


def test_a_missing_program_is_said_plainly():
    p = agent(["--", "no-such-program-xyz"])
    assert p.returncode == 127 and "cannot start 'no-such-program-xyz'" in p.stderr
    assert agent([]).returncode == 2


CHILD_TRAPS_TERM = """
import signal, sys, time
def bye(signum, frame):
    print("child got", signal.Signals(signum).name, flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, bye)
signal.signal(signal.SIGINT, bye)
print("ready", flush=True)
time.sleep(60)
"""


def _start_and_wait_ready(code: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [*AGENT, "--", sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    for line in p.stdout:
        if line.strip() == "ready":
            return p
    raise AssertionError("child never became ready")


def test_sigterm_and_sigint_are_forwarded_to_the_child():
    for sig in (signal.SIGTERM, signal.SIGINT):
        p = _start_and_wait_ready(CHILD_TRAPS_TERM)
        p.send_signal(sig)
        out, _ = p.communicate(timeout=20)
        assert p.returncode == 7
        assert f"child got {sig.name}" in out


def test_a_child_killed_by_a_signal_exits_128_plus_n():
    p = _start_and_wait_ready("import time; print('ready', flush=True); time.sleep(60)")
    started = time.time()
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=20)
    assert p.returncode == 128 + signal.SIGTERM
    assert time.time() - started < 10


MIXED_CHILD = r"""
import sys, time
lines = []
for i in range(12):
    sys.stdout.write(f"step {i} loss=")       # half a line ...
    sys.stdout.flush()
    time.sleep(0.05)
    sys.stdout.write(f"{1.0 / (i + 1):.4f} \x1e tab\there\n")  # ... finished later
    sys.stdout.flush()
print("unicode: héllo ✓", flush=True)
"""


def test_metric_records_come_back_out_of_a_mixed_stream_intact(fake_env):
    env = fake_env({"step_seconds": 0.2, "gpus": [
        {"name": "NVIDIA A100-SXM4-80GB", "steps": [{"utilization": 91, "temperature": 60},
                                                    {"utilization": 93, "temperature": 90}]},
        {"steps": [{"utilization": 10}]},
    ]})  # fmt: skip
    env["WORKBENCH_RANK"] = "1"
    p = agent(
        ["--interval", "0.05", "--emit-interval", "0.1", "--", sys.executable, "-c", MIXED_CHILD],
        env=env,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split("\n")[:-1]  # the user's own text has \x1e, which splitlines() splits at
    user, records = split_metric_lines(lines)
    expected = [f"step {i} loss={1.0 / (i + 1):.4f} \x1e tab\there" for i in range(12)]
    assert user == [*expected, "unicode: héllo ✓"]
    gpu = [r for r in records if r["kind"] == "gpu"]
    assert len(gpu) >= 3 and all(r["rank"] == 1 and r["v"] == 1 for r in gpu)
    assert [s["index"] for s in gpu[0]["samples"]] == [0, 1]
    assert gpu[0]["samples"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert {s["samples"][0]["utilization"] for s in gpu} <= {91.0, 93.0}
    alerts = [r for r in records if r["kind"] == "alert"]
    assert [(a["alert"]["kind"], a["active"]) for a in alerts] == [("temperature", True)]
    # Every record line starts a line: none was spliced into a user line.
    assert all(line.startswith(METRIC_PREFIX) for line in lines if METRIC_PREFIX in line)
    # str.splitlines (which also breaks at \x1c-\x1e) keeps the records whole.
    assert split_metric_lines(p.stdout.splitlines())[1] == records


def test_only_the_visible_gpus_are_sampled(fake_env):
    env = fake_env({"gpus": [{}, {}, {}]})
    env["CUDA_VISIBLE_DEVICES"] = "2,0"
    p = agent(["--interval", "0.05", "--", sys.executable, "-c", "print('x')"], env=env)
    _, records = split_metric_lines(p.stdout.splitlines())
    assert sorted(s["index"] for s in records[-1]["samples"]) == [0, 2]
    env["CUDA_VISIBLE_DEVICES"] = ""
    p = agent(["--", sys.executable, "-c", "print('x')"], env=env)
    user, records = split_metric_lines(p.stdout.splitlines())
    assert (
        user == ["x"]
        and records[0]["kind"] == "monitor"
        and "no GPUs are visible" in records[0]["reason"]
    )


def test_the_parser_never_takes_user_lines():
    good = format_metric_line({"kind": "gpu", "samples": [], "note": "a\nb"})
    assert good.count("\n") == 1
    lines = [
        "plain",
        good.rstrip("\n"),
        METRIC_PREFIX + "{not json",  # torn: stays the user's
        METRIC_PREFIX + "[1, 2]",  # not a record
        "say " + good.rstrip("\n"),  # glued after a partial user line: both kept
        "2026-01-02T03:04:05.123456789Z " + good.rstrip("\n"),  # kubectl logs --timestamps
        "",
    ]
    user, records = split_metric_lines(lines)
    assert user == ["plain", lines[2], lines[3], "say ", ""]
    assert records == [{"kind": "gpu", "samples": [], "note": "a\nb"}] * 3
    got: list[dict] = []
    assert list(filter_metric_lines(iter(lines), got.append)) == user and len(got) == 3


def test_byte_splitter_passes_user_bytes_at_once_and_keeps_records_whole():
    from workbench.monitor.stream import MetricByteSplitter, format_metric_line

    record = {"kind": "gpu", "rank": 1, "samples": [{"index": 0, "utilization": 97.0}]}
    stream = (
        b"epoch 1 loss=0.5\n"
        + format_metric_line(record).encode()
        + b"progress 50%\r"
        + "progress 100% \u2713\n".encode()
        + b"\x1f@wb-not-a-record\n"
        + format_metric_line({**record, "rank": 2}).encode()
        + b"tail without newline"
    )
    for size in (1, 2, 3, 7, 64, len(stream)):  # every way the pipe may cut it
        got: list[dict] = []
        splitter = MetricByteSplitter(got.append)
        out = b"".join(splitter.feed(stream[i : i + size]) for i in range(0, len(stream), size))
        out += splitter.close()
        assert out.decode() == (
            "epoch 1 loss=0.5\nprogress 50%\rprogress 100% \u2713\n\x1f@wb-not-a-record\n"
            "tail without newline"
        ), size
        assert got == [record, {**record, "rank": 2}], size
    # a partial user line is handed on at once, not held until its newline
    splitter = MetricByteSplitter(lambda r: None)
    assert splitter.feed(b"step 3 of 10 ...") == b"step 3 of 10 ..."

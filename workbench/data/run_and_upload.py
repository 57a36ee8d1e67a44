"""``python -m workbench.data run --upload DIR URL ... -- CMD...``: what a pod's main
container runs when its job has object-store outputs.

It runs CMD, and when CMD ends (success, failure or a signal) uploads each DIR to its URL
through ``python -m workbench.data upload`` (the fsspec code local jobs use), then exits
with CMD's own exit code. An upload that fails turns a success into exit code 1, with one
line in the log saying which output and why; CMD's failure code is kept either way.

Credentials: the Kubernetes backend puts each output's keys into the job's Secret and
hands them to this container as ``WORKBENCH_UPLOAD_<i>_<NAME>`` (secretKeyRef). Only the
upload of output ``i`` sees them, as ``<NAME>``; CMD never does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

UPLOAD_ENV_PREFIX = "WORKBENCH_UPLOAD_"  # the manifests' name for it (kubernetes/manifests.py)
UPLOAD_FAILED = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _say(text: str) -> None:
    print(f"workbench: {text}", file=sys.stderr, flush=True)


def run_and_upload(command: Sequence[str], uploads: Sequence[tuple[str, str]],
                   env: Mapping[str, str] | None = None) -> int:  # fmt: skip
    """Run ``command``, upload every (folder, URL) in ``uploads``; returns the exit code."""
    env = dict(os.environ if env is None else env)
    child_env = {k: v for k, v in env.items() if not k.startswith(UPLOAD_ENV_PREFIX)}
    code = _run(command, child_env)
    failed = 0
    for i, (folder, url) in enumerate(uploads):
        if not Path(folder).exists():  # nothing was written there (an emptyDir always is)
            _say(f"no output in {folder}: nothing to upload to {url}")
            continue
        prefix = f"{UPLOAD_ENV_PREFIX}{i}_"
        creds = {k.removeprefix(prefix): v for k, v in env.items() if k.startswith(prefix)}
        _say(f"command exited with code {code}; uploading outputs {folder} -> {url}")
        # A child process: the exact command local tooling and tests run, and its own
        # signal-free exit code even when the upload library misbehaves.
        done = subprocess.run([sys.executable, "-m", "workbench.data", "upload", folder, url],
                              env={**child_env, **creds}, check=False)  # fmt: skip
        if done.returncode != 0:
            failed += 1
            _say(f"output upload failed: {folder} -> {url} (exit code {done.returncode}); "
                 "the files were not all uploaded")  # fmt: skip
    if failed and code == 0:
        _say(f"the command succeeded but {failed} output upload(s) failed: exiting {UPLOAD_FAILED}")
        return UPLOAD_FAILED
    return code


def _run(command: Sequence[str], env: dict[str, str]) -> int:
    """Run ``command`` with signals forwarded; its exit code (128+N for signal N)."""
    try:
        proc = subprocess.Popen(list(command), env=env)
    except OSError as e:  # not found / not executable: the shell's codes
        _say(f"cannot run {command[0]!r}: {e.strerror or e}")
        return 127 if isinstance(e, FileNotFoundError) else 126
    previous = {}

    def forward(signum: int, _frame: FrameType | None) -> None:
        # Kubernetes stops a pod with SIGTERM to PID 1 (this wrapper): pass it on, then
        # upload what the command wrote before it stopped, within the grace period.
        if proc.poll() is None:
            proc.send_signal(signum)

    for sig in FORWARDED:
        previous[sig] = signal.signal(sig, forward)
    try:
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code

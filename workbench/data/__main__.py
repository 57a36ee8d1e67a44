"""``python -m workbench.data prefetch URL DEST``, ``python -m workbench.data upload SRC
URL`` and ``python -m workbench.data run --upload DIR URL -- CMD``: what a pod runs to fill
its data volume, to send its outputs back, and to run its command then upload its outputs.

Progress goes to stderr; the last stdout line is the summary. Exit codes: 0 done, 1 the
transfer failed (one line on stderr, credentials masked), 2 bad arguments or URL.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from ..errors import MountError, SpecError
from ..redaction import redact_text

PROG = "python -m workbench.data"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="copy data between object stores and folders "
                                "(credentials from AWS_* / OSS_* env only)")  # fmt: skip
    verbs = p.add_subparsers(dest="verb", metavar="prefetch|upload|run")
    verbs.required = True
    pre = verbs.add_parser("prefetch", help="copy everything under URL into the folder DEST")
    pre.add_argument("url", metavar="URL")
    pre.add_argument("dest", metavar="DEST")
    up = verbs.add_parser("upload", help="upload the file or folder SRC to URL")
    up.add_argument("src", metavar="SRC")
    up.add_argument("url", metavar="URL")
    run = verbs.add_parser("run", help="run CMD, then upload each DIR to its URL (any exit code)")
    run.add_argument("--upload", nargs=2, action="append", default=[], metavar=("DIR", "URL"))
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD")
    return p


class _Throttled:
    """Progress lines to stderr, at most one every ``every`` seconds (pod logs keep them)."""

    def __init__(self, every: float = 2.0) -> None:
        self.every = every
        self.last = 0.0
        self.pending = ""

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.pending = ""
            print(line, file=sys.stderr, flush=True)
        else:
            self.pending = line

    def flush(self) -> None:
        if self.pending:
            print(self.pending, file=sys.stderr, flush=True)
            self.pending = ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one transfer; returns the exit code."""
    parser = _parser()
    ns = parser.parse_args(argv)  # usage errors: argparse prints them and exits 2
    if ns.verb == "run":
        command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
        if not command:
            parser.error("run: give the command after --")
        from .run_and_upload import run_and_upload

        return run_and_upload(command, [(d, u) for d, u in ns.upload])
    from . import transfer

    report = _Throttled()
    start = time.monotonic()
    try:
        if ns.verb == "prefetch":
            done = transfer.prefetch(ns.url, ns.dest, report)
            where = f"-> {ns.dest}"
        else:
            done = transfer.upload(ns.src, ns.url, report)
            where = f"from {ns.src}"
    except SpecError as e:
        print(f"{PROG} {ns.verb}: error: {redact_text(str(e))}", file=sys.stderr)
        return 2
    except MountError as e:  # the store refused or failed: the message says why
        report.flush()
        print(f"{PROG} {ns.verb}: error: {redact_text(str(e))}", file=sys.stderr)
        return 1
    except OSError as e:  # DEST not writable, disk full: the store is fine, the host is not
        report.flush()
        print(
            f"{PROG} {ns.verb}: error: {type(e).__name__}: {redact_text(str(e))}", file=sys.stderr
        )
        return 1
    report.flush()
    print(f"{ns.verb} {done.summary()} {where} in {time.monotonic() - start:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""IPython magics: ``%gpu_train``, ``%%gpu_train``, ``%gpu_jobs``, ``%gpu_logs``, ``%gpu_cancel``,
``%gpu_top``, ``%gpu_monitor``. Load with ``%load_ext workbench``.

The flags are the CLI's (``workbench.flags``); a magic returns at once with a ``Job`` whose
rich display is the live job widget (text in a terminal), while the job runs under its
own detached supervisor.
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
from pathlib import Path
from typing import Any, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class

from .api import Job, default_manager
from .errors import WorkbenchError
from .flags import add_spec_flags, spec_from_args, split_command
from .spec import TrainSpec


class _MagicParser(argparse.ArgumentParser):
    """argparse that raises a short UsageError instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"%{self.prog}: {message} (see %{self.prog} --help)")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        # --help prints and lands here: stop the magic without a SystemExit traceback.
        raise UsageError(message or f"%{self.prog}: see the usage above")


def train_parser() -> argparse.ArgumentParser:
    """``%gpu_train`` grammar: the CLI's submit flags, then the program and its arguments."""
    p = _MagicParser(prog="gpu_train", description="Submit a training job and show it live.")
    add_spec_flags(p)
    p.add_argument("-f", "--file", help="read the spec from a YAML file (flags override it)")
    p.add_argument("--wait", action="store_true", help="block until the job ends")
    p.add_argument("command", nargs=argparse.REMAINDER, help="program and its arguments")
    return p


def _split(line: str, magic: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as e:
        raise UsageError(f"%{magic}: {e} (check the quotes)") from None


def _user_error(magic: str, e: WorkbenchError) -> UsageError:
    """A WorkbenchError as one line naming the field, instead of a traceback."""
    return UsageError(f"%{magic}: {e}")


def cell_script(body: str, home: str | Path) -> Path:
    """Write a ``%%gpu_train`` cell body to a script under WORKBENCH_HOME (named by content)."""
    digest = hashlib.sha256(body.encode()).hexdigest()[:12]
    folder = Path(home) / "cells"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"cell-{digest}.py"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(body if body.endswith("\n") else body + "\n")
        tmp.replace(path)
    return path


def parse_train(line: str, cell: str | None, home: str | Path) -> tuple[TrainSpec, bool]:
    """``%gpu_train`` line (and cell) -> (spec, wait); bad input raises UsageError."""
    args = _split(line, "gpu_train")
    args, command = split_command(args)  # the CLI's rule: everything after -- is the program
    ns = train_parser().parse_args(args)
    command = command or list(ns.command)
    if cell is not None:
        if not cell.strip():
            raise UsageError("%%gpu_train: the cell is empty; write the training script in it")
        # The cell is the script: what follows the flags becomes its arguments.
        command = ["python", str(cell_script(cell, home)), *command]
    elif not command and not ns.file:
        raise UsageError(
            "%gpu_train: no program given; e.g. %gpu_train --workers 2 train.py --epochs 3"
        )
    try:
        base = TrainSpec.from_yaml(ns.file) if ns.file else None
        return spec_from_args(ns, command, base), bool(ns.wait)
    except WorkbenchError as e:
        raise _user_error("gpu_train", e) from None


@magics_class
class WorkbenchMagics(Magics):
    """The ``%gpu_*`` magics."""

    @line_cell_magic
    def gpu_train(self, line: str, cell: str | None = None) -> Job:
        """Submit a job (the CLI's flags); in a cell magic the body is the script."""
        manager = default_manager()
        spec, wait = parse_train(line, cell, manager.settings.home)
        try:
            record = manager.submit(spec)
        except WorkbenchError as e:  # SpecError names the flag; SubmitError says why
            raise _user_error("gpu_train", e) from None
        job = Job(record.name, manager, record)
        if wait:
            job.wait()
        return job

    @line_magic
    def gpu_jobs(self, line: str = "") -> None:
        """Print the table of jobs (``--status S`` filters, repeatable)."""
        p = _MagicParser(prog="gpu_jobs", description="List jobs.")
        p.add_argument("--status", action="append", help="only jobs in this status (repeatable)")
        p.add_argument("--wide", action="store_true", help="attempt, backend and message too")
        ns = p.parse_args(_split(line, "gpu_jobs"))
        from .cli import _jobs_table  # one table format for CLI and notebook

        print(_jobs_table(default_manager().list(status=ns.status), wide=ns.wide))

    @line_magic
    def gpu_logs(self, line: str) -> None:
        """Print a rank's log: ``%gpu_logs NAME [-f] [--rank R | --all] [--tail N]``."""
        p = _MagicParser(prog="gpu_logs", description="Print a rank's logs.")
        p.add_argument("name")
        p.add_argument(
            "-f", "--follow", action="store_true", help="keep printing until the job ends"
        )
        which = p.add_mutually_exclusive_group()
        which.add_argument("-r", "--rank", type=int, default=0, help="which rank (default 0)")
        which.add_argument(
            "-a", "--all", action="store_true", help="every rank, each line prefixed [rank N]"
        )
        p.add_argument("-t", "--tail", type=int, help="only the last N lines (of each rank)")
        ns = p.parse_args(_split(line, "gpu_logs"))
        try:
            for text in default_manager().logs(
                ns.name, rank=None if ns.all else ns.rank, follow=ns.follow, tail=ns.tail
            ):
                print(text, flush=ns.follow)
        except WorkbenchError as e:
            raise _user_error("gpu_logs", e) from None
        except KeyboardInterrupt:
            pass  # stop following; the job goes on

    @line_magic
    def gpu_cancel(self, line: str) -> None:
        """Cancel jobs: ``%gpu_cancel NAME [NAME ...]``."""
        p = _MagicParser(prog="gpu_cancel", description="Cancel jobs.")
        p.add_argument("names", nargs="+", metavar="name")
        ns = p.parse_args(_split(line, "gpu_cancel"))
        m = default_manager()
        for name in ns.names:
            try:
                # Ask without blocking the kernel for a grace period; most jobs end at once.
                record = m.cancel(name, wait=0)
                if not record.status.terminal:
                    record = m.wait(name, timeout=2.0)
            except WorkbenchError as e:
                raise _user_error("gpu_cancel", e) from None
            if record.status.terminal:
                print(f"job {name}: {record.status.value}")
            else:
                print(
                    f"job {name}: stopping (every process is killed within "
                    f"{m.settings.stop_grace:g} s of the cancel)"
                )

    @line_magic
    def gpu_top(self, line: str = "") -> None:
        """GPUs on this host and which jobs hold them (``%gpu_top job``: active jobs)."""
        p = _MagicParser(prog="gpu_top", description="GPUs and their allocation.")
        p.add_argument("what", nargs="?", choices=["node", "job"], default="node")
        ns = p.parse_args(_split(line, "gpu_top"))
        from .cli import _jobs_table, _top_text

        m = default_manager()
        if ns.what == "job":
            print(_jobs_table(m.list(status=["Pending", "Running"]), wide=True))
        else:
            print(_top_text(m.nodes()))

    @line_magic
    def gpu_monitor(self, line: str = "") -> Any:
        """A live card per GPU of this host (gauges, history, alerts), or why there is none."""
        p = _MagicParser(prog="gpu_monitor", description="Watch this host's GPUs.")
        p.parse_args(_split(line, "gpu_monitor"))
        from . import monitor

        return monitor.show()


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics on ``ipython``."""
    ipython.register_magics(WorkbenchMagics)

"""IPython magics: ``%gpu_train``, ``%%gpu_train``, ``%gpu_jobs``, ``%gpu_logs``, ``%gpu_cancel``,
``%gpu_delete``, ``%gpu_top``, ``%gpu_monitor``. Load with ``%load_ext workbench``.

The flags are the CLI's (``workbench.flags``); a magic returns at once with a ``Job`` whose
rich display is the live job widget (text in a terminal), while the job runs under its
own detached supervisor.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import secrets
import shlex
import tempfile
from pathlib import Path
from typing import Any, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class

from .api import Job, default_manager
from .errors import WorkbenchError
from .flags import add_spec_flags, spec_from_args, split_command
from .plan import Plan
from .spec import ACTIVE_STATUSES, JobStatus, TrainSpec
from .tables import jobs_table, top_text

LOG_TAIL = 200  # lines %gpu_logs prints without --tail: a cell (and a browser) stays responsive
STATES = [s.value for s in JobStatus]


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


def _notebook_hints(text: str) -> str:
    """The CLI's ``workbench VERB`` hints, as the magic that does the same in a notebook."""
    return re.sub(r"`workbench (delete|cancel|logs) ", r"`%gpu_\1 ", text)


def _user_error(magic: str, e: WorkbenchError) -> UsageError:
    """A WorkbenchError as one line naming the field, instead of a traceback."""
    return UsageError(f"%{magic}: {_notebook_hints(str(e))}")


def cell_script(body: str, home: str | Path) -> Path:
    """Write a ``%%gpu_train`` cell body to a script under WORKBENCH_HOME (named by content)."""
    digest = hashlib.sha256(body.encode()).hexdigest()[:12]
    folder = Path(home) / "cells"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"cell-{digest}.py"
    if not path.exists():
        # A temp file of its own: two kernels writing the same cell at once must not share
        # one (the loser's rename found it gone). The rename is atomic; both write the same.
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".cell-{digest}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(body if body.endswith("\n") else body + "\n")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return path


def notebook_stem(user_ns: dict[str, Any]) -> str | None:
    """The running notebook's file name without .ipynb, where the kernel knows it."""
    for path in (
        user_ns.get("__vsc_ipynb_file__"),  # VS Code
        user_ns.get("__session__"),  # ipykernel, from Jupyter's session
        os.environ.get("JPY_SESSION_NAME"),  # jupyter_server gives it to every kernel
    ):
        if isinstance(path, str) and path.endswith(".ipynb"):
            return Path(path).stem
    return None


def cell_job_name(stem: str | None, cell: int | None) -> str:
    """``<notebook>-cell<N>-<5 hex>``: a %%gpu_train job named after where it came from."""
    base = re.sub(r"[^a-z0-9]+", "-", (stem or "notebook").lower()).strip("-")[:36] or "notebook"
    where = f"-cell{cell}" if cell else "-cell"
    return f"{base}{where}-{secrets.token_hex(3)[:5]}"


def parse_train(
    line: str, cell: str | None, home: str | Path, default_name: str | None = None
) -> tuple[TrainSpec, bool]:
    """``%gpu_train`` line (and cell) -> (spec, wait); bad input raises UsageError."""
    spec, ns = _parse_train(line, cell, home, default_name)
    return spec, bool(ns.wait)


def _parse_train(
    line: str, cell: str | None, home: str | Path, default_name: str | None = None
) -> tuple[TrainSpec, argparse.Namespace]:
    args = _split(line, "gpu_train")
    args, command = split_command(args)  # the CLI's rule: everything after -- is the program
    ns = train_parser().parse_args(args)
    command = command or list(ns.command)
    if cell is not None:
        if not cell.strip():
            raise UsageError("%%gpu_train: the cell is empty; write the training script in it")
        # The cell is the script: what follows the flags becomes its arguments.
        command = ["python", str(cell_script(cell, home)), *command]
        if ns.name is None and not ns.file:
            ns.name = default_name
        # The script lives under the workbench home, so Python would put that folder on
        # sys.path: put the notebook's (working) folder first, as in the notebook itself.
        folder = str(Path(ns.working_dir or os.getcwd()).resolve())
        inherited = os.environ.get("PYTHONPATH")
        ns.env = [
            f"PYTHONPATH={folder}{os.pathsep + inherited if inherited else ''}",
            *(ns.env or []),
        ]
    elif not command and not ns.file:
        raise UsageError(
            "%gpu_train: no program given; e.g. %gpu_train --workers 2 train.py --epochs 3"
        )
    try:
        base = TrainSpec.from_yaml(ns.file) if ns.file else None
        return spec_from_args(ns, command, base), ns
    except WorkbenchError as e:
        raise _user_error("gpu_train", e) from None


@magics_class
class WorkbenchMagics(Magics):
    """The ``%gpu_*`` magics."""

    @line_cell_magic
    def gpu_train(self, line: str, cell: str | None = None) -> Job | Plan:
        """Submit a job (the CLI's flags); in a cell magic the body is the script.
        With ``--dry-run``: check it and return the Plan (shown as text); nothing is made."""
        manager = default_manager()
        name = None
        if cell is not None:
            # The In [N] of this cell: its input is in the history before it runs (the
            # execution_count already points past it in IPython 9).
            shell: Any = self.shell
            number = len(shell.history_manager.input_hist_raw) - 1
            name = cell_job_name(notebook_stem(shell.user_ns), number)
        spec, ns = _parse_train(line, cell, manager.settings.home, default_name=name)
        wait = bool(ns.wait)
        if ns.dry_run:
            try:
                plan = manager.admit(spec)
            except WorkbenchError as e:
                raise _user_error("gpu_train", e) from None
            return plan  # a cell shows it as text (Plan._repr_pretty_)
        try:
            record = manager.submit(spec)
        except WorkbenchError as e:  # SpecError names the flag; SubmitError says why
            raise _user_error("gpu_train", e) from None
        job = Job(record.name, manager, record)
        if wait:
            try:
                job.wait()
            except KeyboardInterrupt:
                # Stop waiting, not the job: keep the handle (the cell's value) and say so.
                print(
                    f"job {job.name}: stopped waiting; the job goes on "
                    f"(%gpu_cancel {job.name} stops it)"
                )
        return job

    @line_magic
    def gpu_jobs(self, line: str = "") -> None:
        """Print the table of jobs (``--status S`` filters, repeatable)."""
        p = _MagicParser(prog="gpu_jobs", description="List jobs.")
        p.add_argument(
            "--status",
            action="append",
            type=_state,
            help=f"only jobs in this status (repeatable): {', '.join(STATES)}",
        )
        p.add_argument("--wide", action="store_true", help="attempt, backend and message too")
        ns = p.parse_args(_split(line, "gpu_jobs"))

        records = default_manager().list(status=ns.status)
        if not records:
            where = f" in status {' or '.join(ns.status)}" if ns.status else ""
            print(f"No jobs{where}. Submit one with %gpu_train train.py, or a %%gpu_train cell.")
            return
        print(jobs_table(records, wide=ns.wide))

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
        p.add_argument(
            "-t",
            "--tail",
            type=int,
            help=f"only the last N lines of each rank (default {LOG_TAIL}; 0: only new lines)",
        )
        ns = p.parse_args(_split(line, "gpu_logs"))
        tail = LOG_TAIL if ns.tail is None else ns.tail
        shown = 0
        try:
            for text in default_manager().logs(
                ns.name, rank=None if ns.all else ns.rank, follow=ns.follow, tail=tail
            ):
                print(text, flush=ns.follow)
                shown += 1
        except WorkbenchError as e:
            raise _user_error("gpu_logs", e) from None
        except KeyboardInterrupt:
            pass  # stop following; the job goes on
        if ns.tail is None and shown >= LOG_TAIL and not ns.follow:
            print(
                f"[the last {LOG_TAIL} lines{' of each rank' if ns.all else ''}; "
                f"--tail N for more, or workbench.get({ns.name!r}).logs() for all]"
            )

    @line_magic
    def gpu_cancel(self, line: str) -> None:
        """Cancel jobs: ``%gpu_cancel NAME [NAME ...]``."""
        p = _MagicParser(prog="gpu_cancel", description="Cancel jobs.")
        p.add_argument("names", nargs="+", metavar="name")
        ns = p.parse_args(_split(line, "gpu_cancel"))
        m = default_manager()
        problems = []
        for name in ns.names:  # one bad name must not leave the others running
            try:
                before = m.get(name)
                if before.status.terminal:
                    print(f"job {name}: already {before.status.value}; nothing to cancel")
                    continue
                # Ask without blocking the kernel for a grace period; most jobs end at once.
                record = m.cancel(name, wait=0)
                if not record.status.terminal:
                    record = m.wait(name, timeout=2.0)
            except WorkbenchError as e:
                problems.append(_notebook_hints(str(e)))
                continue
            if record.status.terminal:
                print(f"job {name}: {record.status.value}")
            else:
                print(
                    f"job {name}: stopping (every process is killed within "
                    f"{m.settings.stop_grace:g} s of the cancel)"
                )
        if problems:
            raise UsageError("%gpu_cancel: " + "; ".join(problems))

    @line_magic
    def gpu_delete(self, line: str) -> None:
        """Forget finished jobs and remove their files: ``%gpu_delete NAME [NAME ...]``."""
        p = _MagicParser(prog="gpu_delete", description="Delete finished jobs.")
        p.add_argument("names", nargs="+", metavar="name")
        ns = p.parse_args(_split(line, "gpu_delete"))
        m = default_manager()
        problems = []
        for name in ns.names:
            try:
                m.delete(name)
            except WorkbenchError as e:
                problems.append(_notebook_hints(str(e)))
                continue
            print(f"job {name}: deleted")
        if problems:
            raise UsageError("%gpu_delete: " + "; ".join(problems))

    @line_magic
    def gpu_top(self, line: str = "") -> None:
        """GPUs on this host and which jobs hold them (``%gpu_top job``: active jobs)."""
        p = _MagicParser(prog="gpu_top", description="GPUs and their allocation.")
        p.add_argument("what", nargs="?", choices=["node", "job"], default="node")
        p.add_argument("--backend", help="whose nodes and jobs, e.g. kubernetes (default: local)")
        ns = p.parse_args(_split(line, "gpu_top"))

        m = default_manager()
        try:
            if ns.what == "job":
                records = m.list(status=list(ACTIVE_STATUSES))
                if ns.backend:
                    m.backend(ns.backend)  # an unknown name is a one-line error, not no rows
                    records = [r for r in records if r.backend == ns.backend]
                print(jobs_table(records, wide=True))
            else:
                print(top_text(m.nodes(ns.backend)))
        except WorkbenchError as e:
            raise UsageError(f"%gpu_top: {_notebook_hints(str(e))}") from None

    @line_magic
    def gpu_monitor(self, line: str = "") -> Any:
        """A live card per GPU of this host (gauges, history, alerts), or why there is none."""
        p = _MagicParser(prog="gpu_monitor", description="Watch this host's GPUs.")
        p.parse_args(_split(line, "gpu_monitor"))
        from .widgets import show_gpus

        return show_gpus()


def _state(text: str) -> str:
    """A job status, any case; an unknown one names the valid ones."""
    for state in STATES:
        if text.lower() == state.lower():
            return state
    raise argparse.ArgumentTypeError(f"unknown status {text!r}; use one of {', '.join(STATES)}")


def load_ipython_extension(ipython: Any) -> None:
    """Register the magics on ``ipython``."""
    ipython.register_magics(WorkbenchMagics)

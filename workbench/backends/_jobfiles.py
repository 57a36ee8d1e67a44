"""The files of one local job: spec snapshot, script snapshot, credentials, per-rank logs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import IO, Any

from ..spec import TrainSpec

SNAPSHOT_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".txt"}
SNAPSHOT_MAX_BYTES = 5 * 1024 * 1024
SECRET_FILE = "secret-env.json"  # the name predates mounts with credentials; kept for old jobs


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a file only the user can read, whatever the umask or old mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a file that already exists
    with os.fdopen(fd, "w") as f:
        f.write(text)


class JobFiles:
    """Layout of ``HOME/jobs/NAME/``."""

    def __init__(self, job_dir: Path) -> None:
        self.dir = job_dir

    @property
    def logs(self) -> Path:
        """Folder of per-rank logs."""
        return self.dir / "logs"

    @property
    def snapshot(self) -> Path:
        """Folder of copied scripts."""
        return self.dir / "snapshot"

    def create(self) -> None:
        """Make the job's folders (private to the user)."""
        self.dir.mkdir(parents=True, exist_ok=False, mode=0o700)
        self.logs.mkdir()
        self.snapshot.mkdir()

    def log_path(self, rank: int) -> Path:
        """Where rank ``rank`` writes stdout and stderr."""
        return self.logs / f"rank-{rank}.log"

    def open_log(self, rank: int, attempt: int) -> IO[bytes]:
        """Append handle for a rank's log; later attempts start with a marker line."""
        f = open(self.log_path(rank), "ab")
        if attempt > 1:
            f.write(f"[workbench] ---- attempt {attempt} ----\n".encode())
            f.flush()
        return f

    def write_spec(self, spec: TrainSpec) -> None:
        """Save the (already redacted) spec as YAML, for people and for rerun (mode 0600)."""
        _write_private(self.dir / "spec.yaml", spec.to_yaml())

    def ensure(self, spec: TrainSpec) -> None:
        """Make the folder (private to the user) with spec.yaml, unless it exists: a
        cluster job's folder is made when it first has something to hold."""
        try:
            self.dir.mkdir(parents=True, mode=0o700)
        except FileExistsError:
            return
        self.write_spec(spec)

    def write_secrets(self, secrets: dict[str, Any]) -> None:
        """The real values the stored spec masks (TrainSpec.secrets()): a 0600 file only."""
        _write_private(self.dir / SECRET_FILE, json.dumps({"format": 2, **secrets}))

    def read_secrets(self) -> dict[str, Any]:
        """What write_secrets saved, for TrainSpec.restore_secrets (empty when none)."""
        path = self.dir / SECRET_FILE
        if not path.exists():
            return {}
        data: dict[str, Any] = json.loads(path.read_text() or "{}")
        if data.get("format") != 2:  # before mounts had secrets: a plain env mapping
            return {"env": data}
        return data

    def plan_snapshot(
        self, command: list[str], working_dir: str | None
    ) -> dict[int, tuple[Path, Path]]:
        """The script files the command names: {argv index: (source, copy in this job)}."""
        plan: dict[int, tuple[Path, Path]] = {}
        for i, arg in enumerate(command[1:], start=1):
            src = Path(arg) if Path(arg).is_absolute() else Path(working_dir or ".") / arg
            try:
                ok = src.is_file() and src.suffix in SNAPSHOT_SUFFIXES
                ok = ok and src.stat().st_size <= SNAPSHOT_MAX_BYTES
            except OSError:
                ok = False
            if ok:
                plan[i] = (src, self.snapshot / f"{i}-{src.name}")
        return plan

    def take_snapshot(self, plan: dict[int, tuple[Path, Path]]) -> dict[int, str]:
        """Copy the planned script files; returns {argv index: snapshot path}."""
        manifest: dict[int, str] = {}
        for i, (src, dst) in plan.items():
            shutil.copy2(src, dst)
            manifest[i] = str(dst)
        (self.snapshot / "manifest.json").write_text(json.dumps(manifest))
        return manifest

    def snapshot_command(self, command: list[str]) -> list[str]:
        """The command with script paths replaced by their snapshot copies (for rerun)."""
        path = self.snapshot / "manifest.json"
        if not path.exists():
            return list(command)
        manifest = {int(k): v for k, v in json.loads(path.read_text()).items()}
        return [manifest.get(i, arg) for i, arg in enumerate(command)]

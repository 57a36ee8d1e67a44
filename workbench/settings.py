"""Settings read from WORKBENCH_* environment variables and the user config file.

Precedence: explicit constructor arguments > environment > config file > defaults.
No Jupyter machinery here, so the CLI and the magics work without a server.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import SpecError


def _default_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "workbench"


def make_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make it 0700, whatever the umask.

    An existing one is tightened too: the home holds jobs.db and every job's secret file,
    and homes made by older versions were 0755 (world-listable, readable where the files
    themselves were). Someone else's folder is left alone (chmod is not ours to do there).
    """
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_mode & 0o777 != 0o700 and st.st_uid == os.getuid():
        path.chmod(0o700)
    return path


def _default_config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "workbench" / "config.yaml"


@dataclass
class Settings:
    """Where workbench keeps its state and which defaults it uses."""

    home: Path = field(default_factory=_default_home)
    backend: str = "local"
    catalog_file: Path | None = None
    # Seconds a rank gets between SIGTERM and SIGKILL when a gang is stopped.
    stop_grace: float = 10.0
    # What one worker of a local job costs per hour on this host (the catalogue's prices
    # are the cloud's); 0 by default: the user's own machine.
    local_price_per_hour: float = 0.0
    # Extra credentials/options for data stores, keyed by scheme (read by workbench.data).
    storage: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The Kubernetes backend's section (parsed by workbench.backends.kubernetes.config).
    kubernetes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, config_file: Path | None = None, **overrides: Any) -> Settings:
        """Build settings from defaults, the config file, the environment and overrides."""
        values: dict[str, Any] = {}
        path = Path(
            os.environ.get("WORKBENCH_CONFIG", "") or (config_file or _default_config_file())
        )
        if path.is_file():
            values.update(_read_config(path))
        env = os.environ
        if env.get("WORKBENCH_HOME"):
            values["home"] = env["WORKBENCH_HOME"]
        if env.get("WORKBENCH_BACKEND"):
            values["backend"] = env["WORKBENCH_BACKEND"]
        if env.get("WORKBENCH_CATALOG"):
            values["catalog_file"] = env["WORKBENCH_CATALOG"]
        if env.get("WORKBENCH_STOP_GRACE"):
            values["stop_grace"] = env["WORKBENCH_STOP_GRACE"]
        if env.get("WORKBENCH_LOCAL_PRICE"):
            values["local_price_per_hour"] = env["WORKBENCH_LOCAL_PRICE"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls._coerce(values)

    @classmethod
    def _coerce(cls, values: dict[str, Any]) -> Settings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise SpecError(
                f"config.{unknown[0]}",
                "unknown setting",
                f"known settings: {', '.join(sorted(known))}",
            )
        out = cls()
        if "home" in values:
            out.home = Path(values["home"]).expanduser()
        if "backend" in values:
            out.backend = str(values["backend"])
        if values.get("catalog_file"):
            out.catalog_file = Path(values["catalog_file"]).expanduser()
        if "stop_grace" in values:
            try:
                out.stop_grace = float(values["stop_grace"])
            except (TypeError, ValueError):
                raise SpecError(
                    "stop_grace",
                    f"{values['stop_grace']!r} is not a number",
                    "give seconds, e.g. 10",
                ) from None
        if "local_price_per_hour" in values:
            try:
                out.local_price_per_hour = float(values["local_price_per_hour"])
            except (TypeError, ValueError):
                out.local_price_per_hour = -1.0
            if not out.local_price_per_hour >= 0:  # also NaN
                raise SpecError(
                    "local_price_per_hour",
                    f"{values['local_price_per_hour']!r} is not a price",
                    "give dollars per worker-hour >= 0, e.g. 0.12 (WORKBENCH_LOCAL_PRICE)",
                )
        if "storage" in values:
            if not isinstance(values["storage"], dict):
                raise SpecError("config.storage", "must be a mapping of scheme to options")
            out.storage = dict(values["storage"])
        if values.get("kubernetes") is not None:
            if not isinstance(values["kubernetes"], dict):
                raise SpecError("config.kubernetes", "must be a mapping of Kubernetes settings")
            out.kubernetes = dict(values["kubernetes"])
        return out


def _read_config(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise SpecError(str(path), f"is not valid YAML: {e}", "fix the file or remove it") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "must hold a mapping of setting names to values")
    return data

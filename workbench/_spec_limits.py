"""Size, type and shape limits for user input (TrainSpec fields, spec files).

Every limit is a named constant and appears in its error ("at most N"), so one careless
or hostile value costs a SpecError, never a traceback, a huge store row or a slow list.
Standard library and yaml only.
"""

from __future__ import annotations

import math
import re
import reprlib
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError
from .redaction import redact_urls

MAX_STRING = 4096  # a plain string field: image, working_dir, mount paths
MAX_PATH_PART = 255  # NAME_MAX: a longer file name is an OSError, not a missing file
MAX_LABEL = 253  # a name-like field: priority, queue, backend, instance spec (DNS subdomain)
MAX_ARG = 64 * 1024  # one command argument
MAX_ARGS = 4096  # arguments in a command (each costs a pointer in exec's ARG_MAX too)
MAX_COMMAND = 256 * 1024  # the whole command line, in characters
MAX_ENV = 256  # entries in env
MAX_ENV_NAME = 256
MAX_ENV_VALUE = 32 * 1024
MAX_MOUNTS = 64  # data and outputs, each
MAX_SPEC = 1024 * 1024  # the whole spec as JSON, in characters
DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?\Z")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z, unlike $, refuses a trailing "\n"
MAX_DEPTH = 16  # nesting of lists/mappings anywhere in a spec
MAX_SPEC_FILE = 1024 * 1024  # a YAML spec file, in bytes
MAX_WORKERS = 1024
MAX_PROCS = 1024  # processes per worker
MAX_RETRIES = 1000
MAX_CPU = 4096.0  # vCPUs per worker
MAX_TIMEOUT = 10 * 366 * 24 * 3600.0  # seconds: ten years; a cluster's deadline is an int64

# Control characters end a line early or truncate a string at a C boundary (argv, env,
# paths); tab is the one a value may sensibly hold.
_CONTROL = {chr(c) for c in range(32) if c != 9} | {"\x7f"}

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60
_short.maxlist = _short.maxdict = _short.maxtuple = _short.maxset = 4
_short.maxlevel = 2


def show(value: Any) -> str:
    """A short, one-line repr of ``value`` for an error message (never the whole thing)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        # repr of a huge int is slow and raises past 4300 digits
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        # Mask credentials before shortening: a cut could split a URL and leave part of
        # its secret behind where the pattern no longer sees it.
        return redact_urls(_short.repr(_masked(value, _short.maxlevel)))
    except Exception:  # a broken __repr__ on some object handed to the Python API
        return f"a {type(value).__name__}"


def _masked(value: Any, depth: int) -> Any:
    """``value`` with credential URLs in its strings masked, as deep as show() looks."""
    if isinstance(value, str):
        return redact_urls(value)
    if depth <= 0:
        return value
    if isinstance(value, (list, tuple)):
        return [_masked(v, depth - 1) for v in value[: _short.maxlist + 1]]
    if isinstance(value, dict):
        items = list(value.items())[: _short.maxdict + 1]
        return {k: _masked(v, depth - 1) for k, v in items}
    return value


def kind(value: Any) -> str:
    """The JSON/YAML name of a value's type, for 'must be X, got Y' messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def check_text(
    value: Any,
    field: str,
    limit: int = MAX_STRING,
    fix: str | None = None,
    only_nul: bool = False,
) -> str:
    """``value`` as a string of at most ``limit`` characters without control characters.

    ``only_nul`` refuses just NUL: a command argument or env value may hold line breaks
    (``python -c`` code, a PEM key) but no NUL can pass through argv or the environment.
    """
    if not isinstance(value, str):
        raise SpecError(field, f"must be a string, got {kind(value)}", fix)
    if len(value) > limit:
        raise SpecError(field, f"is {len(value)} characters long, at most {limit}", fix)
    if "\x00" in value:
        raise SpecError(field, "holds a NUL byte, which argv, env and paths cannot carry", fix)
    bad = None if only_nul else next((c for c in value if c in _CONTROL), None)
    if bad is not None:
        raise SpecError(field, f"holds the control character {bad!r}", fix)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON): no file takes it
            raise SpecError(field, "is not valid Unicode text", fix) from None
    return value


def check_path(value: Any, field: str, fix: str | None = None) -> str:
    """A path string: ``check_text`` and no component longer than the OS allows (255 bytes)."""
    check_text(value, field, MAX_STRING, fix)
    longest = max((len(part.encode()) for part in value.split("/")), default=0)
    if longest > MAX_PATH_PART:
        raise SpecError(
            field, f"has a path component of {longest} bytes, at most {MAX_PATH_PART}", fix
        )
    return value


def as_int(value: Any, field: str, low: int, high: int, fix: str) -> int:
    """A whole number in [low, high] from an int, an integral float or its text."""
    given = value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(field, f"must be a whole number, got {kind(value)}", fix)
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 32:
            raise SpecError(field, f"{show(given)} is not a whole number up to {high}", fix)
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise SpecError(field, f"must be a whole number, got {show(given)}", fix) from None
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise SpecError(field, f"must be a whole number, got {show(given)}", fix)
        value = int(value)
    if value < low:
        raise SpecError(field, f"must be at least {low}, got {show(value)}", fix)
    if value > high:
        raise SpecError(field, f"must be at most {high}, got {show(value)}", fix)
    return value


def as_float(value: Any, field: str, fix: str) -> float:
    """A finite float from a number or its text (never nan/inf; huge ints are errors)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(field, f"must be a number, got {kind(value)}", fix)
    if isinstance(value, str) and len(value) > 32:
        raise SpecError(field, f"{show(value)} is not a number", fix)
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise SpecError(field, f"{show(value)} is not a finite number", fix) from None
    if not math.isfinite(number):
        raise SpecError(field, f"must be a finite number, got {show(value)}", fix)
    return number


def parse_duration(value: Any, field_name: str = "timeout") -> float | None:
    """Seconds from 90, "90", "30m", "2h" or "1h30m"; None stays None."""
    if value is None or value == "":
        return None
    fix = "write seconds or e.g. 30m, 2h, 1h30m"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(field_name, f"must be a duration, got {kind(value)}", fix)
    if isinstance(value, (int, float)):
        seconds = as_float(value, field_name, fix)
    else:
        text = value.strip()
        if len(text) > 64:
            raise SpecError(field_name, f"{show(value)} is not a duration", fix)
        try:
            seconds = float(text)
        except ValueError:
            m = DURATION.match(text)
            if not m or not any(m.groups()):
                raise SpecError(field_name, f"{show(value)} is not a duration", fix) from None
            h, mi, s = (float(g or 0) for g in m.groups())
            seconds = h * 3600 + mi * 60 + s
    if not seconds > 0 or not math.isfinite(seconds):
        raise SpecError(field_name, f"must be positive, got {show(value)}", "e.g. 30m")
    if seconds > MAX_TIMEOUT:
        raise SpecError(field_name, f"must be at most {MAX_TIMEOUT:.0f} seconds", "e.g. 30m")
    return seconds


_TOO_LARGE = f"is too large: a spec may hold at most {MAX_SPEC} characters as JSON"


def check_command(command: Any) -> None:
    """A non-empty list of non-empty strings, bounded in count and size, without NUL."""
    fix = "e.g. python train.py --epochs 3"
    if not isinstance(command, list) or not command:
        raise SpecError("command", "must be a non-empty list of strings", fix)
    if len(command) > MAX_ARGS:
        raise SpecError("command", f"has {len(command)} arguments, at most {MAX_ARGS}")
    check_path(command[0], "command", fix)  # the program: looked up as a file
    total = 0
    for arg in command:
        check_text(arg, "command", MAX_ARG, fix, only_nul=True)
        if not arg:
            raise SpecError("command", "must be a non-empty list of strings", fix)
        total += len(arg) + 1
    if total > MAX_COMMAND:
        raise SpecError("command", f"is {total} characters long, at most {MAX_COMMAND}")


def checked_env(env: Any, reserved: frozenset[str]) -> dict[str, str]:
    """``env`` as NAME -> text, bounded; scalars become their text; ``reserved`` names refused."""
    if not isinstance(env, dict):
        raise SpecError(
            "env", f"must be a mapping of NAME to value, got {kind(env)}", "e.g. LR=0.1"
        )
    if len(env) > MAX_ENV:
        raise SpecError("env", f"has {len(env)} entries, at most {MAX_ENV}")
    out: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or len(key) > MAX_ENV_NAME or not ENV_NAME.match(key):
            sane = isinstance(key, str) and len(key) <= 64 and key.isprintable()
            raise SpecError(
                f"env.{key}" if sane else "env",
                "is not a valid variable name" if sane else f"{show(key)} is not a valid name",
                "use letters, digits and _, not starting with a digit"
                + (f", at most {MAX_ENV_NAME} characters" if isinstance(key, str) else ""),
            )
        if key in reserved:
            raise SpecError(f"env.{key}", "is set by workbench for every rank", "remove it")
        # YAML reads `LR: 0.1` and `DEBUG: true` as scalars: those become their text
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            as_float(value, f"env.{key}", "quote the value")  # no nan, inf or 10**400
        elif not isinstance(value, (str, bool)):
            raise SpecError(f"env.{key}", f"must be a string, got {kind(value)}", "quote the value")
        out[key] = check_text(str(value), f"env.{key}", MAX_ENV_VALUE, only_nul=True)
    return out


def check_size(data: dict[Any, Any]) -> None:
    """Refuse a raw spec mapping that is too big or too deep, before anything else reads it.

    The walk stops as soon as a limit is passed, so a mapping that shares one list many
    times over (what YAML aliases build) costs at most MAX_SPEC steps, not its expansion.
    """
    total = 0
    for key, value in data.items():
        name = key if isinstance(key, str) and len(key) <= 64 else "spec"
        size = _size(value, MAX_SPEC - total, name, 1)
        total += size + 8
        if total > MAX_SPEC:
            raise SpecError("spec", _TOO_LARGE, "make it smaller")


def _size(value: Any, budget: int, field: str, depth: int) -> int:
    """Rough JSON size of ``value``; raises once it passes ``budget``."""
    if depth > MAX_DEPTH:
        raise SpecError(field, f"nests more than {MAX_DEPTH} levels deep", "flatten it")
    if isinstance(value, str):
        size = len(value) + 2
    elif isinstance(value, (list, tuple)):
        size = 2
        for item in value:
            size += _size(item, budget - size, field, depth + 1) + 1
            if size > budget:
                break
    elif isinstance(value, dict):
        size = 2
        for k, v in value.items():
            size += _size(k, budget - size, field, depth + 1)
            size += _size(v, budget - size, field, depth + 1) + 2
            if size > budget:
                break
    elif isinstance(value, int) and not isinstance(value, bool):
        size = value.bit_length() // 3 + 1  # about its decimal digits, without printing it
    else:
        size = 8
    if size > budget:
        raise SpecError(field, _TOO_LARGE, "make it smaller")
    return size


def read_spec_file(path: Path) -> Any:
    """Parse a YAML spec file: at most MAX_SPEC_FILE bytes, no anchors or aliases."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SPEC_FILE + 1)
    except OSError as e:
        raise SpecError("file", f"cannot read {path}: {e.strerror}", "check the path") from None
    if len(raw) > MAX_SPEC_FILE:
        raise SpecError("file", f"{path} is larger than {MAX_SPEC_FILE} bytes", "make it smaller")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError("file", f"{path} is not UTF-8 text", "save it as UTF-8") from None
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass: safe
    except _AliasRefused as e:
        raise SpecError(
            "file", f"{path} uses YAML anchors/aliases ({e.where})", "write the values out"
        ) from None
    except RecursionError:
        raise SpecError("file", f"{path} nests too deeply", "flatten it") from None
    except yaml.YAMLError as e:
        # PyYAML's messages span lines with a caret; the CLI prints one line
        raise SpecError("file", f"{path} is not valid YAML: {' '.join(str(e).split())}") from None
    except ValueError as e:  # the constructors' own: a 5000-digit int, 2001-02-30
        raise SpecError("file", f"{path} holds a value YAML cannot build: {show(str(e))}") from None


class _AliasRefused(Exception):
    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors and aliases at compose time (no expansion bombs)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            mark = event.start_mark
            raise _AliasRefused(f"line {mark.line + 1}, column {mark.column + 1}")
        return super().compose_node(parent, index)

"""``workbench data ls|du|head URL``: browse a data store from the shell."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_data_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``data`` verb and its sub-verbs to the CLI's subparsers."""
    d = sub.add_parser("data", help="browse data stores (s3://, oss://, local, any fsspec URL)")
    verbs = d.add_subparsers(dest="data_verb", metavar="ls|du|head")
    verbs.required = True
    for name, helptext in (("ls", "list objects and folders under URL"),
                           ("du", "total size and object count under URL"),
                           ("head", "preview a text, CSV or Parquet file")):  # fmt: skip
        v = verbs.add_parser(name, help=helptext)
        v.add_argument("url", metavar="URL")
        if name == "head":
            v.add_argument("-n", "--lines", type=int, default=10, help="rows or lines (default 10)")
        v.add_argument("-o", "--output", dest="fmt", choices=["text", "json"], default="text",
                       help="output format (text, json)")  # fmt: skip
    return d


def run_data(ns: argparse.Namespace) -> int:
    """Carry out ``workbench data VERB URL``; errors are MountErrors (one line, redacted)."""
    from . import data

    if ns.data_verb == "ls":
        entries = data.ls(ns.url)
        if ns.fmt == "json":
            print(json.dumps([e.to_dict() for e in entries], indent=2))
        else:
            for e in entries:
                size = "-" if e.type == "directory" else _human(e.size)
                print(
                    f"{size:>10}  {e.name}{'/' if e.type == 'directory' and not e.name.endswith('/') else ''}"
                )
            print(f"{len(entries)} item(s)")
        return 0
    if ns.data_verb == "du":
        usage = data.du(ns.url)
        if ns.fmt == "json":
            print(json.dumps({"url": ns.url, **usage}))
        else:
            print(f"{_human(usage['bytes'])}  {usage['files']} object(s)  {ns.url}")
        return 0
    text = data.head(ns.url, n=ns.lines)
    print(json.dumps({"url": ns.url, "preview": text}) if ns.fmt == "json" else text)
    return 0


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"

"""The Datasets tab's routes: the configured stores, a size-up and a preview of one URL.

``GET datasets?url=`` (handlers.py) lists; these add what ``workbench data du/head`` give,
over the same ``workbench.data`` functions, so the panel and the CLI agree.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..errors import BackendUnavailableError, MountError, SpecError
from ..redaction import redact_url
from .handlers import WorkbenchContext, WorkbenchHandler

PREVIEW_LINES_MAX = 200
LOCAL_SCHEMES = ("", "file", "nas")  # read from this host's disk, so held to allowed folders


class OutsideRootError(SpecError):
    """A local data URL outside the server's root and stores: answered 403, naming ``url``."""

    http_status = 403


def local_roots(wb: WorkbenchContext, settings: Any = None) -> list[Path]:
    """The folders local data URLs may reach: the server's root and local dataset stores."""
    from ..data.urls import local_path, parse_url

    roots = [Path(os.path.realpath(wb.root_dir))]
    for store in wb.dataset_stores:
        try:
            parsed = parse_url(store, "dataset_stores")
            if parsed.scheme in LOCAL_SCHEMES:
                roots.append(Path(os.path.realpath(local_path(parsed, settings))))
        except (MountError, OSError):
            continue  # a store that does not resolve here allows nothing
    return roots


def check_local_url(url: str, wb: WorkbenchContext, settings: Any = None) -> None:
    """Refuse a local path (bare, file://, nas://) outside ``local_roots`` after resolving
    symlinks and ``..``, as the contents API does; object-store URLs pass untouched."""
    try:
        from ..data.urls import local_path, parse_url

        parsed = parse_url(url, "url")
        if parsed.scheme not in LOCAL_SCHEMES:
            return
        target = Path(os.path.realpath(local_path(parsed, settings)))
    except (ImportError, MountError, OSError):
        return  # no data package, or a malformed URL: the data call reports it
    if any(target == root or target.is_relative_to(root) for root in local_roots(wb, settings)):
        return
    raise OutsideRootError(
        "url",
        f"{redact_url(url)!r} is outside the Jupyter server's root folder and the configured "
        "dataset stores",
        "browse a path under the root folder, or add its folder to the configured stores "
        "(c.WorkbenchApp.dataset_stores)",
    )


def _data_function(name: str) -> Any:
    """``workbench.data.<name>``, looked up at run time (the data package is optional)."""
    try:
        return getattr(importlib.import_module("workbench.data"), name)
    except (ImportError, AttributeError):
        raise BackendUnavailableError(
            "data",
            f"dataset browsing is not available in this install (workbench.data.{name} is missing)",
            "upgrade jupyter-gpu-workbench to a version with the data package",
        ) from None


class _UrlHandler(WorkbenchHandler):
    """A route that takes ?url= and calls one workbench.data function on it."""

    def url_arg(self) -> str:
        """The required ?url=, or a 400 naming it."""
        url = self.get_argument("url", "").strip()
        if not url:
            raise SpecError("url", "is required", "give the URL, e.g. ?url=s3://bucket/data")
        return url

    async def data_call(self, name: str, url: str, **kwargs: Any) -> Any:
        """Run ``workbench.data.<name>(url)`` off the loop; a MountError is about the URL."""
        fn = _data_function(name)
        # off the loop: resolving a path can touch a slow (network) disk
        await self.call(check_local_url, url, self.wb, self.manager.settings)
        try:
            return await self.call(fn, url, settings=self.manager.settings, **kwargs)
        except MountError as e:  # unknown scheme, missing object, no access
            raise SpecError("url", str(e), "check the URL and the storage credentials") from None


class DatasetStoresHandler(WorkbenchHandler):
    """GET the stores the Datasets tab starts from (WorkbenchApp.dataset_stores)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """{"stores": [{"url", "scheme"}]}: the configured URLs, else the Jupyter root folder."""
        urls = list(self.wb.dataset_stores) or [str(self.wb.root_dir)]
        # Credentials belong in the storage config, never in an answer: a URL's are masked.
        self.reply({"stores": [{"url": redact_url(u), "scheme": _scheme(u)} for u in urls]})


class DatasetUsageHandler(_UrlHandler):
    """GET total bytes and object count under a URL (`workbench data du`)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """?url=...: {"url", "bytes", "files"}."""
        url = self.url_arg()
        usage = await self.data_call("du", url)
        self.reply(
            {"url": redact_url(url), "bytes": int(usage["bytes"]), "files": int(usage["files"])}
        )


class DatasetPreviewHandler(_UrlHandler):
    """GET the first lines (rows) of a file under a URL (`workbench data head`)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """?url=...&lines=N (1..200, default 10): {"url", "lines", "preview"}."""
        url = self.url_arg()
        lines = self.int_arg("lines", 10, 1, PREVIEW_LINES_MAX)
        text = await self.data_call("head", url, n=lines)
        self.reply({"url": redact_url(url), "lines": lines, "preview": str(text)})


def _scheme(url: str) -> str:
    """``s3`` for s3://..., ``file`` for a plain path."""
    return url.split("://", 1)[0] if "://" in url else "file"

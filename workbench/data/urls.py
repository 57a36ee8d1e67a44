"""Data URLs -> fsspec filesystems: parsing, credentials, error translation, redaction.

Credentials come, first match wins, from the job's env (``--env AWS_ACCESS_KEY_ID=...``,
kept out of the spec by the backend), the process environment, then the ``storage:``
section of the workbench config file. Every message that leaves this package goes
through :func:`redact`, so a key or secret never reaches a log, an event or an exception.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import MountError
from ..redaction import redact_text, redact_urls, url_secrets, userinfo_credentials
from ..settings import Settings

URL = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<rest>.*)$")
# S3 and OSS share the DNS-style rule: 3-63 lowercase letters, digits, '-' and '.'.
BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# Options whose values are credentials: masked wherever they could be printed.
SECRET_KEYS = ("key", "secret", "token", "password", "aws_access_key_id", "aws_secret_access_key",
               "aws_session_token", "access_key", "secret_key", "account_key", "sas_token")  # fmt: skip

# scheme -> (module that implements it, extra that installs it)
OBJECT_STORES: dict[str, tuple[str, str]] = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "oss": ("ossfs", "oss"),
}
IN_PLACE = ("", "file", "nas")  # bound where they are, never copied
CLUSTER_ONLY = ("pvc",)

# Environment variables read per scheme: option name -> variables, first set wins.
ENV_OPTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "s3": {
        "key": ("AWS_ACCESS_KEY_ID",),
        "secret": ("AWS_SECRET_ACCESS_KEY",),
        "token": ("AWS_SESSION_TOKEN",),
        "endpoint_url": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
        "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    },
    "oss": {
        "key": ("OSS_ACCESS_KEY_ID",),
        "secret": ("OSS_ACCESS_KEY_SECRET",),
        "token": ("OSS_SECURITY_TOKEN", "OSS_SESSION_TOKEN"),
        "endpoint": ("OSS_ENDPOINT",),
    },
}


@dataclass(frozen=True)
class DataURL:
    """A parsed data source: ``scheme://bucket/key`` or a local path (scheme '')."""

    text: str = field(repr=False)  # may hold credentials: str() is the redacted form
    scheme: str
    bucket: str = ""
    key: str = ""

    @property
    def is_object_store(self) -> bool:
        """True when the data is fetched (prefetched into the cache) rather than bound."""
        return self.scheme not in IN_PLACE and self.scheme not in CLUSTER_ONLY

    def __str__(self) -> str:
        return redact_url(self.text)


def redact_url(text: str) -> str:
    """Every URL in ``text`` with userinfo and credential query values masked."""
    return redact_urls(text)


def parse_url(text: str, where: str = "data") -> DataURL:
    """Check a source/destination URL's shape; MountError says what is wrong and the fix."""
    if not isinstance(text, str) or not text.strip():
        raise MountError(f"{where}: empty data URL (give e.g. s3://bucket/prefix or ./data)")
    text = text.strip()
    m = URL.match(text)
    if not m:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:/[^/]", text) or re.match(
            r"^[a-zA-Z]{2,}:[^/]", text
        ):
            raise MountError(
                f"{where}: malformed URL {redact_url(text)!r} (write scheme://bucket/path, "
                "e.g. s3://bucket/prefix)"
            )
        return DataURL(text=text, scheme="")
    scheme, rest = m.group("scheme").lower(), m.group("rest")
    creds = userinfo_credentials(text)
    if creds:  # the bucket/host follows the userinfo (whose secret may hold a raw '/')
        rest = creds[0].split("://", 1)[1]
    if scheme == "file":
        return DataURL(text=text, scheme="file", key="/" + rest.lstrip("/"))
    bucket, _, key = rest.partition("/")
    if "@" in bucket:
        bucket = bucket.rsplit("@", 1)[1]
    if not bucket:
        raise MountError(
            f"{where}: malformed URL {redact_url(text)!r}: no bucket/host after {scheme}:// "
            f"(e.g. {scheme}://bucket/prefix)"
        )
    if scheme in CLUSTER_ONLY or scheme == "nas":
        return DataURL(text=text, scheme=scheme, bucket=bucket, key=key)
    if scheme in OBJECT_STORES and not BUCKET.match(bucket):
        raise MountError(
            f"{where}: {bucket!r} in {redact_url(text)!r} is not a valid bucket name "
            "(3-63 lowercase letters, digits, '-' or '.')"
        )
    if scheme not in OBJECT_STORES:
        from fsspec.registry import known_implementations, registry

        known = set(known_implementations) | set(registry)
        if scheme not in known:
            raise MountError(
                f"{where}: unknown scheme {scheme!r} in {redact_url(text)!r} (use s3://, oss://, "
                "nas://, pvc://, a local path or another fsspec protocol)"
            )
    return DataURL(text=text, scheme=scheme, bucket=bucket, key=key)


def _scheme_family(scheme: str) -> str:
    return "s3" if scheme in ("s3", "s3a") else scheme


def storage_options(
    scheme: str, env: Mapping[str, str] | None = None, settings: Settings | None = None
) -> dict[str, Any]:
    """fsspec options for ``scheme``: job env > process env > config file ``storage:``."""
    family = _scheme_family(scheme)
    settings = settings if settings is not None else Settings.load()
    opts: dict[str, Any] = dict(settings.storage.get(family) or settings.storage.get(scheme) or {})
    sources: list[Mapping[str, str]] = [os.environ]
    if env:
        sources.append(env)
    for source in sources:  # later sources override earlier ones
        for option, names in ENV_OPTIONS.get(family, {}).items():
            for name in names:
                if source.get(name):
                    opts[option] = source[name]
                    break
    if family == "s3":
        client_kwargs = dict(opts.pop("client_kwargs", None) or {})
        if opts.get("endpoint_url"):
            client_kwargs["endpoint_url"] = opts.pop("endpoint_url")
        if opts.get("region"):
            client_kwargs["region_name"] = opts.pop("region")
        if client_kwargs:
            opts["client_kwargs"] = client_kwargs
    return opts


def secrets_of(options: Mapping[str, Any]) -> set[str]:
    """The credential values among fsspec options (nested dicts included)."""
    found: set[str] = set()
    for k, v in options.items():
        if isinstance(v, Mapping):
            found |= secrets_of(v)
        elif isinstance(v, str) and k.lower() in SECRET_KEYS and v:
            found.add(v)
    return found


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret value and URL credentials masked."""
    return redact_text(text, secrets)


@dataclass
class Store:
    """An fsspec filesystem for one URL, its path inside it, and the secrets to mask."""

    url: DataURL
    fs: Any
    path: str
    secrets: set[str] = field(default_factory=set)
    options: dict[str, Any] = field(default_factory=dict)

    def error(self, action: str, exc: BaseException, target: str | None = None) -> MountError:
        """A MountError saying what failed where, with credentials masked."""
        where = target or str(self.url)
        return MountError(
            redact(f"{action} {where}: {describe_error(exc, self.url)}", self.secrets)
        )

    def redact(self, text: str) -> str:
        """Mask this store's credentials in ``text``."""
        return redact(text, self.secrets)

    def followed(self, entry: dict[str, Any]) -> dict[str, Any] | None:
        """A listing entry (``ls``/``find`` with detail) as a file or a folder. fsspec's
        local filesystem lists a symbolic link as type ``other`` (its ``info`` follows
        it): a link is read as its target, under its own name. None for what is neither
        a file nor a folder: a broken link, a pipe, a socket, a device."""
        if entry.get("type") in ("file", "directory"):
            return entry
        if not entry.get("islink"):
            return None
        try:
            target: dict[str, Any] = self.fs.info(entry["name"])
        except OSError:  # a broken link
            return None
        if target.get("type") not in ("file", "directory"):
            return None
        return {**target, "name": entry["name"]}


def open_store(
    url: str | DataURL,
    env: Mapping[str, str] | None = None,
    settings: Settings | None = None,
    where: str = "data",
) -> Store:
    """Resolve ``url`` to an fsspec filesystem (lazily imported, with an install hint)."""
    parsed = url if isinstance(url, DataURL) else parse_url(url, where)
    if parsed.scheme in CLUSTER_ONLY:
        raise MountError(
            f"{where}: {parsed} is a Kubernetes volume claim; pvc:// mounts work on a cluster backend"
        )
    if parsed.scheme in ("", "file", "nas"):
        from fsspec.implementations.local import LocalFileSystem

        return Store(url=parsed, fs=LocalFileSystem(), path=local_path(parsed, settings))
    module, extra = OBJECT_STORES.get(parsed.scheme, (None, None))
    if module:
        try:
            __import__(module)
        except ImportError:
            raise MountError(
                f"{where}: {parsed.scheme}:// needs {module}; "
                f"install it with pip install 'jupyter-gpu-workbench[{extra}]'"
            ) from None
    import fsspec.core

    opts = storage_options(parsed.scheme, env, settings)
    text = parsed.text
    creds = userinfo_credentials(text) if parsed.scheme in OBJECT_STORES else None
    if creds:  # s3://KEY:SECRET@bucket: s3fs/ossfs would take "KEY:SECRET@bucket" for the bucket
        text, opts["key"], opts["secret"] = creds
    secrets = secrets_of(opts) | url_secrets(parsed.text)
    if parsed.scheme == "oss" and not opts.get("endpoint"):
        raise MountError(
            f"{where}: no OSS endpoint for {parsed} (set OSS_ENDPOINT or storage.oss.endpoint "
            "in the workbench config, e.g. https://oss-cn-hangzhou.aliyuncs.com)"
        )
    try:
        fs, path = fsspec.core.url_to_fs(text, **opts)
    except ImportError as e:
        raise MountError(f"{where}: {parsed.scheme}:// needs an extra package: {e}") from None
    except (ValueError, TypeError, OSError) as e:
        raise MountError(redact(f"{where}: cannot open {parsed}: {e}", secrets)) from None
    return Store(url=parsed, fs=fs, path=path.rstrip("/") or path, secrets=secrets, options=opts)


def local_path(url: DataURL, settings: Settings | None = None) -> str:
    """Where a local, file:// or nas:// source is on this host."""
    if url.scheme == "":
        return os.path.expanduser(url.text)
    if url.scheme == "file":
        return url.key
    # nas://server/export/path: the export must be mounted here; config maps it, else /proc/mounts.
    settings = settings if settings is not None else Settings.load()
    mounts: dict[str, str] = dict((settings.storage.get("nas") or {}).get("mounts") or {})
    mounts.update(_nfs_mounts())
    target = f"{url.bucket}:/{url.key}"
    best = max((src for src in mounts if _under(target, src)), key=len, default=None)
    if best is None:
        raise MountError(
            f"data: NFS export {url.bucket}:/{url.key} of {url} is not mounted on this host "
            f"(mount it, e.g. mount -t nfs {url.bucket}:/{url.key} /mnt/data, or map it in the "
            "workbench config under storage.nas.mounts)"
        )
    rest = target[len(best.rstrip("/")) :].lstrip("/")
    return os.path.join(mounts[best], rest) if rest else mounts[best]


def _under(target: str, src: str) -> bool:
    src = src.rstrip("/")
    return target == src or target.startswith(src + "/")


def _nfs_mounts() -> dict[str, str]:
    """``server:/export`` -> mount point, from /proc/mounts (empty where it cannot be read)."""
    out: dict[str, str] = {}
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2].startswith("nfs") and ":" in parts[0]:
                    out[parts[0]] = parts[1]
    except OSError:
        pass
    return out


def describe_error(exc: BaseException, url: DataURL) -> str:
    """Plain words for a storage error: missing bucket, wrong credentials, no permission."""
    text = f"{type(exc).__name__}: {exc}"
    codes = {
        "NoSuchBucket": f"bucket {url.bucket!r} does not exist",
        "InvalidAccessKeyId": "wrong credentials: the access key is not known to the store",
        "SignatureDoesNotMatch": "wrong credentials: the secret does not match the access key",
        "InvalidClientTokenId": "wrong credentials: the access key is not known to the store",
        "ExpiredToken": "wrong credentials: the session token has expired",
        "AccessDenied": "no permission: the credentials may not read/write here",
        "NoSuchKey": "no such object",
    }
    for code, words in codes.items():
        if code in text:
            return f"{words} ({code})"
    if isinstance(exc, PermissionError):
        return f"no permission or wrong credentials ({exc})"
    if isinstance(exc, FileNotFoundError):
        return f"not found ({exc})"
    return text

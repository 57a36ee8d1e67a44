"""Data mounts as CSI volumes, from the config's driver table (``kubernetes.csi_drivers``).

A scheme in the table is mounted by its CSI driver instead of being copied in by the
portable init container (the default for every object store without an entry)::

    csi_drivers:
      oss: {driver: ossplugin.csi.alibabacloud.com,
            volume_attributes: {url: oss-cn-hangzhou-internal.aliyuncs.com}}
      cpfs: {driver: nasplugin.csi.alibabacloud.com,
             volume_attributes: {server: "{host}", path: "/{path}", vers: "3"}}

``volume_attributes`` values are templates over the source URL: ``{host}`` (bucket or
server), ``{path}`` (the key, no leading slash), ``{scheme}``. OSS has built-in defaults
(Alibaba's OSS CSI plugin: bucket, url, path, otherOpts; credentials as the ``akId`` /
``akSecret`` keys of the Secret named by ``nodePublishSecretRef``). Credentials (URL
userinfo, or the job's OSS_ACCESS_KEY_ID / OSS_ACCESS_KEY_SECRET) go into the job's own
Secret only; the table may not hold any.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import SpecError
from ...redaction import userinfo_credentials

OSS_DRIVER = "ossplugin.csi.alibabacloud.com"
BUILTIN: dict[str, dict[str, Any]] = {
    "oss": {
        "driver": OSS_DRIVER,
        "volume_attributes": {
            "bucket": "{host}",
            "path": "/{path}",
            "otherOpts": "-o max_stat_cache_size=0 -o allow_other",
        },
        "secret_keys": ("akId", "akSecret"),
        # The job's variables that hold the same credentials (workbench.data's names).
        "credential_env": ("OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET"),
        "endpoint_env": "OSS_ENDPOINT",
        "endpoint_attribute": "url",
    },
}
KNOWN = {"driver", "volume_attributes", "fs_type", "secret_keys", "credential_env"}
SCHEME = re.compile(r"[a-z][a-z0-9+.-]*\Z")
# Attribute names that would carry a credential: refused in the table (the Secret has them).
SECRETISH = re.compile(r"(?i)(secret|password|token|akid|access.?key)")
URL = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<rest>.*)\Z")


def check_drivers(raw: Any, where: str) -> dict[str, dict[str, Any]]:
    """The validated driver table (scheme -> entry) or SpecError naming the entry."""
    if not isinstance(raw, Mapping):
        raise SpecError(where, "must map URL schemes to CSI drivers",
                        "e.g. {oss: {driver: ossplugin.csi.alibabacloud.com}}")  # fmt: skip
    out: dict[str, dict[str, Any]] = {}
    for scheme, entry in raw.items():
        at = f"{where}.{scheme}"
        if not isinstance(scheme, str) or not SCHEME.match(scheme):
            raise SpecError(at, "is not a URL scheme", "use the scheme's lowercase name, e.g. oss")
        if scheme in ("pvc", "file", ""):
            raise SpecError(at, f"{scheme}:// is mounted by Kubernetes itself", "remove the entry")
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            raise SpecError(at, "must be a mapping (driver, volume_attributes, fs_type)")
        unknown = sorted(set(entry) - KNOWN)
        if unknown:
            raise SpecError(
                f"{at}.{unknown[0]}", "unknown setting", f"known: {', '.join(sorted(KNOWN))}"
            )
        merged = {**BUILTIN.get(scheme, {}), **dict(entry)}
        merged["volume_attributes"] = {
            **BUILTIN.get(scheme, {}).get("volume_attributes", {}),
            **dict(entry.get("volume_attributes") or {}),
        }
        driver = merged.get("driver")
        if not isinstance(driver, str) or not driver:
            raise SpecError(f"{at}.driver", "is required: the CSI driver's name",
                            "e.g. nasplugin.csi.alibabacloud.com")  # fmt: skip
        for key, value in merged["volume_attributes"].items():
            if not isinstance(value, str) or not isinstance(key, str):
                raise SpecError(f"{at}.volume_attributes", f"{key!r} must map to text")
            if SECRETISH.search(key):
                raise SpecError(f"{at}.volume_attributes.{key}", "looks like a credential, which "
                                "would be readable in every manifest", "give credentials to the "
                                "job (URL userinfo or --env), which keeps them in its Secret")  # fmt: skip
        keys = merged.get("secret_keys")
        if keys is not None and (not isinstance(keys, (list, tuple)) or len(keys) != 2
                                 or not all(isinstance(k, str) for k in keys)):  # fmt: skip
            raise SpecError(f"{at}.secret_keys", "must name two Secret keys: user, then secret")
        out[scheme] = merged
    return out


def csi_volume(src: str, read_only: bool, entry: Mapping[str, Any], env: Mapping[str, str],
               secret: str, put_secret: Callable[[str, str], None]) -> dict[str, Any]:  # fmt: skip
    """The ``csi`` volume source for ``src``; credentials go through ``put_secret(key,
    value)`` into the job's Secret, which ``nodePublishSecretRef`` names."""
    m = URL.match(src)
    if not m:
        raise SpecError("data", f"{src!r} is not a URL", "write scheme://host/path")
    scheme = m.group("scheme").lower()
    creds = userinfo_credentials(src)
    rest = creds[0].split("://", 1)[1] if creds else m.group("rest")
    host, _, path = rest.partition("/")
    host = host.rsplit("@", 1)[-1]
    if not host:
        raise SpecError(
            "data", f"no bucket or server after {scheme}://", f"e.g. {scheme}://host/path"
        )
    fields = {"host": host, "path": path.strip("/"), "scheme": scheme}
    attributes = {k: v.format(**fields) for k, v in entry.get("volume_attributes", {}).items()}
    endpoint_attr = entry.get("endpoint_attribute")
    if endpoint_attr and not attributes.get(endpoint_attr):
        value = env.get(entry.get("endpoint_env") or "")
        if not value:
            raise SpecError("data", f"{scheme}:// through {entry['driver']} needs the endpoint",
                            f"set kubernetes.csi_drivers.{scheme}.volume_attributes.{endpoint_attr} "
                            f"or --env {entry.get('endpoint_env')}=...")  # fmt: skip
        attributes[endpoint_attr] = value
    source: dict[str, Any] = {"driver": entry["driver"], "readOnly": read_only,
                              "volumeAttributes": attributes}  # fmt: skip
    if entry.get("fs_type"):
        source["fsType"] = str(entry["fs_type"])
    user = password = None
    if creds:
        _, user, password = creds
    elif entry.get("credential_env"):
        names = entry["credential_env"]
        user, password = env.get(names[0]), env.get(names[1])
    keys = entry.get("secret_keys")
    if user and password:
        if not keys:
            raise SpecError("data", f"credentials for {scheme}://, but the driver table names no "
                            "Secret keys for them", f"set kubernetes.csi_drivers.{scheme}.secret_keys")  # fmt: skip
        put_secret(keys[0], user)
        put_secret(keys[1], password)
        source["nodePublishSecretRef"] = {"name": secret}
    return source

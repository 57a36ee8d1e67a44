"""Credentials in URLs and env values: find them, mask them. Standard library only.

A job's spec is stored, shown and logged in its redacted form (see ``TrainSpec.redacted``);
the real values live only in the job's 0600 secret file. These helpers decide what counts
as a credential:

- env names that look like credentials (``SECRET_ENV``: ``HF_TOKEN``, ``DB_PASS``, ``HF_AUTH``);
- URL userinfo (``http://user:pass@host``, ``s3://KEY:SECRET@bucket``): the whole userinfo is
  masked, since the "user" of an object-store URL is an access key and a user-only URL is
  usually a token (``https://ghp_xxx@github.com``);
- query parameters whose names look like credentials (``X-Amz-Signature``, ``sig``,
  ``access_token``, ``OSSAccessKeyId``, ``password`` ...), value masked, name kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, unquote_plus

REDACTED = "***"
SECRET_ENV = re.compile(
    r"(SECRET|TOKEN|PASSW(OR)?D|(^|_)PASS($|_)|_PWD($|_)|CREDENTIAL|AUTH(?!OR)|API_?KEY"
    r"|ACCESS_?KEY|PRIVATE|(^|_)KEY($|_)|SIGNATURE|COOKIE)",
    re.I,
)
# Query parameter names that carry credentials (presigned S3/OSS/GCS/Azure URLs, OAuth).
SECRET_PARAM = re.compile(r"(pass|pwd|token|secret|key|sig|credential|auth|session)", re.I)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)(.*)$", re.S)
# A URL inside free text (a command argument, an error message).
# The scheme is bounded: an unbounded one makes a long run of letters with no "://"
# quadratic (every start position scans to the end).
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s'\"<>`]+")


def _split(url: str) -> tuple[str, str, str, str, str] | None:
    """(scheme://, userinfo, host+path, query, fragment) of ``url``; None if not a URL.

    Hand-split rather than urlsplit: a pasted AWS secret holds a raw '/', which urlsplit
    takes for the end of the host (``s3://AKID:ab/cd@bucket`` -> host ``AKID:ab``).
    """
    m = _SCHEME.match(url)
    if not m:
        return None
    prefix, rest = m.groups()
    rest, hash_, fragment = rest.partition("#")
    rest, qmark, query = rest.partition("?")
    end = rest.find("/") if "/" in rest else len(rest)
    authority = rest[:end]
    userinfo = ""
    if "@" in authority:
        userinfo, _, _host = authority.rpartition("@")
        rest = rest[len(userinfo) + 1 :]
    elif ":" in authority and not authority.startswith("["):
        port = authority.rsplit(":", 1)[1]
        at = rest.find("@", end)
        if port and not port.isdigit() and at >= 0:  # "KEY:sec/ret@bucket": not a port
            userinfo, rest = rest[:at], rest[at + 1 :]
    return prefix, userinfo, rest, qmark + query, hash_ + fragment


def redact_url(url: str) -> str:
    """``url`` with its userinfo and credential query values masked (unchanged otherwise)."""
    parts = _split(url)
    if parts is None:
        return url
    prefix, userinfo, rest, query, fragment = parts
    if userinfo:
        rest = f"{REDACTED}@{rest}"
    if query:
        params = []
        for item in query[1:].split("&"):
            name, eq, _value = item.partition("=")
            secret = eq and SECRET_PARAM.search(unquote_plus(name))
            params.append(f"{name}={REDACTED}" if secret else item)
        query = "?" + "&".join(params)
    return prefix + rest + query + fragment


def redact_urls(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)


def url_secrets(url: str) -> set[str]:
    """The credential strings in ``url`` (as written and decoded), for masking messages."""
    parts = _split(url)
    if parts is None:
        return set()
    found: set[str] = set()
    userinfo, query = parts[1], parts[3]
    if userinfo:
        user, _, password = userinfo.partition(":")
        found |= {user, password, unquote(user), unquote(password)}
    for item in query[1:].split("&") if query else ():
        name, eq, value = item.partition("=")
        if eq and SECRET_PARAM.search(unquote_plus(name)):
            found |= {value, unquote_plus(value)}
    return {s for s in found if len(s) >= 3}


def userinfo_credentials(url: str) -> tuple[str, str, str] | None:
    """(url without userinfo, user, password) decoded, or None when ``url`` has no userinfo."""
    parts = _split(url)
    if parts is None or not parts[1]:
        return None
    prefix, userinfo, rest, query, fragment = parts
    user, _, password = userinfo.partition(":")
    return prefix + rest + query + fragment, unquote(user), unquote(password)


def redact_env_value(name: str, value: str) -> str:
    """What may be shown of env ``name=value``: all masked for a credential name, else
    any credentials inside URLs masked (``DATABASE_URL=postgres://***@db/app``)."""
    if SECRET_ENV.search(name):
        return REDACTED
    return redact_urls(value) if isinstance(value, str) else value


def secret_strings(saved: Mapping[str, Any]) -> set[str]:
    """Every credential string in a ``TrainSpec.secrets()`` mapping (whole values and the
    passwords/signatures inside URLs), for masking free text such as a traceback."""
    found: set[str] = set()
    for group in saved.values():
        for value in group.values() if isinstance(group, Mapping) else ():
            if isinstance(value, str):
                found |= {u for url in _URL_IN_TEXT.findall(value) for u in url_secrets(url)}
                if len(value) >= 3:
                    found.add(value)
    return found


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every URL's credentials and each of ``secrets`` (3+ characters) masked.

    URLs first, so a secret URL still says where (``s3://***@bucket/x``), not just ``***``.
    """
    text = redact_urls(text)
    for s in sorted(set(secrets), key=len, reverse=True):
        if s and len(s) >= 3:
            text = text.replace(s, REDACTED)
    return text

"""Database URLs, http(s) URLs and paths made safe for messages and logs (secrets masked)."""

from __future__ import annotations

import os
import re

from sqlalchemy.engine import URL, make_url


def redacted(url: URL | str | os.PathLike[str]) -> str:
    """A database URL, an http(s) URL or a path as text safe for messages and logs.

    Secrets are replaced by ``***``: the password of the ``user:password@`` part, and the value
    of every query parameter whose name holds ``pass``, ``pwd``, ``secret``, ``token``, ``key``,
    ``sig``, ``credential`` or ``auth`` (``password``, ``sslpassword``, ``api_key``,
    ``access_token``, …). The user name, host, port, path and other parameters stay. A
    database URL (a :class:`~sqlalchemy.engine.URL`, or text with a ``scheme://`` other than
    http or https that SQLAlchemy can parse) is read as SQLAlchemy reads it, and rendered by it;
    any other text with ``://`` is masked as it is written. Text without ``://`` (a folder or
    a file) is returned unchanged. Never raises.
    """
    if isinstance(url, URL):
        return _render_database_url(url)
    text = os.fspath(url)
    if "://" not in text:
        return text
    if text.split("://", 1)[0].lower() not in ("http", "https"):
        try:
            return _render_database_url(make_url(text))
        except Exception:  # not a URL SQLAlchemy reads: mask it as text
            pass
    return _mask_url_text(text)


_MASK = "***"


def _secret_parameter(name: str) -> bool:
    return re.search(r"pass|pwd|secret|token|key|sig|credential|auth", name, re.I) is not None


def _render_database_url(url: URL) -> str:
    from urllib.parse import quote_plus

    if url.host and "@" in url.host:
        # A raw "@" in the password: SQLAlchemy took the password's end for part of the host.
        url = url.set(host=_MASK + url.host[url.host.rindex("@") :])
    text = url.set(query={}).render_as_string(hide_password=True)
    query = []
    for name, values in url.query.items():
        for value in (values,) if isinstance(values, str) else values:
            shown = _MASK if _secret_parameter(name) else quote_plus(value)
            query.append(f"{quote_plus(name)}={shown}")
    return text + "?" + "&".join(query) if query else text


def _mask_url_text(text: str) -> str:
    from urllib.parse import unquote_plus

    # scheme://user:password@host… as SQLAlchemy splits it: the password runs to the first "@"
    # and, should the host then hold another "@", to its last one.
    match = re.match(r"([^:/?#@]*://[^:/]*):([^@]*)@([^/?#]*)", text)
    if match:
        host = match.group(3)
        if "@" in host:
            host = _MASK + host[host.rindex("@") :]
        text = f"{match.group(1)}:{_MASK}@{host}{text[match.end() :]}"
    start = text.find("?", text.find("://") + 3)
    if start < 0:
        return text
    end = text.find("#", start)
    end = len(text) if end < 0 else end
    pairs = []
    for pair in text[start + 1 : end].split("&"):
        name, equals, _ = pair.partition("=")
        pairs.append(
            f"{name}={_MASK}" if equals and _secret_parameter(unquote_plus(name)) else pair
        )
    return text[: start + 1] + "&".join(pairs) + text[end:]

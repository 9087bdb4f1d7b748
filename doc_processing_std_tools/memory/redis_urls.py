"""The ``url`` of memory-tools on Redis: ``redis://host:6379/2?namespace=team-a`` split into
redis-py's connection URL and the namespace, checked and shown without a password. Needs no
redis-py: the settings check a URL before any store is opened."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit, urlunsplit

from ..embedded_redis import redact as _redact
from ..shared.client_text import quote

DEFAULT_NAMESPACE = "default"
SCHEMES = {"redis": "redis", "rediss": "rediss", "valkey": "redis", "valkeys": "rediss"}


def redact(url: str) -> str:
    """*url* without its password (``***``) and without its query."""
    return _redact(url.split("?", 1)[0])


def split_store_url(url: str) -> tuple[str, str]:
    """(connection url for redis-py, namespace) of ``redis://host:6379/2?namespace=team-a``;
    ValueError for another scheme or another query key (a typo must not pick the default)."""
    parts = urlsplit(url)
    scheme = SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        raise ValueError(
            f"{redact(url)!r} is not a Redis url: it must start with redis://, rediss://, "
            "valkey:// or valkeys://"
        )
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"namespace"})
    if unknown:
        raise ValueError(
            f"unknown query key {quote(unknown[0], 60)!r} in {redact(url)!r}: the only one is "
            "namespace (redis://HOST:PORT/DB?namespace=NAME)"
        )
    namespace = query.get("namespace", [DEFAULT_NAMESPACE])[-1]
    return urlunsplit(parts._replace(scheme=scheme, query="")), namespace


def namespace_problem(namespace: str) -> str | None:
    """Why *namespace* cannot be one (it goes between the braces of a hash tag), or None."""
    if not namespace:
        return "the namespace must not be empty"
    if any(c in namespace for c in "{}") or not namespace.isprintable() or " " in namespace:
        return f"the namespace {namespace!r} may not contain braces, spaces or control characters"
    if len(namespace) > 200:
        return "the namespace is over 200 characters"
    return None

"""What every model of the config shares: unknown keys refused, and URL and host checks."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict


def one_or_many(value: Any) -> Any:
    """A lone string where a list of strings is asked for: the list of that one."""
    return [value] if isinstance(value, str) else value


# A list of strings a config may also write as one string (``users: alice``).
OneOrMany = Annotated[list[str], BeforeValidator(one_or_many)]


class StrictModel(BaseModel):
    """A config model: a key it does not know is an error (a typo must not pass unnoticed)."""

    # defer_build: each model's validator is built when first used, not at import; the
    # config's load builds what it validates in one go (~15 ms less before the first answer)
    model_config = ConfigDict(extra="forbid", defer_build=True)


def http_url(value: str, *, secure: bool) -> str:
    """*value* as an http(s) URL with a host; with *secure*, plain http only for a loopback host."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError when out of range or not a number)
    except ValueError as exc:
        raise ValueError(f"not a usable URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("give an http(s) URL with a host, e.g. https://idp.example.com/")
    if secure and parts.scheme == "http" and not loopback_literal(parts.hostname):
        raise ValueError("use https (plain http is accepted only for a loopback host)")
    return value


def loopback_literal(host: str) -> bool:
    """True for ``localhost`` or a loopback address written out (no name lookup)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

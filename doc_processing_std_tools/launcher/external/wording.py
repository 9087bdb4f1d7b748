"""How an external server is named in messages: its start error and its URL without secrets.

Light on purpose (no fastmcp, no SDK client): the composition imports these whether or not any
external server is configured.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from ...exceptions import DptError


class ExternalStartError(DptError):
    """An external server could not be started or reached; the message says which and why."""


def shown_url(url: str) -> str:
    """*url* as messages show it: no user or password, no query values (tokens ride there)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = re.sub(r"=[^&]*", "=***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))

"""Who is calling, as the call guards (audit log, rate limits) name them: built here, where
both the transports' identity and the sessions are known, for the calls layer beneath.

- user: over HTTP, the token's subject (a JWT's ``sub``) or the static token's name
  (``token-2``), ``anonymous`` without auth; over stdio, the local user.
- session: the HTTP ``Mcp-Session-Id``; over stdio, one id per launcher run.
- client: the ``clientInfo.name`` of the session's ``initialize``.
- claims: over HTTP with a token, its verified claims (``{}`` for a static token), for
  ``access:`` rules; None over stdio and without a token.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from typing import Any

from ...seams.server_sessions import client_name
from ..calls.audit import Caller
from ..calls.guards import CallGuards, local_user
from ..config.schema import LoadedConfig
from ..transports.identity import current_caller, current_claims, stdio_client

SESSION_HEADER = "mcp-session-id"


class Callers:
    """:attr:`CallGuards.identify` for a launcher: see the module's docstring."""

    def __init__(self) -> None:
        self._local = local_user()
        self._stdio_session = f"stdio-{os.getpid()}-{secrets.token_hex(4)}"
        self._stdio: Caller | None = None

    def __call__(self, session: Any, headers: Mapping[str, str] | None) -> Caller:
        if headers is not None:
            user = current_caller() or "anonymous"
            session_id = headers.get(SESSION_HEADER)
            return Caller(user, session_id, client_name(session), current_claims())
        client = client_name(session) if session is not None else stdio_client()
        stdio = self._stdio
        if stdio is None or stdio.client != client:
            stdio = self._stdio = Caller(self._local, self._stdio_session, client)
        return stdio


def call_guards(loaded: LoadedConfig) -> CallGuards | None:
    """The composition's guards, naming callers with :class:`Callers`; None when the config
    asks for no access rules, audit log or rate limits."""
    guards = CallGuards.of(loaded)
    if guards is not None:
        guards.identify = Callers()
    return guards

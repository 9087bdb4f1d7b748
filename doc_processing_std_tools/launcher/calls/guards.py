"""What a composition asks of every call beyond its tool's own rules: per-user access, the
audit log and the rate limits (``access:``, ``audit:`` and ``rate_limits:``; docs/trust.md).

One :class:`CallGuards` per composition, shared by every tool's :class:`~.policy.CallPolicy`,
which asks it at the start of each call (:meth:`CallGuards.begin`: who is calling, whether
they may, a token from the buckets) and at its end (:meth:`CallGuards.end`: the audit line, written before the
answer). Who is calling is told by the layer that knows (the transports' identity), through
:attr:`CallGuards.identify`, set when the composition is built.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable, Mapping
from typing import Any

from ..config.schema import LoadedConfig
from .access import Access
from .audit import AuditLog, Caller, CallNote, audit_entry, trace_id_of
from .rate_limits import RateLimits

# Who is calling: given the call's MCP server session (None on the stdio fast path) and its
# HTTP request's headers (None over stdio).
Identify = Callable[[Any, Mapping[str, str] | None], Caller]


def local_user() -> str:
    """The user the launcher runs as: who calls over stdio."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # (no passwd entry in a container)
        return "local"


def anonymous(session: Any, headers: Mapping[str, str] | None) -> Caller:
    """Who calls when nothing better is known: the local user over stdio, else anonymous."""
    return Caller(local_user() if headers is None else "anonymous")


class CallGuards:
    """The access rules, the audit log and the rate limits of one composition (any may be
    None)."""

    __slots__ = ("access", "audit", "identify", "limits")

    def __init__(
        self,
        audit: AuditLog | None = None,
        limits: RateLimits | None = None,
        identify: Identify = anonymous,
        access: Access | None = None,
    ) -> None:
        self.audit, self.limits, self.access = audit, limits, access
        self.identify = identify

    @classmethod
    def of(cls, loaded: LoadedConfig) -> CallGuards | None:
        """What *loaded* asks for; None when it asks for none of them (calls then pay nothing)."""
        config = loaded.config
        if config.audit is None and not config.rate_limits and config.access is None:
            return None
        audit = AuditLog.from_config(config.audit, loaded) if config.audit is not None else None
        limits = RateLimits(config.rate_limits, config.lock) if config.rate_limits else None
        access = Access(config.access) if config.access is not None else None
        return cls(audit, limits, access=access)

    def caller(self, session: Any, headers: Mapping[str, str] | None) -> Caller:
        return self.identify(session, headers)

    def begin(
        self,
        caller: Caller,
        arguments: Any,
        meta: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
    ) -> CallNote | None:
        """What the audit line of a call starting now needs; None without an audit log."""
        audit = self.audit
        if audit is None:
            return None
        return CallNote(caller, arguments, audit.arguments, trace_id_of(meta, headers))

    def end(
        self,
        note: CallNote,
        server: str,
        tool: str,
        outcome: str,
        trace_id: str | None,
        pin: str | None = None,
    ) -> None:
        """The call's audit line: written (whole) when this returns. *pin*: the tool's pin
        status (:attr:`~.policy.ToolRules.pin`)."""
        assert self.audit is not None
        self.audit.write(audit_entry(note, server, tool, outcome, trace_id, pin))

    async def aclose(self) -> None:
        if self.limits is not None:
            await self.limits.aclose()
        if self.audit is not None:
            self.audit.close()

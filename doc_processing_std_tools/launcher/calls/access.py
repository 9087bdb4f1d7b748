"""Per-user access (``access:``, docs/trust.md#per-user-access): which servers, tools and
profiles a caller may use.

One :class:`Access` per composition, asked by the call guards at the start of every call (a
denied call is refused before anything else), by the access gate for each list (a denied tool,
prompt or resource is absent) and each prompt, read, subscription or completion (a denied
server's item answers as an unknown one), and by the HTTP app for each request at a profile's
endpoint (403).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from ..config.access import AccessRule
from .audit import Caller


def _any(globs: Sequence[str], value: str) -> bool:
    return any(fnmatchcase(value, glob) for glob in globs)


def _claim_matches(claims: Mapping[str, Any], name: str, globs: Sequence[str]) -> bool:
    value = claims.get(name)
    if isinstance(value, str):  # (a space-separated string: OAuth's ``scope``)
        values: list[Any] = value.split()
    elif isinstance(value, list | tuple):
        values = list(value)
    else:
        values = [] if value is None else [value]
    return any(isinstance(v, str | int) and _any(globs, str(v)) for v in values)


class Access:
    """The rules of ``access:``, answering for one caller at a time."""

    __slots__ = ("rules",)

    def __init__(self, rules: Sequence[AccessRule]) -> None:
        self.rules = tuple(rules)

    def applying(self, caller: Caller) -> list[tuple[int, AccessRule]]:
        """The rules (with their index) whose caller conditions *caller* meets."""
        return [(i, rule) for i, rule in enumerate(self.rules) if self._meets(rule, caller)]

    @staticmethod
    def _meets(rule: AccessRule, caller: Caller) -> bool:
        if not rule.identified:
            return True
        claims = caller.claims
        if claims is None:  # (no verified credential: stdio, anonymous HTTP)
            return False
        if rule.users is not None and not _any(rule.users, caller.user or ""):
            return False
        return all(_claim_matches(claims, name, globs) for name, globs in rule.claims.items())

    def of(self, caller: Caller) -> CallerAccess:
        """The rules as they apply to *caller*, matched once (for a whole list)."""
        return CallerAccess(tuple(rule for _, rule in self.applying(caller)))

    def allows_tool(self, caller: Caller, server: str, tool: str) -> bool:
        """Whether *caller* may see and call *tool* (its exposed name) of *server*."""
        return self.of(caller).allows_tool(server, tool)

    def allows_server(self, caller: Caller, server: str) -> bool:
        """Whether *caller* may list and use *server*'s prompts, resources and resource
        templates (:meth:`CallerAccess.allows_server`)."""
        return self.of(caller).allows_server(server)

    def allows_profile(self, caller: Caller, profile: str) -> bool:
        """Whether *caller* may open *profile*'s endpoint."""
        return any(_any(rule.profiles, profile) for _, rule in self.applying(caller))

    def tool_refusal(self, caller: Caller, server: str, tool: str) -> str | None:
        """What a denied call answers (one line), or None when *caller* may call *tool*."""
        if self.allows_tool(caller, server, tool):
            return None
        return f"access denied: {who(caller)} may not call {tool!r} (no rule of access: allows it)"

    def profile_refusal(self, caller: Caller, profile: str) -> str | None:
        """What a denied request at *profile*'s endpoint answers (one line), or None."""
        if self.allows_profile(caller, profile):
            return None
        return (
            f"access denied: {who(caller)} may not use profile {profile!r} "
            "(no rule of access: allows it)"
        )


class CallerAccess:
    """The rules of ``access:`` that apply to one caller."""

    __slots__ = ("rules",)

    def __init__(self, rules: tuple[AccessRule, ...]) -> None:
        self.rules = rules

    def allows_tool(self, server: str, tool: str) -> bool:
        """Whether the caller may see and call *tool* (its exposed name) of *server*."""
        return any(
            _any(rule.servers, server) and _any(rule.tools, tool) and not _any(rule.exclude, tool)
            for rule in self.rules
        )

    def allows_server(self, server: str) -> bool:
        """Whether the caller may use *server*'s prompts, resources and resource templates:
        some rule matches it in ``servers`` and allows every tool name
        (:attr:`AccessRule.whole_servers`): a rule written for some tools allows those alone."""
        return any(rule.whole_servers and _any(rule.servers, server) for rule in self.rules)


def who(caller: Caller) -> str:
    """The caller as a denial names it."""
    return repr(caller.user or "anonymous")

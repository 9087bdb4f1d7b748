"""``access:``: who may use which servers, tools and profiles (docs/trust.md#per-user-access).

Rules only allow: without ``access:`` everyone may use everything; with it, a caller may use a
tool, a server's prompts and resources (or open a profile's endpoint) only when some rule whose
identity conditions the caller meets allows it. A rule's identity conditions (``users``, ``claims``) need a verified
credential (a static token or a JWT); a rule without them applies to every caller, also the
local user over stdio and anonymous HTTP callers.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from .model_base import OneOrMany, StrictModel, one_or_many

CLAIM_NAME = r"^[A-Za-z0-9_.:/-]{1,100}$"


class AccessRule(StrictModel):
    """One rule of ``access:``: when its caller conditions hold, the servers, tools and profiles
    it allows (a server's prompts and resources with its tools, unless ``tools`` narrows them). Every condition given must hold; a list matches when any of its globs does."""

    # who: globs on the caller's name (a JWT's ``sub``, a static token's ``token-N``)
    users: OneOrMany | None = None
    # who: a JWT claim's globs (``groups: [admins]``); a list claim matches when any item does
    claims: dict[str, list[str]] = Field(default_factory=dict)
    # what: globs on mount names (``servers.<name>``)
    servers: OneOrMany = Field(default_factory=lambda: ["*"])
    # what: globs on tools' exposed names (the composition's, before a profile renames them)
    tools: OneOrMany = Field(default_factory=lambda: ["*"])
    exclude: OneOrMany = Field(default_factory=list)  # globs on exposed names, taken back out
    # what: globs on profile names (``/mcp/NAME``, or the launch's ``--profile``)
    profiles: OneOrMany = Field(default_factory=lambda: ["*"])

    @field_validator("claims", mode="before")
    @classmethod
    def _claim_globs(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        for name in value:
            if not isinstance(name, str) or not re.match(CLAIM_NAME, name):
                raise ValueError(f"{name!r} is not a claim name (letters, digits, _ . : / -)")
        return {k: one_or_many(v) for k, v in value.items()}

    @property
    def identified(self) -> bool:
        """Whether the rule names who it is for (then only a verified caller can meet it)."""
        return self.users is not None or bool(self.claims)

    @property
    def whole_servers(self) -> bool:
        """Whether the rule allows its servers whole, prompts and resources too: its ``tools``
        holds ``*`` (the default; ``exclude`` takes tools out, not the rest)."""
        return "*" in self.tools

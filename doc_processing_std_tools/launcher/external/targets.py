"""The table entry of a tool whose plain ``tools/call`` may skip fastmcp: relayed to an external
server (:mod:`.relay`, :mod:`.fast_path`) or called directly (an in-process tool's plain call)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .supervisor import Supervisor

# An in-process tool may offer ``async def plain_call(arguments) -> (text, is_error)``: what its
# run() answers, as one text block, needing no request context. When its server behaves as a
# default FastMCP (no middleware, masking, ...), the stdio fast path calls it directly.
PLAIN_CALL = "plain_call"


@dataclass(frozen=True, slots=True)
class RelayTarget:
    """A tool whose plain ``tools/call`` may skip fastmcp: relayed, or called directly."""

    tool: Any  # the exposed GuardedTool: its rules (unavailable, lock, timeout, restarting)
    name: str  # the tool's own name at its server
    supervisor: Supervisor | None = None  # an external server's keeper: relay the call there
    # an in-process tool's own call, ``arguments -> (text, is_error)`` (see ``PLAIN_CALL``)
    plain_call: Callable[[dict[str, Any]], Awaitable[tuple[str, bool]]] | None = None
    # the GuardedTool's settings, read once: a model's attributes are slow to reach
    exposed: str = field(kw_only=True)  # its name in the composition
    locked: bool = field(kw_only=True)
    self_locking: bool = field(kw_only=True)
    timeout: float = field(kw_only=True)
    telemetry: Any = field(default=None, kw_only=True)  # its calls' observer (check .on per call)

    @classmethod
    def of(cls, guard: Any, **where: Any) -> RelayTarget:
        """*guard*'s target, relayed to ``supervisor=`` or called through ``plain_call=``."""
        return cls(
            guard,
            guard.inner_name,
            exposed=guard.name,
            locked=guard.locked,
            self_locking=guard.self_locking,
            timeout=guard.call_timeout,
            telemetry=guard._telemetry,
            **where,
        )

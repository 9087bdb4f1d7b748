"""The table entry of a tool whose plain ``tools/call`` may skip fastmcp: relayed to an external
server (:mod:`.relay`, :mod:`.fast_path`) or called directly (an in-process tool's plain call)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..calls.policed_tools import PolicedTool
from ..calls.policy import CallPolicy

if TYPE_CHECKING:
    from .supervisor import Supervisor

# An in-process tool may offer ``async def plain_call(arguments) -> (text, is_error)``: what its
# run() answers, as one text block, needing no request context. When its server behaves as a
# default FastMCP (no middleware, masking, ...), the stdio fast path calls it directly.
PLAIN_CALL = "plain_call"


@dataclass(frozen=True, slots=True)
class RelayTarget:
    """A tool whose plain ``tools/call`` may skip fastmcp: relayed, or called directly, under
    the exposed tool's :class:`CallPolicy` as on every path."""

    policy: CallPolicy
    name: str  # the tool's own name at its server
    supervisor: Supervisor | None = None  # an external server's keeper: relay the call there
    # an in-process tool's own call, ``arguments -> (text, is_error)`` (see ``PLAIN_CALL``)
    plain_call: Callable[[dict[str, Any]], Awaitable[tuple[str, bool]]] | None = None

    @property
    def exposed(self) -> str:
        """The tool's name in the composition."""
        return self.policy.rules.tool

    @classmethod
    def of(cls, tool: PolicedTool, **where: Any) -> RelayTarget:
        """*tool*'s target, relayed to ``supervisor=`` or called through ``plain_call=``."""
        return cls(tool.policy, tool.inner.name, **where)

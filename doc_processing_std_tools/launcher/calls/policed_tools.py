"""Every tool a mounted server lists, wrapped so that fastmcp's call of it runs through its policy.

The wrapping is done on the tool objects (a transform of the server's provider), so a tool the
server adds after start follows the rules too, and no table of names can go stale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastmcp.server.transforms import Transform
from fastmcp.tools import Tool

from ...seams.fastmcp_server import namespaced_name
from ...seams.fastmcp_tools import RunsAround
from ...telemetry import Telemetry
from .guards import CallGuards
from .policy import CallPolicy, LockMode, ToolRules


class PolicedTool(RunsAround):
    """A tool whose calls run through its :class:`CallPolicy` (``policy``)."""

    _policy: CallPolicy | None = None

    @classmethod
    def of(cls, tool: Tool, policy: CallPolicy) -> PolicedTool:
        policed = cls.wrap(tool, policy.around_fastmcp)
        policed._policy = policy
        return policed

    @property
    def policy(self) -> CallPolicy:
        assert self._policy is not None
        return self._policy

    # (the policy is told the call's arguments: the audit log hashes them)
    async def _run(self, arguments: dict[str, Any]) -> Any:
        inner = self.inner
        return await self.policy.around_fastmcp(lambda: inner._run(arguments), arguments)

    async def run(self, arguments: dict[str, Any]) -> Any:
        inner = self.inner
        return await self.policy.around_fastmcp(lambda: inner.run(arguments), arguments)


@dataclass(frozen=True, slots=True)
class MountRules:
    """What the composition decided for every tool of one mounted server."""

    server: str  # the mount name
    namespace: str | None
    admits: Callable[[str], bool]  # by the tool's own name
    lock_mode: Callable[[Tool], LockMode]
    timeout: float
    unavailable: Callable[[], str | None] | None = None
    call_failed: Callable[[BaseException], str | None] | None = None
    # a server that needs a login lists its cached tools while down
    lists_while_down: Callable[[], bool] | None = None
    telemetry: Telemetry | None = None
    guards: CallGuards | None = None  # the audit log and rate limits


class PolicedListing(Transform):
    """A mounted server's tools as the composition serves them: only those its rules admit, each
    a :class:`PolicedTool`; while its server is down, the tools last listed (calls to them are
    refused with the reason)."""

    def __init__(self, rules: MountRules) -> None:
        self._rules = rules
        self.last_seen: dict[str, Tool] = {}  # the tools listed while the server was up
        self._wrapped: dict[int, tuple[Tool, PolicedTool]] = {}  # id(tool) -> (tool, its wrap)

    def policed(self, tool: Tool) -> PolicedTool:
        """The wrap of *tool*, made once per tool object: every call looks the tool up, and
        copying a pydantic model per call is most of the launcher's own cost."""
        hit = self._wrapped.get(id(tool))
        if hit is not None and hit[0] is tool:  # the entry holds *tool*: its id is not reused
            return hit[1]
        rules = self._rules
        policy = CallPolicy(
            ToolRules(
                server=rules.server,
                tool=namespaced_name(rules.namespace, tool.name),
                lock=rules.lock_mode(tool),
                timeout=rules.timeout,
                unavailable=rules.unavailable,
                call_failed=rules.call_failed,
            ),
            rules.telemetry,
            rules.guards,
        )
        policed = PolicedTool.of(tool, policy)
        if len(self._wrapped) >= 4096:  # tools made per request (a proxy's) must not pile up
            self._wrapped.clear()
        self._wrapped[id(tool)] = (tool, policed)
        return policed

    def _down(self) -> bool:
        rules = self._rules
        if rules.lists_while_down is not None and rules.lists_while_down():
            return False
        return rules.unavailable is not None and rules.unavailable() is not None

    async def list_tools(self, tools: Sequence[Tool]) -> Sequence[Tool]:
        if self._down():
            return list(self.last_seen.values())
        admits = self._rules.admits
        listed = [self.policed(tool) for tool in tools if admits(tool.name)]
        if any(not tool.task_config.supports_tasks() for tool in tools):
            self.last_seen = {tool.name: tool for tool in listed}
        else:
            # fastmcp's start-up pass (``get_tasks``) hands transforms the tools that run as
            # tasks only (none, for a proxy): replacing the list with those would leave a server
            # that goes down with no tools, its calls "unknown" instead of refused
            self.last_seen.update((tool.name, tool) for tool in listed)
        return listed

    async def get_tool(self, name: str, call_next: Any, *, version: Any = None) -> Tool | None:
        if not self._rules.admits(name):
            return None
        if self._down():
            return self.last_seen.get(name)
        tool = await call_next(name, version=version)
        return self.policed(tool) if tool is not None else None


def policy_of(tool: Any) -> CallPolicy | None:
    """The policy of an exposed tool, or None for a tool the composition did not wrap."""
    return tool.policy if isinstance(tool, PolicedTool) else None

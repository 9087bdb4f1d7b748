"""Every tool a mounted server lists, wrapped so that fastmcp's call of it runs through its policy.

The wrapping is done on the tool objects (a transform of the server's provider), so a tool the
server adds after start follows the rules too, and no table of names can go stale. The same
transform holds the pins (:mod:`.pin_gate`): a tool, prompt or resource template whose
definition is not the approved one is left out of every list, and a call of such a tool is
refused by its policy, on every path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from fastmcp.exceptions import ToolError
from fastmcp.server.transforms import Transform
from fastmcp.tools import Tool

from ...seams.fastmcp_server import namespaced_name
from ...seams.fastmcp_tools import RunsAround
from ...telemetry import Telemetry
from .guards import CallGuards
from .pin_gate import PinGate
from .pins import Finding, Kind
from .policy import CallPolicy, LockMode, ToolRules

# The ToolErrors that calls fastmcp serves ended with, noted for whoever set a list here (the
# relay, around a call it leaves to fastmcp): fastmcp answers a ToolError as an isError text,
# and the server's JSON-RPC error it came from (its code and data) is then only in this chain.
ENDED_WITH: ContextVar[list[ToolError] | None] = ContextVar("dpt_ended_with", default=None)
# The metrics' tool label of every unlisted call (a name a client made up, which its server did
# not list): one series per server, however many names clients try; spans keep the name.
UNLISTED_LABEL = "(unlisted)"


class PolicedTool(RunsAround):
    """A tool whose calls run through its :class:`CallPolicy` (``policy``)."""

    _policy: CallPolicy | None = None
    _shown: Callable[[Any], Any] | None = None  # what a result becomes for the client

    @classmethod
    def of(
        cls, tool: Tool, policy: CallPolicy, shown: Callable[[Any], Any] | None = None
    ) -> PolicedTool:
        policed = cls.wrap(tool, policy.around_fastmcp)
        policed._policy, policed._shown = policy, shown
        return policed

    @property
    def policy(self) -> CallPolicy:
        assert self._policy is not None
        return self._policy

    # (the policy is told the call's arguments: the audit log hashes them)
    async def _run(self, arguments: dict[str, Any]) -> Any:
        inner = self.inner
        return await self._policed(lambda: inner._run(arguments), arguments)

    async def run(self, arguments: dict[str, Any]) -> Any:
        inner = self.inner
        return await self._policed(lambda: inner.run(arguments), arguments)

    async def _policed(self, call: Callable[[], Awaitable[Any]], arguments: dict[str, Any]) -> Any:
        """*call* under the policy; a ToolError it ends with is noted for the relay."""
        try:
            result = await self.policy.around_fastmcp(call, arguments)
        except ToolError as exc:
            _note(exc)
            raise
        return result if self._shown is None else self._shown(result)


def _note(exc: ToolError) -> None:
    noted = ENDED_WITH.get()
    if noted is not None:
        noted.append(exc)


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
    pins: PinGate | None = None  # the lock file's verdicts (None: everything is served)
    # what a call's result becomes before the client reads it (an external server's resource
    # links under the namespace)
    shown: Callable[[Any], Any] | None = None


# Wraps kept per mount, at least. A mounted proxy's tools are new objects on every list and every
# call (fastmcp wraps each afresh), so their wraps never hit: with room for 4096 of them, each HTTP
# session's tools/list of server-everything, server-filesystem and server-memory held 0.55 MB more
# (USS, smaps_rollup) until a mount's 4096 were reached. A mount's own tools (listed once, the same
# objects on every call) fit twice over.
MIN_WRAPPED = 64


class PolicedListing(Transform):
    """A mounted server's tools as the composition serves them: only those its rules admit, each
    a :class:`PolicedTool`; while its server is down, the tools last listed (calls to them are
    refused with the reason)."""

    def __init__(self, rules: MountRules) -> None:
        self._rules = rules
        self.last_seen: dict[str, Tool] = {}  # the tools listed while the server was up
        # id(tool) -> (tool, its wrap, its definition, the pins' verdict on it)
        self._wrapped: dict[int, tuple[Tool, PolicedTool, dict[str, Any], Finding | None]] = {}
        self._generation = rules.pins.generation if rules.pins is not None else 0

    def policed(self, tool: Tool) -> PolicedTool:
        """The wrap of *tool*, made once per tool object: every call looks the tool up, and
        copying a pydantic model per call is most of the launcher's own cost."""
        return self._entry(tool)[1]

    def _entry(self, tool: Tool) -> tuple[Tool, PolicedTool, dict[str, Any], Finding | None]:
        rules = self._rules
        pins = rules.pins
        if pins is not None and pins.generation != self._generation:  # (a reload's lock file)
            self._wrapped.clear()
            self._generation = pins.generation
        hit = self._wrapped.get(id(tool))
        if hit is not None and hit[0] is tool:  # the entry holds *tool*: its id is not reused
            return hit
        exposed = namespaced_name(rules.namespace, tool.name)
        definition: dict[str, Any] = {}
        finding = None
        if pins is not None:
            definition = tool.to_mcp_tool().model_dump(
                mode="json", by_alias=True, exclude_none=True
            )
            finding = pins.judge(rules.server, "tools", definition)
        policy = self._policy(
            tool,
            exposed,
            withheld=(
                pins.refusal(finding, exposed)
                if pins is not None and finding is not None and not pins.serves(finding)
                else None
            ),
            pin=(
                finding.problem
                if finding is not None
                else "pinned"
                if pins is not None and pins.pins is not None
                else None
            ),
        )
        entry = (tool, PolicedTool.of(tool, policy, rules.shown), definition, finding)
        if len(self._wrapped) >= max(MIN_WRAPPED, 2 * len(self.last_seen)):
            self._wrapped.clear()
        self._wrapped[id(tool)] = entry
        return entry

    def unlisted(self, name: str) -> PolicedTool | None:
        """A tool *name* (the server's own) that the server did not list, under this mount's
        rules, so that a call of it may still be asked of the server (whose answer is then its
        own); None when the rules leave it out, or pins judge definitions (an unlisted tool has
        none to judge)."""
        pins = self._rules.pins
        if (pins is not None and pins.pins is not None) or not self._rules.admits(name):
            return None
        tool = Tool(name=name, parameters={"type": "object"})
        exposed = namespaced_name(self._rules.namespace, name)
        policy = self._policy(tool, exposed, metric_tool=UNLISTED_LABEL)
        return PolicedTool.of(tool, policy, self._rules.shown)

    def _policy(
        self,
        tool: Tool,
        exposed: str,
        *,
        withheld: str | None = None,
        pin: str | None = None,
        metric_tool: str | None = None,
    ) -> CallPolicy:
        """The :class:`CallPolicy` of *tool* (exposed as *exposed*) under this mount's rules:
        listed and unlisted tools alike."""
        rules = self._rules
        return CallPolicy(
            ToolRules(
                server=rules.server,
                tool=exposed,
                lock=rules.lock_mode(tool),
                timeout=rules.timeout,
                unavailable=rules.unavailable,
                call_failed=rules.call_failed,
                withheld=withheld,
                pin=pin,
                metric_tool=metric_tool,
            ),
            rules.telemetry,
            rules.guards,
        )

    def _down(self) -> bool:
        rules = self._rules
        if rules.lists_while_down is not None and rules.lists_while_down():
            return False
        return rules.unavailable is not None and rules.unavailable() is not None

    async def list_tools(self, tools: Sequence[Tool]) -> Sequence[Tool]:
        if self._down():
            return list(self.last_seen.values())
        admits = self._rules.admits
        entries = [self._entry(tool) for tool in tools if admits(tool.name)]
        full = any(not tool.task_config.supports_tasks() for tool in tools)
        pins = self._rules.pins
        if pins is not None:
            pins.listed(
                self._rules.server,
                "tools",
                {entry[0].name: entry[2] for entry in entries},
                {entry[0].name: entry[3] for entry in entries},
                full=full,
            )
            entries = [entry for entry in entries if pins.serves(entry[3])]
        listed = [entry[1] for entry in entries]
        if full:
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
        return self.policed(tool) if tool is not None else None  # (its policy may refuse it)

    # -- prompts and resource templates: listed only when their definition is approved --------

    async def list_prompts(self, prompts: Sequence[Any]) -> Sequence[Any]:
        return self._judged("prompts", prompts, lambda p: p.to_mcp_prompt())

    async def get_prompt(self, name: str, call_next: Any, *, version: Any = None) -> Any:
        found = await call_next(name, version=version)
        return found if found is None or self._serves("prompts", found.to_mcp_prompt()) else None

    async def list_resource_templates(self, templates: Sequence[Any]) -> Sequence[Any]:
        return self._judged("resourceTemplates", templates, lambda t: t.to_mcp_template())

    async def get_resource_template(self, uri: str, call_next: Any, *, version: Any = None) -> Any:
        found = await call_next(uri, version=version)
        if found is None or self._serves("resourceTemplates", found.to_mcp_template()):
            return found
        return None

    def _judged(self, kind: Kind, items: Sequence[Any], as_mcp: Callable[[Any], Any]) -> list[Any]:
        pins = self._rules.pins
        if pins is None or self._down():
            return list(items)
        definitions = {
            item.name: as_mcp(item).model_dump(mode="json", by_alias=True, exclude_none=True)
            for item in items
        }
        server = self._rules.server
        verdicts = {name: pins.judge(server, kind, d) for name, d in definitions.items()}
        # (fastmcp's start-up pass hands over those that run as tasks only: not the whole list)
        full = any(not item.task_config.supports_tasks() for item in items)
        pins.listed(server, kind, definitions, verdicts, full=full)
        return [item for item in items if pins.serves(verdicts[item.name])]

    def _serves(self, kind: Kind, mcp: Any) -> bool:
        pins = self._rules.pins
        if pins is None:
            return True
        definition = mcp.model_dump(mode="json", by_alias=True, exclude_none=True)
        return pins.serves(pins.judge(self._rules.server, kind, definition))


def policy_of(tool: Any) -> CallPolicy | None:
    """The policy of an exposed tool, or None for a tool the composition did not wrap."""
    return tool.policy if isinstance(tool, PolicedTool) else None

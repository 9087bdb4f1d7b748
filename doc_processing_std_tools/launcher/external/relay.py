"""Tool calls that skip fastmcp's dispatch: external servers' relayed, plain in-process ones direct.

:class:`ToolRelay` is the first middleware of the composed server's SDK server; it
relays external servers' ``tools/call`` on their sessions. Its :meth:`~ToolRelay.fast_targets`
is the table of the stdio fast path (:mod:`.fast_path`), which adds in-process tools that
offer a plain call (:data:`.targets.PLAIN_CALL`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import mcp_types
from fastmcp.exceptions import ToolError
from fastmcp.server.middleware.dereference import DereferenceRefsMiddleware
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from mcp_types.methods import validate_client_request
from pydantic import ValidationError

from ...locking import CALL_ARRIVAL
from ...seams.client_sessions import send_raw_request
from ...seams.fastmcp_server import behaves_as_default, low_level_server
from ...seams.server_sessions import initialize_accepted, session_connection
from ..calls.policed_tools import ENDED_WITH, PolicedTool
from .fast_path import FastPath
from .relay_lines import HANDSHAKE_ERA, MODERN_ERA, ErrorReply, server_error
from .relay_targets import PLAIN_CALL, RelayTarget
from .result_links import exposed_links

if TYPE_CHECKING:
    from fastmcp import FastMCP

    from .supervisor import Supervisor

RELAYED_PARAMS = frozenset({"name", "arguments", "_meta", "task"})


class RelayedMount(Protocol):
    """What the relay reads of a mounted server (``compose.Mount``)."""

    @property
    def server(self) -> FastMCP: ...
    @property
    def supervisor(self) -> Supervisor | None: ...
    @property
    def tools(self) -> Sequence[Any]: ...


class HasMounts(Protocol):
    """What holds the composition's current mounts (a reload swaps them)."""

    @property
    def mounts(self) -> Sequence[RelayedMount]: ...


class ToolRelay:
    """Answers ``tools/call`` for external servers' tools by relaying it on their open sessions.

    fastmcp's proxy serves each call through a second FastMCP server and its
    client wrapper, which halved per-call throughput (``benchmarks/external.py``).
    Installed first in the SDK server's middleware chain, this sends the call's
    name and arguments on the external server's session and passes its result
    back unchanged (content, structuredContent, isError, _meta), under the same
    rules as every mounted tool: the exposed tool's :class:`CallPolicy` (unavailable,
    lock, timeout with cancellation at the server, restarting); progress reports
    are passed on. Whatever it does not serve plainly goes the normal way through
    fastmcp: a tool it does not know (listed later, or filtered out), params
    beyond name, arguments and _meta, a 2026-era task-augmented call, and any root
    middleware or transform that must see calls (a server's JSON-RPC error still
    reaches the client as that error: :meth:`_step_aside`). Over stdio, calls to a
    ``command:`` server's tools skip even this: :attr:`fast` (``launcher/external/fast_path.py``)
    serves them from the raw lines, under the same rules.
    """

    def __init__(
        self, root: FastMCP, composition: HasMounts, inert_middleware: tuple[type, ...] = ()
    ) -> None:
        """*inert_middleware*: root middleware types that need not see calls (beside fastmcp's
        default), so the relay may serve them plainly."""
        self._root = root
        self._composition = composition
        self._seen: Sequence[RelayedMount] | None = None
        self._targets: dict[str, RelayTarget] = {}
        self._fast_targets: dict[str, RelayTarget] = {}
        self._fast_seen: Sequence[RelayedMount] | None = None
        self._fast_middleware = -1
        self._inert_middleware = (*inert_middleware, DereferenceRefsMiddleware)
        # _meta keys that describe one connection: never carried across the relay
        self._connection_keys = frozenset(
            {
                mcp_types.PROTOCOL_VERSION_META_KEY,
                mcp_types.CLIENT_INFO_META_KEY,
                mcp_types.CLIENT_CAPABILITIES_META_KEY,
                mcp_types.SERVER_INFO_META_KEY,
            }
        )
        self._dropped_meta = self._connection_keys | {"progressToken"}
        self.fast = FastPath(self)  # stdio connections: relayed calls skip the SDK entirely

    def serves_plainly(self) -> bool:
        """No root middleware or transform needs to see calls (then they may be relayed)."""
        if self._root.transforms:
            return False
        for middleware in self._root.middleware:
            if type(middleware) not in self._inert_middleware:
                return False
        return True

    def fast_targets(self) -> dict[str, RelayTarget]:
        """:meth:`targets`, or none while root middleware must see calls (:meth:`serves_plainly`):
        the stdio fast path's table, asked per call. Rebuilt when the mounts or the root's
        middleware change; the root's transforms are checked then (the composition adds none)."""
        mounts = self._composition.mounts
        if mounts is not self._fast_seen or len(self._root.middleware) != self._fast_middleware:
            self._fast_targets = self.targets() if self.serves_plainly() else {}
            self._fast_seen, self._fast_middleware = mounts, len(self._root.middleware)
        return self._fast_targets

    def targets(self) -> dict[str, RelayTarget]:
        """Exposed tool name -> where to relay it; rebuilt when a reload swaps the mounts."""
        mounts = self._composition.mounts
        if mounts is not self._seen:
            self._targets = {}
            for mount in mounts:
                plain = mount.supervisor is None and behaves_as_default(mount.server)
                for tool in mount.tools:
                    if not isinstance(tool, PolicedTool):
                        continue
                    if mount.supervisor is not None:
                        self._targets[tool.name] = RelayTarget.of(tool, supervisor=mount.supervisor)
                    elif plain and (call := getattr(tool.inner, PLAIN_CALL, None)) is not None:
                        self._targets[tool.name] = RelayTarget.of(tool, plain_call=call)
            self._seen = mounts
        return self._targets

    def _target(self, ctx: Any) -> RelayTarget | None:
        if not self._plain_call(ctx):
            return None
        target = self.targets().get(ctx.params.get("name"))
        if target is None or target.supervisor is None or not self._as_the_sdk_would(ctx):
            return None
        return target

    def _plain_call(self, ctx: Any) -> bool:
        """A ``tools/call`` the relay may serve, if it knows where (its name is a string)."""
        params = ctx.params
        return (
            ctx.method == "tools/call"
            and ctx.request_id is not None
            and isinstance(params, Mapping)
            and self._era_relayed(ctx.protocol_version, params)
            and RELAYED_PARAMS.issuperset(params)
            and isinstance(params.get("name"), str)
            and self.serves_plainly()
        )

    async def relay_unlisted(self, ctx: Any, target: RelayTarget) -> Any | None:
        """Relay *ctx*'s call to *target*, a tool its server did not list (``compose``'s
        ``UnlistedCalls`` decides which); None when the call is not one the relay may serve."""
        if target.supervisor is None or not self._plain_call(ctx):
            return None
        if not self._as_the_sdk_would(ctx):
            return None
        return await self._relay(target, ctx)

    def _era_relayed(self, version: Any, params: Mapping[str, Any]) -> bool:
        """Whether a call of this protocol era is relayed: any handshake-era one; a 2026-era
        (stateless) one unless it asks for a task (that era's tasks are an extension the
        launcher does not serve; fastmcp answers it as it would alone)."""
        if version in HANDSHAKE_ERA:
            return True
        return version in MODERN_ERA and "task" not in params

    def _as_the_sdk_would(self, ctx: Any) -> bool:
        """Whether the SDK itself would hand this call to a handler: the connection is
        initialized and the params pass its validation. Otherwise the call goes on down the
        chain, and the SDK answers it as it would alone (-32602)."""
        if not initialize_accepted(ctx.session):
            return False
        handler = low_level_server(self._root).get_request_handler(ctx.method)
        try:  # (the spec's surface, then the handler's own model: both as ServerRunner does)
            validate_client_request(ctx.method, ctx.protocol_version, ctx.params)
            if handler is not None:
                handler.params_type.model_validate(ctx.params, by_name=False)
        except (ValidationError, KeyError):
            return False
        return True

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        answer = await self._answer(ctx, call_next)
        if (
            isinstance(answer, dict)
            and ctx.protocol_version in MODERN_ERA
            and "resultType" not in answer
        ):
            # (what the relay answers itself: a 2026-era result must say its type, and a
            # handshake-era server's says none)
            answer["resultType"] = "complete"
        return answer

    async def _answer(self, ctx: Any, call_next: Any) -> Any:
        target = self._target(ctx)
        if target is None:
            if not getattr(self._composition, "starting", None):  # (servers still starting)
                return await self._step_aside(ctx, call_next)
            arrived = CALL_ARRIVAL.set(time.monotonic())  # (its timeout counts from now)
            try:
                reason = await self._until_started(ctx)
                if reason:
                    return {"content": [{"type": "text", "text": reason}], "isError": True}
                if reason is None or (target := self._target(ctx)) is None:
                    return await self._step_aside(ctx, call_next)
                return await self._relay(target, ctx)
            finally:
                CALL_ARRIVAL.reset(arrived)
        return await self._relay(target, ctx)

    async def _step_aside(self, ctx: Any, call_next: Any) -> Any:
        """The request goes the normal way, through fastmcp (path (g): a 2026-era connection,
        extra params, root middleware). An external server's JSON-RPC error for a call still
        reaches the client as that error, as on the relayed paths; fastmcp would answer it as
        an ``isError`` text."""
        if ctx.method != "tools/call" or not self._external(ctx.params):
            return await call_next(ctx)
        ended: list[ToolError] = []
        noting = ENDED_WITH.set(ended)
        try:
            result = await call_next(ctx)
        finally:
            ENDED_WITH.reset(noting)
        if ended:
            error = _servers_own(ended[-1])
            if error is not None:
                raise MCPError(error["code"], error["message"], error.get("data"))
        return result

    def _external(self, params: Any) -> bool:
        """Whether *params* call a tool of a ``command:`` or ``url:`` server."""
        name = params.get("name") if isinstance(params, Mapping) else None
        target = self.targets().get(name) if isinstance(name, str) else None
        return target is not None and target.supervisor is not None

    async def _relay(self, target: RelayTarget, ctx: Any) -> Any:
        params: Mapping[str, Any] = ctx.params
        try:
            result = await target.policy.run(
                lambda: self._forward(target, params, ctx.session, ctx.request_id),
                meta=params.get("_meta"),
                headers=getattr(ctx.request, "headers", None),  # (HTTP: a Starlette request)
                session=ctx.session,
                arguments=params.get("arguments"),
            )
        except ErrorReply as exc:  # the server's own JSON-RPC error, as it is
            error = exc.error
            raise MCPError(error["code"], error["message"], error.get("data")) from None
        except Exception as exc:
            text = str(target.policy.failed(exc))
            return {"content": [{"type": "text", "text": text}], "isError": True}
        assert target.supervisor is not None  # (_target takes relayed tools only)
        task = result.get("task")
        if isinstance(task, dict) and isinstance(task.get("taskId"), str):
            target.supervisor.front.made_task(task["taskId"], ctx.session)  # (tasks/* go there)
        result = exposed_links(result, target.supervisor.entry.namespace)
        meta = result.get("_meta")
        if isinstance(meta, dict) and not self._connection_keys.isdisjoint(meta):
            result["_meta"] = {k: v for k, v in meta.items() if k not in self._connection_keys}
        return result

    async def _until_started(self, ctx: Any) -> str | None:
        """A call to a tool nothing exposes while external servers are still starting waits
        for them, within the call's timeout (``Composition.until_started``): why it cannot go
        on, "" when it waited and may now find its tool, None when there was nothing to wait for.
        """
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping):
            return None
        name = params.get("name")
        if not isinstance(name, str):
            return None
        return await self._composition.until_started(name) or ""  # type: ignore[attr-defined]

    async def _forward(
        self, target: RelayTarget, params: Mapping[str, Any], caller: Any, request_id: Any
    ) -> dict[str, Any]:
        """Send the call on the server's session; its progress, and what the server asks of the
        client meanwhile (sampling, elicitation, roots, logs), go to *caller* (the front session),
        tied to its request *request_id*."""
        out: dict[str, Any] = {"name": target.name, "arguments": params.get("arguments") or {}}
        if "task" in params:  # (a task-augmented call: the server answers with its task)
            out["task"] = params["task"]
        meta = params.get("_meta") or {}
        # The caller's progress token stays on the front connection: the session asks the
        # server for progress with a token of its own and each report is passed on.
        kept = {k: v for k, v in meta.items() if k not in self._dropped_meta}
        kept = target.policy.relayed_params({"_meta": kept}).get("_meta") or {}
        if kept:
            out["_meta"] = kept
        on_progress = caller.report_progress if "progressToken" in meta else None
        assert target.supervisor is not None  # (_target takes relayed tools only)
        stateless = getattr(session_connection(caller), "protocol_version", None) in MODERN_ERA
        if target.supervisor.subject() is not None or stateless:
            # A signed-in user's own session, or a 2026-era request (it stands alone, and the
            # server cannot ask its client anything): nothing the server asks reaches a
            # client, so the call neither waits for client sessions' turns nor stands for theirs.
            return await self._send(target, out, on_progress, None, request_id)
        own = await target.supervisor.own_session(caller)
        if own is not None and own.link is not None:
            # The client session's own upstream session: what the server asks is its client's.
            return await self._send(target, out, on_progress, caller, request_id, own)
        front = target.supervisor.front
        # One client session's calls at a time: what the server asks meanwhile is that session's.
        async with front.turns.turn(caller):
            return await self._send(target, out, on_progress, caller, request_id)

    async def _send(
        self,
        target: RelayTarget,
        out: dict[str, Any],
        on_progress: Any,
        caller: Any,
        request_id: Any,
        own: Any = None,
    ) -> dict[str, Any]:
        """*own*: the caller's own pooled session (:meth:`.Supervisor.own_session`)."""
        assert target.supervisor is not None
        if own is not None:
            front, client = own.link, own.client
        else:
            front, client = target.supervisor.front, await target.supervisor.client(caller)
        # The SDK tells the server of a cancelled call with a shielded write that may take 5 s
        # when the server hangs; that write goes on in the background, so the caller's timeout
        # answers on time.
        request = asyncio.ensure_future(
            send_raw_request(client, "tools/call", out, on_progress=on_progress)
        )
        try:
            with front.calling(caller, request_id) if caller is not None else nullcontext():
                return await asyncio.shield(request)
        except asyncio.CancelledError:
            request.cancel()
            _ABANDONED.add(request)
            request.add_done_callback(_forget_abandoned)
            raise
        except MCPError as exc:
            passed = _passed_on(exc)
            if passed is not None:
                raise ErrorReply(target.exposed, passed) from exc
            raise ToolError(f"Error calling tool {target.exposed!r}: {exc.message}") from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise ToolError(
                f"Error calling tool {target.exposed!r}: the connection closed"
            ) from exc


def _passed_on(exc: MCPError) -> dict[str, Any] | None:
    """The server's JSON-RPC error *exc* as the client gets it (bounded: ``server_error``), or
    None when it says the connection is gone (the launcher answers that itself)."""
    # here, not at the top: session_transports imports fastmcp's client (~170 ms, its
    # auth module and key_value), which a launcher without external servers never needs
    from .session_transports import is_connection_loss

    if exc.code == CONNECTION_CLOSED or is_connection_loss(exc):
        return None
    return server_error(
        {"error": exc.error.model_dump(by_alias=True, mode="json", exclude_none=True)}
    )


def _servers_own(exc: BaseException) -> dict[str, Any] | None:
    """The server's JSON-RPC error a call fastmcp served ended with (*exc*, a ``ToolError``,
    raised from it), as :func:`_passed_on` passes it; None for any other failure. An
    ``MCPError`` raised from something else is fastmcp's word for a failure, not the
    server's reply (its proxy's "Client failed to connect")."""
    cause, seen = exc.__cause__, 0
    while cause is not None and seen < 10:
        if isinstance(cause, MCPError):
            return _passed_on(cause) if cause.__cause__ is None else None
        cause, seen = cause.__cause__, seen + 1
    return None


_ABANDONED: set[asyncio.Future[Any]] = set()  # cancelled relayed calls still telling their server


def _forget_abandoned(request: asyncio.Future[Any]) -> None:
    _ABANDONED.discard(request)
    if not request.cancelled():
        request.exception()  # (retrieved: an abandoned call's failure is nobody's to report)


def relay_of(server: FastMCP) -> ToolRelay | None:
    """*server*'s :class:`ToolRelay`, when it relays any calls."""
    for middleware in getattr(low_level_server(server), "middleware", ()):
        if isinstance(middleware, ToolRelay):
            return middleware
    return None


def fast_path_of(server: FastMCP) -> FastPath | None:
    """The fast path of *server*'s relayed calls, when it relays any (see :class:`ToolRelay`)."""
    relay = relay_of(server)
    return relay.fast if relay is not None else None

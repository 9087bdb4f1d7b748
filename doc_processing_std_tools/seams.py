"""Every fastmcp / mcp detail the launcher relies on beyond their documented API, in one place.

``tests/test_seams.py`` pins each behaviour used here, so a fastmcp upgrade that
changes one of them fails that test rather than the launcher. Keep this module
small: anything that works through public API belongs elsewhere.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.providers import Provider
    from fastmcp.tools import Tool
    from mcp.server.lowlevel import Server

    from .telemetry import Telemetry


def lifespan_manager(server: FastMCP) -> AbstractAsyncContextManager[Any]:
    """Runs the server's lifespan and every mounted provider's (``FastMCP._lifespan_manager``)."""
    return server._lifespan_manager()


def low_level_server(server: FastMCP) -> Server[Any]:
    """The mcp SDK server that speaks the protocol for *server* (``FastMCP._mcp_server``)."""
    return server._mcp_server


def session_manager(event_store: Any = None, **options: Any) -> Any:
    """The mcp SDK's ``StreamableHTTPSessionManager`` with *options*, each session's stream ids
    kept apart in the shared *event_store* (as fastmcp's own manager does: the SDK reads
    ``self.event_store`` once per transport, so a property hands each its own
    ``SessionScopedEventStore``; without it, request id 1 of two sessions would share a stream)."""
    from uuid import uuid4

    from fastmcp.server.session_scoped_event_store import SessionScopedEventStore
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    class ScopedSessions(StreamableHTTPSessionManager):
        _shared_event_store: Any = None

        @property
        def event_store(self) -> Any:
            if self._shared_event_store is None:
                return None
            return SessionScopedEventStore(self._shared_event_store, session_id=uuid4().hex)

        @event_store.setter
        def event_store(self, value: Any) -> None:
            self._shared_event_store = value

    return ScopedSessions(event_store=event_store, **options)


def initialize_accepted(session: Any) -> bool:
    """Whether the SDK's request gate is open for *session*'s connection (``initialize`` done):
    what ``ServerRunner`` checks before a handler runs (``ServerSession._connection``)."""
    return bool(session._connection.initialize_accepted)


def additional_http_routes(server: FastMCP) -> list[Any]:
    """Routes the server's own components add to its HTTP app (``_get_additional_http_routes``)."""
    return list(server._get_additional_http_routes())


def behaves_as_default(server: FastMCP) -> bool:
    """True when nothing about *server* differs from a fresh ``FastMCP()`` but its components.

    Then serving its providers from the root is indistinguishable from serving the
    server itself: no lifespan, transforms, middleware (beyond fastmcp's default),
    auth, error masking or any other setting of its own.
    """
    from fastmcp import FastMCP
    from fastmcp.server.middleware.dereference import DereferenceRefsMiddleware
    from fastmcp.server.server import default_lifespan

    if (
        getattr(server, "_lifespan", None) is not default_lifespan
        or server.transforms
        or server.auth is not None
        or not all(type(m) is DereferenceRefsMiddleware for m in server.middleware)
        or type(server) is not FastMCP
    ):
        return False
    probe = vars(FastMCP("probe"))
    scalar = (bool, int, float, str, type(None))
    return all(
        value == probe.get(key)
        for key, value in vars(server).items()
        if isinstance(value, scalar) and key in probe
    )


def local_tools(server: FastMCP) -> list[Any]:
    """The tool objects registered on *server* itself (``LocalProvider._components``).

    Read synchronously, right after registration; the public ``list_tools`` is async
    and returns the tools after the server's transforms, not the stored objects.
    """
    from fastmcp.tools import Tool

    components = server.local_provider._components
    return [c for c in components.values() if isinstance(c, Tool)]


def retype_tool(tool: Tool, cls: type[Tool]) -> None:
    """Make the stored *tool* an instance of its subclass *cls* in place.

    The server keeps calling the same object (its key, schema and settings unchanged);
    only the methods *cls* overrides change.
    """
    if not issubclass(cls, type(tool)):
        raise TypeError(f"{cls.__name__} is not a subclass of {type(tool).__name__}")
    tool.__class__ = cls


def session_connection(session: Any) -> Any:
    """The mcp connection a server session belongs to (``ServerSession._connection``).

    The session object may be a per-request view; the connection is one per client
    and holds the per-connection ``state`` dict. *session* itself when it has none.
    """
    return getattr(session, "_connection", session)


def client_log_level(session: Any) -> str | None:
    """The least level the client of *session* asked for with ``logging/setLevel``, or None.

    fastmcp keeps it in the connection's ``state`` (``context._get_client_log_level``);
    a server's own log messages passed on by the launcher follow the same level.
    """
    from fastmcp.server.context import _get_client_log_level

    return _get_client_log_level(session)


def answer_server_requests(client: Any, *, sampling: Any, elicitation: Any, roots: Any) -> None:
    """Answer a fastmcp ``Client``'s server-initiated requests with SDK callbacks as they are.

    fastmcp's ``sampling_handler``/``elicitation_handler``/``roots`` wrap a handler so that
    any error becomes -32603 and an elicitation's content is re-typed; a relay passes the
    client's answer and error on unchanged, so it sets the session's callbacks itself
    (``Client._session_kwargs``, read when the session opens). The SDK session then
    declares sampling (with ``tools``), elicitation and roots (``listChanged``) in
    ``initialize``.
    """
    import mcp_types

    kwargs = client._session_kwargs
    kwargs["sampling_callback"] = sampling
    kwargs["sampling_capabilities"] = mcp_types.SamplingCapability(
        tools=mcp_types.SamplingToolsCapability()
    )
    kwargs["elicitation_callback"] = elicitation
    kwargs["list_roots_callback"] = roots


def mounted_provider(
    server: FastMCP,
    *,
    label: str,
    namespace: str | None,
    admits: Callable[[str], bool],
    needs_lock: Callable[[Tool], bool],
    timeout: float,
    unavailable: Callable[[], str | None] | None = None,
    call_failed: Callable[[BaseException], str | None] | None = None,
    self_locking: bool = False,
    lists_while_down: Callable[[], bool] | None = None,
    telemetry: Telemetry | None = None,
) -> Provider:
    """*server* as ``FastMCP.mount`` would add it, with the launcher's rules around its tools.

    A server with settings of its own is mounted whole (its middleware, error
    masking and lifespan all apply, exactly as when it runs alone); one with none
    has its providers served directly (:func:`behaves_as_default`). Only tools whose own name *admits*
    are exposed. Every call must finish within *timeout* seconds, and tools for
    which *needs_lock* is true hold :data:`locking.PROCESS_LOCK` while they run.
    The rules wrap the tool objects, so a tool the server adds after start
    follows them too; no table of names can go stale. While *unavailable* gives a
    reason (an external server restarting), the last tools seen stay listed and
    calls to them fail with that reason (unless *lists_while_down* says the server lists its
    tools anyway: a server that needs a login serves its cached list). A *self_locking* server's tools take the lock
    themselves around their disk work: the launcher only admits them
    (:func:`locking.admit_self_locking`) instead of holding it for the whole call.
    Each call is observed by *telemetry* (metrics, a span) while it is on.
    """
    from fastmcp.server.providers.aggregate import AggregateProvider
    from fastmcp.server.providers.fastmcp_provider import FastMCPProvider
    from fastmcp.server.transforms import Namespace

    rules = _rules_transform(
        label,
        admits,
        needs_lock,
        timeout,
        unavailable,
        call_failed,
        self_locking,
        lists_while_down,
        telemetry,
    )
    # A server with every setting at fastmcp's defaults behaves the same when its providers
    # are grafted onto the root: one dispatch layer fewer (per-call cost, benchmarks/run.py).
    inner: Provider = (
        AggregateProvider(list(server.providers))
        if behaves_as_default(server)
        else FastMCPProvider(server)
    )
    provider: Provider = inner.wrap_transform(rules)
    if namespace:
        provider = provider.wrap_transform(Namespace(namespace))
    return provider


def exposed_only(provider: Provider, allows: Callable[[str, str], bool]) -> Provider:
    """*provider* showing only what *allows* ``(kind, key)`` lets through: kind ``tool`` (key: the
    exposed name), ``prompt`` (its name) or ``resource`` (a URI or URI template), for lists and
    look-ups alike, so a name another server owns can neither be listed nor called here."""
    from fastmcp.server.transforms import Transform

    class Exposed(Transform):
        async def list_tools(self, tools: Sequence[Any]) -> Sequence[Any]:
            return [tool for tool in tools if allows("tool", tool.name)]

        # (a look-up asks every server: only one that has the name may be told it is hidden)
        async def get_tool(self, name: str, call_next: Any, *, version: Any = None) -> Any:
            found = await call_next(name, version=version)
            return found if found is not None and allows("tool", name) else None

        async def list_prompts(self, prompts: Sequence[Any]) -> Sequence[Any]:
            return [prompt for prompt in prompts if allows("prompt", prompt.name)]

        async def get_prompt(self, name: str, call_next: Any, *, version: Any = None) -> Any:
            found = await call_next(name, version=version)
            return found if found is not None and allows("prompt", name) else None

        async def list_resources(self, resources: Sequence[Any]) -> Sequence[Any]:
            return [item for item in resources if allows("resource", str(item.uri))]

        async def get_resource(self, uri: str, call_next: Any, *, version: Any = None) -> Any:
            found = await call_next(uri, version=version)
            return found if found is not None and allows("resource", str(found.uri)) else None

        async def list_resource_templates(self, templates: Sequence[Any]) -> Sequence[Any]:
            return [item for item in templates if allows("resource", item.uri_template)]

        async def get_resource_template(
            self, uri: str, call_next: Any, *, version: Any = None
        ) -> Any:
            found = await call_next(uri, version=version)
            return found if found is not None and allows("resource", found.uri_template) else None

    return provider.wrap_transform(Exposed())


def _rules_transform(
    label: str,
    admits: Callable[[str], bool],
    needs_lock: Callable[[Tool], bool],
    timeout: float,
    unavailable: Callable[[], str | None] | None,
    call_failed: Callable[[BaseException], str | None] | None,
    self_locking: bool = False,
    lists_while_down: Callable[[], bool] | None = None,
    telemetry: Telemetry | None = None,
) -> Any:
    from fastmcp.server.transforms import Transform

    guarded_tool = _guarded_tool_class()
    wrapped: dict[int, tuple[Tool, Tool]] = {}  # id(inner) -> (inner, its guard)

    def wrap(tool: Tool) -> Tool:
        """The guard of *tool*, made once per tool object: every call looks the tool up,
        and copying a pydantic model per call is most of the launcher's own cost."""
        hit = wrapped.get(id(tool))
        if hit is not None and hit[0] is tool:  # the entry holds *tool*: its id is not reused
            return hit[1]
        guarded = guarded_tool.wrap(
            tool,
            label=label,
            lock=needs_lock(tool),
            timeout=timeout,
            unavailable=unavailable,
            call_failed=call_failed,
            self_locking=self_locking,
            telemetry=telemetry,
        )
        if len(wrapped) >= 4096:  # tools made per request (a proxy's) must not pile up
            wrapped.clear()
        wrapped[id(tool)] = (tool, guarded)
        return guarded

    def down() -> bool:
        if lists_while_down is not None and lists_while_down():
            return False
        return unavailable is not None and unavailable() is not None

    class LauncherRules(Transform):
        def __init__(self) -> None:
            self.last_seen: dict[str, Tool] = {}  # the tools listed while the server was up

        async def list_tools(self, tools: Sequence[Tool]) -> Sequence[Tool]:
            if down():
                return list(self.last_seen.values())
            listed = [wrap(tool) for tool in tools if admits(tool.name)]
            self.last_seen = {tool.name: tool for tool in listed}
            return listed

        async def get_tool(self, name: str, call_next: Any, *, version: Any = None) -> Tool | None:
            if not admits(name):
                return None
            if down():
                return self.last_seen.get(name)
            tool = await call_next(name, version=version)
            return wrap(tool) if tool is not None else None

    return LauncherRules()


_GUARDED_TOOL: type | None = None


def _guarded_tool_class() -> Any:
    """``Tool`` subclass whose ``_run`` (the server's entry point) applies the launcher's rules."""
    global _GUARDED_TOOL
    if _GUARDED_TOOL is not None:
        return _GUARDED_TOOL
    import anyio
    from fastmcp.exceptions import ToolError
    from fastmcp.tools import Tool

    from . import telemetry as tm
    from .locking import (
        CALL_ARRIVAL,
        CALL_DEADLINE,
        LockWaitTimeout,
        admit_self_locking,
        hold_async,
    )
    from .locking.fleet_lock import FleetLockUnavailable

    class GuardedTool(Tool):
        _inner: Any = None
        _label: str = ""
        _lock: bool = False
        _timeout: float = 0.0
        _unavailable: Any = None
        _call_failed: Any = None
        _self_locking: bool = False
        _telemetry: Any = None

        @classmethod
        def wrap(
            cls,
            tool: Tool,
            *,
            label: str,
            lock: bool,
            timeout: float,
            unavailable: Callable[[], str | None] | None = None,
            call_failed: Callable[[BaseException], str | None] | None = None,
            self_locking: bool = False,
            telemetry: Telemetry | None = None,
        ) -> GuardedTool:
            guarded = cls(**{name: getattr(tool, name) for name in Tool.model_fields})
            guarded._inner, guarded._label = tool, label
            guarded._lock, guarded._timeout = lock, timeout
            guarded._unavailable, guarded._call_failed = unavailable, call_failed
            guarded._self_locking = self_locking
            guarded._telemetry = telemetry
            return guarded

        @property
        def locked(self) -> bool:
            return self._lock

        @property
        def inner(self) -> Tool:
            """The wrapped tool, as its server has it."""
            return self._inner

        @property
        def inner_name(self) -> str:
            """The wrapped tool's own name (before any namespace)."""
            return self._inner.name

        @property
        def self_locking(self) -> bool:
            return self._self_locking

        @property
        def label(self) -> str:
            """The mount name of the tool's server (``servers.<name>``)."""
            return self._label

        @property
        def call_timeout(self) -> float:
            """Seconds a call may run (``servers.<name>.timeout``)."""
            return self._timeout

        def refusal(self) -> str | None:
            """Why a call cannot start now (its server is down), or None."""
            return self._unavailable() if self._unavailable else None

        def failure_text(self, exc: BaseException) -> str:
            """What a call that failed with *exc* answers (a lost server says it restarts)."""
            replacement = self._call_failed(exc) if self._call_failed else None
            return replacement or str(exc)

        def timeout_text(self, *, waited_for_lock: bool = False) -> str:
            if waited_for_lock:
                return (
                    f"{self.name!r} did not start within its timeout of {self._timeout:g} s: "
                    "another call that changes state held the process lock all that time; "
                    f"nothing was done (servers.{self._label}.timeout)"
                )
            return (
                f"server {self._label!r} did not finish {self.name!r} within its "
                f"timeout of {self._timeout:g} s (servers.{self._label}.timeout)"
            )

        async def guarded(
            self,
            call: Callable[[], Awaitable[Any]],
            *,
            meta: Any = None,
            headers: Any = None,
        ) -> Any:
            """Await *call* under this tool's rules (``ToolError`` when refused or too slow).
            *meta* (the call's ``_meta``) and *headers* (its HTTP request's) carry the trace
            context the call's span continues."""
            telemetry = self._telemetry
            if telemetry is None or not telemetry.on:
                return await self._guarded(call)
            return await self._observed(
                call, telemetry.begin(self._label, self.name, meta, headers)
            )

        async def _observed(self, call: Any, record: Any) -> Any:
            """:meth:`_guarded`, reported to *record* (the one place calls are observed)."""
            outcome = tm.ERROR
            record.enter()
            try:
                result = await self._guarded(call)
                outcome = tm.result_outcome(result)
                return result
            except ToolError as exc:
                outcome = getattr(exc, "dpt_outcome", tm.TOOL_ERROR)
                raise
            except BaseException as exc:
                if _is_cancellation(exc):
                    outcome = tm.CANCELLED
                raise
            finally:
                record.end(outcome)

        async def _guarded(self, call: Any) -> Any:
            reason = self.refusal()
            if reason:
                raise _with_outcome(ToolError(reason), tm.UNAVAILABLE)
            locked = False
            # (a server that locks itself waits for the lock in a worker thread, which the
            # timeout cannot cancel: the deadline bounds that wait instead)
            arrived = CALL_ARRIVAL.get()  # (a call that already waited has less time left)
            budget = self._timeout
            if arrived is not None:
                budget = max(0.0, arrived + self._timeout - time.monotonic())
            deadline = CALL_DEADLINE.set(time.monotonic() + budget)
            try:
                with anyio.fail_after(budget):
                    if not self._lock:
                        return await call()
                    async with admit_self_locking() if self._self_locking else hold_async():
                        locked = True
                        return await call()
            except LockWaitTimeout:
                raise _with_outcome(
                    ToolError(self.timeout_text(waited_for_lock=True)), tm.LOCK_TIMEOUT
                ) from None
            except FleetLockUnavailable as exc:
                raise ToolError(str(exc)) from None
            except ToolError as exc:
                if isinstance(exc.__cause__, LockWaitTimeout):
                    raise _with_outcome(
                        ToolError(self.timeout_text(waited_for_lock=True)), tm.LOCK_TIMEOUT
                    ) from None
                if isinstance(exc.__cause__, FleetLockUnavailable):
                    raise ToolError(str(exc.__cause__)) from None
                text = self.failure_text(exc)
                if text != str(exc):
                    raise _with_outcome(
                        ToolError(text, log_level=exc.log_level), tm.UNAVAILABLE
                    ) from None
                raise
            except TimeoutError:
                waited = self._lock and not locked
                raise _with_outcome(
                    ToolError(self.timeout_text(waited_for_lock=waited)),
                    tm.LOCK_TIMEOUT if waited else tm.TIMEOUT,
                ) from None
            finally:
                CALL_DEADLINE.reset(deadline)

        async def _run(self, arguments: dict[str, Any]) -> Any:
            return await self._from_request(lambda: self._inner._run(arguments))

        async def run(self, arguments: dict[str, Any]) -> Any:
            return await self._from_request(lambda: self._inner.run(arguments))

        async def _from_request(self, call: Any) -> Any:
            """A call through fastmcp: its ``_meta`` and HTTP headers are fastmcp's request's."""
            telemetry = self._telemetry
            if telemetry is None or not telemetry.on:
                return await self._guarded(call)
            meta, headers = request_trace_sources() if telemetry.tracing else (None, None)
            return await self._observed(
                call, telemetry.begin(self._label, self.name, meta, headers)
            )

    _GUARDED_TOOL = GuardedTool
    return GuardedTool


def _with_outcome(error: BaseException, outcome: str) -> BaseException:
    """*error*, marked with the outcome a call that raises it ends with (its metrics label)."""
    error.dpt_outcome = outcome  # type: ignore[attr-defined]
    return error


def _is_cancellation(exc: BaseException) -> bool:
    import anyio

    return isinstance(exc, anyio.get_cancelled_exc_class())


def request_trace_sources() -> tuple[Any, Any]:
    """(the ``_meta`` of the request fastmcp is serving, its HTTP request's headers), each
    None when absent (``fastmcp_request_ctx``: the SDK hands handlers their context as an
    argument; fastmcp keeps it in this context variable)."""
    from fastmcp.server.dependencies import fastmcp_request_ctx

    ctx = fastmcp_request_ctx.get()
    if ctx is None:
        return None, None
    request = ctx.request
    return ctx.meta, getattr(request, "headers", None)


def open_http_sessions(manager: Any) -> int:
    """How many MCP sessions a ``StreamableHTTPSessionManager`` holds open (``_server_instances``:
    one entry per session id, removed when the session ends or idles out)."""
    return len(manager._server_instances)


def add_server_middleware(server: FastMCP, middleware: Any) -> None:
    """Put *middleware* first in the mcp SDK server's chain (``Server.middleware``, provisional).

    It then sees every request before fastmcp does, raw params and all, and may
    answer it itself without calling the rest of the chain.
    """
    server._mcp_server.middleware.insert(0, middleware)


async def send_raw_request(
    client: Any,
    method: str,
    params: dict[str, Any],
    *,
    on_progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """Send one request on a connected fastmcp ``Client``'s SDK session; its raw result dict.

    ``ClientSession.send_request`` wants a typed request and validates the typed
    result; a relay needs neither. This stamps the request as the session would
    (``ClientSession._stamp``: protocol headers for HTTP) and sends it through the
    session's dispatcher (``_dispatcher.send_raw_request``), which sends
    ``notifications/cancelled`` when the caller is cancelled, gives the request a
    progress token of its own when *on_progress* is set, and raises ``MCPError``
    for an error response or a closed connection.
    """
    session = client.session
    data: dict[str, Any] = {"method": method, "params": params}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    if on_progress is not None:
        opts["on_progress"] = on_progress
    return await session._dispatcher.send_raw_request(method, data["params"], opts)


def own_uri(namespace: str | None, uri: str) -> str:
    """*uri* as a server mounted under *namespace* names it: fastmcp's ``Namespace`` transform
    exposes ``scheme://path`` as ``scheme://namespace/path`` (``Namespace._reverse_uri``)."""
    if not namespace:
        return uri
    from fastmcp.server.transforms import Namespace

    return Namespace(namespace)._reverse_uri(uri) or uri


def requests_in_flight(client: Any) -> int:
    """How many requests sent on a connected fastmcp ``Client``'s SDK session still wait for
    their reply (``JSONRPCDispatcher._pending``: one entry per request, removed when it is
    answered, fails or is cancelled)."""
    return len(getattr(client.session._dispatcher, "_pending", ()))


def remove_provider(server: FastMCP, provider: Provider) -> None:
    """Unmount *provider* (``FastMCP.providers`` is a plain list; fastmcp has no remove call)."""
    server.providers.remove(provider)


def mcp_http_client(headers: dict[str, str] | None, timeout: Any, auth: Any) -> Any:
    """The ``httpx2.AsyncClient`` the mcp SDK's HTTP transports make by default (its timeouts:
    30 s to connect, 300 s to read), from ``mcp.shared._httpx_utils``."""
    from mcp.shared._httpx_utils import create_mcp_http_client

    return create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)


async def spawn_stdio_child(
    command: str, args: list[str], env: dict[str, str], errlog: Any, cwd: str | None
) -> Any:
    """Start an MCP server process as the SDK's stdio client does: pipes, its own session and
    process group (``mcp.client.stdio._create_platform_compatible_process``)."""
    from mcp.client import stdio

    return await stdio._create_platform_compatible_process(
        command=command, args=args, env=env, errlog=errlog, cwd=cwd
    )


def asyncio_pipes(process: Any) -> tuple[Any, Any]:
    """(stdin's ``asyncio.StreamWriter``, stdout's pipe transport) under an anyio ``Process``
    (``Process._process``: the ``asyncio.subprocess.Process``), or ``(None, None)``.

    Writing to the StreamWriter skips anyio's checkpoint (one event-loop pass per line);
    the transport can be given a protocol that sees the bytes as they arrive.
    """
    inner = getattr(process, "_process", None)
    writer = getattr(inner, "stdin", None)
    transport = getattr(inner, "_transport", None)
    get_pipe = getattr(transport, "get_pipe_transport", None)
    stdout = get_pipe(1) if get_pipe is not None else None
    if writer is None or stdout is None or not hasattr(stdout, "set_protocol"):
        return None, None
    return writer, stdout


async def stop_stdio_child(process: Any) -> None:
    """Stop it as the SDK does: close stdin, wait, terminate its process group, kill
    (``mcp.client.stdio._stop_server_process``)."""
    from mcp.client import stdio

    await stdio._stop_server_process(process)


def bm25_index(documents: list[str]) -> Any:
    """fastmcp's BM25 Okapi index (``transforms.search.bm25._BM25Index``) built over *documents*.

    Its ``query(text, top_k)`` returns the indices of the best-scoring documents, best first,
    only those with a positive score. The public ``BM25SearchTransform`` ranks only the tools of
    the server it wraps; a profile ranks the composition's exposed catalog.
    """
    from fastmcp.server.transforms.search.bm25 import _BM25Index

    index = _BM25Index()
    index.build(documents)
    return index


def oauth_client_provider(
    server_url: str,
    client_metadata: Any,
    storage: Any,
    *,
    redirect_handler: Callable[[str], Awaitable[None]],
    callback_handler: Callable[[], Awaitable[Any]],
    refused: Callable[[], Awaitable[None]],
    margin: Callable[[float], float],
) -> Any:
    """The mcp SDK's ``OAuthClientProvider`` (an ``httpx2.Auth``), changed where a long-lived
    session needs it. Its private steps used: ``_auth_flow``, ``_initialized``, ``_initialize``,
    ``_add_auth_header``, ``_perform_authorization``, ``_refresh_token``,
    ``_handle_token_response``, ``_handle_refresh_response`` and the ``context``
    (``OAuthContext``) fields ``lock``, ``current_tokens``, ``client_info``,
    ``token_expiry_time``, ``oauth_metadata``, ``protected_resource_metadata``,
    ``auth_server_url``.

    - A token loaded from *storage* keeps its expiry (``storage.refresh_at()``; the SDK
      would take it for valid until a 401), and the discovered metadata
      (``storage.discovered()``), so a refresh goes to the authorization server's token
      endpoint with the RFC 8707 ``resource``, not to the MCP server's origin.
    - A token counts as expired *margin(lifetime)* seconds early: it is refreshed before the
      server could refuse it.
    - A 401 while a refresh token is held refreshes once (the SDK would start a browser
      login); a refused refresh awaits *refused()*, which raises.
    - *storage* learns the discovered metadata with each new token
      (``storage.discovery = ...``: a callable giving a JSON-able dict).
    - A request with a valid token goes out without the flow's lock held until its answer
      (``_auth_flow`` holds ``context.lock`` across the request, so a session's calls ran one
      at a time); a request that needs a refresh, or whose answer is a 401 or a scope step-up,
      goes through the SDK's whole flow under the lock (which sends it again).
    """
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata

    class _Provider(OAuthClientProvider):
        _refreshing = False
        _tried: str | None = None

        async def _auth_flow(self, request: Any) -> Any:
            async with self.context.lock:
                if not self._initialized:
                    await self._initialize()
                ready = self.context.is_token_valid()
                if ready:
                    self._add_auth_header(request)
            if ready:
                response = yield request
                challenge = response.headers.get("www-authenticate", "")
                if response.status_code != 401 and not (
                    response.status_code == 403 and "insufficient_scope" in challenge
                ):
                    return
            flow = super()._auth_flow(request)
            try:
                outgoing = await flow.__anext__()
                while True:
                    outgoing = await flow.asend((yield outgoing))
            except StopAsyncIteration:
                return
            finally:
                await flow.aclose()

        async def _initialize(self) -> None:
            await super()._initialize()
            context = self.context
            found = await storage.discovered()
            if found and context.oauth_metadata is None:
                if found.get("as"):
                    context.oauth_metadata = OAuthMetadata.model_validate(found["as"])
                if found.get("prm"):
                    context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(
                        found["prm"]
                    )
                context.auth_server_url = found.get("as_url")
            if context.current_tokens is not None:
                context.token_expiry_time = await storage.refresh_at()

        def _early(self) -> None:
            context = self.context
            tokens = context.current_tokens
            if context.token_expiry_time is not None and tokens and tokens.expires_in:
                context.token_expiry_time -= margin(float(tokens.expires_in))

        async def _perform_authorization(self) -> Any:
            tokens = self.context.current_tokens
            if (
                tokens is not None
                and tokens.refresh_token
                and self.context.client_info is not None
                and self._tried != tokens.refresh_token
            ):
                self._tried = tokens.refresh_token
                self._refreshing = True
                return await self._refresh_token()
            return await super()._perform_authorization()

        async def _handle_token_response(self, response: Any) -> None:
            if self._refreshing:
                self._refreshing = False
                if not await self._handle_refresh_response(response):
                    await refused()
                return
            await super()._handle_token_response(response)
            self._early()

        async def _handle_refresh_response(self, response: Any) -> bool:
            done = await super()._handle_refresh_response(response)
            if done:
                self._early()
            return done

    provider = _Provider(
        server_url=server_url,
        client_metadata=client_metadata,
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )

    def discovery() -> dict[str, Any]:
        context = provider.context
        return {
            "as": context.oauth_metadata.model_dump(mode="json", exclude_none=True)
            if context.oauth_metadata
            else None,
            "prm": context.protected_resource_metadata.model_dump(mode="json", exclude_none=True)
            if context.protected_resource_metadata
            else None,
            "as_url": context.auth_server_url,
        }

    storage.discovery = discovery
    return provider

"""Every fastmcp / mcp detail the launcher relies on beyond their documented API, in one place.

``tests/test_seams.py`` pins each behaviour used here, so a fastmcp upgrade that
changes one of them fails that test rather than the launcher. Keep this module
small: anything that works through public API belongs elsewhere.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from fastmcp.server.providers import Provider
    from fastmcp.tools import Tool
    from mcp.server.lowlevel import Server


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
    declares sampling, elicitation and roots (``listChanged``) in ``initialize``.
    """
    import mcp_types

    kwargs = client._session_kwargs
    kwargs["sampling_callback"] = sampling
    kwargs["sampling_capabilities"] = mcp_types.SamplingCapability()
    kwargs["elicitation_callback"] = elicitation
    kwargs["list_roots_callback"] = roots


TOOL_CALL_LOGGER = (
    "fastmcp.server.server"  # logs "Error calling tool '<name>'" for each failed call
)
_TOOL_LOG = logging.getLogger("doc_processing_std_tools.tools")


class _ToolCallLogs(logging.Filter):
    """fastmcp's line for a failed tool call, made one plain line on our own logger.

    A ``ToolError`` raised below WARNING (:func:`errors.refused`) is an ordinary answer:
    one DEBUG line, without its text (it may repeat the arguments). Any other
    ``ToolError`` is a WARNING with its text; an unexpected exception is one ERROR
    line with its type and text (the traceback only at DEBUG). fastmcp's own rich
    record is dropped.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str) and record.msg.startswith("Error calling tool")):
            return True
        head = record.getMessage()
        error = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
        text = " ".join(str(error).split())[:1000] if error is not None else ""
        if record.levelno < logging.WARNING:
            _TOOL_LOG.debug("%s: refused (an error result, as the tool means to)", head)
        elif record.exc_info:
            _TOOL_LOG.error("%s: %s: %s", head, type(error).__name__, text)
            _TOOL_LOG.debug("the traceback of %s", head, exc_info=record.exc_info)
        elif text.startswith(head):
            _TOOL_LOG.log(logging.WARNING, "%s", text)
        else:
            _TOOL_LOG.log(logging.WARNING, "%s: %s", head, text)
        return False


def quiet_tool_call_logs() -> None:
    """Log failed tool calls as :class:`_ToolCallLogs` says, not as fastmcp's rich records.

    Installed by the launcher's and each standalone server's logging setup (idempotent).
    """
    logger = logging.getLogger(TOOL_CALL_LOGGER)
    if not any(isinstance(f, _ToolCallLogs) for f in logger.filters):
        logger.addFilter(_ToolCallLogs())


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
    calls to them fail with that reason. A *self_locking* server's tools take the lock
    themselves around their disk work: the launcher only admits them
    (:func:`locking.admit_self_locking`) instead of holding it for the whole call.
    """
    from fastmcp.server.providers.aggregate import AggregateProvider
    from fastmcp.server.providers.fastmcp_provider import FastMCPProvider
    from fastmcp.server.transforms import Namespace

    rules = _rules_transform(
        label, admits, needs_lock, timeout, unavailable, call_failed, self_locking
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
        )
        if len(wrapped) >= 4096:  # tools made per request (a proxy's) must not pile up
            wrapped.clear()
        wrapped[id(tool)] = (tool, guarded)
        return guarded

    def down() -> bool:
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

    from .fleet_lock import FleetLockUnavailable
    from .locking import CALL_DEADLINE, LockWaitTimeout, admit_self_locking, hold_async

    class GuardedTool(Tool):
        _inner: Any = None
        _label: str = ""
        _lock: bool = False
        _timeout: float = 0.0
        _unavailable: Any = None
        _call_failed: Any = None
        _self_locking: bool = False

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
        ) -> GuardedTool:
            guarded = cls(**{name: getattr(tool, name) for name in Tool.model_fields})
            guarded._inner, guarded._label = tool, label
            guarded._lock, guarded._timeout = lock, timeout
            guarded._unavailable, guarded._call_failed = unavailable, call_failed
            guarded._self_locking = self_locking
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

        async def guarded(self, call: Callable[[], Awaitable[Any]]) -> Any:
            """Await *call* under this tool's rules (``ToolError`` when refused or too slow)."""
            return await self._guarded(call)

        async def _guarded(self, call: Any) -> Any:
            reason = self.refusal()
            if reason:
                raise ToolError(reason)
            locked = False
            # (a server that locks itself waits for the lock in a worker thread, which the
            # timeout cannot cancel: the deadline bounds that wait instead)
            deadline = CALL_DEADLINE.set(time.monotonic() + self._timeout)
            try:
                with anyio.fail_after(self._timeout):
                    if not self._lock:
                        return await call()
                    async with admit_self_locking() if self._self_locking else hold_async():
                        locked = True
                        return await call()
            except LockWaitTimeout:
                raise ToolError(self.timeout_text(waited_for_lock=True)) from None
            except FleetLockUnavailable as exc:
                raise ToolError(str(exc)) from None
            except ToolError as exc:
                if isinstance(exc.__cause__, LockWaitTimeout):
                    raise ToolError(self.timeout_text(waited_for_lock=True)) from None
                if isinstance(exc.__cause__, FleetLockUnavailable):
                    raise ToolError(str(exc.__cause__)) from None
                text = self.failure_text(exc)
                if text != str(exc):
                    raise ToolError(text, log_level=exc.log_level) from None
                raise
            except TimeoutError:
                waited = self._lock and not locked
                raise ToolError(self.timeout_text(waited_for_lock=waited)) from None
            finally:
                CALL_DEADLINE.reset(deadline)

        async def _run(self, arguments: dict[str, Any]) -> Any:
            return await self._guarded(lambda: self._inner._run(arguments))

        async def run(self, arguments: dict[str, Any]) -> Any:
            return await self._guarded(lambda: self._inner.run(arguments))

    _GUARDED_TOOL = GuardedTool
    return GuardedTool


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

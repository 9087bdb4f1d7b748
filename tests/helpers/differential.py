"""Differential testing: one client script run against an MCP server connected directly and
the same server mounted in ``dpt-launch``, every message recorded, the two transcripts compared.

A *scenario* is an async function of a :class:`Run`. It opens clients (``run.client("A", spec)``)
and does things with them in direct terms (tool ``echo``, URI ``demo://resource/...``); a client
on a mounted endpoint sends the namespaced names instead. Every JSON-RPC message each client
sends and receives is recorded as it passes between the transport and the SDK's
``ClientSession``, so the transcript holds what the SDK would hide: error codes and data,
server-to-client requests and what they were answered, notifications the SDK does not know.

The transcript of a client is a list of steps, each with:

- ``exchanges``: the requests the client sent in it and the reply each got (or ``"no reply"``);
- ``server requests``: what the server asked of the client and what the client answered;
- ``notifications`` (server to client) and ``client notifications``: sorted, so their
  interleaving (which differs between processes and transports) is not a difference.

A message is filed under the step that is running when it is sent or arrives; what arrives
between two steps goes to the earlier one. Scenarios that meet messages a server sends on its
own time (server-everything's roots sync) wait for them with :meth:`Client.wait_for` (with a
deadline) so both sides file them in the same step; state a server updates on its own time is
polled with :meth:`Client.call_until`. A ``list_changed`` that comes before the client ever
asked for that list is left out (:func:`transcript_of` says why). :class:`View` narrows what a
case compares to what it is about.

Before comparing, names are mapped back to the server's own (:func:`normalized`): a tool or
prompt ``ns_x`` is ``x``, a URI ``scheme://ns/rest`` is ``scheme://rest``, a log message's
logger ``mount/x`` is ``x`` (``mount`` alone: none); ids, UUIDs, clock times and progress tokens are replaced by
placeholders. Anything else that differs is reported as a unified diff of the two transcripts.

The reference servers live in ``tests/helpers/reference_servers`` (``npm ci`` there; ``.ci/run`` does it).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import difflib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import SessionMessage

from doc_processing_std_tools.embedded_redis import free_port
from helpers.paths import TESTS

REFERENCE = TESTS / "helpers" / "reference_servers"
MODULES = REFERENCE / "node_modules" / "@modelcontextprotocol"
EVERYTHING = MODULES / "server-everything" / "dist" / "index.js"
FILESYSTEM = MODULES / "server-filesystem" / "dist" / "index.js"
CONNECT_TIMEOUT = 60.0
STEP_TIMEOUT = 60.0
WAIT_TIMEOUT = 5.0  # what one side waits for and the other never sends costs this much


def missing_reference_servers() -> str | None:
    """Why the reference servers cannot run here, or None when they can."""
    if shutil.which("node") is None:
        return "node is not installed (the differential tests run the npm reference servers)"
    for script in (EVERYTHING, FILESYSTEM):
        if not script.is_file():
            return (
                f"{script.relative_to(TESTS.parent)} is missing: run `npm ci` in "
                f"{REFERENCE.relative_to(TESTS.parent)} (.ci/run does)"
            )
    return None


needs_reference_servers = pytest.mark.skipif(
    missing_reference_servers() is not None, reason=missing_reference_servers() or ""
)


# ---------------------------------------------------------------------------------------------
# Endpoints: where a client connects, and how names look there
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """A server a client can connect to: a command spoken to over stdio, or an HTTP URL.

    *namespace* and *mount* say how a mounted server's names look (``ns_tool``,
    ``scheme://ns/path``, logger ``mount/name``); both None for a direct connection.
    *settle*: connecting waits (up to :data:`WAIT_TIMEOUT`) for this notification, which the
    server sends when it has finished initializing (server-everything registers its
    capability-dependent tools then, and says ``notifications/tools/list_changed``).
    """

    label: str
    command: tuple[str, ...] = ()
    url: str | None = None
    namespace: str | None = None
    mount: str | None = None
    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    errlog: Path | None = None  # its stderr (a stdio command's is appended to it, else dropped)
    settle: str | None = None  # a notification this server sends once ready after initialize

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    def tool(self, name: str) -> str:
        """A tool or prompt name as this endpoint exposes it."""
        return f"{self.namespace}_{name}" if self.namespace else name

    def uri(self, uri: str) -> str:
        """A resource URI (or template) as this endpoint exposes it."""
        if not self.namespace:
            return uri
        scheme, sep, rest = uri.partition("://")
        return f"{scheme}://{self.namespace}/{rest}" if sep else uri


def stdio_endpoint(label: str, command: Sequence[str], **kwargs: Any) -> Endpoint:
    return Endpoint(label, command=tuple(command), **kwargs)


def launcher_argv(config: Path, *args: str) -> tuple[str, ...]:
    return (
        sys.executable,
        "-m",
        "doc_processing_std_tools.launcher.cli",
        "--config",
        str(config),
        *args,
    )


def everything_argv(transport: str = "stdio") -> tuple[str, ...]:
    return ("node", str(EVERYTHING), transport)


def filesystem_argv(*folders: Path) -> tuple[str, ...]:
    return ("node", str(FILESYSTEM), *(str(folder) for folder in folders))


def mount_config(
    path: Path,
    argv: Sequence[str],
    *,
    mount: str,
    namespace: str | None,
    extra: str = "",
) -> Path:
    """Write a launcher config mounting *argv* (``command:`` + ``args:``) under *mount*; *extra*
    lines go under the mount."""
    lines = ["servers:", f"  {mount}:", f"    command: {json.dumps(argv[0])}"]
    lines.append(f"    args: {json.dumps(list(argv[1:]))}")
    if namespace:
        lines.append(f"    namespace: {namespace}")
    lines.extend(f"    {line}" for line in extra.strip().splitlines())
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@contextmanager
def everything_over_http(errlog: Path) -> Iterator[str]:
    """server-everything serving streamable HTTP; yields its MCP URL.

    It listens on ``$PORT`` (no port 0: it would report 0), so a free port is picked and the
    start retried if another process took it meanwhile."""
    with served_over_http(
        "server-everything",
        lambda port: (everything_argv("streamableHttp"), {"PORT": str(port)}),
        errlog,
    ) as url:
        yield url


@contextmanager
def served_over_http(
    what: str, command: Callable[[int], tuple[Sequence[str], dict[str, str]]], errlog: Path
) -> Iterator[str]:
    """A server serving streamable HTTP at ``/mcp`` on a free port (*command* gives its argv
    and environment for a port); yields its URL. Started again on another port if another
    process took that one meanwhile."""
    for _attempt in range(5):
        port = free_port()
        argv, env = command(port)
        with errlog.open("ab") as err:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env={**os.environ, **env},
            )
        deadline = time.monotonic() + CONNECT_TIMEOUT
        try:
            while proc.poll() is None and not _answers(port):
                assert time.monotonic() < deadline, errlog.read_text(errors="replace")
                time.sleep(0.05)
            if proc.poll() is None:
                yield f"http://127.0.0.1:{port}/mcp"
                return
        finally:
            _stop(proc)
    raise AssertionError(f"{what} never served HTTP: {errlog.read_text(errors='replace')}")


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------------------------
# Clients: what they declare, and the recording session
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientSpec:
    """What a client declares and how it answers: no callback, no capability.

    *roots*: file URIs offered as MCP roots (None: no roots capability). Sampling answers a
    fixed text naming how many messages it got; elicitation declines a form and accepts a URL.
    *era*: ``handshake`` (``initialize``), or ``auto``: a 2026-era client, as the SDK's
    ``Client(mode="auto")`` connects: ``server/discover`` first, each request then stateless
    (the connection's keys in its ``_meta``), and ``initialize`` only when the server does not
    discover (server-everything 2026.8.31 does not: a direct connection falls back).
    """

    name: str = "differential-client"
    version: str = "1.0.0"
    sampling: bool = False
    elicitation: bool = False
    roots: tuple[str, ...] | None = None
    era: str = "handshake"


FULL = ClientSpec(sampling=True, elicitation=True, roots=())


@dataclass
class Wire:
    """One JSON-RPC message as sent or received, filed under the step running then."""

    step: int
    outgoing: bool
    message: dict[str, Any]


class Client:
    """A ``ClientSession`` whose every message is recorded; its methods take direct names."""

    def __init__(self, label: str, endpoint: Endpoint, spec: ClientSpec) -> None:
        self.label = label
        self.endpoint = endpoint
        self.spec = spec
        self.roots = list(spec.roots or ())
        self.steps: list[str] = ["connect"]
        self.polled: set[int] = set()  # steps of which only the last exchange is kept
        self.wire: list[Wire] = []
        self._arrived = anyio.Event()
        self.session: ClientSession | None = None

    # recording ---------------------------------------------------------------------------

    def record(self, outgoing: bool, message: SessionMessage) -> None:
        dumped = message.message.model_dump(by_alias=True, mode="json", exclude_none=True)
        self.wire.append(Wire(len(self.steps) - 1, outgoing, dumped))
        if not outgoing:
            self._arrived.set()
            self._arrived = anyio.Event()

    async def arrival(self) -> None:
        """Return when the next message arrives."""
        await self._arrived.wait()

    def received(self) -> list[dict[str, Any]]:
        return [wire.message for wire in self.wire if not wire.outgoing]

    def reply_to(self, method: str) -> dict[str, Any]:
        """The reply (``result`` or ``error``) to the last *method* request this client sent."""
        sent = [w.message for w in self.wire if w.outgoing and w.message.get("method") == method]
        assert sent, f"{self.label} sent no {method}"
        wanted = sent[-1].get("id")
        for wire in reversed(self.wire):
            if (
                not wire.outgoing
                and wire.message.get("id") == wanted
                and "method" not in wire.message
            ):
                return wire.message
        return {"no reply": True}

    @asynccontextmanager
    async def step(self, label: str) -> AsyncIterator[None]:
        self.steps.append(label)
        with anyio.fail_after(STEP_TIMEOUT):
            yield

    # what the client does ------------------------------------------------------------------

    @property
    def s(self) -> ClientSession:
        assert self.session is not None
        return self.session

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress: bool = False,
        label: str | None = None,
    ) -> dict[str, Any]:
        """``tools/call`` *name* (direct name); the raw reply."""

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            pass  # (the notifications are on the wire record)

        request = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name=self.endpoint.tool(name), arguments=arguments or {}
            )
        )
        async with self.step(label or f"call {name} {json.dumps(arguments or {}, sort_keys=True)}"):
            # (send_request, not call_tool, which lists the tools first, unasked)
            with contextlib.suppress(MCPError):
                await self.s.send_request(
                    request,
                    types.CallToolResult,
                    progress_callback=on_progress if progress else None,
                )
        return self.reply_to("tools/call")

    async def call_until(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        holds: Callable[[dict[str, Any]], bool],
        what: str,
        *,
        timeout: float = WAIT_TIMEOUT,
    ) -> dict[str, Any]:
        """Call *name* again until its reply satisfies *holds* (or *timeout*): for state a
        server updates on its own time (the filesystem server's roots). Only the last call
        is kept in the transcript; the step says whether *what* came to hold."""
        label = f"call {name} {json.dumps(arguments or {}, sort_keys=True)} until {what}"
        self.polled.add(len(self.steps))
        async with self.step(label):
            deadline = time.monotonic() + timeout
            while True:
                request = types.CallToolRequest(
                    params=types.CallToolRequestParams(
                        name=self.endpoint.tool(name), arguments=arguments or {}
                    )
                )
                with contextlib.suppress(MCPError):
                    await self.s.send_request(request, types.CallToolResult)
                reply = self.reply_to("tools/call")
                held = holds(reply)
                if held or time.monotonic() > deadline:
                    break
                await anyio.sleep(0.1)  # (polling the server's state: no event tells us it changed)
            self.steps[-1] += " (held)" if held else " (never held)"
        return reply

    async def call_then_cancel(
        self, name: str, arguments: dict[str, Any], *, timeout: float = WAIT_TIMEOUT
    ) -> None:
        """``tools/call`` with a progress token, abandoned (the SDK sends
        ``notifications/cancelled``) once its first progress notification came; then a step
        that waits *timeout* for a reply to it (the spec says none comes)."""
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=self.endpoint.tool(name), arguments=arguments)
        )

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progressed.set()

        progressed = anyio.Event()
        async with self.step(f"call {name}, cancelled after its first progress"):

            async def call() -> None:
                await self.s.send_request(
                    request, types.CallToolResult, progress_callback=on_progress
                )

            async with anyio.create_task_group() as group:
                group.start_soon(call)
                await progressed.wait()
                group.cancel_scope.cancel()
        sent = [
            w.message for w in self.wire if w.outgoing and w.message.get("method") == "tools/call"
        ]
        wanted = sent[-1]["id"]
        await self.wait_for(
            "a reply to the cancelled call",
            lambda message: message.get("id") == wanted and "method" not in message,
            timeout=timeout,
        )

    async def request(
        self, label: str, send: Callable[[], Awaitable[object]], method: str
    ) -> dict[str, Any]:
        async with self.step(label):
            with contextlib.suppress(MCPError):
                await send()
        return self.reply_to(method)

    async def list_tools(self) -> dict[str, Any]:
        return await self.request("tools/list", self.s.list_tools, "tools/list")

    async def list_prompts(self) -> dict[str, Any]:
        return await self.request("prompts/list", self.s.list_prompts, "prompts/list")

    async def list_resources(self) -> dict[str, Any]:
        return await self.request("resources/list", self.s.list_resources, "resources/list")

    async def list_templates(self) -> dict[str, Any]:
        return await self.request(
            "resources/templates/list", self.s.list_resource_templates, "resources/templates/list"
        )

    async def read(self, uri: str, *, as_given: bool = False) -> dict[str, Any]:
        """``resources/read``: *uri* in direct terms, or exactly as given (a link a result carried)."""
        wire_uri = uri if as_given else self.endpoint.uri(uri)
        return await self.request(
            f"read {uri}" if not as_given else "read a link",
            lambda: self.s.read_resource(wire_uri),
            "resources/read",
        )

    async def get_prompt(
        self, name: str, arguments: dict[str, str] | None = None
    ) -> dict[str, Any]:
        return await self.request(
            f"prompts/get {name}",
            lambda: self.s.get_prompt(self.endpoint.tool(name), arguments),
            "prompts/get",
        )

    async def complete_prompt(
        self, prompt: str, argument: str, value: str, context: dict[str, str] | None = None
    ) -> dict[str, Any]:
        ref = types.PromptReference(type="ref/prompt", name=self.endpoint.tool(prompt))
        return await self.request(
            f"complete prompt {prompt}.{argument}={value!r}",
            lambda: self.s.complete(ref, {"name": argument, "value": value}, context),
            "completion/complete",
        )

    async def complete_template(self, template: str, argument: str, value: str) -> dict[str, Any]:
        ref = types.ResourceTemplateReference(type="ref/resource", uri=self.endpoint.uri(template))
        return await self.request(
            f"complete template {template}.{argument}={value!r}",
            lambda: self.s.complete(ref, {"name": argument, "value": value}),
            "completion/complete",
        )

    async def set_level(self, level: types.LoggingLevel) -> dict[str, Any]:
        async def send() -> object:
            with warnings.catch_warnings():  # (deprecated as of 2026-07-28; not here)
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                return await self.s.set_logging_level(level)

        return await self.request(f"logging/setLevel {level}", send, "logging/setLevel")

    async def ping(self) -> dict[str, Any]:
        return await self.request("ping", self.s.send_ping, "ping")

    async def set_roots(self, roots: Sequence[str]) -> None:
        """Offer other roots, and say so (``notifications/roots/list_changed``)."""
        async with self.step(f"roots now {list(roots)}"):
            self.roots = list(roots)
            with warnings.catch_warnings():  # (roots are deprecated as of 2026-07-28; not here)
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await self.s.send_roots_list_changed()

    async def wait_for(
        self,
        what: str,
        matches: Callable[[dict[str, Any]], bool],
        *,
        count: int = 1,
        timeout: float = WAIT_TIMEOUT,
    ) -> bool:
        """A step that waits until *count* received messages (since connecting) match; its
        record says whether they came within *timeout*."""
        async with self.step(f"wait for {what}"):
            with anyio.move_on_after(timeout):
                while sum(1 for message in self.received() if matches(message)) < count:
                    await self._arrived.wait()
            came = sum(1 for message in self.received() if matches(message)) >= count
            self.steps[-1] += " (came)" if came else " (never came)"
            return came

    # answering the server ------------------------------------------------------------------

    async def _roots(self, context: object) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in self.roots])  # type: ignore[arg-type]

    async def _sample(
        self, context: object, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(
                type="text", text=f"sampled {len(params.messages)} message(s)"
            ),
            model="differential-model",
            stop_reason="endTurn",
        )

    async def _elicit(
        self, context: object, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        if isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="decline")

    def session_for(self, read: Any, write: Any) -> ClientSession:
        return ClientSession(
            read,
            write,
            client_info=types.Implementation(name=self.spec.name, version=self.spec.version),
            sampling_callback=self._sample if self.spec.sampling else None,  # type: ignore[arg-type]
            elicitation_callback=self._elicit if self.spec.elicitation else None,  # type: ignore[arg-type]
            list_roots_callback=self._roots if self.spec.roots is not None else None,  # type: ignore[arg-type]
        )


@asynccontextmanager
async def _transport(endpoint: Endpoint) -> AsyncIterator[tuple[Any, Any]]:
    if endpoint.url:
        async with streamable_http_client(endpoint.url) as (read, write, *_):
            yield read, write
        return
    params = StdioServerParameters(
        command=endpoint.command[0],
        args=list(endpoint.command[1:]),
        env={**os.environ, **endpoint.env},
        cwd=str(endpoint.cwd) if endpoint.cwd else None,
    )
    errlog = endpoint.errlog.open("a") if endpoint.errlog else open(os.devnull, "w")  # noqa: SIM115
    try:
        async with stdio_client(params, errlog=errlog) as (read, write):
            yield read, write
    finally:
        errlog.close()


class _RecordedRead:
    """The transport's read stream, each message recorded as the session takes it."""

    def __init__(self, client: Client, inner: Any) -> None:
        self.client, self.inner = client, inner

    async def receive(self) -> SessionMessage | Exception:
        item = await self.inner.receive()
        if isinstance(item, SessionMessage):
            self.client.record(False, item)
        return item

    def __aiter__(self) -> _RecordedRead:
        return self

    async def __aenter__(self) -> _RecordedRead:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _RecordedWrite:
    """The transport's write stream, each message recorded as the session sends it (so it is
    filed under the step that sent it)."""

    def __init__(self, client: Client, inner: Any) -> None:
        self.client, self.inner = client, inner

    async def send(self, item: SessionMessage) -> None:
        self.client.record(True, item)
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _RecordedWrite:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@asynccontextmanager
async def connected(label: str, endpoint: Endpoint, spec: ClientSpec) -> AsyncIterator[Client]:
    """A recording client, initialized (its ``connect`` step) on *endpoint*."""
    client = Client(label, endpoint, spec)
    async with (
        _transport(endpoint) as (read, write),
        client.session_for(_RecordedRead(client, read), _RecordedWrite(client, write)) as session,
    ):
        client.session = session
        with anyio.fail_after(CONNECT_TIMEOUT):
            if spec.era == "auto":
                try:
                    await session.discover()
                except MCPError:  # (no server/discover: the handshake, as mode="auto" falls back)
                    await session.initialize()
            else:
                await session.initialize()
        if endpoint.settle:
            ready = is_notification(endpoint.settle)
            with anyio.move_on_after(WAIT_TIMEOUT):
                while not any(ready(message) for message in client.received()):
                    await client.arrival()
        yield client


class Run:
    """One run of a scenario on one endpoint: the clients it opened, in order."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.clients: list[Client] = []

    @asynccontextmanager
    async def client(self, label: str = "client", spec: ClientSpec = FULL) -> AsyncIterator[Client]:
        async with connected(label, self.endpoint, spec) as client:
            self.clients.append(client)
            yield client

    def transcript(self, view: View | None = None) -> dict[str, list[dict[str, Any]]]:
        return {client.label: transcript_of(client, view or View()) for client in self.clients}


Scenario = Callable[[Run], Awaitable[None]]


async def run_scenario(scenario: Scenario, endpoint: Endpoint) -> Run:
    run = Run(endpoint)
    await scenario(run)
    return run


# ---------------------------------------------------------------------------------------------
# Transcripts: steps, names mapped back, volatile values replaced
# ---------------------------------------------------------------------------------------------

UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
CLOCK = re.compile(r"\b\d{1,2}:\d\d:\d\d(?:\s?[AP]M)?")


def _plain(text: str) -> str:
    return CLOCK.sub("<time>", ISO_TIME.sub("<timestamp>", UUID.sub("<uuid>", text)))


class Names:
    """Maps a mounted server's names back to its own."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.prefix = f"{endpoint.namespace}_" if endpoint.namespace else None
        self.uri = (
            re.compile(rf"\b([A-Za-z][A-Za-z0-9+.-]*)://{re.escape(endpoint.namespace)}/")
            if endpoint.namespace
            else None
        )
        self.logger = f"{endpoint.mount}/" if endpoint.mount else None

    def text(self, value: str) -> str:
        if self.uri is not None:
            value = self.uri.sub(r"\1://", value)
        return _plain(value)

    def name(self, value: str) -> str:
        if self.prefix and value.startswith(self.prefix):
            return value[len(self.prefix) :]
        return value


def normalized(value: Any, names: Names, key: str = "") -> Any:
    """*value* with names mapped back and volatile values replaced (see the module docstring)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k in ("progressToken", "requestId", "elicitationId", "taskId") and isinstance(
                v, str | int
            ):
                out[k] = "<token>"
            elif k == "name" and isinstance(v, str):
                out[k] = names.text(names.name(v))
            elif (
                k == "logger" and isinstance(v, str) and names.logger and v.startswith(names.logger)
            ):
                out[k] = v[len(names.logger) :]
            elif k == "logger" and names.logger and v == names.logger[:-1]:
                continue  # (the server named no logger: the launcher names the mount)
            elif k == "blob" and isinstance(v, str):
                out[k] = _blob(v, names)
            else:
                out[k] = normalized(v, names, k)
        return out
    if isinstance(value, list):
        return [normalized(item, names, key) for item in value]
    if isinstance(value, str):
        return names.text(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)  # (JSON has one number type: 1 and 1.0 are the same value)
    return value


def _blob(value: str, names: Names) -> str:
    """A base64 blob that is UTF-8 text is compared as text (server-everything's carry a time)."""
    try:
        text = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return value
    return "base64 of: " + names.text(text)


def _canonical(item: Any) -> str:
    return json.dumps(item, sort_keys=True, ensure_ascii=False)


def _reply(message: dict[str, Any] | None) -> dict[str, Any] | str:
    if message is None:
        return "no reply"
    if "error" in message:
        return {"error": message["error"]}
    return {"result": message.get("result")}


def _content(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k in ("method", "params")}


@dataclass(frozen=True)
class View:
    """What of a transcript is compared.

    *capabilities*: the server capabilities (names) whose presence in the ``initialize``
    reply is compared; the rest of that reply (the server's name, instructions, other
    capabilities) is the launcher's own by design. *parts*: the sections of each step kept
    (``exchanges``, ``server requests``, ``notifications``, ``client notifications``), for a
    case about one thing that a server's own timing would otherwise blur. *names_only*: a
    list result (tools, prompts, resources, templates) is reduced to its items' names, for a
    case about which items are listed rather than how each looks. *era_neutral*: for a
    2026-era client (``ClientSpec(era="auto")``) that one side serves in the handshake era, what
    the era itself changes is left out: the ``connect`` step (``server/discover`` or
    ``initialize``), the connection's keys in each ``_meta`` (``io.modelcontextprotocol/...``)
    and a result's ``resultType`` and cache hints (``ttlMs``, ``cacheScope``).
    """

    capabilities: tuple[str, ...] = ()
    names_only: bool = False
    era_neutral: bool = False
    parts: tuple[str, ...] = (
        "exchanges",
        "server requests",
        "notifications",
        "client notifications",
    )


LIST_OF = {
    "notifications/tools/list_changed": ("tools/list",),
    "notifications/prompts/list_changed": ("prompts/list",),
    "notifications/resources/list_changed": ("resources/list", "resources/templates/list"),
}


def transcript_of(client: Client, view: View) -> list[dict[str, Any]]:
    """*client*'s steps, each with its exchanges, the server's requests and the notifications,
    names mapped back.

    A ``list_changed`` that arrives before the client ever asked for that list tells it
    nothing (it has no list to refresh), so it is left out: a direct connection to
    server-everything gets several (the tools it registers once it knows the client), a
    mounted one none (the launcher's list is complete when the client first asks)."""
    names = Names(client.endpoint)
    replies = {
        (w.message.get("id"), w.outgoing): w.message
        for w in client.wire
        if "method" not in w.message and "id" in w.message
    }
    steps: list[dict[str, Any]] = [
        {
            "step": label,
            "exchanges": [],
            "server requests": [],
            "notifications": [],
            "client notifications": [],
        }
        for label in client.steps
    ]
    listed: set[str] = set()
    for wire in client.wire:
        message, record = wire.message, steps[wire.step]
        method = message.get("method")
        if method is None:
            continue
        if wire.outgoing and "id" in message:
            listed.add(method)
            reply = replies.get((message["id"], False))
            if method == "initialize":
                result = (reply or {}).get("result") or {}
                declared = result.get("capabilities") or {}
                summary: dict[str, Any] = {"protocolVersion": result.get("protocolVersion")}
                summary.update({f"declares {name}": name in declared for name in view.capabilities})
                record["exchanges"].append(
                    {"request": "initialize", "reply": summary if reply else "no reply"}
                )
                continue
            answer = normalized(_reply(reply), names)
            if view.names_only and method.endswith("/list"):
                answer = _names_of(answer)
            exchange = {"request": normalized(_content(message), names), "reply": answer}
            if wire.step in client.polled:
                record["exchanges"][:] = [exchange]
            else:
                record["exchanges"].append(exchange)
        elif wire.outgoing:
            record["client notifications"].append(normalized(_content(message), names))
        elif "id" in message:
            answer = replies.get((message["id"], True))
            record["server requests"].append(
                {
                    "request": normalized(_content(message), names),
                    "answer": normalized(_reply(answer), names),
                }
            )
        elif method in LIST_OF and not listed.intersection(LIST_OF[method]):
            continue
        else:
            record["notifications"].append(normalized(_content(message), names))
    kinds = ("exchanges", "server requests", "notifications", "client notifications")
    if view.era_neutral:
        steps = [_era_neutral(record) for record in steps[1:]]
    for record in steps:
        for key in kinds[1:]:
            record[key].sort(key=_canonical)
        for key in kinds:
            if not record[key] or key not in view.parts:
                del record[key]
    return steps


CONNECTION_KEYS = "io.modelcontextprotocol/"  # 2026-era _meta keys that describe the connection
ERA_KEYS = frozenset({"resultType", "ttlMs", "cacheScope"})  # 2026-era result fields (cache hints)


def _era_neutral(value: Any) -> Any:
    """*value* less what a 2026-era connection adds to every message (see :class:`View`)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ERA_KEYS:
                continue
            if key == "_meta" and isinstance(item, dict):
                item = {k: v for k, v in item.items() if not k.startswith(CONNECTION_KEYS)}
                if not item:
                    continue
            out[key] = _era_neutral(item)
        return out
    if isinstance(value, list):
        return [_era_neutral(item) for item in value]
    return value


def _names_of(reply: Any) -> Any:
    result = reply.get("result") if isinstance(reply, dict) else None
    if not isinstance(result, dict):
        return reply
    return {
        "result": {
            key: sorted(str(item.get("name")) for item in value)
            if isinstance(value, list)
            else value
            for key, value in result.items()
        }
    }


def render(transcript: Mapping[str, list[dict[str, Any]]]) -> list[str]:
    return json.dumps(transcript, indent=1, sort_keys=True, ensure_ascii=False).splitlines()


def diff(direct: Run, mounted: Run, view: View | None = None) -> str:
    """A unified diff of the two transcripts; empty when they are the same."""
    lines = difflib.unified_diff(
        render(direct.transcript(view)),
        render(mounted.transcript(view)),
        fromfile=direct.endpoint.label,
        tofile=mounted.endpoint.label,
        lineterm="",
        n=4,
    )
    return "\n".join(lines)


async def compare(
    scenario: Scenario, direct: Endpoint, mounted: Endpoint, view: View | None = None
) -> str:
    """Run *scenario* on both endpoints (one after the other); the diff of the transcripts."""
    first = await run_scenario(scenario, direct)
    second = await run_scenario(scenario, mounted)
    return diff(first, second, view)


async def assert_same(
    scenario: Scenario, direct: Endpoint, mounted: Endpoint, view: View | None = None
) -> None:
    """Fail with the diff of the two transcripts when they differ."""
    found = await compare(scenario, direct, mounted, view)
    assert not found, f"{direct.label} and {mounted.label} differ:\n{found}"


def is_notification(method: str, **params: Any) -> Callable[[dict[str, Any]], bool]:
    """A :meth:`Client.wait_for` predicate: a notification *method* whose params hold *params*
    (a string value matches as a substring)."""

    def matches(message: dict[str, Any]) -> bool:
        if message.get("method") != method or "id" in message:
            return False
        got = message.get("params") or {}
        for key, want in params.items():
            value = got.get(key)
            if isinstance(want, str) and not (isinstance(value, str) and want in value):
                return False
            if not isinstance(want, str) and value != want:
                return False
        return True

    return matches

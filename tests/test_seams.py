"""Pins every fastmcp / mcp behaviour that ``launcher/seams.py`` relies on beyond public API.

When a fastmcp upgrade breaks one of these, fix ``seams.py`` (and this test), nothing else.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastmcp import Client, FastMCP

from doc_processing_std_tools.launcher import seams
from doc_processing_std_tools.locking import PROCESS_LOCK


def child_with_lifespan(events: list[str]) -> FastMCP:
    @asynccontextmanager
    async def lifespan(server: FastMCP):
        events.append("enter")
        yield {}
        events.append("exit")

    child = FastMCP("child", lifespan=lifespan)

    @child.tool
    def write(x: int) -> int:
        return x

    @child.tool(annotations={"readOnlyHint": True})
    def read() -> bool:
        return PROCESS_LOCK.locked()

    return child


def mounted(server: FastMCP, namespace: str | None, needs_lock):
    return seams.mounted_provider(
        server,
        label="child",
        namespace=namespace,
        admits=lambda name: True,
        needs_lock=needs_lock,
        timeout=10,
    )


async def test_lifespan_manager_enters_the_mounted_servers_lifespans() -> None:
    events: list[str] = []
    root = FastMCP("root")
    root.add_provider(mounted(child_with_lifespan(events), None, lambda tool: False))
    async with seams.lifespan_manager(root):
        assert events == ["enter"]
    assert events == ["enter", "exit"]


def test_low_level_server_speaks_the_protocol() -> None:
    server = seams.low_level_server(FastMCP("x"))
    assert callable(server.run) and callable(server.create_initialization_options)


async def test_mounted_provider_namespaces_and_locks_only_what_it_is_told() -> None:
    root = FastMCP("root")
    provider = mounted(child_with_lifespan([]), "ns", lambda tool: tool.name == "write")
    root.add_provider(provider)
    tools = {tool.name: tool for tool in await provider.list_tools()}
    assert set(tools) == {"ns_write", "ns_read"}
    assert tools["ns_write"].locked and not tools["ns_read"].locked
    async with Client(root) as client:
        assert (await client.call_tool("ns_write", {"x": 3})).data == 3  # via GuardedTool._run
        assert (await client.call_tool("ns_read", {})).data is False
    assert not PROCESS_LOCK.locked()


async def test_the_server_calls_a_tool_through_its_private_run() -> None:
    """GuardedTool overrides ``Tool._run``, the server's entry point: pin that it is the one called."""
    calls: list[str] = []
    root = FastMCP("root")

    @root.tool
    def ping() -> str:
        return "pong"

    tool = await root.get_tool("ping")
    original = type(tool)._run

    async def spy(self, arguments):
        calls.append(self.name)
        return await original(self, arguments)

    type(tool)._run = spy
    try:
        async with Client(root) as client:
            await client.call_tool("ping", {})
    finally:
        type(tool)._run = original
    assert calls == ["ping"]


def test_additional_http_routes_is_a_list_of_routes() -> None:
    routes = seams.additional_http_routes(FastMCP("x"))
    assert isinstance(routes, list)


def test_only_servers_with_fastmcp_defaults_are_served_through_their_providers() -> None:
    from contextlib import asynccontextmanager

    from fastmcp.server.middleware import Middleware

    assert seams.behaves_as_default(FastMCP("plain"))
    assert not seams.behaves_as_default(FastMCP("masked", mask_error_details=True))
    assert not seams.behaves_as_default(FastMCP("strict", strict_input_validation=True))
    assert not seams.behaves_as_default(FastMCP("mw", middleware=[Middleware()]))

    @asynccontextmanager
    async def lifespan(server):
        yield {}

    assert not seams.behaves_as_default(FastMCP("life", lifespan=lifespan))
    hidden = FastMCP("hidden")
    hidden.disable(names={"x"})
    assert not seams.behaves_as_default(hidden)

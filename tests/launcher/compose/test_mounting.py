"""``mount_all``: every server's lists asked at once, the servers mounted in the order given,
and the first failure raised as it was (not inside an exception group), the others' lists
cancelled."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from fastmcp import FastMCP

from doc_processing_std_tools.launcher.compose.exposure import Exposure
from doc_processing_std_tools.launcher.compose.mount import Mount
from doc_processing_std_tools.launcher.compose.mounting import mount_all
from doc_processing_std_tools.launcher.config.schema import ServerEntry


def server_with(name: str) -> FastMCP:
    server: FastMCP = FastMCP(name)

    @server.tool(name=f"{name}_tool")
    def tool() -> str:
        return name

    return server


def mount(name: str, server: Any) -> Mount:
    return Mount(
        name=name,
        spec=None,
        entry=ServerEntry(server="memory-tools"),
        settings=None,
        server=server,
    )


async def test_the_servers_are_mounted_in_the_order_given() -> None:
    root: FastMCP = FastMCP("root")
    built = [mount(name, server_with(name)) for name in ("zed", "amy", "kim")]
    mounts = await mount_all(
        root, built, exposure=Exposure(), telemetry=None, guards=None, pins=None
    )
    assert [m.name for m in mounts] == ["zed", "amy", "kim"]
    assert [[tool.name for tool in m.tools] for m in mounts] == [
        ["zed_tool"],
        ["amy_tool"],
        ["kim_tool"],
    ]
    listed = [tool.name for tool in await root.list_tools()]
    assert listed == ["zed_tool", "amy_tool", "kim_tool"]


async def test_a_failure_is_raised_as_it_was() -> None:
    class Refusing(FastMCP):
        async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
            await anyio.sleep(0)
            raise LookupError("cannot list")

    root: FastMCP = FastMCP("root")
    built = [mount("ok", server_with("ok")), mount("bad", Refusing("bad"))]
    with pytest.raises(LookupError, match="cannot list"):
        await mount_all(root, built, exposure=Exposure(), telemetry=None, guards=None, pins=None)


async def test_the_first_failure_cancels_the_others_lists() -> None:
    class Hanging(FastMCP):
        async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
            await anyio.sleep_forever()

    class Refusing(FastMCP):
        async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
            raise LookupError("cannot list")

    root: FastMCP = FastMCP("root")
    built = [mount("slow", Hanging("slow")), mount("bad", Refusing("bad"))]
    with anyio.fail_after(10), pytest.raises(LookupError, match="cannot list"):
        await mount_all(root, built, exposure=Exposure(), telemetry=None, guards=None, pins=None)

"""A small MCP server run as its own process: the launcher mounts it with ``command:`` or ``url:``.

``python external_server.py COUNTER_FILE`` serves stdio; add ``--http PORT`` for streamable HTTP.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
from fastmcp import FastMCP

server = FastMCP("external")
counter = Path(sys.argv[1])


@server.tool
def bump() -> int:
    """Read, pause, write: without a lock around it, overlapping calls lose increments."""
    seen = int(counter.read_text() or 0) if counter.exists() else 0
    time.sleep(0.002)
    counter.write_text(str(seen + 1))
    return seen + 1


@server.tool(annotations={"readOnlyHint": True})
def whoami() -> int:
    """The server's process id."""
    return os.getpid()


def _mark_started(started: str) -> None:
    """Create the file *started* (when given): what a test waits on to know the call runs here."""
    if started:
        Path(started).write_text("started")


@server.tool(annotations={"readOnlyHint": True})
async def nap(seconds: float, started: str = "") -> str:
    _mark_started(started)
    await anyio.sleep(seconds)
    return "rested"


@server.tool(annotations={"readOnlyHint": True})
async def nap_and_mark(seconds: float, marker: str, started: str = "") -> str:
    """Sleep; if the call is cancelled (MCP cancellation), leave a marker file saying so."""
    _mark_started(started)
    try:
        await anyio.sleep(seconds)
    except BaseException:
        Path(marker).write_text("cancelled")
        raise
    return "rested"


@server.tool
async def hold(seconds: float, started: str = "") -> str:
    """A slow call that changes state: the launcher holds the process lock while it runs."""
    _mark_started(started)
    await anyio.sleep(seconds)
    return "held"


if os.environ.get("DPT_TEST_TRACE_TOOL"):  # (tests/test_telemetry.py; other tests list the tools)

    @server.tool(annotations={"readOnlyHint": True})
    def traceparent_seen() -> str:
        """The ``traceparent`` in this call's ``_meta`` (what a relay passed on), or ``none``."""
        from fastmcp.server.dependencies import fastmcp_request_ctx

        request = fastmcp_request_ctx.get()
        return str(((request.meta if request else None) or {}).get("traceparent", "none"))


@server.prompt
def greeting(name: str) -> str:
    return f"Say hello to {name}."


@server.resource("note://today")
def today() -> str:
    return "a note from the external server"


@server.tool
def delete_everything() -> str:
    return "deleted"


if __name__ == "__main__":
    print("external server starting", file=sys.stderr, flush=True)
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run(
            transport="http", host="127.0.0.1", port=port, show_banner=False, log_level="WARNING"
        )
    else:
        server.run(show_banner=False, log_level="WARNING")

"""Small third-party-style servers the launcher tests mount with ``module:``."""

from __future__ import annotations

import anyio
from fastmcp import Context, FastMCP

echo_server = FastMCP("echo", instructions="Echo server instructions: repeats text.")


@echo_server.tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def make_echo(greeting: str = "hello") -> FastMCP:
    """A factory taking settings as keyword arguments."""
    server = FastMCP("echo-factory")

    @server.tool
    def greet(name: str) -> str:
        return f"{greeting}, {name}"

    return server


def make_counter() -> FastMCP:
    """Async tools that record how many calls overlap: ``bump`` changes state, ``peek`` only reads."""
    server = FastMCP("counter")
    state = {"active": 0, "max_active": 0, "peek_active": 0, "peek_max": 0}

    @server.tool
    async def bump(delay: float = 0.05) -> int:
        state["active"] += 1
        state["max_active"] = max(state["max_active"], state["active"])
        await anyio.sleep(delay)
        state["active"] -= 1
        return state["max_active"]

    @server.tool(annotations={"readOnlyHint": True})
    async def peek(delay: float = 0.05) -> int:
        state["peek_active"] += 1
        state["peek_max"] = max(state["peek_max"], state["peek_active"])
        await anyio.sleep(delay)
        state["peek_active"] -= 1
        return state["peek_max"]

    @server.tool(annotations={"readOnlyHint": True})
    def active() -> int:
        """How many bump calls are running now (what a test waits on instead of sleeping)."""
        return state["active"]

    return server


not_a_server = 42


def make_with_lifespan(marker: str) -> FastMCP:
    """A server with a lifespan: it must be mounted whole so the lifespan runs in the launcher."""
    from contextlib import asynccontextmanager
    from pathlib import Path

    @asynccontextmanager
    async def lifespan(server: FastMCP):
        Path(marker).write_text("started")
        try:
            yield {"started": True}
        finally:
            Path(marker).write_text("stopped")

    server = FastMCP("with-lifespan", lifespan=lifespan)

    @server.tool
    def state() -> str:
        return Path(marker).read_text()

    return server


def make_noisy() -> FastMCP:
    """A server whose factory prints to stdout, as careless code does."""
    print("hello from a noisy factory")
    return make_echo()


def make_secretive() -> FastMCP:
    """A server that masks error details: its secrets must not leak through the launcher."""
    server = FastMCP("secretive", mask_error_details=True)

    @server.tool
    def boom() -> str:
        raise RuntimeError("db password is hunter2")

    return server


def make_sync_counter() -> FastMCP:
    """A sync tool with no locking of its own: read, sleep 2 ms, write. Only a lock keeps it exact."""
    import time

    server = FastMCP("sync-counter")
    state = {"n": 0}

    @server.tool
    def increment() -> int:
        seen = state["n"]
        time.sleep(0.002)
        state["n"] = seen + 1
        return state["n"]

    @server.tool(annotations={"readOnlyHint": True})
    def count() -> int:
        return state["n"]

    return server


def make_guarded(marker: str) -> FastMCP:
    """A server with its own middleware and lifespan; both must keep working when mounted."""
    from contextlib import asynccontextmanager
    from pathlib import Path

    from fastmcp.exceptions import ToolError
    from fastmcp.server.middleware import Middleware

    class RefuseForbidden(Middleware):
        async def on_call_tool(self, context, call_next):
            if (context.message.arguments or {}).get("text") == "forbidden":
                raise ToolError("refused by the guarded server's own middleware")
            return await call_next(context)

    @asynccontextmanager
    async def lifespan(server: FastMCP):
        Path(marker).write_text("started")
        try:
            yield {"owner": "guarded"}
        finally:
            Path(marker).write_text("stopped")

    server = FastMCP("guarded", lifespan=lifespan, middleware=[RefuseForbidden()])

    @server.tool
    def shout(text: str) -> str:
        return text.upper()

    return server


def make_stepper() -> FastMCP:
    """A tool that logs before it answers, so its reply travels on an SSE stream (resumability)."""
    import anyio

    server = FastMCP("stepper")

    @server.tool
    async def steps(ctx: Context, delay: float = 0.3) -> str:
        await ctx.info("started")
        await anyio.sleep(delay)
        return "done"

    return server


def make_described(description: str = "Echo text.") -> FastMCP:
    """A tool, a prompt and a resource template whose descriptions come from the settings (what
    the pins tests change between two launches)."""
    server = FastMCP("described")

    @server.tool(description=description)
    def shout(text: str) -> str:
        return text.upper()

    @server.prompt(description=description)
    def ask(topic: str) -> str:
        return f"Tell me about {topic}."

    @server.resource("described://{key}", description=description)
    def entry(key: str) -> str:
        return f"entry {key}"

    return server

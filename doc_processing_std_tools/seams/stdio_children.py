"""An MCP server process started and stopped as the mcp SDK's stdio client does, and its pipes.

Pinned by ``tests/seams/``.
"""

from __future__ import annotations

from typing import Any

from mcp.client import stdio


async def spawn_stdio_child(
    command: str, args: list[str], env: dict[str, str], errlog: Any, cwd: str | None
) -> Any:
    """Start an MCP server process as the SDK's stdio client does: pipes, its own session and
    process group (``mcp.client.stdio._create_platform_compatible_process``)."""
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
    await stdio._stop_server_process(process)
